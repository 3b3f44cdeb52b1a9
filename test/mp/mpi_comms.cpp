// Communicators and requests under an offload library: collectives on
// duplicates, splits and MPI_Comm_create results give the right answers;
// creating and freeing communicators many times leaks nothing (file
// descriptors and mappings of the process stay level); nonblocking
// collectives overlap with computation and point-to-point traffic and
// complete through every call of the MPI_Wait and MPI_Test family; ranks
// may describe a call's data with different datatypes of one signature.
// run-mpi-offload.sh runs it with librcoll-mpi. Without it, Open MPI 4.1's
// own collectives hang in the "signatures" check at 3 ranks (its tuned
// algorithms split a call by datatype count, which then differs between
// ranks); the other checks pass there too.
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

void nonblocking(const Suite& s)
{
	const int me = s.rank(), p = s.size();
	const int last = p - 1;
	// Three collectives and a ring exchange in flight at once, completed by
	// one MPI_Waitall.
	std::vector<double> shared(1000, -1.0);
	if (me == last)
		for (size_t i = 0; i < shared.size(); ++i)
			shared[i] = 0.5 * double(i) + last;
	std::vector<long long> in(5000), sum(5000, -1), inplace(300);
	for (size_t i = 0; i < in.size(); ++i)
		in[i] = 7LL * static_cast<long long>(i) + me;
	for (size_t i = 0; i < inplace.size(); ++i)
		inplace[i] = me + 1;
	MPI_Request req[6];
	MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req[0]));
	MPI_CHECK(MPI_Ibcast(shared.data(), 1000, MPI_DOUBLE, last, MPI_COMM_WORLD, &req[1]));
	MPI_CHECK(MPI_Iallreduce(in.data(), sum.data(), 5000, MPI_LONG_LONG, MPI_SUM,
				 MPI_COMM_WORLD, &req[2]));
	MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, inplace.data(), 300, MPI_LONG_LONG, MPI_MAX,
				 MPI_COMM_WORLD, &req[3]));
	int from_left = -1, mine = me;
	MPI_CHECK(MPI_Irecv(&from_left, 1, MPI_INT, (me + p - 1) % p, 5, MPI_COMM_WORLD, &req[4]));
	MPI_CHECK(MPI_Isend(&mine, 1, MPI_INT, (me + 1) % p, 5, MPI_COMM_WORLD, &req[5]));
	volatile double work = 0;
	for (int i = 0; i < 100000; ++i)
		work = work + i * 1e-9;
	MPI_CHECK(MPI_Waitall(6, req, MPI_STATUSES_IGNORE));
	for (size_t i = 0; i < shared.size(); ++i)
		expect(shared[i] == 0.5 * double(i) + last, "MPI_Ibcast [%zu] = %g", i, shared[i]);
	for (size_t i = 0; i < sum.size(); ++i) {
		const long long want = 7LL * static_cast<long long>(i) * p + 1LL * p * (p - 1) / 2;
		expect(sum[i] == want, "MPI_Iallreduce [%zu] = %lld, want %lld", i, sum[i], want);
	}
	for (long long v : inplace)
		expect(v == p, "MPI_Iallreduce in place: %lld, want %d", v, p);
	expect(from_left == (me + p - 1) % p, "ring exchange beside the collectives: %d",
	       from_left);

	// MPI_Test until done; MPI_Wait; MPI_Waitany and MPI_Waitsome over two.
	long long x = me, total = -1;
	MPI_Request one;
	MPI_CHECK(MPI_Iallreduce(&x, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD, &one));
	int flag = 0;
	for (long polls = 0; !flag; ++polls) {
		MPI_CHECK(MPI_Test(&one, &flag, MPI_STATUS_IGNORE));
		expect(polls < 100000000, "MPI_Test never reported the MPI_Iallreduce done");
	}
	expect(total == 1LL * p * (p - 1) / 2, "MPI_Iallreduce by MPI_Test: %lld", total);
	MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &one));
	MPI_CHECK(MPI_Wait(&one, MPI_STATUS_IGNORE));
	expect(one == MPI_REQUEST_NULL, "MPI_Wait left the request active");
	MPI_Request two[2];
	long long a = 1, b = 2, ra = 0, rb = 0;
	MPI_CHECK(MPI_Iallreduce(&a, &ra, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD, &two[0]));
	MPI_CHECK(MPI_Iallreduce(&b, &rb, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD, &two[1]));
	int index = -1, done = 0;
	MPI_CHECK(MPI_Waitany(2, two, &index, MPI_STATUS_IGNORE));
	expect(index == 0 || index == 1, "MPI_Waitany index %d", index);
	done++;
	while (done < 2) {
		int count = 0, which[2];
		MPI_CHECK(MPI_Waitsome(2, two, &count, which, MPI_STATUSES_IGNORE));
		expect(count != MPI_UNDEFINED, "MPI_Waitsome found nothing active");
		done += count;
	}
	expect(ra == p && rb == 2LL * p, "MPI_Waitany/MPI_Waitsome results %lld %lld", ra, rb);
}

