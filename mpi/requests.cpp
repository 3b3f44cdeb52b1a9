// Nonblocking offloaded calls. Each is an MPI generalized request
// (MPI_Grequest_start), which only its creator can complete: the MPI_Wait
// and MPI_Test family are replaced so that, while nonblocking calls are in
// flight, they first drive rcoll and complete the requests whose operations
// finished, then ask the MPI (which also progresses its own requests). A
// wait is a loop of such tests. Meanwhile the progress thread keeps them
// moving (progress.cpp).
#include "offload.hpp"

#include <rdma/fi_errno.h>

#include <cstdio>
#include <list>
#include <mutex>
#include <vector>

namespace rcoll::mpi {
namespace {

struct Pending {
	Nonblocking call;
	std::shared_ptr<CommGroup> group; // closed once its last call is done
	MPI_Request request = MPI_REQUEST_NULL;
	MPI_Comm comm = MPI_COMM_NULL;
	const char* what = "";
	// Under the lock. A request the application frees before it completed
	// stays: MPICH calls release() at MPI_Request_free, while rcoll still
	// owns the operation; the entry goes once the operation finished.
	enum class State { in_flight, completing, completed } state = State::in_flight;
	bool freed = false; // release() came before completed
};

// In flight or not yet freed by the MPI. std::list: an element's address
// (rcoll's operation context) stays put. Threads of an MPI_THREAD_MULTIPLE
// job share it.
std::list<Pending>& pending()
{
	static std::list<Pending> list;
	return list;
}

std::mutex& pending_lock()
{
	static std::mutex lock;
	return lock;
}

int query(void* extra, MPI_Status* status)
{
	auto* p = static_cast<Pending*>(extra);
	MPI_Status_set_elements(status, MPI_BYTE, 0);
	MPI_Status_set_cancelled(status, 0);
	status->MPI_SOURCE = MPI_UNDEFINED;
	status->MPI_TAG = MPI_UNDEFINED;
	status->MPI_ERROR = p->call.op.error ? MPI_ERR_OTHER : MPI_SUCCESS;
	return status->MPI_ERROR;
}

// Under the lock: moves `p` out of the list into `gone`, which its caller
// destroys unlocked (closing a group drives rcoll).
void remove(Pending* p, std::list<Pending>& gone)
{
	for (auto it = pending().begin(); it != pending().end(); ++it)
		if (&*it == p) {
			gone.splice(gone.end(), pending(), it);
			return;
		}
}

int release(void* extra)
{
	auto* p = static_cast<Pending*>(extra);
	std::list<Pending> gone;
	std::lock_guard guard(pending_lock());
	if (p->state == Pending::State::completed)
		remove(p, gone);
	else
		p->freed = true;
	return MPI_SUCCESS;
}

int cancel(void*, int) { return MPI_SUCCESS; } // rcoll cannot cancel a collective

// Requests started and not yet completed; read by the progress thread.
std::atomic<size_t> in_flight_count = 0;

// `p` was claimed (state completing, under the lock): its operation ended.
void complete(Pending& p)
{
	if (p.call.op.error)
		std::fprintf(stderr, "rcoll-mpi: %s on rcoll failed: %s\n", p.what,
			     p.call.op.error_text.c_str());
	else if (p.call.after)
		p.call.after();
	in_flight_count.fetch_sub(1, std::memory_order_relaxed);
	{
		std::list<Pending> gone;
		std::lock_guard guard(pending_lock());
		if (p.freed) {
			// The MPI forgot the request already (MPICH): nothing to
			// complete there.
			remove(&p, gone);
			return;
		}
	}
	// Open MPI may call release() in here, for a request already freed.
	PMPI_Grequest_complete(p.request);
	std::list<Pending> gone;
	std::lock_guard guard(pending_lock());
	p.state = Pending::State::completed;
	if (p.freed)
		remove(&p, gone);
}

} // namespace

bool requests_in_flight() { return in_flight_count.load(std::memory_order_relaxed) != 0; }

Nonblocking* start_request(std::shared_ptr<CommGroup> group, MPI_Comm comm, const char* what,
			   MPI_Request* request)
{
	std::list<Pending>::iterator it;
	{
		std::lock_guard guard(pending_lock());
		it = pending().emplace(pending().end());
	}
	Pending& p = *it;
	p.group = std::move(group);
	p.comm = comm;
	p.what = what;
	if (PMPI_Grequest_start(query, release, cancel, &p, &p.request) != MPI_SUCCESS) {
		std::list<Pending> gone;
		std::lock_guard guard(pending_lock());
		remove(&p, gone);
		return nullptr;
	}
	*request = p.request;
	in_flight_count.fetch_add(1, std::memory_order_relaxed);
	start_progress_thread();
	return &p.call;
}

int refuse_request(Nonblocking* call, long rc, MPI_Request* request)
{
	Pending* p = nullptr;
	{
		std::lock_guard guard(pending_lock());
		for (Pending& each : pending())
			if (&each.call == call && each.state == Pending::State::in_flight) {
				each.state = Pending::State::completing;
				p = &each;
				break;
			}
	}
	if (!p)
		return MPI_ERR_OTHER;
	const MPI_Comm comm = p->comm;
	const int err = int(rc < 0 ? -rc : rc);
	p->call.op.end(err, fi_strerror(err));
	complete(*p);
	// The application gets an error code, not a request: free it (and so
	// its entry) here.
	PMPI_Request_free(request);
	*request = MPI_REQUEST_NULL;
	PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
	return MPI_ERR_OTHER;
}

void poll_requests()
{
	if (!requests_in_flight())
		return;
	Endpoint& endpoint = offload_endpoint();
	endpoint.advance();
	endpoint.abort_if_broken();
	std::vector<Pending*> finished;
	{
		std::lock_guard guard(pending_lock());
		for (Pending& p : pending())
			if (p.state == Pending::State::in_flight &&
			    p.call.op.done.load(std::memory_order_acquire)) {
				p.state = Pending::State::completing;
				finished.push_back(&p);
			}
	}
	// Unlocked: completing may free a request and so its entry.
	for (Pending* p : finished)
		complete(*p);
}

void drain_requests()
{
	while (requests_in_flight())
		poll_requests();
}

} // namespace rcoll::mpi

