// Open MPI's own collectives (coll/tuned etc. over pml cm + mtl ofi), with
// results checked exactly: every value is computable on every rank.
#include "mpi_harness.hpp"

#include <chrono>
#include <climits>
#include <cmath>
#include <thread>
#include <time.h>

using namespace mpitest;

namespace {

double monotonic_seconds()
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts); // one clock for all ranks of this host
	return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Each rank in turn arrives 30 ms late; nobody may leave the barrier before
// the late rank entered it.
void barrier(const Suite& s)
{
	for (int late = 0; late < s.size(); ++late) {
		if (s.rank() == late)
			std::this_thread::sleep_for(std::chrono::milliseconds(30));
		const double entered = monotonic_seconds();
		MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
		const double left = monotonic_seconds();
		double late_entry = s.rank() == late ? entered : 0.0;
		MPI_CHECK(MPI_Bcast(&late_entry, 1, MPI_DOUBLE, late, MPI_COMM_WORLD));
		expect(left >= late_entry, "left the barrier %.3f ms before rank %d entered it",
		       (late_entry - left) * 1e3, late);
	}
}

void bcast(const Suite& s)
{
	for (int root = 0; root < s.size(); ++root) {
		for (size_t size : {size_t{1}, size_t{1000}, size_t{65539}, size_t{1} << 20}) {
			std::vector<uint8_t> buf(size, 0);
			if (s.rank() == root)
				fill(buf, static_cast<uint64_t>(root), size);
			MPI_CHECK(MPI_Bcast(buf.data(), static_cast<int>(size), MPI_BYTE, root,
					    MPI_COMM_WORLD));
			expect_filled(buf.data(), size, static_cast<uint64_t>(root), size,
				      strfmt("MPI_Bcast of %zu B from root %d", size, root));
		}
		std::vector<double> values(1000, 0.0);
		if (s.rank() == root)
			for (size_t i = 0; i < values.size(); ++i)
				values[i] = static_cast<double>(i) * 0.5 + root;
		MPI_CHECK(MPI_Bcast(values.data(), 1000, MPI_DOUBLE, root, MPI_COMM_WORLD));
		for (size_t i = 0; i < values.size(); ++i)
			expect(values[i] == static_cast<double>(i) * 0.5 + root,
			       "MPI_Bcast of doubles from %d: [%zu] = %g", root, i, values[i]);
	}
}

// Offloaded calls back to back, then the MPI's own barrier, which rcoll
// never sees: a rank whose calls completed waits there calling nothing of
// rcoll's, so whatever it sent for them must already have left it. Before
// that held, the root of 64 KiB broadcasts between two hosts could run
// ahead and complete while its last message still waited in the core for
// a progress call that never came, and the job hung.
void then_own_barrier(const Suite& s)
{
	for (size_t size : {size_t{8}, size_t{16384}, size_t{65536}, size_t{1} << 20})
		for (int root : {0, s.size() - 1}) {
			std::vector<uint8_t> buf(size, 0);
			for (int i = 0; i < 30; ++i) {
				if (s.rank() == root)
					fill(buf, static_cast<uint64_t>(root), size + i);
				MPI_CHECK(MPI_Bcast(buf.data(), static_cast<int>(size), MPI_BYTE,
						    root, MPI_COMM_WORLD));
			}
			MPI_CHECK(PMPI_Barrier(MPI_COMM_WORLD));
			expect_filled(buf.data(), size, static_cast<uint64_t>(root), size + 29,
				      strfmt("the last of 30 MPI_Bcast of %zu B from root %d", size,
					     root));
			std::vector<long long> in(size / 8, s.rank() + root), out(size / 8, 0);
			for (int i = 0; i < 30; ++i)
				MPI_CHECK(MPI_Allreduce(in.data(), out.data(),
							static_cast<int>(in.size()), MPI_LONG_LONG,
							MPI_SUM, MPI_COMM_WORLD));
			MPI_CHECK(PMPI_Barrier(MPI_COMM_WORLD));
			const long long want =
				static_cast<long long>(s.size()) * (s.size() - 1) / 2 +
				static_cast<long long>(s.size()) * root;
			for (size_t k = 0; k < out.size(); ++k)
				if (out[k] != want) {
					expect(false,
					       "MPI_Allreduce of %zu B: [%zu] = %lld, want %lld",
					       size, k, out[k], want);
					break;
				}
		}
}

// Contribution of `rank` at index i: small integers, so every sum, product
// (of ones and twos), minimum and maximum is exact in every type.
long long contribution(int rank, size_t i)
{
	return static_cast<long long>((static_cast<size_t>(rank) * 7 + i * 13) % 101) - 50;
}

