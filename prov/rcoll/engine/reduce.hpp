// Reduction kernels: dst[i] = a[i] (op) b[i] for every datatype x op pair
// that fi_collective(3) allows.
//
// Semantics (fi_atomic(3) definitions, with `a` the accumulated value and
// `b` the incoming one):
//  - integer SUM/PROD wrap modulo 2^bits (computed in unsigned arithmetic);
//  - MIN/MAX keep `a` unless `b` compares less/greater, so a NaN in `a` is
//    kept and a NaN in `b` is ignored;
//  - LOR/LAND/LXOR produce 1 or 0 in the operand type; a complex value is
//    true when either part is non-zero; the result is (1, 0) or (0, 0);
//  - complex PROD is the textbook (ac - bd, ad + bc), without the C99
//    Annex G infinity recovery, so every rank computes identical bits.
// `dst` may be `a` or `b` itself (in-place accumulation) but must not overlap
// them partially. Loops are written so that GCC vectorises them at -O2/-O3.
#pragma once

#include "engine/types.hpp"

namespace rcoll::engine {

using ReduceKernel = void (*)(void* dst, const void* a, const void* b, size_t count) noexcept;

// nullptr when the pair is not allowed.
ReduceKernel reduction_kernel(Datatype, ReduceOp) noexcept;

// Convenience wrapper: checks the pair and the size, then runs the kernel.
Errc reduce(Datatype, ReduceOp, void* dst, const void* a, const void* b, size_t count) noexcept;

} // namespace rcoll::engine
