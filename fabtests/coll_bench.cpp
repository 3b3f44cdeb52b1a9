// rcoll_coll_bench: rcoll's collectives side by side with what users already
// have, in one run: Open MPI's own collectives (rcoll_mpi_coll_bench under
// mpirun) and libfabric's own "tcp;ofi_rxm" (util_coll). rcoll is measured
// twice: as configured (ranks on one host take its node-local path), against
// Open MPI's shared-memory path (ob1 + vader), and with every collective
// write through the core provider (FI_RCOLL_COLL_LOCAL=0), the path between
// hosts, against Open MPI over tcp. The system calls rcoll makes per call
// are counted on every rank.
//
//   rcoll_coll_bench [--quick] [--ranks 2,4,8] [--max-bytes N] [--sizes LIST] [--colls LIST]
//                    [--call-limit S] [--yield] [--load N] [--rcoll-only] [--no-core-path]
//                    [--no-mpi] [--no-rxm] [--no-bind]
//
// Methodology (the OSU micro-benchmarks'): per point, one verified call
// (outputs poisoned first), a calibration call that sets the iteration count,
// warm-up, then repetitions of `iterations` timed calls with a barrier
// between calls (outside the timing). Every call gets fresh input and has
// its whole output checked on every rank, both untimed. A repetition's
// figure is the slowest rank's average; the point's figure is the median
// over repetitions. The MPI baseline does the same.
//
// Every call of a point runs under a time limit: a point with a call (or a
// barrier between calls) that does not complete in time is reported as
// "hang" (util_coll hangs on some sizes), and the measurement continues
// with the next point in freshly launched ranks.
#include "coll_common.hpp"
#include "coll_values.hpp"
#include "cpu_load.hpp"
#include "mpi_baseline.hpp"
#include "syscall_counter.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <thread>
#include <type_traits>

namespace {

using namespace fabtests;
using namespace fabtests::coll;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kRcoll = "rcoll";
constexpr const char* kRxm = "tcp;ofi_rxm";
constexpr const char* kCore = "core path";   // rcoll with FI_RCOLL_COLL_LOCAL=0
constexpr const char* kOmpiSm = "ompi sm";   // Open MPI's own, shared memory
constexpr const char* kOmpiTcp = "ompi tcp"; // Open MPI's own, over tcp

// What one column measures: a provider, and the FI_RCOLL_COLL_LOCAL its
// ranks get (nullptr: the environment's).
struct Variant {
	const char* label; // column and results key
	const char* provider;
	const char* coll_local;
};
constexpr Variant kVariants[] = {
	{kRcoll, kRcoll, nullptr}, {kCore, kRcoll, "0"}, {kRxm, kRxm, nullptr}};
constexpr uint64_t kP2pTag = 0x70; // the point-to-point measurements

// The Open MPI runs beside them: ob1 with its shared-memory BTL (one host),
// and with its tcp BTL on loopback (as between hosts).
struct MpiVariant {
	const char* label;
	const char* mca;
};
constexpr MpiVariant kMpiVariants[] = {
	{kOmpiSm, "--mca pml ob1 --mca btl self,vader"},
	{kOmpiTcp, "--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo"}};

struct Options {
	bool quick = false;
	std::vector<int> ranks = {2, 4, 8};
	size_t max_bytes = 64u << 20;
	std::vector<size_t> sizes; // explicit message sizes; empty: the x4 series up to max_bytes
	std::vector<fi_collective_op> colls = {FI_BARRIER, FI_BROADCAST, FI_ALLREDUCE};
	seconds call_limit{10};
	bool with_rxm = true;  // --rcoll-only: skip tcp;ofi_rxm (its columns show "-")
	bool with_core = true; // --no-core-path: skip rcoll's core path (its columns show "-")
	bool with_mpi = true;  // --no-mpi: skip Open MPI (its columns show "-")
	int load = 0;          // --load N: N niced busy processes run beside the benchmark
	// Waiting ranks call fi_cq_read in a tight loop, as fabtests and MPI
	// progress loops do; --yield makes them give the core away on an empty
	// poll instead (Open MPI's mpi_yield_when_idle).
	bool yield_when_idle = false;
	// Up to one rank per CPU (hardware thread), rank r runs on the r-th
	// CPU, for rcoll and for Open MPI alike (--no-bind: neither is bound). Unbound, where the
	// scheduler puts two ranks decides the figures (0.25 or 0.6 us per
	// small call, from run to run).
	bool bind = true;
};

// Whether `ranks` ranks are bound to CPUs of their own.
bool bound(int ranks, const Options& options) { return options.bind && ranks <= usable_cpus(); }

// ---------------------------------------------------------------- points

struct Point {
	fi_collective_op coll;
	size_t bytes; // 0 for barrier
};

std::vector<Point> make_points(const Options& options)
{
	std::vector<Point> points;
	if (std::ranges::find(options.colls, FI_BARRIER) != options.colls.end())
		points.push_back({FI_BARRIER, 0});
	// 8 B .. max in x4 steps, and the maximum itself, unless sizes are given.
	std::vector<size_t> sizes = options.sizes;
	if (sizes.empty()) {
		for (size_t bytes = 8; bytes <= options.max_bytes; bytes *= 4)
			if (!options.quick || bytes == 8 || bytes == 2048 ||
			    bytes == (512u << 10) || bytes == (8u << 20))
				sizes.push_back(bytes);
		if (!options.quick && sizes.back() != options.max_bytes)
			sizes.push_back(options.max_bytes);
	}
	for (fi_collective_op coll : {FI_BROADCAST, FI_ALLREDUCE})
		if (std::ranges::find(options.colls, coll) != options.colls.end())
			for (size_t bytes : sizes)
				points.push_back({coll, bytes});
	return points;
}

// What one rank issues for a point: broadcast of bytes from root 0,
// allreduce FI_SUM of int64 (exact, so every result is checked).
CallSpec call_of(const Point& point)
{
	switch (point.coll) {
	case FI_BROADCAST: return {FI_BROADCAST, point.bytes, FI_UINT8, FI_SUM, 0};
	case FI_ALLREDUCE: return {FI_ALLREDUCE, point.bytes / sizeof(int64_t), FI_INT64, FI_SUM};
	default: return {FI_BARRIER};
	}
}

// ---------------------------------------------------------------- shared results

enum class Status : uint32_t { pending, ok, wrong, hang, error, crash, unsupported };

const char* status_text(Status s)
{
	switch (s) {
	case Status::pending: return "-";
	case Status::ok: return "ok";
	case Status::wrong: return "WRONG";
	case Status::hang: return "hang";
	case Status::error: return "error";
	case Status::crash: return "crash";
	case Status::unsupported: return "n/a";
	}
	return "?";
}

constexpr int kMaxPoints = 40;
constexpr int kMaxReps = 9;
constexpr int kMaxBenchRanks = 16;

struct PointResult {
	uint32_t status; // Status; written and read through std::atomic_ref
	uint32_t iterations;
	double median_us;
	double syscalls; // per timed call, on the rank that made the most; < 0: not counted
	char detail[160];
};

// Lives in the launcher's shared scratch (zeroed, so every point starts
// pending): rank 0 writes the results, any rank may mark the point it gave
// up on; the parent reads it all after the ranks ended, killed or not.
// Plain fields only (an implicit-lifetime type): flags go through
// std::atomic_ref.
struct SharedResults {
	uint32_t p2p_done;
	uint32_t points_started;       // index + 1 of the point being measured
	double latency_us;             // one-way, 8 B, best repetition
	double bandwidth_bps;          // 4 MiB messages, best repetition
	double exchange_bandwidth_bps; // the same, both directions at once: bytes per direction
	double join_us;                // fi_join of all ranks, slowest rank, median
	double rank_join_us[kMaxBenchRanks];
	double poll_ns; // one fi_cq_read that finds nothing, while a barrier waits
	PointResult points[kMaxPoints];
	double rank_average_us[kMaxReps][kMaxBenchRanks]; // the current point's repetitions
	double rank_syscalls[kMaxBenchRanks];             // per timed call; < 0: not counted
};
static_assert(sizeof(SharedResults) <= kScratchBytes);
static_assert(std::is_trivially_copyable_v<SharedResults>);

SharedResults& shared_results(Bootstrap& boot)
{
	return *reinterpret_cast<SharedResults*>(boot.scratch().data());
}

Status load_status(const PointResult& r)
{
	return static_cast<Status>(
		std::atomic_ref<const uint32_t>(r.status).load(std::memory_order_acquire));
}

void set_status(PointResult& r, Status s, const std::string& detail)
{
	std::snprintf(r.detail, sizeof r.detail, "%s", detail.c_str());
	std::atomic_ref<uint32_t>(r.status).store(static_cast<uint32_t>(s),
						  std::memory_order_release);
}

// Thrown when a point ran out of time: the ranks are abandoned.
struct PointHang : CheckFailure {
	using CheckFailure::CheckFailure;
};

// ---------------------------------------------------------------- rank side

class BenchRank {
public:
	// One thread drives each rank, as in an MPI job below
	// MPI_THREAD_MULTIPLE: the providers may skip their locks, as Open
	// MPI's own collectives do in a single-threaded job.
	static EndpointOptions endpoint_options(std::string provider)
	{
		EndpointOptions options{std::move(provider)};
		options.threading = FI_THREAD_DOMAIN;
		return options;
	}

