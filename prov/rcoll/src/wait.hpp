// Waiting without burning the machine: spin on progress for a short time,
// then sleep in growing slices (ranks may outnumber cores).
#pragma once

#include "domain_lock.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <sched.h>
#include <sys/types.h>
#include <vector>

namespace rcoll {

struct Endpoint;

// Held while this process works with more processes on its host than it
// may use CPUs: the members of a collective group on this host, or the
// peers connected to an endpoint that said they run here. Then the process
// being waited for may be the one a spinner keeps off a core, so waits spin
// no more and yield at once, as MPI does when ranks outnumber cores (Open
// MPI's yield_when_idle).
class CrowdedHost {
public:
	CrowdedHost();
	~CrowdedHost();
	CrowdedHost(const CrowdedHost&) = delete;
	CrowdedHost& operator=(const CrowdedHost&) = delete;
	// Some CrowdedHost is held in this process, or FI_RCOLL_YIELD_WHEN_IDLE
	// says the host is crowded in ways its detection cannot see.
	static bool held();
};

// The CPUs that this process and others on this host may run on between
// them: the union of their affinity masks. Processes bound to a core each, as
// mpirun binds ranks, do not crowd two cores; two bound to one core do. A
// heuristic: two ranks sharing one core beside a third free to use eight
// still count as three on nine.
class HostCpus {
public:
	HostCpus(); // this process's
	// A process whose mask cannot be read (0: not known, or gone) may run
	// wherever this process's launcher may.
	void add(pid_t pid) noexcept;
	unsigned count() const noexcept { return unsigned(CPU_COUNT(&used_)); }

private:
	cpu_set_t used_;
	cpu_set_t launcher_; // read once, when first needed
	bool launcher_read_ = false;
};

// FI_RCOLL_SPIN_US, or 0 while the host is crowded (CrowdedHost::held).
size_t spin_budget_us();

// Progresses `eps` until `ready()` holds or `timeout_ms` passes (< 0: no
// limit). `held` is the caller's lock on the domain; it is released while
// blocked. Returns 0, or -FI_EAGAIN on timeout.
int wait_with_progress(std::unique_lock<DomainLock>& held, const std::vector<Endpoint*>& eps,
		       const std::function<bool()>& ready, int timeout_ms);

// An application polling an empty CQ or counter (fi_cq_read in a loop, as
// MPI and fabtests do) gives its core away only while the host is crowded
// with its own work (CrowdedHost). Otherwise it keeps spinning: a yield
// would hand the core to whoever else is runnable (a niced build, a
// daemon) for a whole scheduler slice, just when the peer is about to
// answer. Called outside any lock.
// Crowded, it yields rather than sleep until what it waits for moves.
// Sleeping on a node-local group's awaited flag (a futex its publisher
// wakes) was measured against yielding, 4 and 8 ranks on 2 CPUs: beside
// two niced busy loops it cut a 4-rank barrier by about a third, but with
// nothing beside the job it made barriers 2-3x slower and 8-rank 32 KiB
// allreduces up to 2x slower, also when only a slow yield (the CPU lost
// to another process) switched it on: each wake costs the publisher a system
// call and the sleeper a cross-CPU wake-up, more than the yields it saves.
void yield_if_crowded();

} // namespace rcoll
