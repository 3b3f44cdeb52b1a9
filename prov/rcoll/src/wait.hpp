// Waiting without burning the machine: spin on progress for a short time,
// then sleep in growing slices (ranks may outnumber cores).
#pragma once

#include <functional>
#include <mutex>
#include <vector>

namespace rcoll {

struct Endpoint;

// Progresses `eps` until `ready()` holds or `timeout_ms` passes (< 0: no
// limit). `held` is the caller's lock on the domain; it is released while
// blocked. Returns 0, or -FI_EAGAIN on timeout.
int wait_with_progress(std::unique_lock<std::mutex>& held, const std::vector<Endpoint*>& eps,
		       const std::function<bool()>& ready, int timeout_ms);

} // namespace rcoll
