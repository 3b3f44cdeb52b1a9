#include "wait.hpp"

#include "common.hpp"
#include "config.hpp"
#include "ep.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace rcoll {

// The core CQ has no wait object (see Endpoint::open): after spinning for
// spin_us, sleep in slices that grow from a yield to a millisecond, with
// the lock released so other threads (and the progress thread) get in.
int wait_with_progress(std::unique_lock<std::mutex>& held, const std::vector<Endpoint*>& eps,
		       const std::function<bool()>& ready, int timeout_ms)
{
	using namespace std::chrono;
	const auto start = steady_clock::now();
	const auto spin_until = start + microseconds(config().spin_us);
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
				slice = std::min(slice, duration_cast<microseconds>(deadline - now));
			std::this_thread::sleep_for(slice);
			nap = std::min(nap * 2, microseconds(1000));
		}
		held.lock();
	}
}

} // namespace rcoll
