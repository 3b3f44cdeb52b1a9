// The domain's lock (prov/rcoll/src/domain_lock.hpp): its holder must see a
// thread that waits for it, so that a call spinning with it held lets go
// (Collectives::finish_alone), and must stop seeing it once that thread got
// the lock.
#include "src/domain_lock.hpp"

#include <criterion/criterion.h>

#include <atomic>
#include <chrono>
#include <thread>

using rcoll::DomainLock;
using namespace std::chrono_literals;

namespace {

// Spins until `ready` or `limit` passed: whether `ready` held.
template <class Ready>
bool within(std::chrono::milliseconds limit, Ready ready)
{
	const auto until = std::chrono::steady_clock::now() + limit;
	while (!ready())
		if (std::chrono::steady_clock::now() >= until)
			return false;
	return true;
}

} // namespace

Test(domain_lock, uncontended_holder_sees_no_waiter)
{
	DomainLock lock;
	lock.lock();
	cr_assert(!lock.contended(), "a lock nobody else wants reads contended");
	cr_assert(!lock.try_lock(), "try_lock took a lock already held");
	lock.unlock();
	cr_assert(lock.try_lock(), "try_lock failed on a free lock");
	lock.unlock();
}

Test(domain_lock, holder_sees_a_waiting_thread_until_it_got_the_lock)
{
	DomainLock lock;
	std::atomic<bool> got_it = false, release = false;
	lock.lock();
	std::thread waiter([&] {
		lock.lock();
		got_it = true;
		while (!release)
			std::this_thread::yield();
		lock.unlock();
	});
	cr_assert(within(10s, [&] { return lock.contended(); }),
		  "the holder never saw the thread blocked in lock()");
	cr_assert(!got_it, "the waiter got a lock that was held");
	lock.unlock();
	cr_assert(within(10s, [&] { return got_it.load(); }), "the waiter never got the lock");
	cr_assert(!lock.contended(), "the lock reads contended after its waiter got it");
	release = true;
	waiter.join();
}
