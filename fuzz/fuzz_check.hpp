// Invariants the fuzz targets assert: a failed one stops the fuzzer with
// the input that broke it.
#pragma once

#define FUZZ_CHECK(cond)                  \
	do {                              \
		if (!(cond))              \
			__builtin_trap(); \
	} while (0)
