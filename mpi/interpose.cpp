// The MPI_ entry points librcoll-mpi replaces (the MPI's own stay reachable
// as PMPI_), and the cache of one rcoll group per communicator.
#include "hand_back.hpp"
#include "offload.hpp"

#include <rdma/fi_errno.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <strings.h>
#include <vector>
#include <mutex>
#include <set>

namespace rcoll::mpi {
namespace {

// The collectives, as their hand-back rules name them (nonblocking calls
// take their blocking kind's rules), in the order of kHandBackVariables.
enum Kind {
	kBarrier,
	kBcast,
	kAllreduce,
	kReduce,
	kAllgather,
	kReduceScatter,
	kAlltoall,
	kGather,
	kScatter,
	kKinds
};
static_assert(std::size(kHandBackVariables) == kKinds);
// The defaults measured for the MPI this library is built for.
#ifdef MPICH_VERSION
constexpr const auto& kHandBackDefaults = kMpichHandBack;
#else
constexpr const auto& kHandBackDefaults = kOpenMpiHandBack;
#endif
constexpr Kind kKindOf[kCalls] = {kBarrier,   kBcast,         kAllreduce, kReduce,
				  kAllgather, kReduceScatter, kAlltoall,  kGather,
				  kScatter,   kBarrier,       kBcast,     kAllreduce};
// A communicator's attribute: what the decisions read, and its rcoll group
// from its first offloaded collective on.
struct CommEntry {
	bool usable = false; // an intracommunicator of 2 or more members, with a key
	uint64_t size = 0;
	// Where its members run; on one host (or together on one) only where
	// the node-local path is on, which is what tells them apart.
	Spread spread = Spread::apart;
	std::optional<uint64_t> key;
	std::shared_ptr<CommGroup> group;
};

struct State {
	Endpoint endpoint;
	// Sizes each collective hands back to the MPI, whose own algorithm is
	// faster there. The same on every rank (start() checks), so every rank
	// decides alike.
	HandBack hand_back[kKinds];
	bool force = false;     // RCOLL_MPI_FORCE=1: no hand-back rule applies
	bool enabled = false;   // every rank opened rcoll
	bool verbose = false;   // RCOLL_MPI_VERBOSE=1: say what happened, at init and finalize
	bool report = false;    // verbose on every rank: the report at MPI_Finalize
	bool node_local = true; // rcoll's FI_RCOLL_COLL_LOCAL
	bool yields = false;    // FI_RCOLL_YIELD_WHEN_IDLE set from the MPI's own setting
	int keyval = MPI_KEYVAL_INVALID;
	// Each communicator's attribute, alive, for MPI_Finalize to close.
	std::set<CommEntry*> entries; // under entries_lock
	std::mutex entries_lock;
	// Grows before any entry is deleted: what a thread remembers of an
	// earlier lookup (LastEntry) is then forgotten.
	std::atomic<uint64_t> entries_deleted = 0;
	MPI_Comm staging = MPI_COMM_NULL; // staging_comm()
	int world_rank = 0;
};

// Inline: every call reads it three times or more, and a call of a
// sub-microsecond collective cannot spare three calls of a function.
[[gnu::always_inline]] inline State& state()
{
	static State s;
	return s;
}

// A boolean setting read as libfabric reads its own (fi_param_get_bool):
// anything else leaves the default.
bool setting_on(const char* name, bool otherwise)
{
	const char* text = std::getenv(name);
	if (!text)
		return otherwise;
	for (const char* on : {"1", "yes", "true", "on"})
		if (strcasecmp(text, on) == 0)
			return true;
	for (const char* off : {"0", "no", "false", "off"})
		if (strcasecmp(text, off) == 0)
			return false;
	return otherwise;
}

} // namespace

Endpoint& offload_endpoint() { return state().endpoint; }

MPI_Comm staging_comm() { return state().staging; }

namespace {

// The attribute's delete callback: the communicator is going away (or MPI
// is finalising), and its group with it.
int delete_entry(MPI_Comm, int, void* value, void*)
{
	auto* entry = static_cast<CommEntry*>(value);
	std::unique_lock guard(state().entries_lock);
	if (state().entries.erase(entry)) {
		state().entries_deleted.fetch_add(1, std::memory_order_release);
		guard.unlock(); // the group's close may drive rcoll a while
		delete entry;
	}
	return MPI_SUCCESS;
}

constexpr const char* kDisabled = "RCOLL_MPI_DISABLE is set";

// Open MPI told to yield while idle (its ranks outnumber the CPUs in ways it
// cannot see, as in containers sharing a machine) wants rcoll's waits to
// yield too, which rcoll cannot see either: said before anything loads rcoll.
void follow_the_mpis_yield_setting()
{
	if (std::getenv("FI_RCOLL_YIELD_WHEN_IDLE") ||
	    !setting_on("OMPI_MCA_mpi_yield_when_idle", false))
		return;
	state().yields = setenv("FI_RCOLL_YIELD_WHEN_IDLE", "1", 0) == 0;
}

// Reads the hand-back rules and switches: why the library stays off, if so.
std::string read_settings(State& s)
{
	s.verbose = setting_on("RCOLL_MPI_VERBOSE", false);
	s.force = setting_on("RCOLL_MPI_FORCE", false);
	s.node_local = setting_on("FI_RCOLL_COLL_LOCAL", true);
	if (setting_on("RCOLL_MPI_DISABLE", false))
		return kDisabled;
	for (int k = 0; k < kKinds; k++) {
		const char* text = std::getenv(kHandBackVariables[k]);
		if (std::string why = s.hand_back[k].parse(text ? text : kHandBackDefaults[k]);
		    !why.empty())
			return std::string(kHandBackVariables[k]) + ": " + why;
	}
	return "";
}

// A hash of everything a rank's decisions depend on besides the call.
uint64_t settings_fingerprint(const State& s)
{
	uint64_t h = kFnvBasis;
	auto mix = [&h](uint64_t v) { h = fnv1a(h, &v, sizeof(v)); };
	mix(s.force);
	mix(s.node_local);
	for (const HandBack& rules : s.hand_back) {
		mix(rules.rules().size());
		for (const HandBackRule& r : rules.rules())
			for (uint64_t v : {uint64_t(r.where), r.ranks_min, r.ranks_max, r.bytes_min,
					   r.bytes_max})
				mix(v);
	}
	return h;
}

// Whether every rank says yes; collective over MPI_COMM_WORLD.
bool everyone(bool mine)
{
	int yes = mine, all = 0;
	PMPI_Allreduce(&yes, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	return all != 0;
}

void start()
{
	State& s = state();
	PMPI_Comm_rank(MPI_COMM_WORLD, &s.world_rank);
	std::string why = read_settings(s);
	// A wrong setting is said on every rank that has it, verbose or not.
	bool misconfigured = !why.empty() && why != kDisabled;
	time_calls(s.verbose);
	if (why.empty()) {
		try {
			why = s.endpoint.open();
		} catch (const std::exception& e) {
			why = e.what();
		}
	}
	const bool opened = why.empty();
	// Every rank offloads, or none does, and by the same settings: the
	// calls must match. Each step is collective on every rank, whatever
	// happened on it before.
	const uint64_t mine = settings_fingerprint(s);
	uint64_t agreed[5] = {uint64_t(!opened), mine, ~mine, s.verbose, !s.verbose}, most[5] = {};
	PMPI_Allreduce(agreed, most, 5, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
	const bool same_settings = most[1] == mine && most[2] == ~mine;
	s.enabled = most[0] == 0 && same_settings;
	// The report at MPI_Finalize is collective: made by all ranks or none.
	s.report = s.verbose && most[4] == 0;
	if (opened && !s.enabled) {
		why = most[0] ? "another rank did not open rcoll"
			      : "the ranks' RCOLL_MPI_* or FI_RCOLL_COLL_LOCAL settings differ";
		misconfigured = most[0] == 0 && s.world_rank == 0;
	}
	if (s.enabled) {
		try {
			why = s.endpoint.exchange_names();
		} catch (const std::exception& e) {
			why = e.what();
		}
		s.enabled = everyone(why.empty());
		if (!s.enabled && why.empty())
			why = "another rank could not take the others' addresses";
	}
	if (s.enabled) {
		PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_entry, &s.keyval, nullptr);
		PMPI_Comm_dup(MPI_COMM_SELF, &s.staging);
		init_comm_keys();
	} else {
		s.endpoint.close();
	}
	if (misconfigured || (s.verbose && (s.world_rank == 0 || !opened)))
		std::fprintf(stderr, "rcoll-mpi: rank %d: collectives %s%s%s%s%s\n", s.world_rank,
			     s.enabled ? "offloaded to rcoll" : "left to the MPI",
			     s.enabled && s.force ? " at every size (RCOLL_MPI_FORCE)" : "",
			     s.enabled && s.yields ? ", waits yield (mpi_yield_when_idle)" : "",
			     why.empty() ? "" : ": ", why.c_str());
}

// A thread's last lookup. Reading the attribute costs a hash table and a
// lock in the MPI, a tenth of a sub-microsecond collective on one host, and
// a thread mostly calls on one communicator at a time. Valid while no entry
// was deleted since: a freed communicator's handle may name the next one.
struct LastEntry {
	MPI_Comm comm{};
	CommEntry* entry = nullptr;
	uint64_t deleted = 0; // State::entries_deleted when it was found
};
[[gnu::tls_model("initial-exec")]] thread_local LastEntry last_entry; // as in tally.cpp

// The communicator's entry, made at its first collective and cached on it.
CommEntry* entry_of(MPI_Comm comm)
{
	State& s = state();
	const uint64_t deleted = s.entries_deleted.load(std::memory_order_acquire);
	if (last_entry.entry && last_entry.comm == comm && last_entry.deleted == deleted)
		return last_entry.entry;
	void* value = nullptr;
	int found = 0;
	PMPI_Comm_get_attr(comm, s.keyval, &value, &found);
	if (found) {
		last_entry = {comm, static_cast<CommEntry*>(value), deleted};
		return last_entry.entry;
	}
	auto entry = std::make_unique<CommEntry>();
	int inter = 0, size = 0;
	PMPI_Comm_test_inter(comm, &inter);
	PMPI_Comm_size(comm, &size);
	// Groups of one member list are told apart by the key: without one,
	// rcoll would match them by join order, which ranks need not share
	// (nonblocking calls on two communicators, threads).
	entry->key = inter || size < 2 ? std::nullopt : comm_key(comm);
	entry->usable = entry->key.has_value();
	entry->size = uint64_t(size);
	if (entry->usable && s.node_local)
		entry->spread = s.endpoint.spread_of(comm);
	{
		std::lock_guard guard(s.entries_lock);
		s.entries.insert(entry.get());
	}
	PMPI_Comm_set_attr(comm, s.keyval, entry.get());
	return entry.release();
}

// The entry's group, whose join starts here, at the communicator's first
// offloaded collective. nullptr, with `error` set, when rcoll refused the
// join (the error handler ran).
CommGroup* group_of(CommEntry& entry, MPI_Comm comm, int& error)
{
	State& s = state();
	error = MPI_SUCCESS;
	if (entry.group)
		return entry.group.get();
	std::string why;
	try {
		entry.group = s.endpoint.join(comm, entry.key, why);
	} catch (const std::exception& e) {
		why = e.what();
	}
	if (entry.group)
		return entry.group.get();
	std::fprintf(stderr, "rcoll-mpi: rank %d: joining a group failed: %s\n", s.world_rank,
		     why.c_str());
	// The communicator keeps the failure: its later calls fail too rather
	// than join again, out of step with the other members.
	entry.group = std::make_shared<CommGroup>();
	entry.group->joined = true;
	entry.group->failure = "joining a group failed: " + why;
	PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
	error = MPI_ERR_OTHER;
	return nullptr;
}

bool intra(MPI_Comm comm)
{
	int inter = 0;
	return comm != MPI_COMM_NULL && PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter;
}

int rank_in(MPI_Comm comm)
{
	int rank = 0;
	PMPI_Comm_rank(comm, &rank);
	return rank;
}

int size_of(MPI_Comm comm)
{
	int size = 0;
	PMPI_Comm_size(comm, &size);
	return size;
}

// Waits for an operation rcoll accepted (rc == 0); an error goes to the
// communicator's error handler, named after rcoll's error.
int finish(Tally& tally, MPI_Comm comm, long rc, Operation& op, const char* what)
{
	State& s = state();
	if (rc == FI_RCOLL_FINISHED || (rc == 0 && s.endpoint.wait(op)))
		return MPI_SUCCESS;
	tally.outcome = kFailed;
	const std::string text = rc ? fi_strerror(int(-rc)) : op.error_text;
	std::fprintf(stderr, "rcoll-mpi: rank %d: %s on rcoll failed: %s\n", s.world_rank, what,
		     text.c_str());
	PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
	return MPI_ERR_OTHER;
}

// Whether the call goes to rcoll: its group when it does; else the MPI's
// own call runs (the tally says why), or the join's error is returned.
// `bytes`: the payload by the call's signature (nullopt: the call maps onto
// no libfabric call). `maps`: asked only of a call the rules leave to rcoll,
// given the communicator's size, whether it maps after all; calls of several
// buffers work out their other layouts there, so that a call handed back
// costs one layout (a handed-back 8 B allgather took 1.2-1.4 times the MPI's
// own call when it computed all three first). Every input is the same on
// every rank of the call. A blocking call waits for the join (the others
// are in the same call); a nonblocking one does not (Endpoint::submit
// queues it).
struct Route {
	CommEntry* entry = nullptr;
	CommGroup* group = nullptr;
	int error = MPI_SUCCESS;
	bool to_mpi() const { return !group && error == MPI_SUCCESS; }
};

struct AlwaysMaps {
	bool operator()(uint64_t) const { return true; }
};

template <class Maps = AlwaysMaps>
Route route(Tally& tally, std::optional<uint64_t> bytes, MPI_Comm comm, bool blocking = true,
	    Maps maps = {})
{
	State& s = state();
	Route r;
	if (!s.enabled) {
		tally.outcome = kLibraryOff;
		return r;
	}
	if (comm == MPI_COMM_NULL) {
		tally.outcome = kCommunicator;
		return r;
	}
	if (!bytes) {
		tally.outcome = kUnmappable;
		return r;
	}
	r.entry = entry_of(comm);
	if (!r.entry->usable) {
		tally.outcome = kCommunicator;
		return r;
	}
	if (!s.force &&
	    s.hand_back[kKindOf[tally.call()]].matches(*bytes, r.entry->size, r.entry->spread)) {
		tally.outcome = kByRule;
		return r;
	}
	if (!maps(r.entry->size)) {
		tally.outcome = kUnmappable;
		return r;
	}
	r.group = group_of(*r.entry, comm, r.error);
	if (r.group && blocking && !r.group->ready.load(std::memory_order_acquire) &&
	    !s.endpoint.await_ready(*r.group)) {
		std::fprintf(stderr, "rcoll-mpi: rank %d: %s\n", s.world_rank,
			     r.group->failure.c_str());
		PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
		r.group = nullptr;
		r.error = MPI_ERR_OTHER;
	}
	if (r.error != MPI_SUCCESS)
		tally.outcome = kFailed;
	return r;
}

fi_addr_t address_of(const CommGroup& g, int root)
{
	return root >= 0 && size_t(root) < g.members.size() ? g.members[size_t(root)]
							    : FI_ADDR_NOTAVAIL;
}

// The layouts of a call made of one block per rank: `block` one rank's
// block, `all` the p blocks together: the block's signature p times, as
// moved_layout_of (`moved`) or layout_of would give it, limits included.
// nullopt when the block has no layout or the blocks do not fit in int.
// The limits hold on bytes alone, the same on every rank: an empty block's
// counts may differ (2^30 elements of a zero-size type on one rank, one on
// another), and it has nothing to stage (`total` 0). Inlined, from the
// block's layout: a second lookup, and a std::optional built out of line
// and read back, stalled the loads of the small calls on the stores just
// made (as layout_of had, offload.hpp).
struct Blocks {
	Layout block, all;
	int total = 0; // elements of `all`, in units of the block's datatype (0: empty)
	int ranks = 0; // p
};
[[gnu::always_inline]] inline std::optional<Blocks> blocks_of(const std::optional<Layout>& block,
							      int count, uint64_t ranks, bool moved)
{
	// A block with a layout has count >= 0, and at most INT_MAX bytes;
	// with one byte or more, a count of at most that many.
	if (!block || (moved ? bytes_of(*block) : block->elements) * ranks > INT_MAX)
		return std::nullopt;
	const uint64_t total = bytes_of(*block) ? uint64_t(count) * ranks : 0;
	if (total > INT_MAX) // implied by the above: kept as the guard of int(total)
		return std::nullopt;
	Layout all = *block;
	all.elements *= ranks;
	return Blocks{*block, all, int(total), int(ranks)};
}

// Both sides of a call that moves data carry the same bytes.
bool same_bytes(const std::optional<Layout>& a, const Layout& b)
{
	return a && bytes_of(*a) == bytes_of(b);
}

// Gather and scatter: the rooted side's arguments count only at the root,
// so each rank decides from the block that counts there (the root's rooted
// blocks, another rank's own block), which MPI requires to match. The
// rooted buffer must fit in int, which every rank checks from its block.
struct RootedCall {
	std::optional<Blocks> rooted; // the root's p blocks (at the root)
	std::optional<Layout> own;    // this rank's block (unless in place)
	std::optional<Layout> block;  // what the call moves; nullopt: to the MPI
};
RootedCall rooted_call(MPI_Datatype rooted_type, int rooted_count, MPI_Datatype own_type,
		       int own_count, bool is_root, bool in_place, MPI_Comm comm)
{
	RootedCall c;
	c.rooted = is_root ? blocks_of(moved_layout_of(rooted_type, rooted_count), rooted_count,
				       size_of(comm), true)
			   : std::nullopt;
	c.own = in_place ? std::nullopt : moved_layout_of(own_type, own_count);
	if (is_root) {
		if (c.rooted)
			c.block = c.rooted->block;
	} else {
		if (c.own && static_cast<long long>(bytes_of(*c.own)) * size_of(comm) <= INT_MAX)
			c.block = c.own;
	}
	if (c.block && !in_place && !same_bytes(c.own, *c.block))
		c.block.reset();
	return c;
}

// Where rank `rank`'s block of a buffer of `type` blocks starts.
const void* block_at(const void* buf, int rank, int count, MPI_Datatype type)
{
	MPI_Aint lb = 0, extent = 0;
	PMPI_Type_get_extent(type, &lb, &extent);
	return static_cast<const char*>(buf) + MPI_Aint(rank) * count * extent;
}

} // namespace
} // namespace rcoll::mpi

using namespace rcoll::mpi;

RCOLL_MPI_ENTRY int MPI_Init(int* argc, char*** argv)
{
	follow_the_mpis_yield_setting();
	const int rc = PMPI_Init(argc, argv);
	if (rc == MPI_SUCCESS)
		start();
	return rc;
}

RCOLL_MPI_ENTRY int MPI_Init_thread(int* argc, char*** argv, int required, int* provided)
{
	follow_the_mpis_yield_setting();
	const int rc = PMPI_Init_thread(argc, argv, required, provided);
	if (rc == MPI_SUCCESS)
		start();
	return rc;
}

RCOLL_MPI_ENTRY int MPI_Finalize(void)
{
	State& s = state();
	if (s.report)
		report_calls(s.world_rank);
	if (s.enabled) {
		drain_requests();
		stop_progress_thread();
		// Every rank gets here before any closes its groups: a member's
		// last writes into the others' memory are over.
		PMPI_Barrier(MPI_COMM_WORLD);
		s.entries_deleted.fetch_add(1, std::memory_order_release);
		for (CommEntry* entry : s.entries)
			delete entry;
		s.entries.clear();
		PMPI_Comm_free_keyval(&s.keyval);
		PMPI_Comm_free(&s.staging);
		free_comm_keys();
		s.endpoint.close();
		s.enabled = false;
	}
	return PMPI_Finalize();
}

RCOLL_MPI_ENTRY int MPI_Barrier(MPI_Comm comm)
{
	Tally tally(kBarrierCall);
	const Route r = route(tally, 0, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Barrier(comm) : r.error;
	Operation op;
	Endpoint& endpoint = state().endpoint;
	const long rc = endpoint.blocking().barrier(endpoint.ep(), r.group->coll_addr, &op.context);
	return finish(tally, comm, rc, op, "MPI_Barrier");
}

RCOLL_MPI_ENTRY int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
	Tally tally(kBcastCall);
	const auto l = moved_layout_of(type, count);
	const Route r = route(tally, l ? std::optional(bytes_of(*l)) : std::nullopt, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Bcast(buffer, count, type, root, comm) : r.error;
	Staging staging;
	const bool is_root = rank_in(comm) == root;
	void* data = is_root ? const_cast<void*>(staging.gather(buffer, count, type, *l))
			     : staging.result(buffer, *l);
	Operation op;
	Endpoint& endpoint = state().endpoint;
	const long rc = endpoint.blocking().broadcast(
		endpoint.ep(), data, bytes_of(*l), nullptr, r.group->coll_addr,
		address_of(*r.group, root), FI_UINT8, 0, &op.context);
	const int err = finish(tally, comm, rc, op, "MPI_Bcast");
	if (err == MPI_SUCCESS && !is_root)
		staging.scatter(buffer, count, type, *l);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type,
				  MPI_Op mpi_op, MPI_Comm comm)
{
	Tally tally(kAllreduceCall);
	const auto l = layout_of(type, count);
	const auto op_code = op_of(mpi_op);
	const Route r =
		route(tally, l && op_code ? std::optional(bytes_of(*l)) : std::nullopt, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Allreduce(sendbuf, recvbuf, count, type, mpi_op, comm)
				  : r.error;
	Staging staging;
	const void* input =
		staging.gather(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, count, type, *l);
	void* result = staging.result(recvbuf, *l);
	Operation op;
	Endpoint& endpoint = state().endpoint;
	const long rc = endpoint.blocking().allreduce(endpoint.ep(), input, l->elements, nullptr,
						      result, nullptr, r.group->coll_addr, l->dtype,
						      *op_code, 0, &op.context);
	const int err = finish(tally, comm, rc, op, "MPI_Allreduce");
	if (err == MPI_SUCCESS)
		staging.scatter(recvbuf, count, type, *l);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type,
			       MPI_Op mpi_op, int root, MPI_Comm comm)
{
	Tally tally(kReduceCall);
	const auto l = layout_of(type, count);
	const auto op_code = op_of(mpi_op);
	const Route r =
		route(tally, l && op_code ? std::optional(bytes_of(*l)) : std::nullopt, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Reduce(sendbuf, recvbuf, count, type, mpi_op, root, comm)
				  : r.error;
	Staging staging;
	const bool is_root = rank_in(comm) == root;
	const void* input =
		staging.gather(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, count, type, *l);
	void* result = is_root ? staging.result(recvbuf, *l) : nullptr;
	Operation op;
	Endpoint& endpoint = state().endpoint;
	const long rc = endpoint.blocking().reduce(
		endpoint.ep(), input, l->elements, nullptr, result, nullptr, r.group->coll_addr,
		address_of(*r.group, root), l->dtype, *op_code, 0, &op.context);
	const int err = finish(tally, comm, rc, op, "MPI_Reduce");
	if (err == MPI_SUCCESS && is_root)
		staging.scatter(recvbuf, count, type, *l);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
				  void* recvbuf, int recvcount, MPI_Datatype recvtype,
				  MPI_Comm comm)
{
	Tally tally(kAllgatherCall);
	const bool in_place = sendbuf == MPI_IN_PLACE;
	// One rank's block by signature, what the rules read; then the p
	// blocks of the result, and the block this rank sends (worked out
	// again, inline, once the call goes to rcoll).
	const auto block = moved_layout_of(recvtype, recvcount);
	const Route r =
		route(tally, block ? std::optional(bytes_of(*block)) : std::nullopt, comm, true,
		      [&](uint64_t ranks) {
			      return blocks_of(block, recvcount, ranks, true) &&
				     (in_place ||
				      same_bytes(moved_layout_of(sendtype, sendcount), *block));
		      });
	if (!r.group)
		return r.to_mpi() ? PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount,
						   recvtype, comm)
				  : r.error;
	const Blocks b = *blocks_of(block, recvcount, r.entry->size, true);
	// Built in place, not copied: a copy's wide loads stall on the stores.
	const std::optional<Layout> sent =
		in_place ? std::nullopt : moved_layout_of(sendtype, sendcount);
	Staging staging;
	const void* input;
	if (in_place) {
		// This rank's block is already in place in the result.
		MPI_Aint lb = 0, extent = 0;
		PMPI_Type_get_extent(recvtype, &lb, &extent);
		const void* mine = static_cast<const char*>(recvbuf) +
				   rank_in(comm) * MPI_Aint(recvcount) * extent;
		input = staging.gather(mine, recvcount, recvtype, *block);
	} else {
		input = staging.gather(sendbuf, sendcount, sendtype, *sent);
	}
	void* result = staging.result(recvbuf, b.all);
	Operation op;
	Endpoint& endpoint = state().endpoint;
	const long rc = endpoint.blocking().allgather(endpoint.ep(), input, bytes_of(*block),
						      nullptr, result, nullptr, r.group->coll_addr,
						      FI_UINT8, 0, &op.context);
	const int err = finish(tally, comm, rc, op, "MPI_Allgather");
	if (err == MPI_SUCCESS)
		staging.scatter(recvbuf, b.total, recvtype, b.all);
	return err;
}

// Nonblocking: the same decisions; the request completes through the MPI's
// wait and test calls (requests.cpp), which copy a staged result back.

RCOLL_MPI_ENTRY int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request)
{
	Tally tally(kIbarrierCall);
	const Route r = route(tally, 0, comm, false);
	if (!r.group)
		return r.to_mpi() ? PMPI_Ibarrier(comm, request) : r.error;
	Nonblocking* call = start_request(r.entry->group, comm, "MPI_Ibarrier", request);
	if (!call)
		return tally.outcome = kFailed, MPI_ERR_INTERN;
	fid_ep* ep = state().endpoint.ep();
	const long rc = state().endpoint.submit(*r.group, call->op,
						[ep](fi_addr_t coll_addr, void* context) {
							return fi_barrier(ep, coll_addr, context);
						});
	if (rc)
		return tally.outcome = kFailed, refuse_request(call, rc, request);
	return MPI_SUCCESS;
}

RCOLL_MPI_ENTRY int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
			       MPI_Request* request)
{
	Tally tally(kIbcastCall);
	const auto l = moved_layout_of(type, count);
	const Route r = route(tally, l ? std::optional(bytes_of(*l)) : std::nullopt, comm, false);
	if (!r.group)
		return r.to_mpi() ? PMPI_Ibcast(buffer, count, type, root, comm, request) : r.error;
	Nonblocking* call = start_request(r.entry->group, comm, "MPI_Ibcast", request);
	if (!call)
		return tally.outcome = kFailed, MPI_ERR_INTERN;
	const bool is_root = rank_in(comm) == root;
	void* data = is_root ? const_cast<void*>(call->staging.gather(buffer, count, type, *l))
			     : call->staging.result(buffer, *l);
	if (!is_root && !l->dense)
		call->after = [call, buffer, count, type = call->hold(type), layout = *l] {
			call->staging.scatter(buffer, count, type, layout);
		};
	fid_ep* ep = state().endpoint.ep();
	const fi_addr_t root_addr = address_of(*r.group, root);
	const long rc = state().endpoint.submit(
		*r.group, call->op,
		[ep, data, root_addr, bytes = bytes_of(*l)](fi_addr_t coll_addr, void* context) {
			return fi_broadcast(ep, data, bytes, nullptr, coll_addr, root_addr,
					    FI_UINT8, 0, context);
		});
	if (rc)
		return tally.outcome = kFailed, refuse_request(call, rc, request);
	return MPI_SUCCESS;
}

RCOLL_MPI_ENTRY int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type,
				   MPI_Op mpi_op, MPI_Comm comm, MPI_Request* request)
{
	Tally tally(kIallreduceCall);
	const auto l = layout_of(type, count);
	const auto op_code = op_of(mpi_op);
	const Route r = route(tally, l && op_code ? std::optional(bytes_of(*l)) : std::nullopt,
			      comm, false);
	if (!r.group)
		return r.to_mpi() ? PMPI_Iallreduce(sendbuf, recvbuf, count, type, mpi_op, comm,
						    request)
				  : r.error;
	Nonblocking* call = start_request(r.entry->group, comm, "MPI_Iallreduce", request);
	if (!call)
		return tally.outcome = kFailed, MPI_ERR_INTERN;
	const void* input =
		call->staging.gather(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, count, type, *l);
	void* result = call->staging.result(recvbuf, *l);
	if (!l->dense)
		call->after = [call, recvbuf, count, type = call->hold(type), layout = *l] {
			call->staging.scatter(recvbuf, count, type, layout);
		};
	fid_ep* ep = state().endpoint.ep();
	const long rc = state().endpoint.submit(
		*r.group, call->op,
		[ep, input, result, elements = l->elements, dtype = l->dtype,
		 op = *op_code](fi_addr_t coll_addr, void* context) {
			return fi_allreduce(ep, input, elements, nullptr, result, nullptr,
					    coll_addr, dtype, op, 0, context);
		});
	if (rc)
		return tally.outcome = kFailed, refuse_request(call, rc, request);
	return MPI_SUCCESS;
}

