// fid_mr: a registration with the core domain. The key and the address a
// peer uses are the core's (FI_MR_VIRT_ADDR; FI_MR_PROV_KEY towards the
// application); the descriptor an application passes back names this object,
// which holds the core's.
#pragma once

#include "common.hpp"
#include "proto/pool.hpp"

namespace rcoll {

struct Domain;

// A core registration owned by rcoll itself (bounce pools, rendezvous
// buffers the application passed without a descriptor).
class CoreRegistration {
public:
	CoreRegistration() = default;
	// Returns 0 or a negative fi_errno; the object stays empty on failure.
	int reg(const Domain& domain, const void* buf, size_t len, uint64_t access);
	void* desc() const { return mr_ ? fi_mr_desc(mr_.get()) : nullptr; }
	uint64_t key() const { return mr_ ? fi_mr_key(mr_.get()) : FI_KEY_NOTAVAIL; }
	explicit operator bool() const { return bool(mr_); }

private:
	FidPtr<fid_mr> mr_;
};

// Every local use: rcoll moves data for the application (eager sends from
// its buffer, rendezvous reads and writes) with its registrations.
inline constexpr uint64_t kLocalAccess = FI_SEND | FI_RECV | FI_READ | FI_WRITE;

struct MemoryRegion {
	FidShell<fid_mr, MemoryRegion> shell;
	Domain* domain = nullptr;
	CoreRegistration core;
	const void* base = nullptr;
	size_t len = 0;

	void* core_desc() const { return core.desc(); }
};

// The core descriptor behind an application descriptor (or nullptr).
inline void* core_desc_of(void* app_desc)
{
	return app_desc ? static_cast<MemoryRegion*>(app_desc)->core_desc() : nullptr;
}

// Registers with the core domain. Where the core takes the keys rcoll asks
// for (tcp), each is 64 random bits: the core's own are a counter, and any
// process that completed a handshake could guess one and write into
// memory it was never offered. Elsewhere (verbs) the key is the NIC's.
int register_with_core(const Domain& domain, const void* buf, size_t len, uint64_t access,
		       fid_mr** out);

// Registers bounce-pool chunks with the core domain.
class CoreRegistrar final : public proto::Registrar {
public:
	explicit CoreRegistrar(const Domain& domain) : domain_(domain) {}
	int register_region(void* addr, size_t length,
			    proto::RegisteredRegion& out) noexcept override;
	void deregister_region(const proto::RegisteredRegion& region) noexcept override;

private:
	const Domain& domain_;
};

extern fi_ops_mr memory_region_ops;

} // namespace rcoll
