// fi_rma(3) entry points: reads and writes on the core connection.
#include "domain.hpp"
#include "ep.hpp"

namespace rcoll {
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
	return rma_read(f, iov[0].iov_base, iov[0].iov_len, desc ? desc[0] : nullptr, src, addr, key,
			context);
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

ssize_t rma_write(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest,
		  uint64_t addr, uint64_t key, void* context)
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
		return ep.rma(true, buf, len, nullptr, dest, addr, key, 0, FI_INJECT | kNoCompletion, nullptr);
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
			      FI_INJECT | kNoCompletion | FI_REMOTE_CQ_DATA, nullptr);
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
