// rcoll_mpi_coll_bench: an MPI's own barrier, broadcast and allreduce,
// measured the way rcoll_coll_bench measures rcoll's, so that the two can
// stand side by side: rcoll_coll_bench starts it under mpirun and reads its
// results. It can also be run alone:
//
//   mpirun -np 2 rcoll_mpi_coll_bench [--quick] [--sizes LIST] [--colls LIST] [--own-too]
//                                     [--back-to-back]
//
// Per point: one verified call, a calibration call that sets the iteration
// count, warm-up, then repetitions of timed calls with a barrier between
// calls (outside the timing); before each call every rank writes fresh
// input, after it every rank checks its whole output, both untimed. A
// repetition's figure is the slowest rank's average, the point's the median
// of the repetitions (the OSU micro-benchmarks' method). One line per point:
//
//   point <barrier|broadcast|allreduce|reduce|allgather> <bytes> <ok|wrong> <median us>
//         <system calls per call>
//
// Broadcast: MPI_BYTE from root 0. Allreduce: MPI_SUM of int64_t, as
// rcoll_coll_bench's FI_SUM of FI_INT64; reduce: the same to root 0;
// allgather: blocks of `bytes` bytes (MPI_BYTE). With librcoll-mpi
// preloaded it measures the offloaded calls (scripts/bench-mpi.sh).
//
// --back-to-back times a repetition's calls in one stretch, as an
// application that makes them one after another (a solver's dot products):
// fresh input and a barrier before the stretch, the output of its last call
// checked after it. A call then also pays for the other ranks' arrival in
// it, which the barrier otherwise absorbs.
//
// --own-too measures the MPI's own calls too, through their PMPI_ names
// (which an offload library leaves alone), in the same job: the two
// alternate repetition by repetition, so that both see the same placement,
// the same neighbours and the same minute of a machine whose speed drifts
// between jobs. One more line per point, after the point's own:
//
//   own <collective> <bytes> <ok|wrong> <median us>
#include "syscall_counter.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

enum class Coll { barrier, broadcast, allreduce, reduce, allgather };

struct Options {
	bool quick = false;
	bool own_too = false;      // the MPI's own (PMPI_) calls interleaved
	bool back_to_back = false; // no barrier between a repetition's calls
	std::vector<Coll> colls = {Coll::barrier, Coll::broadcast, Coll::allreduce, Coll::reduce,
				   Coll::allgather};
	std::vector<size_t> sizes = {8, 2048, 512u << 10, 8u << 20};
};

const char* name_of(Coll c)
{
	switch (c) {
	case Coll::barrier: return "barrier";
	case Coll::broadcast: return "broadcast";
	case Coll::allreduce: return "allreduce";
	case Coll::reduce: return "reduce";
	case Coll::allgather: return "allgather";
	}
	return "?";
}

// Closed-form values: element i of call k, contributed by rank r.
uint8_t broadcast_byte(size_t i, uint64_t k) { return uint8_t(i * 31 + k * 17 + 5 + (i >> 8)); }
int64_t operand(size_t i, uint64_t k, int r) { return int64_t(i * 131 + k * 7) + r; }
int64_t sum_of(size_t i, uint64_t k, int p)
{
	return p * int64_t(i * 131 + k * 7) + int64_t(p) * (p - 1) / 2;
}

class Point {
public:
	Point(Coll coll, size_t bytes, int rank, int size)
		: coll_(coll), bytes_(coll == Coll::barrier ? 0 : bytes), rank_(rank), size_(size)
	{
		if (coll_ == Coll::allreduce || coll_ == Coll::reduce) {
			count_ = std::max<size_t>(1, bytes_ / sizeof(int64_t));
			in_.resize(count_);
			out_.resize(count_);
		} else if (coll_ == Coll::broadcast) {
			data_.resize(bytes_);
		} else if (coll_ == Coll::allgather) {
			data_.resize(bytes_);
			gathered_.resize(bytes_ * size_t(size));
		}
	}

	// Fresh input for call k (untimed).
	void prepare(uint64_t k)
	{
		if (coll_ == Coll::allreduce || coll_ == Coll::reduce)
			for (size_t i = 0; i < count_; ++i)
				in_[i] = operand(i, k, rank_);
		else if ((coll_ == Coll::broadcast && rank_ == 0) || coll_ == Coll::allgather)
			for (size_t i = 0; i < bytes_; ++i)
				data_[i] = broadcast_byte(i, k + uint64_t(rank_));
	}

