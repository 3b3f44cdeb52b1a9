// librcoll-mpi: an MPI's collectives offloaded to rcoll groups, through the
// PMPI profiling interface every MPI shares (what hcoll and UCC are to Open
// MPI). Loaded with LD_PRELOAD (or linked before -lmpi), it opens its own
// rcoll endpoint at MPI_Init, joins one rcoll group per communicator (in
// the background, from the communicator's first offloaded collective), and
// runs the calls it can map onto fi_collective(3) there; everything else
// goes to the MPI's own PMPI_ call.
//
//   offload.hpp       what the parts share
//   endpoint.cpp      the rcoll endpoint: opening, names, groups, waiting
//   mapping.cpp       MPI datatypes and operations onto libfabric's
//   interpose.cpp     the MPI_ entry points and the communicator cache
//   requests.cpp      nonblocking calls: generalized requests, and the
//                     MPI_Wait and MPI_Test family that completes them
//   progress.cpp      the thread that keeps nonblocking calls moving while
//                     the application is elsewhere
//   comm_keys.cpp     keys that tell communicators of one member list apart
//   hand_back.hpp     rules that give sizes back to the MPI
//   tally.cpp         what became of each call; the report at MPI_Finalize
#pragma once

#include <mpi.h>
#include <rdma/fabric.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_ext_rcoll.h>

#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hand_back.hpp"

// The MPI_ entry points the library defines: exported whatever the MPI's
// header says (Open MPI's marks them visible, MPICH's does not), everything
// else stays hidden.
#define RCOLL_MPI_ENTRY extern "C" __attribute__((visibility("default")))

