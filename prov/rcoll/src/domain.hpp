// fid_domain: one core domain (registered memory, keys) shared by every
// endpoint, and the lock that serialises rcoll and core calls within it.
#pragma once

#include "common.hpp"

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace rcoll {

struct Fabric;
struct Endpoint;

// The lock that serialises every operation on a domain's objects. An
// application that opened the domain with FI_THREAD_DOMAIN serialises them
// itself; without a progress thread nobody else touches them, and taking
// the lock is skipped: its two atomic read-modify-writes per call wait for
// the cache line a node-local collective just stored to, and were a sixth
// of a node-local barrier's time.
class DomainLock {
public:
	// Before the domain is shared with any other thread.
	void skip_when_serialised(bool serialised) noexcept { skip_ = serialised; }
	bool skipped() const noexcept { return skip_; }

	void lock()
	{
		if (!skip_)
			mutex_.lock();
	}
	void unlock()
	{
		if (!skip_)
			mutex_.unlock();
	}
	bool try_lock() { return skip_ || mutex_.try_lock(); }

private:
	std::mutex mutex_;
	bool skip_ = false;
};

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
