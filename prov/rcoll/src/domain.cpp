#include "domain.hpp"

#include "attr.hpp"
#include "av.hpp"
#include "cntr.hpp"
#include "coll.hpp"
#include "config.hpp"
#include "cq.hpp"
#include "ep.hpp"
#include "fabric.hpp"
#include "mr.hpp"

#include <chrono>

namespace rcoll {

int close_domain(fid* f)
{
	return guarded([&] {
		Domain* d = owner_of<Domain>(f);
		if (d->children.load())
			return -FI_EBUSY;
		delete d;
		return 0;
	});
}

namespace {

int open_av(fid_domain* d, fi_av_attr* attr, fid_av** out, void* context)
{
	return guarded(
		[&] { return AddressVector::open(owner_of<Domain>(d), attr, out, context); });
}

int open_cq(fid_domain* d, fi_cq_attr* attr, fid_cq** out, void* context)
{
	return guarded(
		[&] { return CompletionQueue::open(owner_of<Domain>(d), attr, out, context); });
}

int open_cntr(fid_domain* d, fi_cntr_attr* attr, fid_cntr** out, void* context)
{
	return guarded([&] { return Counter::open(owner_of<Domain>(d), attr, out, context); });
}

int open_ep(fid_domain* d, fi_info* info, fid_ep** out, void* context)
{
	return guarded([&] { return Endpoint::open(owner_of<Domain>(d), info, out, context); });
}

int query_atomic(fid_domain*, fi_datatype, fi_op, fi_atomic_attr*, uint64_t)
{
	return -FI_EOPNOTSUPP;
}

fi_ops_domain domain_ops = {
	.size = sizeof(fi_ops_domain),
	.av_open = open_av,
	.cq_open = open_cq,
	.endpoint = open_ep,
	.scalable_ep = enosys<decltype(fi_ops_domain::scalable_ep)>,
	.cntr_open = open_cntr,
	.poll_open = enosys<decltype(fi_ops_domain::poll_open)>,
	.stx_ctx = enosys<decltype(fi_ops_domain::stx_ctx)>,
	.srx_ctx = enosys<decltype(fi_ops_domain::srx_ctx)>,
	.query_atomic = query_atomic,
	.query_collective = query_collective,
	.endpoint2 = enosys<decltype(fi_ops_domain::endpoint2)>,
};

} // namespace

uint32_t Domain::api_version() const { return fabric->shell.fid.api_version; }

int Domain::open(Fabric* fabric, fi_info* info, fid_domain** out, void* context)
{
	if (!info || !info->domain_attr || !out)
		return -FI_EINVAL;
	InfoPtr core_info = core_info_for(fabric->name.c_str(), info->domain_attr->name, info);
	if (!core_info) {
		RCOLL_WARN(FI_LOG_DOMAIN, "no core domain %s\n", info->domain_attr->name);
		return -FI_ENODATA;
	}
	// Ask the core for the strictest memory rules even where it would not
	// need them (tcp honours them): every path then runs as it would on verbs.
	// (Only the domain gets them: endpoints are checked against what the
	// core advertised.)
	// The one exception is the keys: a core that lets rcoll choose them
	// (tcp) gets unguessable ones; one that must choose (verbs) refuses the
	// domain without FI_MR_PROV_KEY and is asked again with it.
	InfoPtr strict(fi_dupinfo(core_info.get()));
	if (!strict)
		return -FI_ENOMEM;
	auto domain = std::make_unique<Domain>();
	fid_domain* core = nullptr;
	strict->domain_attr->mr_mode = kCoreMrMode & ~FI_MR_PROV_KEY;
	int ret = fi_domain(fabric->core.get(), strict.get(), &core, nullptr);
	domain->core_takes_keys = ret == 0;
	if (ret) {
		strict->domain_attr->mr_mode = kCoreMrMode;
		ret = fi_domain(fabric->core.get(), strict.get(), &core, nullptr);
	}
	if (ret) {
		RCOLL_WARN(FI_LOG_DOMAIN, "core fi_domain: %s\n", fi_strerror(-ret));
		return ret;
	}
	domain->core.reset(core);
	domain->core_info = std::move(core_info);
	domain->info.reset(fi_dupinfo(info));
	if (!domain->info)
		return -FI_ENOMEM;
	domain->fabric = fabric;
	domain->shell.owner = domain.get();
	domain->shell.fid.fid.fclass = FI_CLASS_DOMAIN;
	domain->shell.fid.fid.context = context;
	domain->shell.fid.fid.ops = &fid_ops_table<close_domain>;
	domain->shell.fid.ops = &domain_ops;
	domain->shell.fid.mr = &memory_region_ops;
	if (info->domain_attr->data_progress == FI_PROGRESS_AUTO || config().progress_thread)
		domain->progress_thread =
			std::thread([d = domain.get()] { d->run_progress_thread(); });
	*out = &domain.release()->shell.fid;
	return 0;
}

// FI_PROGRESS_AUTO: a thread drives every endpoint's progress, sleeping
// briefly between idle rounds so it does not take a core from the ranks.
void Domain::run_progress_thread()
{
	while (!stopping.load(std::memory_order_relaxed)) {
		bool busy = false;
		{
			std::lock_guard guard(lock);
			for (Endpoint* ep : endpoints)
				busy |= ep->progress() > 0;
		}
		if (!busy)
			std::this_thread::sleep_for(std::chrono::microseconds(50));
	}
}

Domain::~Domain()
{
	stopping = true;
	if (progress_thread.joinable())
		progress_thread.join();
}

} // namespace rcoll
