// The correctness sweep: every collective on full, strided and reversed
// groups of 1..8 ranks, every root, counts from 0 through the sizes where
// rcoll changes protocol or algorithm; every datatype x operation pair of
// the reductions; barrier semantics; a few very large calls.
#include "coll_cases.hpp"

#include <array>

namespace fabtests::coll {

namespace {

using std::chrono::seconds;

constexpr std::array<fi_collective_op, 9> kCollectives = {
	FI_BARRIER,        FI_BROADCAST, FI_ALLTOALL, FI_ALLREDUCE, FI_ALLGATHER,
	FI_REDUCE_SCATTER, FI_REDUCE,    FI_SCATTER,  FI_GATHER};

constexpr std::array<Shape, 3> kShapes = {Shape::full, Shape::strided, Shape::reversed};

// Element counts: zero, one, small primes.
constexpr std::array<size_t, 9> kSmallCounts = {0, 1, 2, 3, 7, 13, 61, 251, 1021};

// Message sizes (bytes per call, or per rank block) where rcoll's default
// selection switches: allreduce/reduce algorithms change between 6 and
// 24 KiB, the shared-memory path splits reductions from 16 KiB and its
// slots hold 64 KiB, broadcasts stop
// being staged in scratch above 64 KiB (256 KiB through a kernel-TCP
// core), a 4-member recursive-doubling allreduce above 128 KiB, broadcast
// turns to scatter-allgather between 96 and 192 KiB. Each is hit
// one element below, at, and one above (--quick: 64 KiB only).
constexpr std::array<size_t, 7> kSwitchBytes = {6 * 1024,   16 * 1024,  24 * 1024, 64 * 1024,
						128 * 1024, 192 * 1024, 256 * 1024};

// The calls one group runs, identical on every member. Datatypes rotate
// through all fourteen and operations through every valid one, so the
// sweep covers them all without multiplying its length.
std::vector<CallSpec> sweep_calls(int group_size, bool quick)
{
	std::vector<CallSpec> calls;
	size_t rotation = 0;
	auto next_type = [&] { return datatypes()[rotation++ % datatypes().size()]; };
	for (fi_collective_op coll : kCollectives) {
		if (coll == FI_BARRIER) {
			calls.push_back({FI_BARRIER});
			continue;
		}
		const int roots = is_rooted(coll) ? group_size : 1;
		for (int root = 0; root < roots; ++root) {
			auto add = [&](const DatatypeInfo& type, size_t count) {
				calls.push_back({coll, count, type.type,
						 valid_op(type.type, rotation), root});
			};
			for (size_t count : kSmallCounts) {
				if (quick && count > 61)
					continue;
				add(next_type(), count);
			}
			for (size_t bytes : kSwitchBytes) {
				if (quick && bytes != 64 * 1024)
					continue;
				for (int delta : {-1, 0, 1}) {
					const DatatypeInfo& type = next_type();
					add(type,
					    static_cast<size_t>(
						    static_cast<long>(bytes / type.size) + delta));
				}
			}
		}
	}
	return calls;
}

// Bootstrap signals of the barrier-semantics checks, one per group that
// may run at the same time.
int barrier_signal(Shape shape, int world_rank)
{
	switch (shape) {
	case Shape::full: return 0;
	case Shape::strided: return 1 + world_rank % 2;
	case Shape::reversed: return 3;
	}
	return 0;
}

void run_sweep(Bootstrap& boot, const TestOptions& options)
{
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	ProgressingBarrier sync(ep, boot, boot.size());
	CheckedCall checked;
	Tally tally;
	for (Shape shape : kShapes) {
		auto group = join_shape(ep, boot, world, shape);
		check_barrier_semantics(ep, boot, *group, barrier_signal(shape, boot.rank()),
					options.quick ? 3 : 8);
		const auto calls = sweep_calls(group->size(), options.quick);
		for (size_t k = 0; k < calls.size(); ++k) {
			boot.note(strfmt("last started: %s on %s", calls[k].describe().c_str(),
					 group->label().c_str()));
			tally.add(run_checked(ep, checked, *group, calls[k],
					      make_seed(static_cast<uint64_t>(shape), k,
							static_cast<uint64_t>(group->size()))));
		}
		sync.wait();
	}
	expect(ep.stray_join_events() == 0, "%zu join events for no group", ep.stray_join_events());
	summary_note(boot, strfmt("%zu verified calls over full, strided and reversed groups%s",
				  tally.verified, tally.skipped_text().c_str()));
}

// Every valid datatype x operation pair on each reduction, roots rotating.
void run_reduction_types(Bootstrap& boot, const TestOptions& options)
{
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	CheckedCall checked;
	Tally tally;
	size_t pairs = 0;
	uint64_t k = 0;
	for (const DatatypeInfo& type : datatypes()) {
		for (fi_op op : reduction_ops()) {
			if (!reduction_allowed(type.type, op))
				continue;
			++pairs;
			for (fi_collective_op coll : {FI_ALLREDUCE, FI_REDUCE, FI_REDUCE_SCATTER}) {
				// A prime count: every closed-form pattern (i % 13, i % p,
				// i % (p + 1), i % 8, i % sizeof) wraps within the array.
				const size_t count = coll == FI_REDUCE_SCATTER ? 29 : 53;
				const CallSpec call{
					coll, count, type.type, op,
					static_cast<int>(k % static_cast<uint64_t>(boot.size()))};
				boot.note(strfmt("last started: %s", call.describe().c_str()));
				tally.add(run_checked(ep, checked, *group, call,
						      make_seed(0x7E5, k++)));
			}
		}
	}
	ProgressingBarrier(ep, boot, boot.size()).wait();
	tally.require_some(options.provider);
	summary_note(boot,
		     strfmt("%zu datatype x op pairs on allreduce, reduce and reduce_scatter%s",
			    pairs, tally.skipped_text().c_str()));
}

void run_barrier_semantics(Bootstrap& boot, const TestOptions& options)
{
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	const int rounds = options.quick ? 10 : 40;
	for (Shape shape : kShapes) {
		auto group = join_shape(ep, boot, world, shape);
		check_barrier_semantics(ep, boot, *group, barrier_signal(shape, boot.rank()),
					rounds);
	}
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, strfmt("%d rounds (fi_barrier and fi_barrier2 in turn) on each of full, "
				  "strided and reversed "
				  "groups, a late rank each round",
				  rounds));
}

// A few very large calls (memory on the test machines is shared: one-byte
// datatypes keep 16M-element calls at 16 MiB per buffer).
void run_large(Bootstrap& boot, const TestOptions& options)
{
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	const int last = group->size() - 1;
	const size_t big = options.quick ? (4u << 20) + 1 : (16u << 20) + 1;
	const std::vector<CallSpec> calls = {
		{FI_ALLREDUCE, big, FI_INT8, FI_SUM},
		{FI_BROADCAST, big, FI_UINT8, FI_SUM, last},
		{FI_REDUCE, big, FI_UINT8, FI_BXOR, last},
		{FI_ALLREDUCE, (1u << 20) + 3, FI_FLOAT, FI_SUM},
		{FI_ALLREDUCE, (1u << 20) - 3, FI_DOUBLE_COMPLEX, FI_PROD},
		{FI_ALLGATHER, big / 4, FI_UINT8},
		{FI_REDUCE_SCATTER, big / 4, FI_INT16, FI_MAX},
		{FI_ALLTOALL, big / 8, FI_INT8},
		{FI_GATHER, big / 4, FI_UINT8, FI_SUM, last},
		{FI_SCATTER, big / 4, FI_UINT8, FI_SUM, 0},
	};
	CheckedCall checked;
	Tally tally;
	for (size_t k = 0; k < calls.size(); ++k) {
		boot.note(strfmt("last started: %s", calls[k].describe().c_str()));
		tally.add(run_checked(ep, checked, *group, calls[k], make_seed(0x1A6E, k),
				      std::chrono::seconds(120)));
	}
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, strfmt("%zu large calls, up to %zu elements%s", tally.verified, big,
				  tally.skipped_text().c_str()));
}

} // namespace

