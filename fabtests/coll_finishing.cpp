// rcoll's finishing collectives (FI_RCOLL_FINISHING_COLL_OPS, fi_ext_rcoll.h):
// calls that may run to their end before they return.
#include "coll_cases.hpp"

#include <rdma/fi_ext_rcoll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace fabtests::coll {

namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

const fi_ops_collective& finishing_ops(CollEndpoint& ep)
{
	fi_rcoll_finishing_coll_ops* ops = nullptr;
	const int rc = fi_open_ops(&ep.ep()->fid, FI_RCOLL_FINISHING_COLL_OPS, 0,
				   reinterpret_cast<void**>(&ops), nullptr);
	expect(rc == 0 && ops, "fi_open_ops(%s): %d (%s)", FI_RCOLL_FINISHING_COLL_OPS, rc,
	       fi_strerror(rc < 0 ? -rc : rc));
	expect(ops->size >= sizeof(*ops), "ops size %zu, want at least %zu", ops->size,
	       sizeof(*ops));
	return ops->coll;
}

// A call's outcome: FI_RCOLL_FINISHED (no completion may follow), or 0 and
// then its completion through the CQ. Returns whether it finished in the call.
bool settle(CollEndpoint& ep, long rc, OpContext& ctx, const std::string& what)
{
	expect(rc == 0 || rc == FI_RCOLL_FINISHED, "%s returned %ld (%s)", what.c_str(), rc,
	       fi_strerror(int(rc < 0 ? -rc : rc)));
	if (rc == FI_RCOLL_FINISHED) {
		// A completion reported all the same would name a context the
		// endpoint does not track: progress() throws on it.
		ep.progress();
		return true;
	}
	ep.track(ctx);
	ep.wait_done(ctx, what);
	expect(ctx.error == 0, "%s failed: %s", what.c_str(), ctx.err_text.c_str());
	return false;
}

// Spins for `duration` (a sleep lasts tens of microseconds at least).
void busy_wait(microseconds duration)
{
	const auto until = std::chrono::steady_clock::now() + duration;
	while (std::chrono::steady_clock::now() < until) {
	}
}

