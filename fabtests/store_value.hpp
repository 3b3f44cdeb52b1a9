// Test values written into fabric buffers. Shared by the test clients and
// the engine's unit tests.
#pragma once

#include <cstddef>
#include <cstring>

namespace fabtests {

// Stores v at dst (no alignment needed) with its padding bytes zeroed
// (x86-64's long double has six): fabrics send whole elements, and memory
// checkers flag padding nobody wrote. Complex values part by part: GCC does
// not clear the padding inside them.
template <class T>
void store_without_padding(std::byte* dst, T v)
{
	if constexpr (requires { v.imag(); }) {
		store_without_padding(dst, v.real());
		store_without_padding(dst + sizeof(v.real()), v.imag());
	} else {
		__builtin_clear_padding(&v);
		std::memcpy(dst, &v, sizeof(T));
	}
}

} // namespace fabtests
