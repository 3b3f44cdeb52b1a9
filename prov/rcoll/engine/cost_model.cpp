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

// The model's figures for `d`, given whether it goes by rendezvous.
Prediction formulas(const OpDescriptor& d, const Limits& limits, const CostParams& c,
		    bool rendezvous) noexcept
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
	auto fold = [&] {
		if (folded) {
			lat += 2;
			serial_bytes += 2 * n;
			reduce_bytes += n;
		}
	};
	switch (d.coll) {
	case Collective::barrier:
		if (d.algorithm == Algorithm::ktree)
			lat = 2.0 * knomial_levels(p, tree_radix(d, limits));
		else
			lat = d.algorithm == Algorithm::pairwise ? lp + (folded ? 2 : 0) : L;
		break;
	case Collective::broadcast:
		if (d.algorithm == Algorithm::scatter_allgather) {
			lat = L + (p - 1) + 1;
			serial_bytes = 2.0 * (p - 1) / p * n;
			bytes = serial_bytes;
		} else {
			// A node sends k messages on each level below it.
			const double k =
				d.algorithm == Algorithm::ktree ? tree_radix(d, limits) : 1;
			const double l = knomial_levels(p, static_cast<uint32_t>(k));
			lat = l;
			serial_bytes = l * k * n;
			bytes = l * k * n;
		}
		break;
	case Collective::allreduce:
		switch (d.algorithm) {
		case Algorithm::ktree: {
			// Per level: k children's vectors into one link and one
			// reduction, then k copies of the result out of one link.
			const double k = tree_radix(d, limits);
			const double l = knomial_levels(p, static_cast<uint32_t>(k));
			lat = 2 * l;
			serial_bytes = 2 * l * k * n;
			reduce_bytes = l * k * n;
			bytes = l * k * n;
			break;
		}
		case Algorithm::recursive_doubling:
			lat = lp;
			serial_bytes = lp * n;
			reduce_bytes = lp * n;
			bytes = lp * n + (folded ? n : 0);
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
		} else {
			const double k = tree_radix(d, limits);
			const double l = knomial_levels(p, static_cast<uint32_t>(k));
			lat = l;
			serial_bytes = l * k * n;
			reduce_bytes = l * k * n;
			bytes = n;
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
			const double k = tree_radix(d, limits);
			const double l = knomial_levels(p, static_cast<uint32_t>(k));
			lat = 2 * l;
			serial_bytes = l * k * total + total;
			reduce_bytes = l * k * total;
			bytes = l * k * total;
		}
		break;
	}
	case Collective::allgather:
		lat = d.algorithm == Algorithm::bruck ? L : p - 1;
		serial_bytes = (p - 1) * n;
		bytes = serial_bytes;
		break;
	case Collective::scatter:
	case Collective::gather:
		lat = L;
		serial_bytes = (p - 1) * n;
		bytes = serial_bytes;
		break;
	case Collective::alltoall:
		// All blocks leave at once: one latency, p - 1 blocks through each link.
		lat = 1;
		serial_bytes = (p - 1) * n;
		bytes = serial_bytes;
		break;
	}
	r.rendezvous = rendezvous;
	if (r.rendezvous)
		lat += 1;
	r.latency_terms = lat;
	r.bytes_per_rank = bytes;
	r.time_us = lat * a + serial_bytes * bt + reduce_bytes * g;
	return r;
}

} // namespace

double allreduce_bandwidth_lower_bound(uint32_t p, double n) noexcept
{
	return p <= 1 ? 0.0 : 2.0 * (p - 1) / p * n;
}

Prediction predict(const OpDescriptor& d, const Limits& limits, const CostParams& c)
{
	if (d.size <= 1 || d.coll == Collective::barrier)
		return formulas(d, limits, c, false);
	const Staging staging = staging_of(d, limits);
	Prediction r = formulas(d, limits, c, staging == Staging::rendezvous);
	// A schedule that does not fit the limits cannot run at all.
	if (staging == Staging::unbuildable)
		r.time_us = INFINITY;
	return r;
}

Choice Selector::choose(const OpDescriptor& d, const Limits& limits) const
{
	const uint64_t bytes = d.count * datatype_size(d.dtype);
	for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
		if (it->coll != d.coll || bytes < it->min_bytes || bytes > it->max_bytes ||
		    d.size < it->min_size || d.size > it->max_size)
			continue;
		return {it->algorithm, it->params, true};
	}
	Choice best, best_on_paper;
	double best_time = INFINITY, best_paper_time = INFINITY;
	OpDescriptor probe = d;
	for (Algorithm alg : algorithms_for(d.coll)) {
		probe.algorithm = alg;
		std::vector<uint32_t> radixes{0};
		if (alg == Algorithm::ktree) {
			// Degrees 1 (binomial) to 7, Gupta's range: wider trees look
			// cheap to a model without per-message receive overhead, and
			// Gupta measured the flat tree as poor (reduction work and
			// contention all at the root).
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
			const double lower = formulas(probe, limits, params_, false).time_us;
			if (lower < best_paper_time) {
				best_paper_time = lower;
				best_on_paper = Choice{alg, probe.params, false};
			}
			if (lower >= best_time)
				continue;
			double t = predict(probe, limits, params_).time_us;
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
