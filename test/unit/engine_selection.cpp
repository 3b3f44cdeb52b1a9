// Algorithm selection: the tuning grammar (accepted and rejected forms),
// rule precedence, and the alpha-beta-gamma model's choices and formulas.
#include <criterion/criterion.h>

#include <cmath>
#include <string>

#include "engine/cost_model.hpp"
#include "engine/tuning.hpp"

using namespace rcoll::engine;

namespace {

OpDescriptor op(Collective c, uint32_t p, uint64_t count, Datatype d = Datatype::float64)
{
	OpDescriptor o;
	o.coll = c;
	o.size = p;
	o.count = count;
	o.dtype = d;
	o.op = ReduceOp::sum;
	return o;
}

} // namespace

Test(engine_selection, sizes)
{
	uint64_t v = 0;
	cr_assert(parse_size("0", v) && v == 0);
	cr_assert(parse_size("4k", v) && v == 4096);
	cr_assert(parse_size("3M", v) && v == 3u << 20);
	cr_assert(parse_size("2g", v) && v == 2ull << 30);
	cr_assert(!parse_size("", v));
	cr_assert(!parse_size("k", v));
	cr_assert(!parse_size("12x", v));
	cr_assert(!parse_size("-1", v));
	cr_assert(!parse_size("99999999999999999999g", v));
	cr_assert(!parse_size("17179869184g", v));
}

Test(engine_selection, grammar_accepts_documented_example)
{
	std::vector<TuneRule> rules;
	std::string err;
	const char* text = "allreduce:0-4k:@recursive_doubling#allreduce:4k-inf:@ring:chunk=256k"
			   "#bcast:@binomial#allreduce:0-64:p=2-16:@ktree:k=3";
	cr_assert_eq(parse_tuning(text, rules, err), Errc::ok, "%s", err.c_str());
	cr_assert_eq(rules.size(), 4u);
	cr_assert_eq(rules[0].coll, Collective::allreduce);
	cr_assert_eq(rules[0].min_bytes, 0u);
	cr_assert_eq(rules[0].max_bytes, 4096u);
	cr_assert_eq(rules[0].algorithm, Algorithm::recursive_doubling);
	cr_assert_eq(rules[1].max_bytes, UINT64_MAX);
	cr_assert_eq(rules[1].params.chunk_bytes, 256u * 1024);
	cr_assert_eq(rules[2].coll, Collective::broadcast);
	cr_assert_eq(rules[2].min_bytes, 0u);
	cr_assert_eq(rules[2].max_bytes, UINT64_MAX);
	cr_assert_eq(rules[3].min_size, 2u);
	cr_assert_eq(rules[3].max_size, 16u);
	cr_assert_eq(rules[3].params.radix, 3u);
	cr_assert_eq(parse_tuning("", rules, err), Errc::ok);
	cr_assert(rules.empty());
}

Test(engine_selection, grammar_rejects_with_a_reason)
{
	const char* bad[] = {
		"allgather",                  // no algorithm
		"reduce_all:@ring",           // unknown collective
		"allreduce:@fastest",         // unknown algorithm
		"barrier:@ring",              // not an algorithm of barriers
		"allreduce:8k-4k:@ring",      // empty range
		"allreduce:4k:@ring",         // not a range
		"allreduce::@ring",           // empty field
		"allreduce:@ktree:k=0",       // degree must be positive
		"allreduce:@ring:chunk=0",    // chunk must be positive
		"allreduce:@ring:speed=1",    // unknown field
		"allreduce:p=0-4:@ring",      // group sizes start at 1
		"allreduce:@ring#",           // empty rule
		"allreduce:hosts=some:@ring", // unknown placement
		"allreduce:hosts=:@ring",     // no placement
		"allreduce:@auto:k=3",        // nothing to apply it to
	};
	for (const char* text : bad) {
		std::vector<TuneRule> rules(1);
		std::string err;
		cr_assert_eq(parse_tuning(text, rules, err), Errc::invalid_argument,
			     "accepted '%s'", text);
		cr_assert(!err.empty());
		cr_assert_eq(rules.size(), 1u, "rules changed on error");
	}
}

