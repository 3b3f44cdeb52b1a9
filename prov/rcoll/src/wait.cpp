#include "wait.hpp"

#include "common.hpp"
#include "config.hpp"
#include "ep.hpp"

#include <poll.h>

#include <chrono>
#include <thread>

namespace rcoll {

int wait_with_progress(std::unique_lock<std::mutex>& held, const std::vector<Endpoint*>& eps,
		       const std::function<bool()>& ready, int timeout_ms)
{
	using clock = std::chrono::steady_clock;
	const auto start = clock::now();
	const auto spin_until = start + std::chrono::microseconds(config().spin_us);
	std::vector<pollfd> fds;
	for (;;) {
		for (Endpoint* ep : eps)
			ep->progress();
		if (ready())
			return 0;
		auto now = clock::now();
		int left_ms = -1;
		if (timeout_ms >= 0) {
			auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
			if (elapsed.count() >= timeout_ms)
				return -FI_EAGAIN;
			left_ms = int(timeout_ms - elapsed.count());
		}
		if (now < spin_until)
			continue;
		// Block on the cores' wait objects. Other threads (or the progress
		// thread) may consume what woke us, so never sleep long in one go.
		fds.clear();
		bool can_block = true;
		for (Endpoint* ep : eps)
			can_block &= ep->collect_wait_fds(fds);
		held.unlock();
		int slice = left_ms < 0 || left_ms > 10 ? 10 : left_ms;
		if (can_block && !fds.empty())
			poll(fds.data(), fds.size(), slice);
		else
			std::this_thread::yield();
		held.lock();
	}
}

} // namespace rcoll
