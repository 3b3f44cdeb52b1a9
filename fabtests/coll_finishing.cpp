// rcoll's finishing collectives (FI_RCOLL_FINISHING_COLL_OPS, fi_ext_rcoll.h):
// calls that may run to their end before they return.
#include "coll_cases.hpp"

#include <rdma/fi_ext_rcoll.h>

#include <algorithm>
#include <chrono>

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
}

} // namespace fabtests::coll
