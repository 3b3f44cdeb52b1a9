// Algorithm selection: an alpha-beta-gamma cost model (Hockney's model with
// a reduction term, as used by Thakur, Rabenseifner and Gropp 2005 and by
// Patarasuk and Yuan 2009) whose constants are runtime parameters, and
// tuning rules that override it (see tuning.hpp).
//
// Conventions of the model (the simulated fabric's modelled timing follows
// the same ones): a message of m bytes arrives alpha + m * beta after it
// leaves; alpha is latency, so concurrent messages overlap it, while beta
// is link occupancy, so the bytes a rank sends, and the bytes a rank
// receives, are serialised; reducing m bytes costs m * gamma. Local copies
// are not charged. In a group whose members run on several hosts, some of
// them together, a communication round that uses an edge between hosts costs
// alpha and beta, one whose edges all stay on a host costs local_alpha and
// local_beta (hierarchy-aware selection, as in Karonis et al. 2000, "Exploiting
// hierarchy in parallel computer networks to optimize collective operation
// performance").
//
// A rank's own messages do not overlap, however: each costs its CPU the
// overhead o of the LogP model (Culler et al. 1993, "LogP: towards a
// realistic model of parallel computation"), a system call on a kernel TCP
// core. alpha includes one message's o at each end, so a round in which a
// rank sends or receives k messages costs alpha + (k - 1) o: what makes a
// flat tree's root, with its k sends per level, slower than a binomial
// tree's where o is large.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "engine/schedule.hpp"

namespace rcoll::engine {

struct CostParams {
	double alpha_us = 2.0;           // per-message latency
	double beta_us_per_byte = 1e-4;  // 10 GB/s
	double gamma_us_per_byte = 2e-4; // 5 GB/s reduction throughput
	// Between two members on one host, where the group also spans hosts.
	double local_alpha_us = 0.5;
	double local_beta_us_per_byte = 1e-4;
	// LogP's o, per message a rank sends or receives beyond one per round.
	double overhead_us = 0;
	double local_overhead_us = 0;
};

struct Prediction {
	double time_us = 0;
	double latency_terms = 0;  // multiples of alpha on the critical path
	double bytes_per_rank = 0; // most bytes any rank sends
	bool rendezvous = false;   // a key exchange before the data, as the schedule has it
};

// Predicted cost of `d` (its algorithm and radix must be concrete): infinite
// when its schedule does not fit the limits. Throws std::bad_alloc when it
// cannot build the schedule it asks about.
Prediction predict(const OpDescriptor& d, const Limits& limits, const CostParams& params,
		   Placement placement = {});

// Lower bound on the bytes some rank must send for an allreduce of n bytes
// over p ranks (Patarasuk and Yuan, section 3): 2 (p - 1) / p * n.
double allreduce_bandwidth_lower_bound(uint32_t p, double n) noexcept;

struct TuneRule {
	Collective coll = Collective::barrier;
	uint64_t min_bytes = 0;          // inclusive
	uint64_t max_bytes = UINT64_MAX; // inclusive
	uint32_t min_size = 1;
	uint32_t max_size = UINT32_MAX;
	std::optional<Spread> hosts;                // unset: any placement, even an unknown one
	Algorithm algorithm = Algorithm::automatic; // automatic: the model decides
	AlgorithmParams params;
};

struct Choice {
	Algorithm algorithm = Algorithm::automatic;
	AlgorithmParams params;
	bool from_rule = false;
};

class Selector {
public:
	Selector() = default;
	Selector(CostParams params, std::vector<TuneRule> rules)
		: params_(params), rules_(std::move(rules))
	{}

	// The algorithm for `d` (whose algorithm field is ignored): the last
	// tuning rule that matches it and the placement's spread, else the
	// cheapest by the model (ties: the earlier algorithm of
	// algorithms_for()) among those that fit the limits, or the cheapest on
	// paper if none does; the model charges edges by the placement when
	// `price_placement`. Message size is count times the datatype size.
	// Deterministic, so all members agree (they pass the same placement).
	Choice choose(const OpDescriptor& d, const Limits& limits, Placement placement = {},
		      bool price_placement = true) const;

	const CostParams& params() const noexcept { return params_; }
	const std::vector<TuneRule>& rules() const noexcept { return rules_; }

private:
	CostParams params_;
	std::vector<TuneRule> rules_;
};

} // namespace rcoll::engine
