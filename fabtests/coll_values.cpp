#include "coll_values.hpp"

#include "store_value.hpp"

#include <complex>
#include <cstring>
#include <type_traits>

namespace fabtests::coll {

namespace {

template <class T>
struct IsComplex : std::false_type {};
template <class T>
struct IsComplex<std::complex<T>> : std::true_type {};

// Calls f(T{}) with T the C++ element type of `type`.
template <class F>
decltype(auto) with_element_type(fi_datatype type, F&& f)
{
	switch (type) {
	case FI_INT8: return f(int8_t{});
	case FI_UINT8: return f(uint8_t{});
	case FI_INT16: return f(int16_t{});
	case FI_UINT16: return f(uint16_t{});
	case FI_INT32: return f(int32_t{});
	case FI_UINT32: return f(uint32_t{});
	case FI_INT64: return f(int64_t{});
	case FI_UINT64: return f(uint64_t{});
	case FI_FLOAT: return f(float{});
	case FI_DOUBLE: return f(double{});
	case FI_FLOAT_COMPLEX: return f(std::complex<float>{});
	case FI_DOUBLE_COMPLEX: return f(std::complex<double>{});
	case FI_LONG_DOUBLE: return f(static_cast<long double>(0));
	case FI_LONG_DOUBLE_COMPLEX: return f(std::complex<long double>{});
	default: break;
	}
	throw std::invalid_argument(
		strfmt("datatype %d has no element type", static_cast<int>(type)));
}

// A value with integer real and imaginary parts (the imaginary part is
// dropped for real types).
template <class T>
T make(int64_t re, int64_t im = 0)
{
	if constexpr (IsComplex<T>::value) {
		using R = typename T::value_type;
		return T(static_cast<R>(re), static_cast<R>(im));
	} else {
		(void)im;
		return static_cast<T>(re);
	}
}

template <class T>
constexpr bool is_signed_element()
{
	if constexpr (IsComplex<T>::value)
		return true;
	else
		return std::is_signed_v<T>;
}

// Signed types get negative operands too.
template <class T>
int64_t signed_offset()
{
	return is_signed_element<T>() ? 6 : 0;
}

// Byte lane and bit of the bitwise patterns: rank r sets bit (r + i) % 8 of
// byte i % sizeof(T), so p <= 8 ranks set distinct bits and every byte of
// the element is exercised along the array.
template <class T>
std::make_unsigned_t<T> rank_bit(size_t i, int rank)
{
	using U = std::make_unsigned_t<T>;
	const unsigned lane = 8 * static_cast<unsigned>(i % sizeof(T));
	return static_cast<U>(U{1} << ((static_cast<unsigned>(rank) + i) % 8 + lane));
}

// OR of rank_bit over ranks 0 .. p-1: p consecutive bits rotated by i % 8.
template <class T>
std::make_unsigned_t<T> all_rank_bits(size_t i, int p)
{
	using U = std::make_unsigned_t<T>;
	const unsigned mask = p >= 8 ? 0xFFu : (1u << p) - 1;
	const unsigned shift = static_cast<unsigned>(i % 8);
	const unsigned rotated = ((mask << shift) | (mask >> (8 - shift))) & 0xFFu;
	const unsigned lane = 8 * static_cast<unsigned>(i % sizeof(T));
	return static_cast<U>(static_cast<U>(rotated) << lane);
}

template <class T>
std::make_unsigned_t<T> xor_background()
{
	return static_cast<std::make_unsigned_t<T>>(0x5A3C96E1A55AC33CULL);
}

template <class T>
T input_value(fi_op op, size_t i, int r, int p)
{
	const int64_t s = static_cast<int64_t>(i % 13);
	const size_t pp = static_cast<size_t>(p);
	const size_t ur = static_cast<size_t>(r);
	switch (op) {
	case FI_SUM: return make<T>(r + s - signed_offset<T>(), 2 * r - s);
	case FI_PROD: {
		const bool first = ur == i % pp;
		const bool second = p > 1 && ur == (i + 1) % pp;
		if constexpr (IsComplex<T>::value)
			return first ? make<T>(1, 1) : second ? make<T>(0, 2) : make<T>(1);
		else
			return first    ? make<T>(2)
			       : second ? make<T>(is_signed_element<T>() ? -3 : 3)
					: make<T>(1);
	}
	case FI_MIN:
	case FI_MAX: return make<T>(s - signed_offset<T>() + static_cast<int64_t>((ur + i) % pp));
	case FI_LOR:
	case FI_LAND:
	case FI_LXOR: {
		// Complex truth lives in the imaginary part alone, so a provider
		// that tests only the real part fails.
		const T truthy = make<T>(IsComplex<T>::value ? 0 : s + 1, s + 1);
		const size_t chosen = i % (pp + 1); // == p: no rank is chosen
		if (op == FI_LOR)
			return ur == chosen ? truthy : make<T>(0);
		if (op == FI_LAND)
			return ur == chosen ? make<T>(0) : truthy;
		return ur < chosen ? truthy : make<T>(0);
	}
	case FI_BOR:
	case FI_BAND:
	case FI_BXOR:
		if constexpr (std::is_integral_v<T>) {
			using U = std::make_unsigned_t<T>;
			const U bit = rank_bit<T>(i, r);
			const U value = op == FI_BOR    ? bit
					: op == FI_BAND ? static_cast<U>(~bit)
							: bit ^ xor_background<T>();
			return static_cast<T>(value);
		}
		break;
	default: break;
	}
	throw std::invalid_argument(
		strfmt("no operand for %s on %s", op_name(op), typeid(T).name()));
}

template <class T>
T expected_value(fi_op op, size_t i, int p)
{
	const int64_t s = static_cast<int64_t>(i % 13);
	const int64_t n = p;
	const size_t pp = static_cast<size_t>(p);
	switch (op) {
	case FI_SUM:
		return make<T>(n * (n - 1) / 2 + n * (s - signed_offset<T>()), n * (n - 1) - n * s);
	case FI_PROD:
		if constexpr (IsComplex<T>::value)
			return p == 1 ? make<T>(1, 1) : make<T>(-2, 2); // (1+i)(2i)
		else
			return p == 1 ? make<T>(2) : make<T>(is_signed_element<T>() ? -6 : 6);
	case FI_MIN: return make<T>(s - signed_offset<T>());
	case FI_MAX: return make<T>(s - signed_offset<T>() + n - 1);
	case FI_LOR: return make<T>(i % (pp + 1) < pp ? 1 : 0);
	case FI_LAND: return make<T>(i % (pp + 1) < pp ? 0 : 1);
	case FI_LXOR: return make<T>((i % (pp + 1)) % 2);
	case FI_BOR:
	case FI_BAND:
	case FI_BXOR:
		if constexpr (std::is_integral_v<T>) {
			using U = std::make_unsigned_t<T>;
			const U bits = all_rank_bits<T>(i, p);
			const U value = op == FI_BOR ? bits
					: op == FI_BAND
						? static_cast<U>(~bits)
						: static_cast<U>(bits ^ (p % 2 ? xor_background<T>()
									       : U{0}));
			return static_cast<T>(value);
		}
		break;
	default: break;
	}
	throw std::invalid_argument(
		strfmt("no result for %s on %s", op_name(op), typeid(T).name()));
}

template <class T>
std::string show(const T& v)
{
	if constexpr (IsComplex<T>::value)
		return strfmt("(%Lg, %Lg)", static_cast<long double>(v.real()),
			      static_cast<long double>(v.imag()));
	else if constexpr (std::is_floating_point_v<T>)
		return strfmt("%Lg", static_cast<long double>(v));
	else if constexpr (std::is_signed_v<T>)
		return strfmt("%lld", static_cast<long long>(v));
	else
		return strfmt("0x%llx", static_cast<unsigned long long>(v));
}

} // namespace

void fill_reduction_input(fi_datatype type, fi_op op, std::span<std::byte> buf, size_t first_index,
			  int rank, int size)
{
	expect(size >= 1 && size <= kMaxReductionRanks,
	       "closed-form reductions hold for 1..%d ranks, not %d", kMaxReductionRanks, size);
	with_element_type(type, [&](auto zero) {
		using T = decltype(zero);
		const size_t n = buf.size() / sizeof(T);
		for (size_t k = 0; k < n; ++k) {
			fabtests::store_without_padding(
				buf.data() + k * sizeof(T),
				input_value<T>(op, first_index + k, rank, size));
		}
	});
}

std::optional<std::string> check_reduction_output(fi_datatype type, fi_op op,
						  std::span<const std::byte> buf,
						  size_t first_index, int size)
{
	return with_element_type(type, [&](auto zero) -> std::optional<std::string> {
		using T = decltype(zero);
		const size_t n = buf.size() / sizeof(T);
		for (size_t k = 0; k < n; ++k) {
			T got;
			std::memcpy(&got, buf.data() + k * sizeof(T), sizeof(T));
			const T want = expected_value<T>(op, first_index + k, size);
			// A reduction over a single rank applies no operation, so its
			// logical result may be the operand itself (MPI copies it)
			// rather than its truth value.
			const bool lone_operand =
				size == 1 && (op == FI_LOR || op == FI_LAND || op == FI_LXOR) &&
				got == input_value<T>(op, first_index + k, 0, 1);
			// Compared as values: long double carries padding bytes.
			if (!(got == want) && !lone_operand)
				return strfmt("element %zu of %zu is %s, want %s", k, n,
					      show(got).c_str(), show(want).c_str());
		}
		return std::nullopt;
	});
}

uint64_t block_seed(uint64_t call_seed, int source, int block)
{
	return make_seed(call_seed, static_cast<uint64_t>(source) + 1,
			 static_cast<uint64_t>(block) + 1);
}

} // namespace fabtests::coll
