#include "engine/types.hpp"

#include <array>
#include <complex>

namespace rcoll::engine {

namespace {

constexpr std::array<std::string_view, datatype_count> datatype_names = {
	"int8",          "uint8",
	"int16",         "uint16",
	"int32",         "uint32",
	"int64",         "uint64",
	"float",         "double",
	"float_complex", "double_complex",
	"long_double",   "long_double_complex",
};

constexpr std::array<std::string_view, reduce_op_count> op_names = {
	"min", "max", "sum", "prod", "lor", "land", "bor", "band", "lxor", "bxor",
};

constexpr std::array<std::string_view, collective_count> collective_names = {
	"barrier",        "broadcast", "alltoall", "allreduce", "allgather",
	"reduce_scatter", "reduce",    "scatter",  "gather",
};

constexpr std::array<size_t, datatype_count> datatype_sizes = {
	sizeof(int8_t),
	sizeof(uint8_t),
	sizeof(int16_t),
	sizeof(uint16_t),
	sizeof(int32_t),
	sizeof(uint32_t),
	sizeof(int64_t),
	sizeof(uint64_t),
	sizeof(float),
	sizeof(double),
	sizeof(std::complex<float>),
	sizeof(std::complex<double>),
	sizeof(long double),
	sizeof(std::complex<long double>),
};

} // namespace

std::string_view to_string(Datatype d) noexcept
{
	auto i = static_cast<unsigned>(d);
	return i < datatype_count ? datatype_names[i] : "invalid";
}

std::string_view to_string(ReduceOp op) noexcept
{
	auto i = static_cast<unsigned>(op);
	return i < reduce_op_count ? op_names[i] : "invalid";
}

std::string_view to_string(Collective c) noexcept
{
	auto i = static_cast<unsigned>(c);
	return i < collective_count ? collective_names[i] : "invalid";
}

std::string_view to_string(Errc e) noexcept
{
	switch (e) {
	case Errc::ok: return "ok";
	case Errc::invalid_argument: return "invalid argument";
	case Errc::overflow: return "size overflow";
	case Errc::not_supported: return "not supported";
	case Errc::would_block: return "would block";
	case Errc::no_memory: return "out of memory";
	case Errc::no_resources: return "collective resources exhausted";
	case Errc::io_error: return "transport error";
	}
	return "unknown error";
}

std::optional<Collective> parse_collective(std::string_view name) noexcept
{
	for (unsigned i = 0; i < collective_count; ++i)
		if (collective_names[i] == name)
			return static_cast<Collective>(i);
	if (name == "bcast")
		return Collective::broadcast;
	return std::nullopt;
}

size_t datatype_size(Datatype d) noexcept
{
	auto i = static_cast<unsigned>(d);
	return i < datatype_count ? datatype_sizes[i] : 0;
}

bool is_integer(Datatype d) noexcept
{
	return static_cast<unsigned>(d) <= static_cast<unsigned>(Datatype::uint64);
}

bool is_complex(Datatype d) noexcept
{
	return d == Datatype::float_complex || d == Datatype::double_complex ||
	       d == Datatype::long_double_complex;
}

bool is_valid_reduction(Datatype d, ReduceOp op) noexcept
{
	if (static_cast<unsigned>(d) >= datatype_count ||
	    static_cast<unsigned>(op) >= reduce_op_count)
		return false;
	switch (op) {
	case ReduceOp::min:
	case ReduceOp::max: return !is_complex(d);
	case ReduceOp::sum:
	case ReduceOp::prod:
	case ReduceOp::lor:
	case ReduceOp::land:
	case ReduceOp::lxor: return true;
	case ReduceOp::bor:
	case ReduceOp::band:
	case ReduceOp::bxor: return is_integer(d);
	}
	return false;
}

} // namespace rcoll::engine
