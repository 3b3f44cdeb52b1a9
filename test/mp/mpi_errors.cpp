// Errors under an offload library: a rank that enters a collective long
// after FI_RCOLL_COLL_TIMEOUT_MS (run-mpi-offload.sh sets 1000 ms) makes the
// others' calls fail, through the communicator's error handler and within
// a bound, and its own late call fails too; the job goes on with a new
// communicator. Without the library the late rank only delays the others.
#include "mpi_harness.hpp"

#include <unistd.h>

#include <chrono>

using namespace mpitest;

namespace {

int handled = 0; // calls of the error handler on this rank

void count_error(MPI_Comm*, int*, ...) { ++handled; }

void late_member(const Suite& s)
{
	const int me = s.rank(), late = s.size() - 1;
	MPI_Comm comm;
	MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
	MPI_Errhandler handler;
	MPI_CHECK(MPI_Comm_create_errhandler(count_error, &handler));
	MPI_CHECK(MPI_Comm_set_errhandler(comm, handler));
	long long one = 1, sum = 0;
	for (int i = 0; i < 100; ++i) {
		MPI_CHECK(MPI_Allreduce(&one, &sum, 1, MPI_LONG_LONG, MPI_SUM, comm));
		expect(sum == s.size(), "allreduce before: %lld", sum);
	}

	if (me == late)
		::sleep(3);
	const auto start = std::chrono::steady_clock::now();
	const int rc = MPI_Allreduce(&one, &sum, 1, MPI_LONG_LONG, MPI_SUM, comm);
	const double took =
		std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	expect(rc != MPI_SUCCESS, "rank %d: the allreduce succeeded although rank %d came 3 s late",
	       me, late);
	expect(handled == 1, "rank %d: the error handler ran %d times, want once", me, handled);
	expect(took < 8.0, "rank %d: the failing allreduce took %.1f s", me, took);

	// The job goes on: a new communicator works.
	MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
	MPI_Comm fresh;
	MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &fresh));
	long long mine = me + 1, total = 0;
	MPI_CHECK(MPI_Allreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, fresh));
	expect(total == 1LL * s.size() * (s.size() + 1) / 2, "allreduce after: %lld", total);
	MPI_CHECK(MPI_Comm_free(&fresh));
	MPI_CHECK(MPI_Comm_free(&comm));
	MPI_CHECK(MPI_Errhandler_free(&handler));
}

} // namespace

int main(int argc, char** argv)
{
	Suite suite("mpi_errors", &argc, &argv);
	suite.run("late-member",
		  "a rank 3 s late into an allreduce: every rank's call fails through the "
		  "communicator's error handler within 8 s, and a new communicator works",
		  [&] { late_member(suite); });
	return suite.exit_code();
}
