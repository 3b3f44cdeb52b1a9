// Calls the provider must refuse, fi_query_collective's answers, fi_join
// without an event queue, and the AV set operations.
#include "coll_cases.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>
#include <thread>

namespace fabtests::coll {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string rc_text(long rc)
{
	return strfmt("%ld (%s)", rc, fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)));
}

// rc must be one of `allowed` (negative FI_E* codes).
void expect_refused(long rc, std::initializer_list<int> allowed, const std::string& what)
{
	const bool ok = std::find(allowed.begin(), allowed.end(), rc) != allowed.end();
	std::string want;
	for (int code : allowed)
		want += (want.empty() ? "" : " or ") + rc_text(code);
	expect(ok, "%s returned %s, want %s", what.c_str(), rc_text(rc).c_str(), want.c_str());
}

// A refused call must not complete later either.
void expect_no_completion(CollEndpoint& ep, const OpContext& ctx, const std::string& what)
{
	const Deadline quiet(milliseconds(20));
	while (!quiet.expired())
		ep.progress();
	expect(!ctx.done, "%s was refused but completed (error %d)", what.c_str(), ctx.error);
	expect(ep.unsolicited().empty(), "%s left %zu completions without context", what.c_str(),
	       ep.unsolicited().size());
}

struct BadPair {
	fi_datatype type;
	fi_op op;
};