// 2 ranks on one host: barrier, broadcast, allreduce, reduce and allgather
// through the finishing ops give the standard results; each ends either in
// the call or through its completion, never both; and a call entered before
// the peer's is driven to its end in the call.
void run_finishing_calls(Bootstrap& boot, const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable("an extension of rcoll's (fi_ext_rcoll.h)");
	CollEndpoint ep({options.provider});
	const fi_ops_collective& ops = finishing_ops(ep);
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	fid_ep* e = ep.ep();
	const fi_addr_t coll = group->coll_addr();
	const int rank = group->rank(), size = group->size();
	const int rounds = options.quick ? 200 : 2000;
	int finished = 0;
	for (int i = 0; i < rounds; i++) {
		OpContext barrier_ctx;
		finished += settle(ep, ops.barrier(e, coll, &barrier_ctx), barrier_ctx, "barrier");

		int64_t value = rank == i % size ? 1000 + i : -1;
		OpContext bcast_ctx;
		finished += settle(ep,
				   ops.broadcast(e, &value, 1, nullptr, coll,
						 world[size_t(i % size)], FI_INT64, 0, &bcast_ctx),
				   bcast_ctx, "broadcast");
		expect(value == 1000 + i, "broadcast %d: got %lld", i, (long long)value);

		const int64_t mine = int64_t(i) * 7 + rank;
		int64_t sum = 0;
		OpContext allreduce_ctx;
		finished += settle(ep,
				   ops.allreduce(e, &mine, 1, nullptr, &sum, nullptr, coll,
						 FI_INT64, FI_SUM, 0, &allreduce_ctx),
				   allreduce_ctx, "allreduce");
		const int64_t want = int64_t(i) * 7 * size + int64_t(size) * (size - 1) / 2;
		expect(sum == want, "allreduce %d: got %lld, want %lld", i, (long long)sum,
		       (long long)want);

		int64_t reduced = -1;
		OpContext reduce_ctx;
		finished += settle(ep,
				   ops.reduce(e, &mine, 1, nullptr, &reduced, nullptr, coll,
					      world[0], FI_INT64, FI_MAX, 0, &reduce_ctx),
				   reduce_ctx, "reduce");
		if (rank == 0)
			expect(reduced == int64_t(i) * 7 + size - 1, "reduce %d: got %lld", i,
			       (long long)reduced);

		std::vector<int64_t> all(size_t(size), -1);
		OpContext allgather_ctx;
		finished += settle(ep,
				   ops.allgather(e, &mine, 1, nullptr, all.data(), nullptr, coll,
						 FI_INT64, 0, &allgather_ctx),
				   allgather_ctx, "allgather");
		for (int r = 0; r < size; r++)
			expect(all[size_t(r)] == int64_t(i) * 7 + r,
			       "allgather %d: block %d is %lld", i, r, (long long)all[size_t(r)]);
	}
	// Rank 1 enters each allreduce 2 us after rank 0 said it enters its own:
	// rank 0's ends in the call only if it is driven there. That needs both
	// ranks on a CPU at once: on a host loaded beyond its CPUs (sanitizer
	// runs beside other tests) rank 1 often posts milliseconds later. So
	// rank 1 says when it posted (CLOCK_MONOTONIC is the host's), and only
	// rounds where it posted within 20 us of rank 0's entry count.
	constexpr int kEntering = 0, kPostedNs = 1; // bootstrap signals
	constexpr int kDrivenRounds = 1000;
	constexpr auto kTogether = microseconds(20);
	auto now_ns = [] {
		return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
					std::chrono::steady_clock::now().time_since_epoch())
					.count());
	};
	int together = 0, driven_here = 0;
	for (int i = 0; i < kDrivenRounds; i++) {
		uint64_t entered_at = 0;
		if (rank == 0) {
			entered_at = now_ns();
			boot.signal_set(kEntering, uint64_t(i) + 1);
		} else {
			boot.signal_wait_at_least(kEntering, uint64_t(i) + 1, [] {});
			busy_wait(microseconds(2));
			boot.signal_set(kPostedNs, now_ns());
		}
		const int64_t mine = rank + 1;
		int64_t sum = 0;
		OpContext ctx;
		const bool ended_here = settle(ep,
					       ops.allreduce(e, &mine, 1, nullptr, &sum, nullptr,
							     coll, FI_INT64, FI_SUM, 0, &ctx),
					       ctx, "allreduce");
		expect(sum == 3, "allreduce: got %lld, want 3", (long long)sum);
		if (rank == 0 &&
		    boot.signal_get(kPostedNs) < entered_at + uint64_t(kTogether.count() * 1000)) {
			together++;
			driven_here += ended_here;
		}
		boot.barrier(); // the next round's timestamp is not read early
	}
	// Members on one host run most calls to their end in the call; through
	// the core, none.
	std::string driven_note;
	if (shared_memory_path()) {
		expect(finished > 0, "no call of %d finished in the call", rounds * 5);
		if (rank == 0 && together >= 50) {
			expect(driven_here * 10 >= together * 8,
			       "%d of %d allreduces whose peer came within %lld us ended in the "
			       "call: they were not driven there",
			       driven_here, together, (long long)kTogether.count());
			driven_note = strfmt("; %d of %d allreduces whose peer came within 20 us "
					     "ended in the call",
					     driven_here, together);
		} else if (rank == 0) {
			driven_note =
				strfmt("; not checked whether calls are driven: in only %d of "
				       "%d rounds did the peer come within 20 us (loaded host)",
				       together, kDrivenRounds);
		}
	} else {
		expect(finished == 0, "%d calls through the core finished in the call", finished);
		expect(driven_here == 0, "%d allreduces through the core finished in the call",
		       driven_here);
	}
	expect(ep.unsolicited().empty(), "%zu completions without context",
	       ep.unsolicited().size());
	summary_note(boot, strfmt("%d of %d calls ended in the call%s", finished, rounds * 5,
				  driven_note.c_str()));
}

