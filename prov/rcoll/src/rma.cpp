// fi_rma(3): reads and writes straight on the core connection, chunk by
// chunk. fi_writedata's 8 bytes of data travel as a WRITE_DATA message after
// the write (the core's immediate is 4 bytes on verbs and is rcoll's own
// dispatch space). An FI_DELIVERY_COMPLETE write completes on the target's
// answer to a DELIVERY_QUERY sent after it: the core's own completion only
// says the data left.
#include "config.hpp"
#include "domain.hpp"
#include "ep.hpp"

#include <memory>

namespace rcoll {

ssize_t Endpoint::rma(bool write, const void* buf, size_t len, void* desc, fi_addr_t dest,
		      uint64_t addr, uint64_t key, uint64_t data, uint64_t flags, void* context)
{
	if (!enabled)
		return -FI_EOPBADSTATE;
	if (len && !buf)
		return -FI_EINVAL;
	if ((flags & FI_REMOTE_CQ_DATA) && (data >> 32))
		return -FI_EINVAL;
	if (!tx_room())
		return -FI_EAGAIN; // tx_attr->size operations are outstanding
	int err = 0;
	Peer* peer = peer_for(dest, err);
	if (!peer)
		return err;
	if (peer->state != Peer::State::connected)
		return -FI_EAGAIN; // connecting: the application progresses and retries
	auto op = std::make_unique<RmaOp>();
	op->context = context;
	op->flags = (write ? FI_WRITE : FI_READ) | FI_RMA | (flags & FI_REMOTE_CQ_DATA);
	op->report = !(flags & kNoCompletion) && (!app.tx_selective || (flags & FI_COMPLETION));
	op->peer = peer;
	op->data = data;
	op->delivery = write && (flags & FI_DELIVERY_COMPLETE);
	op->connection_failures = peer->failures;
	ChunkedRma& t = op->transfer;
	t.write = write;
	t.local = static_cast<std::byte*>(const_cast<void*>(buf));
	t.remote_addr = addr;
	t.key = key;
	t.length = len;
	if (desc) {
		t.desc = core_desc_of(desc);
	} else if (len) {
		int ret = op->own_mr.reg(*domain, buf, len,
					 write ? FI_WRITE | FI_SEND : FI_READ | FI_RECV);
		if (ret)
			return ret;
		t.desc = op->own_mr.desc();
	}
	if (flags & FI_INJECT) {
		// The buffer must be reusable on return: copy it into our own memory.
		op->inject_copy.assign(t.local, t.local + len);
		t.local = op->inject_copy.data();
		op->own_mr = CoreRegistration();
		if (len) {
			int ret = op->own_mr.reg(*domain, t.local, len, FI_WRITE | FI_SEND);
			if (ret)
				return ret;
		}
		t.desc = op->own_mr.desc();
	}
	// The first chunk is posted now: the application learns of a full core
	// queue from this call. Later chunks the core refuses are retried.
	if (ssize_t ret =
		    t.post_next(peer->conn.get(), &op->transfer_cc.space, config().rma_chunk)) {
		t.retry = false;
		return ret;
	}
	rma_ops.push_back(std::move(op));
	return 0;
}

void Endpoint::issue_chunk(RmaOp& op)
{
	ssize_t ret = post_chunk(*op.peer, op.transfer, op.transfer_cc);
	if (ret && ret != -FI_EAGAIN)
		on_chunk_done(op, int(-ret));
}

// A chunk completed (err == 0) or the transfer failed: the next chunk, or
// the operation's completion. A failed peer fails an operation that waits
// for its delivery answer through here too.
void Endpoint::on_chunk_done(RmaOp& op, int err)
{
	if (!err && op.peer->failures != op.connection_failures)
		err = FI_EIO; // see RmaOp::connection_failures
	if (!err && !op.transfer.chunk_done()) {
		issue_chunk(op);
		return;
	}
	op.transfer.in_flight = op.transfer.retry = false;
	if (err || op.query_seq) {
		complete_rma(op, err ? err : FI_EIO); // an answer, not a chunk, ends a query
		return;
	}
	if (op.transfer.write && (op.flags & FI_REMOTE_CQ_DATA)) {
		proto::MsgHeader h;
		h.opcode = proto::Opcode::WriteData;
		h.flags = proto::kFlagRemoteCqData;
		h.cq_data = op.data;
		if (ssize_t ret = send_control(*op.peer, h, nullptr, 0)) {
			complete_rma(op, int(-ret));
			return;
		}
	}
	if (op.delivery) {
		// The core's completion of a write only says it left: the
		// target's answer to a query behind it says it landed.
		op.query_seq = ++op.peer->delivery_queries;
		proto::MsgHeader h;
		h.opcode = proto::Opcode::DeliveryQuery;
		if (ssize_t ret = send_control(*op.peer, h, proto::DeliveryQueryBody{op.query_seq}))
			complete_rma(op, int(-ret));
		return;
	}
	complete_rma(op, 0);
}

void Endpoint::complete_rma(RmaOp& op, int err)
{
	app.report_tx(op.context, op.flags & ~uint64_t(FI_REMOTE_CQ_DATA), op.transfer.length, err,
		      op.report, op.transfer.write ? app.write_cntr : app.read_cntr);
	for (auto it = rma_ops.begin(); it != rma_ops.end(); ++it) {
		if (it->get() == &op) {
			rma_ops.erase(it);
			break;
		}
	}
}

// The target read a query: the writes ahead of it on this connection have
// landed. One answer covers every query before it, so a peer's queries
// take at most one transmit buffer: while an answer holds one, the next
// waits among the control messages, and a waiting answer is brought up to
// date instead of another queued.
void Endpoint::on_delivery_query(Peer& peer, const proto::DeliveryQueryBody& query)
{
	const proto::DeliveredBody answer{query.sequence};
	bool updated = false;
	peer.controls.for_each([&](QueuedControl& queued) {
		if (queued.header.opcode == proto::Opcode::Delivered) {
			proto::encode_body(answer, queued.body.data());
			updated = true;
		}
	});
	if (updated)
		return;
	proto::MsgHeader h;
	h.opcode = proto::Opcode::Delivered;
	if (peer.answer_held)
		queue_control(peer, h, answer);
	else
		send_control(peer, h, answer);
}

// The initiator's side: every write of this peer's queries up to the
// answer's number has landed. Queries are numbered per peer and never
// reset, and writes still waiting when a connection fails fail with it
// (fail_peer): an answer completes only writes of the live connection.
void Endpoint::on_delivered(Peer& peer, const proto::DeliveredBody& answer)
{
	if (answer.sequence > peer.delivery_queries) {
		RCOLL_WARN(FI_LOG_EP_DATA,
			   "dropping a delivery answer for query %llu: only %llu were asked\n",
			   (unsigned long long)answer.sequence,
			   (unsigned long long)peer.delivery_queries);
		return;
	}
	std::vector<RmaOp*> delivered;
	for (auto& op : rma_ops)
		if (op->peer == &peer && op->query_seq && op->query_seq <= answer.sequence)
			delivered.push_back(op.get());
	for (RmaOp* op : delivered)
		complete_rma(*op, 0);
}

// ---------------------------------------------------------------------------
// Entry points.

namespace {

ssize_t rma_read(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr,
		 uint64_t key, void* context)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.rma(false, buf, len, desc, src, addr, key, 0, ep.tx_op_flags, context);
	});
}

