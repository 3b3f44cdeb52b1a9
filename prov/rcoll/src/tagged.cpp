// fi_tagged(3) entry points: tagged messages, matched by rcoll itself (the
// tcp core's own tagged support is unusable under a layered provider).
#include "domain.hpp"
#include "ep.hpp"

namespace rcoll {
namespace {

ssize_t tagged_recv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
		    uint64_t ignore, void* context)
{
	return with_ep(f, [&](Endpoint& ep) {
		// A default FI_MULTI_RECV is for untagged receives only.
		return ep.recv(buf, len, desc, src, tag, ignore,
			       (ep.rx_op_flags & ~uint64_t(FI_MULTI_RECV)) | FI_TAGGED, context);
	});
}

ssize_t tagged_recvv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t src,
		     uint64_t tag, uint64_t ignore, void* context)
{
	if (count > 1)
		return -FI_EINVAL;
	return tagged_recv(f, count ? iov[0].iov_base : nullptr, count ? iov[0].iov_len : 0,
			   desc ? desc[0] : nullptr, src, tag, ignore, context);
}

ssize_t tagged_recvmsg(fid_ep* f, const fi_msg_tagged* msg, uint64_t flags)
{
	if (!msg || msg->iov_count > 1)
		return -FI_EINVAL;
	return with_ep(f, [&](Endpoint& ep) {
		return ep.recv(msg->iov_count ? msg->msg_iov[0].iov_base : nullptr,
			       msg->iov_count ? msg->msg_iov[0].iov_len : 0,
			       msg->desc ? msg->desc[0] : nullptr, msg->addr, msg->tag, msg->ignore,
			       (flags & ~kNoCompletion) | FI_TAGGED, msg->context);
	});
}

ssize_t tagged_send(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest,
		    uint64_t tag, void* context)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(buf, len, desc, dest, tag, 0, ep.tx_op_flags | FI_TAGGED, context);
	});
}

ssize_t tagged_sendv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
		     uint64_t tag, void* context)
{
	if (count > 1)
		return -FI_EINVAL;
	return tagged_send(f, count ? iov[0].iov_base : nullptr, count ? iov[0].iov_len : 0,
			   desc ? desc[0] : nullptr, dest, tag, context);
}

ssize_t tagged_sendmsg(fid_ep* f, const fi_msg_tagged* msg, uint64_t flags)
{
	if (!msg || msg->iov_count > 1)
		return -FI_EINVAL;
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(msg->iov_count ? msg->msg_iov[0].iov_base : nullptr,
			       msg->iov_count ? msg->msg_iov[0].iov_len : 0,
			       msg->desc ? msg->desc[0] : nullptr, msg->addr, msg->tag, msg->data,
			       (flags & ~kNoCompletion) | FI_TAGGED, msg->context);
	});
}

ssize_t tagged_inject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t tag)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(buf, len, nullptr, dest, tag, 0,
			       FI_TAGGED | FI_INJECT | kNoCompletion, nullptr);
	});
}

ssize_t tagged_senddata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
			fi_addr_t dest, uint64_t tag, void* context)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(buf, len, desc, dest, tag, data,
			       ep.tx_op_flags | FI_TAGGED | FI_REMOTE_CQ_DATA, context);
	});
}

ssize_t tagged_injectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
			  uint64_t tag)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(buf, len, nullptr, dest, tag, data,
			       FI_TAGGED | FI_INJECT | kNoCompletion | FI_REMOTE_CQ_DATA, nullptr);
	});
}

} // namespace

fi_ops_tagged tagged_ops = {
	.size = sizeof(fi_ops_tagged),
	.recv = tagged_recv,
	.recvv = tagged_recvv,
	.recvmsg = tagged_recvmsg,
	.send = tagged_send,
	.sendv = tagged_sendv,
	.sendmsg = tagged_sendmsg,
	.inject = tagged_inject,
	.senddata = tagged_senddata,
	.injectdata = tagged_injectdata,
};

} // namespace rcoll