	BenchRank(Bootstrap& boot, const Options& options, std::string provider)
		: boot_(boot), options_(options), ep_(endpoint_options(std::move(provider))),
		  world_(ep_.exchange_addresses(boot)), sync_(ep_, boot, boot.size()),
		  results_(shared_results(boot))
	{
		std::vector<int> members;
		for (int r = 0; r < boot.size(); ++r)
			members.push_back(r);
		group_ = std::make_unique<Group>(
			ep_, av_set_range(ep_, world_.front(), world_.back(), 1, world_.size()),
			members, world_, boot.rank(), "all ranks");
		// Everyone keeps progressing until every join completed, before the
		// idle ranks sleep through the point-to-point measurement: a slower
		// member's join may still need this one's side of a connection.
		sync_.wait();
	}

	void measure_p2p();
	void measure_join();
	void measure_poll();
	void run_points(const std::vector<Point>& points, size_t first);
	void finish() { sync_.wait(); }

private:
	// Waits for ctx within the point's time limit; returns the reads of
	// the CQ that found nothing.
	uint64_t wait(OpContext& ctx, const char* what);
	void post_and_wait(const CallSpec& call, GuardedBuffer* in, GuardedBuffer* out,
			   OpContext& ctx, const char* what);
	void provider_barrier();
	void run_point(size_t index, const Point& point, PointResult& result);
	void tagged_send(const void* buf, size_t len, fi_addr_t to, OpContext& ctx);
	void tagged_recv(void* buf, size_t len, fi_addr_t from, OpContext& ctx);