// A call whose peer posts only after it returned outlasts its spin: it
// returns 0 and completes through the CQ, and the peer's call, which finds
// it there, ends in the call on the shared-memory path. A finishing call
// posted behind a standard one of its group is not alone: each ends once.
// Unknown ops names and flags are refused.
void run_finishing_late_peer(Bootstrap& boot, const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable("an extension of rcoll's (fi_ext_rcoll.h)");
	CollEndpoint ep({options.provider});
	const fi_ops_collective& ops = finishing_ops(ep);
	void* other = nullptr;
	const int unknown = fi_open_ops(&ep.ep()->fid, "rcoll_no_such_ops", 0, &other, nullptr);
	expect(unknown == -FI_ENOSYS, "fi_open_ops of an unknown name: %d, want -FI_ENOSYS",
	       unknown);
	const int flagged =
		fi_open_ops(&ep.ep()->fid, FI_RCOLL_FINISHING_COLL_OPS, 1, &other, nullptr);
	expect(flagged == -FI_EINVAL, "fi_open_ops with flags 1: %d, want -FI_EINVAL", flagged);
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	const int rank = group->rank();
	const fi_addr_t coll = group->coll_addr();
	constexpr int kReturned = 0; // bootstrap signal: rank 0's call returned

	const int64_t mine = rank + 1;
	int64_t sum = 0;
	OpContext ctx;
	if (rank == 1)
		boot.signal_wait_at_least(kReturned, 1, [] {});
	const long rc = ops.allreduce(ep.ep(), &mine, 1, nullptr, &sum, nullptr, coll, FI_INT64,
				      FI_SUM, 0, &ctx);
	if (rank == 0) {
		expect(rc == 0, "the allreduce returned %ld before its peer posted, want 0", rc);
		boot.signal_set(kReturned, 1);
	} else if (shared_memory_path()) {
		expect(rc == FI_RCOLL_FINISHED,
		       "the allreduce whose peer was there returned %ld, want FI_RCOLL_FINISHED",
		       rc);
	}
	settle(ep, rc, ctx, "allreduce");
	expect(sum == 3, "allreduce: got %lld, want 3", (long long)sum);

	// Behind a standard call of the same group.
	int64_t first = 0, second = 0;
	OpContext standard, finishing;
	const long posted = fi_allreduce(ep.ep(), &mine, 1, nullptr, &first, nullptr, coll,
					 FI_INT64, FI_SUM, 0, &standard);
	expect(posted == 0, "fi_allreduce: %ld", posted);
	ep.track(standard);
	settle(ep,
	       ops.allreduce(ep.ep(), &mine, 1, nullptr, &second, nullptr, coll, FI_INT64, FI_MAX,
			     0, &finishing),
	       finishing, "allreduce behind another");
	ep.wait_done(standard, "the standard allreduce");
	expect(standard.error == 0, "the standard allreduce failed: %s", standard.err_text.c_str());
	expect(first == 3 && second == 2, "allreduces: got %lld and %lld, want 3 and 2",
	       (long long)first, (long long)second);
	summary_note(boot, "rank 0's call, posted before its peer's, ended through the CQ; a "
			   "finishing call behind a standard one ended once");
}

// Members that post one allreduce with different arguments, through the
// finishing ops, each mismatch on a fresh group (it fails the group). Rank 0
// posts first and its call returns 0 (its peer has not posted); rank 1's
// call then finds rank 0's on the shared-memory path and fails in the call:
// it returns 0 all the same, and its failure, as rank 0's, comes through
// the CQ (a negative return only means "not posted").
struct FinishingMismatch {
	size_t count[2]; // group ranks 0 and 1
	fi_op op[2];
};

constexpr FinishingMismatch kFinishingMismatches[] = {
	{{2, 4}, {FI_SUM, FI_SUM}}, // another count
	{{2, 2}, {FI_SUM, FI_MAX}}, // the same bytes, another operation
};

constexpr milliseconds kMismatchTimeout{1000}; // FI_RCOLL_COLL_TIMEOUT_MS
// The timeout, the members' stop notices, and slack for a loaded host.
constexpr seconds kMismatchBound{20};