using namespace rcoll::mpi;

RCOLL_MPI_ENTRY int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status)
{
	poll_requests();
	return PMPI_Test(request, flag, status);
}

RCOLL_MPI_ENTRY int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[])
{
	poll_requests();
	return PMPI_Testall(count, requests, flag, statuses);
}

RCOLL_MPI_ENTRY int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag,
				MPI_Status* status)
{
	poll_requests();
	return PMPI_Testany(count, requests, index, flag, status);
}

RCOLL_MPI_ENTRY int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
				 MPI_Status statuses[])
{
	poll_requests();
	return PMPI_Testsome(incount, requests, outcount, indices, statuses);
}

// While none of ours is in flight, the MPI's own wait (which may block
// efficiently); else a loop of tests.
RCOLL_MPI_ENTRY int MPI_Wait(MPI_Request* request, MPI_Status* status)
{
	for (;;) {
		poll_requests();
		if (!requests_in_flight())
			return PMPI_Wait(request, status);
		int flag = 0;
		const int rc = PMPI_Test(request, &flag, status);
		if (rc != MPI_SUCCESS || flag)
			return rc;
	}
}

RCOLL_MPI_ENTRY int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
	for (;;) {
		poll_requests();
		if (!requests_in_flight())
			return PMPI_Waitall(count, requests, statuses);
		int flag = 0;
		const int rc = PMPI_Testall(count, requests, &flag, statuses);
		if (rc != MPI_SUCCESS || flag)
			return rc;
	}
}

RCOLL_MPI_ENTRY int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status)
{
	for (;;) {
		poll_requests();
		if (!requests_in_flight())
			return PMPI_Waitany(count, requests, index, status);
		int flag = 0;
		const int rc = PMPI_Testany(count, requests, index, &flag, status);
		if (rc != MPI_SUCCESS || flag)
			return rc;
	}
}

RCOLL_MPI_ENTRY int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
				 MPI_Status statuses[])
{
	for (;;) {
		poll_requests();
		if (!requests_in_flight())
			return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
		const int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
		if (rc != MPI_SUCCESS || *outcount != 0)
			return rc;
	}
}
