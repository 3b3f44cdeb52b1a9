// The node-local path of the collective transport. Members of a group that
// run on one host need not send their writes through the core: going through
// the loopback stack, every byte is copied twice, each message costs system
// calls on both sides, and the two directions of an exchange contend for the
// same socket locks. Instead each member's scratch region lives in a sealed
// memory file that the other local members map, so a write into it is one
// memcpy, and a write into a buffer a member registered for one call is one
// cross-memory-attach copy (process_vm_writev) straight into the owner's
// address space. Both keep the engine's RDMA-write contract: the arrival
// (the immediate) is announced only after the data is placed, through a
// doorbell ring in the owner's file.
//
// Nothing here knows of libfabric; FabricTransport decides per member
// whether this path or the core carries a write.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace rcoll::local {

// Processes with the same non-zero identity share one kernel, one network
// namespace and one pid namespace: they can map each other's memory files
// and name each other by pid. 0 when it cannot be told.
uint64_t host_identity() noexcept;

// Lets sibling processes of the same user write into this one's memory by
// cross-memory attach, as MPI's shared-memory transports do. Under Yama's
// ptrace_scope 1 that takes prctl(PR_SET_PTRACER_ANY), which lets every
// process of the user ptrace this one (full ptrace, not only memory
// writes); without Yama, or with scope 0, nothing needs to change; with
// scope 2 or 3 it cannot be allowed. Whether siblings may write; the
// prctl at most once per process.
bool allow_memory_writes_from_siblings() noexcept;

// The doorbell: a bounded multi-producer, single-consumer ring of 32-bit
// values in shared memory (Vyukov's bounded queue: each cell carries the
// sequence number that says whose turn it is, so producers in different
// processes need only one compare-and-swap on the head). A producer that
// dies between its compare-and-swap and its publication blocks the ring for
// good; its group fails through its connection anyway.
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
	// A hint, exact with one producer: whether push would find a free cell.
	bool has_room() const noexcept;
	enum class Push { rung, full, corrupt };
	// full: the caller retries later. corrupt: the indices in the shared
	// file contradict each other (the file's owner, or another process that
	// maps it, wrote them): bounded, so that a writer never spins forever.
	Push push(uint32_t value) noexcept;
	// Single consumer; `tail` is the consumer's own position.
	bool pop(uint64_t& tail, uint32_t& value) noexcept;
};

// What a member publishes for the collectives that run straight
// through shared memory (local_collectives.hpp): its sequence flag, single
// writer (the owner), and two places for each size of payload, used in
// turn: halves of the flag's own cache line for up to kLineBytes (a
// member that sees the flag has the bytes too), slots for larger ones.
// The verdict (`said` once the owner knows) says whether the owner maps
// every other member's file, may read every member's memory, and yields
// while it waits: the members on its host outnumber their CPUs, another
// group or the endpoint's peers crowd it, or the user says so. Before it is
// said, `settled` says that the owner mapped a member's file and so let
// siblings read and write its memory if it ever will (Yama allows it only
// from then on): a member tests whether it may read the owner's memory
// only after that. `stopped` says the owner failed the group.
struct Published {
	static constexpr size_t kSlotBytes = 65536;
	enum Verdict : uint32_t {
		unknown = 0,
		said = 1,
		maps_all = 2,
		reads_all = 4,
		crowded = 8,
		settled = 16,
	};

	static constexpr size_t kLineBytes = 24;

	alignas(64) std::atomic<uint64_t> arrived;
	std::byte line[2][kLineBytes];
	// Which call chunk n belongs to (its arguments and n, hashed), in half
	// n % 2, written before the flag by the members that contribute to it:
	// a member that reads another's chunk checks that both posted the same
	// call, so members that passed different arguments, or posted their
	// calls in another order, fail it rather than read each other's bytes
	// as theirs.
	uint32_t signature[2];
	// The last chunk the owner is done with: its reads of other members'
	// memory made (single-copy broadcasts and allgathers: a buffer read
	// from stays its owner's until every reader is done), or its share
	// reduced into its slot (reductions in shares), or for an allreduce in
	// one copy under n and n + 1, its share reduced into its output (n) and
	// its reads of the others' shares made (n + 1); and for member 0 of a
	// group whose members take turns on the CPUs the barriers it saw
	// everyone arrive at: at n or more, member 0 is past barrier n, which
	// releases the others (the owner runs its calls in order, so the flag
	// only grows).
	alignas(64) std::atomic<uint64_t> finished;
	alignas(64) std::atomic<uint32_t> verdict;
	std::atomic<uint32_t> stopped;
	alignas(64) std::byte slots[2][kSlotBytes];

