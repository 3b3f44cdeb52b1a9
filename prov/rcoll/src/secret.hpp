// Values a peer must not be able to predict: connection tokens, the keys of
// core registrations where the core lets rcoll choose them.
#pragma once

#include <cstdint>

namespace rcoll {

// 64 bits from the kernel's random source, never 0; each value drawn is handed out once
// (drawn in batches, per thread; a forked child draws its own).
uint64_t unguessable_u64();

} // namespace rcoll