Test(engine_selection, last_matching_rule_wins)
{
	std::vector<TuneRule> rules;
	std::string err;
	cr_assert_eq(parse_tuning("allreduce:@ring#allreduce:0-1k:@recursive_doubling"
				  "#allreduce:0-1k:p=3-5:@ktree:k=2",
				  rules, err),
		     Errc::ok);
	Selector sel(CostParams{}, rules);
	Limits l;
	Choice c = sel.choose(op(Collective::allreduce, 8, 10), l); // 80 bytes
	cr_assert_eq(c.algorithm, Algorithm::recursive_doubling);
	cr_assert(c.from_rule);
	c = sel.choose(op(Collective::allreduce, 8, 1000), l); // 8000 bytes
	cr_assert_eq(c.algorithm, Algorithm::ring);
	c = sel.choose(op(Collective::allreduce, 4, 10), l);
	cr_assert_eq(c.algorithm, Algorithm::ktree);
	cr_assert_eq(c.params.radix, 2u);
	c = sel.choose(op(Collective::allreduce, 4, 1024 / 8), l); // exactly 1k: inclusive
	cr_assert_eq(c.algorithm, Algorithm::ktree);
	// Other collectives fall back to the model.
	c = sel.choose(op(Collective::broadcast, 8, 10), l);
	cr_assert(!c.from_rule);
	cr_assert(algorithm_supports(Collective::broadcast, c.algorithm));
}

// A rule with hosts= matches only the groups its placement names; @auto hands
// what it covers back to the model, under a rule that would match.
Test(engine_selection, rules_match_by_placement)
{
	std::vector<TuneRule> rules;
	std::string err;
	cr_assert_eq(parse_tuning("barrier:hosts=shared:@ktree:k=1#barrier:hosts=apart:@pairwise"
				  "#barrier:hosts=one:@dissemination"
				  "#broadcast:@binomial#broadcast:0-8:hosts=shared:@auto",
				  rules, err),
		     Errc::ok, "%s", err.c_str());
	cr_assert_eq(rules.size(), 5u);
	cr_assert_eq(rules[0].hosts, Spread::shared);
	cr_assert_eq(rules[1].hosts, Spread::apart);
	cr_assert_eq(rules[2].hosts, Spread::one_host);
	cr_assert(!rules[3].hosts);
	cr_assert_eq(rules[4].algorithm, Algorithm::automatic);
	const Selector sel(CostParams{20.0, 0.00033, 0.0002}, rules);
	Limits l;
	const uint32_t shared[] = {0, 1, 0, 1}, apart[] = {0, 1, 2, 3}, one[] = {2, 2, 2, 2};
	Choice c = sel.choose(op(Collective::barrier, 4, 0), l, shared, false);
	cr_assert(c.from_rule);
	cr_assert_eq(c.algorithm, Algorithm::ktree);
	cr_assert_eq(c.params.radix, 1u);
	cr_assert_eq(sel.choose(op(Collective::barrier, 4, 0), l, apart, false).algorithm,
		     Algorithm::pairwise);
	cr_assert_eq(sel.choose(op(Collective::barrier, 4, 0), l, one, false).algorithm,
		     Algorithm::dissemination);
	// Unknown placement (none, or of another size): no hosts= rule applies.
	cr_assert(!sel.choose(op(Collective::barrier, 4, 0), l).from_rule);
	cr_assert(!sel.choose(op(Collective::barrier, 3, 0), l, shared, false).from_rule);
	// @auto: the 8 B broadcast of the shared group goes to the model, which
	// takes the flat tree at these constants; elsewhere the binomial rule.
	c = sel.choose(op(Collective::broadcast, 4, 1), l, shared, false);
	cr_assert(!c.from_rule);
	cr_assert_eq(c.algorithm, Algorithm::ktree);
	cr_assert_eq(c.params.radix, 3u);
	c = sel.choose(op(Collective::broadcast, 4, 1), l, apart, false);
	cr_assert(c.from_rule);
	cr_assert_eq(c.algorithm, Algorithm::binomial);
	cr_assert(sel.choose(op(Collective::broadcast, 4, 2), l, shared, false).from_rule);

	cr_assert(!spread_of({}, 4));
	cr_assert(!spread_of(shared, 3));
	cr_assert_eq(spread_of(shared, 4), Spread::shared);
	cr_assert_eq(spread_of(apart, 4), Spread::apart);
	cr_assert_eq(spread_of(one, 4), Spread::one_host);
	cr_assert_eq(spread_of(std::span<const uint32_t>(one, 1), 1), Spread::one_host);
}

