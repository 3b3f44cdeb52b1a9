// Collectives among members that all run on this host, straight
// through shared memory: no doorbell, no write into another process, no
// core, no system call. Each member publishes its contribution in its own
// scratch file, under a sequence flag that only it writes, and reads the
// others' (the design of Open MPI's coll/xhc: Katevenis et al. 2022,
// single-writer flags and payloads inlined beside them, copy-in/copy-out
// below a size threshold).
//
// Calls run one after another in posting order, the same on every member,
// each in slot-sized chunks (one for most), and the chunks are numbered in
// that order. Chunk n goes in half n % 2 of the flag's own cache line when
// it is that small (Published::kLineBytes), else in slot n % 2. A member
// sets its flag to n once its contribution to chunk n is there, and only
// after it finished chunk n - 1 (its reads for it made); so a flag at
// n - 1 or more says that member is done reading every chunk up to n - 2,
// and with it whatever last used line half or slot n % 2, which may be
// written again. Chunks pipeline through the two slots: one member copies
// chunk n out while another copies n + 1 in.
//
//   barrier    flag, then wait for every flag; where the members take
//              turns on the CPUs, member 0 alone waits for them and then
//              releases the others through its `finished` flag
//   broadcast  the root publishes; the others wait for its flag and copy
//   allreduce  everyone publishes; everyone waits for every flag and
//              reduces the slots in rank order (identical bits everywhere);
//              from `split_min` bytes in shares instead: member m reduces
//              the m-th of p shares of every chunk into its own slot and
//              says so in its `finished` flag, then every member copies the
//              p reduced shares out (reduce-scatter then allgather,
//              Rabenseifner 2004; each member reduces 1/p of the payload);
//              from the single-copy allreduce size the same in one copy
//              under two numbers: each member reads its share of the
//              others' inputs out of their buffers and reduces it into its
//              output, says so in `finished` (n), reads the others' reduced
//              shares out of their outputs and says so (n + 1)
//   reduce     the same, the root alone reducing (in shares: the root
//              alone copying them out; two members split only
//              a call of one chunk)
//   allgather  everyone publishes its block; everyone copies every block
//              (from the single-copy size: straight out of each member's
//              input, as broadcasts from the root's buffer)
//
// Nothing here knows of libfabric; the glue decides whether a group's
// members all take this path (all of them map every member's file).
#pragma once

#include "engine/group.hpp"
#include "engine/reduce.hpp"
#include "proto/fifo.hpp"
#include "transport/local.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace rcoll::local {

class LocalCollectives {
public:
	// `members[r]`: what member r publishes, `own` this member's (rank
	// `rank`), written here only. Broadcasts above `broadcast_max` bytes
	// and reductions above `reduction_max` are not taken; reductions of at
	// least `split_min` bytes are reduced in shares. Every member must be
	// given the same limits and the same `member_0_releases`.
	struct Limits {
		size_t broadcast_max = SIZE_MAX;
		size_t reduction_max = SIZE_MAX;
		size_t split_min = SIZE_MAX;
		// The members take turns on the CPUs: a barrier's member 0 waits
		// for every flag and then releases the others, so that it leaves
		// first. Otherwise every member leaves once it sees every flag
		// (one flag's latency sooner for the last to arrive).
		bool member_0_releases = false;
	};
	LocalCollectives(std::vector<const Published*> members, Published& own, uint32_t rank,
			 const Limits& limits);

	// Copies `length` bytes at `address` in member `member`'s memory into
	// `target`: 0 or -errno (cross-memory attach, process_vm_readv).
	using MemoryReader =
		std::function<int(uint32_t member, uint64_t address, void* target, size_t length)>;
	// Broadcasts of at least `broadcast` bytes, and allgathers of blocks
	// that large, then go in one copy by each member straight out of the
	// root's buffer (every other member's block), as MPI's shared-memory
	// transports do above a size; allreduces of at least `allreduce` bytes
	// in one copy of each member's share of every other's input, and one of
	// every other's reduced share. The glue enables it wherever every
	// member may read every member's memory. Every member must be given
	// the same sizes.
	struct SingleCopyMin {
		size_t broadcast = SIZE_MAX;
		size_t allreduce = SIZE_MAX;
	};
	void enable_single_copy(MemoryReader reader, SingleCopyMin min);

