// What became of each collective call: counted always, timed while the
// report is on (RCOLL_MPI_VERBOSE), summed over the ranks at MPI_Finalize.
// One call in kSampleEvery per thread is timed: reading the clock twice
// costs 60-80 ns, a fifth of a sub-microsecond call on one host, and the
// mean of a sample is what the report needs.
#include "offload.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

namespace rcoll::mpi {
namespace {

constexpr const char* kCallNames[kCalls] = {
	"MPI_Barrier",  "MPI_Bcast",     "MPI_Allreduce",
	"MPI_Reduce",   "MPI_Allgather", "MPI_Reduce_scatter_block",
	"MPI_Alltoall", "MPI_Gather",    "MPI_Scatter",
	"MPI_Ibarrier", "MPI_Ibcast",    "MPI_Iallreduce"};
constexpr const char* kOutcomeNames[kOutcomes] = {"offloaded",           "failed on rcoll",
						  "by a hand-back rule", "datatype, op or count",
						  "communicator",        "library off"};

constexpr unsigned kSampleEvery = 16;

// One thread's counts, written by that thread alone: a relaxed load and
// store, where a shared counter took a locked add on every call. Kept
// after the thread ends, for the report.
struct ThreadCounts {
	std::atomic<unsigned long long> calls[kCalls][kOutcomes] = {};
	std::atomic<unsigned long long> timed_calls[kCalls][kOutcomes] = {};
	std::atomic<unsigned long long> nanoseconds[kCalls][kOutcomes] = {};
	unsigned seen = 0; // calls, for the sample
};

struct Counts {
	std::mutex lock;
	std::vector<std::unique_ptr<ThreadCounts>> threads; // under lock
	std::vector<ThreadCounts*> unused;                  // of threads that ended, under lock
	bool timed = false;
};

// Never destroyed: a thread may still count a call while the program exits.
Counts& counts()
{
	static Counts& c = *new Counts;
	return c;
}

// Static TLS: the library is loaded with the program (LD_PRELOAD, or linked
// before the MPI), and a dynamic TLS access costs a call into the loader.
[[gnu::tls_model("initial-exec")]] thread_local ThreadCounts* this_thread = nullptr;

// At a thread's end its counts go to the next new thread, which adds to
// them (one writer at a time): a program that runs many short-lived
// threads keeps as many as ever ran at once.
struct ThreadEnd {
	ThreadCounts* counts = nullptr;
	~ThreadEnd()
	{
		if (!counts)
			return;
		Counts& c = ::rcoll::mpi::counts();
		std::lock_guard guard(c.lock);
		c.unused.push_back(counts);
	}
};

// Where a thread without counts of its own counts (no memory for them):
// counts may be lost there, never a call.
ThreadCounts spare_counts;

ThreadCounts& this_threads_counts()
{
	if (this_thread)
		return *this_thread;
	try {
		thread_local ThreadEnd end;
		Counts& c = counts();
		std::lock_guard guard(c.lock);
		if (!c.unused.empty()) {
			this_thread = c.unused.back();
			c.unused.pop_back();
		} else {
			c.threads.push_back(std::make_unique<ThreadCounts>());
			this_thread = c.threads.back().get();
			// Room for every thread's end, which must not allocate.
			c.unused.reserve(c.threads.size());
		}
		end.counts = this_thread;
		return *this_thread;
	} catch (const std::exception&) {
		return spare_counts;
	}
}

void add(std::atomic<unsigned long long>& counter, unsigned long long n)
{
	counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// Every thread's counts summed: `field` of each.
template <class Field>
unsigned long long sum(Field field, int call, int outcome)
{
	Counts& c = counts();
	std::lock_guard guard(c.lock);
	unsigned long long n = 0;
	for (const auto& t : c.threads)
		n += ((*t).*field)[call][outcome].load(std::memory_order_relaxed);
	return n + (spare_counts.*field)[call][outcome].load(std::memory_order_relaxed);
}

uint64_t now_ns()
{
	return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
				std::chrono::steady_clock::now().time_since_epoch())
				.count());
}

} // namespace

void time_calls(bool on) { counts().timed = on; }

// The first call of every thread is timed, then every kSampleEvery-th.
Tally::Tally(Call call) : call_(call), started_(0)
{
	if (counts().timed && this_threads_counts().seen++ % kSampleEvery == 0)
		started_ = now_ns();
}

Tally::~Tally()
{
	ThreadCounts& c = this_threads_counts();
	add(c.calls[call_][outcome], 1);
	if (started_) {
		add(c.timed_calls[call_][outcome], 1);
		add(c.nanoseconds[call_][outcome], now_ns() - started_);
	}
}

unsigned long long offloaded_calls()
{
	unsigned long long n = 0;
	for (int call = 0; call < kCalls; call++)
		n += sum(&ThreadCounts::calls, call, kOffloaded);
	return n;
}

void report_calls(int world_rank)
{
	constexpr int n = int(kCalls) * int(kOutcomes);
	unsigned long long mine[3][n], sums[3][n] = {};
	for (int call = 0; call < kCalls; call++)
		for (int o = 0; o < kOutcomes; o++) {
			mine[0][call * kOutcomes + o] = sum(&ThreadCounts::calls, call, o);
			mine[1][call * kOutcomes + o] = sum(&ThreadCounts::nanoseconds, call, o);
			mine[2][call * kOutcomes + o] = sum(&ThreadCounts::timed_calls, call, o);
		}
	PMPI_Reduce(mine, sums, 3 * n, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (world_rank != 0)
		return;
	unsigned long long totals[kOutcomes] = {};
	for (int i = 0; i < n; i++)
		totals[i % kOutcomes] += sums[0][i];
	std::fprintf(
		stderr,
		"rcoll-mpi: %llu collective calls offloaded, %llu left to the MPI, %llu failed "
		"(all ranks)\n",
		totals[kOffloaded],
		totals[kByRule] + totals[kUnmappable] + totals[kCommunicator] + totals[kLibraryOff],
		totals[kFailed]);
	// Per collective: calls, and the mean time of one call on one rank.
	for (int call = 0; call < kCalls; call++) {
		const unsigned long long* calls = &sums[0][call * kOutcomes];
		const unsigned long long* ns = &sums[1][call * kOutcomes];
		const unsigned long long* timed = &sums[2][call * kOutcomes];
		unsigned long long to_mpi = 0, to_mpi_ns = 0, to_mpi_timed = 0;
		for (int o = kOffloaded + 1; o < kOutcomes; o++)
			if (o != kFailed)
				to_mpi += calls[o], to_mpi_ns += ns[o], to_mpi_timed += timed[o];
		if (!calls[kOffloaded] && !calls[kFailed] && !to_mpi)
			continue;
		auto mean_us = [](unsigned long long t, unsigned long long k) {
			return k ? double(t) / double(k) / 1000.0 : 0.0;
		};
		std::string why;
		for (int o = kFailed + 1; o < kOutcomes; o++)
			if (calls[o])
				why += (why.empty() ? ": " : ", ") + std::to_string(calls[o]) +
				       " " + kOutcomeNames[o];
		std::fprintf(
			stderr,
			"rcoll-mpi: %-24s %llu offloaded (%.2f us each), %llu failed, %llu to the "
			"MPI (%.2f us each)%s\n",
			kCallNames[call], calls[kOffloaded],
			mean_us(ns[kOffloaded], timed[kOffloaded]), calls[kFailed], to_mpi,
			mean_us(to_mpi_ns, to_mpi_timed), why.c_str());
	}
}

} // namespace rcoll::mpi
