// Which calls of a collective go back to the MPI because its own algorithm
// is faster there: rules by payload size, communicator size and where the
// members run, read from RCOLL_MPI_<COLL>_HAND_BACK (man/librcoll-mpi.7).
// Every input of a rule is the same on every rank of a call, so every rank
// decides alike. Free of MPI, so that the parser is tested on its own.
//
//   RULES := RULE [";" RULE]...         (empty: no call goes back)
//   RULE  := [WHERE ":"] [RANKS ":"] BYTES
//   WHERE := "host" (every member on one host, on rcoll's node-local path)
//          | "net" (otherwise: "apart" or "shared")
//          | "apart" (on several hosts, one member on each, or rcoll's
//            node-local path off)
//          | "shared" (on several hosts, several members on one of them,
//            which reach each other through its memory)
//   RANKS := RANGE of communicator sizes; BYTES := RANGE of payload bytes
//   RANGE := N | N "-" | N "-" N | "-" N | "*"   (inclusive; N may end in
//            k, m or g: KiB, MiB, GiB)
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace rcoll::mpi {

// Where a communicator's members run, as the rules tell them apart.
enum class Spread { host, apart, shared };

struct HandBackRule {
	enum class Where { any, host, net, apart, shared };
	Where where = Where::any;
	uint64_t ranks_min = 0, ranks_max = UINT64_MAX;
	uint64_t bytes_min = 0, bytes_max = UINT64_MAX;
};

class HandBack {
public:
	// Reads `text`: an empty string, or what is wrong with it (the rules
	// read before then stay).
	std::string parse(std::string_view text);
	// Whether a call of `bytes` on `ranks` members spread as `spread` goes
	// back to the MPI.
	bool matches(uint64_t bytes, uint64_t ranks, Spread spread) const noexcept
	{
		for (const HandBackRule& r : rules_)
			if (bytes >= r.bytes_min && bytes <= r.bytes_max && ranks >= r.ranks_min &&
			    ranks <= r.ranks_max && takes(r.where, spread))
				return true;
		return false;
	}
	const std::vector<HandBackRule>& rules() const noexcept { return rules_; }

private:
	static bool takes(HandBackRule::Where where, Spread spread) noexcept
	{
		using W = HandBackRule::Where;
		switch (where) {
		case W::any: return true;
		case W::host: return spread == Spread::host;
		case W::net: return spread != Spread::host;
		case W::apart: return spread == Spread::apart;
		case W::shared: return spread == Spread::shared;
		}
		return false;
	}

	std::vector<HandBackRule> rules_;
};

// Each collective's variable, in the order of the defaults below.
inline constexpr const char* kHandBackVariables[] = {
	"RCOLL_MPI_BARRIER_HAND_BACK",   "RCOLL_MPI_BCAST_HAND_BACK",
	"RCOLL_MPI_ALLREDUCE_HAND_BACK", "RCOLL_MPI_REDUCE_HAND_BACK",
	"RCOLL_MPI_ALLGATHER_HAND_BACK", "RCOLL_MPI_REDUCE_SCATTER_HAND_BACK",
	"RCOLL_MPI_ALLTOALL_HAND_BACK",  "RCOLL_MPI_GATHER_HAND_BACK",
	"RCOLL_MPI_SCATTER_HAND_BACK"};

// Default rules, per MPI family (the library is built once per family):
// where the MPI's own collectives measured faster (RCOLL_MPI_FORCE=1
// scripts/bench-mpi.sh --full --rounds 3 on 2 CPUs, the in-job ratios read
// by scripts/hand-back-rules.sh). The collectives not measured have none;
// man/librcoll-mpi.7 lists them too.
//
// Open MPI 4.1, 2 and 4 ranks: on one host (where, since blocking calls end
// inside rcoll's call, its 2-rank barrier, broadcasts, allreduces and
// reduces up to 256 B measured 0.74-0.89 in-job with --sizes 8,64,256
// --rounds 7, and, since an allgather's layouts are built inline, its
// 2-rank allgathers 0.81-1.01, median 0.86, against a median of 1.09
// handed back, five runs of --rounds 5: all rcoll's) its
// reduces from 128 KiB to 2 MiB (from 4 MiB rcoll's
// root, combining the other member's chunks as they come, took 0.36-0.78 of
// the time in-job; at 2 MiB 0.88-1.14), and the mid-size broadcasts
// of more ranks than CPUs (the smallest are rcoll's since its barrier
// releases the root first: 4 ranks, 8 B, in-job 0.11); between hosts
// (rcoll's core against Open MPI's btl tcp) the barrier and the smallest
// allreduces of 2 ranks, where each of rcoll's messages costs more than
// Open MPI's, the small and mid-size broadcasts, reduces and allgathers of
// 2 ranks (those below 256 B remeasured with --sizes 8,64,512,4096
// --rounds 5: medians of three runs' in-job ratios 1.06 and 1.16 for 8 and
// 64 B broadcasts, 1.13 and 1.20 for reduces), and the mid-size ones of 3-4.
// Its 2-rank allreduces on one host from 8 MiB are rcoll's since they go
// in one copy (in-job 0.69-0.88).
// The rules of 3-4 ranks between hosts above hold where each member has a
// host of its own ("apart"). Where some share a host ("shared": the MPI's
// shared memory and rcoll's node-local path between them, and rcoll's
// trees and rings grouped by host), measured with --hosts 2 --ranks 4
// (namespace hosts of one CPU each), three runs, in-job medians: reduces
// of 128-384 KiB are the MPI's (forced 0.64-1.25 between runs at 128 KiB,
// 0.81-1.15 at 256 KiB, 1.03 at 384 KiB; handed back 0.95-1.01), those of
// 512 KiB rcoll's (forced 0.39-0.42, handed back 1.05-1.08); allreduces
// from 1 MiB (forced 0.66-0.71, 0.74 by these rules, where the old ones
// gave 1.02) and broadcasts of 16-256 KiB (256 KiB 0.57-0.66, 1.09 handed
// back) and from 1 MiB (0.75-0.77) are rcoll's; those of 384-768 KiB the
// MPI's (forced 1.00-1.47, handed back 0.90-1.01; 2 runs). Since the tcp core's own tuning rules give such groups
// binomial trees and a barrier that releases the root first (fi_rcoll(7),
// TUNING), small broadcasts (8 B: 0.80, was 1.6-1.9) and 512 B reduces
// (forced 0.78-0.79, handed back 0.83-0.89) are rcoll's too. With the tcp
// core's two-level allgathers (one leader per host, then every member a
// leader), 3 runs: at 3-4 ranks those of 1 MiB are rcoll's (forced
// 0.85-0.93, handed back 0.92-1.02), those of 16-128 KiB (16 KiB 1.04-1.09
// against 0.94-0.99; 64 KiB 0.86-1.06 against 0.98-1.00, where one call
// handed back both ways differed by 0.07) and from 2 MiB the MPI's; at 5-8
// ranks those of 16-32 KiB the MPI's too (1.41-1.61 against 1.25-1.38:
// after rcoll's barrier, Open MPI's allgather is slower as well).
inline constexpr const char* kOpenMpiHandBack[] = {
	"net:2:*",
	"host:3-4:16k-128k;net:2:-128k;net:2:1m-8m;apart:3-4:16k-1m;shared:3-4:384k-768k",
	"net:2:-2k;apart:3-4:1m-",
	"host:2:128k-2m;net:2:-16k;net:2:1m-;apart:3-4:128k-1m;shared:3-4:128k-384k",
	"host:2:1m-8m;host:3-4:8m-;net:2:-128k;apart:3-4:16k-128k;apart:3-4:1m-8m;"
	"shared:3-4:16k-128k;shared:3-4:2m-8m;shared:5-8:16k-32k",
	"",
	"",
	"",
	""};
// MPICH 4.0 (ch4:ofi), 2 ranks: on one host broadcasts up to 1 KiB and from
// 32 KiB to 63 KiB (its shared-memory release/gather moves up to 32 KiB
// in one cell: in-job 1.22-1.47 and 1.05-1.39; 2-24 KiB 0.72-1.13, 64 KiB-
// 1 MiB 0.32-1.04) and allgathers of 16-96 KiB blocks (in-job 0.94-1.26;
// 128 KiB-8 MiB 0.66-0.95). Its reduces are rcoll's at every size on one
// host since rcoll's root combines the other member's chunks as they come
// (in-job 0.71-0.96 from 4 MiB, where they had been handed back); between
// hosts (rcoll's core against MPICH over
// tcp;ofi_rxm) the barrier, the smallest calls and 2-16 KiB broadcasts.
// 4 ranks, measured on 2 CPUs up to 2 MiB from the in-job ratios alone (a
// job without the library takes too long there): only the 2-16 KiB
// broadcasts on one host (4 KiB: in-job 2.22 at 4 ranks, 1.01 at 3); its
// other calls spun some 8 ms each, against 0.1-8 ms offloaded, and its
// smaller broadcasts took 0.7-3.3 us against rcoll's 0.2-0.5 since rcoll's
// barrier releases the root first.
inline constexpr const char* kMpichHandBack[] = {
	"net:2:*",
	"host:2:-1k;host:2:32k-63k;net:2:-256;net:2:2k-16k;host:3-4:2k-16k",
	"",
	"net:2:-256",
	"host:2:16k-96k;net:2:-16k",
	"",
	"",
	"",
	""};
static_assert(std::size(kOpenMpiHandBack) == std::size(kHandBackVariables) &&
	      std::size(kMpichHandBack) == std::size(kHandBackVariables));

} // namespace rcoll::mpi
