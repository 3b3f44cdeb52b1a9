// fi_collective(3) on rcoll endpoints: groups joined from address-vector
// sets (coll_group.cpp), and the collectives on them (coll.cpp), run by the
// engine (prov/rcoll/engine) over RDMA writes (coll_transport.hpp).
#pragma once

#include "coarse_clock.hpp"
#include "common.hpp"
#include "engine/group.hpp"
#include "proto/wire.hpp"
#include "coll_transport.hpp"
#include "transport/local_collectives.hpp"
#include "wait.hpp"

#include <rdma/fi_ext_rcoll.h>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace rcoll {

struct AddressVector;
struct Endpoint;
struct Peer;

// Bounded by the arrival counters a group needs (they must fit an
// arrival's counter field, checked at join) and by what is tested.
inline constexpr size_t kMaxMembers = 16384;

// fi_mc addresses: a tag bit no AV index reaches, plus the group's slot.
inline constexpr fi_addr_t kGroupAddressBit = fi_addr_t(1) << 62;

// One joined (or joining) group: the application's fid_mc.
struct CollGroup {
	FidShell<fid_mc, CollGroup> shell;
	Endpoint* ep = nullptr;
	uint32_t rank = 0, size = 0;
	std::vector<uint64_t> member_keys; // endpoint keys, by group rank
	std::vector<Peer*> peers;          // by group rank (ours: nullptr)
	std::unique_ptr<CollTransport> transport;
	std::unique_ptr<engine::Group> group; // once the join completed
	// Barrier, broadcast and small reductions, when every member maps every
	// member's file (local_collectives.hpp); the engine runs the rest.
	std::unique_ptr<local::LocalCollectives> shm;
	std::optional<CrowdedHost> crowded; // more members on this host than CPUs
	enum class State { joining, joined, failed };
	State state = State::joining;
	// The join.
	uint64_t join_id = 0;
	void* join_context = nullptr;
	std::vector<bool> heard; // members whose join record arrived
	size_t missing = 0;
	// Our records the core has not yet reported sent (or dropped with
	// their peer): the join completes, and the group is freed, only at 0.
	uint32_t records_unsent = 0;
	int record_error = 0; // fi_errno of a record that could not go
	bool closed = false;  // the application closed the fid_mc
	// Retiring a closed group: this member sent its retire notice (after its
	// last write), and the members that sent theirs. Once all did, nothing
	// can still write into this member's memory for the group, and its
	// slot, scratch and registrations are freed.
	bool retire_sent = false;
	std::vector<bool> retired;
	// Failure detection: a group with work pending that sees no arrival
	// and no write completion for FI_RCOLL_COLL_TIMEOUT_MS fails.
	CoarseClock::time_point last_activity;
	uint64_t seen_activity = 0;
	uint32_t idle_checks = 0; // since the last movement
	int failure = 0;          // fi_errno the group failed with
	// While failing: members known to write no more into our buffers
	// (they said so, or they are dead).
	std::vector<bool> quiet;
	CoarseClock::time_point failing_since;
};

// The collective state of one endpoint.
class Collectives {
public:
	explicit Collectives(Endpoint& ep);
	~Collectives();

	int join(const fi_collective_addr* addr, uint64_t flags, fid_mc** mc, void* context);
	// `req` (its root set here) by reference: a copy on the stack, just
	// written field by field, stalls the loads that copy it.
	// With `finish_here`, a node-local call posted alone may run to its end
	// in the call: FI_RCOLL_FINISHED then (fi_ext_rcoll.h).
	ssize_t post(fi_addr_t coll_addr, fi_addr_t root_addr, engine::Request& req, uint64_t flags,
		     bool finish_here = false);
	int close(CollGroup& g);