void reduce(const Suite& s)
{
	for (int root = 0; root < s.size(); ++root) {
		for (size_t count : {size_t{1}, size_t{1000}, size_t{100000}}) {
			std::vector<int> in(count), out(count, -1);
			for (size_t i = 0; i < count; ++i)
				in[i] = static_cast<int>(contribution(s.rank(), i));
			MPI_CHECK(MPI_Reduce(in.data(), out.data(), static_cast<int>(count),
					     MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
			if (s.rank() != root)
				continue;
			for (size_t i = 0; i < count; ++i) {
				long long want = 0;
				for (int r = 0; r < s.size(); ++r)
					want += contribution(r, i);
				expect(out[i] == want,
				       "MPI_Reduce(SUM) of %zu ints to root %d: [%zu] = %d, want "
				       "%lld",
				       count, root, i, out[i], want);
			}
		}
	}
}

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<int>()
{
	return MPI_INT;
}
template <>
MPI_Datatype mpi_type<long long>()
{
	return MPI_LONG_LONG;
}
template <>
MPI_Datatype mpi_type<unsigned>()
{
	return MPI_UNSIGNED;
}
template <>
MPI_Datatype mpi_type<float>()
{
	return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>()
{
	return MPI_DOUBLE;
}

enum class Op { sum, prod, min, max, band, bor, bxor, land, lor };

const char* op_name(Op op)
{
	static const char* names[] = {"SUM", "PROD", "MIN",  "MAX", "BAND",
				      "BOR", "BXOR", "LAND", "LOR"};
	return names[static_cast<int>(op)];
}

MPI_Op mpi_op(Op op)
{
	static const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN,  MPI_MAX, MPI_BAND,
				     MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR};
	return ops[static_cast<int>(op)];
}

template <typename T>
T input(Op op, int rank, size_t i)
{
	const long long c = contribution(rank, i);
	switch (op) {
	case Op::prod: return static_cast<T>((c & 1) ? 2 : 1); // product stays small and exact
	case Op::land:
	case Op::lor: return static_cast<T>((c + 50) % 3 == 0 ? 0 : 1);
	case Op::band:
	case Op::bor:
	case Op::bxor: return static_cast<T>((c + 50) * 2654435761u);
	default: return std::is_signed_v<T> ? static_cast<T>(c) : static_cast<T>(c + 50);
	}
}

template <typename T>
T combine(Op op, T a, T b)
{
	switch (op) {
	case Op::sum: return a + b;
	case Op::prod: return a * b;
	case Op::min: return std::min(a, b);
	case Op::max: return std::max(a, b);
	case Op::land: return static_cast<T>(a != 0 && b != 0);
	case Op::lor: return static_cast<T>(a != 0 || b != 0);
	default:
		if constexpr (std::is_integral_v<T>) {
			if (op == Op::band)
				return a & b;
			if (op == Op::bor)
				return a | b;
			return a ^ b;
		}
		return a;
	}
}

template <typename T>
void allreduce_case(const Suite& s, Op op, size_t count, bool in_place)
{
	std::vector<T> in(count), out(count);
	for (size_t i = 0; i < count; ++i)
		in[i] = input<T>(op, s.rank(), i);
	if (in_place) {
		out = in;
		MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, out.data(), static_cast<int>(count),
					mpi_type<T>(), mpi_op(op), MPI_COMM_WORLD));
	} else {
		MPI_CHECK(MPI_Allreduce(in.data(), out.data(), static_cast<int>(count),
					mpi_type<T>(), mpi_op(op), MPI_COMM_WORLD));
	}
	for (size_t i = 0; i < count; ++i) {
		T want = input<T>(op, 0, i);
		for (int r = 1; r < s.size(); ++r)
			want = combine(op, want, input<T>(op, r, i));
		expect(out[i] == want, "MPI_Allreduce(%s%s) of %zu elements: [%zu] = %g, want %g",
		       op_name(op), in_place ? ", MPI_IN_PLACE" : "", count, i,
		       static_cast<double>(out[i]), static_cast<double>(want));
	}
}

template <typename T>
void allreduce_type(const Suite& s, std::initializer_list<Op> ops)
{
	for (Op op : ops)
		for (size_t count : {size_t{1}, size_t{1023}, size_t{262144}})
			for (bool in_place : {false, true})
				allreduce_case<T>(s, op, count, in_place);
}

