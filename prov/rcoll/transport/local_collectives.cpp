#include "transport/local_collectives.hpp"

#include <algorithm>
#include <cstring>

namespace rcoll::local {

namespace {

constexpr size_t kCacheLine = 64;

// A full fence: orders this process's reads of another member's memory
// before its read of that member's stop flag, and a stop flag before the
// buffers go back to the application. ThreadSanitizer does not model
// fences (GCC warns of it with -Wtsan); what they order here is between
// processes, which it does not see anyway.
void full_fence() noexcept
{
#if defined(__SANITIZE_THREAD__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#if defined(__SANITIZE_THREAD__)
#pragma GCC diagnostic pop
#endif
}

using engine::Collective;
using engine::Errc;

// What must be alike on every member for one call, hashed (a 64-bit
// finalizer, Stafford's variant 13 of MurmurHash3's): the payload's bytes,
// whether it goes in one copy, and where they matter the root, the datatype
// and the operation. Members that passed different arguments tell apart,
// short of a 2^-32 chance; so do members that disagree on the copy (each
// read the others' verdicts at its own join, and a member may rewrite its
// own in between), which would otherwise take a header for the payload.
uint32_t call_signature(const engine::Request& r, size_t bytes, bool single_copy) noexcept
{
	const bool reduction = engine::is_reduction(r.coll);
	const bool rooted = r.coll == Collective::broadcast || r.coll == Collective::reduce;
	uint64_t x = uint64_t(bytes) * 0x9E3779B97F4A7C15ULL;
	x ^= uint64_t(r.coll) << 56 | uint64_t(single_copy) << 48 |
	     uint64_t(rooted ? r.root : 0) << 16 |
	     uint64_t(reduction ? unsigned(r.dtype) : 0) << 8 | (reduction ? unsigned(r.op) : 0);
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return uint32_t(x ^ (x >> 31));
}

// The signature as chunk n carries it, mixed with n: what a member wrote
// for an older chunk in that half (or left there, contributing nothing to
// chunk n) does not pass for n's, since n and n - 2j differ in their product
// with an odd number as long as they lie less than 2^32 chunks apart.
uint32_t tagged(uint32_t signature, uint64_t n) noexcept
{
	return signature ^ uint32_t(n * 0x9E3779B1u);
}

} // namespace

LocalCollectives::LocalCollectives(std::vector<const Published*> members, Published& own,
				   uint32_t rank, const Limits& limits)
	: members_(std::move(members)), own_(own), rank_(rank), limits_(limits)
{}

bool LocalCollectives::takes(const engine::Request& req) const noexcept
{
	switch (req.coll) {
	case Collective::barrier: return true;
	case Collective::broadcast:
	case Collective::allreduce:
	case Collective::reduce:
	case Collective::allgather: break;
	default: return false;
	}
	if (req.root >= members_.size() || req.algorithm != engine::Algorithm::automatic)
		return false;
	const size_t size = engine::datatype_size(req.dtype);
	if (!size)
		return false;
	// What goes in one copy is limited like a broadcast: every member
	// copies each byte once, whatever the size.
	const bool one_copy = req.coll == Collective::broadcast ||
			      (req.coll == Collective::allgather && reader_ &&
			       req.count >= single_copy_min_.broadcast / size +
						    (single_copy_min_.broadcast % size != 0));
	const size_t limit = one_copy ? limits_.broadcast_max : limits_.reduction_max;
	if (req.count > limit / size)
		return false;
	return !engine::is_reduction(req.coll) ||
	       engine::reduction_kernel(req.dtype, req.op) != nullptr;
}

Errc LocalCollectives::post(const engine::Request& req) noexcept
{
	if (failed_ != Errc::ok)
		return failed_;
	const size_t bytes = req.coll == Collective::barrier
				     ? 0
				     : size_t(req.count) * engine::datatype_size(req.dtype);
	if ((bytes && !req.output && (req.coll != Collective::reduce || req.root == rank_)) ||
	    (bytes && (engine::is_reduction(req.coll) || req.coll == Collective::allgather) &&
	     !req.input))
		return Errc::invalid_argument;
	// A payload larger than a slot goes in slot-sized chunks, each with a
	// sequence number of its own: members pipeline them through the two
	// slots (one copies chunk j out while another copies j + 1 in).
	// An allreduce in one copy takes two sequence numbers: one for its
	// reduce-scatter, one for its allgather.
	const bool copied_allreduce = req.coll == Collective::allreduce && members_.size() > 1 &&
				      bytes && bytes >= single_copy_min_.allreduce;
	const bool single_copy =
		((req.coll == Collective::broadcast || req.coll == Collective::allgather) &&
		 bytes && bytes >= single_copy_min_.broadcast) ||
		copied_allreduce;
	const size_t chunks = copied_allreduce ? 2
			      : single_copy    ? 1
					    : std::max<size_t>(1, (bytes + Published::kSlotBytes -
								   1) / Published::kSlotBytes);
	try {
		// Every field written in place: a call built on the stack (or
		// zeroed there) and copied in stalls on loads of what was just
		// stored, on the path of every small call.
		const bool reduction = engine::is_reduction(req.coll);
		const auto* in = static_cast<const std::byte*>(req.input);
		const auto* out = static_cast<const std::byte*>(req.output);
		queue_.push_back_with([&](Call& call) {
			call.req = req;
			call.sequence = next_sequence_;
			call.signature = call_signature(req, bytes, single_copy);
			call.bytes = bytes;
			call.chunks = chunks;
			call.next_chunk = 0;
			call.kernel =
				reduction ? engine::reduction_kernel(req.dtype, req.op) : nullptr;
			call.published = false;
			call.own_part_done = false;
			call.single_copy = single_copy;
			// Decided from what every member is given alike, never from
			// its buffers. A reduce of two members in several chunks
			// does not split: the root's one pass over each of the
			// other's chunks, while that member copies in the next, is
			// shorter than copying in half a chunk, reducing the other
			// half and copying the whole chunk out.
			call.split = reduction && members_.size() > 1 && bytes &&
				     bytes >= limits_.split_min &&
				     !(req.coll == Collective::reduce && members_.size() == 2 &&
				       chunks > 1);
			call.own_from_input =
				reduction && out && (in + bytes <= out || out + bytes <= in);
			// In one copy the others read this member's input while it
			// writes its output: the two must lie apart or be one.
			call.status = copied_allreduce && !call.own_from_input && in != out
					      ? Errc::invalid_argument
					      : Errc::ok;
		});
	} catch (const std::bad_alloc&) {
		return Errc::no_memory;
	}
	next_sequence_ += chunks;
	// Alone in the queue, it may run to its end here: the common case of a
	// barrier the others already entered, or a broadcast root.
	if (queue_.size() == 1)
		progress();
	return Errc::ok;
}

size_t LocalCollectives::progress() noexcept
{
	size_t steps = 0;
	// A member that failed the group will not take part in any call: the
	// calls fail, not only those that wait for it (a barrier everyone
	// entered before it failed must not succeed here alone).
	if (!queue_.empty() && any_stopped()) {
		fail(Errc::io_error);
		return 1;
	}
	while (!queue_.empty()) {
		Call& call = queue_.front();
		const bool was_published = call.published;
		const bool done = step(call);
		steps += call.published != was_published;
		if (!done)
			break;
		steps++;
		const Errc status = call.status;
		if (!finish(call, status))
			break; // no memory for the completion: it is kept and tried again
		queue_.pop_front();
		if (status != Errc::ok) {
			// This member cannot take part any more: the group fails.
			fail(status);
			break;
		}
	}
	activity_ += steps;
	return steps;
}

bool LocalCollectives::arrived(uint32_t member, uint64_t sequence) const noexcept
{
	return members_[member]->arrived.load(std::memory_order_acquire) >= sequence;
}

// Whether `member`, which published chunk `sequence`, posted the same call;
// if not, this one fails (and with it the group). A member checks each one
// whose chunk it reads, once it arrived there (it writes that half again only
// after this member arrived at sequence + 1).
bool LocalCollectives::agrees(uint32_t member, uint64_t sequence, Call& call) const noexcept
{
	if (members_[member]->signature[sequence & 1] == tagged(call.signature, sequence))
		return true;
	call.status = Errc::invalid_argument;
	return false;
}

// The same for every other member (all arrived at `sequence`).
bool LocalCollectives::all_agree(uint64_t sequence, Call& call) const noexcept
{
	for (uint32_t m = 0; m < members_.size(); m++)
		if (m != rank_ && !agrees(m, sequence, call))
			return false;
	return true;
}

bool LocalCollectives::all_arrived(uint64_t sequence) const noexcept
{
	for (uint32_t m = 0; m < members_.size(); m++)
		if (m != rank_ && !arrived(m, sequence))
			return false;
	return true;
}

// arrived() for a chunk of `bytes` that this member reads next: while the
// member has not arrived, the chunk's lines are fetched as well, so that
// they come with its flag rather than after it. A chunk past the flag's
// line lies in a slot, whose lines are a second miss in a row once the flag
// is seen; fetched while waiting, a 2-rank allreduce of 64-512 B back to
// back took 0.38-0.48 us instead of 0.49-0.60 (8 B: 0.37). Above
// kFetchedMax the fetches lose: they pull lines the member is still
// writing (1 KiB, its first 4-8 lines: 0.72-0.81 us, not 0.63-0.68). A
// fetch is only a hint: the loads that read the chunk come after the
// flag's, and coherence gives them what the member wrote before its flag.
bool LocalCollectives::arrived_fetching(uint32_t member, uint64_t sequence,
					size_t bytes) const noexcept
{
	constexpr size_t kFetchedMax = 512;
	if (arrived(member, sequence))
		return true;
	if (bytes > Published::kLineBytes && bytes <= kFetchedMax) {
		const std::byte* chunk = chunk_of(member, sequence, bytes);
		for (size_t at = 0; at < bytes; at += kCacheLine)
			__builtin_prefetch(chunk + at, 0, 3);
	}
	return false;
}

// all_arrived() through arrived_fetching(): every member not yet there has
// its chunk fetched.
bool LocalCollectives::all_arrived_fetching(uint64_t sequence, size_t bytes) const noexcept
{
	bool all = true;
	for (uint32_t m = 0; m < members_.size(); m++)
		if (m != rank_ && !arrived_fetching(m, sequence, bytes))
			all = false;
	return all;
}

// Every other member finished reading for `sequence` (one copy), or reduced
// its share of it (in shares).
bool LocalCollectives::all_finished(uint64_t sequence) const noexcept
{
	for (uint32_t m = 0; m < members_.size(); m++)
		if (m != rank_ && members_[m]->finished.load(std::memory_order_acquire) < sequence)
			return false;
	return true;
}

bool LocalCollectives::any_stopped() const noexcept
{
	for (uint32_t m = 0; m < members_.size(); m++)
		if (m != rank_ && members_[m]->stopped.load(std::memory_order_acquire))
			return true;
	return false;
}

const std::byte* LocalCollectives::slot_of(uint32_t member, uint64_t sequence) const noexcept
{
	return members_[member]->slots[sequence & 1];
}

const std::byte* LocalCollectives::chunk_of(uint32_t member, uint64_t sequence,
					    size_t bytes) const noexcept
{
	return Published::chunk(*members_[member], sequence, bytes);
}

void LocalCollectives::enable_single_copy(MemoryReader reader, SingleCopyMin min)
{
	reader_ = std::move(reader);
	single_copy_min_ = reader_ ? min : SingleCopyMin{};
}

// One copy per member straight out of another member's buffer: a
// broadcast's members read the root's, an allgather's members read every
// other member's block. A member read from exposes its buffer (expose())
// and completes once every member says, in `finished`, that it is done
// reading.
bool LocalCollectives::step_single_copy(Call& call) noexcept
{
	const engine::Request& r = call.req;
	const uint64_t n = call.sequence;
	const bool gather = r.coll == Collective::allgather;
	const bool read_from = gather || r.root == rank_;
	if (!call.published) {
		if (!read_from) {
			own_.arrived.store(n, std::memory_order_release);
			call.published = true;
		} else if (n > 2 && !all_arrived(n - 1)) {
			return false;
		} else {
			expose(call, gather ? r.input : r.output, nullptr);
		}
	}
	if (!call.own_part_done) {
		auto* out = static_cast<std::byte*>(r.output);
		int err = 0;
		if (gather) {
			if (!all_arrived(n))
				return false;
			if (!all_agree(n, call))
				return true;
			for (uint32_t m = 0; m < members_.size(); m++) {
				std::byte* block = out + m * call.bytes;
				if (m == rank_ && block != r.input) // in place: there already
					std::memcpy(block, r.input, call.bytes);
				else if (m != rank_ && !err)
					err = read_exposed(call, m, &Exposed::source, 0, block,
							   call.bytes);
			}
		} else if (!read_from) {
			if (!arrived(r.root, n))
				return false;
			if (!agrees(r.root, n, call))
				return true;
			err = read_exposed(call, r.root, &Exposed::source, 0, out, call.bytes);
		}
		finished_reading(call, err); // a reader that failed still finishes
		own_.finished.store(n, std::memory_order_release);
		call.own_part_done = true;
	}
	return !read_from || all_finished(n);
}

// An allreduce in one copy (Rabenseifner 2004's reduce-scatter, then an
// allgather, each step one copy straight between the members' buffers, as
// Open MPI's shared memory moves large messages): under sequence n each
// member publishes where its input and output are, reads its share of every
// other member's input and reduces it into its own output, and says so in
// `finished`; then it reads every other member's reduced share into its
// output and says so in `finished` and `arrived` under n + 1. Its buffers go
// back once every member said that. Every share is reduced by one member
// alone, so every member gets the same bits.
bool LocalCollectives::step_single_copy_allreduce(Call& call) noexcept
{
	if (call.status != Errc::ok)
		return true; // its buffers overlap in part (post)
	const engine::Request& r = call.req;
	const uint64_t n = call.sequence;
	const size_t element = engine::datatype_size(r.dtype);
	const size_t count = call.bytes / element;
	const auto p = uint32_t(members_.size());
	auto* out = static_cast<std::byte*>(r.output);
	const auto* in = static_cast<const std::byte*>(r.input);
	auto share = [&](uint32_t m) {
		return std::pair{share_begin(m, count, element),
				 share_begin(m + 1, count, element)};
	};
	int err = 0;
	if (!call.published) {
		if (n > 2 && !all_arrived(n - 1))
			return false;
		expose(call, in, out);
	}
	if (call.next_chunk == 0) { // the reduce-scatter, under n
		if (!all_arrived(n))
			return false;
		if (!all_agree(n, call))
			return true;
		// The first other member's part goes straight into the output
		// where that lies apart from the input; the others' (and in
		// place, the first's too) through this member's free slot.
		const auto [mine, mine_end] = share(rank_);
		std::byte* scratch = own_.slots[(n + 1) & 1];
		const size_t piece = Published::kSlotBytes / element * element;
		bool first = true;
		for (uint32_t m = 0; m < p && !err && mine_end > mine; m++) {
			if (m == rank_)
				continue;
			if (first && call.own_from_input) {
				err = read_exposed(call, m, &Exposed::source, mine, out + mine,
						   mine_end - mine);
				if (!err)
					call.kernel(out + mine, in + mine, out + mine,
						    (mine_end - mine) / element);
			} else {
				for (size_t at = mine; at < mine_end && !err; at += piece) {
					const size_t bytes = std::min(piece, mine_end - at);
					err = read_exposed(call, m, &Exposed::source, at, scratch,
							   bytes);
					if (!err)
						call.kernel(out + at, first ? in + at : out + at,
							    scratch, bytes / element);
				}
			}
			first = false;
		}
		if (!finished_reading(call, err))
			return true; // not finished: the others wait until the group fails
		own_.finished.store(n, std::memory_order_release);
		call.next_chunk = 1;
	}
	if (!call.own_part_done) { // the allgather, under n + 1
		if (!all_finished(n))
			return false;
		for (uint32_t m = 0; m < p && !err; m++) {
			const auto [begin, end] = share(m);
			if (m != rank_ && end > begin)
				err = read_exposed(call, m, &Exposed::result, begin, out + begin,
						   end - begin);
		}
		if (!finished_reading(call, err))
			return true;
		own_.finished.store(n + 1, std::memory_order_release);
		own_.arrived.store(n + 1, std::memory_order_release);
		call.own_part_done = true;
	}
	return all_finished(n + 1);
}

// Signs chunk `n` as this call's and says that this member arrived there.
void LocalCollectives::publish(Call& call, uint64_t n) noexcept
{
	own_.signature[n & 1] = tagged(call.signature, n);
	own_.arrived.store(n, std::memory_order_release);
	call.published = true;
}

// Publishes a call in one copy: where this member's buffers are, in the
// slot of its (first) sequence number, for the others to read out of.
void LocalCollectives::expose(Call& call, const void* source, const void* result) noexcept
{
	const uint64_t n = call.sequence;
	const Exposed header{.source = reinterpret_cast<uint64_t>(source),
			     .result = reinterpret_cast<uint64_t>(result),
			     .bytes = call.bytes};
	std::memcpy(own_.slots[n & 1], &header, sizeof(header));
	publish(call, n);
}

// After a member's reads out of other members' memory: whether they all
// succeeded, while every member still took part. A member that failed the
// group gave its buffers back, perhaps while we read them: what we read may
// be the application's next bytes. Its flag, set before that, is seen
// after our reads. If not, the call fails.
bool LocalCollectives::finished_reading(Call& call, int err) noexcept
{
	full_fence();
	if (!err && any_stopped())
		err = -ECANCELED;
	if (err)
		call.status = Errc::io_error;
	return !err;
}

// Copies `length` bytes at `offset` in one of the buffers that `member`
// exposed for `call` into `target`: 0 or -errno. A member that names another
// length is not in this call: it fails rather than read what it says. (Read
// again for each piece: the member rewrites it only after this one arrived
// at the call's next number.)
int LocalCollectives::read_exposed(const Call& call, uint32_t member, uint64_t Exposed::*buffer,
				   size_t offset, void* target, size_t length) noexcept
{
	Exposed header;
	std::memcpy(&header, slot_of(member, call.sequence), sizeof(header));
	return header.bytes != call.bytes
		       ? -EPROTO
		       : reader_(member, header.*buffer + offset, target, length);
}

bool LocalCollectives::step(Call& call) noexcept
{
	if (call.single_copy)
		return call.req.coll == Collective::allreduce ? step_single_copy_allreduce(call)
							      : step_single_copy(call);
	while (call.next_chunk < call.chunks) {
		if (!(call.split ? step_split_chunk(call) : step_chunk(call)))
			return false;
		if (call.status != Errc::ok)
			return true; // a member posted another call
		call.next_chunk++;
		call.published = false;
		call.own_part_done = false;
	}
	return true;
}

// One chunk of a call: sequence number, slot and bytes of its own, the
// protocol the same as for a whole small call.
bool LocalCollectives::step_chunk(Call& call) noexcept
{
	const engine::Request& r = call.req;
	const uint64_t n = call.sequence + call.next_chunk;
	const size_t offset = call.next_chunk * Published::kSlotBytes;
	const size_t bytes = std::min(Published::kSlotBytes, call.bytes - offset);
	const bool root = r.root == rank_;
	if (!call.published) {
		// Only the root reads a reduce's slots, its own never; but it signs
		// every chunk, so that the others check its call too (below).
		const bool contributes =
			(r.coll == Collective::reduce && !(root && call.own_from_input)) ||
			r.coll == Collective::allreduce || r.coll == Collective::allgather ||
			(r.coll == Collective::broadcast && root);
		if (contributes || r.coll == Collective::reduce) {
			// Line half or slot n % 2 (and signature n % 2) last held a
			// chunk of n - 2 or before: every member must be past it,
			// which it says by arriving at n - 1.
			if (n > 2 && !all_arrived(n - 1))
				return false;
			// A reduce's other members read nothing, so each checks the
			// root's signature of the call's chunk before this one: the
			// root writes that half again only after this member arrived
			// at n. (A call of one chunk goes unchecked there.)
			if (r.coll == Collective::reduce && !root && call.next_chunk > 0) {
				if (!arrived(r.root, n - 1))
					return false;
				if (!agrees(r.root, n - 1, call))
					return true;
			}
			const void* from = r.coll == Collective::broadcast ? r.output : r.input;
			if (contributes && bytes) {
				const auto* part = static_cast<const std::byte*>(from) + offset;
				// Read back by a reduction's reader only (see own_part).
				const bool reduces = r.coll == Collective::allreduce ||
						     (r.coll == Collective::reduce && root);
				if (reduces && !call.own_from_input &&
				    bytes <= Published::kLineBytes)
					std::memcpy(call.own_part, part, bytes);
				std::memcpy(Published::chunk(own_, n, bytes), part, bytes);
			}
			own_.signature[n & 1] = tagged(call.signature, n);
		}
		own_.arrived.store(n, std::memory_order_release);
		call.published = true;
	}
	auto* out = static_cast<std::byte*>(r.output) + offset;
	switch (r.coll) {
	case Collective::barrier:
		if (!limits_.member_0_releases)
			return all_arrived(n);
		// Released by the last to arrive, member 0 left last on a crowded
		// host, and a broadcast it rooted next waited for it to get a CPU.
		if (rank_ != 0)
			return members_[0]->finished.load(std::memory_order_acquire) >= n;
		if (!all_arrived(n))
			return false;
		own_.finished.store(n, std::memory_order_release);
		return true;
	case Collective::broadcast:
		if (root)
			return true;
		if (!arrived_fetching(r.root, n, bytes))
			return false;
		if (agrees(r.root, n, call))
			std::memcpy(out, chunk_of(r.root, n, bytes), bytes);
		return true;
	case Collective::reduce:
		if (!root)
			return true;
		[[fallthrough]];
	case Collective::allreduce: {
		if (!all_arrived_fetching(n, bytes))
			return false;
		if (!all_agree(n, call) || !bytes)
			return true;
		// In rank order: every member computes the same bits, whatever
		// the operation. The first step combines two parts straight into
		// the output (no copy of the first).
		const size_t count = bytes / engine::datatype_size(r.dtype);
		auto part = [&](uint32_t m) -> const std::byte* {
			if (m != rank_)
				return chunk_of(m, n, bytes);
			if (call.own_from_input)
				return static_cast<const std::byte*>(r.input) + offset;
			return bytes <= Published::kLineBytes ? call.own_part
							      : chunk_of(m, n, bytes);
		};
		if (members_.size() == 1)
			std::memcpy(out, part(0), bytes);
		else
			call.kernel(out, part(0), part(1), count);
		for (uint32_t m = 2; m < members_.size(); m++)
			call.kernel(out, out, part(m), count);
		return true;
	}
	case Collective::allgather:
		// Every other member's block from its slot or line; this one's
		// from its input (not read back from its own line, which the
		// others pull into their caches as they wait on its flag), first,
		// in case the input overlaps other blocks of the output.
		if (!all_arrived_fetching(n, bytes))
			return false;
		if (!all_agree(n, call))
			return true;
		if (const auto* own = static_cast<const std::byte*>(r.input) + offset;
		    bytes && own != out + rank_ * call.bytes)
			std::memmove(out + rank_ * call.bytes, own, bytes);
		for (uint32_t m = 0; m < members_.size(); m++)
			if (m != rank_)
				std::memcpy(out + m * call.bytes, chunk_of(m, n, bytes), bytes);
		return true;
	default: return true; // takes() admits nothing else
	}
}

// Where member `member`'s share of a chunk of `count` elements begins, in
// bytes: shares differ by one element at most.
size_t LocalCollectives::share_begin(uint32_t member, size_t count, size_t element) const noexcept
{
	return count * member / members_.size() * element;
}

// One chunk of a reduction in shares. Each member reduces its share of
// every member's part, in rank order, into the same bytes of its own slot
// (nobody else reads them there: each reads only its own share of the
// others' slots), says so in `finished`, and then the reduced shares are
// copied out. Every member copies the same reduced bytes: identical results.
// This member's own part is read straight from its input (its slot holds the
// others' shares of it and, later, its reduced share); that holds for
// MPI_IN_PLACE too, since the chunk's output is written only at its end.
bool LocalCollectives::step_split_chunk(Call& call) noexcept
{
	const engine::Request& r = call.req;
	const uint64_t n = call.sequence + call.next_chunk;
	const size_t offset = call.next_chunk * Published::kSlotBytes;
	const size_t bytes = std::min(Published::kSlotBytes, call.bytes - offset);
	const size_t element = engine::datatype_size(r.dtype);
	const size_t count = bytes / element;
	const auto p = uint32_t(members_.size());
	const size_t mine = share_begin(rank_, count, element);
	const size_t mine_end = share_begin(rank_ + 1, count, element);
	const auto* in = static_cast<const std::byte*>(r.input) + offset;
	std::byte* slot = own_.slots[n & 1];
	if (!call.published) {
		if (n > 2 && !all_arrived(n - 1))
			return false;
		std::memcpy(slot, in, mine);
		std::memcpy(slot + mine_end, in + mine_end, bytes - mine_end);
		publish(call, n);
	}
	if (!call.own_part_done) {
		if (!all_arrived(n))
			return false;
		if (!all_agree(n, call))
			return true; // no share reduced: nobody copies it
		auto part = [&](uint32_t m) {
			return m == rank_ ? in + mine : slot_of(m, n) + mine;
		};
		if (const size_t share_count = (mine_end - mine) / element) {
			call.kernel(slot + mine, part(0), part(1), share_count);
			for (uint32_t m = 2; m < p; m++)
				call.kernel(slot + mine, slot + mine, part(m), share_count);
		}
		own_.finished.store(n, std::memory_order_release);
		call.own_part_done = true;
	}
	if (r.coll == Collective::reduce && r.root != rank_)
		return true;
	if (!all_finished(n))
		return false;
	auto* out = static_cast<std::byte*>(r.output) + offset;
	for (uint32_t m = 0; m < p; m++) {
		const size_t begin = share_begin(m, count, element);
		std::memcpy(out + begin, slot_of(m, n) + begin,
			    share_begin(m + 1, count, element) - begin);
	}
	return true;
}

bool LocalCollectives::finish(Call& call, Errc status) noexcept
{
	engine::Completion c;
	c.context = call.req.context;
	c.sequence = call.sequence;
	c.status = status;
	try {
		done_.push_back(c);
		return true;
	} catch (const std::bad_alloc&) {
		return false;
	}
}

bool LocalCollectives::next_completion(engine::Completion& out) noexcept
{
	if (done_.empty())
		return false;
	out = done_.front();
	done_.pop_front();
	return true;
}

void LocalCollectives::fail(Errc err) noexcept
{
	if (failed_ == Errc::ok) {
		failed_ = err;
		// Ordered before the buffers go back to the application (and its
		// next writes into them): a member still reading them sees this
		// flag after its reads (step_single_copy).
		own_.stopped.store(1, std::memory_order_seq_cst);
		full_fence();
	}
	while (!queue_.empty()) {
		if (!finish(queue_.front(), err))
			return; // kept; the next fail() reports it
		queue_.pop_front();
	}
}

} // namespace rcoll::local
