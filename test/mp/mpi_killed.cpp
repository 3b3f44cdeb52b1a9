// A rank killed in the middle of offloaded collectives: on every survivor
// the next collective fails through the communicator's error handler
// (called once, with an error, not MPI_SUCCESS) within rcoll's own time
// bounds, and nothing hangs. The launcher must leave the survivors running
// (Open MPI: --mca orte_enable_recovery 1; MPICH: -disable-auto-cleanup).
// A survivor prints its verdict and leaves without MPI_Finalize, which
// would wait for the dead rank. With --exit the victim leaves with _Exit
// instead of SIGKILL (the same to its peers: no MPI_Finalize, no exit
// handler, the kernel closes everything), since MPICH's launcher ends the
// whole job when a process dies of a signal.
#include <mpi.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

int handled = 0;      // calls of the error handler on this rank
int handled_code = 0; // the error code it was given

void count_error(MPI_Comm*, int* code, ...)
{
	++handled;
	handled_code = *code;
}

[[noreturn]] void verdict(int rank, bool passed, const char* text, double seconds)
{
	std::printf("%s [mpi_killed] rank %d: %s (%.2f s)\n", passed ? "PASS" : "FAIL", rank, text,
		    seconds);
	std::printf("# mpi_killed finished (rank %d)\n", rank);
	std::fflush(stdout);
	// A launcher may end the job once a process leaves without
	// MPI_Finalize: the other survivors get time to reach their verdicts.
	sleep(2);
	std::_Exit(passed ? 0 : 1);
}

} // namespace

int main(int argc, char** argv)
{
	MPI_Init(&argc, &argv);
	int rank = 0, size = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	alarm(60); // a hang ends the rank, and the job's check fails
	// MPICH's launcher, told not to clean up, tells the survivors of a death
	// with SIGUSR1, whose default action would end them.
	signal(SIGUSR1, SIG_IGN);
	MPI_Comm comm;
	MPI_Comm_dup(MPI_COMM_WORLD, &comm);
	MPI_Errhandler handler;
	MPI_Comm_create_errhandler(count_error, &handler);
	MPI_Comm_set_errhandler(comm, handler);
	const int victim = size - 1;
	const bool by_exit = argc > 1 && std::string_view(argv[1]) == "--exit";
	using Clock = std::chrono::steady_clock;
	for (int i = 0; i < 100000; ++i) {
		// The victim dies between two calls, with the others already in
		// the next one or about to enter it.
		if (rank == victim && i == 200) {
			if (by_exit)
				std::_Exit(9);
			raise(SIGKILL);
		}
		long long mine = rank + 1, sum = 0;
		const auto start = Clock::now();
		int rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, comm);
		if (rc == MPI_SUCCESS && i % 2)
			rc = MPI_Bcast(&sum, 1, MPI_LONG_LONG, 0, comm);
		const double took = std::chrono::duration<double>(Clock::now() - start).count();
		if (rc == MPI_SUCCESS) {
			if (sum != 1LL * size * (size + 1) / 2)
				verdict(rank, false, "a collective returned a wrong sum", took);
			continue;
		}
		// Call 199 may fail too: a survivor that posted it and was then
		// descheduled can find the death before finishing it.
		if (i < 199)
			verdict(rank, false, "a collective failed before any rank died", took);
		if (handled != 1 || handled_code == MPI_SUCCESS)
			verdict(rank, false, "the error handler did not run once with the error",
				took);
		verdict(rank, true, "the call after the kill failed through the error handler",
			took);
	}
	verdict(rank, false, "every collective succeeded although a rank was killed", 0);
}
