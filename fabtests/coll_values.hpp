// Operands whose reductions have closed-form results, and the per-block
// byte patterns of the data-movement collectives.
//
// Reduction inputs are small integers (or complex numbers with small integer
// parts) chosen per (element, rank) so that every fi_op gives a result known
// without reducing anything: the sum of r + s over p ranks is
// p(p-1)/2 + p*s, exactly one rank contributes the truthy operand of a
// logical OR, distinct ranks set distinct bits, and so on. Every value is
// exactly representable in every datatype, so floating-point results are
// compared with == whatever order the provider reduces in.
#pragma once

#include "coll_common.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace fabtests::coll {

// Largest group the closed forms hold for (bitwise operations give each
// rank one of eight bits per byte).
inline constexpr int kMaxReductionRanks = 8;

// Writes rank `rank`'s operand for elements first_index .. first_index +
// n - 1 of a reduction over `size` ranks (n = buf.size() / element size).
void fill_reduction_input(fi_datatype type, fi_op op, std::span<std::byte> buf, size_t first_index,
			  int rank, int size);

// Compares buf with the closed-form result for elements first_index ..;
// returns a description of the first wrong element, or nullopt.
std::optional<std::string> check_reduction_output(fi_datatype type, fi_op op,
						  std::span<const std::byte> buf,
						  size_t first_index, int size);

// Seed of the bytes that group rank `source` contributes as block `block`
// of a call identified by `call_seed`.
uint64_t block_seed(uint64_t call_seed, int source, int block = 0);

} // namespace fabtests::coll
