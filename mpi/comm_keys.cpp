// Communicator keys. rcoll tells the groups of one member list apart by a
// key given at fi_av_set, or else by the order of their joins; threads of an
// MPI_THREAD_MULTIPLE job start the joins of different communicators in any
// order, and so do nonblocking calls on different communicators; so each
// communicator gets a key that is the same on all its members and differs
// between communicators. It comes without communication: a communicator made
// from a parent by a call collective over the parent (dup, split,
// split_type, create, the topology constructors, an intercommunicator's
// merge) takes the parent's key mixed with how many communicators were made
// from that parent before, which is the same on every member because MPI
// orders the collective calls on one communicator. MPI_COMM_WORLD has a
// fixed key. Communicators made by calls not seen here have none, and their
// collectives stay with the MPI: MPI_Comm_create_group (its calls on one
// parent are not ordered between groups), MPI_Comm_idup (its communicator
// is not usable at return), intercommunicators made by
// MPI_Intercomm_create.
#include "offload.hpp"

namespace rcoll::mpi {
namespace {

struct CommKey {
	uint64_t value = 0;
	uint64_t children = 0; // communicators made from this one so far
};

int keyval = MPI_KEYVAL_INVALID;
CommKey world_key{0x72636f6c6c2d776fULL, 0};

int delete_key(MPI_Comm, int, void* value, void*)
{
	delete static_cast<CommKey*>(value);
	return MPI_SUCCESS;
}

CommKey* key_of(MPI_Comm comm)
{
	if (comm == MPI_COMM_WORLD)
		return &world_key;
	if (keyval == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL)
		return nullptr;
	void* value = nullptr;
	int found = 0;
	PMPI_Comm_get_attr(comm, keyval, &value, &found);
	return found ? static_cast<CommKey*>(value) : nullptr;
}

// splitmix64's finaliser (Steele et al. 2014).
uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

// After a call that made `child` from `parent` on every member of the
// parent (MPI_COMM_NULL where this rank got none).
int derive(int rc, MPI_Comm parent, MPI_Comm* child)
{
	if (rc != MPI_SUCCESS)
		return rc;
	CommKey* p = key_of(parent);
	if (!p)
		return rc;
	const uint64_t ordinal = p->children++; // counted on every member
	if (*child == MPI_COMM_NULL || keyval == MPI_KEYVAL_INVALID)
		return rc;
	PMPI_Comm_set_attr(*child, keyval, new CommKey{mix(p->value ^ mix(ordinal)), 0});
	return rc;
}

} // namespace

void init_comm_keys()
{
	world_key.children = 0;
	PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_key, &keyval, nullptr);
}

void free_comm_keys()
{
	if (keyval != MPI_KEYVAL_INVALID)
		PMPI_Comm_free_keyval(&keyval);
}

std::optional<uint64_t> comm_key(MPI_Comm comm)
{
	const CommKey* k = key_of(comm);
	return k ? std::optional(k->value) : std::nullopt;
}

} // namespace rcoll::mpi

using namespace rcoll::mpi;

RCOLL_MPI_ENTRY int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm)
{
	return derive(PMPI_Comm_dup(comm, newcomm), comm, newcomm);
}

RCOLL_MPI_ENTRY int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* newcomm)
{
	return derive(PMPI_Comm_dup_with_info(comm, info, newcomm), comm, newcomm);
}

RCOLL_MPI_ENTRY int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm)
{
	return derive(PMPI_Comm_split(comm, color, key, newcomm), comm, newcomm);
}

RCOLL_MPI_ENTRY int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info,
					MPI_Comm* newcomm)
{
	return derive(PMPI_Comm_split_type(comm, split_type, key, info, newcomm), comm, newcomm);
}

RCOLL_MPI_ENTRY int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* newcomm)
{
	return derive(PMPI_Comm_create(comm, group, newcomm), comm, newcomm);
}

RCOLL_MPI_ENTRY int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[],
				    int reorder, MPI_Comm* newcomm)
{
	return derive(PMPI_Cart_create(comm, ndims, dims, periods, reorder, newcomm), comm,
		      newcomm);
}

RCOLL_MPI_ENTRY int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm* newcomm)
{
	return derive(PMPI_Cart_sub(comm, remain_dims, newcomm), comm, newcomm);
}

RCOLL_MPI_ENTRY int MPI_Graph_create(MPI_Comm comm, int nnodes, const int index[],
				     const int edges[], int reorder, MPI_Comm* newcomm)
{
	return derive(PMPI_Graph_create(comm, nnodes, index, edges, reorder, newcomm), comm,
		      newcomm);
}

RCOLL_MPI_ENTRY int MPI_Dist_graph_create(MPI_Comm comm, int n, const int sources[],
					  const int degrees[], const int destinations[],
					  const int weights[], MPI_Info info, int reorder,
					  MPI_Comm* newcomm)
{
	return derive(PMPI_Dist_graph_create(comm, n, sources, degrees, destinations, weights, info,
					     reorder, newcomm),
		      comm, newcomm);
}

RCOLL_MPI_ENTRY int MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, const int sources[],
						   const int sourceweights[], int outdegree,
						   const int destinations[],
						   const int destweights[], MPI_Info info,
						   int reorder, MPI_Comm* newcomm)
{
	return derive(PMPI_Dist_graph_create_adjacent(comm, indegree, sources, sourceweights,
						      outdegree, destinations, destweights, info,
						      reorder, newcomm),
		      comm, newcomm);
}

RCOLL_MPI_ENTRY int MPI_Intercomm_merge(MPI_Comm intercomm, int high, MPI_Comm* newcomm)
{
	return derive(PMPI_Intercomm_merge(intercomm, high, newcomm), intercomm, newcomm);
}
