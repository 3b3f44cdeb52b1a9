// What became of each collective call: counted always, timed while the
// report is on (RCOLL_MPI_VERBOSE), summed over the ranks at MPI_Finalize.
// One call in kSampleEvery per thread is timed: reading the clock twice
// costs 60-80 ns, a fifth of a sub-microsecond call on one host, and the
// mean of a sample is what the report needs.
#include "offload.hpp"

#include <chrono>
#include <cstdio>

namespace rcoll::mpi {
namespace {

constexpr const char* kCallNames[kCalls] = {
	"MPI_Barrier", "MPI_Bcast",   "MPI_Allreduce", "MPI_Reduce", "MPI_Allgather",
	"MPI_Reduce_scatter_block",   "MPI_Alltoall",  "MPI_Gather", "MPI_Scatter",
	"MPI_Ibarrier", "MPI_Ibcast", "MPI_Iallreduce"};
constexpr const char* kOutcomeNames[kOutcomes] = {
	"offloaded", "failed on rcoll", "by a hand-back rule", "datatype, op or count",
	"communicator", "library off"};

constexpr unsigned kSampleEvery = 16;

struct Counts {
	std::atomic<unsigned long long> calls[kCalls][kOutcomes] = {};
	std::atomic<unsigned long long> timed_calls[kCalls][kOutcomes] = {};
	std::atomic<unsigned long long> nanoseconds[kCalls][kOutcomes] = {};
	bool timed = false;
};

Counts& counts()
{
	static Counts c;
	return c;
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
bool sample_this_call()
{
	thread_local unsigned calls = 0;
	return counts().timed && calls++ % kSampleEvery == 0;
}

Tally::Tally(Call call) : call_(call), started_(sample_this_call() ? now_ns() : 0) {}

Tally::~Tally()
{
	Counts& c = counts();
	c.calls[call_][outcome].fetch_add(1, std::memory_order_relaxed);
	if (started_) {
		c.timed_calls[call_][outcome].fetch_add(1, std::memory_order_relaxed);
		c.nanoseconds[call_][outcome].fetch_add(now_ns() - started_,
							 std::memory_order_relaxed);
	}
}

unsigned long long offloaded_calls()
{
	unsigned long long n = 0;
	for (const auto& call : counts().calls)
		n += call[kOffloaded].load(std::memory_order_relaxed);
	return n;
}

void report_calls(int world_rank)
{
	Counts& c = counts();
	constexpr int n = int(kCalls) * int(kOutcomes);
	unsigned long long mine[3][n], sums[3][n] = {};
	for (int call = 0; call < kCalls; call++)
		for (int o = 0; o < kOutcomes; o++) {
			mine[0][call * kOutcomes + o] = c.calls[call][o].load();
			mine[1][call * kOutcomes + o] = c.nanoseconds[call][o].load();
			mine[2][call * kOutcomes + o] = c.timed_calls[call][o].load();
		}
	PMPI_Reduce(mine, sums, 3 * n, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (world_rank != 0)
		return;
	unsigned long long totals[kOutcomes] = {};
	for (int i = 0; i < n; i++)
		totals[i % kOutcomes] += sums[0][i];
	std::fprintf(stderr,
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
				why += (why.empty() ? ": " : ", ") + std::to_string(calls[o]) + " " +
				       kOutcomeNames[o];
		std::fprintf(stderr,
			     "rcoll-mpi: %-24s %llu offloaded (%.2f us each), %llu failed, %llu to the "
			     "MPI (%.2f us each)%s\n",
			     kCallNames[call], calls[kOffloaded], mean_us(ns[kOffloaded], timed[kOffloaded]),
			     calls[kFailed], to_mpi, mean_us(to_mpi_ns, to_mpi_timed), why.c_str());
	}
}

} // namespace rcoll::mpi
