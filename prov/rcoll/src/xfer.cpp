// The data path: eager messages through bounce buffers, rendezvous above
// the eager limit (papers/takagi2013, state machines in proto/rendezvous),
// rcoll's own tag matching, RMA on the core, and the progress loop that
// drives it all from the core's completion and connection queues.
#include "attr.hpp"
#include "av.hpp"
#include "cntr.hpp"
#include "config.hpp"
#include "coll.hpp"
#include "cq.hpp"
#include "domain.hpp"
#include "ep.hpp"
#include "fabric.hpp"

#include <cstring>
#include <utility>

namespace rcoll {

using proto::MsgHeader;
using proto::Opcode;

namespace {

constexpr size_t kCompletionBatch = 32;
constexpr uint64_t kCmPollInterval = 64;
// Eager payloads from this size on go from the application's registered
// buffer (when it passed a descriptor) instead of being copied into the
// bounce buffer: the copy costs more than the core's second gather entry.
constexpr size_t kDirectSendMin = 2048;

int outcome_errno(proto::Outcome o)
{
	switch (o) {
	case proto::Outcome::Success: return 0;
	case proto::Outcome::Truncated: return FI_ETRUNC;
	case proto::Outcome::PeerFailed: return FI_EIO;
	case proto::Outcome::TransferFailed: return FI_EIO;
	case proto::Outcome::ProtocolError: return FI_EOTHER;
	}
	return FI_EOTHER;
}

uint8_t header_flags(uint64_t op_flags)
{
	uint8_t f = 0;
	if (op_flags & FI_TAGGED)
		f |= proto::kFlagTagged;
	if (op_flags & FI_REMOTE_CQ_DATA)
		f |= proto::kFlagRemoteCqData;
	return f;
}

uint64_t completion_flags(const MsgHeader& h)
{
	uint64_t f = FI_RECV | ((h.flags & proto::kFlagTagged) ? FI_TAGGED : FI_MSG);
	if (h.flags & proto::kFlagRemoteCqData)
		f |= FI_REMOTE_CQ_DATA;
	return f;
}

} // namespace

// ---------------------------------------------------------------------------
// Completions to the application.

fi_addr_t Endpoint::source_of(Peer* peer) const
{
	return peer && av ? av->find(peer->key) : FI_ADDR_NOTAVAIL;
}

void Endpoint::report_tx(void* context, uint64_t flags, size_t len, int err, bool report,
			 Counter* cntr)
{
	if (err) {
		if (tx_cq) {
			fi_cq_err_entry e{};
			e.op_context = context;
			e.flags = flags;
			e.len = len;
			e.err = err;
			e.prov_errno = -err;
			tx_cq->push_error(e, FI_ADDR_NOTAVAIL);
		}
		if (cntr)
			cntr->errors++;
		return;
	}
	if (report && tx_cq) {
		fi_cq_tagged_entry e{};
		e.op_context = context;
		e.flags = flags;
		e.len = len;
		tx_cq->push(e, FI_ADDR_NOTAVAIL);
	}
	if (cntr)
		cntr->value++;
}

void Endpoint::report_rx(void* context, uint64_t flags, size_t len, void* buf, uint64_t data,
			 uint64_t tag, fi_addr_t src, int err, size_t olen, bool report)
{
	if (!(flags & FI_REMOTE_CQ_DATA))
		data = 0;
	if (err) {
		if (rx_cq) {
			fi_cq_err_entry e{};
			e.op_context = context;
			e.flags = flags;
			e.len = len;
			e.buf = buf;
			e.data = data;
			e.tag = tag;
			e.olen = olen;
			e.err = err;
			e.prov_errno = -err;
			rx_cq->push_error(e, src);
		}
		if (recv_cntr)
			recv_cntr->errors++;
		return;
	}
	if (report && rx_cq) {
		fi_cq_tagged_entry e{};
		e.op_context = context;
		e.flags = flags;
		e.len = len;
		e.buf = len ? buf : nullptr;
		e.data = data;
		e.tag = (flags & FI_TAGGED) ? tag : 0;
		rx_cq->push(e, src);
	}
	if (recv_cntr)
		recv_cntr->value++;
}

// ---------------------------------------------------------------------------
// Bounce buffers.

BufferRecord* Endpoint::get_tx_buffer()
{
	proto::BounceBuffer* b = tx_pool->acquire();
	if (!b)
		return nullptr;
	while (tx_records.size() <= b->index())
		tx_records.emplace_back(CoreContext::Kind::tx_buffer);
	BufferRecord* r = &tx_records[b->index()];
	r->buffer = b;
	r->peer = nullptr;
	r->header = MsgHeader{};
	r->len = 0;
	r->context = nullptr;
	r->cq_flags = 0;
	r->report = r->count = r->in_core = false;
	r->may_inject = true;
	r->payload = nullptr;
	r->payload_desc = nullptr;
	r->payload_len = 0;
	return r;
}

void Endpoint::release_tx_buffer(BufferRecord* r)
{
	tx_pool->release(*r->buffer);
}

void Endpoint::release_rx(BufferRecord* r)
{
	rx_pool->release(*r->buffer);
}

// Keeps the shared receive context stocked (sur2005): the pool counts
// posted minus consumed buffers, since verbs gives no SRQ limit event.
void Endpoint::refill_rx()
{
	for (size_t n = rx_pool->refill_count(); n > 0; n--) {
		proto::BounceBuffer* b = rx_pool->acquire_for_post();
		if (!b)
			return;
		while (rx_records.size() <= b->index())
			rx_records.emplace_back(CoreContext::Kind::rx_buffer);
		BufferRecord* r = &rx_records[b->index()];
		r->buffer = b;
		ssize_t ret = fi_recv(srx.get(), b->data(), b->size(), b->desc(), FI_ADDR_UNSPEC,
				      &r->cc.space);
		if (ret) {
			rx_pool->post_failed(*b);
			if (ret != -FI_EAGAIN)
				RCOLL_WARN(FI_LOG_EP_DATA, "posting to the shared receive context: %s\n",
					   fi_strerror(int(-ret)));
			return;
		}
	}
}

// ---------------------------------------------------------------------------
// Sending core messages.

ssize_t Endpoint::post_tx(BufferRecord* r)
{
	Peer& peer = *r->peer;
	if (peer.state != Peer::State::connected || !peer.backlog.empty()) {
		peer.backlog.push_back(r);
		backlogged++;
		return 0;
	}
	ssize_t ret = transmit(peer, r);
	if (ret == -FI_EAGAIN) {
		peer.backlog.push_back(r);
		backlogged++;
		return 0;
	}
	if (ret) {
		// The connection is unusable: fail it rather than let operations
		// wait for messages that never left.
		RCOLL_WARN(FI_LOG_EP_DATA, "core send: %s\n", fi_strerror(int(-ret)));
		schedule_failure(peer, int(ret));
	}
	return ret;
}

// Hands one message to the core connection. One that fits the core's
// inject size is injected: the core then writes no completion, which on tcp
// also spares the wait-fd signal it raises per completion and the CQ poll
// that would fetch it, so the buffer and the send it carries complete here.
// A direct send gathers the header and the application's payload.
ssize_t Endpoint::transmit(Peer& peer, BufferRecord* r)
{
	r->header.src_conn = peer.remote_id;
	proto::encode_header(r->header, r->buffer->data());
	ssize_t ret;
	if (r->payload_len) {
		iovec iov[2] = {{r->buffer->data(), r->len},
				{const_cast<std::byte*>(r->payload), r->payload_len}};
		void* descs[2] = {r->buffer->desc(), r->payload_desc};
		fi_msg msg{};
		msg.msg_iov = iov;
		msg.desc = descs;
		msg.iov_count = 2;
		msg.context = &r->cc.space;
		ret = fi_sendmsg(peer.conn.get(), &msg, FI_COMPLETION);
	} else if (r->may_inject && r->len <= core_inject_size && peer.injects.may_inject()) {
		ret = fi_inject(peer.conn.get(), r->buffer->data(), r->len, 0);
		if (ret == 0) {
			peer.injects.posted++;
			if (r->count)
				report_tx(r->context, r->cq_flags, r->header.size, 0, r->report, send_cntr);
			release_tx_buffer(r);
			return 0;
		}
		return ret;
	} else {
		ret = fi_send(peer.conn.get(), r->buffer->data(), r->len, r->buffer->desc(), 0,
			      &r->cc.space);
	}
	if (ret == 0) {
		r->in_core = true;
		r->proves = peer.injects.posted;
	}
	return ret;
}

void Endpoint::flush_backlog(Peer& peer)
{
	while (peer.state == Peer::State::connected && !peer.backlog.empty()) {
		BufferRecord* r = peer.backlog.front();
		if (r->header.opcode == Opcode::Eager && r->header.size > peer.eager_limit) {
			// Queued before the handshake told us the peer takes less.
			peer.backlog.pop_front();
			RCOLL_WARN(FI_LOG_EP_DATA, "eager message of %llu bytes above the peer's limit %u\n",
				   (unsigned long long)r->header.size, peer.eager_limit);
			report_tx(r->context, r->cq_flags, 0, FI_EMSGSIZE, true, send_cntr);
			release_tx_buffer(r);
			continue;
		}
		ssize_t ret = transmit(peer, r);
		if (ret == -FI_EAGAIN)
			return;
		peer.backlog.pop_front();
		if (ret) {
			RCOLL_WARN(FI_LOG_EP_DATA, "core send: %s\n", fi_strerror(int(-ret)));
			report_tx(r->context, r->cq_flags, 0, int(-ret), true, r->count ? send_cntr : nullptr);
			release_tx_buffer(r);
			schedule_failure(peer, int(ret));
			return;
		}
	}
	// Control messages go after the buffered ones, which already hold
	// buffers: waiting for them could only hold those buffers longer.
	while (peer.state == Peer::State::connected && !peer.controls.empty()) {
		const QueuedControl& c = peer.controls.front();
		if (send_buffered(peer, c.header, c.body.data(), c.body.size()) == -FI_EAGAIN)
			return; // the pool is still empty: a later progress call retries
		peer.controls.pop_front();
	}
}

bool Endpoint::tx_buffer_available() const
{
	return tx_pool->free_count() > 0 || tx_pool->capacity() < tx_pool->max_buffers();
}

// A header-and-body message through a bounce buffer, in order with the
// peer's other buffered messages; -FI_EAGAIN when the pool is empty.
ssize_t Endpoint::send_buffered(Peer& peer, const MsgHeader& header, const void* body,
				size_t body_len)
{
	BufferRecord* r = get_tx_buffer();
	if (!r)
		return -FI_EAGAIN;
	r->peer = &peer;
	r->header = header;
	if (body_len)
		memcpy(r->buffer->data() + proto::kHeaderSize, body, body_len);
	r->len = proto::kHeaderSize + body_len;
	// A probe exists to fail: it needs a completion. verbs (1.17) drops
	// the error of an injected send without a trace, and only an error
	// completion tells us which connection died.
	r->may_inject = header.opcode != Opcode::Probe;
	ssize_t ret = post_tx(r);
	if (ret)
		release_tx_buffer(r);
	return ret;
}

// Never fails for want of a transmit buffer (see QueuedControl). A message
// for a failed peer is dropped: the operations it belonged to are failing.
ssize_t Endpoint::send_control(Peer& peer, const MsgHeader& header, const void* body,
			       size_t body_len)
{
	if (peer.state == Peer::State::failed)
		return -FI_ENOTCONN;
	if (peer.controls.empty()) {
		ssize_t ret = send_buffered(peer, header, body, body_len);
		if (ret != -FI_EAGAIN)
			return ret;
	}
	auto* bytes = static_cast<const std::byte*>(body);
	peer.controls.push_back(QueuedControl{header, {bytes, bytes + body_len}});
	backlogged++;
	return 0;
}

template <class Body>
ssize_t send_body(Endpoint& ep, Peer& peer, const MsgHeader& header, const Body& body)
{
	std::byte bytes[Body::kWireSize];
	proto::encode_body(body, bytes);
	return ep.send_control(peer, header, bytes, sizeof(bytes));
}

// ---------------------------------------------------------------------------
// Application sends.

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
	int err = 0;
	Peer* peer = peer_for(dest, err, flags & kNoCompletion);
	if (!peer)
		return err;
	const bool inject = flags & FI_INJECT;
	const size_t limit = peer->state == Peer::State::connected ? std::min<size_t>(eager_limit, peer->eager_limit)
								   : eager_limit;
	MsgHeader h;
	h.flags = header_flags(flags);
	h.tag = (flags & FI_TAGGED) ? tag : 0;
	h.cq_data = (flags & FI_REMOTE_CQ_DATA) ? data : 0;
	const uint64_t cq_flags = FI_SEND | (flags & (FI_TAGGED | FI_MSG));
	const bool report = !(flags & kNoCompletion) && (!tx_selective || (flags & FI_COMPLETION));

