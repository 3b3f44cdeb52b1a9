// The MPI_ entry points librcoll-mpi replaces (the MPI's own stay reachable
// as PMPI_), and the cache of one rcoll group per communicator.
#include "offload.hpp"

#include <rdma/fi_errno.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <mutex>
#include <set>

namespace rcoll::mpi {
namespace {

// The collectives that have a size limit, and the environment variable
// that sets it.
enum Kind {
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
constexpr const char* kLimitVariables[kKinds] = {
	"RCOLL_MPI_BCAST_MAX",	 "RCOLL_MPI_ALLREDUCE_MAX",	 "RCOLL_MPI_REDUCE_MAX",
	"RCOLL_MPI_ALLGATHER_MAX", "RCOLL_MPI_REDUCE_SCATTER_MAX", "RCOLL_MPI_ALLTOALL_MAX",
	"RCOLL_MPI_GATHER_MAX",	 "RCOLL_MPI_SCATTER_MAX"};

struct State {
	Endpoint endpoint;
	// Largest payload offloaded per collective, in bytes (for the calls
	// of blocks, one rank's block); larger calls go to the MPI, whose own
	// algorithm is faster there. The same on every rank (it comes from the
	// environment mpirun passes on), so every rank decides alike.
	size_t limit[kKinds];
	bool enabled = false; // every rank opened rcoll
	bool verbose = false; // RCOLL_MPI_VERBOSE=1: say what happened, at init and finalize
	int keyval = MPI_KEYVAL_INVALID;
	// Each communicator's attribute: a holder of its group, which requests
	// in flight share. Alive, for MPI_Finalize to close.
	std::set<std::shared_ptr<CommGroup>*> holders; // under holders_lock
	std::mutex holders_lock;
	MPI_Comm staging = MPI_COMM_NULL; // staging_comm()
	std::atomic<unsigned long long> offloaded = 0, handed_back = 0;
	int world_rank = 0;
};

State& state()
{
	static State s;
	return s;
}

} // namespace

Endpoint& offload_endpoint() { return state().endpoint; }

MPI_Comm staging_comm() { return state().staging; }

namespace {

// The attribute's delete callback: the communicator is going away (or MPI
// is finalising), and its group with it.
int delete_group(MPI_Comm, int, void* value, void*)
{
	auto* holder = static_cast<std::shared_ptr<CommGroup>*>(value);
	std::unique_lock guard(state().holders_lock);
	if (state().holders.erase(holder)) {
		guard.unlock(); // the group's close may drive rcoll a while
		delete holder;
	}
	return MPI_SUCCESS;
}

void start()
{
	State& s = state();
	const char* verbose = std::getenv("RCOLL_MPI_VERBOSE");
	s.verbose = verbose && std::strcmp(verbose, "0") != 0;
	PMPI_Comm_rank(MPI_COMM_WORLD, &s.world_rank);
	for (int k = 0; k < kKinds; k++) {
		const char* text = std::getenv(kLimitVariables[k]);
		s.limit[k] = text ? std::strtoull(text, nullptr, 0) : SIZE_MAX;
	}
	std::string why;
	int opened = 0;
	try {
		why = s.endpoint.open();
	} catch (const std::exception& e) {
		why = e.what();
	}
	opened = why.empty();
	// Every rank offloads, or none does: the calls must match.
	int everyone = 0;
	PMPI_Allreduce(&opened, &everyone, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	s.enabled = everyone != 0;
	if (s.enabled) {
		PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_group, &s.keyval, nullptr);
		PMPI_Comm_dup(MPI_COMM_SELF, &s.staging);
		init_comm_keys();
	} else {
		s.endpoint.close();
	}
	if (s.verbose && (s.world_rank == 0 || !opened))
		std::fprintf(stderr, "rcoll-mpi: rank %d: collectives %s%s%s\n", s.world_rank,
			     s.enabled ? "offloaded to rcoll" : "left to the MPI",
			     why.empty() ? "" : ": ", why.c_str());
}

// The communicator's group, whose join starts at its first offloaded
// collective. nullptr: this call goes to the MPI (the decision is the same
// on every member: it depends only on the communicator), or, with `error`
// set, rcoll refused the join (the error handler ran).
std::shared_ptr<CommGroup>* group_of(MPI_Comm comm, int& error)
{
	State& s = state();
	error = MPI_SUCCESS;
	if (!s.enabled || comm == MPI_COMM_NULL)
		return nullptr;
	void* value = nullptr;
	int found = 0;
	PMPI_Comm_get_attr(comm, s.keyval, &value, &found);
	if (found)
		return static_cast<std::shared_ptr<CommGroup>*>(value);
	int inter = 0, size = 0;
	PMPI_Comm_test_inter(comm, &inter);
	PMPI_Comm_size(comm, &size);
	if (inter || size < 2)
		return nullptr;
	std::string why;
	// Groups of one member list are told apart by the key: without one,
	// rcoll would match them by join order, which ranks need not share
	// (nonblocking calls on two communicators, threads).
	const std::optional<uint64_t> key = comm_key(comm);
	if (!key)
		return nullptr;
	std::shared_ptr<CommGroup> g;
	try {
		g = s.endpoint.join(comm, key, why);
	} catch (const std::exception& e) {
		why = e.what();
	}
	if (!g) {
		std::fprintf(stderr, "rcoll-mpi: rank %d: joining a group failed: %s\n",
			     s.world_rank, why.c_str());
		// The communicator keeps the failure: its later calls fail too
		// rather than join again, out of step with the other members.
		g = std::make_shared<CommGroup>();
		g->joined = true;
		g->failure = "joining a group failed: " + why;
		auto* holder = new std::shared_ptr<CommGroup>(std::move(g));
		{
			std::lock_guard guard(s.holders_lock);
			s.holders.insert(holder);
		}
		PMPI_Comm_set_attr(comm, s.keyval, holder);
		PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
		error = MPI_ERR_OTHER;
		return nullptr;
	}
	auto* holder = new std::shared_ptr<CommGroup>(std::move(g));
	{
		std::lock_guard guard(s.holders_lock);
		s.holders.insert(holder);
	}
	PMPI_Comm_set_attr(comm, s.keyval, holder);
	return holder;
}

// The layout of a call of `kind` whose signature libfabric has, under the
// kind's size limit; else nullopt (the call goes to the MPI). A function of
// the type signature alone, as every rank's decision must be.
bool within_limit(const Layout& l, Kind kind)
{
	return l.elements * l.basic_size <= state().limit[kind];
}

std::optional<Layout> offloadable(MPI_Datatype type, int count, Kind kind)
{
	std::optional<Layout> l = layout_of(type, count);
	if (l && !within_limit(*l, kind))
		return std::nullopt;
	return l;
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

// Waits for an operation rcoll accepted (rc == 0); an error goes to the
// communicator's error handler, named after rcoll's error.
int finish(MPI_Comm comm, long rc, Operation& op, const char* what)
{
	State& s = state();
	if (rc == 0 && s.endpoint.wait(op)) {
		s.offloaded.fetch_add(1, std::memory_order_relaxed);
		return MPI_SUCCESS;
	}
	const std::string text = rc ? fi_strerror(int(-rc)) : op.error_text;
	std::fprintf(stderr, "rcoll-mpi: rank %d: %s on rcoll failed: %s\n", s.world_rank, what,
		     text.c_str());
	PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
	return MPI_ERR_OTHER;
}

// Whether the call goes to rcoll: its group when it does; else the MPI's
// own call runs, or the join's error is returned. A blocking call waits for
// the join (the others are in the same call); a nonblocking one does not
// (Endpoint::submit queues it).
struct Route {
	std::shared_ptr<CommGroup>* holder = nullptr;
	CommGroup* group = nullptr;
	int error = MPI_SUCCESS;
	bool to_mpi() const { return !group && error == MPI_SUCCESS; }
};

Route route(bool mappable, MPI_Comm comm, bool blocking = true)
{
	Route r;
	if (mappable && (r.holder = group_of(comm, r.error)))
		r.group = r.holder->get();
	if (r.group && blocking && !r.group->ready.load(std::memory_order_acquire) &&
	    !state().endpoint.await_ready(*r.group)) {
		std::fprintf(stderr, "rcoll-mpi: rank %d: %s\n", state().world_rank,
			     r.group->failure.c_str());
		PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
		r.group = nullptr;
		r.error = MPI_ERR_OTHER;
	}
	if (r.to_mpi())
		state().handed_back.fetch_add(1, std::memory_order_relaxed);
	return r;
}

fi_addr_t address_of(const CommGroup& g, int root)
{
	return root >= 0 && size_t(root) < g.members.size() ? g.members[size_t(root)]
							     : FI_ADDR_NOTAVAIL;
}

// The layouts of a call made of one block per rank: `block` one rank's
// block, `all` the p blocks together; nullopt when either has no layout or
// the blocks do not fit in int.
struct Blocks {
	Layout block, all;
	int total = 0; // elements of `all`, in units of the block's datatype
};
std::optional<Blocks> blocks_of(MPI_Datatype type, int count, MPI_Comm comm, Kind kind)
{
	int size = 0;
	PMPI_Comm_size(comm, &size);
	const long long total = static_cast<long long>(count) * size;
	const auto block = offloadable(type, count, kind);
	const auto all = layout_of(type, total);
	if (!block || !all || total > INT_MAX)
		return std::nullopt;
	return Blocks{*block, *all, int(total)};
}

bool same_signature(const std::optional<Layout>& a, const Layout& b)
{
	return a && a->dtype == b.dtype && a->elements == b.elements;
}

// Gather and scatter: the rooted side's arguments count only at the root,
// so each rank decides from the block that counts there (the root's rooted
// blocks, another rank's own block), which MPI requires to match. The
// rooted buffer must fit in int, which every rank checks from its block.
struct RootedCall {
	std::optional<Blocks> rooted;        // the root's p blocks (at the root)
	std::optional<Layout> own;           // this rank's block (unless in place)
	std::optional<Layout> block;         // what the call moves; nullopt: to the MPI
};
RootedCall rooted_call(MPI_Datatype rooted_type, int rooted_count, MPI_Datatype own_type,
		       int own_count, bool is_root, bool in_place, Kind kind, MPI_Comm comm)
{
	RootedCall c;
	c.rooted = is_root ? blocks_of(rooted_type, rooted_count, comm, kind) : std::nullopt;
	c.own = in_place ? std::nullopt : layout_of(own_type, own_count);
	if (is_root) {
		if (c.rooted)
			c.block = c.rooted->block;
	} else {
		int size = 0;
		PMPI_Comm_size(comm, &size);
		if (c.own && within_limit(*c.own, kind) &&
		    static_cast<long long>(c.own->elements) * size <= INT_MAX)
			c.block = c.own;
	}
	if (c.block && !in_place && !same_signature(c.own, *c.block))
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
	const int rc = PMPI_Init(argc, argv);
	if (rc == MPI_SUCCESS)
		start();
	return rc;
}

RCOLL_MPI_ENTRY int MPI_Init_thread(int* argc, char*** argv, int required, int* provided)
{
	const int rc = PMPI_Init_thread(argc, argv, required, provided);
	if (rc == MPI_SUCCESS)
		start();
	return rc;
}

RCOLL_MPI_ENTRY int MPI_Finalize(void)
{
	State& s = state();
	if (s.verbose) {
		unsigned long long counts[2] = {s.offloaded.load(), s.handed_back.load()};
		unsigned long long totals[2] = {};
		PMPI_Reduce(counts, totals, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (s.world_rank == 0)
			std::fprintf(stderr,
				     "rcoll-mpi: %llu collective calls offloaded, %llu left to the "
				     "MPI (all ranks)\n",
				     totals[0], totals[1]);
	}
	if (s.enabled) {
		drain_requests();
		stop_progress_thread();
		// Every rank gets here before any closes its groups: a member's
		// last writes into the others' memory are over.
		PMPI_Barrier(MPI_COMM_WORLD);
		for (std::shared_ptr<CommGroup>* holder : s.holders)
			delete holder;
		s.holders.clear();
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
	const Route r = route(true, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Barrier(comm) : r.error;
	Operation op;
	const long rc = fi_barrier(state().endpoint.ep(), r.group->coll_addr, &op.context);
	return finish(comm, rc, op, "MPI_Barrier");
}

RCOLL_MPI_ENTRY int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root,
			      MPI_Comm comm)
{
	const auto l = offloadable(type, count, kBcast);
	const Route r = route(l.has_value(), comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Bcast(buffer, count, type, root, comm) : r.error;
	Staging staging;
	const bool is_root = rank_in(comm) == root;
	void* data = is_root ? const_cast<void*>(staging.gather(buffer, count, type, *l))
			     : staging.result(buffer, *l);
	Operation op;
	const long rc = fi_broadcast(state().endpoint.ep(), data, l->elements, nullptr,
				     r.group->coll_addr, address_of(*r.group, root), l->dtype, 0,
				     &op.context);
	const int err = finish(comm, rc, op, "MPI_Bcast");
	if (err == MPI_SUCCESS && !is_root)
		staging.scatter(buffer, count, type, *l);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
				  MPI_Datatype type, MPI_Op mpi_op, MPI_Comm comm)
{
	const auto l = offloadable(type, count, kAllreduce);
	const auto op_code = op_of(mpi_op);
	const Route r = route(l && op_code, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Allreduce(sendbuf, recvbuf, count, type, mpi_op, comm)
				  : r.error;
	Staging staging;
	const void* input =
		staging.gather(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, count, type, *l);
	void* result = staging.result(recvbuf, *l);
	Operation op;
	const long rc = fi_allreduce(state().endpoint.ep(), input, l->elements, nullptr, result,
				     nullptr, r.group->coll_addr, l->dtype, *op_code, 0, &op.context);
	const int err = finish(comm, rc, op, "MPI_Allreduce");
	if (err == MPI_SUCCESS)
		staging.scatter(recvbuf, count, type, *l);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type,
			       MPI_Op mpi_op, int root, MPI_Comm comm)
{
	const auto l = offloadable(type, count, kReduce);
	const auto op_code = op_of(mpi_op);
	const Route r = route(l && op_code, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Reduce(sendbuf, recvbuf, count, type, mpi_op, root, comm)
				  : r.error;
	Staging staging;
	const bool is_root = rank_in(comm) == root;
	const void* input =
		staging.gather(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, count, type, *l);
	void* result = is_root ? staging.result(recvbuf, *l) : nullptr;
	Operation op;
	const long rc = fi_reduce(state().endpoint.ep(), input, l->elements, nullptr, result,
				  nullptr, r.group->coll_addr, address_of(*r.group, root), l->dtype,
				  *op_code, 0, &op.context);
	const int err = finish(comm, rc, op, "MPI_Reduce");
	if (err == MPI_SUCCESS && is_root)
		staging.scatter(recvbuf, count, type, *l);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
				  void* recvbuf, int recvcount, MPI_Datatype recvtype,
				  MPI_Comm comm)
{
	int size = 0;
	PMPI_Comm_size(comm, &size);
	const bool in_place = sendbuf == MPI_IN_PLACE;
	// One rank's block, and the whole result, by signature.
	const auto block = offloadable(recvtype, recvcount, kAllgather);
	const auto sent = in_place ? block : layout_of(sendtype, sendcount);
	const long long total = static_cast<long long>(recvcount) * size;
	const auto all = layout_of(recvtype, total);
	const bool same = block && sent && all && total <= INT_MAX &&
			  sent->dtype == block->dtype && sent->elements == block->elements;
	const Route r = route(same, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf,
						   recvcount, recvtype, comm)
				  : r.error;
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
	void* result = staging.result(recvbuf, *all);
	Operation op;
	const long rc = fi_allgather(state().endpoint.ep(), input, block->elements, nullptr,
				     result, nullptr, r.group->coll_addr, block->dtype, 0,
				     &op.context);
	const int err = finish(comm, rc, op, "MPI_Allgather");
	if (err == MPI_SUCCESS)
		staging.scatter(recvbuf, int(total), recvtype, *all);
	return err;
}

// Nonblocking: the same decisions; the request completes through the MPI's
// wait and test calls (requests.cpp), which copy a staged result back.

RCOLL_MPI_ENTRY int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request)
{
	const Route r = route(true, comm, false);
	if (!r.group)
		return r.to_mpi() ? PMPI_Ibarrier(comm, request) : r.error;
	Nonblocking* call = start_request(*r.holder, comm, "MPI_Ibarrier", request);
	if (!call)
		return MPI_ERR_INTERN;
	fid_ep* ep = state().endpoint.ep();
	const long rc = state().endpoint.submit(*r.group, call->op,
						[ep](fi_addr_t coll_addr, void* context) {
							return fi_barrier(ep, coll_addr, context);
						});
	if (rc)
		return refuse_request(call, rc, request);
	state().offloaded.fetch_add(1, std::memory_order_relaxed);
	return MPI_SUCCESS;
}

RCOLL_MPI_ENTRY int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root,
			       MPI_Comm comm, MPI_Request* request)
{
	const auto l = offloadable(type, count, kBcast);
	const Route r = route(l.has_value(), comm, false);
	if (!r.group)
		return r.to_mpi() ? PMPI_Ibcast(buffer, count, type, root, comm, request) : r.error;
	Nonblocking* call = start_request(*r.holder, comm, "MPI_Ibcast", request);
	if (!call)
		return MPI_ERR_INTERN;
	const bool is_root = rank_in(comm) == root;
	void* data = is_root ? const_cast<void*>(call->staging.gather(buffer, count, type, *l))
			     : call->staging.result(buffer, *l);
	if (!is_root && !l->dense)
		call->after = [call, buffer, count, type, layout = *l] {
			call->staging.scatter(buffer, count, type, layout);
		};
	fid_ep* ep = state().endpoint.ep();
	const fi_addr_t root_addr = address_of(*r.group, root);
	const long rc = state().endpoint.submit(
		*r.group, call->op,
		[ep, data, root_addr, elements = l->elements,
		 dtype = l->dtype](fi_addr_t coll_addr, void* context) {
			return fi_broadcast(ep, data, elements, nullptr, coll_addr, root_addr,
					    dtype, 0, context);
		});
	if (rc)
		return refuse_request(call, rc, request);
	state().offloaded.fetch_add(1, std::memory_order_relaxed);
	return MPI_SUCCESS;
}

RCOLL_MPI_ENTRY int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count,
				   MPI_Datatype type, MPI_Op mpi_op, MPI_Comm comm,
				   MPI_Request* request)
{
	const auto l = offloadable(type, count, kAllreduce);
	const auto op_code = op_of(mpi_op);
	const Route r = route(l && op_code, comm, false);
	if (!r.group)
		return r.to_mpi() ? PMPI_Iallreduce(sendbuf, recvbuf, count, type, mpi_op, comm,
						    request)
				  : r.error;
	Nonblocking* call = start_request(*r.holder, comm, "MPI_Iallreduce", request);
	if (!call)
		return MPI_ERR_INTERN;
	const void* input = call->staging.gather(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf,
						 count, type, *l);
	void* result = call->staging.result(recvbuf, *l);
	if (!l->dense)
		call->after = [call, recvbuf, count, type, layout = *l] {
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
		return refuse_request(call, rc, request);
	state().offloaded.fetch_add(1, std::memory_order_relaxed);
	return MPI_SUCCESS;
}

RCOLL_MPI_ENTRY int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
					     MPI_Datatype type, MPI_Op mpi_op, MPI_Comm comm)
{
	const auto b = blocks_of(type, recvcount, comm, kReduceScatter);
	const auto op_code = op_of(mpi_op);
	const Route r = route(b && op_code, comm);
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
	const int err = finish(comm, rc, op, "MPI_Reduce_scatter_block");
	if (err == MPI_SUCCESS)
		staging.scatter(recvbuf, recvcount, type, b->block);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
				 void* recvbuf, int recvcount, MPI_Datatype recvtype,
				 MPI_Comm comm)
{
	const bool in_place = sendbuf == MPI_IN_PLACE;
	const auto b = blocks_of(recvtype, recvcount, comm, kAlltoall);
	const bool same = b && (in_place || same_signature(layout_of(sendtype, sendcount), b->block));
	const Route r = route(same, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount,
						  recvtype, comm)
				  : r.error;
	Staging staging;
	const void* input;
	if (in_place) {
		input = staging.copy(recvbuf, b->total, recvtype, b->all);
	} else {
		int size = 0;
		PMPI_Comm_size(comm, &size);
		input = staging.gather(sendbuf, sendcount * size, sendtype,
				       *layout_of(sendtype, static_cast<long long>(sendcount) * size));
	}
	void* result = staging.result(recvbuf, b->all);
	Operation op;
	const long rc = fi_alltoall(state().endpoint.ep(), input, b->block.elements, nullptr,
				    result, nullptr, r.group->coll_addr, b->block.dtype, 0,
				    &op.context);
	const int err = finish(comm, rc, op, "MPI_Alltoall");
	if (err == MPI_SUCCESS)
		staging.scatter(recvbuf, b->total, recvtype, b->all);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
			       void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
			       MPI_Comm comm)
{
	if (!intra(comm)) // root may be MPI_ROOT, the other side's types null
		return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
				   root, comm);
	const bool is_root = rank_in(comm) == root;
	const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
	const auto [rooted, own, block] = rooted_call(recvtype, recvcount, sendtype, sendcount,
						      is_root, in_place, kGather, comm);
	const Route r = route(block.has_value(), comm);
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
	const long rc = fi_gather(state().endpoint.ep(), input, block->elements, nullptr, result,
				  nullptr, r.group->coll_addr, address_of(*r.group, root),
				  block->dtype, 0, &op.context);
	const int err = finish(comm, rc, op, "MPI_Gather");
	if (err == MPI_SUCCESS && is_root)
		staging.scatter(recvbuf, rooted->total, recvtype, rooted->all);
	return err;
}

RCOLL_MPI_ENTRY int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
				void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
				MPI_Comm comm)
{
	if (!intra(comm))
		return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
				    root, comm);
	const bool is_root = rank_in(comm) == root;
	const bool in_place = is_root && recvbuf == MPI_IN_PLACE;
	const auto [rooted, own, block] = rooted_call(sendtype, sendcount, recvtype, recvcount,
						      is_root, in_place, kScatter, comm);
	const Route r = route(block.has_value(), comm);
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
		discard.resize(block->elements * block->basic_size);
	void* result = in_place ? discard.data() : staging.result(recvbuf, *own);
	Operation op;
	const long rc = fi_scatter(state().endpoint.ep(), input, block->elements, nullptr, result,
				   nullptr, r.group->coll_addr, address_of(*r.group, root),
				   block->dtype, 0, &op.context);
	const int err = finish(comm, rc, op, "MPI_Scatter");
	if (err == MPI_SUCCESS && !in_place)
		staging.scatter(recvbuf, recvcount, recvtype, *own);
	return err;
}
