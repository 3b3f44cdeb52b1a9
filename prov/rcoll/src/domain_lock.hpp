// The lock that serialises rcoll and core calls within a domain, which
// also says whether a thread waits for it: a call that drives its collective
// to its end inside the call, holding the lock (Collectives::finish_alone),
// lets go of its spin once another thread needs the domain. Otherwise two
// processes' threads, each spinning on a call whose peer thread waits for
// the other process's lock, would each wait out the spin's whole budget.
#pragma once

#include <atomic>
#include <mutex>

namespace rcoll {

class DomainLock {
public:
	void lock()
	{
		if (mutex_.try_lock())
			return;
		waiting_.fetch_add(1, std::memory_order_relaxed);
		mutex_.lock();
		waiting_.fetch_sub(1, std::memory_order_relaxed);
	}
	bool try_lock() { return mutex_.try_lock(); }
	void unlock() { mutex_.unlock(); }
	// Whether a thread is blocked in lock(); read by the holder.
	bool contended() const { return waiting_.load(std::memory_order_relaxed) != 0; }

private:
	std::mutex mutex_;
	std::atomic<int> waiting_{0};
};

} // namespace rcoll
