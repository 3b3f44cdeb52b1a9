// Shared plumbing of the libfabric glue: logging, the noexcept boundary,
// RAII for core fids and the mapping from a libfabric fid to its C++ owner.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include <memory>
#include <new>
#include <utility>

extern "C" struct fi_provider rcoll_prov;

#define RCOLL_WARN(subsys, ...) FI_WARN(&rcoll_prov, subsys, __VA_ARGS__)
#define RCOLL_INFO(subsys, ...) FI_INFO(&rcoll_prov, subsys, __VA_ARGS__)
#define RCOLL_DBG(subsys, ...) FI_DBG(&rcoll_prov, subsys, __VA_ARGS__)

namespace rcoll {

// Every ops-table entry point runs its body through this: no C++ exception
// ever crosses into libfabric; allocation failure becomes -FI_ENOMEM.
template <class F>
auto guarded(F&& body) noexcept -> decltype(body())
{
	try {
		return body();
	} catch (const std::bad_alloc&) {
		return -FI_ENOMEM;
	} catch (...) {
		FI_WARN(&rcoll_prov, FI_LOG_CORE, "internal error\n");
		return -FI_EOTHER;
	}
}

// Closes a core provider object when its owner goes away.
struct FidCloser {
	template <class T>
	void operator()(T* object) const noexcept
	{
		if (object) {
			int ret = fi_close(&object->fid);
			if (ret)
				FI_WARN(&rcoll_prov, FI_LOG_CORE, "closing a core object: %s\n",
					fi_strerror(-ret));
		}
	}
};
template <class T>
using FidPtr = std::unique_ptr<T, FidCloser>;

struct InfoDeleter {
	void operator()(fi_info* info) const noexcept { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// The libfabric-visible part of an rcoll object. Standard layout, so a
// pointer to `fid` (or to the `struct fid` at its start) converts back to
// the shell, which names its C++ owner.
template <class FidT, class Owner>
struct FidShell {
	FidT fid{};
	Owner* owner = nullptr;
};

template <class Owner, class AnyFid>
Owner* owner_of(AnyFid* fid) noexcept
{
	using Shell = FidShell<decltype(Owner::shell.fid), Owner>;
	return reinterpret_cast<Shell*>(fid)->owner;
}

// A "not supported" entry for any ops-table slot: returns -FI_ENOSYS.
template <class Fn>
struct Unsupported;
template <class R, class... Args>
struct Unsupported<R (*)(Args...)> {
	static R call(Args...) noexcept { return static_cast<R>(-FI_ENOSYS); }
};
template <class Fn>
inline constexpr Fn enosys = Unsupported<Fn>::call;

// Most objects answer fi_control/ops_open/tostr/ops_set with -FI_ENOSYS.
template <int (*Close)(fid*),
	  int (*Bind)(fid*, fid*, uint64_t) = enosys<int (*)(fid*, fid*, uint64_t)>,
	  int (*Control)(fid*, int, void*) = enosys<int (*)(fid*, int, void*)>,
	  int (*OpsOpen)(fid*, const char*, uint64_t, void**, void*) =
		  enosys<decltype(fi_ops::ops_open)>>
inline fi_ops fid_ops_table = {
	.size = sizeof(fi_ops),
	.close = Close,
	.bind = Bind,
	.control = Control,
	.ops_open = OpsOpen,
	.tostr = enosys<decltype(fi_ops::tostr)>,
	.ops_set = enosys<decltype(fi_ops::ops_set)>,
};

// fi_cq_strerror / fi_eq_strerror. rcoll's prov_errno is an fi_errno, of
// either sign; the text goes into `buf` when the caller gives one.
template <class Fid>
const char* prov_strerror(Fid*, int prov_errno, const void*, char* buf, size_t len)
{
	const char* text = fi_strerror(prov_errno < 0 ? -prov_errno : prov_errno);
	if (!buf || !len)
		return text;
	size_t n = 0;
	for (; n + 1 < len && text[n]; n++)
		buf[n] = text[n];
	buf[n] = '\0';
	return buf;
}

} // namespace rcoll
