// RDMA on a core connection: the one place rcoll posts core writes and
// reads, for rendezvous transfers, application RMA and collective writes.
#pragma once

#include "common.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace rcoll {

// One write of `len` bytes into the peer's registered memory at
// [addr, addr + len). A null `context` injects it: the core copies the
// source at once and reports no completion. 0, -FI_EAGAIN, or the core's
// error. Never with immediate data (see proto/wire.hpp).
ssize_t post_core_write(fid_ep* conn, const void* src, size_t len, void* desc, uint64_t addr,
			uint64_t key, void* context);

// One transfer between local memory and a peer's registered memory, issued
// in core operations of at most `max_chunk` bytes one after the other (a
// core bounds the size of one operation).
struct ChunkedRma {
	bool write = true;
	std::byte* local = nullptr;
	void* desc = nullptr;
	uint64_t remote_addr = 0, key = 0;
	uint64_t length = 0;

	uint64_t done = 0;  // bytes of the chunks completed so far
	uint64_t chunk = 0; // bytes of the chunk in flight
	bool in_flight = false;
	bool retry = false; // the core refused the next chunk with -FI_EAGAIN

	// Posts the next chunk with `context`: 0, -FI_EAGAIN (retry is then
	// set), or the core's error.
	ssize_t post_next(fid_ep* conn, void* context, size_t max_chunk);
	// The chunk in flight completed: true when the whole transfer has.
	bool chunk_done();
	// The chunk in flight is the last one.
	bool posted_last() const { return in_flight && done + chunk >= length; }
	// Nothing of it is with the core, or waits to be posted.
	bool idle() const { return !in_flight && !retry; }
};

} // namespace rcoll
