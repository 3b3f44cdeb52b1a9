#include "engine/reduce.hpp"

#include <array>
#include <complex>
#include <type_traits>

namespace rcoll::engine {

namespace {

template <class T>
struct is_complex_type : std::false_type {};
template <class T>
struct is_complex_type<std::complex<T>> : std::true_type {};

// Integer arithmetic in an unsigned type at least as wide as `unsigned`, so
// that neither signed overflow nor integer promotion is undefined behaviour.
template <class T>
using wrap_t =
	std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <class T>
constexpr bool truth(const T& v) noexcept
{
	if constexpr (is_complex_type<T>::value)
		return v.real() != 0 || v.imag() != 0;
	else
		return v != T(0);
}

template <class T>
constexpr T from_truth(bool v) noexcept
{
	return v ? T(1) : T(0);
}

template <ReduceOp Op, class T>
inline T combine(const T& a, const T& b) noexcept
{
	if constexpr (Op == ReduceOp::min) {
		return b < a ? b : a;
	} else if constexpr (Op == ReduceOp::max) {
		return b > a ? b : a;
	} else if constexpr (Op == ReduceOp::sum) {
		if constexpr (std::is_integral_v<T>)
			return static_cast<T>(static_cast<wrap_t<T>>(a) +
					      static_cast<wrap_t<T>>(b));
		else if constexpr (is_complex_type<T>::value)
			return T(a.real() + b.real(), a.imag() + b.imag());
		else
			return a + b;
	} else if constexpr (Op == ReduceOp::prod) {
		if constexpr (std::is_integral_v<T>) {
			return static_cast<T>(static_cast<wrap_t<T>>(a) *
					      static_cast<wrap_t<T>>(b));
		} else if constexpr (is_complex_type<T>::value) {
			auto re = a.real() * b.real() - a.imag() * b.imag();
			auto im = a.real() * b.imag() + a.imag() * b.real();
			return T(re, im);
		} else {
			return a * b;
		}
	} else if constexpr (Op == ReduceOp::lor) {
		return from_truth<T>(truth(a) || truth(b));
	} else if constexpr (Op == ReduceOp::land) {
		return from_truth<T>(truth(a) && truth(b));
	} else if constexpr (Op == ReduceOp::lxor) {
		return from_truth<T>(truth(a) != truth(b));
	} else if constexpr (Op == ReduceOp::bor) {
		return static_cast<T>(a | b);
	} else if constexpr (Op == ReduceOp::band) {
		return static_cast<T>(a & b);
	} else {
		static_assert(Op == ReduceOp::bxor);
		return static_cast<T>(a ^ b);
	}
}

// Three loop shapes so that the compiler sees no possible aliasing in any
// of them (a loop with a run-time overlap check would fall back to scalar
// code exactly in the in-place case, which is the common one).
template <ReduceOp Op, class T>
void reduce_distinct(T* __restrict dst, const T* __restrict a, const T* __restrict b,
		     size_t n) noexcept
{
	for (size_t i = 0; i < n; ++i)
		dst[i] = combine<Op>(a[i], b[i]);
}

template <ReduceOp Op, class T>
void reduce_into_a(T* __restrict acc, const T* __restrict b, size_t n) noexcept
{
	for (size_t i = 0; i < n; ++i)
		acc[i] = combine<Op>(acc[i], b[i]);
}

template <ReduceOp Op, class T>
void reduce_into_b(T* __restrict acc, const T* __restrict a, size_t n) noexcept
{
	for (size_t i = 0; i < n; ++i)
		acc[i] = combine<Op>(a[i], acc[i]);
}

template <ReduceOp Op, class T>
void kernel(void* dst, const void* a, const void* b, size_t n) noexcept
{
	auto* d = static_cast<T*>(dst);
	const auto* x = static_cast<const T*>(a);
	const auto* y = static_cast<const T*>(b);
	if (d == x)
		reduce_into_a<Op>(d, y, n);
	else if (d == y)
		reduce_into_b<Op>(d, x, n);
	else
		reduce_distinct<Op>(d, x, y, n);
}

template <ReduceOp Op, class T>
constexpr ReduceKernel kernel_if_valid() noexcept
{
	constexpr bool complex = is_complex_type<T>::value;
	constexpr bool integral = std::is_integral_v<T>;
	if constexpr ((Op == ReduceOp::min || Op == ReduceOp::max) && complex) {
		return nullptr;
	} else if constexpr ((Op == ReduceOp::bor || Op == ReduceOp::band ||
			      Op == ReduceOp::bxor) &&
			     !integral) {
		return nullptr;
	} else {
		return &kernel<Op, T>;
	}
}

template <ReduceOp Op>
constexpr std::array<ReduceKernel, datatype_count> row() noexcept
{
	return {
		kernel_if_valid<Op, int8_t>(),
		kernel_if_valid<Op, uint8_t>(),
		kernel_if_valid<Op, int16_t>(),
		kernel_if_valid<Op, uint16_t>(),
		kernel_if_valid<Op, int32_t>(),
		kernel_if_valid<Op, uint32_t>(),
		kernel_if_valid<Op, int64_t>(),
		kernel_if_valid<Op, uint64_t>(),
		kernel_if_valid<Op, float>(),
		kernel_if_valid<Op, double>(),
		kernel_if_valid<Op, std::complex<float>>(),
		kernel_if_valid<Op, std::complex<double>>(),
		kernel_if_valid<Op, long double>(),
		kernel_if_valid<Op, std::complex<long double>>(),
	};
}

// [op][datatype], in the libfabric enum order.
constexpr std::array<std::array<ReduceKernel, datatype_count>, reduce_op_count> kernels = {
	row<ReduceOp::min>(),  row<ReduceOp::max>(),  row<ReduceOp::sum>(), row<ReduceOp::prod>(),
	row<ReduceOp::lor>(),  row<ReduceOp::land>(), row<ReduceOp::bor>(), row<ReduceOp::band>(),
	row<ReduceOp::lxor>(), row<ReduceOp::bxor>(),
};

} // namespace

ReduceKernel reduction_kernel(Datatype d, ReduceOp op) noexcept
{
	auto di = static_cast<unsigned>(d);
	auto oi = static_cast<unsigned>(op);
	if (di >= datatype_count || oi >= reduce_op_count)
		return nullptr;
	return kernels[oi][di];
}

Errc reduce(Datatype d, ReduceOp op, void* dst, const void* a, const void* b, size_t count) noexcept
{
	ReduceKernel k = reduction_kernel(d, op);
	if (!k)
		return Errc::not_supported;
	if (count == 0)
		return Errc::ok;
	if (!dst || !a || !b)
		return Errc::invalid_argument;
	k(dst, a, b, count);
	return Errc::ok;
}

} // namespace rcoll::engine
