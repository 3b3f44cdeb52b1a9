// The MPI_ entry points librcoll-mpi replaces (the MPI's own stay reachable
// as PMPI_), and the cache of one rcoll group per communicator.
#include "offload.hpp"

#include <rdma/fi_errno.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace rcoll::mpi {
namespace {

// The collectives that have a size limit, and the environment variable
// that sets it.
enum Kind { kBcast, kAllreduce, kReduce, kAllgather, kKinds };
constexpr const char* kLimitVariables[kKinds] = {"RCOLL_MPI_BCAST_MAX", "RCOLL_MPI_ALLREDUCE_MAX",
						 "RCOLL_MPI_REDUCE_MAX", "RCOLL_MPI_ALLGATHER_MAX"};

struct State {
	Endpoint endpoint;
	// Largest payload offloaded per collective, in bytes (allgather: one
	// rank's block); larger calls go to the MPI, whose own algorithm is
	// faster there. The same on every rank (it comes from the environment
	// mpirun passes on), so every rank decides alike.
	size_t limit[kKinds] = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
	bool enabled = false; // every rank opened rcoll
	bool verbose = false; // RCOLL_MPI_VERBOSE=1: say what happened, at init and finalize
	int keyval = MPI_KEYVAL_INVALID;
	std::set<CommGroup*> groups; // alive, for MPI_Finalize to close
	unsigned long long offloaded = 0, handed_back = 0;
	int world_rank = 0;
};

State& state()
{
	static State s;
	return s;
}

} // namespace

Endpoint& offload_endpoint() { return state().endpoint; }

namespace {

// The attribute's delete callback: the communicator is going away (or MPI
// is finalising), and its group with it.
int delete_group(MPI_Comm, int, void* value, void*)
{
	auto* g = static_cast<CommGroup*>(value);
	if (state().groups.erase(g))
		delete g;
	return MPI_SUCCESS;
}

void start(int provided)
{
	State& s = state();
	const char* verbose = std::getenv("RCOLL_MPI_VERBOSE");
	s.verbose = verbose && std::strcmp(verbose, "0") != 0;
	PMPI_Comm_rank(MPI_COMM_WORLD, &s.world_rank);
	for (int k = 0; k < kKinds; k++)
		if (const char* text = std::getenv(kLimitVariables[k]))
			s.limit[k] = std::strtoull(text, nullptr, 0);
	std::string why;
	if (provided == MPI_THREAD_MULTIPLE)
		// One endpoint serves every thread; concurrent collectives on
		// different communicators are not offloaded yet.
		why = "MPI_THREAD_MULTIPLE";
	int opened = 0;
	if (why.empty()) {
		try {
			why = s.endpoint.open();
		} catch (const std::exception& e) {
			why = e.what();
		}
		opened = why.empty();
	}
	// Every rank offloads, or none does: the calls must match.
	int everyone = 0;
	PMPI_Allreduce(&opened, &everyone, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	s.enabled = everyone != 0;
	if (s.enabled)
		PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_group, &s.keyval, nullptr);
	else
		s.endpoint.close();
	if (s.verbose && (s.world_rank == 0 || !opened))
		std::fprintf(stderr, "rcoll-mpi: rank %d: collectives %s%s%s\n", s.world_rank,
			     s.enabled ? "offloaded to rcoll" : "left to the MPI",
			     why.empty() ? "" : ": ", why.c_str());
}

// The communicator's group, joined at its first offloaded collective.
// nullptr: this call goes to the MPI (the decision is the same on every
// member: it depends only on the communicator), or, with `error` set, the
// join failed (the error handler ran).
CommGroup* group_of(MPI_Comm comm, int& error)
{
	State& s = state();
	error = MPI_SUCCESS;
	if (!s.enabled || comm == MPI_COMM_NULL)
		return nullptr;
	int inter = 0, size = 0;
	PMPI_Comm_test_inter(comm, &inter);
	PMPI_Comm_size(comm, &size);
	if (inter || size < 2)
		return nullptr;
	void* value = nullptr;
	int found = 0;
	PMPI_Comm_get_attr(comm, s.keyval, &value, &found);
	if (found)
		return static_cast<CommGroup*>(value);
	std::string why;
	std::unique_ptr<CommGroup> g;
	try {
		g = s.endpoint.join(comm, why);
	} catch (const std::exception& e) {
		why = e.what();
	}
	if (!g) {
		std::fprintf(stderr, "rcoll-mpi: rank %d: joining a group failed: %s\n",
			     s.world_rank, why.c_str());
		PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
		error = MPI_ERR_OTHER;
		return nullptr;
	}
	CommGroup* raw = g.release();
	s.groups.insert(raw);
	PMPI_Comm_set_attr(comm, s.keyval, raw);
	return raw;
}

// A contiguous predefined type, in a call of `kind` under its size limit:
// its libfabric name, else nullopt.
std::optional<fi_datatype> offloadable(MPI_Datatype type, int count, Kind kind)
{
	const std::optional<fi_datatype> dtype = count >= 0 ? datatype_of(type) : std::nullopt;
	int type_size = 0;
	if (!dtype || PMPI_Type_size(type, &type_size) != MPI_SUCCESS ||
	    size_t(count) * size_t(type_size) > state().limit[kind])
		return std::nullopt;
	return dtype;
}

// Waits for an operation rcoll accepted (rc == 0); an error goes to the
// communicator's error handler, named after rcoll's error.
int finish(MPI_Comm comm, long rc, Operation& op, const char* what)
{
	State& s = state();
	if (rc == 0 && s.endpoint.wait(op)) {
		s.offloaded++;
		return MPI_SUCCESS;
	}
	const std::string text = rc ? fi_strerror(int(-rc)) : op.error_text;
	std::fprintf(stderr, "rcoll-mpi: rank %d: %s on rcoll failed: %s\n", s.world_rank, what,
		     text.c_str());
	PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
	return MPI_ERR_OTHER;
}

// Whether the call goes to rcoll: a group (joined now if need be) when it
// does; else the MPI's own call runs, or the join's error is returned.
struct Route {
	CommGroup* group = nullptr;
	int error = MPI_SUCCESS;
	bool to_mpi() const { return !group && error == MPI_SUCCESS; }
};

Route route(bool mappable, MPI_Comm comm)
{
	Route r;
	if (mappable)
		r.group = group_of(comm, r.error);
	if (r.to_mpi())
		state().handed_back++;
	return r;
}

fi_addr_t address_of(const CommGroup& g, int root)
{
	return root >= 0 && size_t(root) < g.members.size() ? g.members[size_t(root)]
							     : FI_ADDR_NOTAVAIL;
}

} // namespace
} // namespace rcoll::mpi