// Ranks describe the same data with different datatypes of one type
// signature, as MPI allows: an offload library that decided from the
// datatype rather than the signature would send the ranks different ways
// and hang.
void signatures(const Suite& s)
{
	const int me = s.rank(), p = s.size();
	MPI_Datatype pair, strided;
	MPI_CHECK(MPI_Type_contiguous(2, MPI_INT, &pair));
	MPI_CHECK(MPI_Type_commit(&pair));
	// Three ints, one every other slot.
	MPI_CHECK(MPI_Type_vector(3, 1, 2, MPI_INT, &strided));
	MPI_CHECK(MPI_Type_commit(&strided));

	// Allreduce of 6 ints: plain on even ranks, three pairs on odd ones.
	std::vector<int> in(6), out(6, -1);
	for (int i = 0; i < 6; ++i)
		in[static_cast<size_t>(i)] = 10 * i + me;
	if (me % 2 == 0)
		MPI_CHECK(
			MPI_Allreduce(in.data(), out.data(), 6, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
	else
		MPI_CHECK(MPI_Allreduce(in.data(), out.data(), 3, pair, MPI_SUM, MPI_COMM_WORLD));
	for (int i = 0; i < 6; ++i)
		expect(out[static_cast<size_t>(i)] == 10 * i * p + p * (p - 1) / 2,
		       "allreduce of mixed datatypes [%d] = %d", i, out[static_cast<size_t>(i)]);

	// Broadcast of 3 ints: strided at the root (rank 0), plain elsewhere.
	std::vector<int> spread(6, -1), plain(3, -1);
	if (me == 0) {
		for (int i = 0; i < 3; ++i)
			spread[static_cast<size_t>(2 * i)] = 100 + i;
		MPI_CHECK(MPI_Bcast(spread.data(), 1, strided, 0, MPI_COMM_WORLD));
	} else {
		MPI_CHECK(MPI_Bcast(plain.data(), 3, MPI_INT, 0, MPI_COMM_WORLD));
		for (int i = 0; i < 3; ++i)
			expect(plain[static_cast<size_t>(i)] == 100 + i,
			       "bcast into ints [%d] = %d", i, plain[static_cast<size_t>(i)]);
	}
	// And the other way: plain at the root, strided on the others.
	if (me == 0) {
		plain = {7, 8, 9};
		MPI_CHECK(MPI_Bcast(plain.data(), 3, MPI_INT, 0, MPI_COMM_WORLD));
	} else {
		spread.assign(6, -1);
		MPI_CHECK(MPI_Bcast(spread.data(), 1, strided, 0, MPI_COMM_WORLD));
		for (int i = 0; i < 3; ++i) {
			expect(spread[static_cast<size_t>(2 * i)] == 7 + i,
			       "bcast into a vector [%d]", 2 * i);
			expect(spread[static_cast<size_t>(2 * i + 1)] == -1,
			       "bcast wrote the vector's gap [%d]", 2 * i + 1);
		}
	}

	// Allgather of 2 ints per rank: one pair on odd ranks.
	std::vector<int> mine = {me, -me}, all(2 * static_cast<size_t>(p), 0);
	if (me % 2 == 0)
		MPI_CHECK(MPI_Allgather(mine.data(), 2, MPI_INT, all.data(), 2, MPI_INT,
					MPI_COMM_WORLD));
	else
		MPI_CHECK(MPI_Allgather(mine.data(), 1, pair, all.data(), 1, pair, MPI_COMM_WORLD));
	for (int r = 0; r < p; ++r)
		expect(all[2 * static_cast<size_t>(r)] == r &&
			       all[2 * static_cast<size_t>(r) + 1] == -r,
		       "allgather of mixed datatypes, block %d", r);
	MPI_CHECK(MPI_Type_free(&strided));
	MPI_CHECK(MPI_Type_free(&pair));
}

} // namespace

int main(int argc, char** argv)
{
	Suite suite("mpi_comms", &argc, &argv);
	suite.run("derived", "MPI_Comm_dup, _split, _create and _split_type, and MPI_COMM_WORLD",
		  [&] { derived(suite); });
	suite.run("nonblocking",
		  "MPI_Ibarrier, MPI_Ibcast, MPI_Iallreduce (in place too) beside point-to-point "
		  "and computation, completed by MPI_Waitall, _Test, _Wait, _Waitany and _Waitsome",
		  [&] { nonblocking(suite); });
	suite.run("signatures",
		  "allreduce, bcast and allgather where ranks pass different datatypes of one "
		  "type signature (contiguous and vector types against their element type)",
		  [&] { signatures(suite); });
	suite.run("cycles",
		  "1000 MPI_Comm_dup/free cycles with collectives leak no descriptor or "
		  "mapping",
		  [&] { cycles(suite); });
	return suite.exit_code();
}
