// librcoll-mpi's hand-back rules (mpi/hand_back.cpp): which calls go back
// to the MPI. Every rank applies them to the same inputs, so a rule read
// wrongly would hand back the wrong sizes on every rank alike: only these
// tests see it.
#include "mpi/hand_back.hpp"

#include <criterion/criterion.h>

using rcoll::mpi::HandBack;
using rcoll::mpi::Spread;

namespace {

HandBack parsed(const char* text)
{
	HandBack h;
	const std::string why = h.parse(text);
	cr_assert(why.empty(), "\"%s\" refused: %s", text, why.c_str());
	return h;
}

} // namespace

Test(mpi_hand_back, empty_hands_back_nothing)
{
	for (const char* text : {"", " ", ";", " ; ;"}) {
		const HandBack h = parsed(text);
		cr_assert_eq(h.rules().size(), 0u, "\"%s\"", text);
		cr_assert_not(h.matches(0, 2, Spread::host));
		cr_assert_not(h.matches(UINT64_MAX, 1000, Spread::apart));
	}
}

Test(mpi_hand_back, byte_ranges_are_inclusive_with_binary_suffixes)
{
	const HandBack h = parsed("32k-256K;1m-");
	cr_assert_not(h.matches(32767, 4, Spread::host));
	cr_assert(h.matches(32768, 4, Spread::host));
	cr_assert(h.matches(262144, 4, Spread::apart));
	cr_assert_not(h.matches(262145, 4, Spread::host));
	cr_assert_not(h.matches(1048575, 4, Spread::host));
	cr_assert(h.matches(1048576, 2, Spread::host));
	cr_assert(h.matches(UINT64_MAX, 2, Spread::host));
	const HandBack upto = parsed("-64");
	cr_assert(upto.matches(0, 3, Spread::apart));
	cr_assert(upto.matches(64, 3, Spread::apart));
	cr_assert_not(upto.matches(65, 3, Spread::apart));
	const HandBack exact = parsed("2g");
	cr_assert(exact.matches(uint64_t(2) << 30, 2, Spread::host));
	cr_assert_not(exact.matches((uint64_t(2) << 30) + 1, 2, Spread::host));
}

Test(mpi_hand_back, where_and_communicator_size)
{
	const HandBack h = parsed("host:3-4:0-64 ; net:*:4k-1m; 8-:16m-");
	// host, 3 or 4 ranks, up to 64 B
	cr_assert(h.matches(8, 3, Spread::host));
	cr_assert(h.matches(64, 4, Spread::host));
	cr_assert_not(h.matches(8, 2, Spread::host));
	cr_assert_not(h.matches(8, 5, Spread::host));
	cr_assert_not(h.matches(65, 4, Spread::host));
	// net, any size, 4 KiB-1 MiB
	cr_assert(h.matches(4096, 2, Spread::apart));
	cr_assert(h.matches(1048576, 64, Spread::apart));
	cr_assert_not(h.matches(4096, 2, Spread::host));
	cr_assert_not(h.matches(2048, 4, Spread::apart)); // no rule takes 2 KiB on 4 ranks
	// 8 ranks or more, anywhere, from 16 MiB
	cr_assert(h.matches(16u << 20, 8, Spread::host));
	cr_assert(h.matches(16u << 20, 9, Spread::apart));
	cr_assert_not(h.matches(16u << 20, 7, Spread::apart));
	// where alone
	const HandBack where = parsed("net:*");
	cr_assert(where.matches(0, 2, Spread::apart));
	cr_assert(where.matches(0, 2, Spread::shared));
	cr_assert_not(where.matches(0, 2, Spread::host));
	// apart and shared tell the hosts' members apart; net takes both
	const HandBack split = parsed("apart:3-4:16k-1m;shared:3-4:-512");
	cr_assert(split.matches(65536, 4, Spread::apart));
	cr_assert_not(split.matches(65536, 4, Spread::shared));
	cr_assert_not(split.matches(65536, 4, Spread::host));
	cr_assert(split.matches(8, 3, Spread::shared));
	cr_assert_not(split.matches(8, 3, Spread::apart));
	cr_assert_not(split.matches(513, 4, Spread::shared));
}

