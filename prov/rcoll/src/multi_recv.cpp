// FI_MULTI_RECV (fi_msg(3)): one posted buffer takes many untagged
// messages, each into the next bytes of it, until less than
// FI_OPT_MIN_MULTI_RECV is left. The buffer stays in the match queue where it
// was posted (keep_posted), so receives posted before it still come first.
// Each message it takes gets a piece: a RecvOp of its own over its part of the
// buffer, which runs the eager or rendezvous receive as any receive does and
// reports the piece's address as the completion's buf. Pieces of rendezvous
// messages may complete out of order; the buffer's last completion, whichever
// it is, carries FI_MULTI_RECV (finish_recv).
#include "ep.hpp"

#include <algorithm>

namespace rcoll {

// A new buffer takes the messages that wait for it, oldest first, then waits
// in the queue for more unless it is full.
ssize_t Endpoint::post_multi_recv(RecvOp& buffer)
{
	const uint32_t id = buffer.id;
	for (RecvOp* b = &buffer; b && !b->released; b = rx.recvs.find(id)) {
		proto::UnexpectedMessage* m = rx.msg_queue.post(*b);
		if (!m)
			break; // queued
		match_unexpected(*b, static_cast<Unexpected*>(m->context));
	}
	if (RecvOp* b = rx.recvs.find(id); b && rx.msg_queue.is_posted(*b))
		end_if_source_failed(*b);
	return 0;
}

RecvOp* Endpoint::receive_for(RecvOp& op, Peer& peer, uint64_t size)
{
	if (!op.keep_posted)
		return &op;
	uint32_t id = 0;
	RecvOp* piece = rx.recvs.create(id);
	if (!piece) {
		// A million receives in progress: the message cannot be placed, so
		// its sender fails, as for one that exceeds FI_RCOLL_UNEXPECTED_MAX.
		RCOLL_WARN(FI_LOG_EP_DATA,
			   "no receive record left for a message into a multi-receive buffer: "
			   "failing peer %016llx\n",
			   (unsigned long long)peer.key);
		schedule_failure(peer, -FI_ENOMEM);
		return nullptr;
	}
	const size_t n = size_t(std::min<uint64_t>(size, op.len - op.used));
	piece->id = id;
	piece->flags = op.flags;
	piece->report = op.report;
	piece->buf = op.buf + op.used;
	piece->len = n;
	piece->app_mr = op.app_mr;
	piece->core_desc = op.core_desc;
	piece->source = op.source;
	piece->context = op.context;
	piece->buffer = &op;
	op.used += n;
	op.pieces++;
	// A full buffer is released even when FI_OPT_MIN_MULTI_RECV is 0.
	if (op.len - op.used < std::max<size_t>(min_multi_recv, 1)) {
		op.released = true;
		rx.msg_queue.remove(op);
	}
	return piece;
}

} // namespace rcoll