	Bootstrap& boot_;
	const Options& options_;
	CollEndpoint ep_;
	std::vector<fi_addr_t> world_;
	ProgressingBarrier sync_;
	SharedResults& results_;
	std::unique_ptr<Group> group_;
	SyscallCounter syscalls_;
};

uint64_t BenchRank::wait(OpContext& ctx, const char* what)
{
	const auto deadline = Clock::now() + options_.call_limit;
	uint64_t polls = 0, empty = 0;
	while (!ctx.done) {
		if (ep_.progress() == 0) {
			empty++;
			if (options_.yield_when_idle)
				sched_yield();
		}
		if (++polls % 256 == 0) {
			boot_.check_abort();
			if (Clock::now() > deadline)
				throw PointHang(strfmt(
					"%s did not complete within %lld s", what,
					static_cast<long long>(options_.call_limit.count())));
		}
	}
	if (ctx.error)
		throw CheckFailure(
			strfmt("%s: error completion: %s", what, describe_error(ctx).c_str()));
	return empty;
}

void BenchRank::post_and_wait(const CallSpec& call, GuardedBuffer* in, GuardedBuffer* out,
			      OpContext& ctx, const char* what)
{
	post(ep_, *group_, call, in, out, ctx);
	wait(ctx, what);
}

void BenchRank::provider_barrier()
{
	OpContext ctx;
	post_and_wait({FI_BARRIER}, nullptr, nullptr, ctx, "barrier between iterations");
}

void BenchRank::tagged_send(const void* buf, size_t len, fi_addr_t to, OpContext& ctx)
{
	ctx.reset();
	for (;;) {
		const ssize_t rc = fi_tsend(ep_.ep(), buf, len, nullptr, to, kP2pTag, &ctx);
		if (rc == 0) {
			ep_.track(ctx);
			return;
		}
		if (rc != -FI_EAGAIN)
			throw FabricError("fi_tsend", rc, std::source_location::current());
		ep_.progress();
	}
}

void BenchRank::tagged_recv(void* buf, size_t len, fi_addr_t from, OpContext& ctx)
{
	ctx.reset();
	for (;;) {
		const ssize_t rc = fi_trecv(ep_.ep(), buf, len, nullptr, from, kP2pTag, 0, &ctx);
		if (rc == 0) {
			ep_.track(ctx);
			return;
		}
		if (rc != -FI_EAGAIN)
			throw FabricError("fi_trecv", rc, std::source_location::current());
		ep_.progress();
	}
}

// One-way latency (half the round trip of an 8-byte tagged ping-pong) and
// bandwidth (a window of 4 MiB tagged sends, acknowledged) between ranks 0
// and 1, on the provider being measured. The best repetition of each is
// kept: the bound built from them must be a lower bound. The other ranks
// sleep in the bootstrap barrier meanwhile (they have nothing in flight),
// so that they do not compete with ranks 0 and 1 for the cores.
void BenchRank::measure_p2p()
{
	constexpr int kReceivesPostedSignal = 1;
	constexpr int kExchangePostedSignal = 2; // + rank
	const int me = boot_.rank();
	if (me <= 1) {
		const fi_addr_t peer = world_[static_cast<size_t>(1 - me)];
		const int rounds = options_.quick ? 200 : 1000;
		std::array<uint8_t, 8> ping{};
		OpContext send, recv;
		double best_latency = 1e30;
		for (int rep = 0; rep < 5; ++rep) {
			const auto start = Clock::now();
			for (int i = 0; i < rounds; ++i) {
				if (me == 0) {
					tagged_recv(ping.data(), ping.size(), peer, recv);
					tagged_send(ping.data(), ping.size(), peer, send);
					wait(send, "ping");
					wait(recv, "pong");
				} else {
					tagged_recv(ping.data(), ping.size(), peer, recv);
					wait(recv, "ping");
					tagged_send(ping.data(), ping.size(), peer, send);
					wait(send, "pong");
				}
			}
			const double us =
				std::chrono::duration<double, std::micro>(Clock::now() - start)
					.count();
			best_latency = std::min(best_latency, us / rounds / 2);
		}

		constexpr size_t kMessage = 4u << 20;
		const size_t window = options_.quick ? 4 : 16;
		std::vector<uint8_t> data(kMessage * window);
		std::vector<OpContext> ops(window);
		uint8_t ack = 0;
		OpContext ack_ctx;
		double best_bandwidth = 0;
		for (int rep = 0; rep < 3; ++rep) {
			// Receives are posted before the clock starts.
			if (me == 1) {
				for (size_t k = 0; k < window; ++k)
					tagged_recv(data.data() + k * kMessage, kMessage, peer,
						    ops[k]);
				boot_.signal_set(kReceivesPostedSignal,
						 static_cast<uint64_t>(rep) + 1);
			} else {
				boot_.signal_wait_at_least(kReceivesPostedSignal,
							   static_cast<uint64_t>(rep) + 1,
							   [&] { ep_.progress(); });
			}
			const auto start = Clock::now();
			if (me == 0) {
				tagged_recv(&ack, 1, peer, ack_ctx);
				for (size_t k = 0; k < window; ++k)
					tagged_send(data.data() + k * kMessage, kMessage, peer,
						    ops[k]);
				for (auto& op : ops)
					wait(op, "bandwidth send");
				wait(ack_ctx, "bandwidth acknowledgement");
				const double seconds =
					std::chrono::duration<double>(Clock::now() - start).count();
				best_bandwidth =
					std::max(best_bandwidth,
						 static_cast<double>(kMessage * window) / seconds);
			} else {
				for (auto& op : ops)
					wait(op, "bandwidth receive");
				tagged_send(&ack, 1, peer, ack_ctx);
				wait(ack_ctx, "bandwidth acknowledgement");
			}
		}

		// Both directions at once, as in a ring or pairwise exchange: each
		// side sends the window to the other while receiving the other's.
		// On loopback both kernel copies of every byte run on the ranks'
		// own cores, so this is the ceiling of a rank that sends and
		// receives at the same time. Rank 0 stops its clock once its own
		// receives and sends completed and rank 1 acknowledged its receives.
		std::vector<uint8_t> incoming(kMessage * window);
		std::vector<OpContext> receives(window);
		double best_exchange = 0;
		for (int rep = 0; rep < 3; ++rep) {
			const int posted_signal = kExchangePostedSignal + me;
			// One tag for all: receives match in posting order, data first.
			for (size_t k = 0; k < window; ++k)
				tagged_recv(incoming.data() + k * kMessage, kMessage, peer,
					    receives[k]);
			tagged_recv(&ack, 1, peer, ack_ctx);
			boot_.signal_set(posted_signal, static_cast<uint64_t>(rep) + 1);
			boot_.signal_wait_at_least(kExchangePostedSignal + (1 - me),
						   static_cast<uint64_t>(rep) + 1,
						   [&] { ep_.progress(); });
			const auto start = Clock::now();
			for (size_t k = 0; k < window; ++k)
				tagged_send(data.data() + k * kMessage, kMessage, peer, ops[k]);
			for (size_t k = 0; k < window; ++k) {
				wait(receives[k], "exchange receive");
				wait(ops[k], "exchange send");
			}
			OpContext ack_send;
			tagged_send(&ack, 1, peer, ack_send);
			wait(ack_ctx, "exchange acknowledgement");
			wait(ack_send, "exchange acknowledgement");
			const double seconds =
				std::chrono::duration<double>(Clock::now() - start).count();
			best_exchange = std::max(best_exchange,
						 static_cast<double>(kMessage * window) / seconds);
		}
		if (me == 0) {
			results_.latency_us = best_latency;
			results_.bandwidth_bps = best_bandwidth;
			results_.exchange_bandwidth_bps = best_exchange;
			std::atomic_ref<uint32_t>(results_.p2p_done)
				.store(1, std::memory_order_release);
		}
	}
	// Ranks 0 and 1 end with both sides of the acknowledgement complete:
	// nothing is in flight, so the sleeping barrier cannot stall anyone.
	boot_.barrier(seconds(300));
}

// What joining costs (the MPI offload library joins its groups lazily, at a
// communicator's first collective): from a common start, every rank joins a
// new group of all ranks and waits for FI_JOIN_COMPLETE; the slowest rank's
// time, median of the repetitions.
void BenchRank::measure_join()
{
	const int me = boot_.rank();
	std::vector<int> members;
	for (int r = 0; r < boot_.size(); ++r)
		members.push_back(r);
	const int reps = options_.quick ? 3 : 7;
	std::vector<double> slowest;
	for (int rep = 0; rep < reps; ++rep) {
		sync_.wait();
		const auto start = Clock::now();
		{
			Group joined(
				ep_,
				av_set_range(ep_, world_.front(), world_.back(), 1, world_.size()),
				members, world_, me, "join measurement");
			results_.rank_join_us[me] =
				std::chrono::duration<double, std::micro>(Clock::now() - start)
					.count();
			// Everyone joined before anyone closes.
			sync_.wait();
		}
		if (me == 0)
			slowest.push_back(*std::max_element(results_.rank_join_us,
							    results_.rank_join_us + boot_.size()));
	}
	if (me == 0) {
		std::nth_element(slowest.begin(), slowest.begin() + reps / 2, slowest.end());
		results_.join_us = slowest[static_cast<size_t>(reps / 2)];
	}
	sync_.wait();
}

// What one poll of a waiting rank costs: rank 0 reads its CQ in a barrier
// the others enter only kPollWait later (they sleep meanwhile, so that
// with more ranks than CPUs rank 0 keeps one), counting the reads that
// found nothing (with --yield, each with its yield, as in every wait). A
// waiting rank notices its peers' arrival half a poll late on average, and
// what it spends per poll it takes from them when they share its CPU.
void BenchRank::measure_poll()
{
	constexpr auto kPollWait = std::chrono::milliseconds(100);
	constexpr const char* kWhat = "the poll measurement's barrier";
	sync_.wait();
	OpContext ctx;
	if (boot_.rank() != 0) {
		std::this_thread::sleep_for(kPollWait);
		post_and_wait({FI_BARRIER}, nullptr, nullptr, ctx, kWhat);
	} else {
		post(ep_, *group_, {FI_BARRIER}, nullptr, nullptr, ctx);
		const auto start = Clock::now();
		const uint64_t empty = wait(ctx, kWhat);
		const double ns =
			std::chrono::duration<double, std::nano>(Clock::now() - start).count();
		results_.poll_ns = ns / static_cast<double>(std::max<uint64_t>(empty, 1));
	}
	sync_.wait();
}

void BenchRank::run_points(const std::vector<Point>& points, size_t first)
{
	for (size_t k = first; k < points.size(); ++k) {
		PointResult& result = results_.points[k];
		if (boot_.rank() == 0)
			std::atomic_ref<uint32_t>(results_.points_started)
				.store(static_cast<uint32_t>(k + 1));
		sync_.wait();
		try {
			run_point(k, points[k], result);
		} catch (const PointHang& hang) {
			set_status(result, Status::hang, hang.what());
			throw;
		} catch (const CheckFailure& failure) {
			// An error completion leaves the group in an unknown state.
			if (load_status(result) == Status::pending)
				set_status(result, Status::error, failure.what());
			throw;
		}
		sync_.wait();
	}
}

void BenchRank::run_point(size_t index, const Point& point, PointResult& result)
{
	const CallSpec call = call_of(point);
	const int me = boot_.rank();
	const int p = boot_.size();
	fi_collective_attr attr{};
	attr.datatype = call.coll == FI_BARRIER ? FI_VOID : call.type;
	attr.op = call.coll == FI_ALLREDUCE ? call.op : FI_NOOP;
	if (fi_query_collective(ep_.domain(), call.coll, &attr, 0) != 0) {
		if (me == 0)
			set_status(result, Status::unsupported,
				   "fi_query_collective: not supported");
		return;
	}

	GuardedBuffer in, out;
	const BufferBytes bytes = buffer_bytes(call, p, me);
	in.prepare(bytes.input);
	out.prepare(bytes.output);
	GuardedBuffer* input = call.coll == FI_ALLREDUCE ? &in : nullptr;
	GuardedBuffer* output = call.coll == FI_BARRIER ? nullptr : &out;
	const uint64_t seed = make_seed(point.coll, point.bytes);

	// Call k's operands: closed-form inputs (allreduce) or the root's
	// pattern (broadcast), new for every call, so that a call that moved
	// nothing, or the previous call's data, fails the check.
	auto prepare = [&](uint64_t k) {
		if (call.coll == FI_ALLREDUCE)
			fill_reduction_input(call.type, call.op, in.span(), k, me, p);
		if (call.coll == FI_BROADCAST && me == call.root)
			fill_pattern(out.bytes(), block_seed(make_seed(seed, k), call.root));
	};
	// What is wrong with call k's output on this rank ("" when nothing).
	auto verify = [&](uint64_t k) -> std::string {
		if (call.coll == FI_ALLREDUCE) {
			if (auto bad = check_reduction_output(call.type, call.op, out.span(), k, p))
				return *bad;
		} else if (call.coll == FI_BROADCAST) {
			if (auto at = find_pattern_mismatch(
				    out.bytes(), block_seed(make_seed(seed, k), call.root)))
				return strfmt("byte %zu of %zu differs from the root's", *at,
					      out.size());
		}
		return "";
	};

	// The verified call: outputs start as noise, and nothing may be
	// written beside the buffers.
	uint64_t k = 0;
	fill_pattern(out.bytes(), make_seed(seed, 0x6E6F, static_cast<uint64_t>(me)));
	prepare(k);
	OpContext ctx;
	provider_barrier();
	post_and_wait(call, input, output, ctx, "the verified call");
	std::string wrong;
	if (!(ctx.entry.flags & FI_COLLECTIVE))
		wrong = "completion without FI_COLLECTIVE";
	else
		wrong = verify(k);
	try {
		in.expect_guards("input");
		out.expect_guards("output");
	} catch (const CheckFailure& overrun) {
		wrong = overrun.what();
	}
	uint64_t wrong_call = k;
	// Keeps the first wrong call's description.
	auto check = [&](uint64_t call_index) {
		if (wrong.empty() && !(wrong = verify(call_index)).empty())
			wrong_call = call_index;
	};
	auto report_wrong = [&] {
		set_status(result, Status::wrong,
			   strfmt("rank %d, call %llu: %s", me,
				  static_cast<unsigned long long>(wrong_call), wrong.c_str()));
	};
	if (!wrong.empty())
		report_wrong();
	// Every rank learns whether any rank saw a wrong result: then they all
	// move on to the next point together (the group itself still works).
	sync_.wait();
	if (load_status(result) == Status::wrong)
		return;

	// Calibration: rank 0 picks the iteration count from one timed call so
	// that a repetition takes about `target`.
	prepare(++k);
	provider_barrier();
	auto start = Clock::now();
	post_and_wait(call, input, output, ctx, "the calibration call");
	const double once_us =
		std::chrono::duration<double, std::micro>(Clock::now() - start).count();
	check(k);
	// The signal carries (point index + 1, iterations), growing point by point.
	constexpr int kIterationsSignal = 0;
	const uint64_t tag = index + 1;
	if (me == 0) {
		const double target_us = options_.quick ? 30e3 : 150e3;
		const int most = options_.quick ? 100 : 1000;
		const int iterations =
			std::clamp(static_cast<int>(target_us / std::max(once_us, 1.0)), 3, most);
		boot_.signal_set(kIterationsSignal, tag << 32 | static_cast<uint64_t>(iterations));
	}
	boot_.signal_wait_at_least(kIterationsSignal, tag << 32, [&] { ep_.progress(); });
	const int iterations = static_cast<int>(boot_.signal_get(kIterationsSignal) & 0xFFFFFFFF);
	const int warmup = std::max(2, iterations / 10);
	const int reps = options_.quick ? 3 : 5;
	const bool barrier_between = call.coll != FI_BARRIER;

	// Every call gets fresh input and has its whole output checked on every
	// rank, both outside the timing.
	for (int i = 0; i < warmup; ++i) {
		prepare(++k);
		post_and_wait(call, input, output, ctx, "a warm-up call");
		check(k);
	}
	for (int rep = 0; rep < reps; ++rep) {
		double total_us = 0;
		for (int i = 0; i < iterations; ++i) {
			prepare(++k);
			if (barrier_between)
				provider_barrier();
			start = Clock::now();
			post_and_wait(call, input, output, ctx, "a timed call");
			total_us += std::chrono::duration<double, std::micro>(Clock::now() - start)
					    .count();
			check(k);
		}
		results_.rank_average_us[rep][me] = total_us / iterations;
	}
	// System calls, counted in calls of their own: reading the counter is
	// one, which would slow the timed calls of the other ranks.
	uint64_t syscalls = 0;
	for (int i = 0; i < iterations; ++i) {
		prepare(++k);
		if (barrier_between)
			provider_barrier();
		const uint64_t syscalls_before = syscalls_.count();
		post_and_wait(call, input, output, ctx, "a counted call");
		syscalls +=
			syscalls_.count() - syscalls_before - 1; // the second read counted itself
		check(k);
	}
	results_.rank_syscalls[me] =
		syscalls_.available() ? static_cast<double>(syscalls) / iterations : -1;
	if (!wrong.empty())
		report_wrong();
	sync_.wait();
	if (me == 0) {
		std::vector<double> slowest(static_cast<size_t>(reps));
		for (int rep = 0; rep < reps; ++rep)
			slowest[static_cast<size_t>(rep)] = *std::max_element(
				results_.rank_average_us[rep], results_.rank_average_us[rep] + p);
		std::nth_element(slowest.begin(), slowest.begin() + reps / 2, slowest.end());
		result.median_us = slowest[static_cast<size_t>(reps / 2)];
		result.iterations = static_cast<uint32_t>(iterations);
		result.syscalls =
			*std::max_element(results_.rank_syscalls, results_.rank_syscalls + p);
		if (load_status(result) != Status::wrong)
			set_status(result, Status::ok, "");
	}
}

// ---------------------------------------------------------------- parent side

struct Measured {
	double latency_us = 0;
	double bandwidth_bps = 0;
	double exchange_bandwidth_bps = 0;
	double join_us = 0;
	double poll_ns = 0;
	std::vector<Status> status;
	std::vector<double> median_us;
	std::vector<double> syscalls;
	std::vector<std::string> detail;
};

Measured pending_for(size_t points)
{
	Measured m;
	m.status.assign(points, Status::pending);
	m.median_us.assign(points, 0);
	m.syscalls.assign(points, -1);
	m.detail.assign(points, "");
	return m;
}

// Runs every point for one provider and rank count, relaunching the ranks
// after a point that hung or crashed.
Measured measure(const std::string& provider, int ranks, const std::vector<Point>& points,
		 const Options& options)
{
	Measured m = pending_for(points.size());
	size_t first = 0;
	while (first < points.size()) {
		const bool with_p2p = first == 0;
		// A safety net only: hangs are caught per call, well before.
		const auto budget = seconds(120) + options.call_limit *
							   static_cast<int>(points.size() - first) *
							   10;
		std::vector<std::byte> scratch;
		const bool bind = bound(ranks, options);
		const LaunchResult launch = launch_ranks(
			ranks, budget,
			[&](Bootstrap& boot) {
				if (bind && !bind_to_cpu(boot.rank()))
					boot.note("could not bind the rank to a CPU");
				auto rank = std::make_unique<BenchRank>(boot, options, provider);
				try {
					if (with_p2p) {
						rank->measure_p2p();
						rank->measure_join();
						rank->measure_poll();
					}
					rank->run_points(points, first);
					rank->finish();
				} catch (const std::exception& failure) {
					// A provider that failed may never finish closing its
					// endpoint (util_coll's spins in fi_close once it has
					// leaked an internal completion): leave without closing,
					// the kernel reclaims it all. The point's status and
					// its note in the table say what failed.
					boot.note(failure.what());
					std::fflush(nullptr);
					std::_Exit(1);
				}
			},
			&scratch);
		// The ranks are gone: the copy of their scratch is ours alone.
		SharedResults shared;
		std::memcpy(&shared, scratch.data(), sizeof shared);
		if (with_p2p && shared.p2p_done) {
			m.latency_us = shared.latency_us;
			m.bandwidth_bps = shared.bandwidth_bps;
			m.exchange_bandwidth_bps = shared.exchange_bandwidth_bps;
			m.join_us = shared.join_us;
			m.poll_ns = shared.poll_ns;
		}
		for (size_t k = first; k < points.size(); ++k) {
			m.status[k] = static_cast<Status>(shared.points[k].status);
			m.median_us[k] = shared.points[k].median_us;
			m.syscalls[k] = shared.points[k].syscalls;
			m.detail[k] = shared.points[k].detail;
		}
		if (launch.outcome == Outcome::passed)
			break;
		if (shared.points_started <= first) {
			// Lost before its first point (join or p2p): nothing more to learn.
			for (size_t k = first; k < points.size(); ++k) {
				m.status[k] = Status::error;
				m.detail[k] = launch.detail;
			}
			break;
		}
		// The launch ended inside this point; measure on from the next one.
		const size_t stuck = shared.points_started - 1;
		if (m.status[stuck] == Status::pending) {
			const bool hung = launch.detail.find("did not complete within") !=
						  std::string::npos ||
					  launch.detail.find("watchdog") != std::string::npos;
			m.status[stuck] = hung ? Status::hang : Status::crash;
			m.detail[stuck] = launch.detail;
		}
		first = stuck + 1;
	}
	return m;
}

// The name rcoll_mpi_coll_bench gives the point's collective.
const char* mpi_name(const Point& point)
{
	return point.coll == FI_BARRIER     ? "barrier"
	       : point.coll == FI_BROADCAST ? "broadcast"
					    : "allreduce";
}

// The sizes and collectives of `points` as rcoll_mpi_coll_bench arguments.
std::string mpi_arguments(const std::vector<Point>& points, const Options& options)
{
	std::string colls, sizes;
	for (const Point& point : points) {
		const char* name = mpi_name(point);
		if (colls.find(name) == std::string::npos)
			colls += std::string(colls.empty() ? "" : ",") + name;
		const std::string size = std::to_string(point.bytes);
		if (point.bytes && ("," + sizes + ",").find("," + size + ",") == std::string::npos)
			sizes += (sizes.empty() ? "" : ",") + size;
	}
	std::string args = options.quick ? "--quick " : "";
	args += "--colls " + colls;
	if (!sizes.empty())
		args += " --sizes " + sizes;
	return args;
}

// One Open MPI job for every point, its results matched to them.
Measured measure_mpi(const MpiBaseline& baseline, const std::string& command,
		     const std::vector<Point>& points, const Options& options)
{
	Measured m = pending_for(points.size());
	const auto limit = seconds(120) + options.call_limit * static_cast<int>(points.size()) * 10;
	const MpiRun run = baseline.run(command, limit);
	for (size_t k = 0; k < points.size(); ++k) {
		const char* name = mpi_name(points[k]);
		bool found = false;
		for (const MpiPoint& r : run.points) {
			if (r.coll != name || r.bytes != points[k].bytes)
				continue;
			found = true;
			m.status[k] = r.right ? Status::ok : Status::wrong;
			m.median_us[k] = r.median_us;
			m.syscalls[k] = r.syscalls;
			if (!r.right)
				m.detail[k] = "a result differed from the expected one";
		}
		if (!found) {
			m.status[k] = Status::error;
			m.detail[k] = run.error.empty() ? "no result" : run.error;
		}
	}
	return m;
}

// ---------------------------------------------------------------- report

std::string size_text(size_t bytes)
{
	if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
		return strfmt("%zu MiB", bytes >> 20);
	if (bytes >= 1024 && bytes % 1024 == 0)
		return strfmt("%zu KiB", bytes >> 10);
	return strfmt("%zu B", bytes);
}

std::string time_text(Status s, double us)
{
	if (s != Status::ok)
		return status_text(s);
	if (us >= 1e5)
		return strfmt("%.0f", us);
	if (us >= 100)
		return strfmt("%.1f", us);
	return strfmt("%.2f", us);
}

// Bytes copied per second by one memcpy on one core, buffers far larger than
// the caches: best of a few.
double memcpy_bandwidth()
{
	constexpr size_t kBytes = 64u << 20;
	std::vector<uint8_t> from(kBytes, 1), to(kBytes, 2);
	double best = 0;
	for (int rep = 0; rep < 5; ++rep) {
		from[0] = static_cast<uint8_t>(rep); // each copy carries something new
		const auto start = Clock::now();
		std::memcpy(to.data(), from.data(), kBytes);
		const double s = std::chrono::duration<double>(Clock::now() - start).count();
		best = std::max(best, static_cast<double>(kBytes) / s);
	}
	if (to[0] != 4) // the copies happened
		std::abort();
	return best;
}

// The least a 2-rank barrier on this host costs at the moment: two
// processes on the first two usable CPUs (where ranks 0 and 1 run when
// bound) each raise a flag on a cache line of its own and wait for the
// other's; microseconds per exchange, the best of a few batches (a batch
// lasts milliseconds: an interrupt or a stolen time slice spoils one), NaN
// where it cannot run. On a virtual machine the hypervisor may place those
// two CPUs on one core's hyperthreads, on two cores or farther apart, and
// move them within seconds (here: 0.03, 0.07 and 0.29 us), and a
// sub-microsecond call moves with them: measured before and after each
// job, it says which placement the job met.
double flag_exchange_us()
{
	constexpr long kWarmUp = 1000, kBatch = 10000, kBatches = 10;
	constexpr long kLast = 1 + kWarmUp + kBatch * kBatches;
	// A flag that stays put this long: the other side is gone.
	static constexpr auto kGiveUp = seconds(2);
	if (usable_cpus() < 2)
		return std::nan("");
	// Two lines apart: the adjacent-line prefetcher pairs 64-byte lines.
	struct alignas(128) Flag {
		std::atomic<long> raised{0};
	};
	void* page = mmap(nullptr, sizeof(Flag) * 2, PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return std::nan("");
	Flag* flags = new (page) Flag[2];
	// Side `me` raises its flag to each k of [from, to) and waits for the
	// other's; false when the other's stays put for kGiveUp (the clock is
	// read only by a wait that already lasted thousands of spins).
	const auto exchange = [flags](int me, long from, long to) {
		for (long k = from; k < to; ++k) {
			flags[me].raised.store(k, std::memory_order_release);
			std::optional<Clock::time_point> limit;
			for (long spins = 0;
			     flags[1 - me].raised.load(std::memory_order_acquire) < k;) {
				if (++spins % 4096 != 0)
					continue;
				const auto now = Clock::now();
				if (!limit)
					limit = now + kGiveUp;
				else if (now > *limit)
					return false;
			}
		}
		return true;
	};
	cpu_set_t saved;
	if (sched_getaffinity(0, sizeof(saved), &saved) != 0) {
		munmap(page, sizeof(Flag) * 2);
		return std::nan("");
	}
	const pid_t child = fork();
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(bind_to_cpu(1) && exchange(1, 1, kLast) ? 0 : 1);
	}
	double best = std::nan("");
	if (child > 0 && bind_to_cpu(0) && exchange(0, 1, 1 + kWarmUp)) {
		for (long batch = 0; batch < kBatches; ++batch) {
			const long from = 1 + kWarmUp + batch * kBatch;
			const auto start = Clock::now();
			if (!exchange(0, from, from + kBatch)) {
				best = std::nan("");
				break;
			}
			const double us =
				std::chrono::duration<double, std::micro>(Clock::now() - start)
					.count() /
				kBatch;
			best = std::isnan(best) ? us : std::min(best, us);
		}
	}
	// Ranks forked later inherit this process's affinity: pinned to one
	// CPU, every later job would run there.
	if (sched_setaffinity(0, sizeof(saved), &saved) != 0) {
		std::fprintf(stderr, "rcoll_coll_bench: cannot restore the CPU affinity: %s\n",
			     std::strerror(errno));
		std::exit(2);
	}
	if (child > 0) {
		if (std::isnan(best))
			kill(child, SIGKILL);
		while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
		}
	}
	munmap(page, sizeof(Flag) * 2);
	return best;
}