void run_invalid_arguments(Bootstrap& boot, const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable(
			"util_coll (tcp;ofi_rxm) takes any coll_addr for a pointer to its group "
			"and "
			"implements 5 of the 9 collectives: the invalid calls here would crash it");
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	auto full = join_shape(ep, boot, world, Shape::full);
	auto strided = join_shape(ep, boot, world, Shape::strided);
	GuardedBuffer in, out;
	in.prepare(4096);
	out.prepare(4096);
	fid_ep* e = ep.ep();
	size_t refused = 0;
	auto refuse = [&](long rc, std::initializer_list<int> allowed, OpContext& ctx,
			  const std::string& what) {
		expect_refused(rc, allowed, what);
		expect_no_completion(ep, ctx, what);
		++refused;
	};

	// Pairs fi_atomic(3) does not define, operations that are no reduction,
	// and values outside the enums.
	const std::array<BadPair, 11> bad_pairs = {{
		{FI_FLOAT, FI_BOR},
		{FI_DOUBLE, FI_BAND},
		{FI_LONG_DOUBLE, FI_BXOR},
		{FI_FLOAT_COMPLEX, FI_MIN},
		{FI_DOUBLE_COMPLEX, FI_MAX},
		{FI_LONG_DOUBLE_COMPLEX, FI_BOR},
		{FI_INT32, FI_ATOMIC_READ},
		{FI_INT32, FI_ATOMIC_WRITE},
		{FI_UINT64, FI_CSWAP},
		{FI_INT32, static_cast<fi_op>(77)},
		{static_cast<fi_datatype>(77), FI_SUM},
	}};
	for (const BadPair& pair : bad_pairs) {
		for (fi_collective_op coll : {FI_ALLREDUCE, FI_REDUCE, FI_REDUCE_SCATTER}) {
			OpContext ctx;
			const std::string what = strfmt("%s of %s with %s", collective_name(coll),
							datatype_name(pair.type), op_name(pair.op));
			long rc = 0;
			if (coll == FI_ALLREDUCE)
				rc = fi_allreduce(e, in.data(), 4, nullptr, out.data(), nullptr,
						  full->coll_addr(), pair.type, pair.op, 0, &ctx);
			else if (coll == FI_REDUCE)
				rc = fi_reduce(e, in.data(), 4, nullptr, out.data(), nullptr,
					       full->coll_addr(), full->address_of(0), pair.type,
					       pair.op, 0, &ctx);
			else
				rc = fi_reduce_scatter(e, in.data(), 1, nullptr, out.data(),
						       nullptr, full->coll_addr(), pair.type,
						       pair.op, 0, &ctx);
			refuse(rc, {-FI_EOPNOTSUPP, -FI_EINVAL}, ctx, what);
		}
	}
	{
		OpContext ctx;
		refuse(fi_broadcast(e, out.data(), 4, nullptr, full->coll_addr(),
				    full->address_of(0), static_cast<fi_datatype>(77), 0, &ctx),
		       {-FI_EOPNOTSUPP, -FI_EINVAL}, ctx, "broadcast of datatype 77");
	}

	// Roots that are no member of the group: a rank of the other parity
	// (in the AV, not in the stride-2 group), FI_ADDR_NOTAVAIL and an index
	// past the end of the AV.
	const int other_parity = (boot.rank() + 1) % boot.size();
	for (fi_addr_t root :
	     {world[static_cast<size_t>(other_parity)], FI_ADDR_NOTAVAIL, fi_addr_t{1000}}) {
		const std::string where =
			strfmt("root fi_addr %llu on the %s", static_cast<unsigned long long>(root),
			       strided->label().c_str());
		OpContext c1, c2, c3, c4;
		refuse(fi_broadcast(e, out.data(), 4, nullptr, strided->coll_addr(), root, FI_INT32,
				    0, &c1),
		       {-FI_EINVAL}, c1, "broadcast, " + where);
		refuse(fi_reduce(e, in.data(), 4, nullptr, out.data(), nullptr,
				 strided->coll_addr(), root, FI_INT32, FI_SUM, 0, &c2),
		       {-FI_EINVAL}, c2, "reduce, " + where);
		refuse(fi_scatter(e, in.data(), 1, nullptr, out.data(), nullptr,
				  strided->coll_addr(), root, FI_INT32, 0, &c3),
		       {-FI_EINVAL}, c3, "scatter, " + where);
		refuse(fi_gather(e, in.data(), 1, nullptr, out.data(), nullptr,
				 strided->coll_addr(), root, FI_INT32, 0, &c4),
		       {-FI_EINVAL}, c4, "gather, " + where);
	}

	// Collective addresses that name no joined group: a peer's address, an
	// AV set's address (fi_join input, not a group), FI_ADDR_NOTAVAIL and a
	// group closed by the application.
	AvSetPtr set = av_set_range(ep, world.front(), world.back(), 1, world.size());
	fi_addr_t set_addr = FI_ADDR_NOTAVAIL;
	FT_CHECK(fi_av_set_addr(set.get(), &set_addr));
	auto closed = join_shape(ep, boot, world, Shape::reversed);
	const fi_addr_t closed_addr = closed->coll_addr();
	FT_CHECK(closed->close());
	const std::array<std::pair<fi_addr_t, const char*>, 4> not_groups = {{
		{world[0], "a peer's fi_addr"},
		{set_addr, "fi_av_set_addr of an AV set"},
		{FI_ADDR_NOTAVAIL, "FI_ADDR_NOTAVAIL"},
		{closed_addr, "a closed group's fi_mc_addr"},
	}};
	for (const auto& [addr, name] : not_groups) {
		OpContext c1, c2, c3;
		refuse(fi_barrier(e, addr, &c1), {-FI_EINVAL}, c1, strfmt("barrier on %s", name));
		refuse(fi_allreduce(e, in.data(), 4, nullptr, out.data(), nullptr, addr, FI_INT32,
				    FI_SUM, 0, &c2),
		       {-FI_EINVAL}, c2, strfmt("allreduce on %s", name));
		refuse(fi_broadcast(e, out.data(), 4, nullptr, addr, world[0], FI_INT32, 0, &c3),
		       {-FI_EINVAL}, c3, strfmt("broadcast on %s", name));
	}

	// AV set construction errors.
	{
		fi_av_set_attr attr{};
		fid_av_set* raw = nullptr;
		attr.count = world.size();
		attr.start_addr = world.back();
		attr.end_addr = world.front();
		attr.stride = 1;
		if (world.size() > 1)
			expect_refused(fi_av_set(ep.av(), &attr, &raw, nullptr), {-FI_EINVAL},
				       "fi_av_set with end < start");
		attr.start_addr = world.front();
		attr.end_addr = world.back();
		attr.stride = 0;
		expect_refused(fi_av_set(ep.av(), &attr, &raw, nullptr), {-FI_EINVAL},
			       "fi_av_set with stride 0");
		// (attr.count is a sizing hint: fi_av_set(3) leaves a range longer
		// than count to the provider's judgment, so it is not checked.)
		attr.stride = 1;
		attr.end_addr = 1000;
		expect_refused(fi_av_set(ep.av(), &attr, &raw, nullptr), {-FI_EINVAL},
			       "fi_av_set with a range past the end of the AV");
		expect_refused(fi_av_set_insert(set.get(), world[0]), {-FI_EINVAL},
			       "fi_av_set_insert of a member");
		AvSetPtr empty =
			av_set_range(ep, FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, 0, world.size());
		expect_refused(fi_av_set_remove(empty.get(), world[0]), {-FI_EINVAL},
			       "fi_av_set_remove of a non-member");
		refused += 5;
	}

	// A set this endpoint is not in cannot be joined from it.
	{
		std::vector<fi_addr_t> others;
		for (size_t r = 0; r < world.size(); ++r)
			if (static_cast<int>(r) != boot.rank())
				others.push_back(world[r]);
		AvSetPtr without_me = av_set_inserted(ep, others);
		fi_addr_t addr = FI_ADDR_NOTAVAIL;
		FT_CHECK(fi_av_set_addr(without_me.get(), &addr));
		fid_mc* mc = nullptr;
		int context = 0;
		expect_refused(
			fi_join_collective(ep.ep(), addr, without_me.get(), 0, &mc, &context),
			{-FI_EINVAL}, "fi_join_collective on a set without this endpoint");
		++refused;
	}

	// The groups still work after all of that.
	CheckedCall checked;
	run_checked(ep, checked, *full, {FI_ALLREDUCE, 33, FI_INT64, FI_SUM}, make_seed(0xE22, 1));
	run_checked(ep, checked, *strided,
		    {FI_BROADCAST, 33, FI_INT16, FI_SUM, strided->size() - 1}, make_seed(0xE22, 2));
	check_barrier_semantics(ep, boot, *full, 0, 3);
	expect(ep.stray_join_events() == 0, "%zu join events for no group", ep.stray_join_events());
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, strfmt("%zu invalid calls refused at once, with no completion; groups "
				  "still verified",
				  refused));
}