	// Whether `req` runs here: barrier always; broadcast, allreduce,
	// reduce and allgather up to their size limits (allgather: one block,
	// against the reductions' limit through the slots and the broadcasts'
	// in one copy). A function of the call's arguments and of what every
	// member is given alike, so every member decides alike.
	bool takes(const engine::Request& req) const noexcept;
	// Queues a call `takes()` accepted and runs what it can at once.
	engine::Errc post(const engine::Request& req) noexcept;
	// Runs what can run; returns the steps made (a call published or done).
	size_t progress() noexcept;
	bool next_completion(engine::Completion& out) noexcept;
	bool has_completion() const noexcept { return !done_.empty(); }
	// The oldest completion not yet taken; has_completion() first.
	const engine::Completion& first_completion() const noexcept { return done_.front(); }
	size_t outstanding() const noexcept { return queue_.size() + done_.size(); }
	bool any_outstanding() const noexcept { return !queue_.empty() || !done_.empty(); }
	// Ends every queued call with `err` (the group failed) and tells the
	// other members, whose calls then fail too. No other process writes
	// into this member's buffers, so they are the application's again at
	// once; a member still reading one (single copy) sees the flag after
	// its read and fails its call rather than deliver what it read.
	void fail(engine::Errc err) noexcept;
	// This member or another failed the group (the glue then fails the
	// rest of it).
	bool failed() const noexcept { return failed_ != engine::Errc::ok; }
	// Why: invalid_argument when this member saw another post a call with
	// other arguments (count, datatype, operation, root or collective).
	engine::Errc failure() const noexcept { return failed_; }
	// Steps made so far: grows while the calls move.
	uint64_t activity() const noexcept { return activity_; }

private:
	// post() writes every field in place: a new field is set there too.
	struct Call {
		engine::Request req;
		uint64_t sequence = 0;  // of its first chunk
		uint32_t signature = 0; // Published::signature
		size_t bytes = 0;       // payload
		// Its sequence numbers: one per slot-sized piece through the
		// slots, one in one copy (an allreduce two: its reduce-scatter's
		// and its allgather's), and the one it is at.
		size_t chunks = 1;
		size_t next_chunk = 0;
		engine::ReduceKernel kernel = nullptr;
		bool published = false; // the next chunk is published
		// This member's own part of it is done: its share reduced (split)
		// or its reads made (single copy).
		bool own_part_done = false;
		bool single_copy = false;
		bool split = false; // reduced in shares
		// A reduction reads this member's part straight from its input
		// (not a copy in its slot) unless the input is the output.
		bool own_from_input = false;
		// Otherwise (in place) this member's part of a chunk small enough
		// for the flag's line is also kept here: read back from the line,
		// which the others pull into their caches as they wait on the
		// flag, it waits for the line to come back (an 8 B allreduce in
		// place: 0.60 us -> 0.40). Aligned for every datatype.
		alignas(std::max_align_t) std::byte own_part[Published::kLineBytes];
		engine::Errc status = engine::Errc::ok; // how it ended
	};
	// What a member publishes in its slot for a call in one copy: where
	// the others read (a broadcast root's buffer, an allgather's block or
	// an allreduce's input), where an allreduce's reduced shares are, and
	// the payload's length.
	struct Exposed {
		uint64_t source = 0;
		uint64_t result = 0;
		uint64_t bytes = 0;
	};
	bool step_single_copy(Call& call) noexcept;
	bool step_single_copy_allreduce(Call& call) noexcept;
	void expose(Call& call, const void* source, const void* result) noexcept;
	int read_exposed(const Call& call, uint32_t member, uint64_t Exposed::*buffer,
			 size_t offset, void* target, size_t length) noexcept;
	bool finished_reading(Call& call, int err) noexcept;
	void publish(Call& call, uint64_t n) noexcept;
	bool step(Call& call) noexcept; // true: done
	bool step_chunk(Call& call) noexcept;
	bool step_split_chunk(Call& call) noexcept;
	size_t share_begin(uint32_t member, size_t count, size_t element) const noexcept;
	bool arrived(uint32_t member, uint64_t sequence) const noexcept;
	bool agrees(uint32_t member, uint64_t sequence, Call& call) const noexcept;
	bool all_agree(uint64_t sequence, Call& call) const noexcept;
	bool all_arrived(uint64_t sequence) const noexcept;
	bool arrived_fetching(uint32_t member, uint64_t sequence, size_t bytes) const noexcept;
	bool all_arrived_fetching(uint64_t sequence, size_t bytes) const noexcept;
	bool all_finished(uint64_t sequence) const noexcept;
	bool any_stopped() const noexcept;
	const std::byte* slot_of(uint32_t member, uint64_t sequence) const noexcept;
	const std::byte* chunk_of(uint32_t member, uint64_t sequence, size_t bytes) const noexcept;
	bool finish(Call& call, engine::Errc status) noexcept;

	std::vector<const Published*> members_;
	Published& own_;
	uint32_t rank_;
	Limits limits_;
	MemoryReader reader_;
	SingleCopyMin single_copy_min_;
	uint64_t next_sequence_ = 1;
	uint64_t activity_ = 0;
	engine::Errc failed_ = engine::Errc::ok;
	proto::Fifo<Call> queue_;
	proto::Fifo<engine::Completion> done_;
};

} // namespace rcoll::local
