// The collective engine's transport over rcoll's core connections: every
// engine write is one RDMA write on the core MSG endpoint to that member,
// into its scratch region registered at join time or into a buffer it
// registered for one call (Gupta et al. 2002: static registration per group,
// dynamic for large messages). When the engine asks for an arrival, an
// ARRIVAL message follows the write on the same connection (its token says
// who sent it, which no core's write immediate does); an arrival whose
// bytes fit a message carries them instead of a write.
//
// Members on the same host are written to through the node-local path
// instead (transport/local.hpp): a copy into their memory and a doorbell,
// the same contract without the core.
//
// An arrival names the target's slot for the group, the engine's arrival
// counter and the sender's rank.
#pragma once

#include "common.hpp"
#include "engine/transport.hpp"
#include "mr.hpp"
#include "ops.hpp"
#include "proto/wire.hpp"
#include "transport/local.hpp"
#include "transport/local_collectives.hpp"

#include <deque>
#include <memory>
#include <optional>
#include <vector>

namespace rcoll {

struct Endpoint;
struct Peer;

class CollTransport final : public engine::Transport {
public:
	static constexpr uint32_t kMaxSlots = proto::kMaxCollectiveSlots;
	static constexpr uint32_t kMaxCounters = proto::kMaxArrivalCounters;
	// Doorbell values other than arrival counters (see stop()).
	static constexpr uint32_t kMark = 1u << 31;
	static constexpr uint32_t kStopMark = kMark;              // | rank: it stopped writing
	static constexpr uint32_t kMappedMark = kMark | 1u << 30; // | rank: it may write into us
	static constexpr uint32_t kMarkRank = (1u << 30) - 1;

	// One in-flight write: the core's context, the engine's cookie, and the
	// member it goes to (whose connection fails if the write does).
	// A write through the core until it and its ARRIVAL left this process.
	struct WriteContext {
		CoreContext cc;
		CollTransport* owner;
		Peer* peer = nullptr;
		uint64_t cookie = 0;
		uint64_t proves = 0; // the member's injects posted before it (InjectLedger)
		unsigned parts = 0;  // the core write and the arrival message still in this process
		int err = 0;
		explicit WriteContext(CollTransport* o) : cc(&WriteContext::finish, this), owner(o)
		{}
		static void finish(Endpoint& ep, void* owner, const CoreEvent& event);
		static void arrival_sent(void* owner, int err);
	};

	CollTransport(Endpoint& ep, uint32_t slot, std::vector<Peer*> members, uint32_t rank);
	~CollTransport() override;

	// Where this member runs (host 0: unknown), and how members on its host
	// may reach it without the core (fd -1: they may not).
	struct LocalAddress {
		uint64_t host = 0;
		uint64_t nonce = 0;
		int32_t pid = 0;
		int32_t fd = -1;
	};

	// Allocates and registers the scratch region, offered to local members
	// when `node_local`, and room for the group's `counters` arrival
	// counters; 0 or -FI_E*.
	int init(size_t scratch_bytes, uint64_t counters, bool node_local);
	// How peers reach this member's scratch region.
	engine::MemoryKey scratch_key() const;
	LocalAddress local_address() const;
	// What `rank` told us at join: its slot for the group, its scratch, and
	// whether it runs on this host.
	void set_member(uint32_t rank, uint32_t slot, const engine::MemoryKey& scratch,
			const LocalAddress& local);
	// Each member's host for the cost model (engine::Placement): members
	// whose join records name one host and offer the node-local path share
	// an index (the rank of the first of them), every other member has its
	// own rank. Built from the records alone, so every member builds the
	// same.
	std::vector<uint32_t> placement() const;
	// Once the join completed: our scratch is faulted in now, rather than a
	// page at a time over the first few hundred operations (each takes the
	// next piece of a half: engine/group.hpp). Our mapping of a local
	// member's scratch is, at our first write into it (write_local), in
	// the groups where this was called.
	void prefault_scratch();
	// The members known to run on this host (this one included) outnumber
	// the CPUs they may run on between them, as their join records name
	// their processes: a hint for scheduling only. Worked out once, after
	// every member is set, so every use of it agrees.
	bool members_outnumber_cpus();
	// Every other member is written to through the node-local path, call
	// buffers included (as far as this member can tell: cross-memory
	// attach is allowed or not yet tried). Their writes to us then come the
	// same way, unless their own kernel rules differ.
	bool reaches_all_on_host() const;
	// Whether every member maps every member's file, so that calls can run
	// straight through shared memory (local_collectives.hpp), and may read
	// every member's memory, and whether some member yields its CPU while
	// it waits, which decides how large calls go. Each member publishes
	// what it can; all members then see the same answer.
	// nullopt: a member this one maps has not said yet.
	struct ShmAgreement {
		bool shm = false;
		bool reads_all = false; // every member may read every member's memory
		bool crowded = false;   // some member yields while it waits (own_verdict)
	};
	std::optional<ShmAgreement> shm_path_agreed();
	// The shared-memory collectives over the members' published areas.
	// single_copy_min: see LocalCollectives::enable_single_copy (null: none).
	std::unique_ptr<local::LocalCollectives>
	local_collectives(const local::LocalCollectives::Limits& limits,
			  std::optional<local::LocalCollectives::SingleCopyMin> single_copy_min);

