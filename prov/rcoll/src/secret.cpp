#include "secret.hpp"

#include <pthread.h>
#include <sys/random.h>

#include <atomic>
#include <random>

namespace rcoll {

namespace {

// A fork copies every thread's pool into the child, which would then hand
// out its parent's next values: a fork starts a new generation, and a pool
// filled in an older one is refilled before use.
std::atomic<uint64_t> fork_generation{0};

void note_fork() { fork_generation.fetch_add(1, std::memory_order_relaxed); }

// Values are drawn from the kernel in batches: one system call serves
// kBatch registrations or tokens instead of one each.
struct Pool {
	static constexpr size_t kBatch = 32;
	uint64_t values[kBatch];
	size_t left = 0;
	uint64_t generation = 0;

	void refill()
	{
		// Without the fork handler a batch is one value: nothing is kept
		// that a child could repeat.
		static const bool fork_noted = pthread_atfork(nullptr, nullptr, note_fork) == 0;
		const size_t n = fork_noted ? kBatch : 1;
		if (getrandom(values, n * sizeof values[0], 0) != ssize_t(n * sizeof values[0])) {
			std::random_device device; // also the kernel's source, by another door
			for (size_t i = 0; i < n; i++)
				values[i] = uint64_t(device()) << 32 | device();
		}
		generation = fork_generation.load(std::memory_order_relaxed);
		left = n;
	}
};

} // namespace

uint64_t unguessable_u64()
{
	thread_local Pool pool;
	uint64_t value = 0;
	while (value == 0) {
		if (pool.left == 0 ||
		    pool.generation != fork_generation.load(std::memory_order_relaxed))
			pool.refill();
		value = pool.values[--pool.left];
		pool.values[pool.left] = 0; // handed out once
	}
	return value;
}

} // namespace rcoll
