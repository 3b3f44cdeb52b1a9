// Shared pieces of the collective clients (rcoll_coll_test, rcoll_coll_bench):
// an endpoint with the event queue fi_join_collective(3) needs, AV sets and
// joined groups as RAII objects, one entry point that issues any of the nine
// fi_collective(3) calls, and registered buffers with guard bytes.
//
// Like the rest of fabtests these are ordinary libfabric applications: the
// same code runs over rcoll and over libfabric's own "tcp;ofi_rxm", whose
// util_coll layer also offers FI_COLLECTIVE.
#pragma once

#include "common.hpp"

#include <rdma/fi_collective.h>
#include <rdma/fi_eq.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fabtests::coll {

// ---------------------------------------------------------------- vocabulary

const char* collective_name(fi_collective_op coll);
const char* datatype_name(fi_datatype type);
const char* op_name(fi_op op);

struct DatatypeInfo {
	fi_datatype type;
	size_t size; // bytes of one element on this platform
	bool integer;
	bool is_signed; // integers only
	bool complex;
};

// The fourteen non-void datatypes of fi_atomic(3), in enum order.
std::span<const DatatypeInfo> datatypes();
const DatatypeInfo& datatype_info(fi_datatype type);

// The ten reduction operations (FI_MIN .. FI_BXOR).
std::span<const fi_op> reduction_ops();

// Whether fi_atomic(3)'s table (which fi_collective(3) defers to) defines
// `op` on `type`: MIN/MAX on real types, SUM/PROD and the logical
// operations on every type, the bitwise operations on integers only.
bool reduction_allowed(fi_datatype type, fi_op op);

constexpr bool is_reduction(fi_collective_op c)
{
	return c == FI_ALLREDUCE || c == FI_REDUCE || c == FI_REDUCE_SCATTER;
}

constexpr bool is_rooted(fi_collective_op c)
{
	return c == FI_BROADCAST || c == FI_REDUCE || c == FI_SCATTER || c == FI_GATHER;
}

// One collective call as every member of the group issues it. `count`
// follows the provider's contract (fi_collective(3) leaves it open; MPI's
// conventions): broadcast, allreduce and reduce take `count` elements;
// allgather, alltoall, gather, scatter and reduce_scatter take `count`
// elements per rank block.
struct CallSpec {
	fi_collective_op coll = FI_BARRIER;
	size_t count = 0;
	fi_datatype type = FI_UINT8;
	fi_op op = FI_SUM; // reductions only
	int root = 0;      // group rank; rooted collectives only
	// Barrier only: issue fi_barrier2 with FI_COMPLETION. (fi_barrier2 with
	// no flags is fi_barrier itself, in fi_collective.h.)
	bool barrier2 = false;

	std::string describe() const;
};

struct BufferBytes {
	size_t input = 0;
	size_t output = 0;
};
// Bytes of `group_rank`'s input and output buffers for the call (broadcast:
// its one buffer is the output).
BufferBytes buffer_bytes(const CallSpec& call, int group_size, int group_rank);

// ---------------------------------------------------------------- endpoint

struct EndpointOptions {
	std::string provider = "rcoll";
	bool bind_eq = true; // fi_join_collective needs one; the error case leaves it out
	fi_wait_obj eq_wait_obj = FI_WAIT_NONE; // FI_WAIT_UNSPEC for fi_eq_sread
	uint64_t caps = FI_MSG | FI_TAGGED | FI_COLLECTIVE;
	// FI_THREAD_DOMAIN: one thread uses the domain, so the provider may
	// skip its locks (FI_THREAD_UNSPEC: the provider's default).
	fi_threading threading = FI_THREAD_UNSPEC;
};

// An FI_JOIN_COMPLETE (or join error) read from the event queue.
struct JoinEvent {
	fid_t fid = nullptr;
	void* context = nullptr;
	int error = 0; // fi_eq_err_entry::err, 0 on success
};

// fabtests::Endpoint's objects (fabric, domain, CQ, AV, EQ, enabled RDM
// endpoint) with FI_COLLECTIVE. Completions are dispatched to the OpContext
// named by op_context, and only to operations the client tracks.
class CollEndpoint {
public:
	// Throws NotApplicable when the provider exists but offers no
	// FI_COLLECTIVE endpoint.
	explicit CollEndpoint(const EndpointOptions& options);

