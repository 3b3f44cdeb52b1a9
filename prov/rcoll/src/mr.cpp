#include "mr.hpp"

#include "domain.hpp"
#include "secret.hpp"

namespace rcoll {

int register_with_core(const Domain& domain, const void* buf, size_t len, uint64_t access,
		       fid_mr** out)
{
	if (!domain.core_takes_keys)
		return fi_mr_reg(domain.core.get(), buf, len, access, 0, 0, 0, out, nullptr);
	// A key already in use is -FI_ENOKEY: draw again (2^-64 per try).
	int ret = -FI_ENOKEY;
	for (int attempt = 0; attempt < 4 && ret == -FI_ENOKEY; attempt++)
		ret = fi_mr_reg(domain.core.get(), buf, len, access, 0, unguessable_u64(), 0, out,
				nullptr);
	return ret;
}

int CoreRegistration::reg(const Domain& domain, const void* buf, size_t len, uint64_t access)
{
	fid_mr* mr = nullptr;
	int ret = register_with_core(domain, buf, len, access, &mr);
	if (ret) {
		RCOLL_WARN(FI_LOG_MR, "core fi_mr_reg(%zu bytes): %s\n", len, fi_strerror(-ret));
		return ret;
	}
	mr_.reset(mr);
	return 0;
}

namespace {

int close_mr(fid* f)
{
	return guarded([&] {
		MemoryRegion* mr = owner_of<MemoryRegion>(f);
		Domain* domain = mr->domain;
		// Closing the core registration calls into the core domain, which
		// other threads drive under this lock.
		std::lock_guard guard(domain->lock);
		domain->children--;
		delete mr;
		return 0;
	});
}

int register_region(Domain* domain, const fi_mr_attr* attr, uint64_t flags, fid_mr** out)
{
	if (!attr || !out || attr->iov_count != 1 || !attr->mr_iov)
		return -FI_EINVAL;
	if (flags) {
		RCOLL_WARN(FI_LOG_MR, "fi_mr_regattr flags %#llx not supported\n",
			   (unsigned long long)flags);
		return -FI_EBADFLAGS;
	}
	if (attr->iface != FI_HMEM_SYSTEM)
		return -FI_EOPNOTSUPP;
	const iovec& iov = attr->mr_iov[0];
	auto mr = std::make_unique<MemoryRegion>();
	std::lock_guard guard(domain->lock);
	// Local access rights are always added (kLocalAccess); remote ones
	// only as asked: peers get no more than the application offers.
	int ret = mr->core.reg(*domain, iov.iov_base, iov.iov_len, attr->access | kLocalAccess);
	if (ret)
		return ret;
	mr->domain = domain;
	mr->base = iov.iov_base;
	mr->len = iov.iov_len;
	mr->shell.owner = mr.get();
	mr->shell.fid.fid.fclass = FI_CLASS_MR;
	mr->shell.fid.fid.context = attr->context;
	mr->shell.fid.fid.ops = &fid_ops_table<close_mr>;
	mr->shell.fid.mem_desc = mr.get();
	mr->shell.fid.key = mr->core.key();
	domain->children++;
	*out = &mr.release()->shell.fid;
	return 0;
}

int mr_regattr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** out)
{
	return guarded([&] { return register_region(owner_of<Domain>(f), attr, flags, out); });
}

int mr_regv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
	    uint64_t requested_key, uint64_t flags, fid_mr** out, void* context)
{
	fi_mr_attr attr{};
	attr.mr_iov = iov;
	attr.iov_count = count;
	attr.access = access;
	attr.offset = offset;
	attr.requested_key = requested_key;
	attr.context = context;
	attr.iface = FI_HMEM_SYSTEM;
	return mr_regattr(f, &attr, flags, out);
}

int mr_reg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset,
	   uint64_t requested_key, uint64_t flags, fid_mr** out, void* context)
{
	iovec iov{const_cast<void*>(buf), len};
	return mr_regv(f, &iov, 1, access, offset, requested_key, flags, out, context);
}

} // namespace

fi_ops_mr memory_region_ops = {
	.size = sizeof(fi_ops_mr),
	.reg = mr_reg,
	.regv = mr_regv,
	.regattr = mr_regattr,
};

int CoreRegistrar::register_region(void* addr, size_t length, proto::RegisteredRegion& out) noexcept
{
	fid_mr* mr = nullptr;
	// Bounce buffers are only sent from and received into: no peer may
	// read or write them.
	int ret = register_with_core(domain_, addr, length, FI_SEND | FI_RECV, &mr);
	if (ret) {
		RCOLL_WARN(FI_LOG_MR, "registering a bounce-buffer chunk: %s\n", fi_strerror(-ret));
		return ret;
	}
	out.handle = mr;
	out.desc = fi_mr_desc(mr);
	return 0;
}

void CoreRegistrar::deregister_region(const proto::RegisteredRegion& region) noexcept
{
	if (region.handle)
		fi_close(&static_cast<fid_mr*>(region.handle)->fid);
}

} // namespace rcoll
