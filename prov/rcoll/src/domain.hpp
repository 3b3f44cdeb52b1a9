// fid_domain: one core domain (registered memory, keys) shared by every
// endpoint, and the lock that serialises rcoll and core calls within it.
#pragma once

#include "common.hpp"
#include "domain_lock.hpp"

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace rcoll {

struct Fabric;
struct Endpoint;

struct Domain {
	FidShell<fid_domain, Domain> shell;
	Fabric* fabric = nullptr;
	InfoPtr info;      // the rcoll info it was opened with
	InfoPtr core_info; // the core MSG info behind it
	FidPtr<fid_domain> core;
	// The core registers with the keys rcoll draws (see register_with_core).
	bool core_takes_keys = false;
	DomainLock lock; // every operation on objects of this domain holds it
	std::atomic<int> children{0};
	std::vector<Endpoint*> endpoints; // under lock; walked by the progress thread

	std::thread progress_thread;
	std::atomic<bool> stopping{false};

	int mr_mode() const { return info->domain_attr->mr_mode; }
	uint32_t api_version() const;

	static int open(Fabric* fabric, fi_info* info, fid_domain** out, void* context);
	~Domain();

private:
	void run_progress_thread();
	friend int close_domain(fid*);
};

} // namespace rcoll
