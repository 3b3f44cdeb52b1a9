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
std::atomic<int> crowded_groups{0};
}

CrowdedHost::CrowdedHost() { crowded_groups.fetch_add(1, std::memory_order_relaxed); }
CrowdedHost::~CrowdedHost() { crowded_groups.fetch_sub(1, std::memory_order_relaxed); }

unsigned CrowdedHost::usable_cpus()
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		return unsigned(CPU_COUNT(&set));
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	return online > 0 ? unsigned(online) : 1;
}

size_t spin_budget_us()
{
	return crowded_groups.load(std::memory_order_relaxed) ? 0 : config().spin_us;
}

// The core CQ has no wait object (see Endpoint::open): after spinning for
// spin_us, sleep in slices that grow from a yield to a millisecond, with
// the lock released so other threads (and the progress thread) get in.
int wait_with_progress(std::unique_lock<std::mutex>& held, const std::vector<Endpoint*>& eps,
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

bool IdleBackoff::poll_was_idle(bool found)
{
	if (found) {
		idle_since_ = {};
		return false;
	}
	const auto now = clock::now();
	// A poll long after the previous one starts a new idle run: the
	// application was busy elsewhere in between, not waiting here.
	if (idle_since_ == clock::time_point{} || now - last_poll_ > std::chrono::milliseconds(1))
		idle_since_ = now;
	last_poll_ = now;
	int64_t budget = budget_us_.load(std::memory_order_relaxed);
	if (budget < 0)
		budget = int64_t(config().spin_us);
	budget = std::min(budget, int64_t(spin_budget_us()));
	return now - idle_since_ >= std::chrono::microseconds(budget);
}

void IdleBackoff::yield()
{
	// A yield nobody took returns in about a microsecond; one that let
	// another process run takes at least part of a scheduler slice.
	constexpr auto kContended = std::chrono::microseconds(10);
	const auto before = clock::now();
	sched_yield();
	const bool contended = clock::now() - before > kContended;
	const int64_t ceiling = int64_t(config().spin_us);
	int64_t budget = budget_us_.load(std::memory_order_relaxed);
	if (budget < 0)
		budget = ceiling;
	budget = contended ? 0 : std::min(ceiling, 2 * budget + 1);
	budget_us_.store(budget, std::memory_order_relaxed);
}

} // namespace rcoll
