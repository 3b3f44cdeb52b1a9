// The node-local path of the collective transport. Members of a group that
// run on one host need not send their writes through the core: going through
// the loopback stack, every byte is copied twice, each message costs system
// calls on both sides, and the two directions of an exchange contend for the
// same socket locks. Instead each member's scratch region lives in a memory
// file that the other local members map, so a write into it is one memcpy,
// and a write into a buffer a member registered for one call is one
// cross-memory-attach copy (process_vm_writev) straight into the owner's
// address space. Both keep the engine's RDMA-write contract: the arrival
// (the immediate) is announced only after the data is placed, through a
// doorbell ring in the owner's region.
//
// Nothing here knows of libfabric; FabricTransport decides per member
// whether this path or the core carries a write.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

namespace rcoll::local {

// Processes with the same non-zero identity share one kernel, one network
// namespace and one pid namespace: they can map each other's memory files
// and name each other by pid. 0 when it cannot be told.
uint64_t host_identity() noexcept;

// The doorbell: a bounded multi-producer, single-consumer ring of 32-bit
// arrivals in shared memory (Vyukov's bounded queue: each cell carries the
// sequence number that says whose turn it is, so producers in different
// processes need only one compare-and-swap on the head).
struct Doorbell {
	static constexpr uint64_t kCells = 4096;
	struct alignas(16) Cell {
		std::atomic<uint64_t> seq;
		uint64_t value;
	};
	static_assert(std::atomic<uint64_t>::is_always_lock_free,
		      "cross-process atomics need lock-free 64-bit operations");

	alignas(64) std::atomic<uint64_t> head;
	alignas(64) Cell cells[kCells];

	void init() noexcept;
	// false: the ring is full; the caller retries later.
	bool push(uint32_t value) noexcept;
	// Single consumer; `tail` is the consumer's own position.
	bool pop(uint64_t& tail, uint32_t& value) noexcept;
};

// This process's region: the scratch it offers to local members, and the
// doorbell they ring. RAII: the mapping and the file close with it; members
// that mapped it keep their mapping (the kernel keeps the pages), so their
// late writes land in memory nobody reads rather than anywhere else.
class OwnRegion {
public:
	OwnRegion() = default;
	OwnRegion(const OwnRegion&) = delete;
	OwnRegion& operator=(const OwnRegion&) = delete;
	~OwnRegion();

	// 0 or -errno. The scratch comes zeroed and page-aligned.
	int create(size_t scratch_bytes) noexcept;
	std::span<std::byte> scratch() const noexcept { return {scratch_, scratch_bytes_}; }
	// What a local member needs to map it: our pid, the file's descriptor
	// number in this process, and a nonce it checks in the region's header.
	int fd() const noexcept { return fd_; }
	uint64_t nonce() const noexcept;
	// Up to out.size() arrivals rung by local members.
	size_t drain(std::span<uint32_t> out) noexcept;

private:
	int fd_ = -1;
	void* base_ = nullptr;
	size_t mapped_ = 0;
	std::byte* scratch_ = nullptr;
	size_t scratch_bytes_ = 0;
	uint64_t tail_ = 0;
};

// Another local member's region, mapped into this process.
class PeerRegion {
public:
	PeerRegion() = default;
	PeerRegion(const PeerRegion&) = delete;
	PeerRegion& operator=(const PeerRegion&) = delete;
	~PeerRegion();

	// Maps the region of process `pid` whose file is its descriptor `fd`,
	// and checks the nonce and the scratch size. `remote_scratch` is the
	// scratch's address in that process, used to test once whether this
	// process may write into its memory (ptrace rules: same user, and no
	// Yama restriction it did not lift). 0 or -errno.
	int attach(pid_t pid, int fd, uint64_t nonce, size_t scratch_bytes,
		   uint64_t remote_scratch) noexcept;
	std::byte* scratch() const noexcept { return scratch_; }
	size_t scratch_bytes() const noexcept { return scratch_bytes_; }
	// Writes into any of the owner's memory (buffers it registered for one
	// call) are possible: cross-memory attach is allowed.
	bool can_write_memory() const noexcept { return memory_writes_; }
	// 0 or -errno; the bytes are in place when it returns.
	int write_memory(uint64_t remote_address, const void* source, size_t length) noexcept;
	bool ring(uint32_t value) noexcept;

private:
	pid_t pid_ = 0;
	void* base_ = nullptr;
	size_t mapped_ = 0;
	Doorbell* doorbell_ = nullptr;
	std::byte* scratch_ = nullptr;
	size_t scratch_bytes_ = 0;
	bool memory_writes_ = false;
};

} // namespace rcoll::local