	// `own`: the MPI's own call (PMPI_), past any offload library.
	void call(bool own)
	{
		switch (coll_) {
		case Coll::barrier: barrier(own); break;
		case Coll::broadcast:
			(own ? PMPI_Bcast : MPI_Bcast)(data_.data(), int(bytes_), MPI_BYTE, 0,
						       MPI_COMM_WORLD);
			break;
		case Coll::allreduce:
			(own ? PMPI_Allreduce : MPI_Allreduce)(in_.data(), out_.data(), int(count_),
							       MPI_INT64_T, MPI_SUM,
							       MPI_COMM_WORLD);
			break;
		case Coll::reduce:
			(own ? PMPI_Reduce : MPI_Reduce)(in_.data(), out_.data(), int(count_),
							 MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
			break;
		case Coll::allgather:
			(own ? PMPI_Allgather : MPI_Allgather)(data_.data(), int(bytes_), MPI_BYTE,
							       gathered_.data(), int(bytes_),
							       MPI_BYTE, MPI_COMM_WORLD);
			break;
		}
	}

	// The barrier before a timed call is of the same kind: how it releases
	// the ranks is part of what the call's figure measures.
	static void barrier(bool own) { (own ? PMPI_Barrier : MPI_Barrier)(MPI_COMM_WORLD); }

	// Whether call k's whole output is right on this rank (untimed).
	bool check(uint64_t k) const
	{
		if (coll_ == Coll::allreduce || (coll_ == Coll::reduce && rank_ == 0)) {
			for (size_t i = 0; i < count_; ++i)
				if (out_[i] != sum_of(i, k, size_))
					return false;
		} else if (coll_ == Coll::allgather) {
			for (size_t r = 0; r < size_t(size_); ++r)
				for (size_t i = 0; i < bytes_; ++i)
					if (gathered_[r * bytes_ + i] != broadcast_byte(i, k + r))
						return false;
		} else if (coll_ == Coll::broadcast) {
			for (size_t i = 0; i < bytes_; ++i)
				if (data_[i] != broadcast_byte(i, k))
					return false;
		}
		return true;
	}

	size_t bytes() const { return bytes_; }

private:
	Coll coll_;
	size_t bytes_;
	int rank_, size_;
	size_t count_ = 0;
	std::vector<int64_t> in_, out_;
	std::vector<uint8_t> data_, gathered_;
};

double median(std::vector<double> v)
{
	std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
	return v[v.size() / 2];
}

void run_point(Coll coll, size_t bytes, const Options& options, fabtests::SyscallCounter& syscalls)
{
	int rank = 0, size = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	Point point(coll, bytes, rank, size);
	uint64_t k = 1;
	// The calls as the application makes them, and with --own-too the
	// MPI's own (index 1).
	const int kinds = options.own_too ? 2 : 1;
	bool right[2] = {true, true};

	// The verified call of each kind, then calibration: rank 0 times one
	// call of each, and the slower sets the iteration count.
	double once_us = 0;
	for (int own = 0; own < kinds; ++own) {
		point.prepare(k);
		Point::barrier(own);
		point.call(own);
		right[own] &= point.check(k++);
		Point::barrier(own);
		point.prepare(k);
		const auto start = Clock::now();
		point.call(own);
		once_us = std::max(
			once_us,
			std::chrono::duration<double, std::micro>(Clock::now() - start).count());
		right[own] &= point.check(k++);
	}
	const double target_us = options.quick ? 30e3 : 150e3;
	const int most = options.quick ? 100 : 1000;
	int iterations = std::clamp(int(target_us / std::max(once_us, 1.0)), 3, most);
	MPI_Bcast(&iterations, 1, MPI_INT, 0, MPI_COMM_WORLD);
	const int warmup = std::max(2, iterations / 10);
	const int reps = options.quick ? 3 : 5;
	const bool barrier_between = coll != Coll::barrier;

	for (int own = 0; own < kinds; ++own)
		for (int i = 0; i < warmup; ++i) {
			point.prepare(k);
			point.call(own);
			right[own] &= point.check(k++);
		}
	std::vector<double> slowest[2] = {std::vector<double>(size_t(reps), 0),
					  std::vector<double>(size_t(reps), 0)};
	for (int rep = 0; rep < reps; ++rep)
		// The two kinds alternate, and so does which goes first.
		for (int j = 0; j < kinds; ++j) {
			const int own = (rep + j) % kinds;
			double total_us = 0;
			if (options.back_to_back) {
				// Every call of the stretch has the same input: the last
				// one's output is checked as any other's.
				point.prepare(k);
				Point::barrier(own);
				const auto start = Clock::now();
				for (int i = 0; i < iterations; ++i)
					point.call(own);
				total_us = std::chrono::duration<double, std::micro>(Clock::now() -
										     start)
						   .count();
				right[own] &= point.check(k++);
			} else {
				for (int i = 0; i < iterations; ++i) {
					point.prepare(k);
					if (barrier_between)
						Point::barrier(own);
					const auto start = Clock::now();
					point.call(own);
					total_us += std::chrono::duration<double, std::micro>(
							    Clock::now() - start)
							    .count();
					right[own] &= point.check(k++);
				}
			}
			double average = total_us / iterations;
			MPI_Reduce(&average, &slowest[own][size_t(rep)], 1, MPI_DOUBLE, MPI_MAX, 0,
				   MPI_COMM_WORLD);
		}
	// System calls of the application's calls, counted in calls of their
	// own: reading the counter is one, which would slow the timed calls of
	// the other ranks.
	uint64_t calls_made = 0;
	for (int i = 0; i < iterations; ++i) {
		point.prepare(k);
		if (barrier_between)
			Point::barrier(false);
		const uint64_t before = syscalls.count();
		point.call(false);
		calls_made += syscalls.count() - before - 1; // the second read counted itself
		right[0] &= point.check(k++);
	}
	double per_call = syscalls.available() ? double(calls_made) / iterations : -1;
	double most_calls = 0;
	MPI_Reduce(&per_call, &most_calls, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	int mine[2] = {right[0], right[1]}, all_right[2] = {};
	MPI_Reduce(mine, all_right, 2, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		std::printf("point %s %zu %s %.3f %.2f\n", name_of(coll), point.bytes(),
			    all_right[0] ? "ok" : "wrong", median(slowest[0]), most_calls);
		if (options.own_too)
			std::printf("own %s %zu %s %.3f\n", name_of(coll), point.bytes(),
				    all_right[1] ? "ok" : "wrong", median(slowest[1]));
	}
	std::fflush(stdout);
}

std::vector<std::string> split(const char* list)
{
	std::vector<std::string> items;
	std::string item;
	for (const char* c = list;; ++c) {
		if (*c == ',' || !*c) {
			items.push_back(item);
			item.clear();
			if (!*c)
				break;
		} else {
			item += *c;
		}
	}
	return items;
}

bool parse(int argc, char** argv, Options& options)
{
	for (int i = 1; i < argc; ++i) {
		const std::string arg = argv[i];
		const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
		if (arg == "--quick") {
			options.quick = true;
		} else if (arg == "--own-too") {
			options.own_too = true;
		} else if (arg == "--back-to-back") {
			options.back_to_back = true;
		} else if (arg == "--sizes" && value) {
			options.sizes.clear();
			for (const std::string& s : split(value)) {
				char* end = nullptr;
				size_t bytes = std::strtoull(s.c_str(), &end, 0);
				if (*end == 'k' || *end == 'K')
					bytes <<= 10, ++end;
				else if (*end == 'm' || *end == 'M')
					bytes <<= 20, ++end;
				if (s.empty() || *end || bytes < 8)
					return false;
				options.sizes.push_back(bytes);
			}
			++i;
		} else if (arg == "--colls" && value) {
			options.colls.clear();
			for (const std::string& s : split(value)) {
				if (s == "barrier")
					options.colls.push_back(Coll::barrier);
				else if (s == "broadcast")
					options.colls.push_back(Coll::broadcast);
				else if (s == "allreduce")
					options.colls.push_back(Coll::allreduce);
				else if (s == "reduce")
					options.colls.push_back(Coll::reduce);
				else if (s == "allgather")
					options.colls.push_back(Coll::allgather);
				else
					return false;
			}
			++i;
		} else {
			return false;
		}
	}
	return true;
}

} // namespace

int main(int argc, char** argv)
{
	MPI_Init(&argc, &argv);
	Options options;
	if (!parse(argc, argv, options)) {
		std::fprintf(stderr, "usage: rcoll_mpi_coll_bench [--quick] [--sizes LIST] "
				     "[--colls barrier,broadcast,allreduce,reduce,allgather] "
				     "[--own-too] [--back-to-back]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	// Opened after MPI_Init, so that the MPI's progress threads, started
	// before, are not counted: the calls of the measured thread are.
	fabtests::SyscallCounter syscalls;
	for (Coll coll :
	     {Coll::barrier, Coll::broadcast, Coll::allreduce, Coll::reduce, Coll::allgather}) {
		if (std::find(options.colls.begin(), options.colls.end(), coll) ==
		    options.colls.end())
			continue;
		if (coll == Coll::barrier)
			run_point(coll, 0, options, syscalls);
		else
			for (size_t bytes : options.sizes)
				run_point(coll, bytes, options, syscalls);
	}
	MPI_Finalize();
	return 0;
}