namespace rcoll::mpi {

// fi_close on destruction.
struct FidCloser {
	void operator()(fid* f) const noexcept;
};
template <class T>
struct FidDeleter {
	void operator()(T* f) const noexcept { FidCloser()(&f->fid); }
};
template <class T>
using FidPtr = std::unique_ptr<T, FidDeleter<T>>;

// One operation handed to rcoll: its context, and how it ended. `done` is
// set by whichever thread reads the completion, after the error fields.
struct Operation {
	fi_context2 context{}; // first: rcoll may own it while the call runs
	std::atomic<bool> done = false;
	int error = 0; // fi_errno of an error completion
	std::string error_text;
	void end(int err, std::string text);
};

// Posts a call to rcoll once its group's address is known: returns what the
// fi_ call returned.
using Post = std::function<long(fi_addr_t coll_addr, void* context)>;

// A communicator's rcoll group. The join runs in the background: calls
// made before it completed wait in `queued`, posted in their order once it
// did, so that every member posts the group's calls in one order.
struct CommGroup {
	~CommGroup();
	FidPtr<fid_av_set> set;
	fid_mc* mc = nullptr; // closed by the destructor, once rcoll lets go
	fi_addr_t coll_addr = FI_ADDR_NOTAVAIL;
	std::vector<fi_addr_t> members; // world address of each communicator rank
	// Joined and nothing queued: calls post directly, without the lock.
	std::atomic<bool> ready = false;
	// Under the endpoint's lock until `ready`:
	bool joined = false;
	std::string failure; // why the join failed; calls then fail too
	struct Queued {
		Operation* op;
		Post post;
	};
	std::deque<Queued> queued;
};

class Endpoint {
public:
	// Opens rcoll's endpoint (no MPI call): an error text when this rank
	// cannot offload.
	std::string open();
	// Then, once every rank opened, exchanges the endpoints' names and the
	// ranks' hosts over MPI_COMM_WORLD (a collective call). An error text
	// when this rank cannot use them; it made every call still.
	std::string exchange_names();
	bool is_open() const { return ep_ != nullptr; }
	// Starts joining a group of the communicator's members, told apart
	// from other groups of those members by `key` (else by join order);
	// it completes in the background (advance()). nullptr, with `error`
	// set, when rcoll refused it.
	std::shared_ptr<CommGroup> join(MPI_Comm comm, std::optional<uint64_t> key,
					std::string& error);
	// Where the members of `comm` run (by the MPI's processor names,
	// exchanged when the endpoint opened): on one host, on several with
	// one on each, or on several with some together.
	Spread spread_of(MPI_Comm comm) const;
	// Blocks until the group joined and its queued calls are posted; false
	// (with the reason in g.failure) when the join failed.
	bool await_ready(CommGroup& g);
	// Posts now when the group is ready, else queues the call (0 then).
	long submit(CommGroup& g, Operation& op, Post post);
	// Progresses until `op` completes: true when it succeeded.
	bool wait(Operation& op);
	// Drives rcoll: reads the completions there are. Any thread.
	void poll();
	// poll(), then finishes joins and posts the calls they held back.
	void advance();
	// After fi_cq_read itself failed (rcoll may still own every context
	// in flight: nothing can be completed or freed), ends the job.
	void abort_if_broken();
	fid_ep* ep() const { return ep_.get(); }
	// The collectives a blocking call posts with: rcoll's finishing ones
	// (fi_ext_rcoll.h), which may end the call before they return
	// (FI_RCOLL_FINISHED), or else the endpoint's own.
	const fi_ops_collective& blocking() const { return *blocking_; }
	// Closes everything; groups must be gone.
	void close();

private:
	// Under lock_: join completions, and the queues they release.
	void read_join_events();
	void post_queued(CommGroup& g);
	FidPtr<fid_fabric> fabric_;
	FidPtr<fid_domain> domain_;
	FidPtr<fid_av> av_;
	FidPtr<fid_cq> cq_;
	FidPtr<fid_eq> eq_;
	FidPtr<fid_ep> ep_;
	const fi_ops_collective* blocking_ = nullptr;
	std::vector<fi_addr_t> world_; // by world rank
	std::vector<uint64_t> hosts_;  // by world rank: a hash of its processor name
	std::mutex lock_;
	std::vector<std::shared_ptr<CommGroup>> joining_; // under lock_
	std::atomic<size_t> joins_pending_ = 0;
	std::atomic<bool> broken_ = false; // fi_cq_read failed
	std::mutex broken_lock_;           // for broken_text_, set once
	std::string broken_text_;
};

// FNV-1a over `len` bytes, continuing from `h` (start with kFnvBasis): the
// hashes ranks compare (hosts, settings).
inline constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ULL;
inline uint64_t fnv1a(uint64_t h, const void* data, size_t len)
{
	for (size_t i = 0; i < len; i++)
		h = (h ^ static_cast<const unsigned char*>(data)[i]) * 0x100000001b3ULL;
	return h;
}

// The endpoint of this process (interpose.cpp).
Endpoint& offload_endpoint();

// Each rank of `comm`, as its rank in MPI_COMM_WORLD (negative: none).
std::vector<int> world_ranks_of(MPI_Comm comm);

// A predefined MPI datatype libfabric has a datatype for, as mapping.cpp's
// table holds it: nullptr for any other type.
struct Predefined {
	uintptr_t key = 0; // the handle; 0: an empty slot of the table
	fi_datatype dtype{};
	int size = 0;
};
const Predefined* predefined(MPI_Datatype type);

// The lookups of every call are inline: GCC returns a small std::optional
// from a function of its own through a stack slot written in two pieces and
// read in one, a stall on the path of every sub-microsecond call.

// libfabric's name for an MPI datatype that is one of its contiguous
// predefined types, and for an MPI operation on such a type.
inline std::optional<fi_datatype> datatype_of(MPI_Datatype type)
{
	if (const Predefined* p = predefined(type))
		return p->dtype;
	return std::nullopt;
}

inline std::optional<fi_op> op_of(MPI_Op op)
{
	if (op == MPI_SUM)
		return FI_SUM;
	if (op == MPI_PROD)
		return FI_PROD;
	if (op == MPI_MIN)
		return FI_MIN;
	if (op == MPI_MAX)
		return FI_MAX;
	if (op == MPI_LAND)
		return FI_LAND;
	if (op == MPI_LOR)
		return FI_LOR;
	if (op == MPI_LXOR)
		return FI_LXOR;
	if (op == MPI_BAND)
		return FI_BAND;
	if (op == MPI_BOR)
		return FI_BOR;
	if (op == MPI_BXOR)
		return FI_BXOR;
	return std::nullopt; // MINLOC, MAXLOC, REPLACE, NO_OP, user-defined
}

// What `count` elements of `type` carry, by type signature (mapping.cpp):
// `elements` of one predefined type libfabric has. Every rank of a call
// passes the same signature, though not always the same datatype (a derived
// type on one rank, its element type on another): deciding from the
// signature, all ranks decide alike. `dense`: the buffer holds exactly
// those elements in order (a predefined type, or no element); else they
// travel through a contiguous copy the MPI makes (Staging): a send-receive
// into `basic`, or MPI_Pack where `basic` is MPI_PACKED (moved_layout_of).
struct Layout {
	fi_datatype dtype{};
	MPI_Datatype basic = MPI_DATATYPE_NULL;
	size_t basic_size = 0;
	size_t elements = 0;
	bool dense = false;
};
inline uint64_t bytes_of(const Layout& l) { return l.elements * l.basic_size; }
// The two below for a type that is not predefined.
std::optional<Layout> derived_layout_of(MPI_Datatype type, long long count);
std::optional<Layout> derived_moved_layout_of(MPI_Datatype type, long long count);
// nullopt also above INT_MAX elements.
inline std::optional<Layout> layout_of(MPI_Datatype type, long long count)
{
	if (const Predefined* p = predefined(type)) {
		if (count < 0 || count > INT_MAX)
			return std::nullopt;
		return Layout{p->dtype, type, size_t(p->size), size_t(count), true};
	}
	return derived_layout_of(type, count);
}
// For a call that moves data without reducing it: layout_of's layout where
// there is one, else the signature's bytes in MPI_Pack's order (`basic` is
// MPI_PACKED, `dense` for a predefined type without gaps). Either way rcoll
// moves bytes_of() bytes; nullopt above INT_MAX bytes, whichever layout.
inline std::optional<Layout> moved_layout_of(MPI_Datatype type, long long count)
{
	if (const Predefined* p = predefined(type)) {
		if (count < 0 || count > INT_MAX || count * p->size > INT_MAX)
			return std::nullopt;
		return Layout{p->dtype, type, size_t(p->size), size_t(count), true};
	}
	return derived_moved_layout_of(type, count);
}

// The contiguous copies of one call's input and result, when its layout is
// not dense (a send-receive to MPI_COMM_SELF converts, so the MPI's own
// datatype engine does the packing). The dense case inline: a Layout passed
// out of line is built in memory, and its loads stall on the stores.
class Staging {
public:
	// The input as contiguous elements (`buf` itself when dense).
	const void* gather(const void* buf, int count, MPI_Datatype type, const Layout& l)
	{
		return l.dense ? buf : stage_in(buf, count, type, l);
	}
	// The same, always in a copy: for input that the result overwrites.
	const void* copy(const void* buf, int count, MPI_Datatype type, const Layout& l);
	// Where rcoll writes the result (`buf` itself when dense).
	void* result(void* buf, const Layout& l) { return l.dense ? buf : stage_out(l); }
	// The result into `buf`'s layout (nothing when dense).
	void scatter(void* buf, int count, MPI_Datatype type, const Layout& l)
	{
		if (!l.dense)
			unstage(buf, count, type, l);
	}

private:
	const void* stage_in(const void* buf, int count, MPI_Datatype type, const Layout& l);
	void* stage_out(const Layout& l);
	void unstage(void* buf, int count, MPI_Datatype type, const Layout& l);