	fid_ep* ep() const { return base_.ep(); }
	fid_domain* domain() const { return base_.domain(); }
	fid_av* av() const { return base_.av(); }
	fid_eq* eq() const { return base_.eq(); }
	const fi_info& info() const { return base_.info(); }
	const std::string& provider() const { return provider_; }

	// allgather of endpoint names through the bootstrap; each rank's
	// fi_addr_t, in rank order (own rank included).
	std::vector<fi_addr_t> exchange_addresses(Bootstrap& boot)
	{
		return base_.exchange_addresses(boot);
	}

	// Records an operation just posted with `ctx` as its context: only
	// tracked contexts are dereferenced on completion (Endpoint::track).
	void track(OpContext& ctx) { base_.track(ctx); }

	// Reads a batch of completions and marks their OpContexts done.
	size_t progress() { return base_.progress(); }
	// Polls until pred() holds. Throws CheckFailure naming `what` when the
	// budget runs out, and when `boot` says another rank failed.
	void progress_until(const std::function<bool()>& pred, const std::string& what,
			    std::chrono::milliseconds budget = kDefaultWait,
			    Bootstrap* boot = nullptr);
	void wait_done(OpContext& ctx, const std::string& what,
		       std::chrono::milliseconds budget = kDefaultWait);

	// The next join event for `mc`, driving the CQ meanwhile (events for
	// other groups are kept for their own wait).
	JoinEvent wait_join(fid_mc* mc, const std::string& what, std::chrono::milliseconds budget);
	// Join events whose group was never waited for (must stay empty).
	size_t stray_join_events() const { return join_events_.size(); }

	// Completions that matched no OpContext: error entries without context.
	std::deque<UnsolicitedEvent>& unsolicited() { return base_.unsolicited(); }

private:
	bool read_eq_event();

	std::string provider_;
	Endpoint base_; // tracks contexts (EndpointConfig::track_contexts)
	std::vector<JoinEvent> join_events_;
};

// A bootstrap barrier that keeps driving the endpoint while it waits.
// A rank's collective can complete while writes its peers still wait for
// are queued in its provider: a rank that stops progressing (as in the
// plain bootstrap barrier) stalls them, and one that closes its endpoint
// relies on the provider to flush them. Every case ends with wait(), as an
// application ends with a collective it keeps progressing.
class ProgressingBarrier {
public:
	// `ranks`: how many ranks take part; barriers with a different number
	// of ranks (after a kill) need a bootstrap signal of their own.
	ProgressingBarrier(CollEndpoint& ep, Bootstrap& boot, int ranks,
			   int signal = kSignalCount - 1)
		: ep_(ep), boot_(boot), ranks_(ranks), signal_(signal)
	{}
	void wait();

private:
	CollEndpoint& ep_;
	Bootstrap& boot_;
	int ranks_;
	int signal_;
};

// ---------------------------------------------------------------- groups

struct AvSetCloser {
	void operator()(fid_av_set* set) const noexcept { close_fid(&set->fid); }
};
using AvSetPtr = std::unique_ptr<fid_av_set, AvSetCloser>;

// fi_av_set with start/end/stride (stride 1: the contiguous range).
AvSetPtr av_set_range(CollEndpoint& ep, fi_addr_t start, fi_addr_t end, uint64_t stride,
		      size_t count);
// An empty set, then fi_av_set_insert of `members` in the given order.
AvSetPtr av_set_inserted(CollEndpoint& ep, std::span<const fi_addr_t> members);

// How the sweep builds a group from the ranks of the job.
enum class Shape {
	full,     // every rank, start/end with stride 1
	strided,  // the ranks of this rank's parity: start/end with stride 2
	reversed, // every rank, inserted one by one from the last to the first
};
const char* shape_name(Shape shape);
// World ranks of this rank's group of `shape`, in group-rank order.
std::vector<int> shape_members(Shape shape, int world_size, int world_rank);
// The AV set of `shape` for world rank `my_rank`.
AvSetPtr make_shape_set(CollEndpoint& ep, Shape shape, std::span<const fi_addr_t> world,
			int my_rank);

