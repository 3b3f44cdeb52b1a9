/*
 * rcoll's extensions to the libfabric API (see fi_rcoll(7), EXTENSIONS).
 */
#ifndef FI_EXT_RCOLL_H
#define FI_EXT_RCOLL_H

#include <rdma/fi_collective.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Collectives that may end inside the call: fi_open_ops(&ep->fid,
 * FI_RCOLL_FINISHING_COLL_OPS, 0, (void **) &ops, NULL) on an endpoint with
 * FI_COLLECTIVE gives a struct fi_rcoll_finishing_coll_ops. Its functions
 * take the arguments of the endpoint's collectives (fi_barrier, fi_broadcast,
 * fi_allreduce, ...). A call among members on one host that can run to its
 * end while the caller would only wait for it anyway (every member is on
 * this host, no earlier call of the group is in flight) is driven in the
 * call, for up to FI_RCOLL_SPIN_US (at most 50 us, less once another thread
 * waits for the endpoint's domain); if it ends there successfully, it
 * returns FI_RCOLL_FINISHED, reports no completion, and its buffers are the
 * caller's again. Otherwise it behaves as the standard call:
 * 0 (posted; its completion, an error one if it failed, comes through the
 * completion queue), or a negative error code (not posted). A blocking
 * collective (an MPI's) saves the completion's round trip through the queue.
 */
#define FI_RCOLL_FINISHING_COLL_OPS "rcoll_finishing_coll_ops_v1"
#define FI_RCOLL_FINISHED 1

struct fi_rcoll_finishing_coll_ops {
	size_t size; /* sizeof(struct fi_rcoll_finishing_coll_ops) */
	struct fi_ops_collective coll;
};

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_RCOLL_H */