	std::vector<std::byte> in_, out_;
};

// A nonblocking call (requests.cpp): the operation to hand rcoll as its
// context, the copies its buffers travel through, and what to do once it
// completed (copy a result back), tied to a generalized request of the
// MPI's that completes once rcoll reports the operation done, while the
// application waits or tests. It keeps its group alive.
struct Nonblocking {
	Operation op;
	Staging staging;
	std::function<void()> after; // on success, before the request completes

	// A duplicate of `type` for `after`, freed with the call: the
	// application may free its own handle before the request completes.
	MPI_Datatype hold(MPI_Datatype type)
	{
		if (held == MPI_DATATYPE_NULL && PMPI_Type_dup(type, &held) != MPI_SUCCESS)
			held = MPI_DATATYPE_NULL;
		return held == MPI_DATATYPE_NULL ? type : held;
	}
	~Nonblocking()
	{
		int finalized = 0;
		PMPI_Finalized(&finalized);
		if (held != MPI_DATATYPE_NULL && !finalized)
			PMPI_Type_free(&held);
	}
	Nonblocking() = default;
	Nonblocking(const Nonblocking&) = delete;
	Nonblocking& operator=(const Nonblocking&) = delete;

private:
	MPI_Datatype held = MPI_DATATYPE_NULL;
};
// nullptr when the MPI refused the request (`*request` is then untouched).
Nonblocking* start_request(std::shared_ptr<CommGroup> group, MPI_Comm comm, const char* what,
			   MPI_Request* request);
// rcoll refused the operation (`rc` < 0): the request is completed and
// freed now (`*request` becomes MPI_REQUEST_NULL). Returns the MPI error
// code for the call.
int refuse_request(Nonblocking* call, long rc, MPI_Request* request);
// Completes every request whose operation finished (drives rcoll first).
void poll_requests();
// Nonblocking calls started and not yet completed.
bool requests_in_flight();
// Waits for every nonblocking call still in flight (MPI_Finalize).
void drain_requests();

// While nonblocking calls are in flight, a thread drives rcoll every
// RCOLL_MPI_PROGRESS_US, so that they move on while the application blocks
// in a call rcoll does not see (progress.cpp).
void start_progress_thread();
void stop_progress_thread();

// A communicator's key (comm_keys.cpp): the same on all its members,
// different for every communicator; nullopt for communicators made by calls
// the library does not see.
std::optional<uint64_t> comm_key(MPI_Comm comm);
void init_comm_keys();
void free_comm_keys();

// What became of one collective call (tally.cpp): a Tally lives for the
// call, is told its outcome, and counts it (and times it while the report
// is on) when the call returns.
enum Call {
	kBarrierCall,
	kBcastCall,
	kAllreduceCall,
	kReduceCall,
	kAllgatherCall,
	kReduceScatterCall,
	kAlltoallCall,
	kGatherCall,
	kScatterCall,
	kIbarrierCall,
	kIbcastCall,
	kIallreduceCall,
	kCalls
};
enum Outcome {
	kOffloaded,
	kFailed,       // rcoll refused the call or completed it with an error
	kByRule,       // handed back: a hand-back rule (hand_back.hpp)
	kUnmappable,   // handed back: datatype, op or count
	kCommunicator, // handed back: intercommunicator, one member, no key
	kLibraryOff,   // handed back: some rank could not open rcoll, or disabled
	kOutcomes
};
class Tally {
public:
	explicit Tally(Call call);
	~Tally();
	Tally(const Tally&) = delete;
	Tally& operator=(const Tally&) = delete;
	Call call() const { return call_; }
	Outcome outcome = kOffloaded;

private:
	Call call_;
	uint64_t started_; // 0: not timed
};
void time_calls(bool on);
unsigned long long offloaded_calls(); // on this rank
// Collective over MPI_COMM_WORLD: prints (at world rank 0) every
// collective's calls summed over the ranks.
void report_calls(int world_rank);

// The communicator the staging copies go through: a private duplicate of
// MPI_COMM_SELF, so that no receive of the application's can match them.
MPI_Comm staging_comm();

} // namespace rcoll::mpi
