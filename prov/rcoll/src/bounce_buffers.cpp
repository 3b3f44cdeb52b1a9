#include "bounce_buffers.hpp"

namespace rcoll {

BufferRecord* TransmitBuffers::take()
{
	proto::BounceBuffer* b = pool_->acquire();
	if (!b)
		return nullptr;
	while (records_.size() <= b->index())
		records_.emplace_back(&BufferRecord::finish_send);
	BufferRecord* r = &records_[b->index()];
	r->buffer = b;
	r->peer = nullptr;
	r->header = proto::MsgHeader{};
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

BufferRecord* ReceiveBuffers::next_to_post()
{
	proto::BounceBuffer* b = pool_->acquire_for_post();
	if (!b)
		return nullptr;
	while (records_.size() <= b->index())
		records_.emplace_back(&BufferRecord::finish_receive);
	BufferRecord* r = &records_[b->index()];
	r->buffer = b;
	return r;
}

} // namespace rcoll