void run_finishing_mismatch(Bootstrap& boot, const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable("an extension of rcoll's (fi_ext_rcoll.h)");
	setenv("FI_RCOLL_COLL_TIMEOUT_MS", std::to_string(kMismatchTimeout.count()).c_str(), 1);
	const bool detects = shared_memory_path();
	CollEndpoint ep({options.provider});
	const fi_ops_collective& ops = finishing_ops(ep);
	const auto world = ep.exchange_addresses(boot);
	ProgressingBarrier sync(ep, boot, boot.size());
	// Bootstrap signals: kReturned, k + 1 once rank 0's call k returned;
	// kOutcome + r, (k + 1) << 32 | the error rank r's call k completed with.
	constexpr int kReturned = 0, kOutcome = 1;
	std::string outcomes;
	milliseconds slowest{0};
	for (size_t k = 0; k < std::size(kFinishingMismatches); k++) {
		const FinishingMismatch& m = kFinishingMismatches[k];
		auto group = join_shape(ep, boot, world, Shape::full);
		const int me = group->rank();
		const auto r = static_cast<size_t>(me);
		const std::string what = strfmt(
			"finishing allreduce of %zu int32 %s (the other member: %zu int32 %s)",
			m.count[r], op_name(m.op[r]), m.count[1 - r], op_name(m.op[1 - r]));
		const size_t bytes = m.count[r] * sizeof(int32_t);
		GuardedBuffer in, out;
		in.prepare(bytes);
		out.prepare(bytes);
		for (size_t j = 0; j < m.count[r]; j++) {
			const int32_t v = int32_t(100 * (me + 1) + j);
			std::memcpy(in.data() + j * sizeof v, &v, sizeof v);
		}
		fill_pattern(out.bytes(), make_seed(0x5F1, k, r));
		const std::vector<std::byte> in_before(in.span().begin(), in.span().end());
		const std::vector<std::byte> out_before(out.span().begin(), out.span().end());

		OpContext ctx;
		if (me == 1)
			boot.signal_wait_at_least(kReturned, k + 1, [] {});
		const auto posted_at = std::chrono::steady_clock::now();
		const long rc =
			ops.allreduce(ep.ep(), in.data(), m.count[r], nullptr, out.data(), nullptr,
				      group->coll_addr(), FI_INT32, m.op[r], 0, &ctx);
		if (me == 0) {
			expect(rc == 0, "%s, posted before its peer's, returned %ld, want 0",
			       what.c_str(), rc);
			boot.signal_set(kReturned, k + 1);
		} else {
			// Before the change of semantics, a call that failed in
			// the call returned the error (-FI_EINVAL) instead.
			expect(rc == 0,
			       "%s, posted after its peer's, returned %ld (%s), want 0: a call "
			       "that failed in the call must complete through the CQ",
			       what.c_str(), rc, fi_strerror(int(rc < 0 ? -rc : rc)));
		}
		if (rc == 0) {
			ep.track(ctx);
			ep.wait_done(ctx, what, kMismatchBound);
		}
		const auto took = std::chrono::duration_cast<milliseconds>(
			std::chrono::steady_clock::now() - posted_at);
		expect(took < kMismatchBound, "%s ended after %lld ms", what.c_str(),
		       (long long)took.count());
		slowest = std::max(slowest, took);
		in.expect_guards(what + ", input");
		out.expect_guards(what + ", output");
		expect(std::equal(in_before.begin(), in_before.end(), in.span().begin()),
		       "%s: the input changed", what.c_str());
		if (ctx.error != 0) {
			expect(!ctx.err_text.empty(), "%s failed (%d, %s) without error text",
			       what.c_str(), ctx.error, fi_strerror(ctx.error));
			expect(ctx.err.op_context == &ctx,
			       "%s: its error completion names context %p, not %p", what.c_str(),
			       ctx.err.op_context, static_cast<void*>(&ctx));
		}
		if (detects) {
			// Every member reads the other's bytes: each must fail, rank 1,
			// which saw the mismatch in its call, with FI_EINVAL.
			expect(ctx.error != 0,
			       "%s completed without error on the shared-memory path (result "
			       "bytes %s)",
			       what.c_str(),
			       std::equal(out_before.begin(), out_before.end(), out.span().begin())
				       ? "untouched"
				       : "written");
			if (me == 1)
				expect(ctx.error == FI_EINVAL,
				       "%s failed with %d (%s), want FI_EINVAL", what.c_str(),
				       ctx.error, fi_strerror(ctx.error));
		}
		boot.signal_set(kOutcome + me, uint64_t(k + 1) << 32 | uint32_t(ctx.error));
		sync.wait();
		if (me == 0) {
			const uint64_t other = boot.signal_get(kOutcome + 1);
			expect(other >> 32 == k + 1, "rank 1 did not say how its call %zu ended",
			       k);
			const int other_error = int(uint32_t(other));
			outcomes += strfmt("%s[rank 0: %s; rank 1: %s]", k ? " " : "",
					   ctx.error ? fi_strerror(ctx.error) : "success",
					   other_error ? fi_strerror(other_error) : "success");
		}
		expect(group->close() == 0, "%s: fi_close of its group failed", what.c_str());
	}
	sync.wait();
	expect(ep.unsolicited().empty(), "%zu completions without context",
	       ep.unsolicited().size());
	// Through the core nothing checks that members posted one call (as in
	// mismatched-calls): each may complete successfully, with what its own
	// arguments make of the bytes it got.
	summary_note(boot, strfmt("%zu mismatched finishing allreduces returned 0 and "
				  "completed %s, rank 0's within %lld ms%s",
				  std::size(kFinishingMismatches), outcomes.c_str(),
				  (long long)slowest.count(),
				  detects ? "" : " (outcome not checked through the core)"));
}

