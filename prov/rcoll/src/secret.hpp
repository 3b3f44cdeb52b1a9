// Values a peer must not be able to predict: connection tokens, the keys of
// core registrations where the core lets rcoll choose them.
#pragma once

#include <cstdint>

namespace rcoll {

// 64 bits from the kernel's random source, never 0.
uint64_t unguessable_u64();

} // namespace rcoll