void add_sweep_cases(std::vector<CollCase>& cases)
{
	for (int ranks = 1; ranks <= 8; ++ranks)
		cases.push_back(
			{strfmt("sweep-%d", ranks),
			 strfmt("%d ranks: all 9 collectives on full, strided and reversed groups, "
				"every root, "
				"counts 0..1021 and around 6/16/24/64/128/192 KiB, all datatypes",
				ranks),
			 ranks, seconds(240), "", run_sweep});
	for (int ranks : {2, 3, 5, 8})
		cases.push_back({strfmt("types-%d", ranks),
				 strfmt("%d ranks: every valid datatype x op pair on allreduce, "
					"reduce, reduce_scatter, "
					"results in closed form",
					ranks),
				 ranks, seconds(180), "", run_reduction_types});
	cases.push_back({"barrier-semantics",
			 "5 ranks: no rank leaves fi_barrier before every member entered "
			 "(shared-memory counter)",
			 5, seconds(120), "", run_barrier_semantics});
	for (int ranks : {2, 3})
		cases.push_back({strfmt("large-%d", ranks),
				 strfmt("%d ranks: 16M-element allreduce/broadcast/reduce, "
					"1M-element float and complex "
					"allreduce, 4M-element blocks of "
					"allgather/reduce_scatter/gather/scatter/alltoall",
					ranks),
				 ranks, seconds(300), "", run_large});
}

} // namespace fabtests::coll