// A joined collective group (the fid_mc). Joining is itself collective:
// every member constructs its Group with the same member list.
class Group {
public:
	// fi_av_set_addr + fi_join_collective on `set`, then waits for the
	// FI_JOIN_COMPLETE. `members` are the world ranks in the set's order and
	// `world` every rank's AV address.
	Group(CollEndpoint& ep, AvSetPtr set, std::vector<int> members,
	      std::span<const fi_addr_t> world, int world_rank, std::string label,
	      std::chrono::milliseconds budget = kDefaultWait);
	// Joins without waiting: wait_joined() does, so that several joins
	// can be in flight.
	struct Deferred {};
	Group(CollEndpoint& ep, AvSetPtr set, std::vector<int> members,
	      std::span<const fi_addr_t> world, int world_rank, std::string label, Deferred);
	void wait_joined(CollEndpoint& ep, std::chrono::milliseconds budget = kDefaultWait);
	Group(const Group&) = delete;
	Group& operator=(const Group&) = delete;
	~Group();

	fi_addr_t coll_addr() const { return coll_addr_; }
	int rank() const { return rank_; }
	int size() const { return static_cast<int>(members_.size()); }
	int world_rank(int group_rank) const { return members_[static_cast<size_t>(group_rank)]; }
	// The AV address of a member: what root arguments take.
	fi_addr_t address_of(int group_rank) const
	{
		return addresses_[static_cast<size_t>(group_rank)];
	}
	const std::string& label() const { return label_; }
	fid_mc* mc() const { return mc_.get(); }
	// Closes the fid_mc now (the destructor would otherwise); returns fi_close's result.
	int close();

private:
	std::vector<int> members_;
	std::vector<fi_addr_t> addresses_;
	AvSetPtr set_;
	FidPtr<fid_mc> mc_;
	fi_addr_t coll_addr_ = FI_ADDR_NOTAVAIL;
	int rank_ = -1;
	std::string label_;
};

// ---------------------------------------------------------------- buffers

// Page-aligned memory with guard bytes before and after the bytes in use,
// so a collective that writes outside its buffer is caught. Grows on
// demand. The clients do not ask for FI_MR_LOCAL, so collectives get no
// memory descriptors (util_coll, for one, would not pass them on).
class GuardedBuffer {
public:
	static constexpr size_t kGuardBytes = 64;

	GuardedBuffer() = default;
	GuardedBuffer(const GuardedBuffer&) = delete;
	GuardedBuffer& operator=(const GuardedBuffer&) = delete;

	// Makes `bytes` usable and writes fresh guards around them.
	void prepare(size_t bytes);
	std::byte* data() const { return memory_.get() + kGuardBytes; }
	size_t size() const { return bytes_; }
	std::span<std::byte> span() const { return {data(), bytes_}; }
	std::span<uint8_t> bytes() const { return {reinterpret_cast<uint8_t*>(data()), bytes_}; }
	// Throws CheckFailure when a guard byte changed.
	void expect_guards(const std::string& what) const;

private:
	struct Free {
		void operator()(std::byte* p) const noexcept { std::free(p); }
	};
	std::unique_ptr<std::byte, Free> memory_;
	size_t capacity_ = 0; // bytes of memory_
	size_t bytes_ = 0;
};

// ---------------------------------------------------------------- posting

// Issues the collective once (no -FI_EAGAIN retry) and returns the
// provider's return code. `input` and `output` may be null when the rank
// has no such buffer for this call.
ssize_t issue(CollEndpoint& ep, const Group& group, const CallSpec& call, GuardedBuffer* input,
	      GuardedBuffer* output, OpContext& ctx);
// As issue(), retrying -FI_EAGAIN while driving progress; throws on any
// other error.
void post(CollEndpoint& ep, const Group& group, const CallSpec& call, GuardedBuffer* input,
	  GuardedBuffer* output, OpContext& ctx, std::chrono::milliseconds budget = kDefaultWait);
// Expects a successful completion of a collective: no error, FI_COLLECTIVE
// in the flags.
void expect_collective_completion(const OpContext& ctx, const std::string& what);

} // namespace fabtests::coll