Test(engine_selection, model_picks_by_regime)
{
	Selector sel;
	Limits l;
	// Latency-bound: few rounds win.
	Choice small = sel.choose(op(Collective::allreduce, 64, 1), l);
	cr_assert(small.algorithm == Algorithm::recursive_doubling ||
		  small.algorithm == Algorithm::ktree);
	// Bandwidth-bound, p not a power of two: the ring (Rabenseifner pays
	// for the fold with a full vector each way).
	Choice big = sel.choose(op(Collective::allreduce, 48, 8 << 20), l);
	cr_assert_eq(big.algorithm, Algorithm::ring);
	// Same bandwidth term, fewer rounds: Rabenseifner on a power of two.
	big = sel.choose(op(Collective::allreduce, 64, 8 << 20), l);
	cr_assert_eq(big.algorithm, Algorithm::rabenseifner);
	// Barriers: from 3 members the tree, whose two passes take no more
	// rounds than the exchanges and which sends the fewest messages; at 2
	// members one exchange.
	cr_assert_eq(sel.choose(op(Collective::barrier, 12, 0), l).algorithm, Algorithm::ktree);
	cr_assert_eq(sel.choose(op(Collective::barrier, 16, 0), l).algorithm, Algorithm::ktree);
	cr_assert_eq(sel.choose(op(Collective::barrier, 4, 0), l).algorithm, Algorithm::ktree);
	cr_assert_eq(sel.choose(op(Collective::barrier, 2, 0), l).algorithm, Algorithm::pairwise);
	// Large broadcast: scatter + allgather.
	cr_assert_eq(sel.choose(op(Collective::broadcast, 64, 1 << 20), l).algorithm,
		     Algorithm::scatter_allgather);
	// Small broadcast: the fewest levels, a k-nomial tree of the widest
	// degree tried (7: two levels for 64 members, binomial takes six).
	Choice narrow = sel.choose(op(Collective::broadcast, 64, 1), l);
	cr_assert_eq(narrow.algorithm, Algorithm::ktree);
	cr_assert_eq(narrow.params.radix, 7u);
	// Every choice is an algorithm of the collective.
	for (unsigned c = 0; c < collective_count; ++c)
		for (uint32_t p : {1u, 2u, 7u, 64u, 16384u})
			for (uint64_t count : {0ull, 1ull, 1000ull, 1ull << 24}) {
				Choice ch = sel.choose(op(static_cast<Collective>(c), p, count), l);
				cr_assert(algorithm_supports(static_cast<Collective>(c),
							     ch.algorithm));
			}
}

Test(engine_selection, model_formulas)
{
	Limits l;
	CostParams cp{1.0, 0.001, 0.002};
	const uint32_t p = 16;
	const uint64_t count = 1 << 16; // n = 512 KiB of doubles
	const double n = count * 8.0;
	OpDescriptor d = op(Collective::allreduce, p, count);
	d.algorithm = Algorithm::ring;
	Prediction ring = predict(d, l, cp);
	// Patarasuk and Yuan: 2 (p - 1) alpha + 2 (p - 1) / p n beta + (p - 1) / p n gamma,
	// plus one alpha for the key exchange of the rendezvous.
	double want = (2.0 * (p - 1) + 1) * 1.0 + 2.0 * (p - 1) / p * n * 0.001 +
		      (p - 1.0) / p * n * 0.002;
	cr_assert(std::fabs(ring.time_us - want) < 1e-6 * want, "%f vs %f", ring.time_us, want);
	cr_assert(ring.rendezvous);
	cr_assert_eq(ring.bytes_per_rank, allreduce_bandwidth_lower_bound(p, n));
	d.algorithm = Algorithm::recursive_doubling;
	Prediction rd = predict(d, l, cp);
	cr_assert_eq(rd.bytes_per_rank, 4 * n); // log2(16) full vectors
	cr_assert(rd.bytes_per_rank > allreduce_bandwidth_lower_bound(p, n));
	d.algorithm = Algorithm::rabenseifner;
	cr_assert_eq(predict(d, l, cp).latency_terms, 2 * 4 + 1);
	// Costs grow with the message and with alpha.
	for (Algorithm a : algorithms_for(Collective::allreduce)) {
		d.algorithm = a;
		d.count = 100;
		double t1 = predict(d, l, cp).time_us;
		d.count = 100000;
		double t2 = predict(d, l, cp).time_us;
		cr_assert(t2 > t1, "%s", to_string(a).data());
		CostParams slow = cp;
		slow.alpha_us *= 10;
		cr_assert(predict(d, l, slow).time_us > t2);
	}
	cr_assert_eq(allreduce_bandwidth_lower_bound(1, n), 0.0);
	cr_assert_eq(allreduce_bandwidth_lower_bound(4, 100), 150.0);
}