// The flag exchange for a job whose ranks 0 and 1 are bound to the first
// two CPUs (Open MPI's through mpirun's mapping, which on a host with
// hyperthreads may number them otherwise); nullopt for any other job.
std::optional<double> flag_exchange_if_bound(int ranks, const Options& options)
{
	if (ranks < 2 || !bound(ranks, options))
		return std::nullopt;
	return flag_exchange_us();
}

// For a job line: the flag exchange before and after the job.
std::string flag_exchange_text(std::optional<double> before, std::optional<double> after)
{
	if (!before || !after)
		return "";
	const auto figure = [](double us) {
		return std::isnan(us) ? std::string("n/a") : strfmt("%.3f", us);
	};
	return strfmt("flag exchange CPU 0-1 %s us before, %s after", figure(*before).c_str(),
		      figure(*after).c_str());
}

void print_table(fi_collective_op coll, const std::vector<Point>& points, const Options& options,
		 std::map<std::pair<std::string, int>, Measured>& results)
{
	const char* what = coll == FI_BARRIER     ? "fi_barrier / MPI_Barrier"
			   : coll == FI_BROADCAST ? "fi_broadcast / MPI_Bcast, root 0, bytes"
						  : "fi_allreduce / MPI_Allreduce, sum of int64";
	std::printf("\n## %s (median of repetitions, slowest rank, microseconds per call)\n\n",
		    what);
	std::printf("%-9s %5s | %9s %8s %9s %8s | %9s %8s %9s %8s | %11s %8s  %s\n", "size",
		    "ranks", "rcoll", "sys/call", kOmpiSm, "rcoll/sm", kCore, "sys/call", kOmpiTcp,
		    "core/tcp", kRxm, "core/rxm", "notes");
	// The notes column shortens each failure; every distinct one is
	// printed whole below the table.
	std::set<std::string> failures;
	for (size_t k = 0; k < points.size(); ++k) {
		if (points[k].coll != coll)
			continue;
		for (int p : options.ranks) {
			const Measured* m[] = {&results[{kRcoll, p}], &results[{kOmpiSm, p}],
					       &results[{kCore, p}], &results[{kOmpiTcp, p}],
					       &results[{kRxm, p}]};
			const char* labels[] = {kRcoll, kOmpiSm, kCore, kOmpiTcp, kRxm};
			auto ok = [&](int i) { return m[i]->status[k] == Status::ok; };
			auto time = [&](int i) {
				return time_text(m[i]->status[k], m[i]->median_us[k]);
			};
			auto ratio = [&](int a, int b) {
				return ok(a) && ok(b) && m[b]->median_us[k] > 0
					       ? strfmt("%.2f",
							m[a]->median_us[k] / m[b]->median_us[k])
					       : std::string("-");
			};
			auto calls = [&](int i) {
				return ok(i) && m[i]->syscalls[k] >= 0
					       ? strfmt("%.2f", m[i]->syscalls[k])
					       : std::string("-");
			};
			std::string notes;
			for (int i = 0; i < 5; ++i)
				if (m[i]->status[k] != Status::ok && !m[i]->detail[k].empty()) {
					notes += strfmt("%s%s: %.100s", notes.empty() ? "" : "; ",
							labels[i], m[i]->detail[k].c_str());
					failures.insert(strfmt("%s, %d ranks: %s", labels[i], p,
							       m[i]->detail[k].c_str()));
				}
			std::printf("%-9s %5d | %9s %8s %9s %8s | %9s %8s %9s %8s | %11s %8s  %s\n",
				    coll == FI_BARRIER ? "-" : size_text(points[k].bytes).c_str(),
				    p, time(0).c_str(), calls(0).c_str(), time(1).c_str(),
				    ratio(0, 1).c_str(), time(2).c_str(), calls(2).c_str(),
				    time(3).c_str(), ratio(2, 3).c_str(), time(4).c_str(),
				    ratio(2, 4).c_str(), notes.c_str());
		}
	}
	if (!failures.empty())
		std::printf("\nIn full:\n");
	for (const std::string& failure : failures)
		std::printf("  %s\n", failure.c_str());
}

