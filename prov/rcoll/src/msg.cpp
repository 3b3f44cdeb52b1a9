// fi_msg(3) entry points: untagged messages.
#include "domain.hpp"
#include "ep.hpp"

namespace rcoll {
namespace {

ssize_t msg_recv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, void* context)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.recv(buf, len, desc, src, 0, 0, ep.rx_op_flags, context);
	});
}

ssize_t msg_recvv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t src,
		  void* context)
{
	if (count > 1)
		return -FI_EINVAL;
	return msg_recv(f, count ? iov[0].iov_base : nullptr, count ? iov[0].iov_len : 0,
			desc ? desc[0] : nullptr, src, context);
}

ssize_t msg_recvmsg(fid_ep* f, const fi_msg* msg, uint64_t flags)
{
	if (!msg || msg->iov_count > 1)
		return -FI_EINVAL;
	return with_ep(f, [&](Endpoint& ep) {
		return ep.recv(msg->iov_count ? msg->msg_iov[0].iov_base : nullptr,
			       msg->iov_count ? msg->msg_iov[0].iov_len : 0,
			       msg->desc ? msg->desc[0] : nullptr, msg->addr, 0, 0, flags,
			       msg->context);
	});
}

ssize_t msg_send(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, void* context)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(buf, len, desc, dest, 0, 0, ep.tx_op_flags | FI_MSG, context);
	});
}

ssize_t msg_sendv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
		  void* context)
{
	if (count > 1)
		return -FI_EINVAL;
	return msg_send(f, count ? iov[0].iov_base : nullptr, count ? iov[0].iov_len : 0,
			desc ? desc[0] : nullptr, dest, context);
}

ssize_t msg_sendmsg(fid_ep* f, const fi_msg* msg, uint64_t flags)
{
	if (!msg || msg->iov_count > 1)
		return -FI_EINVAL;
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(msg->iov_count ? msg->msg_iov[0].iov_base : nullptr,
			       msg->iov_count ? msg->msg_iov[0].iov_len : 0,
			       msg->desc ? msg->desc[0] : nullptr, msg->addr, 0, msg->data,
			       (flags & ~kNoCompletion) | FI_MSG, msg->context);
	});
}

ssize_t msg_inject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(buf, len, nullptr, dest, 0, 0, FI_MSG | FI_INJECT | kNoCompletion,
			       nullptr);
	});
}

ssize_t msg_senddata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
		     fi_addr_t dest, void* context)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(buf, len, desc, dest, 0, data,
			       ep.tx_op_flags | FI_MSG | FI_REMOTE_CQ_DATA, context);
	});
}

ssize_t msg_injectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest)
{
	return with_ep(f, [&](Endpoint& ep) {
		return ep.send(buf, len, nullptr, dest, 0, data,
			       FI_MSG | FI_INJECT | kNoCompletion | FI_REMOTE_CQ_DATA, nullptr);
	});
}

} // namespace

fi_ops_msg msg_ops = {
	.size = sizeof(fi_ops_msg),
	.recv = msg_recv,
	.recvv = msg_recvv,
	.recvmsg = msg_recvmsg,
	.send = msg_send,
	.sendv = msg_sendv,
	.sendmsg = msg_sendmsg,
	.inject = msg_inject,
	.senddata = msg_senddata,
	.injectdata = msg_injectdata,
};

} // namespace rcoll
