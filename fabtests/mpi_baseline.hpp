// The comparison users make: their MPI's own collectives. Runs
// rcoll_mpi_coll_bench (installed beside the benchmarks) under Open MPI's
// mpirun and reads its results, one line per point.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace fabtests {

struct MpiPoint {
	std::string coll; // barrier, broadcast or allreduce
	size_t bytes = 0;
	bool right = false;   // every call's result checked out on every rank
	double median_us = 0; // slowest rank, median of the repetitions
	double syscalls = -1; // per call, on the rank that made the most; < 0: not counted
};

struct MpiRun {
	std::string error; // empty when the job ran to its end
	std::vector<MpiPoint> points;
};

class MpiBaseline {
public:
	// Looks for the program beside this executable and for an mpirun that
	// is Open MPI's (the transports are chosen with its MCA flags).
	MpiBaseline();
	bool available() const { return why_not_.empty(); }
	const std::string& why_not() const { return why_not_; }
	// The mpirun line for `ranks` ranks on this host, its transports given
	// by `mca` (e.g. "--mca pml ob1 --mca btl self,vader"), rank r bound to
	// hardware thread r when `bind`, the program's arguments by `args`.
	std::string command(const std::string& mca, int ranks, bool bind,
			    const std::string& args) const;
	// Runs it, killed after `limit`.
	MpiRun run(const std::string& command, std::chrono::seconds limit) const;

private:
	std::string program_;
	std::string why_not_;
};

} // namespace fabtests