ssize_t rma_readv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t src,
		  uint64_t addr, uint64_t key, void* context)
{
	if (count != 1)
		return -FI_EINVAL;
	return rma_read(f, iov[0].iov_base, iov[0].iov_len, desc ? desc[0] : nullptr, src, addr,
			key, context);
}

ssize_t rma_msg(fid_ep* f, const fi_msg_rma* msg, uint64_t flags, bool write)
{
	if (!msg || msg->iov_count != 1 || msg->rma_iov_count != 1 ||
	    msg->msg_iov[0].iov_len != msg->rma_iov[0].len)
		return -FI_EINVAL;
	return with_ep(f, [&](Endpoint& ep) {
		return ep.rma(write, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len,
			      msg->desc ? msg->desc[0] : nullptr, msg->addr, msg->rma_iov[0].addr,
			      msg->rma_iov[0].key, msg->data, flags & ~kNoCompletion, msg->context);
	});
}

ssize_t rma_readmsg(fid_ep* f, const fi_msg_rma* msg, uint64_t flags)
{
	return rma_msg(f, msg, flags, false);
}

ssize_t rma_write(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr,
		  uint64_t key, void* context)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.rma(true, buf, len, desc, dest, addr, key, 0, ep.tx_op_flags, context);
	});
}

ssize_t rma_writev(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
		   uint64_t addr, uint64_t key, void* context)
{
	if (count != 1)
		return -FI_EINVAL;
	return rma_write(f, iov[0].iov_base, iov[0].iov_len, desc ? desc[0] : nullptr, dest, addr,
			 key, context);
}

ssize_t rma_writemsg(fid_ep* f, const fi_msg_rma* msg, uint64_t flags)
{
	return rma_msg(f, msg, flags, true);
}

ssize_t rma_inject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
		   uint64_t key)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.rma(true, buf, len, nullptr, dest, addr, key, 0,
			      FI_INJECT | kNoCompletion | (ep.tx_op_flags & FI_DELIVERY_COMPLETE),
			      nullptr);
	});
}

ssize_t rma_writedata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
		      fi_addr_t dest, uint64_t addr, uint64_t key, void* context)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.rma(true, buf, len, desc, dest, addr, key, data,
			      ep.tx_op_flags | FI_REMOTE_CQ_DATA, context);
	});
}

ssize_t rma_injectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
		       uint64_t addr, uint64_t key)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.rma(true, buf, len, nullptr, dest, addr, key, data,
			      FI_INJECT | kNoCompletion | FI_REMOTE_CQ_DATA |
				      (ep.tx_op_flags & FI_DELIVERY_COMPLETE),
			      nullptr);
	});
}

} // namespace

fi_ops_rma rma_ops_table = {
	.size = sizeof(fi_ops_rma),
	.read = rma_read,
	.readv = rma_readv,
	.readmsg = rma_readmsg,
	.write = rma_write,
	.writev = rma_writev,
	.writemsg = rma_writemsg,
	.inject = rma_inject,
	.writedata = rma_writedata,
	.injectdata = rma_injectdata,
};

} // namespace rcoll
