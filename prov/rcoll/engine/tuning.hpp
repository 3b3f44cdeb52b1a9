// The tuning string: one documented override of the cost model per
// collective and size range, in the spirit of UCC_TL_UCP_TUNE.
//
//   tune   := rule ( '#' rule )*
//   rule   := collective ( ':' field )*
//   field  := range | 'p=' count '-' count | '@' ( algorithm | 'auto' )
//           | 'k=' count | 'chunk=' size | 'hosts=' spread
//   spread := 'one' | 'apart' | 'shared'
//   range  := size '-' ( size | 'inf' )      message bytes, inclusive
//   size   := digits [ 'k' | 'm' | 'g' ]      binary multiples, any case
//
// A rule must name an algorithm the collective implements, or '@auto', which
// hands the calls it covers back to the cost model (and takes no k= or
// chunk=). The message size
// is count times the datatype size (per rank block for allgather, gather,
// scatter, alltoall and reduce_scatter). When several rules match, the last
// one wins, so a later rule refines an earlier one. A rule with hosts=
// applies only to groups whose placement (GroupConfig::hosts) spreads them
// so: all on one host, each on a host of its own, or across hosts with some
// together. Example:
//
//   allreduce:0-4k:@recursive_doubling#allreduce:4k-inf:@ring:chunk=256k
//   #bcast:@binomial#allreduce:0-64:p=2-16:@ktree:k=3
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/cost_model.hpp"

namespace rcoll::engine {

// Parses `text` into `rules`. On error returns invalid_argument, leaves
// `rules` untouched and describes the problem in `error`.
Errc parse_tuning(std::string_view text, std::vector<TuneRule>& rules, std::string& error);

// Rules for cores over the kernel's TCP, which go before the user's. In groups
// across hosts with several members on a host, binomial trees grouped by
// host (Karonis et al. 2000) beat the model's flat trees and recursive
// doubling there: each level between hosts carries one message, the rest
// stays on the node-local path, and the barrier releases members in the
// order in which the next tree reaches them. The model sees neither a
// host's members sharing its CPUs nor one call's release order meeting the
// next. Allgathers go through leaders, one per host while blocks are
// small, every member at 32 KiB and beyond: each block crosses to each
// other host once. Measured on namespace hosts sharing CPUs (fi_rcoll(7),
// TUNING).
inline constexpr std::string_view kernel_tcp_tuning =
	"barrier:hosts=shared:@ktree:k=1"
	"#broadcast:hosts=shared:0-64k:@binomial"
	"#allreduce:hosts=shared:0-256k:@ktree:k=1"
	"#reduce:hosts=shared:0-32k:@ktree:k=1"
	"#allgather:hosts=shared:@hierarchical"
	"#allgather:hosts=shared:32k-inf:@multi_leader";

// Parses a size with an optional binary suffix (k, m, g).
bool parse_size(std::string_view text, uint64_t& out) noexcept;

} // namespace rcoll::engine
