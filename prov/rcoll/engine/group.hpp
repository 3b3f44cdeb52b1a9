// One rank's view of one collective group: the non-blocking executor.
//
// post() validates a request, selects an algorithm (cost model or tuning
// rule), builds this rank's schedule and queues it; progress() polls the
// transport and runs every started schedule as far as it can without
// blocking; next_completion() hands finished operations back. Many
// operations may be in flight; all members post them in the same order.
//
// Scratch recycling (LA-MPI's channel recycling with delayed
// synchronisation, Yu et al.): the scratch region and the per-operation
// arrival counters are split into two halves. Operations take consecutive
// pieces of the current half, at positions every member computes
// identically from the sequence of operations; an operation that does not
// fit moves the cursor to the other half. A half that the cursor has left
// is recycled once this rank's operations in it are complete: its counters
// are cleared and the members run a dissemination barrier over monotone
// counters; when it completes nobody can still write into that half, so it
// can be reused. The barrier overlaps the operations in the other half.
// Arrivals are counted per (half, counter) and never confused with a later
// operation: a counter is reused only after such a recycle.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/cost_model.hpp"
#include "engine/schedule.hpp"
#include "engine/transport.hpp"

namespace rcoll::engine {

// Group-wide configuration; every member must use the same values.
struct GroupConfig {
	uint64_t scratch_half_bytes = 0;            // 0: auto, see Group::resolve
	uint32_t counters_per_half = 0;             // 0: auto
	uint64_t eager_bytes = 64 * 1024;           // see Limits::eager_bytes
	uint64_t broadcast_eager_bytes = 64 * 1024; // see Limits::broadcast_eager_bytes
	uint64_t chunk_bytes = 256 * 1024;          // see Limits::chunk_bytes
	uint32_t radix = 3;
	uint32_t bcast_blocks = 8;
	uint32_t max_active = 16; // operations executed concurrently
	Selector selector;        // cost model and tuning rules
	// Each member's host (see Placement), the same on every member: the
	// trees and rings group each host's members (pattern::HostOrder), tuning
	// rules with hosts= match by its spread, and with price_placement the
	// selector charges the edges that stay on a host its local constants.
	// Empty: unknown (trees keep the rotation's order, no hosts= rule
	// matches).
	std::vector<uint32_t> hosts;
	bool price_placement = false;
};

struct Request {
	Collective coll = Collective::barrier;
	const void* input = nullptr;
	void* output = nullptr; // broadcast: the buffer
	uint64_t count = 0;
	Datatype dtype = Datatype::uint8;
	ReduceOp op = ReduceOp::sum;
	uint32_t root = 0;
	Algorithm algorithm = Algorithm::automatic; // forced algorithm, or auto
	AlgorithmParams params;
	void* context = nullptr;
};

struct Completion {
	void* context = nullptr;
	uint64_t sequence = 0;
	Errc status = Errc::ok;
};

struct GroupStats {
	uint64_t operations = 0;
	uint64_t writes = 0;
	uint64_t payload_bytes = 0;
	uint64_t control_bytes = 0;
	uint64_t reduced_bytes = 0; // input bytes of reductions
	uint64_t copied_bytes = 0;
	uint64_t recycles = 0;
};

// Hooks for instrumentation (the simulated fabric checks with them that no
// data is overwritten before it was read). Called for every local read and
// write the executor performs on any buffer.
class MemoryObserver {
public:
	virtual ~MemoryObserver() = default;
	virtual void on_local_read(const void* p, size_t n) noexcept = 0;
	virtual void on_local_write(const void* p, size_t n) noexcept = 0;
};

class Group {
public:
	// Fills the auto values of `config` for a group of `size`.
	static GroupConfig resolve(uint32_t size, GroupConfig config);
	// Scratch bytes each member registers at join time.
	static uint64_t scratch_bytes(uint32_t size, const GroupConfig& config) noexcept;
	// Arrival counters of the group: immediates are below this number.
	static uint64_t counter_count(uint32_t size, const GroupConfig& config) noexcept;
	// The per-operation limits schedules are built against.
	static Limits limits(uint32_t size, const GroupConfig& config) noexcept;

	// `transport.scratch()` must be scratch_bytes(size, config) long.
	static Errc create(uint32_t rank, uint32_t size, Transport& transport,
			   const GroupConfig& config, std::unique_ptr<Group>& out) noexcept;
	~Group();
	Group(const Group&) = delete;
	Group& operator=(const Group&) = delete;

