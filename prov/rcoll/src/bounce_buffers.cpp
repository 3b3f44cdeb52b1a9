#include "bounce_buffers.hpp"

#include "peer.hpp"

namespace rcoll {

namespace {

// The record of buffer `b` (records go by buffer index), made on first use.
template <class Records, class Finish>
BufferRecord* record_for(Records& records, proto::BounceBuffer* b, Finish finish)
{
	while (records.size() <= b->index())
		records.emplace_back(finish);
	BufferRecord* r = &records[b->index()];
	r->buffer = b;
	return r;
}

} // namespace

BufferRecord* TransmitBuffers::take()
{
	proto::BounceBuffer* b = pool_->acquire();
	if (!b)
		return nullptr;
	BufferRecord* r = record_for(records_, b, &BufferRecord::finish_send);
	r->peer = nullptr;
	r->header = proto::MsgHeader{};
	r->len = 0;
	r->context = nullptr;
	r->cq_flags = 0;
	r->report = r->count = r->in_core = r->held = r->answer = false;
	r->may_inject = true;
	r->sent = {};
	r->payload = nullptr;
	r->payload_desc = nullptr;
	r->payload_len = 0;
	return r;
}

void TransmitBuffers::release(BufferRecord& r)
{
	if (r.held) {
		r.held = false;
		r.peer->tx_held--;
	}
	if (r.answer) {
		r.answer = false;
		r.peer->answer_held = false;
	}
	pool_->release(*r.buffer);
}

BufferRecord* ReceiveBuffers::next_to_post()
{
	proto::BounceBuffer* b = pool_->acquire_for_post();
	return b ? record_for(records_, b, &BufferRecord::finish_receive) : nullptr;
}

} // namespace rcoll