// Exchanges addresses and calls fi_join_collective on the set of every
// rank (kept in `set`), without waiting; returns its result.
int join_every_rank(CollEndpoint& ep, Bootstrap& boot, AvSetPtr& set, fid_mc** mc, void* context)
{
	const auto world = ep.exchange_addresses(boot);
	set = av_set_range(ep, world.front(), world.back(), 1, world.size());
	fi_addr_t addr = FI_ADDR_NOTAVAIL;
	FT_CHECK(fi_av_set_addr(set.get(), &addr));
	return fi_join_collective(ep.ep(), addr, set.get(), 0, mc, context);
}

// fi_join_collective needs an EQ bound to the endpoint (fi_collective(3)).
void run_join_without_eq(Bootstrap& boot, const TestOptions& options)
{
	std::string refused_with;
	{
		EndpointOptions without_eq{options.provider};
		without_eq.bind_eq = false;
		CollEndpoint ep(without_eq);
		AvSetPtr set;
		fid_mc* mc = nullptr;
		int context = 0;
		const int rc = join_every_rank(ep, boot, set, &mc, &context);
		expect_refused(rc, {-FI_ENOEQ, -FI_EINVAL, -FI_EOPBADSTATE},
			       "fi_join_collective without an EQ");
		refused_with = rc_text(rc);
		boot.barrier();
	}
	// The same join on endpoints with an EQ succeeds: the EQ was the problem.
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	check_barrier_semantics(ep, boot, *group, 0, 2);
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, "refused with " + refused_with + "; joins once an EQ is bound");
}