// Two threads per rank call through the finishing ops at once, each on a
// group of its own (the same two members), on one endpoint: one rcoll domain
// and its lock, which a call driving itself holds. The endpoint is shared:
// CollEndpoint's track/progress/wait_done are not thread-safe (its list of
// pending contexts, its unsolicited queue and the contexts' outcomes are
// plain data), so the test serialises them with a mutex of its own, which
// it never holds while posting. A thread stays at most kWindow rounds ahead
// of the other of its process: on a host with fewer CPUs than threads, one
// could otherwise run all its rounds in one time slice while the other waits
// for a CPU, and the two would never meet in the domain.
void run_finishing_threads(Bootstrap& boot, const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable("an extension of rcoll's (fi_ext_rcoll.h)");
	constexpr int kThreads = 2;
	constexpr int kWindow = 2;
	const int rounds = options.quick ? 200 : 2000;
	// Every call's context and what the call returned. A context is tracked
	// before its call is posted (the other thread may read its completion
	// before the call returns) and one that ends in the call stays tracked:
	// these outlive the endpoint, and a completion reported for such a call
	// shows as its context done.
	struct Call {
		OpContext ctx;
		long rc = LONG_MIN;
	};
	std::vector<Call> calls[kThreads];
	for (auto& mine : calls)
		mine = std::vector<Call>(size_t(rounds) * 2);

	EndpointOptions endpoint_options;
	endpoint_options.provider = options.provider;
	endpoint_options.threading = FI_THREAD_SAFE;
	CollEndpoint ep(endpoint_options);
	expect(ep.info().domain_attr->threading == FI_THREAD_SAFE,
	       "the domain was opened with threading %d, not FI_THREAD_SAFE",
	       int(ep.info().domain_attr->threading));
	const fi_ops_collective& ops = finishing_ops(ep);
	const auto world = ep.exchange_addresses(boot);
	// Joins of one member list are matched by their order: both are made
	// here, in one order on every member, before the threads start.
	std::unique_ptr<Group> groups[kThreads];
	groups[0] = join_shape(ep, boot, world, Shape::full);
	groups[1] = join_shape(ep, boot, world, Shape::reversed);
	const int me = boot.rank(), size = boot.size();
	constexpr int kEntered = 1; // bootstrap signals kEntered + t: barriers entered

	std::mutex cq_mutex;      // around every use of ep's completion dispatch
	std::atomic<int> gate{0}; // 1: start; -1: give up
	std::atomic<bool> stop{false};
	std::atomic<int> rounds_done[kThreads] = {};
	std::atomic<bool> posting[kThreads] = {}; // inside a call into the provider
	int posted_meanwhile[kThreads] = {};      // calls posted while the other one was
	double seconds_taken[kThreads] = {};
	std::string failure[kThreads];

	// Spins until ready(), giving up when the other thread or rank failed.
	auto spin_until = [&](const std::function<bool()>& ready, const Deadline& deadline,
			      const char* what, int round) {
		for (unsigned polls = 1; !ready(); polls++) {
			if (polls % 64 == 0) {
				boot.check_abort();
				expect(!stop.load(), "stopped: the other thread failed");
				expect(!deadline.expired(), "%s %d: still waiting after %lld s",
				       what, round, (long long)kDefaultWait.count());
			}
			std::this_thread::yield();
		}
	};
	// Posts one call of thread t and waits for its end.
	auto run_call = [&](int t, Call& call, const std::function<long()>& post, const char* what,
			    int round) {
		{
			std::lock_guard<std::mutex> lock(cq_mutex);
			ep.track(call.ctx);
		}
		posting[t].store(true);
		posted_meanwhile[t] += posting[1 - t].load();
		call.rc = post();
		posting[t].store(false);
		expect(call.rc == 0 || call.rc == FI_RCOLL_FINISHED, "%s %d returned %ld (%s)",
		       what, round, call.rc, fi_strerror(int(call.rc < 0 ? -call.rc : call.rc)));
		if (call.rc == FI_RCOLL_FINISHED)
			return;
		spin_until(
			[&] {
				std::lock_guard<std::mutex> lock(cq_mutex);
				return call.ctx.done || (ep.progress() != 0 && call.ctx.done);
			},
			Deadline(kDefaultWait), what, round);
		expect(call.ctx.error == 0, "%s %d failed: %s", what, round,
		       call.ctx.err_text.c_str());
	};
	auto work = [&](int t) {
		try {
			fid_ep* e = ep.ep();
			const fi_addr_t coll = groups[t]->coll_addr();
			while (gate.load() == 0)
				std::this_thread::yield();
			if (gate.load() < 0)
				return;
			const auto started = std::chrono::steady_clock::now();
			for (int i = 0; i < rounds; i++) {
				spin_until([&] { return rounds_done[1 - t].load() > i - kWindow; },
					   Deadline(kDefaultWait), "the other thread, round", i);
				Call& barrier = calls[size_t(t)][size_t(i) * 2];
				boot.signal_add(kEntered + t, 1);
				run_call(
					t, barrier,
					[&] { return ops.barrier(e, coll, &barrier.ctx); },
					"barrier", i);
				const uint64_t entered = boot.signal_get(kEntered + t);
				expect(entered >= uint64_t(size) * uint64_t(i + 1),
				       "barrier %d left when %llu of %d entries had happened", i,
				       (unsigned long long)entered, size * (i + 1));

				Call& allreduce = calls[size_t(t)][size_t(i) * 2 + 1];
				const int64_t base = int64_t(t + 1) * 1000000 + int64_t(i) * 7;
				const int64_t mine = base + me;
				int64_t sum = -1;
				run_call(
					t, allreduce,
					[&] {
						return ops.allreduce(e, &mine, 1, nullptr, &sum,
								     nullptr, coll, FI_INT64,
								     FI_SUM, 0, &allreduce.ctx);
					},
					"allreduce", i);
				const int64_t want = base * size + int64_t(size) * (size - 1) / 2;
				expect(sum == want, "allreduce %d: got %lld, want %lld", i,
				       (long long)sum, (long long)want);
				rounds_done[t].store(i + 1);
			}
			seconds_taken[t] = std::chrono::duration<double>(
						   std::chrono::steady_clock::now() - started)
						   .count();
		} catch (const std::exception& x) {
			failure[t] = strfmt("thread %d: %s", t, x.what());
			stop.store(true);
		}
	};
	// Every thread of both ranks starts at once.
	std::vector<std::thread> threads;
	for (int t = 0; t < kThreads; t++)
		threads.emplace_back(work, t);
	try {
		boot.barrier();
		gate.store(1);
	} catch (...) {
		gate.store(-1);
		for (auto& thread : threads)
			thread.join();
		throw;
	}
	for (auto& thread : threads)
		thread.join();
	for (const std::string& why : failure)
		expect(why.empty(), "%s", why.c_str());

	// A completion reported late for a call that ended in the call.
	ProgressingBarrier(ep, boot, size).wait();
	const auto until = std::chrono::steady_clock::now() + milliseconds(20);
	while (std::chrono::steady_clock::now() < until)
		ep.progress();
	int finished = 0;
	for (int t = 0; t < kThreads; t++) {
		for (size_t k = 0; k < calls[t].size(); k++) {
			const Call& call = calls[t][k];
			const char* what = k % 2 ? "allreduce" : "barrier";
			if (call.rc == FI_RCOLL_FINISHED) {
				finished++;
				expect(!call.ctx.done,
				       "thread %d: %s %zu ended in the call and completed too", t,
				       what, k / 2);
			} else {
				expect(call.rc == 0 && call.ctx.done,
				       "thread %d: %s %zu returned %ld, completed %d", t, what,
				       k / 2, call.rc, int(call.ctx.done));
			}
		}
	}
	const int total = kThreads * rounds * 2;
	if (!shared_memory_path())
		expect(finished == 0, "%d calls through the core finished in the call", finished);
	expect(ep.unsolicited().empty(), "%zu completions without context",
	       ep.unsolicited().size());
	// Timing is reported, not checked: it is the host's as much as rcoll's.
	summary_note(boot, strfmt("%d threads x %d rounds of barrier + allreduce on one "
				  "endpoint: %d of %d calls ended in the call, %d entered while "
				  "the other thread was inside one; %.1f us per round",
				  kThreads, rounds, finished, total,
				  posted_meanwhile[0] + posted_meanwhile[1],
				  (seconds_taken[0] + seconds_taken[1]) * 1e6 / kThreads / rounds));
}

} // namespace