	// From the endpoint.
	void progress();
	// An ARRIVAL message that came in on `peer`'s connection.
	void on_arrival(Peer& peer, const proto::ArrivalBody& a,
			std::span<const std::byte> payload);
	void on_join_message(Peer& peer, const proto::MsgHeader& h,
			     std::span<const std::byte> payload);
	void on_peer_failed(Peer& peer);
	// Operations or writes still in flight in some group.
	bool busy() const;
	// A stranger's record goes to another key: what it kept early goes.
	void forget_early(uint64_t peer_key);
	// Some group has operations in flight, and all of them run among
	// members on this host (no core write in flight, no member reached
	// through the core); no group is joining or failing.
	bool waits_only_on_host() const;
	// Calls fn(Peer&) for every member of a group with work in flight: the
	// peers this endpoint's collectives may be waiting on.
	template <class F>
	void for_each_awaited_peer(F&& fn) const
	{
		for (const auto& g : slots_)
			if (g && group_busy(*g))
				for (Peer* peer : g->peers)
					if (peer)
						fn(*peer);
	}

private:
	// The engine has operations or writes in flight.
	static bool engine_busy(const CollGroup& g);
	// ... or the shared-memory path has operations.
	static bool group_busy(const CollGroup& g);
	// Hands the finished calls of the engine or the shared-memory path to
	// the CQ.
	template <class Runner>
	void report_completions(const CollGroup& g, Runner& runner);
	void settle_shm(CollGroup& g);
	bool finish_alone(CollGroup& g);
	CollGroup* group_at(fi_addr_t coll_addr);
	// A join record, decoded (on_join_message drops what does not decode).
	void accept_record(CollGroup& g, uint64_t peer_key, const proto::JoinRecord& record);
	void maybe_finish_join(CollGroup& g);
	// `config`: the engine's, for a group that joined (err 0).
	void finish_join(CollGroup& g, int err, const engine::GroupConfig& config);
	void finish_join(CollGroup& g, int err) { finish_join(g, err, config_); }
	void check_timeout(CollGroup& g, LazyNow& now);
	void begin_failure(CollGroup& g, int err);
	void check_quiet(CollGroup& g, CoarseClock::time_point now);
	void on_stop_notice(Peer& peer, uint64_t join_id, uint32_t rank);
	void on_retire_notice(Peer& peer, uint64_t join_id, uint32_t rank);
	// Sends this member's retire notice once the closed group is quiescent.
	void retire(CollGroup& g);
	// A control record (stop or retire notice) to every live member.
	void send_to_members(const CollGroup& g, std::span<const std::byte> notice);
	// A collective record for join `join_id` to every live member of
	// `peers` but `rank`; the first error of a send, or 0. With `counted`,
	// each one that went counts in its records_unsent until it left.
	int send_notice(uint64_t join_id, uint32_t rank, const std::vector<Peer*>& peers,
			std::span<const std::byte> record, CollGroup* counted = nullptr);
	// Nothing more of member `r` arrives through the core: it retired or
	// stopped, or its connection is gone.
	static bool stopped_on_core(const CollGroup& g, uint32_t r);
	// Every member confirmed that nothing more of it arrives (failing).
	bool members_quiet(const CollGroup& g) const;
	// Frees a closed group's slot once nothing of its members can arrive
	// any more (every member retired, or confirmed it stopped); true when
	// it did (`g` is gone then).
	bool release_if_done(CollGroup& g);
	// How long a failing group waits for its members to confirm they
	// stopped writing.
	static std::chrono::milliseconds quiet_bound();
	engine::GroupConfig group_config(bool local) const;
	uint64_t config_fingerprint() const;

	// A control record for a join this endpoint has not made yet: a join
	// record, or a member's stop notice (it failed that join already).
	struct Early {
		uint64_t peer_key;
		proto::JoinRecord record;
		bool stop = false;
		uint32_t stop_rank = 0;
	};
	// Keeps `e` for the join `join_id`, up to FI_RCOLL_COLL_EARLY_MAX per
	// peer (a peer that sends more fails).
	void keep_early(Peer& peer, uint64_t join_id, Early e);
	// Takes what was kept for the join `join_id`.
	std::vector<Early> take_early(uint64_t join_id);
	// A join that failed in fi_join before any record left.
	void abandon_join(uint64_t join_id, uint32_t rank, const std::vector<Peer*>& peers);

	Endpoint& ep_;
	std::vector<std::unique_ptr<CollGroup>> slots_;   // index: slot in arrivals
	std::unordered_map<uint64_t, uint32_t> ordinals_; // joins per member list
	std::unordered_multimap<uint64_t, Early> early_;  // by join id, ahead of our fi_join
	// Of them, by sender key: how many, and for which joins. Forgetting a
	// peer visits only its own.
	struct EarlyBySender {
		size_t total = 0;
		std::unordered_set<uint64_t> joins;
	};
	std::unordered_map<uint64_t, EarlyBySender> early_senders_;
	std::unordered_set<uint64_t> abandoned_; // joins failed in fi_join
	engine::GroupConfig config_;             // groups with members on other hosts
	engine::GroupConfig local_config_;       // groups all on this host, in each other's memory
};

int query_collective(fid_domain* domain, fi_collective_op coll, fi_collective_attr* attr,
		     uint64_t flags);

extern fi_ops_collective collective_ops;
// FI_RCOLL_FINISHING_COLL_OPS (fi_ext_rcoll.h): fi_open_ops on an endpoint.
// Read-only: fi_open_ops hands every caller the one table, which a write
// would change for all of them (it faults instead).
extern const fi_rcoll_finishing_coll_ops finishing_collective_ops;

} // namespace rcoll
