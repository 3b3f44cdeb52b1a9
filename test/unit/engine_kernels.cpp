// Reduction kernels: every datatype x op pair fi_collective(3) allows, in
// all three aliasing shapes, against the closed forms of engine_harness.hpp;
// the invalid pairs rejected; the edge semantics (wrap-around, NaN,
// logical results, complex product) pinned down; the enum order checked
// against libfabric's own headers, which is what lets the glue map them
// with a static table.
#include <criterion/criterion.h>

#include <cmath>
#include <limits>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>

#include "engine_harness.hpp"

using namespace rcoll::test;

Test(engine_kernels, enums_mirror_libfabric)
{
	cr_assert_eq(int(Datatype::int8), FI_INT8);
	cr_assert_eq(int(Datatype::uint64), FI_UINT64);
	cr_assert_eq(int(Datatype::float32), FI_FLOAT);
	cr_assert_eq(int(Datatype::float64), FI_DOUBLE);
	cr_assert_eq(int(Datatype::float_complex), FI_FLOAT_COMPLEX);
	cr_assert_eq(int(Datatype::double_complex), FI_DOUBLE_COMPLEX);
	cr_assert_eq(int(Datatype::long_double), FI_LONG_DOUBLE);
	cr_assert_eq(int(Datatype::long_double_complex), FI_LONG_DOUBLE_COMPLEX);
	cr_assert_eq(datatype_count, unsigned(FI_DATATYPE_LAST));
	cr_assert_eq(int(ReduceOp::min), FI_MIN);
	cr_assert_eq(int(ReduceOp::sum), FI_SUM);
	cr_assert_eq(int(ReduceOp::lor), FI_LOR);
	cr_assert_eq(int(ReduceOp::bxor), FI_BXOR);
	cr_assert_eq(int(Collective::barrier), FI_BARRIER);
	cr_assert_eq(int(Collective::alltoall), FI_ALLTOALL);
	cr_assert_eq(int(Collective::reduce_scatter), FI_REDUCE_SCATTER);
	cr_assert_eq(int(Collective::gather), FI_GATHER);
}

Test(engine_kernels, valid_pairs_follow_libfabric_table)
{
	unsigned valid = 0;
	for (unsigned d = 0; d < datatype_count; ++d) {
		for (unsigned o = 0; o < reduce_op_count; ++o) {
			auto dt = static_cast<Datatype>(d);
			auto op = static_cast<ReduceOp>(o);
			bool want;
			if (op == ReduceOp::min || op == ReduceOp::max)
				want = !is_complex(dt);
			else if (op == ReduceOp::bor || op == ReduceOp::band ||
				 op == ReduceOp::bxor)
				want = is_integer(dt);
			else
				want = true;
			cr_assert_eq(is_valid_reduction(dt, op), want, "%s %s",
				     to_string(dt).data(), to_string(op).data());
			cr_assert_eq(reduction_kernel(dt, op) != nullptr, want);
			valid += want;
			if (!want) {
				int x = 0;
				cr_assert_eq(reduce(dt, op, &x, &x, &x, 1), Errc::not_supported);
			}
		}
	}
	// 8 integer types take all 10 ops, 3 real floating types 7, 3 complex 5.
	cr_assert_eq(valid, 8u * 10 + 3 * 7 + 3 * 5);
	cr_assert_null(reduction_kernel(static_cast<Datatype>(datatype_count), ReduceOp::sum));
	cr_assert_null(reduction_kernel(Datatype::int32, static_cast<ReduceOp>(reduce_op_count)));
}

Test(engine_kernels, sizes)
{
	cr_assert_eq(datatype_size(Datatype::int8), 1u);
	cr_assert_eq(datatype_size(Datatype::uint16), 2u);
	cr_assert_eq(datatype_size(Datatype::float32), 4u);
	cr_assert_eq(datatype_size(Datatype::double_complex), 16u);
	cr_assert_eq(datatype_size(Datatype::long_double), sizeof(long double));
	cr_assert_eq(datatype_size(Datatype::long_double_complex), 2 * sizeof(long double));
}

namespace {

// Folds p ranks' inputs into one vector with the kernel in the given
// aliasing shape and compares with the closed form.
void fold_and_check(Datatype d, ReduceOp op, uint32_t p, uint64_t n, int shape)
{
	const size_t esz = datatype_size(d);
	AlignedBytes acc(n * esz), next(n * esz), out(n * esz);
	fill_reduction_input(d, op, acc.data(), 0, n, 0, p);
	for (uint32_t r = 1; r < p; ++r) {
		fill_reduction_input(d, op, next.data(), 0, n, r, p);
		switch (shape) {
		case 0: // dst == a
			cr_assert_eq(reduce(d, op, acc.data(), acc.data(), next.data(), n),
				     Errc::ok);
			break;
		case 1: // dst == b
			cr_assert_eq(reduce(d, op, next.data(), acc.data(), next.data(), n),
				     Errc::ok);
			std::memcpy(acc.data(), next.data(), n * esz);
			break;
		default: // distinct
			cr_assert_eq(reduce(d, op, out.data(), acc.data(), next.data(), n),
				     Errc::ok);
			std::memcpy(acc.data(), out.data(), n * esz);
			break;
		}
	}
	int64_t bad = check_reduction(d, op, acc.data(), 0, n, p);
	cr_assert_eq(bad, -1, "%s %s p=%u shape=%d: element %ld", to_string(d).data(),
		     to_string(op).data(), p, shape, long(bad));
}

} // namespace

