// MPI_THREAD_MULTIPLE under an offload library: threads run collectives at
// once, each on its own communicator (blocking and nonblocking, with
// derived datatypes whose copies the library stages), and every result is
// checked. run-mpi-offload.sh runs it with librcoll-mpi.
#include "mpi_harness.hpp"

#include <string>
#include <thread>
#include <vector>

using namespace mpitest;

namespace {

constexpr int kThreads = 3;
constexpr int kRounds = 150;

// One thread's calls on its communicator; an error text, empty when all
// were right.
std::string work(MPI_Comm comm, int thread)
{
	try {
		int me = 0, p = 0;
		MPI_CHECK(MPI_Comm_rank(comm, &me));
		MPI_CHECK(MPI_Comm_size(comm, &p));
		MPI_Datatype pair;
		MPI_CHECK(MPI_Type_contiguous(2, MPI_INT, &pair));
		MPI_CHECK(MPI_Type_commit(&pair));
		for (int round = 0; round < kRounds; ++round) {
			const int key = 1000 * thread + round;
			const size_t n = static_cast<size_t>(1 + (round * 37) % 700);
			std::vector<long long> in(n), sum(n, -1);
			for (size_t i = 0; i < n; ++i)
				in[i] = key + me + static_cast<long long>(i);
			MPI_CHECK(MPI_Allreduce(in.data(), sum.data(), static_cast<int>(n),
						MPI_LONG_LONG, MPI_SUM, comm));
			for (size_t i = 0; i < n; ++i)
				expect(sum[i] == p * (key + static_cast<long long>(i)) +
							 1LL * p * (p - 1) / 2,
				       "thread %d round %d: allreduce [%zu] = %lld", thread, round,
				       i, sum[i]);

			// Broadcast of 4 ints from a moving root: two pairs on odd
			// ranks (staged through the library's copies).
			const int root = round % p;
			std::vector<int> data(4, -1);
			if (me == root)
				data = {key, key + 1, key + 2, key + 3};
			if (me % 2)
				MPI_CHECK(MPI_Bcast(data.data(), 2, pair, root, comm));
			else
				MPI_CHECK(MPI_Bcast(data.data(), 4, MPI_INT, root, comm));
			for (int i = 0; i < 4; ++i)
				expect(data[static_cast<size_t>(i)] == key + i,
				       "thread %d round %d: bcast [%d] = %d", thread, round, i,
				       data[static_cast<size_t>(i)]);

			long long mine = key + me, total = -1;
			MPI_Request req;
			MPI_CHECK(MPI_Iallreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, comm,
						 &req));
			MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
			expect(total == 1LL * p * key + 1LL * p * (p - 1) / 2,
			       "thread %d round %d: iallreduce %lld", thread, round, total);
			if (round % 10 == 0)
				MPI_CHECK(MPI_Barrier(comm));
		}
		MPI_CHECK(MPI_Type_free(&pair));
	} catch (const std::exception& e) {
		return e.what();
	}
	return "";
}

void concurrent(const Suite&)
{
	std::vector<MPI_Comm> comms(kThreads);
	for (MPI_Comm& c : comms)
		MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
	std::vector<std::string> errors(kThreads);
	std::vector<std::thread> threads;
	for (int t = 0; t < kThreads; ++t)
		threads.emplace_back([&, t] {
			errors[static_cast<size_t>(t)] = work(comms[static_cast<size_t>(t)], t);
		});
	for (std::thread& t : threads)
		t.join();
	for (MPI_Comm& c : comms)
		MPI_CHECK(MPI_Comm_free(&c));
	for (const std::string& e : errors)
		expect(e.empty(), "%s", e.c_str());
}

} // namespace

int main(int argc, char** argv)
{
	Suite suite("mpi_threads", &argc, &argv, MPI_THREAD_MULTIPLE);
	suite.run("concurrent",
		  std::to_string(kThreads) + " threads, each on its own communicator, " +
			  std::to_string(kRounds) +
			  " rounds of allreduce, bcast (ints or pairs by rank), iallreduce and "
			  "barrier at once",
		  [&] { concurrent(suite); });
	return suite.exit_code();
}