// An application that waits for its join in fi_eq_sread alone and never
// reads a CQ (manual progress): reading the EQ must drive the join, or
// every member blocks there for good.
void run_join_eq_only(Bootstrap& boot, const TestOptions& options)
{
	EndpointOptions blocking{options.provider};
	blocking.eq_wait_obj = FI_WAIT_UNSPEC;
	CollEndpoint ep(blocking);
	AvSetPtr set;
	fid_mc* raw = nullptr;
	int context = 0;
	FT_CHECK(join_every_rank(ep, boot, set, &raw, &context));
	FidPtr<fid_mc> mc(raw);
	const auto budget = seconds(20);
	Deadline deadline(budget);
	uint32_t event = 0;
	fi_eq_entry entry{};
	ssize_t rc;
	while ((rc = fi_eq_sread(ep.eq(), &event, &entry, sizeof entry, 100, 0)) == -FI_EAGAIN) {
		boot.check_abort();
		expect(!deadline.expired(),
		       "no FI_JOIN_COMPLETE after %lld s in fi_eq_sread (the only call waiting "
		       "for it)",
		       static_cast<long long>(budget.count()));
	}
	if (rc == -FI_EAVAIL) {
		fi_eq_err_entry err{};
		fi_eq_readerr(ep.eq(), &err, 0);
		throw CheckFailure(strfmt("the join failed: %s", fi_strerror(err.err)));
	}
	expect(rc == static_cast<ssize_t>(sizeof entry) && event == FI_JOIN_COMPLETE,
	       "fi_eq_sread returned %zd, event %u: want FI_JOIN_COMPLETE", rc, event);
	expect(entry.fid == &raw->fid && entry.context == &context,
	       "FI_JOIN_COMPLETE names fid %p context %p, want %p and %p",
	       static_cast<void*>(entry.fid), entry.context, static_cast<void*>(&raw->fid),
	       static_cast<void*>(&context));
	// The group works (now reading the CQ).
	OpContext ctx;
	FT_CHECK(fi_barrier(ep.ep(), fi_mc_addr(raw), &ctx));
	ep.track(ctx);
	ep.wait_done(ctx, "barrier on the group joined through fi_eq_sread");
	expect_collective_completion(ctx, "barrier on the group joined through fi_eq_sread");
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, "FI_JOIN_COMPLETE reached a member waiting only in fi_eq_sread");
}