Test(engine_kernels, every_pair_every_shape_closed_form)
{
	for (unsigned d = 0; d < datatype_count; ++d)
		for (unsigned o = 0; o < reduce_op_count; ++o) {
			auto dt = static_cast<Datatype>(d);
			auto op = static_cast<ReduceOp>(o);
			if (!is_valid_reduction(dt, op))
				continue;
			for (uint32_t p : {2u, 3u, 7u, 64u, 70u})
				for (int shape = 0; shape < 3; ++shape)
					fold_and_check(dt, op, p, 1001, shape);
		}
}

Test(engine_kernels, integer_arithmetic_wraps)
{
	int8_t a = 127, b = 1, r = 0;
	reduce(Datatype::int8, ReduceOp::sum, &r, &a, &b, 1);
	cr_assert_eq(r, -128);
	uint16_t x = 65535, y = 65535, z = 0;
	reduce(Datatype::uint16, ReduceOp::prod, &z, &x, &y, 1);
	cr_assert_eq(z, 1);
	int64_t big = std::numeric_limits<int64_t>::max(), two = 2, out = 0;
	reduce(Datatype::int64, ReduceOp::prod, &out, &big, &two, 1);
	cr_assert_eq(out, -2);
}

Test(engine_kernels, min_max_nan_and_order)
{
	double nan = std::nan(""), one = 1.0, r = 0;
	// fi_atomic(3): the accumulated value is replaced only if the incoming
	// one compares less, so a NaN already there stays and an incoming NaN
	// is ignored.
	reduce(Datatype::float64, ReduceOp::min, &r, &nan, &one, 1);
	cr_assert(std::isnan(r));
	reduce(Datatype::float64, ReduceOp::min, &r, &one, &nan, 1);
	cr_assert_eq(r, 1.0);
	reduce(Datatype::float64, ReduceOp::max, &r, &one, &nan, 1);
	cr_assert_eq(r, 1.0);
	int32_t lo = -5, hi = 3, m = 0;
	reduce(Datatype::int32, ReduceOp::min, &m, &hi, &lo, 1);
	cr_assert_eq(m, -5);
	reduce(Datatype::int32, ReduceOp::max, &m, &lo, &hi, 1);
	cr_assert_eq(m, 3);
}

Test(engine_kernels, logical_results_are_one_or_zero)
{
	float a[4] = {0.0f, 2.5f, 0.0f, -1.0f}, b[4] = {0.0f, 0.0f, 7.0f, 3.0f}, r[4];
	reduce(Datatype::float32, ReduceOp::lor, r, a, b, 4);
	cr_assert(r[0] == 0.0f && r[1] == 1.0f && r[2] == 1.0f && r[3] == 1.0f);
	reduce(Datatype::float32, ReduceOp::land, r, a, b, 4);
	cr_assert(r[0] == 0.0f && r[1] == 0.0f && r[2] == 0.0f && r[3] == 1.0f);
	reduce(Datatype::float32, ReduceOp::lxor, r, a, b, 4);
	cr_assert(r[0] == 0.0f && r[1] == 1.0f && r[2] == 1.0f && r[3] == 0.0f);
	// A complex number is true when either part is non-zero.
	std::complex<double> c[2] = {{0, 0}, {0, 2}}, d[2] = {{0, 0}, {0, 0}}, e[2];
	reduce(Datatype::double_complex, ReduceOp::lor, e, c, d, 2);
	cr_assert(e[0] == std::complex<double>(0, 0) && e[1] == std::complex<double>(1, 0));
	uint8_t u[2] = {0, 200}, v[2] = {5, 3}, w[2];
	reduce(Datatype::uint8, ReduceOp::land, w, u, v, 2);
	cr_assert(w[0] == 0 && w[1] == 1);
}

Test(engine_kernels, complex_product_and_bitwise)
{
	std::complex<float> a(1, 2), b(3, 4), r;
	reduce(Datatype::float_complex, ReduceOp::prod, &r, &a, &b, 1);
	cr_assert(r == std::complex<float>(-5, 10));
	std::complex<long double> la(0, 1), lr;
	reduce(Datatype::long_double_complex, ReduceOp::prod, &lr, &la, &la, 1);
	cr_assert(lr == std::complex<long double>(-1, 0));
	uint32_t x = 0xF0F0, y = 0x0FF0, z;
	reduce(Datatype::uint32, ReduceOp::bxor, &z, &x, &y, 1);
	cr_assert_eq(z, 0xFF00u);
	reduce(Datatype::uint32, ReduceOp::band, &z, &x, &y, 1);
	cr_assert_eq(z, 0x00F0u);
	reduce(Datatype::uint32, ReduceOp::bor, &z, &x, &y, 1);
	cr_assert_eq(z, 0xFFF0u);
}

Test(engine_kernels, zero_count_and_null_buffers)
{
	cr_assert_eq(reduce(Datatype::int32, ReduceOp::sum, nullptr, nullptr, nullptr, 0),
		     Errc::ok);
	int x = 1;
	cr_assert_eq(reduce(Datatype::int32, ReduceOp::sum, nullptr, &x, &x, 1),
		     Errc::invalid_argument);
}
