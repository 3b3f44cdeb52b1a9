// Sending: eager messages (copied into a bounce buffer, or gathered from
// the application's registered buffer) and, above the eager limit, the
// sender's half of the rendezvous (Takagi et al. 2013; its state machine is
// proto::RendezvousSender).
#include "attr.hpp"
#include "config.hpp"
#include "domain.hpp"
#include "ep.hpp"

#include <cstring>

namespace rcoll {

using proto::MsgHeader;
using proto::Opcode;

namespace {

// Eager payloads from this size on go from the application's registered
// buffer (when it passed a descriptor) instead of being copied into the
// bounce buffer: the copy costs more than the core's second gather entry.
constexpr size_t kDirectSendMin = 2048;

uint8_t header_flags(uint64_t op_flags)
{
	uint8_t f = 0;
	if (op_flags & FI_TAGGED)
		f |= proto::kFlagTagged;
	if (op_flags & FI_REMOTE_CQ_DATA)
		f |= proto::kFlagRemoteCqData;
	return f;
}

} // namespace

ssize_t Endpoint::send(const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag,
		       uint64_t data, uint64_t flags, void* context)
{
	if (!enabled)
		return -FI_EOPBADSTATE;
	if (len && !buf)
		return -FI_EINVAL;
	if (len > kMaxMsgSize)
		return -FI_EMSGSIZE;
	if ((flags & FI_REMOTE_CQ_DATA) && (data >> 32)) {
		RCOLL_WARN(FI_LOG_EP_DATA, "remote CQ data wider than 4 bytes\n");
		return -FI_EINVAL;
	}
	// libfabric's flow control: beyond tx_attr->size outstanding, or beyond
	// the peer's backlog cap (a peer that reads slower than we send must
	// not take every transmit buffer), the application progresses and
	// retries.
	if (!tx_room())
		return -FI_EAGAIN;
	int err = 0;
	Peer* peer = peer_for(dest, err, flags & kNoCompletion);
	if (!peer)
		return err;
	if (peer->tx_held >= config().backlog_max)
		return -FI_EAGAIN;
	const bool inject = flags & FI_INJECT;
	const size_t limit = peer->state == Peer::State::connected
				     ? std::min<size_t>(eager_limit, peer->eager_limit)
				     : eager_limit;
	MsgHeader h;
	h.flags = header_flags(flags);
	h.tag = (flags & FI_TAGGED) ? tag : 0;
	h.cq_data = (flags & FI_REMOTE_CQ_DATA) ? data : 0;
	const uint64_t cq_flags = FI_SEND | (flags & (FI_TAGGED | FI_MSG));
	const bool report =
		!(flags & kNoCompletion) && (!app.tx_selective || (flags & FI_COMPLETION));

	if (len <= limit) {
		BufferRecord* r = tx.buffers->take();
		if (!r)
			return -FI_EAGAIN;
		h.opcode = Opcode::Eager;
		h.size = len;
		r->peer = peer;
		r->header = h;
		r->len = proto::kHeaderSize;
		if (desc && !inject && len >= kDirectSendMin && tx.iov_limit >= 2) {
			r->payload = static_cast<const std::byte*>(buf);
			r->payload_desc = core_desc_of(desc);
			r->payload_len = len;
		} else if (len) {
			memcpy(r->buffer->data() + proto::kHeaderSize, buf, len);
			r->len += len;
		}
		r->context = context;
		r->cq_flags = cq_flags;
		r->report = report;
		r->count = true;
		r->may_inject = !(flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE));
		ssize_t ret = post_tx(r);
		if (ret)
			tx.buffers->release(*r);
		return ret;
	}
	if (inject)
		return -FI_EMSGSIZE;
	// The request to send (RTS) needs a transmit buffer: when none is left,
	// push back on the application instead of queueing its request.
	if (!tx.buffers->available())
		return -FI_EAGAIN;

