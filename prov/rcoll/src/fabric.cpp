#include "fabric.hpp"

#include "attr.hpp"
#include "domain.hpp"
#include "eq.hpp"

namespace rcoll {
namespace {

int close_fabric(fid* f)
{
	return guarded([&] {
		delete owner_of<Fabric>(f);
		return 0;
	});
}

int open_domain(fid_fabric* f, fi_info* info, fid_domain** out, void* context)
{
	return guarded([&] { return Domain::open(owner_of<Fabric>(f), info, out, context); });
}

int open_eq(fid_fabric* f, fi_eq_attr* attr, fid_eq** out, void* context)
{
	return guarded([&] { return EventQueue::open(owner_of<Fabric>(f), attr, out, context); });
}

fi_ops_fabric fabric_ops = {
	.size = sizeof(fi_ops_fabric),
	.domain = open_domain,
	.passive_ep = enosys<decltype(fi_ops_fabric::passive_ep)>,
	.eq_open = open_eq,
	.wait_open = enosys<decltype(fi_ops_fabric::wait_open)>,
	.trywait = enosys<decltype(fi_ops_fabric::trywait)>,
	.domain2 = enosys<decltype(fi_ops_fabric::domain2)>,
};

} // namespace

int Fabric::open(fi_fabric_attr* attr, fid_fabric** out, void* context)
{
	if (!attr || !out)
		return -FI_EINVAL;
	InfoPtr core = core_info_for(attr->name, nullptr, nullptr);
	if (!core) {
		RCOLL_WARN(FI_LOG_FABRIC, "no core provider for fabric %s\n",
			   attr->name ? attr->name : "(any)");
		return -FI_ENODATA;
	}
	auto fabric = std::make_unique<Fabric>();
	fid_fabric* core_fabric = nullptr;
	int ret = fi_fabric(core->fabric_attr, &core_fabric, nullptr);
	if (ret) {
		RCOLL_WARN(FI_LOG_FABRIC, "core fi_fabric: %s\n", fi_strerror(-ret));
		return ret;
	}
	fabric->core.reset(core_fabric);
	fabric->name = core->fabric_attr->name ? core->fabric_attr->name : "";
	fabric->shell.owner = fabric.get();
	fabric->shell.fid.fid.fclass = FI_CLASS_FABRIC;
	fabric->shell.fid.fid.context = context;
	fabric->shell.fid.fid.ops = &fid_ops_table<close_fabric>;
	fabric->shell.fid.ops = &fabric_ops;
	fabric->shell.fid.api_version = attr->api_version;
	*out = &fabric.release()->shell.fid;
	return 0;
}

} // namespace rcoll
