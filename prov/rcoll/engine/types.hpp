// Vocabulary of the collective engine: datatypes, reduction operations,
// collectives and error codes. The engine includes no libfabric header; the
// enumerators mirror libfabric's order (enum fi_datatype, enum fi_op, enum
// fi_collective_op) so the provider glue maps them with a static table.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace rcoll::engine {

// Same order as FI_INT8 .. FI_LONG_DOUBLE_COMPLEX (fi_domain.h, 1.17).
enum class Datatype : uint8_t {
	int8,
	uint8,
	int16,
	uint16,
	int32,
	uint32,
	int64,
	uint64,
	float32,
	float64,
	float_complex,
	double_complex,
	long_double,
	long_double_complex,
};
inline constexpr unsigned datatype_count = 14;

// Same order as FI_MIN .. FI_BXOR: the reduction operations fi_collective(3)
// accepts (FI_ATOMIC_READ/WRITE and the compare-swap family are not reductions).
enum class ReduceOp : uint8_t {
	min,
	max,
	sum,
	prod,
	lor,
	land,
	bor,
	band,
	lxor,
	bxor,
};
inline constexpr unsigned reduce_op_count = 10;

// Same order as FI_BARRIER .. FI_GATHER.
enum class Collective : uint8_t {
	barrier,
	broadcast,
	alltoall,
	allreduce,
	allgather,
	reduce_scatter,
	reduce,
	scatter,
	gather,
};
inline constexpr unsigned collective_count = 9;

// Error codes carry the errno value of the matching FI_E* code (libfabric
// defines FI_EINVAL == EINVAL etc.), so the glue returns -static_cast<int>(e).
enum class Errc : int {
	ok = 0,
	invalid_argument = EINVAL,
	overflow = EOVERFLOW,
	not_supported = EOPNOTSUPP,
	would_block = EAGAIN,
	no_memory = ENOMEM,
	no_resources = ENOSPC,
	io_error = EIO,
};

std::string_view to_string(Datatype) noexcept;
std::string_view to_string(ReduceOp) noexcept;
std::string_view to_string(Collective) noexcept;
std::string_view to_string(Errc) noexcept;
std::optional<Collective> parse_collective(std::string_view) noexcept;

// Size in bytes of one element; long double is the platform's (16 on x86-64).
size_t datatype_size(Datatype) noexcept;
bool is_integer(Datatype) noexcept;
bool is_complex(Datatype) noexcept;

// Whether fi_collective(3) allows `op` on `dtype`: MIN/MAX on real types,
// SUM/PROD/LOR/LAND/LXOR on every type, BOR/BAND/BXOR on integers only
// (the table of libfabric's own atomic handlers).
bool is_valid_reduction(Datatype, ReduceOp) noexcept;

// Collectives that combine data with a ReduceOp.
constexpr bool is_reduction(Collective c) noexcept
{
	return c == Collective::allreduce || c == Collective::reduce ||
	       c == Collective::reduce_scatter;
}

// Collectives with a root argument.
constexpr bool is_rooted(Collective c) noexcept
{
	return c == Collective::broadcast || c == Collective::reduce || c == Collective::scatter ||
	       c == Collective::gather;
}

} // namespace rcoll::engine