void add_finishing_cases(std::vector<CollCase>& cases)
{
	cases.push_back({"finishing-calls",
			 "2 ranks on one host, FI_RCOLL_FINISHING_COLL_OPS: barrier, broadcast, "
			 "allreduce, reduce and allgather give the standard results; each ends in "
			 "the call (FI_RCOLL_FINISHED, no completion) or through its completion; "
			 "rank 0's allreduces, entered 2 us before rank 1's, are driven to their "
			 "end in the call",
			 2, seconds(120), "", run_finishing_calls});
	cases.push_back({"finishing-late-peer",
			 "FI_RCOLL_FINISHING_COLL_OPS: an allreduce whose peer posts only after it "
			 "returned returns 0 and completes through the CQ (the peer's ends in the "
			 "call); one behind a standard call ends once; unknown names and flags are "
			 "refused",
			 2, seconds(60), "", run_finishing_late_peer});
	cases.push_back({"finishing-mismatch",
			 "FI_RCOLL_FINISHING_COLL_OPS: 2 ranks post one allreduce with different "
			 "counts or operations, rank 1 after rank 0's call returned: both calls "
			 "return 0 and end within 20 s (FI_RCOLL_COLL_TIMEOUT_MS=1000), guards and "
			 "inputs intact; on the shared-memory path both complete with an error "
			 "through the CQ, rank 1's, which saw the mismatch in its call, FI_EINVAL",
			 2, seconds(120), "", run_finishing_mismatch});
	cases.push_back(
		{"finishing-threads",
		 "FI_RCOLL_FINISHING_COLL_OPS, 2 ranks x 2 threads on one FI_THREAD_SAFE "
		 "endpoint, each thread on a group of its own: barriers and allreduces give "
		 "the right results, each call ends once (in the call or through the CQ), "
		 "no completion without context; reports calls ended in the call and time "
		 "per round",
		 2, seconds(300), "", run_finishing_threads});
}

} // namespace fabtests::coll
