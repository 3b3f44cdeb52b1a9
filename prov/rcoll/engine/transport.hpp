// What the collective engine needs from a fabric, and nothing more. It is
// shaped after what a libfabric core MSG endpoint with verbs semantics
// offers, so the libfabric implementation is a thin mapping:
//
//   write()      fi_writemsg / fi_writedata: one-sided RDMA write from a
//                registered local buffer to (peer region, offset), with
//                optional 32-bit immediate data of which the engine uses
//                the low 28 bits (the transport keeps the top 4 for its own
//                dispatch). The immediate is seen by the target as an
//                arrival event after the write's data is placed; nothing
//                is promised about the order of different writes.
//   poll()       reads the CQ: local completions (the source may be reused)
//                and arrivals (immediates).
//   scratch()    the region registered once per group at join time; every
//                member's region has the same size, asked for by the
//                engine (Group::scratch_bytes) and exchanged by the glue.
//   register_memory()  per-call registration of a user buffer or a
//                temporary; the returned key (<= 24 bytes, opaque to the
//                engine) is shipped to peers in a small write so that they
//                can write straight into that buffer. A registration for
//                Access::read alone may be deferred to the first write that
//                needs it (most small writes copy their bytes); if it then
//                fails, the transport fails the group as it does for a
//                write it cannot make.
//
// All functions are noexcept: errors are codes, never exceptions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/schedule.hpp"
#include "engine/types.hpp"

namespace rcoll::engine {

inline constexpr unsigned immediate_bits = 28;
inline constexpr uint32_t immediate_mask = (uint32_t(1) << immediate_bits) - 1;

// A transport-defined remote key: for libfabric, e.g. virtual address,
// provider key and length. Fixed size so it travels in one small write.
struct MemoryKey {
	std::array<std::byte, memory_key_bytes> bytes{};
};

// A per-call registration. `handle` is the transport's own reference
// (an index, a fid_mr pointer...), meaningless to the engine.
struct Registration {
	uint64_t handle = 0;
	MemoryKey key;
};

struct WriteRequest {
	uint32_t peer = 0; // group rank
	const std::byte* source = nullptr;
	size_t length = 0;
	// Registration the source lies in; nullptr: this rank's scratch region.
	const Registration* source_registration = nullptr;
	// Peer buffer: nullptr means the peer's scratch region, else a key the
	// peer shipped. `offset` is relative to the start of that buffer.
	const MemoryKey* target_key = nullptr;
	uint64_t offset = 0;
	bool has_immediate = false;
	uint32_t immediate = 0; // < 2^28
	uint64_t cookie = 0;    // returned with the local completion
};

struct TransportEvent {
	enum class Kind : uint8_t { write_complete, arrival, error };
	Kind kind = Kind::arrival;
	uint32_t immediate = 0; // arrival: its counter
	uint64_t cookie = 0;    // write_complete, error of a write
	Errc error = Errc::ok;  // error
	uint32_t arrivals = 1;  // arrival: how many at once
};

class Transport {
public:
	virtual ~Transport() = default;

	// This rank's scratch region, registered at join time.
	virtual std::span<std::byte> scratch() noexcept = 0;

	virtual Errc register_memory(std::span<std::byte> buffer, Access access,
				     Registration& out) noexcept = 0;
	virtual void deregister_memory(const Registration&) noexcept = 0;

	// Posts one write. would_block when the transport's own queue is full
	// (the engine retries on its next progress call); any other error
	// fails the operation.
	virtual Errc write(const WriteRequest&) noexcept = 0;

	// Fills `out` with up to out.size() events; returns how many.
	virtual size_t poll(std::span<TransportEvent> out) noexcept = 0;
};

} // namespace rcoll::engine