// The model never picks a schedule that does not fit the limits while
// another does: with 64 counters a half, a 16 MiB broadcast's
// scatter-allgather needs more and the trees fit. When none fits, the
// choice is the cheapest on paper, whose build then says why.
Test(engine_selection, model_picks_only_what_fits)
{
	const Selector sel(CostParams{}, {});
	Limits few;
	few.counters = 64;
	for (uint32_t p : {64u, 256u, 1024u}) {
		OpDescriptor d = op(Collective::broadcast, p, 16ull << 20, Datatype::uint8);
		OpDescriptor scatter = d;
		scatter.algorithm = Algorithm::scatter_allgather;
		Schedule s;
		cr_assert_eq(build_schedule(scatter, 0, few, s), Errc::no_resources,
			     "p=%u: the case needs a candidate that does not fit", p);
		const Choice c = sel.choose(d, few);
		d.algorithm = c.algorithm;
		d.params = c.params;
		cr_assert_eq(build_schedule(d, 0, few, s), Errc::ok, "p=%u: chose %s", p,
			     std::string(to_string(c.algorithm)).c_str());
	}
	Limits none;
	none.counters = 1;
	OpDescriptor d = op(Collective::allreduce, 64, 1 << 20);
	const Choice c = sel.choose(d, none);
	cr_assert(algorithm_supports(d.coll, c.algorithm));
	d.algorithm = c.algorithm;
	d.params = c.params;
	Schedule s;
	cr_assert_eq(build_schedule(d, 0, none, s), Errc::no_resources);
}