void allreduce(const Suite& s)
{
	const auto arithmetic = {Op::sum, Op::prod, Op::min, Op::max};
	allreduce_type<int>(s, {Op::sum, Op::prod, Op::min, Op::max, Op::band, Op::bor, Op::bxor,
				Op::land, Op::lor});
	allreduce_type<long long>(s, arithmetic);
	allreduce_type<unsigned>(s, {Op::sum, Op::max, Op::band, Op::bor, Op::bxor});
	allreduce_type<float>(s, arithmetic);
	allreduce_type<double>(s, arithmetic);

	// MAXLOC / MINLOC on (double, int): the value and the rank holding it.
	struct DoubleInt {
		double value;
		int index;
	};
	for (MPI_Op op : {MPI_MAXLOC, MPI_MINLOC}) {
		std::vector<DoubleInt> in(100), out(100);
		for (size_t i = 0; i < in.size(); ++i)
			in[i] = {static_cast<double>(contribution(s.rank(), i)), s.rank()};
		MPI_CHECK(MPI_Allreduce(in.data(), out.data(), 100, MPI_DOUBLE_INT, op,
					MPI_COMM_WORLD));
		for (size_t i = 0; i < in.size(); ++i) {
			DoubleInt want{static_cast<double>(contribution(0, i)), 0};
			for (int r = 1; r < s.size(); ++r) {
				const double v = static_cast<double>(contribution(r, i));
				// Ties go to the lowest rank (MPI-3.1 section 5.9.4).
				if (op == MPI_MAXLOC ? v > want.value : v < want.value)
					want = {v, r};
			}
			expect(out[i].value == want.value && out[i].index == want.index,
			       "MPI_Allreduce(%s) [%zu] = (%g, %d), want (%g, %d)",
			       op == MPI_MAXLOC ? "MAXLOC" : "MINLOC", i, out[i].value,
			       out[i].index, want.value, want.index);
		}
	}
}

void allgather(const Suite& s)
{
	const auto n = static_cast<size_t>(s.size());
	for (size_t block : {size_t{1}, size_t{1000}, size_t{100000}}) {
		std::vector<uint8_t> mine(block), all(block * n, 0);
		fill(mine, static_cast<uint64_t>(s.rank()), block);
		MPI_CHECK(MPI_Allgather(mine.data(), static_cast<int>(block), MPI_BYTE, all.data(),
					static_cast<int>(block), MPI_BYTE, MPI_COMM_WORLD));
		for (size_t r = 0; r < n; ++r)
			expect_filled(all.data() + r * block, block, r, block,
				      strfmt("MPI_Allgather block of rank %zu (%zu B)", r, block));
	}
	// Allgatherv: rank r contributes 1000 * (r + 1) + r bytes.
	std::vector<int> counts(n), displs(n);
	int total = 0;
	for (size_t r = 0; r < n; ++r) {
		counts[r] = static_cast<int>(1000 * (r + 1) + r);
		displs[r] = total;
		total += counts[r];
	}
	std::vector<uint8_t> mine(static_cast<size_t>(counts[static_cast<size_t>(s.rank())]));
	fill(mine, static_cast<uint64_t>(s.rank()), 77);
	std::vector<uint8_t> all(static_cast<size_t>(total), 0);
	MPI_CHECK(MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
				 counts.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD));
	for (size_t r = 0; r < n; ++r)
		expect_filled(all.data() + displs[r], static_cast<size_t>(counts[r]), r, 77,
			      strfmt("MPI_Allgatherv block of rank %zu", r));
}

void alltoall(const Suite& s)
{
	const auto n = static_cast<size_t>(s.size());
	const auto me = static_cast<uint64_t>(s.rank());
	for (size_t block : {size_t{1}, size_t{1000}, size_t{65536}}) {
		std::vector<uint8_t> out(block * n), in(block * n, 0);
		for (size_t dst = 0; dst < n; ++dst)
			fill(out, me, dst * 1000003 + block, dst * block, block);
		MPI_CHECK(MPI_Alltoall(out.data(), static_cast<int>(block), MPI_BYTE, in.data(),
				       static_cast<int>(block), MPI_BYTE, MPI_COMM_WORLD));
		for (size_t src = 0; src < n; ++src)
			expect_filled(
				in.data() + src * block, block, src, me * 1000003 + block,
				strfmt("MPI_Alltoall block from rank %zu (%zu B)", src, block));
	}
	// Alltoallv: src sends (src + dst + 1) * 300 bytes to dst.
	auto bytes = [](size_t src, size_t dst) { return static_cast<int>((src + dst + 1) * 300); };
	std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
	int send_total = 0, recv_total = 0;
	for (size_t p = 0; p < n; ++p) {
		send_counts[p] = bytes(me, p);
		send_displs[p] = send_total;
		send_total += send_counts[p];
		recv_counts[p] = bytes(p, me);
		recv_displs[p] = recv_total;
		recv_total += recv_counts[p];
	}
	std::vector<uint8_t> out(static_cast<size_t>(send_total)),
		in(static_cast<size_t>(recv_total), 0);
	for (size_t dst = 0; dst < n; ++dst)
		fill(out, me, 500 + dst, static_cast<size_t>(send_displs[dst]),
		     static_cast<size_t>(send_counts[dst]));
	MPI_CHECK(MPI_Alltoallv(out.data(), send_counts.data(), send_displs.data(), MPI_BYTE,
				in.data(), recv_counts.data(), recv_displs.data(), MPI_BYTE,
				MPI_COMM_WORLD));
	for (size_t src = 0; src < n; ++src)
		expect_filled(in.data() + recv_displs[src], static_cast<size_t>(recv_counts[src]),
			      src, 500 + me, strfmt("MPI_Alltoallv block from rank %zu", src));
}