	// engine::Transport
	std::span<std::byte> scratch() noexcept override;
	engine::Errc register_memory(std::span<std::byte> buffer, engine::Access access,
				     engine::Registration& out) noexcept override;
	void deregister_memory(const engine::Registration&) noexcept override;
	engine::Errc write(const engine::WriteRequest&) noexcept override;
	size_t poll(std::span<engine::TransportEvent> out) noexcept override;

	// An ARRIVAL message from `from`, which must be the member of its rank:
	// its inline payload goes into the scratch, its counter to the engine.
	// Anything else is dropped, and a member that sends what no member
	// sends fails, and so does the group (misbehaved()).
	void on_arrival(Peer& from, const proto::ArrivalBody& a,
			std::span<const std::byte> payload);
	// A member sent an arrival that no member sends, or more than the
	// engine can have waiting: the group must fail.
	bool misbehaved() const { return misbehaved_; }
	// A failed write is not handed to the engine, which would end the
	// group's operations (deregistering their buffers) at once; it is kept
	// for the glue, which fails the group in two steps (see fail()).
	void part_done(WriteContext* ctx, int err);
	// Failing a group takes two steps. stop(): no new write starts (the
	// engine sees would_block), so its operations wait, and members on this
	// host are told through their doorbells (they cannot rely on the
	// connection: a broken one does not stop this process's memory writes).
	// fail(): every later poll reports the error and the engine ends them;
	// members on this host see in our file that nothing may be written
	// into our memory any more.
	// In between, the glue makes sure no member still writes into buffers
	// of those operations. Only fail() lets the engine see an error.
	void stop();
	// Rings the stop marks that found a full doorbell; from the glue's
	// progress while the group fails.
	void retry_stop_marks();
	// A stop mark still waits for room in a member's doorbell.
	bool stop_marks_pending() const;
	void fail(int err);
	bool failed() const { return failed_ != 0; }
	// fi_errno of the first write the core failed (0: none): the group must
	// fail.
	int write_error() const { return write_error_; }
	bool has_member(const Peer* peer) const;
	// Whether `rank` may still copy into this process's memory through the
	// node-local path: a member that rang its mapped mark in our doorbell,
	// whose process lives and which has not rung its stop mark. Its
	// connection failing does not stop those writes.
	bool may_write_memory(uint32_t rank) const;
	// Some member rang its stop mark: it failed the group.
	bool member_stopped() const { return stop_marks_seen_ != 0; }
	uint32_t slot() const { return slot_; }
	// Writes the core still holds (their contexts must outlive them).
	size_t writes_in_flight() const { return in_flight_; }
	// Arrivals, write completions and marks that told something new, so
	// far: grows while the group moves (a mark rung again does not move it,
	// nor hold off the group's timeout).
	uint64_t activity() const { return activity_; }

private:
	// What this member says in its verdict (local::Published::Verdict),
	// once: verdict_.
	uint32_t own_verdict();
	// Says in our file, before our verdict, that we allowed what we allow.
	void settle_memory_access();
	uint32_t verdict_ = 0;
	std::optional<bool> outnumbered_; // members_outnumber_cpus, once known
	bool prefault_peers_ = false;     // prefault_scratch ran: mappings too
	struct Member {
		Peer* peer = nullptr;
		uint32_t slot = 0;
		bool on_host = false;     // its join record names this host
		uint64_t memory_host = 0; // the host its record offers its memory on (0: none)
		pid_t pid = 0;            // and this process (0: none; unchecked, a hint)
		uint64_t scratch_addr = 0, scratch_key = 0, scratch_len = 0;
		// On this host and offering the node-local path: its scratch file,
		// mapped (null when that failed), and its process.
		std::unique_ptr<local::PeerMapping> mapping;
		bool faulted_in = false; // our mapping of its scratch (prefault)
		std::shared_ptr<local::ProcessWatch> process; // the Peer's, shared by its groups
		bool maps_us = false;      // it rang its mapped mark in our doorbell
		bool stop_rung = false;    // it rang its stop mark
		bool stop_pending = false; // our stop mark found its doorbell full
	};
	// A member's buffer as its key describes it.
	struct RemoteBuffer {
		uint64_t addr = 0, key = 0, len = 0;
	};
	engine::Errc post_write(const engine::WriteRequest& w) noexcept;
	engine::Errc refused(ssize_t ret) noexcept;
	int source_desc(const engine::WriteRequest& w, void*& desc) noexcept;
	static int watch_process(Peer& peer, pid_t pid);
	std::optional<engine::Errc> write_local(const engine::WriteRequest& w, Member& m) noexcept;
	bool queue_completion(uint64_t cookie) noexcept;
	static int ring_error(local::Doorbell::Push result) noexcept;
	bool on_rung(uint32_t value); // whether the mark told something new
	engine::Errc send_arrival(const engine::WriteRequest& w, const Member& m,
				  std::span<const std::byte> inline_payload,
				  WriteContext* ctx) noexcept;
	WriteContext* spare_context(const engine::WriteRequest& w, Peer* peer) noexcept;
	void claim(WriteContext* ctx, unsigned parts) noexcept;
	static engine::MemoryKey encode(const RemoteBuffer& r);
	static RemoteBuffer decode(const engine::MemoryKey& k);