using namespace rcoll::mpi;

RCOLL_MPI_ENTRY int MPI_Init(int* argc, char*** argv)
{
	const int rc = PMPI_Init(argc, argv);
	if (rc == MPI_SUCCESS)
		start(MPI_THREAD_SINGLE);
	return rc;
}

RCOLL_MPI_ENTRY int MPI_Init_thread(int* argc, char*** argv, int required, int* provided)
{
	const int rc = PMPI_Init_thread(argc, argv, required, provided);
	if (rc == MPI_SUCCESS)
		start(*provided);
	return rc;
}

RCOLL_MPI_ENTRY int MPI_Finalize(void)
{
	State& s = state();
	if (s.verbose) {
		unsigned long long counts[2] = {s.offloaded, s.handed_back}, totals[2] = {};
		PMPI_Reduce(counts, totals, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (s.world_rank == 0)
			std::fprintf(stderr,
				     "rcoll-mpi: %llu collective calls offloaded, %llu left to the "
				     "MPI (all ranks)\n",
				     totals[0], totals[1]);
	}
	if (s.enabled) {
		drain_requests();
		// Every rank gets here before any closes its groups: a member's
		// last writes into the others' memory are over.
		PMPI_Barrier(MPI_COMM_WORLD);
		for (CommGroup* g : s.groups)
			delete g;
		s.groups.clear();
		PMPI_Comm_free_keyval(&s.keyval);
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

RCOLL_MPI_ENTRY int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
	const auto dtype = offloadable(type, count, kBcast);
	const Route r = route(dtype.has_value(), comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Bcast(buffer, count, type, root, comm) : r.error;
	Operation op;
	const long rc = fi_broadcast(state().endpoint.ep(), buffer, size_t(count), nullptr,
				     r.group->coll_addr, address_of(*r.group, root), *dtype, 0,
				     &op.context);
	return finish(comm, rc, op, "MPI_Bcast");
}

RCOLL_MPI_ENTRY int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op mpi_op,
		  MPI_Comm comm)
{
	const auto dtype = offloadable(type, count, kAllreduce);
	const auto op_code = op_of(mpi_op);
	const Route r = route(dtype && op_code, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Allreduce(sendbuf, recvbuf, count, type, mpi_op, comm)
				  : r.error;
	const void* input = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	Operation op;
	const long rc = fi_allreduce(state().endpoint.ep(), input, size_t(count), nullptr, recvbuf,
				     nullptr, r.group->coll_addr, *dtype, *op_code, 0, &op.context);
	return finish(comm, rc, op, "MPI_Allreduce");
}

RCOLL_MPI_ENTRY int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op mpi_op,
	       int root, MPI_Comm comm)
{
	const auto dtype = offloadable(type, count, kReduce);
	const auto op_code = op_of(mpi_op);
	const Route r = route(dtype && op_code, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Reduce(sendbuf, recvbuf, count, type, mpi_op, root, comm)
				  : r.error;
	const void* input = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	Operation op;
	const long rc = fi_reduce(state().endpoint.ep(), input, size_t(count), nullptr, recvbuf,
				  nullptr, r.group->coll_addr, address_of(*r.group, root), *dtype,
				  *op_code, 0, &op.context);
	return finish(comm, rc, op, "MPI_Reduce");
}

RCOLL_MPI_ENTRY int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
		  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
	const bool in_place = sendbuf == MPI_IN_PLACE;
	const auto dtype = offloadable(recvtype, recvcount, kAllgather);
	const bool same = in_place || (sendtype == recvtype && sendcount == recvcount);
	const Route r = route(dtype && same, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf,
						   recvcount, recvtype, comm)
				  : r.error;
	const void* input = sendbuf;
	if (in_place) {
		// This rank's block is already in place in the result.
		int rank = 0, type_size = 0;
		PMPI_Comm_rank(comm, &rank);
		PMPI_Type_size(recvtype, &type_size);
		input = static_cast<const char*>(recvbuf) +
			size_t(rank) * size_t(recvcount) * size_t(type_size);
	}
	Operation op;
	const long rc = fi_allgather(state().endpoint.ep(), input, size_t(recvcount), nullptr,
				     recvbuf, nullptr, r.group->coll_addr, *dtype, 0, &op.context);
	return finish(comm, rc, op, "MPI_Allgather");
}

// Nonblocking: the same decisions; the request completes through the MPI's
// wait and test calls (requests.cpp).

RCOLL_MPI_ENTRY int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request)
{
	const Route r = route(true, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Ibarrier(comm, request) : r.error;
	Operation* op = start_request(comm, "MPI_Ibarrier", request);
	if (!op)
		return MPI_ERR_INTERN;
	const long rc = fi_barrier(state().endpoint.ep(), r.group->coll_addr, &op->context);
	if (rc)
		return refuse_request(op, rc);
	state().offloaded++;
	return MPI_SUCCESS;
}

RCOLL_MPI_ENTRY int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
	       MPI_Request* request)
{
	const auto dtype = offloadable(type, count, kBcast);
	const Route r = route(dtype.has_value(), comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Ibcast(buffer, count, type, root, comm, request) : r.error;
	Operation* op = start_request(comm, "MPI_Ibcast", request);
	if (!op)
		return MPI_ERR_INTERN;
	const long rc = fi_broadcast(state().endpoint.ep(), buffer, size_t(count), nullptr,
				     r.group->coll_addr, address_of(*r.group, root), *dtype, 0,
				     &op->context);
	if (rc)
		return refuse_request(op, rc);
	state().offloaded++;
	return MPI_SUCCESS;
}

RCOLL_MPI_ENTRY int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type,
		   MPI_Op mpi_op, MPI_Comm comm, MPI_Request* request)
{
	const auto dtype = offloadable(type, count, kAllreduce);
	const auto op_code = op_of(mpi_op);
	const Route r = route(dtype && op_code, comm);
	if (!r.group)
		return r.to_mpi() ? PMPI_Iallreduce(sendbuf, recvbuf, count, type, mpi_op, comm,
						    request)
				  : r.error;
	Operation* op = start_request(comm, "MPI_Iallreduce", request);
	if (!op)
		return MPI_ERR_INTERN;
	const void* input = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	const long rc = fi_allreduce(state().endpoint.ep(), input, size_t(count), nullptr, recvbuf,
				     nullptr, r.group->coll_addr, *dtype, *op_code, 0,
				     &op->context);
	if (rc)
		return refuse_request(op, rc);
	state().offloaded++;
	return MPI_SUCCESS;
}