	uint32_t cookie = 0;
	SendOp* op = tx.sends.create(cookie);
	if (!op)
		return -FI_EAGAIN;
	op->cookie = cookie;
	op->context = context;
	op->flags = cq_flags;
	op->report = report;
	op->peer = peer;
	op->buf = static_cast<const std::byte*>(buf);
	op->len = len;
	// The receiver gets a key to exactly this message, for reading only,
	// whatever the application's registration covers; the PUT path writes
	// from it too.
	if (int ret = op->own_mr.reg(*domain, buf, len, FI_WRITE | FI_REMOTE_READ)) {
		tx.sends.destroy(cookie);
		return ret;
	}
	op->transfer.desc = desc ? core_desc_of(desc) : op->own_mr.desc();
	op->machine.emplace(cookie, std::span<const std::byte>(op->buf, len),
			    proto::RemoteBuffer{reinterpret_cast<uint64_t>(buf), op->own_mr.key()});
	op->header = h;
	ssize_t ret = run_send_actions(*op, op->machine->start());
	if (ret && tx.sends.find(cookie)) {
		tx.sends.destroy(cookie);
		return ret;
	}
	return 0;
}

// Executes what the sender's rendezvous machine asked for. Returns an error
// only for a failure of the very first action (the RTS), which the caller
// turns into a failed fi_send.
ssize_t Endpoint::run_send_actions(SendOp& op, const proto::Actions& actions)
{
	for (const proto::Action& a : actions) {
		if (auto* rts = std::get_if<proto::action::SendRts>(&a)) {
			// Buffered, never queued as a control message: the RTS keeps
			// its place among the peer's eager messages (FI_ORDER_SAS).
			MsgHeader h = op.header;
			h.opcode = Opcode::Rts;
			h.size = rts->message_length;
			std::byte body[proto::RtsBody::kWireSize];
			proto::encode_body(rts->body, body);
			ssize_t ret = send_buffered(*op.peer, h, body, sizeof(body));
			if (ret)
				return ret;
		} else if (auto* w = std::get_if<proto::action::Write>(&a)) {
			ChunkedRma& t = op.transfer;
			t.write = true;
			t.local = const_cast<std::byte*>(op.buf);
			t.remote_addr = w->target.addr;
			t.key = w->target.key;
			t.length = w->length;
			t.done = 0;
			op.fin = w->fin;
			issue_chunk(op);
		} else if (auto* done = std::get_if<proto::action::Complete>(&a)) {
			app.report_tx(op.context, op.flags, op.len, outcome_errno(done->outcome),
				      op.report, app.send_cntr);
			tx.sends.destroy(op.cookie);
			return 0; // op is gone
		} else if (auto* v = std::get_if<proto::action::Violation>(&a)) {
			RCOLL_WARN(FI_LOG_EP_DATA, "rendezvous protocol violation from %s: %s\n",
				   op.peer->address.to_string().c_str(), v->what);
			// A peer that breaks the protocol cannot be trusted with the
			// rest of the connection's traffic either.
			schedule_failure(*op.peer, -FI_EOTHER);
		}
	}
	return 0;
}

// The PUT data, chunk by chunk. The FIN follows the last chunk as soon as
// it is posted: the connection keeps it behind the data.
void Endpoint::issue_chunk(SendOp& op)
{
	ssize_t ret = post_chunk(*op.peer, op.transfer, op.transfer_cc);
	if (ret && ret != -FI_EAGAIN) {
		run_send_actions(op, op.machine->on_write_failed());
	} else if (!ret && op.fin && op.transfer.posted_last()) {
		MsgHeader h;
		h.opcode = Opcode::Fin;
		send_control(*op.peer, h, *op.fin);
		op.fin.reset();
	}
}

void Endpoint::on_chunk_done(SendOp& op, int err)
{
	if (err) {
		op.transfer.in_flight = op.transfer.retry = false;
		run_send_actions(op, op.machine->on_write_failed());
	} else if (op.transfer.chunk_done()) {
		run_send_actions(op, op.machine->on_write_complete());
	} else {
		issue_chunk(op);
	}
}

void Endpoint::on_cts(Peer& peer, const proto::CtsBody& cts)
{
	SendOp* op = tx.sends.find(cts.sender_cookie);
	if (!op || op->peer != &peer) {
		RCOLL_WARN(FI_LOG_EP_DATA, "CTS for an unknown send\n");
		return;
	}
	run_send_actions(*op, op->machine->on_cts(cts));
}

void Endpoint::on_read_done(Peer& peer, const proto::ReadDoneBody& done)
{
	SendOp* op = tx.sends.find(done.sender_cookie);
	if (!op || op->peer != &peer) {
		RCOLL_WARN(FI_LOG_EP_DATA, "READ_DONE for an unknown send\n");
		return;
	}
	run_send_actions(*op, op->machine->on_read_done(done));
}
} // namespace rcoll