	// Where call `sequence`'s chunk of `bytes` goes: every member finds it
	// from the same two numbers.
	template <class Self>
	static auto* chunk(Self& area, uint64_t sequence, size_t bytes) noexcept
	{
		return bytes <= kLineBytes ? area.line[sequence & 1] : area.slots[sequence & 1];
	}
};
static_assert(sizeof(std::atomic<uint64_t>) + 2 * Published::kLineBytes +
			      sizeof(Published::signature) <=
		      64,
	      "the small payloads and the signatures share the flag's cache line");
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// The buffers of its own (call buffers, landing areas) that the owner lets
// the group's members write into, each as the key it ships describes it. A
// member on the same host writes into one by cross-memory attach, which no
// core checks, so it takes a shipped key only if it is listed here: the key
// slot it read the key from lies in its scratch, where any member writes,
// from any host; this table does not (no RDMA registration covers it). An
// entry is live while its address is not 0; the owner fills it before it
// ships the key and empties it when it deregisters the buffer. A writer
// holds the entry while it copies (`writers`), and the owner's withdraw
// waits for the holds to end: checking and copying are two steps, and the
// buffer must not go back to the application between them.
struct ExposedBuffers {
	static constexpr size_t kEntries = 256;
	struct Entry {
		std::atomic<uint64_t> addr;
		std::atomic<uint64_t> key;
		std::atomic<uint64_t> len;
		std::atomic<uint64_t> writers;
	};
	Entry entries[kEntries];
};

// A writer's hold on one exposed buffer (PeerMapping::hold_exposed): while it
// lasts, the owner cannot withdraw the buffer. Empty: the buffer is not
// exposed, and nothing may be copied into it.
class ExposedHold {
public:
	ExposedHold() = default;
	explicit ExposedHold(ExposedBuffers::Entry* entry) noexcept : entry_(entry) {}
	ExposedHold(ExposedHold&& other) noexcept : entry_(std::exchange(other.entry_, nullptr)) {}
	ExposedHold& operator=(ExposedHold&& other) noexcept
	{
		release();
		entry_ = std::exchange(other.entry_, nullptr);
		return *this;
	}
	~ExposedHold() { release(); }
	explicit operator bool() const noexcept { return entry_ != nullptr; }

private:
	void release() noexcept
	{
		if (entry_)
			entry_->writers.fetch_sub(1, std::memory_order_release);
		entry_ = nullptr;
	}
	ExposedBuffers::Entry* entry_ = nullptr;
};

// The start of every scratch file: what an attaching member checks before it
// trusts the rest, then the doorbell and what the owner publishes. The
// scratch follows, page-aligned.
struct ScratchFileHeader {
	// "rcollsc" and the layout version: builds that lay the file out
	// differently refuse each other's files.
	static constexpr uint64_t kMagic = 0x7263'6f6c'6c73'6307ULL;
	uint64_t magic;
	uint64_t nonce;
	uint64_t owner; // the owner's endpoint key: whose file a mapper believes it is
	uint64_t scratch_bytes;
	std::atomic<uint32_t> ended; // ScratchFile::mark_ended
	Doorbell doorbell;
	Published published;
	ExposedBuffers exposed;
};

// This process's scratch for one group. Offered to local members, it lives
// in a memory file sealed against resizing, with the doorbell they ring;
// otherwise in anonymous memory. RAII: the mapping and the file close with
// it. Members that mapped it keep their mapping (the kernel keeps the
// pages), so their late writes into the scratch land where nobody reads.
class ScratchFile {
public:
	ScratchFile() = default;
	ScratchFile(const ScratchFile&) = delete;
	ScratchFile& operator=(const ScratchFile&) = delete;
	~ScratchFile();

	// 0 or -errno. The scratch comes zeroed and page-aligned. With `shared`
	// but no memory file to be had, it falls back to anonymous memory:
	// shared() then says false. `owner` (the owner's endpoint key) is
	// written where mappers check it and no peer's RDMA reaches.
	int create(size_t scratch_bytes, bool shared, uint64_t owner) noexcept;
	// Faults every page of the scratch in now, its contents untouched
	// (peers may already write into it), rather than one page at a time
	// as the first operations reach it: 0 or -errno.
	int prefault() noexcept;
	std::span<std::byte> scratch() const noexcept { return {scratch_, scratch_bytes_}; }
	bool shared() const noexcept { return fd_ >= 0; }
	// What a local member needs to map it: our pid, the file's descriptor
	// number in this process, and a nonce it checks in the file's header.
	int fd() const noexcept { return fd_; }
	uint64_t nonce() const noexcept;
	// Up to out.size() values rung by local members.
	size_t drain(std::span<uint32_t> out) noexcept;
	// This member ended the group's operations: writers must not copy into
	// its memory any more (its call buffers are the application's again).
	void mark_ended() noexcept;
	// What this member publishes to the others (null before create()).
	Published* published() const noexcept;
	// Lists a buffer members may write into, as its key describes it: the
	// entry's index, or -ENOSPC with the table full (-EINVAL: no file).
	int expose(uint64_t addr, uint64_t key, uint64_t len) noexcept;
	// Unlists it, and returns once no writer holds it any more (a writer
	// holds it for one piece of its copy: PeerMapping::write_exposed), or
	// after `limit` (a writer that died or was stopped holding it): false
	// then, and the entry is not reused while the hold lasts.
	bool withdraw(int entry,
		      std::chrono::milliseconds limit = std::chrono::seconds(1)) noexcept;

private:
	int fd_ = -1;
	void* base_ = nullptr;
	size_t mapped_ = 0;
	std::byte* scratch_ = nullptr;
	size_t scratch_bytes_ = 0;
	uint64_t tail_ = 0;
};