// A group across hosts with members together on them: a round whose every
// edge stays on a host costs the local constants, any other the constants
// between hosts; a placement with no such edge, or no other, costs as none.
Test(engine_selection, model_charges_each_round_by_its_edges)
{
	Limits l;
	CostParams cp{20.0, 0.001, 0.002};
	cp.local_alpha_us = 0.5;
	cp.local_beta_us_per_byte = 0.0001;
	const uint32_t by_node[] = {0, 1, 0, 1}; // mpirun --map-by node on two hosts
	const uint32_t by_slot[] = {0, 0, 1, 1};
	const uint32_t apart[] = {0, 1, 2, 3}, together[] = {7, 7, 7, 7};
	OpDescriptor d = op(Collective::broadcast, 4, 1000, Datatype::uint8);
	d.algorithm = Algorithm::ktree;
	d.params.radix = 1;
	// Binomial from 0 over the members grouped by host (0 2 | 1 3 under
	// --map-by node, 0 1 | 2 3 under --map-by slot): the upper level goes
	// between the hosts, the lower one stays on them.
	const double n = 1000;
	cr_assert_float_eq(predict(d, l, cp, by_node).time_us, 20 + n * 0.001 + 0.5 + n * 0.0001,
			   1e-9);
	cr_assert_float_eq(predict(d, l, cp, by_slot).time_us, 20 + n * 0.001 + 0.5 + n * 0.0001,
			   1e-9);
	const double uniform = predict(d, l, cp).time_us;
	cr_assert_float_eq(uniform, 2 * (20 + n * 0.001), 1e-9);
	cr_assert_eq(predict(d, l, cp, apart).time_us, uniform);
	cr_assert_eq(predict(d, l, cp, together).time_us, uniform);
	// Rooted at 1 under --map-by node (1 3 | 2 0): 1 -> 3 and 2 -> 0 stay on
	// their hosts.
	d.root = 1;
	cr_assert_float_eq(predict(d, l, cp, by_node).time_us, 20 + n * 0.001 + 0.5 + n * 0.0001,
			   1e-9);
	// Recursive doubling: the dimension whose partners share a host is local.
	OpDescriptor a = op(Collective::allreduce, 4, 1, Datatype::float64);
	a.algorithm = Algorithm::recursive_doubling;
	const double rd = 20 + 0.5 + 8 * (0.001 + 0.0001) + 2 * 8 * 0.002;
	cr_assert_float_eq(predict(a, l, cp, by_node).time_us, rd, 1e-9);
	cr_assert_float_eq(predict(a, l, cp, by_slot).time_us, rd, 1e-9);
	cr_assert_float_eq(predict(a, l, cp).time_us, 40 + 2 * 8 * 0.001 + 2 * 8 * 0.002, 1e-9);
	// Rabenseifner: dimension 1 (partners 2 apart) is local under --map-by
	// node and moves half the vector each way.
	a.algorithm = Algorithm::rabenseifner;
	a.count = 1024;
	const double v = 8 * 1024;
	cr_assert_float_eq(predict(a, l, cp, by_node).time_us,
			   2 * 20 + 0.5 * v * 0.001 + 0.75 * v * 0.002 + 2 * 0.5 + v * 0.0001,
			   1e-9);
	// A fold onto a member on the same host: its two latencies are local.
	OpDescriptor folded = op(Collective::allreduce, 3, 1, Datatype::float64);
	folded.algorithm = Algorithm::recursive_doubling;
	const uint32_t fold_together[] = {0, 1, 0};
	cr_assert_float_eq(predict(folded, l, cp, fold_together).time_us,
			   20 + 8 * 0.001 + 2 * 8 * 0.002 + 2 * 0.5 + 2 * 8 * 0.0001, 1e-9);
	a.count = 1;
	// Every ring step has an edge between hosts, grouped or not: all are
	// charged alike.
	a.algorithm = Algorithm::ring;
	cr_assert_eq(predict(a, l, cp, by_node).time_us, predict(a, l, cp).time_us);
	// Grouped by host, a tree keeps levels on the hosts where the ranks'
	// order has none: 6 members round-robin over 3 hosts (0 3 | 1 4 | 2 5),
	// the binomial tree's lowest level joins each host's pair, at the
	// local cost.
	const uint32_t three_hosts[] = {0, 1, 2, 0, 1, 2};
	OpDescriptor six = op(Collective::broadcast, 6, 1000, Datatype::uint8);
	six.algorithm = Algorithm::ktree;
	six.params.radix = 1;
	cr_assert_float_eq(predict(six, l, cp, three_hosts).time_us,
			   2 * (20 + n * 0.001) + 0.5 + n * 0.0001, 1e-9);
	cr_assert_float_eq(predict(six, l, cp).time_us, 3 * (20 + n * 0.001), 1e-9);
	// The wrong number of entries is no placement.
	cr_assert_eq(predict(a, l, cp, std::span<const uint32_t>(by_node, 3)).time_us,
		     predict(a, l, cp).time_us);
}

// The selector follows: a mid-size broadcast over two hosts of two members
// each goes down a binomial tree, whose one level between hosts carries the
// message once, where the same members on four hosts take the flat tree,
// whose one level sends it three times.
Test(engine_selection, model_picks_by_placement)
{
	Limits l;
	CostParams cp{20.0, 0.00033, 0.0002};
	cp.local_alpha_us = 0.5;
	cp.local_beta_us_per_byte = 0.0001;
	const Selector sel(cp, {});
	const uint32_t by_node[] = {0, 1, 0, 1};
	const OpDescriptor d = op(Collective::broadcast, 4, 16 << 10, Datatype::uint8);
	const Choice apart = sel.choose(d, l);
	cr_assert_eq(apart.algorithm, Algorithm::ktree);
	cr_assert_eq(apart.params.radix, 3u);
	const Choice placed = sel.choose(d, l, by_node);
	cr_assert(placed.algorithm == Algorithm::binomial ||
			  (placed.algorithm == Algorithm::ktree && placed.params.radix == 1),
		  "chose %s radix %u", std::string(to_string(placed.algorithm)).c_str(),
		  placed.params.radix);
	OpDescriptor flat = d, chosen = d;
	flat.algorithm = apart.algorithm;
	flat.params = apart.params;
	chosen.algorithm = placed.algorithm;
	chosen.params = placed.params;
	cr_assert_lt(predict(chosen, l, cp, by_node).time_us,
		     predict(flat, l, cp, by_node).time_us);
}