	Errc post(const Request&) noexcept;
	// Takes the transport's events and runs what they unblock. Writes the
	// transport finishes when posted (eager ones: their bytes are copied)
	// come back as events at once, and a second round takes them: an
	// operation that needed nothing else (a broadcast root, a tree's last
	// forward) ends within this call rather than the next.
	void progress() noexcept;
	bool next_completion(Completion&) noexcept;
	bool has_completion() const noexcept { return !done_.empty(); }

	// Operations posted and not yet handed back by next_completion().
	size_t outstanding() const noexcept { return queue_.size() + done_.size(); }
	bool any_outstanding() const noexcept { return !queue_.empty() || !done_.empty(); }
	uint32_t rank() const noexcept { return rank_; }
	uint32_t size() const noexcept { return size_; }
	const GroupStats& stats() const noexcept { return stats_; }
	// A member sent what no member of this group can send (an arrival for
	// a counter the group does not have). The group keeps running: ending
	// its operations at once would hand their buffers back while honest
	// members may still write into them. Its owner fails the group in two
	// steps, as for a dead member (the transport's error ends it).
	bool peer_misbehaved() const noexcept { return misbehaved_; }
	// Nothing of this member's is in flight and nothing starts by itself:
	// no operation, no recycle barrier running or due. Once the group is
	// closed, this member writes nothing more into the others' memory.
	bool quiescent() const noexcept;
	void set_observer(MemoryObserver* o) noexcept { observer_ = o; }

private:
	// One round of progress(): whether it took an event or moved an operation.
	bool progress_round() noexcept;
	struct Operation;
	struct Landing;
	struct Half {
		bool ready = true;      // may be allocated from
		bool closed = false;    // the cursor left it in this generation
		bool recycling = false; // its recycle barrier runs
		uint32_t live = 0;      // operations placed in it, not complete
		uint64_t recycles = 0;  // epoch of its recycle barrier
	};

	Group(uint32_t rank, uint32_t size, Transport&, const GroupConfig&);

	void handle_event(const TransportEvent&) noexcept;
	bool try_start(Operation&) noexcept;
	// Registers buffers and sets up the operation's memory.
	Errc acquire(Operation&) noexcept;
	bool place(Operation&) noexcept;
	Errc plan(OpDescriptor& d, std::shared_ptr<const Schedule>& out) noexcept;
	Errc take_landing(uint64_t bytes, std::unique_ptr<Landing>& out) noexcept;
	void give_back_landing(std::unique_ptr<Landing>) noexcept;
	void free_landing(Landing&) noexcept;
	// Runs as many steps as possible; true when the schedule is finished.
	bool run(Operation&) noexcept;
	Errc execute_write(Operation&, const Step&) noexcept;
	void finish(Operation&) noexcept;
	void release_resources(Operation&) noexcept;
	bool start_recycles() noexcept;
	Operation* owner_of_cookie(uint64_t cookie) noexcept;
	std::byte* buffer(Operation&, Buf) noexcept;
	const Registration* registration(const Operation&, Buf) const noexcept;
	uint64_t& counter(const Operation&, uint32_t c) noexcept;

	uint32_t rank_;
	uint32_t size_;
	Transport& transport_;
	GroupConfig config_;
	Limits limits_;
	MonotoneCounters monotone_;
	std::vector<uint64_t> counters_;
	std::array<TransportEvent, 64> event_buffer_; // one poll's events
	bool settled_ = false;           // the last pass moved nothing; no event or post since
	bool transport_blocked_ = false; // a write of this pass met would_block
	Half halves_[2];
	unsigned cursor_half_ = 0;
	uint64_t cursor_bytes_ = 0;
	uint32_t cursor_counters_ = 0;
	uint64_t next_sequence_ = 0;
	uint64_t next_cookie_ = 1;
	uint64_t barrier_epoch_[4] = {0, 0, 0, 0};
	struct Plan {
		OpDescriptor posted; // as the application posted it
		OpDescriptor chosen; // with the algorithm chosen
		std::shared_ptr<const Schedule> schedule;
	};
	std::array<Plan, 8> plans_; // recent plans, replaced round robin
	size_t next_plan_ = 0;
	std::shared_ptr<const Schedule> recycle_plans_[2]; // one per scratch half
	bool failed_ = false;
	bool misbehaved_ = false;
	std::deque<std::unique_ptr<Operation>> queue_; // posted, in order
	std::vector<std::unique_ptr<Operation>> recycles_;
	std::vector<std::unique_ptr<Landing>> spare_landings_; // see Group::Landing
	std::deque<Completion> done_;
	GroupStats stats_;
	MemoryObserver* observer_ = nullptr;
};

} // namespace rcoll::engine