void print_how_to_read(const Options& options)
{
	std::printf(
		"\nHow to read these tables:\n"
		"  rcoll            rcoll's time per call in microseconds: per repetition the "
		"slowest rank's average\n"
		"                   over the timed calls (a barrier separates calls, untimed), "
		"then the median of the\n"
		"                   repetitions. Lower is better. Its ranks, all on this host, "
		"take its node-local path:\n"
		"                   they write into each other's memory, not through the core.\n"
		"  ompi sm          Open MPI's own collectives, measured the same way "
		"(rcoll_mpi_coll_bench, ob1 + vader,\n"
		"                   the mpirun lines above); rcoll/sm below 1: rcoll is faster.\n"
		"  core path        rcoll with FI_RCOLL_COLL_LOCAL=0: every collective write goes "
		"through the core\n"
		"                   provider (tcp), as between hosts; against Open MPI over tcp "
		"(ob1 + tcp on loopback)\n"
		"                   in core/tcp, and libfabric's tcp;ofi_rxm (util_coll) in "
		"core/rxm.\n"
		"  sys/call         system calls per timed call, on the rank that made the most "
		"(a kernel counter,\n"
		"                   raw_syscalls:sys_enter; \"-\" when it cannot be opened).\n"
		"  WRONG            some call's result differed from the expected one on some "
		"rank (every call is\n"
		"                   checked), or the verified call wrote outside its buffer;\n"
		"  hang             a call of the point did not complete within %lld s; crash: a "
		"rank died;\n"
		"  error            an error completion, or a completion for an operation never "
		"posted;\n"
		"                   libfabric 1.17's tcp;ofi_rxm shows it above rxm's eager size "
		"(16 KiB):\n"
		"                   rxm hands util_coll only its eager transfers back, and reports "
		"larger ones\n"
		"                   to the application's queue with util_coll's own context "
		"(prov/rxm/src/rxm_cq.c);\n"
		"  n/a              the provider's fi_query_collective says it lacks the call.\n"
		"All ranks run on this host and share its cores (other work on the machine "
		"included): with more\n"
		"ranks than cores every busy-polling rank competes for the CPU, so absolute "
		"figures at 4 and 8\n"
		"ranks mostly measure scheduling, and ratios matter more than microseconds.\n"
		"%s"
		"Waiting ranks %s\n",
		static_cast<long long>(options.call_limit.count()),
		options.bind ? "The flag exchange on a job line whose ranks are bound, measured "
			       "before and "
			       "after the job, is the\n"
			       "least a 2-rank barrier costs at that moment: two processes on the "
			       "first two "
			       "CPUs raise a flag\n"
			       "each and wait for the other's. On a virtual machine it may jump "
			       "between a "
			       "few values within\n"
			       "seconds (the hypervisor places the two CPUs on one core's "
			       "hyperthreads, on "
			       "two cores, ...), and\n"
			       "sub-microsecond figures jump with it: compare them only between "
			       "jobs that "
			       "met about the same value.\n"
			     : "",
		options.yield_when_idle ? "yield the core after every empty fi_cq_read (--yield), "
					  "as Open MPI's mpi_yield_when_idle does."
					: "call fi_cq_read in a tight loop, as fabtests and MPI "
					  "progress loops do.");
}

