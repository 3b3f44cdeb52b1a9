#include "engine/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <new>

#include "engine/patterns.hpp"

namespace rcoll::engine {

namespace {

unsigned knomial_levels(uint32_t p, uint32_t k) noexcept
{
	return pattern::KnomialTree{p, k}.levels();
}

// How the schedule of `d` stages its data: its builder decides
// (ScheduleBuilder::choose_landing, from what it stages and copies), so the
// model asks the builder instead of repeating the rule. Every member stages
// alike, so rank 0's layout stands for all.
enum class Staging { eager, rendezvous, unbuildable };

Staging staging_of(const OpDescriptor& d, const Limits& limits)
{
	Schedule s;
	switch (build_schedule(d, 0, limits, s)) {
	case Errc::ok: return s.layout.landing_in_scratch ? Staging::eager : Staging::rendezvous;
	case Errc::no_memory: throw std::bad_alloc();
	default: return Staging::unbuildable;
	}
}

// The edges between members on one host, for a group that also spans hosts:
// which communication rounds of a pattern use none but such edges.
class Edges {
public:
	Edges(Placement hosts, uint32_t p)
		: hosts_(hosts), mixed_(spread_of(hosts, p) == Spread::shared)
	{}

	// Whether the edge a-b stays on a host, in a group where some edges do
	// and others do not (otherwise every edge costs alpha and beta, as the
	// group's own constants have it).
	bool local(uint32_t a, uint32_t b) const noexcept
	{
		return mixed_ && hosts_[a] == hosts_[b];
	}

	// Which levels of the degree-k tree rooted at `root` have every edge
	// local: a tree whose builder groups its members by host
	// (pattern::HostOrder), or, `grouped` false, one in the rotation's order.
	std::vector<bool> local_tree_levels(uint32_t p, uint32_t k, uint32_t root,
					    bool grouped) const
	{
		const pattern::KnomialTree tree{p, k};
		std::vector<bool> out(tree.levels(), false);
		if (!mixed_)
			return out;
		const pattern::HostOrder order =
			grouped ? pattern::HostOrder(p, root, hosts_) : pattern::HostOrder(p, root);
		for (unsigned level = 0; level < tree.levels(); level++) {
			bool all = true;
			for (uint32_t v = 0; v < p && all; v++)
				for (uint32_t c : tree.children_at(v, level))
					all &= local(order.to_real(v), order.to_real(c));
			out[level] = all;
		}
		return out;
	}

	// Each host's members, as the placement has them (each member a host
	// of its own without one).
	pattern::HostGroups groups(uint32_t p) const { return pattern::HostGroups(p, hosts_); }
	bool mixed() const noexcept { return mixed_; }

