// The provider entry point. Nothing here touches other providers:
// libfabric holds a non-recursive lock while calling fi_prov_ini, so the
// core is discovered lazily, from getinfo and fabric.
#include "attr.hpp"
#include "common.hpp"
#include "config.hpp"
#include "fabric.hpp"

namespace {

int rcoll_getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
		  const fi_info* hints, fi_info** info)
{
	return rcoll::guarded(
		[&] { return rcoll::getinfo(version, node, service, flags, hints, info); });
}

int rcoll_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context)
{
	return rcoll::guarded([&] { return rcoll::Fabric::open(attr, fabric, context); });
}

void rcoll_cleanup() {}

} // namespace

extern "C" {

struct fi_provider rcoll_prov = {
	.version = rcoll::kProviderVersion,
	.fi_version = FI_VERSION(1, 17),
	.context = {},
	.name = "rcoll",
	.getinfo = rcoll_getinfo,
	.fabric = rcoll_fabric,
	.cleanup = rcoll_cleanup,
};

// As a loadable provider (librcoll-fi.so) the entry point is fi_prov_ini,
// which libfabric looks up by name in the library. Built into libfabric
// itself (libfabric's --enable-rcoll=yes, see prov/rcoll/libfabric/) it is
// fi_rcoll_ini, which libfabric's core calls through RCOLL_INIT
// (include/ofi_prov.h).
#ifdef RCOLL_BUILTIN
struct fi_provider* fi_rcoll_ini(void)
#else
__attribute__((visibility("default"))) struct fi_provider* fi_prov_ini(void)
#endif
{
	rcoll::define_params();
	return &rcoll_prov;
}

} // extern "C"
