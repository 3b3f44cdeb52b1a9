// rcoll's finishing collectives (FI_RCOLL_FINISHING_COLL_OPS, fi_ext_rcoll.h):
// calls that may run to their end before they return.
#include "coll_cases.hpp"

#include <rdma/fi_ext_rcoll.h>

#include <cstring>
#include <thread>

namespace fabtests::coll {

namespace {

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
		ep.progress();
		expect(!ctx.done, "%s finished in the call and completed as well", what.c_str());
		return true;
	}
	ep.track(ctx);
	ep.wait_done(ctx, what);
	expect(ctx.error == 0, "%s failed: %s", what.c_str(), ctx.err_text.c_str());
	return false;
}

// 2 ranks on one host: barrier, broadcast, allreduce, reduce and allgather
// through the finishing ops give the standard results; each ends either in
// the call or through its completion, never both.
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
	// Members on one host that spin run most calls to their end in the call;
	// through the core, none.
	if (shared_memory_path())
		expect(finished > 0, "no call of %d finished in the call", rounds * 5);
	else
		expect(finished == 0, "%d calls through the core finished in the call", finished);
	expect(ep.unsolicited().empty(), "%zu completions without context",
	       ep.unsolicited().size());
	summary_note(boot, strfmt("%d of %d calls ended in the call", finished, rounds * 5));
}

// A call whose peer comes late (200 ms) outlasts FI_RCOLL_SPIN_US: it
// returns 0 and completes through the CQ; a name rcoll does not know gets
// -FI_ENOSYS.
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
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	const int rank = group->rank();
	boot.barrier();
	if (rank == 1)
		std::this_thread::sleep_for(milliseconds(200));
	const int64_t mine = rank + 1;
	int64_t sum = 0;
	OpContext ctx;
	const long rc = ops.allreduce(ep.ep(), &mine, 1, nullptr, &sum, nullptr, group->coll_addr(),
				      FI_INT64, FI_SUM, 0, &ctx);
	const bool finished = settle(ep, rc, ctx, "allreduce");
	if (rank == 0)
		expect(!finished, "the allreduce finished in the call although its peer came "
				  "200 ms late (FI_RCOLL_SPIN_US is 50)");
	expect(sum == 3, "allreduce: got %lld, want 3", (long long)sum);
	summary_note(boot, "rank 0's call, 200 ms ahead of its peer's, ended through the CQ");
}

} // namespace

void add_finishing_cases(std::vector<CollCase>& cases)
{
	cases.push_back({"finishing-calls",
			 "2 ranks on one host, FI_RCOLL_FINISHING_COLL_OPS: barrier, broadcast, "
			 "allreduce, reduce and allgather give the standard results; each ends in "
			 "the call (FI_RCOLL_FINISHED, no completion) or through its completion, "
			 "and some end in the call",
			 2, seconds(120), "", run_finishing_calls});
	cases.push_back({"finishing-late-peer",
			 "FI_RCOLL_FINISHING_COLL_OPS: an allreduce whose peer comes 200 ms late "
			 "returns 0 and completes through the CQ; an unknown ops name gets "
			 "-FI_ENOSYS",
			 2, seconds(60), "", run_finishing_late_peer});
}

} // namespace fabtests::coll