RCOLL_MPI_ENTRY int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
					     MPI_Datatype type, MPI_Op mpi_op, MPI_Comm comm)
{
	Tally tally(kReduceScatterCall);
	const auto b = blocks_of(layout_of(type, recvcount), recvcount, size_of(comm), false);
	const auto op_code = op_of(mpi_op);
	const Route r =
		route(tally, b && op_code ? std::optional(bytes_of(b->block)) : std::nullopt, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type,
							      mpi_op, comm)
				  : r.error;
	// In place, the input is the p blocks in recvbuf, the result its first:
	// rcoll reads from a copy.
	Staging staging;
	const void* input = sendbuf == MPI_IN_PLACE
				    ? staging.copy(recvbuf, b->total, type, b->all)
				    : staging.gather(sendbuf, b->total, type, b->all);
	void* result = staging.result(recvbuf, b->block);
	Operation op;
	const long rc = fi_reduce_scatter(state().endpoint.ep(), input, b->block.elements, nullptr,
					  result, nullptr, r.group->coll_addr, b->block.dtype,
					  *op_code, 0, &op.context);
	const int err = finish(tally, comm, rc, op, "MPI_Reduce_scatter_block");
	if (err == MPI_SUCCESS)
		staging.scatter(recvbuf, recvcount, type, b->block);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
				 void* recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
	Tally tally(kAlltoallCall);
	const bool in_place = sendbuf == MPI_IN_PLACE;
	// One block by signature, what the rules read; then the p blocks this
	// rank receives, and the p it sends as its send datatype lays them out:
	// as many bytes as it receives, so its blocks match them too.
	const auto one = moved_layout_of(recvtype, recvcount);
	std::optional<Blocks> b;
	std::optional<Layout> sent;
	const Route r = route(tally, one ? std::optional(bytes_of(*one)) : std::nullopt, comm, true,
			      [&](uint64_t ranks) {
				      b = blocks_of(one, recvcount, ranks, true);
				      if (b && !in_place)
					      sent = moved_layout_of(
						      sendtype,
						      static_cast<long long>(sendcount) * b->ranks);
				      return b && (in_place || same_bytes(sent, b->all));
			      });
	if (!r.group)
		return r.to_mpi() ? PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount,
						  recvtype, comm)
				  : r.error;
	Staging staging;
	const void* input;
	if (in_place)
		input = staging.copy(recvbuf, b->total, recvtype, b->all);
	else
		input = staging.gather(sendbuf, sendcount * b->ranks, sendtype, *sent);
	void* result = staging.result(recvbuf, b->all);
	Operation op;
	const long rc = fi_alltoall(state().endpoint.ep(), input, bytes_of(b->block), nullptr,
				    result, nullptr, r.group->coll_addr, FI_UINT8, 0, &op.context);
	const int err = finish(tally, comm, rc, op, "MPI_Alltoall");
	if (err == MPI_SUCCESS)
		staging.scatter(recvbuf, b->total, recvtype, b->all);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
			       void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
			       MPI_Comm comm)
{
	Tally tally(kGatherCall);
	if (!intra(comm)) // root may be MPI_ROOT, the other side's types null
		return tally.outcome = kCommunicator,
		       PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
				   comm);
	const bool is_root = rank_in(comm) == root;
	const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
	const auto [rooted, own, block] =
		rooted_call(recvtype, recvcount, sendtype, sendcount, is_root, in_place, comm);
	const Route r = route(tally, block ? std::optional(bytes_of(*block)) : std::nullopt, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount,
						recvtype, root, comm)
				  : r.error;
	Staging staging;
	const void* input = in_place ? staging.copy(block_at(recvbuf, root, recvcount, recvtype),
						    recvcount, recvtype, rooted->block)
				     : staging.gather(sendbuf, sendcount, sendtype, *own);
	void* result = is_root ? staging.result(recvbuf, rooted->all) : nullptr;
	Operation op;
	const long rc =
		fi_gather(state().endpoint.ep(), input, bytes_of(*block), nullptr, result, nullptr,
			  r.group->coll_addr, address_of(*r.group, root), FI_UINT8, 0, &op.context);
	const int err = finish(tally, comm, rc, op, "MPI_Gather");
	if (err == MPI_SUCCESS && is_root)
		staging.scatter(recvbuf, rooted->total, recvtype, rooted->all);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
				void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
				MPI_Comm comm)
{
	Tally tally(kScatterCall);
	if (!intra(comm))
		return tally.outcome = kCommunicator,
		       PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
				    root, comm);
	const bool is_root = rank_in(comm) == root;
	const bool in_place = is_root && recvbuf == MPI_IN_PLACE;
	const auto [rooted, own, block] =
		rooted_call(sendtype, sendcount, recvtype, recvcount, is_root, in_place, comm);
	const Route r = route(tally, block ? std::optional(bytes_of(*block)) : std::nullopt, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount,
						 recvtype, root, comm)
				  : r.error;
	Staging staging;
	const void* input =
		is_root ? staging.gather(sendbuf, rooted->total, sendtype, rooted->all) : nullptr;
	// In place, the root's block stays where it is: rcoll writes it into a
	// copy nobody reads.
	std::vector<std::byte> discard;
	if (in_place)
		discard.resize(bytes_of(*block));
	void* result = in_place ? discard.data() : staging.result(recvbuf, *own);
	Operation op;
	const long rc = fi_scatter(state().endpoint.ep(), input, bytes_of(*block), nullptr, result,
				   nullptr, r.group->coll_addr, address_of(*r.group, root),
				   FI_UINT8, 0, &op.context);
	const int err = finish(tally, comm, rc, op, "MPI_Scatter");
	if (err == MPI_SUCCESS && !in_place)
		staging.scatter(recvbuf, recvcount, recvtype, *own);
	return err;
}