	Endpoint& ep_;
	uint32_t slot_;
	uint32_t rank_;
	std::vector<Member> members_;
	local::ScratchFile scratch_file_;
	uint64_t host_ = 0;        // this host's identity (0: unknown)
	bool offer_local_ = false; // the node-local path is offered
	uint32_t members_on_host_ = 1;
	size_t inject_limit_; // the core's inject_size: writes up to it are injected
	CoreRegistration scratch_mr_;
	// A call buffer the engine registered, by Registration::handle. One
	// that is only a source of writes is registered with the core at the
	// first write that needs its descriptor: a small write carries its bytes
	// in its arrival or is injected, and one to a member on this host is a
	// copy, so most calls of a few KiB register nothing.
	struct CallBuffer {
		std::span<std::byte> bytes;
		uint64_t core_access = 0;
		CoreRegistration core;
		bool in_use = false;
		int exposed = -1; // its entry in ExposedBuffers
	};
	std::vector<CallBuffer> call_buffers_;
	std::vector<uint64_t> free_call_buffers_;
	int ensure_registered(CallBuffer& b) noexcept;
	std::vector<std::unique_ptr<WriteContext>> contexts_;
	std::vector<WriteContext*> free_contexts_;
	size_t in_flight_ = 0;
	uint64_t activity_ = 0;
	std::deque<engine::TransportEvent> events_; // write completions
	// Arrivals through the core not yet polled, counted per counter, and the
	// counters that have some: what a member sends cannot grow them.
	std::vector<uint32_t> waiting_arrivals_;
	std::vector<uint32_t> counters_waiting_;
	bool stopped_ = false;
	bool misbehaved_ = false;
	int failed_ = 0;
	int write_error_ = 0;
	size_t stop_marks_seen_ = 0;
};

} // namespace rcoll
