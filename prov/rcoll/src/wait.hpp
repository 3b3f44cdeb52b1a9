// Waiting without burning the machine: spin on progress for a short time,
// then sleep in growing slices (ranks may outnumber cores).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <vector>

namespace rcoll {

struct Endpoint;

// Held while this process is in a collective group with more members on
// this host than it may use CPUs (the node-local path counts them): then
// nobody's spinning helps, since the member being waited for may be the one
// kept off a core by a spinner, so waits spin no more and yield at once, as
// MPI does when ranks outnumber cores (Open MPI's yield_when_idle).
class CrowdedHost {
public:
	CrowdedHost();
	~CrowdedHost();
	CrowdedHost(const CrowdedHost&) = delete;
	CrowdedHost& operator=(const CrowdedHost&) = delete;
	// CPUs this process may run on.
	static unsigned usable_cpus();
};

// FI_RCOLL_SPIN_US, or 0 while a CrowdedHost is held.
size_t spin_budget_us();

// Progresses `eps` until `ready()` holds or `timeout_ms` passes (< 0: no
// limit). `held` is the caller's lock on the domain; it is released while
// blocked. Returns 0, or -FI_EAGAIN on timeout.
int wait_with_progress(std::unique_lock<std::mutex>& held, const std::vector<Endpoint*>& eps,
		       const std::function<bool()>& ready, int timeout_ms);

// When an application polling an empty queue (fi_cq_read in a loop, as MPI
// and fabtests do) should give its core away. Polls spin for a budget of up
// to spin_us, then every empty poll yields. How long a yield took tells
// whether other work wanted the core: if it did (ranks outnumber cores) the
// budget drops to zero, so a waiting rank hands the core to the rank that has
// work at once; while yields come straight back the budget grows back to
// spin_us, so a rank alone on its core keeps the lowest latency.
class IdleBackoff {
public:
	// Under the caller's lock, after each poll; true: call yield() next.
	bool poll_was_idle(bool found);
	// Outside any lock.
	void yield();

private:
	using clock = std::chrono::steady_clock;
	clock::time_point idle_since_{}; // first empty poll of a run
	clock::time_point last_poll_{};
	std::atomic<int64_t> budget_us_{-1}; // -1: spin_us, read on first use
};

} // namespace rcoll