void gather_scatter(const Suite& s)
{
	const auto n = static_cast<size_t>(s.size());
	const auto me = static_cast<uint64_t>(s.rank());
	for (int root = 0; root < s.size(); ++root) {
		for (size_t block : {size_t{4}, size_t{50000}}) {
			std::vector<uint8_t> mine(block), all(block * n, 0);
			fill(mine, me, block + static_cast<size_t>(root));
			MPI_CHECK(MPI_Gather(mine.data(), static_cast<int>(block), MPI_BYTE,
					     all.data(), static_cast<int>(block), MPI_BYTE, root,
					     MPI_COMM_WORLD));
			if (s.rank() == root)
				for (size_t r = 0; r < n; ++r)
					expect_filled(
						all.data() + r * block, block, r,
						block + static_cast<size_t>(root),
						strfmt("MPI_Gather to root %d, block of rank %zu",
						       root, r));

			std::vector<uint8_t> source(block * n), piece(block, 0);
			if (s.rank() == root)
				for (size_t r = 0; r < n; ++r)
					fill(source, static_cast<uint64_t>(root), r * 7919 + block,
					     r * block, block);
			MPI_CHECK(MPI_Scatter(source.data(), static_cast<int>(block), MPI_BYTE,
					      piece.data(), static_cast<int>(block), MPI_BYTE, root,
					      MPI_COMM_WORLD));
			expect_filled(piece.data(), block, static_cast<uint64_t>(root),
				      me * 7919 + block,
				      strfmt("MPI_Scatter from root %d (%zu B)", root, block));
		}
	}
}

void reduce_scatter(const Suite& s)
{
	constexpr size_t kBlock = 5000;
	const auto n = static_cast<size_t>(s.size());
	std::vector<long long> in(kBlock * n), out(kBlock);
	for (size_t i = 0; i < in.size(); ++i)
		in[i] = contribution(s.rank(), i);
	MPI_CHECK(MPI_Reduce_scatter_block(in.data(), out.data(), kBlock, MPI_LONG_LONG, MPI_SUM,
					   MPI_COMM_WORLD));
	for (size_t i = 0; i < kBlock; ++i) {
		const size_t global = static_cast<size_t>(s.rank()) * kBlock + i;
		long long want = 0;
		for (int r = 0; r < s.size(); ++r)
			want += contribution(r, global);
		expect(out[i] == want, "MPI_Reduce_scatter_block [%zu] = %lld, want %lld", i,
		       out[i], want);
	}
}

} // namespace

int main(int argc, char** argv)
{
	Suite suite("mpi_coll", &argc, &argv);
	suite.run("barrier", "no rank leaves before the last one (each rank late once) enters",
		  [&] { barrier(suite); });
	suite.run("bcast", "from every root, 1 B..1 MiB bytes and 1000 doubles",
		  [&] { bcast(suite); });
	suite.run("then-own-barrier",
		  "30 MPI_Bcast, then 30 MPI_Allreduce, of 8 B..1 MiB back to back, then "
		  "PMPI_Barrier",
		  [&] { then_own_barrier(suite); });
	suite.run("reduce", "MPI_SUM of ints to every root, 1..100000 elements",
		  [&] { reduce(suite); });
	suite.run("allreduce",
		  "SUM/PROD/MIN/MAX/bitwise/logical on int, long long, unsigned, float, double, "
		  "1..262144 elements, "
		  "in place too; MAXLOC/MINLOC",
		  [&] { allreduce(suite); });
	suite.run("allgather", "MPI_Allgather 1 B..100 kB blocks and MPI_Allgatherv",
		  [&] { allgather(suite); });
	suite.run("alltoall", "MPI_Alltoall 1 B..64 KiB blocks and MPI_Alltoallv",
		  [&] { alltoall(suite); });
	suite.run("gather-scatter", "MPI_Gather and MPI_Scatter at every root",
		  [&] { gather_scatter(suite); });
	suite.run("reduce-scatter", "MPI_Reduce_scatter_block of long longs",
		  [&] { reduce_scatter(suite); });
	return suite.exit_code();
}
