// Communicators under an offload library: collectives on duplicates,
// splits and MPI_Comm_create results give the right answers, and creating
// and freeing communicators many times leaks nothing (file descriptors and
// mappings of the process stay level). Runs with or without librcoll-mpi.
#include "mpi_harness.hpp"

#include <dirent.h>

#include <fstream>
#include <string>

using namespace mpitest;

namespace {

// An allreduce and a broadcast on `comm`, checked against closed forms.
void check_comm(MPI_Comm comm, int key)
{
	int rank = 0, size = 0;
	MPI_CHECK(MPI_Comm_rank(comm, &rank));
	MPI_CHECK(MPI_Comm_size(comm, &size));
	long long mine = 1000LL * key + rank, sum = 0;
	MPI_CHECK(MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, comm));
	const long long want = 1000LL * key * size + 1LL * size * (size - 1) / 2;
	expect(sum == want, "allreduce on a communicator of %d: %lld, want %lld", size, sum, want);
	int value = rank == size - 1 ? key * 7 : -1;
	MPI_CHECK(MPI_Bcast(&value, 1, MPI_INT, size - 1, comm));
	expect(value == key * 7, "bcast from the last rank: %d, want %d", value, key * 7);
	MPI_CHECK(MPI_Barrier(comm));
}

size_t count_entries(const char* dir)
{
	size_t n = 0;
	if (DIR* d = opendir(dir)) {
		while (readdir(d))
			++n;
		closedir(d);
	}
	return n;
}

size_t count_mappings()
{
	std::ifstream maps("/proc/self/maps");
	std::string line;
	size_t n = 0;
	while (std::getline(maps, line))
		++n;
	return n;
}

void derived(const Suite& s)
{
	MPI_Comm dup, split, even;
	MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
	check_comm(dup, 1);
	MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, s.rank() % 2, s.size() - s.rank(), &split));
	check_comm(split, 2);
	MPI_Group world, evens;
	MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
	std::vector<int> ranks;
	for (int r = 0; r < s.size(); r += 2)
		ranks.push_back(r);
	MPI_CHECK(MPI_Group_incl(world, static_cast<int>(ranks.size()), ranks.data(), &evens));
	MPI_CHECK(MPI_Comm_create(MPI_COMM_WORLD, evens, &even));
	if (even != MPI_COMM_NULL) {
		check_comm(even, 3);
		MPI_CHECK(MPI_Comm_free(&even));
	}
	MPI_Comm node;
	MPI_CHECK(
		MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
	check_comm(node, 4);
	check_comm(MPI_COMM_WORLD, 5);
	MPI_CHECK(MPI_Group_free(&evens));
	MPI_CHECK(MPI_Group_free(&world));
	MPI_CHECK(MPI_Comm_free(&node));
	MPI_CHECK(MPI_Comm_free(&split));
	MPI_CHECK(MPI_Comm_free(&dup));
}

void cycles(const Suite&)
{
	auto one = [](int key) {
		MPI_Comm c;
		MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
		check_comm(c, key);
		MPI_CHECK(MPI_Comm_free(&c));
	};
	// The first cycles open what stays open (connections, pools).
	for (int i = 0; i < 20; ++i)
		one(i);
	const size_t fds = count_entries("/proc/self/fd"), maps = count_mappings();
	for (int i = 0; i < 1000; ++i)
		one(i);
	const size_t fds_after = count_entries("/proc/self/fd"), maps_after = count_mappings();
	expect(fds_after <= fds + 4, "1000 communicator cycles: %zu open descriptors, were %zu",
	       fds_after, fds);
	expect(maps_after <= maps + 8, "1000 communicator cycles: %zu mappings, were %zu",
	       maps_after, maps);
}

} // namespace

int main(int argc, char** argv)
{
	Suite suite("mpi_comms", &argc, &argv);
	suite.run("derived", "MPI_Comm_dup, _split, _create and _split_type, and MPI_COMM_WORLD",
		  [&] { derived(suite); });
	suite.run("cycles",
		  "1000 MPI_Comm_dup/free cycles with collectives leak no descriptor or "
		  "mapping",
		  [&] { cycles(suite); });
	return suite.exit_code();
}