// LogP's o: a flat tree's root sends (and in a barrier, also hears) its k
// children one after another, so each level costs alpha + (k - 1) o. With o
// large next to alpha the selector leaves the flat trees it takes at o = 0.
Test(engine_selection, model_charges_a_members_messages_one_after_another)
{
	Limits l;
	CostParams cp{20.0, 0.00033, 0.0002};
	OpDescriptor b = op(Collective::barrier, 4, 0);
	b.algorithm = Algorithm::ktree;
	b.params.radix = 3;
	const double flat = predict(b, l, cp).time_us;
	cr_assert_float_eq(flat, 2 * 20.0, 1e-9);
	CostParams busy = cp;
	busy.overhead_us = 4;
	cr_assert_float_eq(predict(b, l, busy).time_us, 2 * (20.0 + 2 * 4.0), 1e-9);
	// One message per member per round: o is never charged.
	for (Algorithm a : {Algorithm::pairwise, Algorithm::dissemination}) {
		b.algorithm = a;
		cr_assert_eq(predict(b, l, busy).time_us, predict(b, l, cp).time_us);
	}
	OpDescriptor bc = op(Collective::broadcast, 8, 1);
	bc.algorithm = Algorithm::binomial;
	cr_assert_eq(predict(bc, l, busy).time_us, predict(bc, l, cp).time_us);

	const Choice lean = Selector(cp, {}).choose(op(Collective::barrier, 4, 0), l);
	cr_assert_eq(lean.algorithm, Algorithm::ktree);
	cr_assert_eq(lean.params.radix, 3u);
	busy.overhead_us = 20;
	const Choice costly = Selector(busy, {}).choose(op(Collective::barrier, 4, 0), l);
	cr_assert_neq(costly.algorithm, Algorithm::ktree);
	const Choice tree = Selector(busy, {}).choose(op(Collective::broadcast, 8, 1), l);
	cr_assert(tree.algorithm == Algorithm::binomial ||
			  (tree.algorithm == Algorithm::ktree && tree.params.radix < 7),
		  "chose %s radix %u", std::string(to_string(tree.algorithm)).c_str(),
		  tree.params.radix);
}

// The kernel TCP cores' own rules parse, apply only to groups that share
// hosts, and give way to the model elsewhere.
Test(engine_selection, kernel_tcp_rules_apply_where_members_share_hosts)
{
	std::vector<TuneRule> rules;
	std::string err;
	cr_assert_eq(parse_tuning(kernel_tcp_tuning, rules, err), Errc::ok, "%s", err.c_str());
	cr_assert_eq(rules.size(), 6u);
	for (const TuneRule& r : rules)
		cr_assert_eq(r.hosts, Spread::shared);
	const Selector sel(CostParams{20.0, 0.00033, 0.0002}, rules);
	Limits l;
	const uint32_t shared[] = {0, 1, 0, 1}, apart[] = {0, 1, 2, 3};
	const Choice c = sel.choose(op(Collective::barrier, 4, 0), l, shared, false);
	cr_assert(c.from_rule);
	cr_assert_eq(c.algorithm, Algorithm::ktree);
	cr_assert_eq(c.params.radix, 1u);
	cr_assert(!sel.choose(op(Collective::barrier, 4, 0), l, apart, false).from_rule);
	cr_assert(sel.choose(op(Collective::allreduce, 4, 256 << 10 >> 3), l, shared, false)
			  .from_rule);
	cr_assert(!sel.choose(op(Collective::allreduce, 4, 512 << 10 >> 3), l, shared, false)
			   .from_rule);
	// Allgathers through one leader per host up to 32 KiB blocks, then
	// through every member.
	cr_assert_eq(sel.choose(op(Collective::allgather, 4, 8), l, shared, false).algorithm,
		     Algorithm::hierarchical);
	cr_assert_eq(
		sel.choose(op(Collective::allgather, 4, 32 << 10 >> 3), l, shared, false).algorithm,
		Algorithm::multi_leader);
	cr_assert(!sel.choose(op(Collective::allgather, 4, 8), l, apart, false).from_rule);
}