	if (len <= limit) {
		BufferRecord* r = get_tx_buffer();
		if (!r)
			return -FI_EAGAIN;
		h.opcode = Opcode::Eager;
		h.size = len;
		r->peer = peer;
		r->header = h;
		r->len = proto::kHeaderSize;
		if (desc && !inject && len >= kDirectSendMin && core_iov_limit >= 2) {
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
			release_tx_buffer(r);
		return ret;
	}
	if (inject)
		return -FI_EMSGSIZE;
	// The request to send (RTS) needs a transmit buffer: when none is left,
	// push back on the application instead of queueing its request.
	if (!tx_buffer_available())
		return -FI_EAGAIN;

	uint32_t cookie = 0;
	SendOp* op = sends.create(cookie);
	if (!op)
		return -FI_EAGAIN;
	op->cookie = cookie;
	op->context = context;
	op->flags = cq_flags;
	op->report = report;
	op->peer = peer;
	op->buf = static_cast<const std::byte*>(buf);
	op->len = len;
	uint64_t key;
	if (desc) {
		op->core_desc = core_desc_of(desc);
		key = static_cast<MemoryRegion*>(desc)->core.key();
	} else {
		int ret = op->own_mr.reg(domain->core.get(), buf, len, FI_SEND | FI_READ | FI_REMOTE_READ);
		if (ret) {
			sends.destroy(cookie);
			return ret;
		}
		op->core_desc = op->own_mr.desc();
		key = op->own_mr.key();
	}
	op->machine.emplace(cookie, std::span<const std::byte>(op->buf, len),
			    proto::RemoteBuffer{reinterpret_cast<uint64_t>(buf), key});
	op->header = h;
	ssize_t ret = run_send_actions(*op, op->machine->start());
	if (ret && sends.find(cookie)) {
		sends.destroy(cookie);
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
			op.write = *w;
			op.written = 0;
			issue_write(op);
		} else if (auto* fin = std::get_if<proto::action::SendFin>(&a)) {
			MsgHeader h;
			h.opcode = Opcode::Fin;
			send_body(*this, *op.peer, h, fin->body);
		} else if (auto* done = std::get_if<proto::action::Complete>(&a)) {
			report_tx(op.context, op.flags, op.len, outcome_errno(done->outcome), op.report,
				  send_cntr);
			sends.destroy(op.cookie);
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

// The PUT data, in chunks of at most rma_chunk bytes issued one after the
// other; the last carries the immediate that tells the receiver it landed.
void Endpoint::issue_write(SendOp& op)
{
	if (op.peer->state == Peer::State::failed) {
		// Its connection failed while this write waited for its turn (the
		// next chunk): nothing is in flight, finish now.
		op.write_retry = false;
		run_send_actions(op, op.machine->on_write_failed());
		return;
	}
	const uint64_t left = op.write.length - op.written;
	const uint64_t n = std::min<uint64_t>(left, config().rma_chunk);
	const bool last = n == left;
	ssize_t ret;
	if (last && op.write.immediate)
		ret = fi_writedata(op.peer->conn.get(), op.buf + op.written, n, op.core_desc,
				   *op.write.immediate, 0, op.write.target.addr + op.written,
				   op.write.target.key, &op.write_cc.space);
	else
		ret = fi_write(op.peer->conn.get(), op.buf + op.written, n, op.core_desc, 0,
			       op.write.target.addr + op.written, op.write.target.key,
			       &op.write_cc.space);
	if (ret == -FI_EAGAIN) {
		op.write_retry = true; // progress tries again
		stalled++;
		return;
	}
	op.write_retry = false;
	if (ret) {
		RCOLL_WARN(FI_LOG_EP_DATA, "rendezvous write: %s\n", fi_strerror(int(-ret)));
		run_send_actions(op, op.machine->on_write_failed());
		return;
	}
	op.write_in_flight = true;
	op.write_chunk = n;
}

void Endpoint::on_write_done(SendOp& op, int err)
{
	op.write_in_flight = false;
	if (err) {
		run_send_actions(op, op.machine->on_write_failed());
		return;
	}
	op.written += op.write_chunk;
	if (op.written < op.write.length)
		issue_write(op);
	else
		run_send_actions(op, op.machine->on_write_complete());
}

// ---------------------------------------------------------------------------
// Application receives.

ssize_t Endpoint::recv(void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
		       uint64_t ignore, uint64_t flags, void* context)
{
	if (!enabled)
		return -FI_EOPBADSTATE;
	if (len && !buf)
		return -FI_EINVAL;
	uint64_t source = proto::kAnySource;
	if (src != FI_ADDR_UNSPEC && (caps & FI_DIRECTED_RECV)) {
		const EpAddress* a = av ? av->lookup(src) : nullptr;
		if (!a) {
			RCOLL_WARN(FI_LOG_EP_DATA, "receive from fi_addr %llu, not in the address vector\n",
				   (unsigned long long)src);
			return -FI_EINVAL;
		}
		source = a->key;
	}
	const bool tagged = flags & FI_TAGGED;
	proto::MatchQueue& queue = queue_for(flags);
	const bool report = !rx_selective || (flags & FI_COMPLETION);

	if (tagged && (flags & FI_PEEK)) {
		Unexpected* u = nullptr;
		if (auto* m = queue.peek(source, tag, ignore))
			u = static_cast<Unexpected*>(m->context);
		if (!u) {
			report_rx(context, FI_RECV | FI_TAGGED, 0, nullptr, 0, tag, FI_ADDR_NOTAVAIL,
				  FI_ENOMSG, 0, true);
			return 0;
		}
		// FI_CLAIM keeps the message for the FI_CLAIM receive that follows;
		// FI_DISCARD (with or without FI_CLAIM) drops it now.
		if (flags & (FI_CLAIM | FI_DISCARD))
			queue.claim(u->match);
		if ((flags & FI_CLAIM) && !(flags & FI_DISCARD) && context)
			static_cast<fi_context*>(context)->internal[0] = u;
		report_rx(context, completion_flags(u->header), u->header.size, nullptr,
			  u->header.cq_data, u->header.tag, source_of(u->peer), 0, 0, true);
		if (flags & FI_DISCARD)
			discard_unexpected(u);
		return 0;
	}

	uint32_t id = 0;
	RecvOp* op = recvs.create(id);
	if (!op)
		return -FI_EAGAIN;
	op->id = id;
	op->flags = FI_RECV | (tagged ? FI_TAGGED : FI_MSG);
	op->report = report;
	op->buf = static_cast<std::byte*>(buf);
	op->len = len;
	op->app_mr = static_cast<MemoryRegion*>(desc);
	op->core_desc = core_desc_of(desc);
	op->source = source;
	op->tag = tagged ? tag : 0;
	op->ignore = tagged ? ignore : 0;
	op->context = context;

	Unexpected* u = nullptr;
	if (tagged && (flags & FI_CLAIM)) {
		u = context ? static_cast<Unexpected*>(static_cast<fi_context*>(context)->internal[0]) : nullptr;
		if (!u) {
			recvs.destroy(id);
			return -FI_EINVAL;
		}
		if (flags & FI_DISCARD) {
			report_rx(context, completion_flags(u->header), 0, nullptr, u->header.cq_data,
				  u->header.tag, source_of(u->peer), 0, 0, report);
			discard_unexpected(u);
			recvs.destroy(id);
			return 0;
		}
	} else if (auto* m = queue.post(*op)) {
		u = static_cast<Unexpected*>(m->context);
	} else if (source != proto::kAnySource && failed_source(source)) {
		// Nothing it delivered matches, and it will send nothing more.
		queue.remove(*op);
		fail_receive(*op);
		return 0;
	}
	if (u)
		match_unexpected(*op, u);
	return 0;
}

bool Endpoint::failed_source(uint64_t key) const
{
	auto it = peer_by_key.find(key);
	return it != peer_by_key.end() && it->second->state == Peer::State::failed;
}

// A receive met a message that had arrived before it.
void Endpoint::match_unexpected(RecvOp& op, Unexpected* u)
{
	if (u->header.opcode == Opcode::Eager) {
		complete_eager(op, u->peer, u->header, u->payload.data(), u->payload.size());
	} else if (u->peer->state == Peer::State::failed || u->peer_failures != u->peer->failures) {
		// Its sender's connection ended since: no one can serve the request.
		report_rx(op.context, op.flags, 0, op.buf, 0, u->header.tag, source_of(u->peer), FI_EIO,
			  0, true);
		recvs.destroy(op.id);
	} else {
		start_rendezvous_recv(op, *u->peer, u->header, u->rts);
	}
	drop_unexpected(u);
}

// FI_DISCARD: the message is consumed without its data. A rendezvous
// sender still waits for its buffer to be released: tell it we are done.
void Endpoint::discard_unexpected(Unexpected* u)
{
	if (u->header.opcode == Opcode::Rts && u->peer->state == Peer::State::connected &&
	    u->peer_failures == u->peer->failures) {
		MsgHeader h;
		h.opcode = Opcode::ReadDone;
		send_body(*this, *u->peer, h, proto::ReadDoneBody{u->rts.sender_cookie});
	}
	drop_unexpected(u);
}

void Endpoint::drop_unexpected(Unexpected* u)
{
	u->payload.clear();
	spare_unexpected.emplace_back(u);
}

Unexpected* Endpoint::new_unexpected()
{
	if (spare_unexpected.empty())
		return new Unexpected();
	Unexpected* u = spare_unexpected.back().release();
	spare_unexpected.pop_back();
	u->peer = nullptr;
	u->header = proto::MsgHeader{};
	u->payload.clear();
	u->rts = proto::RtsBody{};
	return u;
}

void Endpoint::complete_eager(RecvOp& op, Peer* peer, const MsgHeader& h, const std::byte* data,
			      size_t size)
{
	const size_t n = std::min(size, op.len);
	if (n)
		memcpy(op.buf, data, n);
	const uint64_t cflags = completion_flags(h);
	if (size > op.len)
		report_rx(op.context, cflags, n, op.buf, h.cq_data, h.tag, source_of(peer), FI_ETRUNC,
			  size - op.len, true);
	else
		report_rx(op.context, cflags, n, op.buf, h.cq_data, h.tag, source_of(peer), 0, 0,
			  op.report);
	recvs.destroy(op.id);
}

void Endpoint::start_rendezvous_recv(RecvOp& op, Peer& peer, const MsgHeader& h,
				     const proto::RtsBody& rts)
{
	op.peer = &peer;
	op.header = h;
	const uint64_t transfer = std::min<uint64_t>(h.size, op.len);
	uint64_t key = 0;
	if (transfer) {
		if (op.app_mr) {
			key = op.app_mr->core.key();
		} else {
			int ret = op.own_mr.reg(domain->core.get(), op.buf, transfer,
						FI_RECV | FI_WRITE | FI_READ | FI_REMOTE_WRITE);
			if (ret) {
				report_rx(op.context, completion_flags(h), 0, op.buf, h.cq_data, h.tag,
					  source_of(&peer), -ret, 0, true);
				recvs.destroy(op.id);
				return;
			}
			op.core_desc = op.own_mr.desc();
			key = op.own_mr.key();
		}
	}
	op.machine.emplace(op.id, std::span<std::byte>(op.buf, transfer),
			   proto::RemoteBuffer{reinterpret_cast<uint64_t>(op.buf), key});
	const auto path = proto::RendezvousReceiver::path_for(op.source);
	const auto mode = config().rndv_poll_last_byte() ? proto::CompletionMode::PollLastByte
							  : proto::CompletionMode::Immediate;
	run_recv_actions(op, op.machine->on_rts(rts, h.size, path, mode, slot_random));
}

void Endpoint::run_recv_actions(RecvOp& op, const proto::Actions& actions)
{
	for (const proto::Action& a : actions) {
		if (auto* cts = std::get_if<proto::action::SendCts>(&a)) {
			MsgHeader h;
			h.opcode = Opcode::Cts;
			send_body(*this, *op.peer, h, cts->body);
			if (cts->body.mode == proto::CompletionMode::PollLastByte && !op.polling) {
				op.polling = true;
				polling.push_back(op.id);
			}
		} else if (auto* rd = std::get_if<proto::action::Read>(&a)) {
			op.read = *rd;
			op.done_reading = 0;
			issue_read(op);
		} else if (auto* done = std::get_if<proto::action::SendReadDone>(&a)) {
			MsgHeader h;
			h.opcode = Opcode::ReadDone;
			send_body(*this, *op.peer, h, done->body);
		} else if (auto* c = std::get_if<proto::action::Complete>(&a)) {
			const MsgHeader& h = op.header;
			int err = outcome_errno(c->outcome);
			size_t olen = c->outcome == proto::Outcome::Truncated
					      ? size_t(c->message_length - c->transferred)
					      : 0;
			report_rx(op.context, completion_flags(h), size_t(c->transferred), op.buf,
				  h.cq_data, h.tag, source_of(op.peer), err, olen, op.report);
			recvs.destroy(op.id);
			return; // op is gone
		} else if (auto* v = std::get_if<proto::action::Violation>(&a)) {
			RCOLL_WARN(FI_LOG_EP_DATA, "rendezvous protocol violation from %s: %s\n",
				   op.peer->address.to_string().c_str(), v->what);
			schedule_failure(*op.peer, -FI_EOTHER);
		}
	}
}

// The GET data, in chunks of at most rma_chunk bytes, one after the other.
void Endpoint::issue_read(RecvOp& op)
{
	if (op.peer->state == Peer::State::failed) {
		op.read_retry = false; // as in issue_write
		run_recv_actions(op, op.machine->on_read_failed());
		return;
	}
	const uint64_t n = std::min<uint64_t>(op.read.length - op.done_reading, config().rma_chunk);
	ssize_t ret = fi_read(op.peer->conn.get(), op.buf + op.done_reading, n, op.core_desc, 0,
			      op.read.source.addr + op.done_reading, op.read.source.key,
			      &op.read_cc.space);
	if (ret == -FI_EAGAIN) {
		op.read_retry = true;
		stalled++;
		return;
	}
	op.read_retry = false;
	if (ret) {
		RCOLL_WARN(FI_LOG_EP_DATA, "rendezvous read: %s\n", fi_strerror(int(-ret)));
		run_recv_actions(op, op.machine->on_read_failed());
		return;
	}
	op.read_in_flight = true;
	op.read_chunk = n;
}

void Endpoint::on_read_finished(RecvOp& op, int err)
{
	op.read_in_flight = false;
	if (err) {
		run_recv_actions(op, op.machine->on_read_failed());
		return;
	}
	op.done_reading += op.read_chunk;
	if (op.done_reading < op.read.length)
		issue_read(op);
	else
		run_recv_actions(op, op.machine->on_read_complete());
}

// ---------------------------------------------------------------------------
// Incoming core messages.

void Endpoint::on_receive(BufferRecord* r, size_t len)
{
	proto::Limits limits;
	limits.eager_limit = uint32_t(eager_limit);
	limits.connection_count = uint32_t(peers.size());
	limits.max_message_size = kMaxMsgSize;
	proto::ParsedMessage m;
	auto status = proto::validate_message(r->buffer->data(), len, limits, m);
	Peer* peer = status == proto::WireStatus::Ok ? peer_by_local_id(m.header.src_conn) : nullptr;
	if (!peer || peer->state == Peer::State::idle || peer->state == Peer::State::failed) {
		RCOLL_WARN(FI_LOG_EP_DATA, "dropping a %zu-byte message: %s\n", len,
			   status != proto::WireStatus::Ok ? proto::describe(status)
							   : "unknown or closed connection");
		return;
	}
	peer->arrivals++; // proof of life for probe_silent_peers
	switch (m.header.opcode) {
	case Opcode::Eager:
	case Opcode::Rts: deliver(*peer, m); break;
	case Opcode::Cts: {
		SendOp* op = sends.find(std::get<proto::CtsBody>(m.body).sender_cookie);
		if (!op || op->peer != peer) {
			RCOLL_WARN(FI_LOG_EP_DATA, "CTS for an unknown send\n");
			break;
		}
		run_send_actions(*op, op->machine->on_cts(std::get<proto::CtsBody>(m.body)));
		break;
	}
	case Opcode::Fin: {
		const auto& fin = std::get<proto::FinBody>(m.body);
		RecvOp* op = recvs.find(fin.receiver_op_id);
		if (!op || op->peer != peer || !op->machine) {
			RCOLL_WARN(FI_LOG_EP_DATA, "FIN for an unknown receive\n");
			break;
		}
		run_recv_actions(*op, op->machine->on_fin(fin));
		break;
	}
	case Opcode::WriteData:
		// The fi_writedata before this message has landed (same connection,
		// in order): the target's completion carries the data.
		report_rx(nullptr, FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA, 0, nullptr,
			  m.header.cq_data, 0, source_of(peer), 0, 0, true);
		break;
	case Opcode::Probe:
		break; // counted above; its sender only wanted our kernel's ACK
	case Opcode::ReadDone: {
		SendOp* op = sends.find(std::get<proto::ReadDoneBody>(m.body).sender_cookie);
		if (!op || op->peer != peer) {
			RCOLL_WARN(FI_LOG_EP_DATA, "READ_DONE for an unknown send\n");
			break;
		}
		run_send_actions(*op, op->machine->on_read_done(std::get<proto::ReadDoneBody>(m.body)));
		break;
	}
	}
}

// An eager message or a rendezvous request: to the oldest posted receive
// that accepts it, else queued as unexpected (its payload copied out so the
// bounce buffer goes straight back to the shared receive context).
void Endpoint::deliver(Peer& peer, const proto::ParsedMessage& m)
{
	if (m.header.flags & proto::kFlagCollective) {
		if (coll)
			coll->on_join_message(peer, m.header, m.payload);
		return;
	}
	Unexpected* u = new_unexpected();
	u->match.source = peer.key;
	u->match.tag = m.header.tag;
	u->match.context = u;
	proto::MatchQueue& queue = (m.header.flags & proto::kFlagTagged) ? tagged_queue : msg_queue;
	proto::PostedReceive* posted = queue.deliver(u->match);
	if (!posted) {
		u->peer = &peer;
		u->peer_failures = peer.failures;
		u->header = m.header;
		if (m.header.opcode == Opcode::Eager)
			u->payload.assign(m.payload.begin(), m.payload.end());
		else
			u->rts = std::get<proto::RtsBody>(m.body);
		return;
	}
	drop_unexpected(u);
	RecvOp& op = *static_cast<RecvOp*>(posted);
	if (m.header.opcode == Opcode::Eager)
		complete_eager(op, &peer, m.header, m.payload.data(), m.payload.size());
	else
		start_rendezvous_recv(op, peer, m.header, std::get<proto::RtsBody>(m.body));
}

void Endpoint::on_remote_write(uint64_t data)
{
	auto imm = proto::decode_immediate(uint32_t(data));
	if (imm && imm->kind == proto::ImmediateKind::Collective && coll) {
		coll->on_arrival(imm->id);
		return;
	}
	if (!imm || imm->kind != proto::ImmediateKind::RendezvousPut) {
		RCOLL_WARN(FI_LOG_EP_DATA, "unknown immediate data %#x\n", unsigned(data));
		return;
	}
	RecvOp* op = recvs.find(imm->id);
	if (!op || !op->machine) {
		RCOLL_WARN(FI_LOG_EP_DATA, "immediate for an unknown receive\n");
		return;
	}
	run_recv_actions(*op, op->machine->on_immediate());
}

// POLL_LAST_BYTE mode: receives whose slot byte may have changed.
void Endpoint::poll_last_bytes()
{
	for (size_t i = 0; i < polling.size();) {
		RecvOp* op = recvs.find(polling[i]);
		if (!op || !op->machine || op->machine->done()) {
			polling[i] = polling.back();
			polling.pop_back();
			continue;
		}
		i++;
		run_recv_actions(*op, op->machine->poll());
	}
}

// ---------------------------------------------------------------------------
// Core completions.

void Endpoint::on_core_completion(const fi_cq_data_entry& e)
{
	auto* cc = static_cast<CoreContext*>(e.op_context);
	if (e.flags & FI_REMOTE_WRITE) {
		// A write with immediate. On verbs it consumed a posted receive.
		if (cc && cc->kind == CoreContext::Kind::rx_buffer) {
			auto* r = static_cast<BufferRecord*>(cc->owner);
			rx_pool->consumed(*r->buffer);
			release_rx(r);
		}
		if (e.flags & FI_REMOTE_CQ_DATA)
			on_remote_write(e.data);
		return;
	}
	if (!cc)
		return;
	switch (cc->kind) {
	case CoreContext::Kind::rx_buffer: {
		auto* r = static_cast<BufferRecord*>(cc->owner);
		rx_pool->consumed(*r->buffer);
		on_receive(r, e.len);
		release_rx(r);
		break;
	}
	case CoreContext::Kind::tx_buffer: {
		auto* r = static_cast<BufferRecord*>(cc->owner);
		r->in_core = false;
		if (r->peer)
			r->peer->injects.prove(r->proves);
		if (r->count)
			report_tx(r->context, r->cq_flags, r->header.size, 0, r->report, send_cntr);
		release_tx_buffer(r);
		break;
	}
	case CoreContext::Kind::rma: on_rma_done(*static_cast<RmaOp*>(cc->owner), 0); break;
	case CoreContext::Kind::rndv_write: on_write_done(*static_cast<SendOp*>(cc->owner), 0); break;
	case CoreContext::Kind::rndv_read: on_read_finished(*static_cast<RecvOp*>(cc->owner), 0); break;
	case CoreContext::Kind::coll_write: {
		auto* w = static_cast<FabricTransport::WriteContext*>(cc->owner);
		w->owner->on_write_done(w, 0);
		break;
	}
	}
}

void Endpoint::on_core_error(const fi_cq_err_entry& e)
{
	auto* cc = static_cast<CoreContext*>(e.op_context);
	const int err = e.err ? e.err : FI_EIO;
	if (!cc) {
		RCOLL_WARN(FI_LOG_EP_DATA, "core completion error without context: %s\n",
			   fi_strerror(err));
		return;
	}
	RCOLL_INFO(FI_LOG_EP_DATA, "core completion error (kind %d): %s (prov_errno %d)\n",
		   int(cc->kind), fi_strerror(err), e.prov_errno);
	switch (cc->kind) {
	case CoreContext::Kind::rx_buffer: {
		// A flushed receive (its connection closed): the buffer simply goes
		// back to the pool and the refill posts it again.
		auto* r = static_cast<BufferRecord*>(cc->owner);
		rx_pool->consumed(*r->buffer);
		release_rx(r);
		if (err != FI_ECANCELED)
			RCOLL_INFO(FI_LOG_EP_DATA, "receive error: %s\n", fi_strerror(err));
		break;
	}
	case CoreContext::Kind::tx_buffer: {
		auto* r = static_cast<BufferRecord*>(cc->owner);
		Peer* peer = r->peer;
		r->in_core = false;
		if (r->count)
			report_tx(r->context, r->cq_flags, 0, err, true, send_cntr);
		release_tx_buffer(r);
		if (peer && peer->state == Peer::State::connected)
			fail_peer(*peer, -err);
		break;
	}
	case CoreContext::Kind::rma: {
		auto& op = *static_cast<RmaOp*>(cc->owner);
		Peer* peer = op.peer;
		on_rma_done(op, err);
		if (peer->state == Peer::State::connected)
			fail_peer(*peer, -err);
		break;
	}
	case CoreContext::Kind::rndv_write: {
		auto& op = *static_cast<SendOp*>(cc->owner);
		Peer* peer = op.peer;
		on_write_done(op, err);
		if (peer->state == Peer::State::connected)
			fail_peer(*peer, -err);
		break;
	}
	case CoreContext::Kind::coll_write: {
		auto* w = static_cast<FabricTransport::WriteContext*>(cc->owner);
		Peer* peer = w->peer;
		w->owner->on_write_done(w, err);
		if (peer && peer->state == Peer::State::connected)
			fail_peer(*peer, -err);
		break;
	}
	case CoreContext::Kind::rndv_read: {
		auto& op = *static_cast<RecvOp*>(cc->owner);
		Peer* peer = op.peer;
		on_read_finished(op, err);
		if (peer->state == Peer::State::connected)
			fail_peer(*peer, -err);
		break;
	}
	}
}

// ---------------------------------------------------------------------------
// Peer failure: every pending operation with that peer completes with an
// error; nothing waits forever. The connection is closed, which makes the
// core flush what it still holds as error completions.

void Endpoint::fail_peer(Peer& peer, int err)
{
	if (peer.state == Peer::State::failed)
		return;
	RCOLL_WARN(FI_LOG_EP_CTRL, "peer %s failed: %s\n", peer.address.to_string().c_str(),
		   fi_strerror(-err));
	peer.state = Peer::State::failed;
	peer.failures++;
	if (peer.conn)
		graveyard.push_back(std::move(peer.conn));
	if (peer.losing)
		graveyard.push_back(std::move(peer.losing));
	peer.backlog.for_each([&](BufferRecord* r) {
		if (r->count)
			report_tx(r->context, r->cq_flags, 0, FI_EIO, true, send_cntr);
		release_tx_buffer(r);
	});
	peer.backlog.clear();
	peer.controls.clear();
	std::vector<uint32_t> doomed;
	sends.for_each([&](SendOp& op) {
		if (op.peer == &peer)
			doomed.push_back(op.cookie);
	});
	for (uint32_t id : doomed)
		if (SendOp* op = sends.find(id))
			run_send_actions(*op, op->machine->on_peer_failed());
	doomed.clear();
	recvs.for_each([&](RecvOp& op) {
		if (op.peer == &peer && op.machine)
			doomed.push_back(op.id);
	});
	for (uint32_t id : doomed)
		if (RecvOp* op = recvs.find(id))
			run_recv_actions(*op, op->machine->on_peer_failed());
	if (coll)
		coll->on_peer_failed(peer);
	// Receives directed at the peer can never match now. What it delivered
	// stays receivable: a peer that sends and closes (an MPI rank reaching
	// MPI_Finalize) loses nothing; a receive that meets one of its
	// rendezvous requests fails (match_unexpected).
	for (proto::MatchQueue* q : {&msg_queue, &tagged_queue})
		q->drain_directed(peer.key, [&](proto::PostedReceive& pr) { fail_receive(static_cast<RecvOp&>(pr)); });
}

void Endpoint::fail_receive(RecvOp& op)
{
	report_rx(op.context, op.flags, 0, op.buf, 0, op.tag, FI_ADDR_NOTAVAIL, FI_EIO, 0, true);
	recvs.destroy(op.id);
}

// ---------------------------------------------------------------------------
// fi_cancel: a posted receive completes with FI_ECANCELED.

ssize_t Endpoint::cancel(void* context)
{
	for (proto::MatchQueue* q : {&msg_queue, &tagged_queue}) {
		if (proto::PostedReceive* pr = q->cancel(context)) {
			auto& op = *static_cast<RecvOp*>(pr);
			report_rx(op.context, op.flags, 0, op.buf, 0, op.tag, FI_ADDR_NOTAVAIL,
				  FI_ECANCELED, 0, true);
			recvs.destroy(op.id);
			return 0;
		}
	}
	return -FI_ENOENT;
}

// ---------------------------------------------------------------------------
// RMA straight on the core connection. fi_writedata's 8 bytes of data travel
// as a WRITE_DATA message after the write (the core's immediate is 4 bytes
// on verbs and is rcoll's own dispatch space).

ssize_t Endpoint::rma(bool write, const void* buf, size_t len, void* desc, fi_addr_t dest,
		      uint64_t addr, uint64_t key, uint64_t data, uint64_t flags, void* context)
{
	if (!enabled)
		return -FI_EOPBADSTATE;
	if (len && !buf)
		return -FI_EINVAL;
	if ((flags & FI_REMOTE_CQ_DATA) && (data >> 32))
		return -FI_EINVAL;
	int err = 0;
	Peer* peer = peer_for(dest, err);
	if (!peer)
		return err;
	if (peer->state != Peer::State::connected)
		return -FI_EAGAIN; // connecting: the application progresses and retries
	auto op = std::make_unique<RmaOp>();
	op->write = write;
	op->context = context;
	op->flags = (write ? FI_WRITE : FI_READ) | FI_RMA | (flags & FI_REMOTE_CQ_DATA);
	op->report = !(flags & kNoCompletion) && (!tx_selective || (flags & FI_COMPLETION));
	op->peer = peer;
	op->local = static_cast<std::byte*>(const_cast<void*>(buf));
	op->remote_addr = addr;
	op->key = key;
	op->data = data;
	op->len = len;
	if (desc) {
		op->core_desc = core_desc_of(desc);
	} else if (len) {
		int ret = op->own_mr.reg(domain->core.get(), buf, len,
					 write ? FI_WRITE | FI_SEND : FI_READ | FI_RECV);
		if (ret)
			return ret;
		op->core_desc = op->own_mr.desc();
	}
	if (flags & FI_INJECT) {
		// The buffer must be reusable on return: copy it into our own memory.
		op->inject_copy.assign(op->local, op->local + len);
		op->local = op->inject_copy.data();
		op->own_mr = CoreRegistration();
		if (len) {
			int ret = op->own_mr.reg(domain->core.get(), op->local, len, FI_WRITE | FI_SEND);
			if (ret)
				return ret;
		}
		op->core_desc = op->own_mr.desc();
	}
	ssize_t ret = issue_rma(*op);
	if (ret)
		return ret;
	rma_ops.push_back(std::move(op));
	return 0;
}

ssize_t Endpoint::issue_rma(RmaOp& op)
{
	if (op.peer->state == Peer::State::failed)
		return -FI_ENOTCONN; // failed between two chunks
	const uint64_t n = std::min<uint64_t>(op.len - op.done, config().rma_chunk);
	fid_ep* conn = op.peer->conn.get();
	ssize_t ret = op.write ? fi_write(conn, op.local + op.done, n, op.core_desc, 0,
					  op.remote_addr + op.done, op.key, &op.cc.space)
			       : fi_read(conn, op.local + op.done, n, op.core_desc, 0,
					 op.remote_addr + op.done, op.key, &op.cc.space);
	if (ret == 0)
		op.chunk = n;
	return ret;
}

void Endpoint::on_rma_done(RmaOp& op, int err)
{
	if (!err) {
		op.done += op.chunk;
		if (op.done < op.len) {
			ssize_t ret = issue_rma(op);
			if (ret == 0)
				return;
			err = int(-ret);
		}
	}
	if (!err && op.write && (op.flags & FI_REMOTE_CQ_DATA)) {
		MsgHeader h;
		h.opcode = Opcode::WriteData;
		h.flags = proto::kFlagRemoteCqData;
		h.cq_data = op.data;
		ssize_t ret = send_control(*op.peer, h, nullptr, 0);
		if (ret)
			err = int(-ret);
	}
	report_tx(op.context, op.flags & ~uint64_t(FI_REMOTE_CQ_DATA), op.len, err, op.report,
		  op.write ? write_cntr : read_cntr);
	for (auto it = rma_ops.begin(); it != rma_ops.end(); ++it) {
		if (it->get() == &op) {
			rma_ops.erase(it);
			break;
		}
	}
}

// ---------------------------------------------------------------------------
// Progress.

int Endpoint::progress()
{
	if (!enabled)
		return 0;
	int handled = 0;
	// Connection events are rare and every read of the core EQ costs a
	// system call: read it on each call only while a connection is being
	// set up, else every kCmPollInterval calls.
	if (cm_busy || progress_calls % kCmPollInterval == 0)
		handled += poll_cm();
	handled += read_core_cq(8);
	refill_rx();
	if (backlogged) {
		// Only connected peers can drain; the others wait for FI_CONNECTED.
		backlogged = 0;
		for (auto& peer : peers) {
			if (peer->state == Peer::State::connected)
				flush_backlog(*peer);
			backlogged += !peer->backlog.empty() || !peer->controls.empty();
		}
	}
	if (stalled)
		retry_stalled();
	if (!polling.empty())
		poll_last_bytes();
	if (coll)
		coll->progress();
	if (progress_calls % kCmPollInterval == 0)
		probe_silent_peers(); // reads the clock: not on every call
	if (++progress_calls % 1024 == 0)
		check_connect_timeouts();
	settle_failures();
	return handled;
}

// Up to `rounds` batches of core completions; stops early when the core CQ
// runs dry.
int Endpoint::read_core_cq(int rounds)
{
	int handled = 0;
	fi_cq_data_entry batch[kCompletionBatch];
	for (int round = 0; round < rounds; round++) {
		ssize_t ret = fi_cq_read(core_cq.get(), batch, kCompletionBatch);
		if (ret > 0) {
			for (ssize_t i = 0; i < ret; i++)
				on_core_completion(batch[i]);
			// A stream of eager messages can use up the few posted
			// buffers within one call: restock before the core reads on.
			refill_rx();
			handled += int(ret);
			if (size_t(ret) < kCompletionBatch)
				break;
		} else if (ret == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			if (fi_cq_readerr(core_cq.get(), &err, 0) <= 0)
				break;
			on_core_error(err);
			handled++;
		} else {
			break;
		}
	}
	return handled;
}

void Endpoint::schedule_failure(Peer& peer, int err)
{
	failing.push_back({&peer, peer.conn.get(), err});
}

// Fails the peers scheduled for it, then closes the connections of failed
// peers. fi_close discards what a connection still held (fi_endpoint(3)):
// tcp and net flush those operations into the core CQ during the close, so
// the CQ is read dry right away and their error handling runs as usual;
// what still waits for the core after that never hears from it again.
void Endpoint::settle_failures()
{
	while (!failing.empty() || !graveyard.empty()) {
		for (const PendingFailure& f : std::exchange(failing, {}))
			if (f.peer->conn.get() == f.conn)
				fail_peer(*f.peer, f.err);
		if (graveyard.empty())
			continue;
		graveyard.clear();
		while (read_core_cq(8) > 0) {
		}
		complete_orphans();
	}
}

// Everything of a failed peer still waiting for a core completion, once its
// connection is closed and the core CQ read dry: a verbs QP, say, is
// destroyed without flushing its work requests. Without this, such an
// operation would never complete.
void Endpoint::complete_orphans()
{
	auto orphaned = [](const Peer* peer) { return peer && peer->state == Peer::State::failed; };
	for (BufferRecord& r : tx_records) {
		if (r.in_core && orphaned(r.peer)) {
			r.in_core = false;
			if (r.count)
				report_tx(r.context, r.cq_flags, 0, FI_EIO, true, send_cntr);
			release_tx_buffer(&r);
		}
	}
	// Transfers waiting for a retry belong to the closed connection too: a
	// later connection to the same peer must not carry them.
	std::vector<uint32_t> ids;
	sends.for_each([&](SendOp& op) {
		if ((op.write_in_flight || op.write_retry) && orphaned(op.peer))
			ids.push_back(op.cookie);
	});
	for (uint32_t id : ids) {
		if (SendOp* op = sends.find(id)) {
			op->write_retry = false;
			on_write_done(*op, FI_EIO);
		}
	}
	ids.clear();
	recvs.for_each([&](RecvOp& op) {
		if ((op.read_in_flight || op.read_retry) && orphaned(op.peer))
			ids.push_back(op.id);
	});
	for (uint32_t id : ids) {
		if (RecvOp* op = recvs.find(id)) {
			op->read_retry = false;
			on_read_finished(*op, FI_EIO);
		}
	}
	std::vector<RmaOp*> rma;
	for (auto& op : rma_ops)
		if (orphaned(op->peer))
			rma.push_back(op.get());
	for (RmaOp* op : rma)
		on_rma_done(*op, FI_EIO);
}

// Core operations the core refused with -FI_EAGAIN.
void Endpoint::retry_stalled()
{
	stalled = 0;
	sends.for_each([&](SendOp& op) {
		if (op.write_retry)
			issue_write(op);
	});
	recvs.for_each([&](RecvOp& op) {
		if (op.read_retry)
			issue_read(op);
	});
}

} // namespace rcoll