std::vector<std::string> split_list(const std::string& list)
{
	std::vector<std::string> items;
	for (size_t pos = 0; pos <= list.size();) {
		const size_t comma = std::min(list.find(',', pos), list.size());
		items.push_back(list.substr(pos, comma - pos));
		pos = comma + 1;
	}
	return items;
}

void usage(FILE* out)
{
	std::fprintf(
		out,
		"usage: rcoll_coll_bench [--quick] [--ranks LIST] [--max-bytes N] [--sizes "
		"LIST] [--colls LIST]\n"
		"                        [--call-limit SECONDS] [--yield] [--load N] "
		"[--rcoll-only] [--no-core-path] [--no-mpi] [--no-rxm] [--no-bind]\n"
		"  --quick          4 sizes, fewer iterations and repetitions\n"
		"  --ranks LIST     comma-separated rank counts (default 2,4,8)\n"
		"  --max-bytes N    largest message (default 64 MiB)\n"
		"  --sizes LIST     comma-separated message sizes instead of the x4 series "
		"(suffixes k, m: KiB, MiB)\n"
		"  --colls LIST     comma-separated subset of barrier,broadcast,allreduce "
		"(default all)\n"
		"  --call-limit S   time limit of one call (default 10 s); a point with a "
		"slower call is a \"hang\"\n"
		"  --rcoll-only     measure rcoll alone (no tcp;ofi_rxm, no Open MPI)\n"
		"  --no-rxm         skip libfabric's tcp;ofi_rxm (its columns show \"-\")\n"
		"  --no-mpi         skip Open MPI's own collectives (their columns show "
		"\"-\")\n"
		"  --load N         run N busy processes at nice 19 beside the benchmark\n"
		"  --no-core-path   skip rcoll with FI_RCOLL_COLL_LOCAL=0 (the core path "
		"columns show \"-\")\n"
		"  --yield          waiting ranks yield the core on an empty poll (default: "
		"they spin on fi_cq_read)\n"
		"  --no-bind        leave every rank unbound (default: with no more ranks than "
		"CPUs, rank r of\n"
		"                   rcoll and of Open MPI runs on the r-th CPU)\n"
		"rcoll is found through FI_PROVIDER_PATH (the build tree's .libs).\n");
}

} // namespace