	// Whether every rank r < ranks reaches `partner(r)` locally.
	template <class Partner>
	bool round_local(uint32_t ranks, Partner partner) const
	{
		if (!mixed_)
			return false;
		for (uint32_t r = 0; r < ranks; r++)
			if (!local(r, partner(r)))
				return false;
		return true;
	}

private:
	Placement hosts_;
	bool mixed_ = false;
};

// The model's figures for `d`, given whether it goes by rendezvous.
Prediction formulas(const OpDescriptor& d, const Limits& limits, const CostParams& c,
		    bool rendezvous, const Edges& edges)
{
	const double a = c.alpha_us, bt = c.beta_us_per_byte, g = c.gamma_us_per_byte;
	const uint32_t p = d.size;
	const double n = double(d.count) * double(datatype_size(d.dtype));
	const double L = pattern::ceil_log2(p);
	const pattern::FoldedHypercube cube{p};
	const double pof2 = cube.pof2();
	const double lp = cube.dimensions();
	const bool folded = cube.extras() > 0;
	Prediction r;
	if (p <= 1)
		return r;

	double lat = 0, bytes = 0, reduce_bytes = 0, serial_bytes = 0;
	// Messages on the critical path that wait for their rank's previous
	// one (LogP's o each), beyond the one per round that alpha covers.
	double queued = 0;
	// The parts of lat, serial_bytes and queued that go over edges on one host.
	double local_lat = 0, local_bytes = 0, local_queued = 0;
	const bool fold_local = folded && edges.round_local(cube.extras(), [&](uint32_t r) {
		return r + cube.pof2();
	});
	auto fold = [&] {
		if (folded) {
			lat += 2;
			serial_bytes += 2 * n;
			reduce_bytes += n;
			if (fold_local) {
				local_lat += 2;
				local_bytes += 2 * n;
			}
		}
	};
	// Hypercube dimensions whose exchanges all stay on a host, and the
	// share of the vector that recursive halving moves across them.
	unsigned local_dims = 0;
	double local_halving_share = 0;
	for (unsigned dim = 0; dim < unsigned(lp); dim++)
		if (edges.round_local(uint32_t(pof2), [&](uint32_t r) {
			    return pattern::FoldedHypercube::partner(r, dim);
		    })) {
			local_dims++;
			local_halving_share += double(uint32_t(1) << dim) / pof2;
		}
	// A degree-k tree's levels on one host, and, for LogP's o, the messages
	// its root sends (or hears) on each level beyond the first: the root
	// has the most children on every level, so it sets the pace. Both
	// count one direction; a tree that goes up and down doubles them.
	struct TreeLevels {
		double local = 0, queued = 0, local_queued = 0;
	};
	auto tree_levels = [&](uint32_t k, uint32_t root, bool grouped = true) {
		const pattern::KnomialTree tree{p, k};
		const std::vector<bool> local = edges.local_tree_levels(p, k, root, grouped);
		TreeLevels t;
		for (unsigned level = 0; level < tree.levels(); level++) {
			const double extra = double(tree.children_at(0, level).size()) - 1;
			t.queued += extra;
			if (local[level]) {
				t.local += 1;
				t.local_queued += extra;
			}
		}
		return t;
	};
	switch (d.coll) {
	case Collective::barrier:
		if (d.algorithm == Algorithm::ktree) {
			const uint32_t k = tree_radix(d, limits);
			// Per level, a parent hears its children, then releases them.
			const TreeLevels t = tree_levels(k, 0);
			lat = 2.0 * knomial_levels(p, k);
			local_lat = 2.0 * t.local;
			queued = 2.0 * t.queued;
			local_queued = 2.0 * t.local_queued;
		} else if (d.algorithm == Algorithm::pairwise) {
			lat = lp + (folded ? 2 : 0);
			local_lat = local_dims + (fold_local ? 2 : 0);
		} else {
			lat = L;
			const pattern::Dissemination rounds{p};
			for (unsigned j = 0; j < rounds.rounds(); j++)
				local_lat += edges.round_local(
					p, [&](uint32_t r) { return rounds.to(r, j); });
		}
		break;
	case Collective::broadcast:
		if (d.algorithm == Algorithm::scatter_allgather) {
			// A binomial scatter, then an allgather along the members
			// in order (which crosses hosts wherever any edge does);
			// the scatter's bytes are all charged between hosts.
			lat = L + (p - 1) + 1;
			serial_bytes = 2.0 * (p - 1) / p * n;
			bytes = serial_bytes;
			local_lat = tree_levels(1, d.root).local;
		} else {
			// A node sends k messages on each level below it.
			const uint32_t k =
				d.algorithm == Algorithm::ktree ? tree_radix(d, limits) : 1;
			const double l = knomial_levels(p, k);
			const TreeLevels t = tree_levels(k, d.root);
			lat = l;
			serial_bytes = l * k * n;
			bytes = l * k * n;
			local_lat = t.local;
			local_bytes = local_lat * k * n;
			queued = t.queued;
			local_queued = t.local_queued;
		}
		break;
	case Collective::allreduce:
		switch (d.algorithm) {
		case Algorithm::ktree: {
			// Per level: k children's vectors into one link and one
			// reduction, then k copies of the result out of one link.
			const uint32_t k = tree_radix(d, limits);
			const double l = knomial_levels(p, k);
			const TreeLevels t = tree_levels(k, 0);
			lat = 2 * l;
			serial_bytes = 2 * l * k * n;
			reduce_bytes = l * k * n;
			bytes = l * k * n;
			local_lat = 2.0 * t.local;
			local_bytes = local_lat * k * n;
			queued = 2.0 * t.queued;
			local_queued = 2.0 * t.local_queued;
			break;
		}
		case Algorithm::recursive_doubling:
			lat = lp;
			serial_bytes = lp * n;
			reduce_bytes = lp * n;
			bytes = lp * n + (folded ? n : 0);
			local_lat = local_dims;
			local_bytes = local_dims * n;
			// The fold's two latencies partly overlap the exchange (the
			// simulated fabric finishes 3 members in two), yet with one
			// less the model chose this over the tree at 3 ranks, which
			// measured slower: the extra's partner reduces twice while
			// the extra waits.
			fold();
			break;
		case Algorithm::rabenseifner:
			lat = 2 * lp;
			serial_bytes = 2 * (pof2 - 1) / pof2 * n;
			reduce_bytes = (pof2 - 1) / pof2 * n;
			bytes = serial_bytes + (folded ? n : 0);
			// Dimension j moves 2^j / pof2 of the vector each way.
			local_lat = 2.0 * local_dims;
			local_bytes = 2 * local_halving_share * n;
			fold();
			break;
		default: // ring
			lat = 2.0 * (p - 1);
			serial_bytes = 2.0 * (p - 1) / p * n;
			reduce_bytes = (p - 1.0) / p * n;
			bytes = serial_bytes;
			break;
		}
		break;
	case Collective::reduce:
		if (d.algorithm == Algorithm::ring) {
			lat = (p - 1) + 1;
			serial_bytes = 2.0 * (p - 1) / p * n;
			reduce_bytes = (p - 1.0) / p * n;
			bytes = (p - 1.0) / p * n + n / p;
			queued = p - 2; // the root gathers every member's segment
		} else {
			const uint32_t k = tree_radix(d, limits);
			const double l = knomial_levels(p, k);
			const TreeLevels t = tree_levels(k, d.root);
			lat = l;
			serial_bytes = l * k * n;
			reduce_bytes = l * k * n;
			bytes = n;
			local_lat = t.local;
			local_bytes = local_lat * k * n;
			queued = t.queued;
			local_queued = t.local_queued;
		}
		break;
	case Collective::reduce_scatter: {
		const double total = n * p;
		if (d.algorithm == Algorithm::ring) {
			lat = p - 1;
			serial_bytes = (p - 1) * n;
			reduce_bytes = (p - 1) * n;
			bytes = serial_bytes;
		} else {
			const uint32_t k = tree_radix(d, limits);
			const double l = knomial_levels(p, k);
			lat = 2 * l;
			serial_bytes = l * k * total + total;
			reduce_bytes = l * k * total;
			bytes = l * k * total;
			const TreeLevels t = tree_levels(k, 0, false);
			local_lat = 2.0 * t.local;
			local_bytes = local_lat / 2 * k * total;
			queued = 2.0 * t.queued;
			local_queued = 2.0 * t.local_queued;
		}
		break;
	}
	case Collective::allgather:
		if (d.algorithm == Algorithm::hierarchical) {
			// Members to their leader (one round on the host), leaders to
			// one another, then down each host's binomial tree. A
			// member's messages leave one after another: with o unknown
			// (0), a latency each, or writing to every leader at once
			// would look as cheap as one message. A host's blocks go in
			// a write per run of consecutive ranks: to the other leaders,
			// and, by rendezvous, down the tree.
			const pattern::HostGroups hosts = edges.groups(p);
			const double h = hosts.count(), m = hosts.largest();
			double exchange = 0, all_runs = 0;
			for (uint32_t g = 0; g < hosts.count(); g++) {
				const double runs = double(hosts.runs(g).size());
				exchange = std::max(exchange, (h - 1) * runs);
				all_runs += runs;
			}
			const double levels = pattern::ceil_log2(hosts.largest());
			const double on_host =
				(m > 1 ? 1 : 0) + levels * (rendezvous ? all_runs : 1);
			const double host_bytes = (m - 1) * n + levels * p * n;
			lat = on_host + exchange;
			serial_bytes = host_bytes + std::max((h - 1) * m * n, (p - m) * n);
			bytes = (h - 1) * m * n + levels * p * n;
			queued = std::max(m - 2, 0.0);
			if (edges.mixed()) {
				local_lat = on_host;
				local_bytes = host_bytes;
				local_queued = queued;
			}
			break;
		}
		if (d.algorithm == Algorithm::multi_leader) {
			// A block to each other host, then this member's own and the
			// blocks dealt to it to each member of its host, a write per
			// run of consecutive ranks (by rendezvous, its own first).
			// Messages count a latency each, as above. A host's first
			// member is dealt the most; hosts of one size are dealt
			// alike, and a host of one member passes nothing on, so one
			// host of each size from two members stands for the rest:
			// O(p) per size, where every host would cost O(p) each.
			const pattern::HostGroups hosts = edges.groups(p);
			const double h = hosts.count();
			double on_host = 0, host_bytes = 0;
			std::vector<bool> size_seen(p + 1, false);
			for (uint32_t g = 0; g < hosts.count(); g++) {
				const size_t size = hosts.members(g).size();
				if (size < 2 || size_seen[size])
					continue;
				size_seen[size] = true;
				const uint32_t first = hosts.members(g).front();
				std::vector<uint32_t> blocks = hosts.dealt_blocks(first);
				const double dealt = double(blocks.size());
				double writes =
					1 + double(pattern::HostGroups::runs_of(blocks).size());
				if (!rendezvous) {
					blocks.insert(std::upper_bound(blocks.begin(), blocks.end(),
								       first),
						      first);
					writes =
						double(pattern::HostGroups::runs_of(blocks).size());
				}
				const double others = double(hosts.members(g).size()) - 1;
				on_host = std::max(on_host, others * writes);
				host_bytes = std::max(host_bytes, others * (1 + dealt) * n);
			}
			lat = (h - 1) + on_host;
			serial_bytes = (h - 1) * n + host_bytes;
			bytes = serial_bytes;
			if (edges.mixed()) {
				local_lat = on_host;
				local_bytes = host_bytes;
			}
			break;
		}
		lat = d.algorithm == Algorithm::bruck ? L : p - 1;
		serial_bytes = (p - 1) * n;
		bytes = serial_bytes;
		if (d.algorithm == Algorithm::bruck) {
			const pattern::Bruck rounds{p};
			for (unsigned j = 0; j < rounds.rounds(); j++)
				if (edges.round_local(
					    p, [&](uint32_t r) { return rounds.send_to(r, j); })) {
					local_lat += 1;
					local_bytes += rounds.blocks_in_round(j) * n;
				}
		}
		break;
	case Collective::scatter:
	case Collective::gather:
		lat = L;
		serial_bytes = (p - 1) * n;
		bytes = serial_bytes;
		local_lat = tree_levels(1, d.root, false).local;
		break;
	case Collective::alltoall:
		// All blocks leave at once: one latency, p - 1 blocks through each link.
		lat = 1;
		serial_bytes = (p - 1) * n;
		bytes = serial_bytes;
		queued = p - 2;
		break;
	}
	r.rendezvous = rendezvous;
	if (r.rendezvous)
		lat += 1;
	r.latency_terms = lat;
	r.bytes_per_rank = bytes;
	// A member's CPU posts its messages while its link moves their bytes:
	// whichever is busier sets the pace.
	// (In this order of terms, o = 0 gives the sum the model gave before o.)
	r.time_us = (lat - local_lat) * a +
		    std::max((serial_bytes - local_bytes) * bt,
			     (queued - local_queued) * c.overhead_us) +
		    reduce_bytes * g;
	if (local_lat > 0 || local_bytes > 0 || local_queued > 0)
		r.time_us += local_lat * c.local_alpha_us +
			     std::max(local_bytes * c.local_beta_us_per_byte,
				      local_queued * c.local_overhead_us);
	return r;
}

} // namespace

double allreduce_bandwidth_lower_bound(uint32_t p, double n) noexcept
{
	return p <= 1 ? 0.0 : 2.0 * (p - 1) / p * n;
}

namespace {

Prediction predict_on(const OpDescriptor& d, const Limits& limits, const CostParams& c,
		      const Edges& edges)
{
	if (d.size <= 1 || d.coll == Collective::barrier)
		return formulas(d, limits, c, false, edges);
	const Staging staging = staging_of(d, limits);
	Prediction r = formulas(d, limits, c, staging == Staging::rendezvous, edges);
	// A schedule that does not fit the limits cannot run at all.
	if (staging == Staging::unbuildable)
		r.time_us = INFINITY;
	return r;
}

} // namespace

Prediction predict(const OpDescriptor& d, const Limits& limits, const CostParams& c,
		   Placement placement)
{
	return predict_on(d, limits, c, Edges(placement, d.size));
}

Choice Selector::choose(const OpDescriptor& d, const Limits& limits, Placement placement,
			bool price_placement) const
{
	const uint64_t bytes = d.count * datatype_size(d.dtype);
	std::optional<std::optional<Spread>> spread; // worked out when a rule asks
	for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
		if (it->coll != d.coll || bytes < it->min_bytes || bytes > it->max_bytes ||
		    d.size < it->min_size || d.size > it->max_size)
			continue;
		if (it->hosts) {
			if (!spread)
				spread = spread_of(placement, d.size);
			if (*spread != it->hosts)
				continue;
		}
		if (it->algorithm == Algorithm::automatic)
			break; // @auto: the model decides
		return {it->algorithm, it->params, true};
	}
	const Edges edges(price_placement ? placement : Placement(), d.size);
	Choice best, best_on_paper;
	double best_time = INFINITY, best_paper_time = INFINITY;
	OpDescriptor probe = d;
	for (Algorithm alg : algorithms_for(d.coll)) {
		probe.algorithm = alg;
		std::vector<uint32_t> radixes{0};
		if (alg == Algorithm::ktree) {
			// Degrees 1 (binomial) to 7, Gupta's range: wider trees look
			// cheap where o is small next to alpha, and Gupta measured
			// the flat tree as poor (reduction work and contention all
			// at the root).
			radixes.clear();
			for (uint32_t k = 1; k <= 7 && k < d.size; ++k)
				radixes.push_back(k);
			if (radixes.empty())
				radixes.push_back(1);
		}
		for (uint32_t k : radixes) {
			probe.params = AlgorithmParams{k, 0};
			// A rendezvous only adds time, and finding out builds the
			// schedule (the ring's has 5 p steps): a candidate no
			// cheaper without one is passed over unbuilt.
			const double lower = formulas(probe, limits, params_, false, edges).time_us;
			if (lower < best_paper_time) {
				best_paper_time = lower;
				best_on_paper = Choice{alg, probe.params, false};
			}
			if (lower >= best_time)
				continue;
			double t = predict_on(probe, limits, params_, edges).time_us;
			if (t < best_time) {
				best_time = t;
				best = Choice{alg, probe.params, false};
			}
		}
	}
	// None fits the limits: the call fails as the cheapest one would.
	return best_time < INFINITY ? best : best_on_paper;
}

} // namespace rcoll::engine