Test(mpi_hand_back, wrong_rules_are_refused_whole)
{
	for (const char* text :
	     {"abc", "1x", "k", "-", "5-3", "host:net:1-2", "1:2:3:4", "nowhere:2:8",
	      "3-:", "host:", "18446744073709551616", "17179869184g", "64;oops"}) {
		HandBack h;
		const std::string why = h.parse(text);
		cr_assert(!why.empty(), "\"%s\" accepted", text);
		cr_assert_eq(h.rules().size(), 0u, "\"%s\" left rules behind", text);
	}
	// A refused text leaves the rules read before it.
	HandBack h = parsed("1k-2k");
	cr_assert(!h.parse("1k-2k;junk").empty());
	cr_assert_eq(h.rules().size(), 1u);
}

Test(mpi_hand_back, defaults_parse_and_hand_back_what_was_measured_slower)
{
	for (const auto* family : {&rcoll::mpi::kOpenMpiHandBack, &rcoll::mpi::kMpichHandBack})
		for (size_t k = 0; k < std::size(*family); k++) {
			HandBack h;
			const std::string why = h.parse((*family)[k]);
			cr_assert(why.empty(), "%s default refused: %s",
				  rcoll::mpi::kHandBackVariables[k], why.c_str());
		}
	// Measured (see hand_back.hpp): on one host a 32 KiB broadcast of 4
	// ranks went faster in Open MPI; 8 B to 16 MiB ones of 2 (since blocking
	// calls end inside rcoll's call) and 8-byte ones of 3 and 4 in rcoll (its
	// barrier releases the root first); between hosts a 32 KiB allreduce of
	// 2 in rcoll.
	HandBack bcast, allreduce, barrier;
	cr_assert(bcast.parse(rcoll::mpi::kOpenMpiHandBack[1]).empty());
	cr_assert_not(bcast.matches(8, 2, Spread::host));
	cr_assert_not(bcast.matches(64, 2, Spread::host));
	cr_assert(bcast.matches(32768, 4, Spread::host));
	cr_assert_not(bcast.matches(8, 3, Spread::host));
	cr_assert_not(bcast.matches(8, 4, Spread::host));
	for (uint64_t bytes : {512u, 4096u, 32768u, 262144u, 16u << 20})
		cr_assert_not(bcast.matches(bytes, 2, Spread::host), "%llu bytes",
			      (unsigned long long)bytes);
	cr_assert_not(bcast.matches(8, 5, Spread::host)); // not measured: no rule
	cr_assert(allreduce.parse(rcoll::mpi::kOpenMpiHandBack[2]).empty());
	cr_assert_not(allreduce.matches(32768, 2, Spread::apart));
	cr_assert(allreduce.matches(8, 2, Spread::apart));
	// On one host, 2 ranks: the smallest allreduces and the barrier are
	// rcoll's since blocking calls end inside its call; between hosts the
	// barrier is Open MPI's.
	cr_assert_not(allreduce.matches(8, 2, Spread::host));
	cr_assert_not(allreduce.matches(256, 2, Spread::host));
	cr_assert(barrier.parse(rcoll::mpi::kOpenMpiHandBack[0]).empty());
	cr_assert_not(barrier.matches(0, 2, Spread::host));
	cr_assert(barrier.matches(0, 2, Spread::apart));
	// On one host, 2 ranks: the largest allreduces are rcoll's (one copy).
	cr_assert_not(allreduce.matches(16777216, 2, Spread::host));
	// On one host, 2 ranks: the smallest allgathers are rcoll's since their
	// layouts are built inline; from 1 MiB to 8 MiB Open MPI's.
	HandBack allgather;
	cr_assert(allgather.parse(rcoll::mpi::kOpenMpiHandBack[4]).empty());
	for (uint64_t bytes : {8u, 64u, 256u})
		cr_assert_not(allgather.matches(bytes, 2, Spread::host), "%llu bytes",
			      (unsigned long long)bytes);
	cr_assert(allgather.matches(1u << 20, 2, Spread::host));
	// Across hosts with some together, rcoll's two-level allgathers take
	// 1 MiB blocks at 4 ranks and 64 KiB ones at 8, Open MPI 16-32 KiB ones.
	cr_assert(allgather.matches(16u << 10, 4, Spread::shared));
	cr_assert(allgather.matches(32u << 10, 8, Spread::shared));
	cr_assert_not(allgather.matches(64u << 10, 8, Spread::shared));
	cr_assert_not(allgather.matches(1u << 20, 4, Spread::shared));
	cr_assert(allgather.matches(1u << 20, 4, Spread::apart));
	// 3-4 ranks between hosts: where some share a host (namespace hosts of
	// two ranks each), reduces of 128-384 KiB went faster in Open MPI,
	// those of 512 B and 512 KiB, broadcasts of 16-256 KiB and from 1 MiB
	// and allreduces from 1 MiB in rcoll, broadcasts of 384-768 KiB in Open
	// MPI; with a host each, the rules measured on loopback still hold.
	HandBack shared_reduce;
	cr_assert(shared_reduce.parse(rcoll::mpi::kOpenMpiHandBack[3]).empty());
	for (uint64_t bytes : {16384u, 262144u, 1u << 20})
		cr_assert_not(bcast.matches(bytes, 4, Spread::shared), "%llu bytes",
			      (unsigned long long)bytes);
	cr_assert(bcast.matches(512u << 10, 4, Spread::shared));
	cr_assert(bcast.matches(768u << 10, 4, Spread::shared));
	cr_assert(bcast.matches(262144, 4, Spread::apart));
	for (uint64_t bytes : {1u << 20, 8u << 20}) {
		cr_assert_not(allreduce.matches(bytes, 4, Spread::shared));
		cr_assert(allreduce.matches(bytes, 4, Spread::apart));
	}
	cr_assert(shared_reduce.matches(262144, 4, Spread::shared));
	cr_assert(shared_reduce.matches(384u << 10, 4, Spread::shared));
	cr_assert_not(shared_reduce.matches(512, 4, Spread::shared));
	cr_assert_not(shared_reduce.matches(4096, 4, Spread::shared));
	cr_assert_not(shared_reduce.matches(512u << 10, 4, Spread::shared));
	cr_assert_not(shared_reduce.matches(1u << 20, 4, Spread::shared));
	// Between hosts, 2 ranks: broadcasts up to 128 KiB and reduces up to
	// 16 KiB went faster in Open MPI, the smallest included; a 256 KiB
	// broadcast and a 32 KiB reduce in rcoll.
	HandBack reduce;
	cr_assert(reduce.parse(rcoll::mpi::kOpenMpiHandBack[3]).empty());
	for (uint64_t bytes : {8u, 64u, 4096u, 131072u})
		cr_assert(bcast.matches(bytes, 2, Spread::apart), "%llu bytes",
			  (unsigned long long)bytes);
	cr_assert_not(bcast.matches(262144, 2, Spread::apart));
	for (uint64_t bytes : {8u, 64u, 16384u})
		cr_assert(reduce.matches(bytes, 2, Spread::apart), "%llu bytes",
			  (unsigned long long)bytes);
	cr_assert_not(reduce.matches(32768, 2, Spread::apart));
	cr_assert_not(reduce.matches(8, 2, Spread::host)); // on one host rcoll's was not slower
	// On one host, 2 ranks: Open MPI's reduces from 128 KiB to 2 MiB, rcoll's
	// larger ones.
	cr_assert(reduce.matches(131072, 2, Spread::host));
	cr_assert(reduce.matches(2097152, 2, Spread::host));
	cr_assert_not(reduce.matches(4194304, 2, Spread::host));
	// Under MPICH (2 ranks, one host) the barrier, the smallest allreduce,
	// 2-24 KiB and 64 KiB broadcasts and every reduce went faster
	// offloaded; the smallest broadcasts and those of one cell of MPICH's
	// (32 KiB) in MPICH; between hosts its barrier went faster.
	HandBack mpich_barrier, mpich_bcast, mpich_allreduce, mpich_reduce;
	cr_assert(mpich_barrier.parse(rcoll::mpi::kMpichHandBack[0]).empty());
	cr_assert(mpich_bcast.parse(rcoll::mpi::kMpichHandBack[1]).empty());
	cr_assert(mpich_allreduce.parse(rcoll::mpi::kMpichHandBack[2]).empty());
	cr_assert(mpich_reduce.parse(rcoll::mpi::kMpichHandBack[3]).empty());
	cr_assert_not(mpich_barrier.matches(0, 2, Spread::host));
	cr_assert(mpich_barrier.matches(0, 2, Spread::apart));
	cr_assert(mpich_bcast.matches(8, 2, Spread::host));
	cr_assert_not(mpich_bcast.matches(2048, 2, Spread::host));
	cr_assert(mpich_bcast.matches(32768, 2, Spread::host));
	cr_assert_not(mpich_bcast.matches(65536, 2, Spread::host));
	cr_assert_not(mpich_allreduce.matches(8, 2, Spread::host));
	for (uint64_t bytes : {8u, 1u << 20, 16u << 20})
		cr_assert_not(mpich_reduce.matches(bytes, 2, Spread::host), "%llu bytes",
			      (unsigned long long)bytes);
	// At 3-4 ranks on 2 CPUs MPICH's 4 KiB one-host broadcasts went as fast
	// as rcoll's or faster, its smaller ones slower since rcoll's barrier
	// releases the root first, its other calls took milliseconds.
	cr_assert(mpich_bcast.matches(4096, 4, Spread::host));
	cr_assert(mpich_bcast.matches(4096, 3, Spread::host));
	cr_assert_not(mpich_bcast.matches(8, 4, Spread::host));
	cr_assert_not(mpich_bcast.matches(512, 3, Spread::host));
	cr_assert_not(mpich_bcast.matches(32768, 4, Spread::host));
	cr_assert_not(mpich_bcast.matches(8, 4, Spread::apart));
	for (uint64_t bytes : {8u, 32768u, 2u << 20})
		cr_assert_not(mpich_allreduce.matches(bytes, 4, Spread::apart), "%llu bytes",
			      (unsigned long long)bytes);
	// MPICH's allgathers of 16-96 KiB blocks on one host (2 ranks), and of
	// small blocks between hosts, went faster than rcoll's; 8 KiB and from
	// 128 KiB rcoll's (one copy) on one host.
	HandBack mpich_allgather;
	cr_assert(mpich_allgather.parse(rcoll::mpi::kMpichHandBack[4]).empty());
	for (uint64_t bytes : {16384u, 65536u, 98304u})
		cr_assert(mpich_allgather.matches(bytes, 2, Spread::host), "%llu bytes",
			  (unsigned long long)bytes);
	for (uint64_t bytes : {8192u, 131072u, 8u << 20})
		cr_assert_not(mpich_allgather.matches(bytes, 2, Spread::host), "%llu bytes",
			      (unsigned long long)bytes);
	cr_assert(mpich_allgather.matches(16384, 2, Spread::apart));
	cr_assert_not(mpich_allgather.matches(32768, 2, Spread::apart));
	cr_assert_not(mpich_allgather.matches(65536, 4, Spread::host)); // not measured: no rule
}
