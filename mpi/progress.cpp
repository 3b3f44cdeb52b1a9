// The progress thread. rcoll moves only while somebody drives its endpoint,
// and the application drives it only inside the calls librcoll-mpi sees:
// a nonblocking collective whose caller then blocks in MPI_Recv (a call of
// the MPI's own transport) would stall, and with it every member waiting
// for its next step. While nonblocking calls are in flight, this thread
// drives the endpoint every RCOLL_MPI_PROGRESS_US; it calls only
// libfabric (FI_THREAD_SAFE), never the MPI, so the MPI's thread level is
// untouched. Requests still complete in the application's thread, inside
// the MPI_Wait and MPI_Test family (requests.cpp).
#include "offload.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <thread>

namespace rcoll::mpi {
namespace {

struct ProgressThread {
	// A job that exits without MPI_Finalize: stop it before the endpoint
	// goes (constructed before this, destroyed after).
	~ProgressThread() { stop_progress_thread(); }
	std::thread thread;
	std::atomic<bool> running = false; // started and not stopped
	std::mutex lock;
	std::condition_variable wake;
	bool stopping = false;
	std::chrono::microseconds interval{100};
};

ProgressThread& progress()
{
	static ProgressThread p;
	return p;
}

// Idle, it checks for calls in flight every millisecond: starting a call
// costs no system call to wake it.
void run(ProgressThread& p)
{
	using namespace std::chrono_literals;
	std::unique_lock guard(p.lock);
	while (!p.stopping) {
		const bool busy = requests_in_flight();
		if (busy) {
			guard.unlock();
			offload_endpoint().advance();
			guard.lock();
		}
		p.wake.wait_for(guard, busy ? p.interval : std::chrono::microseconds(1ms));
	}
}

} // namespace

// Every nonblocking call asks, maybe from several threads at once.
void start_progress_thread()
{
	ProgressThread& p = progress();
	if (p.running.load(std::memory_order_acquire))
		return;
	std::lock_guard guard(p.lock);
	if (p.running.load(std::memory_order_relaxed))
		return;
	if (const char* text = std::getenv("RCOLL_MPI_PROGRESS_US"))
		p.interval = std::chrono::microseconds(std::strtoul(text, nullptr, 0));
	p.stopping = false;
	p.thread = std::thread(run, std::ref(p));
	p.running.store(true, std::memory_order_release);
}

void stop_progress_thread()
{
	ProgressThread& p = progress();
	{
		std::lock_guard guard(p.lock);
		if (!p.running.load(std::memory_order_relaxed))
			return;
		p.stopping = true;
	}
	p.wake.notify_one();
	p.thread.join();
	p.running.store(false, std::memory_order_release);
}

} // namespace rcoll::mpi