int main(int argc, char** argv)
{
	Options options;
	for (int i = 1; i < argc; ++i) {
		const std::string_view arg = argv[i];
		auto value = [&] { return option_value(i, argc, argv); };
		if (arg == "--quick") {
			options.quick = true;
		} else if (arg == "--rcoll-only") {
			options.with_rxm = false;
			options.with_mpi = false;
		} else if (arg == "--no-mpi") {
			options.with_mpi = false;
		} else if (arg == "--no-rxm") {
			options.with_rxm = false;
		} else if (arg == "--load") {
			options.load = std::clamp(std::atoi(value()), 0, 64);
		} else if (arg == "--no-core-path") {
			options.with_core = false;
		} else if (arg == "--yield") {
			options.yield_when_idle = true;
		} else if (arg == "--no-bind") {
			options.bind = false;
		} else if (arg == "--ranks") {
			options.ranks.clear();
			for (const std::string& item : split_list(value())) {
				const int p = std::atoi(item.c_str());
				if (p < 2 || p > kMaxBenchRanks) {
					std::fprintf(stderr, "--ranks: each count must be 2..%d\n",
						     kMaxBenchRanks);
					return 2;
				}
				options.ranks.push_back(p);
			}
		} else if (arg == "--max-bytes") {
			options.max_bytes = std::strtoull(value(), nullptr, 0);
			if (options.max_bytes < 8) {
				std::fprintf(stderr, "--max-bytes must be at least 8\n");
				return 2;
			}
		} else if (arg == "--sizes") {
			options.sizes.clear();
			for (const std::string& item : split_list(value())) {
				char* end = nullptr;
				size_t bytes = std::strtoull(item.c_str(), &end, 0);
				if (end && (*end == 'k' || *end == 'K'))
					bytes <<= 10, ++end;
				else if (end && (*end == 'm' || *end == 'M'))
					bytes <<= 20, ++end;
				if (item.empty() || !end || *end || bytes < 8) {
					std::fprintf(
						stderr,
						"--sizes: '%s' is not a size of at least 8 bytes\n",
						item.c_str());
					return 2;
				}
				options.sizes.push_back(bytes);
			}
		} else if (arg == "--colls") {
			options.colls.clear();
			for (const std::string& item : split_list(value())) {
				if (item == "barrier")
					options.colls.push_back(FI_BARRIER);
				else if (item == "broadcast")
					options.colls.push_back(FI_BROADCAST);
				else if (item == "allreduce")
					options.colls.push_back(FI_ALLREDUCE);
				else {
					std::fprintf(stderr, "--colls: unknown collective '%s'\n",
						     item.c_str());
					return 2;
				}
			}
		} else if (arg == "--call-limit") {
			options.call_limit = seconds(std::max(1, std::atoi(value())));
		} else if (arg == "--help" || arg == "-h") {
			usage(stdout);
			return 0;
		} else {
			std::fprintf(stderr, "unknown option: %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (options.quick)
		options.max_bytes = std::min<size_t>(options.max_bytes, 8u << 20);

	prefer_loopback_interfaces();
	const std::vector<Point> points = make_points(options);
	if (points.size() > static_cast<size_t>(kMaxPoints)) {
		std::fprintf(stderr, "%zu points exceed the %d the shared results hold\n",
			     points.size(), kMaxPoints);
		return 2;
	}
	std::map<std::pair<std::string, int>, Measured> results;
	std::printf("# rcoll_coll_bench%s: rcoll vs Open MPI's own and tcp;ofi_rxm collectives, "
		    "ranks on this host\n",
		    options.quick ? " --quick" : "");
	std::printf("# memcpy on one core: %.2f GB/s (64 MiB, best of 5)\n",
		    memcpy_bandwidth() / 1e9);
	if (options.bind)
		std::printf(
			"# rank r of rcoll and of Open MPI runs on CPU r of %d wherever the ranks "
			"do not outnumber them (--no-bind: unbound)\n",
			usable_cpus());
	else
		std::printf("# ranks unbound (--no-bind)\n");
	const SyscallCounter probe;
	if (!probe.available())
		std::printf("# system calls are not counted: %s\n", probe.why_not().c_str());
	const MpiBaseline baseline;
	if (options.with_mpi && !baseline.available())
		std::printf("# Open MPI's columns stay empty: %s\n", baseline.why_not().c_str());
	std::optional<CpuLoad> load;
	if (options.load) {
		load.emplace(options.load);
		std::printf("# %d busy processes at nice 19 run beside the benchmark (--load)\n",
			    options.load);
	}
	std::printf("# per rank count: rcoll's point-to-point figures (ranks 0 and 1, best of the "
		    "repetitions), fi_join of all ranks (slowest rank, median), one fi_cq_read "
		    "that finds nothing while rank 0 waits in a barrier, the Open MPI jobs:\n");
	for (int p : options.ranks) {
		for (const Variant& variant : kVariants) {
			const std::string label = variant.label;
			if ((label == kRxm && !options.with_rxm) ||
			    (label == kCore && !options.with_core)) {
				results[{label, p}] = pending_for(points.size());
				continue;
			}
			const std::optional<double> exchange_before =
				flag_exchange_if_bound(p, options);
			const auto started = Clock::now();
			// The ranks, forked in measure(), inherit the environment.
			const char* inherited = std::getenv("FI_RCOLL_COLL_LOCAL");
			const std::string saved = inherited ? inherited : "";
			if (variant.coll_local)
				setenv("FI_RCOLL_COLL_LOCAL", variant.coll_local, 1);
			results[{label, p}] = measure(variant.provider, p, points, options);
			if (variant.coll_local && inherited)
				setenv("FI_RCOLL_COLL_LOCAL", saved.c_str(), 1);
			else if (variant.coll_local)
				unsetenv("FI_RCOLL_COLL_LOCAL");
			const Measured& m = results[{label, p}];
			const std::string exchange = flag_exchange_text(
				exchange_before, flag_exchange_if_bound(p, options));
			std::printf(
				"#   %d ranks, %-11s one-way 8 B %7.2f us, bandwidth %6.2f GB/s, "
				"two-way %6.2f GB/s each way, fi_join %8.1f us, empty poll %8.3f "
				"us%s"
				"  (%.0f s)\n",
				p, variant.label, m.latency_us, m.bandwidth_bps / 1e9,
				m.exchange_bandwidth_bps / 1e9, m.join_us, m.poll_ns / 1e3,
				exchange.empty() ? "" : (", " + exchange).c_str(),
				std::chrono::duration<double>(Clock::now() - started).count());
			std::fflush(stdout);
		}
		for (const MpiVariant& variant : kMpiVariants) {
			if (!options.with_mpi || !baseline.available()) {
				results[{variant.label, p}] = pending_for(points.size());
				continue;
			}
			const std::optional<double> exchange_before =
				flag_exchange_if_bound(p, options);
			const auto started = Clock::now();
			const std::string command = baseline.command(
				variant.mca, p, bound(p, options), mpi_arguments(points, options));
			results[{variant.label, p}] =
				measure_mpi(baseline, command, points, options);
			const std::string exchange = flag_exchange_text(
				exchange_before, flag_exchange_if_bound(p, options));
			std::printf("#   %d ranks, %-11s %s%s  (%.0f s)\n", p, variant.label,
				    exchange.empty() ? "" : ("(" + exchange + ") ").c_str(),
				    command.c_str(),
				    std::chrono::duration<double>(Clock::now() - started).count());
			std::fflush(stdout);
		}
	}
	load.reset();
	for (fi_collective_op coll : options.colls)
		print_table(coll, points, options, results);
	print_how_to_read(options);

	// Exit status: whether rcoll delivered every point correctly.
	int rcoll_failures = 0;
	for (int p : options.ranks)
		for (Status s : results[{kRcoll, p}].status)
			rcoll_failures += s != Status::ok;
	if (rcoll_failures)
		std::printf("\n%d rcoll point(s) did not measure cleanly\n", rcoll_failures);
	return rcoll_failures == 0 ? 0 : 1;
}