// fi_query_collective: every collective x datatype (x operation), checked
// against fi_atomic(3)'s table and the element sizes of this platform.
void run_query(Bootstrap& boot, const TestOptions& options)
{
	CollEndpoint ep({options.provider});
	size_t supported = 0, unsupported = 0;
	for (int c = FI_BARRIER; c <= FI_GATHER; ++c) {
		const auto coll = static_cast<fi_collective_op>(c);
		if (coll == FI_BARRIER) {
			fi_collective_attr attr{};
			attr.op = FI_NOOP;
			attr.datatype = FI_VOID;
			const int rc = fi_query_collective(ep.domain(), coll, &attr, 0);
			expect(rc == 0,
			       "fi_query_collective(barrier, FI_VOID, FI_NOOP) returned %s",
			       rc_text(rc).c_str());
			expect(attr.max_members >= 8,
			       "barrier: max_members %zu < the 8 ranks the sweep uses",
			       attr.max_members);
			++supported;
			continue;
		}
		for (const DatatypeInfo& type : datatypes()) {
			const auto ops = is_reduction(coll)
						 ? std::vector<fi_op>(reduction_ops().begin(),
								      reduction_ops().end())
						 : std::vector<fi_op>{FI_NOOP};
			for (fi_op op : ops) {
				fi_collective_attr attr{};
				attr.op = op;
				attr.datatype = type.type;
				const int rc = fi_query_collective(ep.domain(), coll, &attr, 0);
				const std::string what = strfmt(
					"fi_query_collective(%s, %s%s%s)", collective_name(coll),
					datatype_name(type.type), is_reduction(coll) ? ", " : "",
					is_reduction(coll) ? op_name(op) : "");
				if (!is_reduction(coll) || reduction_allowed(type.type, op)) {
					expect(rc == 0, "%s returned %s, want 0", what.c_str(),
					       rc_text(rc).c_str());
					expect(attr.datatype_attr.size == type.size,
					       "%s: datatype_attr.size %zu, want %zu", what.c_str(),
					       attr.datatype_attr.size, type.size);
					expect(attr.datatype_attr.count > 0,
					       "%s: datatype_attr.count 0", what.c_str());
					expect(attr.max_members >= 8, "%s: max_members %zu",
					       what.c_str(), attr.max_members);
					++supported;
				} else {
					expect(rc == -FI_EOPNOTSUPP, "%s returned %s, want %s",
					       what.c_str(), rc_text(rc).c_str(),
					       rc_text(-FI_EOPNOTSUPP).c_str());
					++unsupported;
				}
			}
		}
		// Operations that are no reduction.
		if (is_reduction(coll)) {
			for (fi_op op : {FI_ATOMIC_READ, FI_ATOMIC_WRITE, FI_CSWAP}) {
				fi_collective_attr attr{};
				attr.op = op;
				attr.datatype = FI_INT32;
				const int rc = fi_query_collective(ep.domain(), coll, &attr, 0);
				expect(rc == -FI_EOPNOTSUPP,
				       "fi_query_collective(%s, int32, %s) returned %s, want %s",
				       collective_name(coll), op_name(op), rc_text(rc).c_str(),
				       rc_text(-FI_EOPNOTSUPP).c_str());
				++unsupported;
			}
		}
	}
	summary_note(boot, strfmt("%zu supported and %zu unsupported combinations answered as "
				  "fi_atomic(3) defines them",
				  supported, unsupported));
}