// Another local member's scratch file, mapped into this process.
class PeerMapping {
public:
	PeerMapping() = default;
	PeerMapping(const PeerMapping&) = delete;
	PeerMapping& operator=(const PeerMapping&) = delete;
	~PeerMapping();

	// Maps the file that process `pid` holds as descriptor `fd`, after
	// checking that it is a sealed memory file of exactly the size a
	// scratch of `scratch_bytes` needs and that it carries `nonce` and the
	// endpoint key `owner` of the member that claims it: a join record
	// naming another process's file (or this one's) is refused.
	// `remote_scratch` is the scratch's address in that process, used to
	// test once whether this process may write into its memory (ptrace
	// rules: same user, no Yama restriction it did not lift). 0 or -errno.
	int attach(pid_t pid, int fd, uint64_t nonce, uint64_t owner, size_t scratch_bytes,
		   uint64_t remote_scratch) noexcept;
	std::byte* scratch() const noexcept { return scratch_; }
	// The same as ScratchFile::prefault, for this process's mapping of the
	// owner's file (its page tables are this process's own): 0 or -errno.
	int prefault() noexcept;
	// Cross-memory attach into the owner's process is allowed (ptrace
	// rules), so reads and writes of any of its memory (buffers it
	// registered for one call) are possible. Tested on the first call, once
	// the owner had the time to allow it.
	bool cross_memory_allowed() noexcept;
	// cross_memory_allowed() was tried and said no.
	bool cross_memory_refused() const noexcept { return memory_writes_ == Writes::refused; }
	// 0 or -errno; the bytes are in place when it returns. The caller
	// checks first that the process still lives (ProcessWatch).
	int write_memory(uint64_t remote_address, const void* source, size_t length) noexcept;
	// The same the other way: copies the owner's memory into this process.
	int read_memory(uint64_t remote_address, void* target, size_t length) noexcept;
	bool has_room() const noexcept { return doorbell_ && doorbell_->has_room(); }
	// What the owner publishes (read only here: the owner is its one writer).
	const Published* published() const noexcept { return published_; }
	// The owner lists exactly this buffer as one members may write into:
	// the entry, held until the hold ends (copy only while holding it), or
	// an empty hold.
	ExposedHold hold_exposed(uint64_t addr, uint64_t key, uint64_t len) noexcept;
	// Copies into the buffer that the owner exposed as (addr, key, len), at
	// `offset`, in pieces of kExposedPieceBytes, each under a hold of its
	// own: the owner's withdraw waits for one piece at most, and the copy
	// stops there. 0, -EPERM (not exposed, or withdrawn meanwhile) or
	// -errno. The caller checks the bounds and that the process lives.
	static constexpr size_t kExposedPieceBytes = size_t(1) << 20;
	int write_exposed(uint64_t addr, uint64_t key, uint64_t len, size_t offset,
			  const void* source, size_t length) noexcept;
	// The owner marked its file ended (ScratchFile::mark_ended).
	bool target_ended() const noexcept;
	Doorbell::Push ring(uint32_t value) noexcept
	{
		return doorbell_ ? doorbell_->push(value) : Doorbell::Push::full;
	}

private:
	pid_t pid_ = 0;
	void* base_ = nullptr;
	size_t mapped_ = 0;
	Doorbell* doorbell_ = nullptr;
	const Published* published_ = nullptr;
	ExposedBuffers* exposed_ = nullptr;
	std::byte* scratch_ = nullptr;
	enum class Writes : uint8_t {
		untested,
		allowed,
		refused
	} memory_writes_ = Writes::untested;
	uint64_t remote_scratch_ = 0;
};

// Whether a process still lives, through a pidfd: unlike a pid, it never
// names a later process that got the same number.
class ProcessWatch {
public:
	ProcessWatch() = default;
	ProcessWatch(const ProcessWatch&) = delete;
	ProcessWatch& operator=(const ProcessWatch&) = delete;
	~ProcessWatch();

	// 0, or -errno (-ESRCH: it is already gone).
	int watch(pid_t pid) noexcept;
	bool watching() const noexcept { return fd_ >= 0; }
	pid_t pid() const noexcept { return pid_; }
	bool exited() const noexcept;

private:
	int fd_ = -1;
	pid_t pid_ = 0;
};

} // namespace rcoll::local
