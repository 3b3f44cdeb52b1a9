#include "wait.hpp"

#include "common.hpp"
#include "config.hpp"
#include "ep.hpp"

#include <algorithm>
#include <chrono>
#include <sched.h>
#include <thread>
#include <unistd.h>

namespace rcoll {

namespace {
std::atomic<int> crowding{0};
}

CrowdedHost::CrowdedHost() { crowding.fetch_add(1, std::memory_order_relaxed); }
CrowdedHost::~CrowdedHost() { crowding.fetch_sub(1, std::memory_order_relaxed); }

HostCpus::HostCpus()
{
	if (sched_getaffinity(0, sizeof(used_), &used_) != 0) {
		// More CPUs than a cpu_set_t holds: count the online ones.
		const long online = std::min<long>(sysconf(_SC_NPROCESSORS_ONLN), CPU_SETSIZE);
		CPU_ZERO(&used_);
		for (long cpu = 0; cpu < std::max(online, 1L); cpu++)
			CPU_SET(cpu, &used_);
	}
	launcher_ = used_;
}

void HostCpus::add(pid_t pid) noexcept
{
	cpu_set_t theirs;
	if (pid <= 0 || sched_getaffinity(pid, sizeof(theirs), &theirs) != 0) {
		if (!launcher_read_) {
			// Unbound by mpirun's daemon, slurmstepd or a shell, the parent's
			// mask is the job's share of the host: its cgroup's cpuset, a
			// taskset around the whole job.
			cpu_set_t parent;
			if (sched_getaffinity(getppid(), sizeof(parent), &parent) == 0)
				CPU_OR(&launcher_, &launcher_, &parent);
			launcher_read_ = true;
		}
		theirs = launcher_;
	}
	CPU_OR(&used_, &used_, &theirs);
}

bool CrowdedHost::held()
{
	return crowding.load(std::memory_order_relaxed) > 0 || config().yield_when_idle;
}

size_t spin_budget_us() { return CrowdedHost::held() ? 0 : config().spin_us; }

// The core CQ has no wait object (see Endpoint::open): after spinning for
// spin_us, sleep in slices that grow from a yield to a millisecond, with
// the lock released so other threads (and the progress thread) get in.
int wait_with_progress(std::unique_lock<DomainLock>& held, const std::vector<Endpoint*>& eps,
		       const std::function<bool()>& ready, int timeout_ms)
{
	using namespace std::chrono;
	const auto start = steady_clock::now();
	const auto spin_until = start + microseconds(spin_budget_us());
	const auto deadline = start + milliseconds(timeout_ms);
	microseconds nap{0};
	for (;;) {
		for (Endpoint* ep : eps)
			ep->progress();
		if (ready())
			return 0;
		const auto now = steady_clock::now();
		if (timeout_ms >= 0 && now >= deadline)
			return -FI_EAGAIN;
		if (now < spin_until)
			continue;
		held.unlock();
		if (nap.count() == 0) {
			std::this_thread::yield();
			nap = microseconds(20);
		} else {
			auto slice = nap;
			if (timeout_ms >= 0)
				slice = std::min(slice,
						 duration_cast<microseconds>(deadline - now));
			std::this_thread::sleep_for(slice);
			nap = std::min(nap * 2, microseconds(1000));
		}
		held.lock();
	}
}

void yield_if_crowded()
{
	if (CrowdedHost::held())
		sched_yield();
}

} // namespace rcoll