// Order of members after each AV set operation, observed through the group
// the provider builds: an allgather of world ranks lists them in group-rank
// order, which fi_av_set(3) defines as the set's order.
void run_av_set_operations(Bootstrap& boot, const TestOptions& options)
{
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	const int n = boot.size();
	auto range = [&](int first, int last, uint64_t stride) {
		return av_set_range(
			ep, world[static_cast<size_t>(first)], world[static_cast<size_t>(last)],
			stride, static_cast<size_t>((last - first) / static_cast<int>(stride) + 1));
	};
	auto inserted = [&](std::initializer_list<int> ranks) {
		std::vector<fi_addr_t> addrs;
		for (int r : ranks)
			addrs.push_back(world[static_cast<size_t>(r)]);
		return av_set_inserted(ep, addrs);
	};

	struct Expected {
		std::string name;
		AvSetPtr set;
		std::vector<int> members;
	};
	std::vector<Expected> cases;
	{
		// evens {0,2,4} union {4,3,2,1,0}: new members appended -> {0,2,4,3,1}
		AvSetPtr dst = range(0, 4, 2);
		AvSetPtr src = inserted({4, 3, 2, 1, 0});
		FT_CHECK(fi_av_set_union(dst.get(), src.get()));
		cases.push_back({"union", std::move(dst), {0, 2, 4, 3, 1}});
	}
	{
		// {0,1,2,3,4} intersect {3,1,4}: destination order kept -> {1,3,4}
		AvSetPtr dst = range(0, 4, 1);
		AvSetPtr src = inserted({3, 1, 4});
		FT_CHECK(fi_av_set_intersect(dst.get(), src.get()));
		cases.push_back({"intersect", std::move(dst), {1, 3, 4}});
	}
	{
		// {4,3,2,1,0} diff {0,2,4} -> {3,1}
		AvSetPtr dst = inserted({4, 3, 2, 1, 0});
		AvSetPtr src = range(0, 4, 2);
		FT_CHECK(fi_av_set_diff(dst.get(), src.get()));
		cases.push_back({"diff", std::move(dst), {3, 1}});
	}
	{
		AvSetPtr dst = range(0, 4, 1);
		FT_CHECK(fi_av_set_remove(dst.get(), world[2]));
		cases.push_back({"remove", std::move(dst), {0, 1, 3, 4}});
	}
	{
		fi_av_set_attr attr{};
		attr.count = static_cast<size_t>(n);
		attr.start_addr = FI_ADDR_NOTAVAIL;
		attr.end_addr = FI_ADDR_NOTAVAIL;
		attr.flags = FI_UNIVERSE;
		fid_av_set* raw = nullptr;
		FT_CHECK(fi_av_set(ep.av(), &attr, &raw, nullptr));
		cases.push_back({"FI_UNIVERSE", AvSetPtr(raw), {0, 1, 2, 3, 4}});
	}

	CheckedCall checked;
	for (size_t k = 0; k < cases.size(); ++k) {
		Expected& c = cases[k];
		const bool member = std::find(c.members.begin(), c.members.end(), boot.rank()) !=
				    c.members.end();
		if (!member)
			continue;
		Group group(ep, std::move(c.set), c.members, world, boot.rank(), c.name + " set");
		// Each member contributes its world rank; the allgather lists them
		// in group order.
		GuardedBuffer mine, all;
		mine.prepare(sizeof(int32_t));
		all.prepare(sizeof(int32_t) * c.members.size());
		const int32_t me = boot.rank();
		std::memcpy(mine.data(), &me, sizeof me);
		OpContext ctx;
		post(ep, group, {FI_ALLGATHER, 1, FI_INT32}, &mine, &all, ctx);
		ep.wait_done(ctx, c.name + " allgather");
		expect_collective_completion(ctx, c.name + " allgather");
		std::vector<int32_t> order(c.members.size());
		std::memcpy(order.data(), all.data(), all.size());
		std::string got, want;
		for (size_t i = 0; i < order.size(); ++i) {
			got += strfmt("%s%d", i ? "," : "", order[i]);
			want += strfmt("%s%d", i ? "," : "", c.members[i]);
		}
		expect(got == want, "%s: group order {%s}, fi_av_set(3) defines {%s}",
		       c.name.c_str(), got.c_str(), want.c_str());
		run_checked(ep, checked, group, {FI_ALLREDUCE, 17, FI_INT32, FI_SUM},
			    make_seed(0xA5E7, k));
	}
	expect(ep.stray_join_events() == 0, "%zu join events for no group", ep.stray_join_events());
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, "union, intersect, diff, remove and FI_UNIVERSE give the member order "
			   "fi_av_set(3) defines");
}

} // namespace

void add_error_cases(std::vector<CollCase>& cases)
{
	cases.push_back({"invalid-arguments",
			 "4 ranks: bad datatype/op pairs, roots outside the group, addresses that "
			 "are no group, bad AV "
			 "sets, joining a set without oneself: refused at once, no completion, "
			 "groups still work",
			 4, seconds(120), "", run_invalid_arguments});
	cases.push_back({"join-without-eq",
			 "fi_join_collective on an endpoint without an EQ is refused", 2,
			 seconds(60), "", run_join_without_eq});
	cases.push_back({"join-eq-only",
			 "3 ranks join and wait only in fi_eq_sread (no CQ read): the EQ read "
			 "drives the join to FI_JOIN_COMPLETE; the group then works",
			 3, seconds(60), "", run_join_eq_only});
	cases.push_back(
		{"query-collective",
		 "fi_query_collective: 0 for the pairs fi_atomic(3) defines (with datatype size), "
		 "-FI_EOPNOTSUPP otherwise",
		 1, seconds(60), "", run_query});
	cases.push_back({"av-set-operations",
			 "5 ranks: union, intersect, diff, remove, FI_UNIVERSE give the member "
			 "order fi_av_set(3) "
			 "defines (observed through allgather)",
			 5, seconds(120), "", run_av_set_operations});
}

} // namespace fabtests::coll
