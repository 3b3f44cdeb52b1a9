// librcoll-mpi: an MPI's collectives offloaded to rcoll groups, through the
// PMPI profiling interface every MPI shares (what hcoll and UCC are to Open
// MPI). Loaded with LD_PRELOAD (or linked before -lmpi), it opens its own
// rcoll endpoint at MPI_Init, joins one rcoll group per communicator at the
// communicator's first offloaded collective, and runs the calls it can map
// onto fi_collective(3) there; everything else goes to the MPI's own PMPI_
// call.
//
//   offload.hpp       what the parts share
//   endpoint.cpp      the rcoll endpoint: opening, names, groups, waiting
//   mapping.cpp       MPI datatypes and operations onto libfabric's
//   interpose.cpp     the MPI_ entry points and the communicator cache
//   requests.cpp      nonblocking calls: generalized requests, and the
//                     MPI_Wait and MPI_Test family that completes them
#pragma once

#include <mpi.h>
#include <rdma/fabric.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

// One operation handed to rcoll: its context, and how it ended.
struct Operation {
	fi_context2 context{}; // first: rcoll may own it while the call runs
	bool done = false;
	int error = 0; // fi_errno of an error completion
	std::string error_text;
};

// A communicator's rcoll group.
struct CommGroup {
	FidPtr<fid_av_set> set;
	FidPtr<fid_mc> mc;
	fi_addr_t coll_addr = FI_ADDR_NOTAVAIL;
	std::vector<fi_addr_t> members; // world address of each communicator rank
};

class Endpoint {
public:
	// Opens rcoll's endpoint and exchanges names over MPI_COMM_WORLD (a
	// collective call). An error text when this rank cannot offload.
	std::string open();
	bool is_open() const { return ep_ != nullptr; }
	// Joins a group of the communicator's members (collective over it).
	// nullptr, with `error` set, when the join failed.
	std::unique_ptr<CommGroup> join(MPI_Comm comm, std::string& error);
	// Progresses until `op` completes; false when the endpoint failed
	// otherwise (the text in op.error_text).
	bool wait(Operation& op);
	// Reads the completions there are (which drives rcoll's progress);
	// false, with `error` set, when the CQ failed.
	bool poll(std::string& error);
	fid_ep* ep() const { return ep_.get(); }
	// Closes everything; groups must be gone.
	void close();

private:
	FidPtr<fid_fabric> fabric_;
	FidPtr<fid_domain> domain_;
	FidPtr<fid_av> av_;
	FidPtr<fid_cq> cq_;
	FidPtr<fid_eq> eq_;
	FidPtr<fid_ep> ep_;
	std::vector<fi_addr_t> world_; // by world rank
};

// The endpoint of this process (interpose.cpp).
Endpoint& offload_endpoint();

// libfabric's name for an MPI datatype that is one of its contiguous
// predefined types, and for an MPI operation on such a type.
std::optional<fi_datatype> datatype_of(MPI_Datatype type);
std::optional<fi_op> op_of(MPI_Op op);

// What `count` elements of `type` carry, by type signature (mapping.cpp):
// `elements` of one predefined type libfabric has. Every rank of a call
// passes the same signature, though not always the same datatype (a derived
// type on one rank, its element type on another): deciding from the
// signature, all ranks decide alike. `dense`: the buffer holds exactly
// those elements in order (a predefined type); else they travel through a
// contiguous copy the MPI makes (Staging).
struct Layout {
	fi_datatype dtype{};
	MPI_Datatype basic = MPI_DATATYPE_NULL;
	size_t basic_size = 0;
	size_t elements = 0;
	bool dense = false;
};
std::optional<Layout> layout_of(MPI_Datatype type, int count);

// The contiguous copies of one call's input and result, when its layout is
// not dense (a send-receive to MPI_COMM_SELF converts, so the MPI's own
// datatype engine does the packing).
class Staging {
public:
	// The input as contiguous elements (`buf` itself when dense).
	const void* gather(const void* buf, int count, MPI_Datatype type, const Layout& l);
	// Where rcoll writes the result (`buf` itself when dense).
	void* result(void* buf, const Layout& l);
	// The result into `buf`'s layout (nothing when dense).
	void scatter(void* buf, int count, MPI_Datatype type, const Layout& l);

private:
	std::vector<std::byte> in_, out_;
};

// A nonblocking call (requests.cpp): the operation to hand rcoll as its
// context, the copies its buffers travel through, and what to do once it
// completed (copy a result back), tied to a generalized request of the
// MPI's that completes once rcoll reports the operation done, while the
// application waits or tests.
struct Nonblocking {
	Operation op;
	Staging staging;
	std::function<void()> after; // on success, before the request completes
};
// nullptr when the MPI refused the request (`*request` is then untouched).
Nonblocking* start_request(MPI_Comm comm, const char* what, MPI_Request* request);
// rcoll refused the operation (`rc` < 0): the request completes with an
// error now. Returns the MPI error code for the call.
int refuse_request(Nonblocking* call, long rc);
// Completes every request whose operation finished (drives rcoll first).
void poll_requests();
// Waits for every nonblocking call still in flight (MPI_Finalize).
void drain_requests();

} // namespace rcoll::mpi
