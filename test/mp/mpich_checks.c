/* MPI programs run by test/mp/run-mpich.sh under an OFI build of MPICH, one
 * per command-line argument:
 *   user-op      MPI_Allreduce with a user-defined operation on 3 doubles,
 *                counts 1, 4, ... 1M, every element checked
 *   nonblocking  Iallreduce, Ibcast, Ibarrier and Iallgather in flight at
 *                once on 4 duplicated communicators, checked
 *   finalize     ranks 1.. send to rank 0 and finalize before rank 0 has
 *                posted its receives; rank 0 receives every message intact
 *   rma          MPI_Put, MPI_Get and MPI_Accumulate in fenced epochs, checked
 * Prints "PASS <name>: <detail>" from rank 0, or "FAIL <name>: <why>" from
 * the rank that saw it (and exits 1). */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

static void fail(const char* name, const char* what, long index, double got, double want)
{
	printf("FAIL %s: rank %d: %s at %ld: got %.17g, expected %.17g\n", name, rank, what, index,
	       got, want);
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---------------------------------------------------------------- user-op */

typedef struct {
	double x, y, z;
} Triple;

/* Componentwise: x summed, y the maximum, z the product of signs times the
 * smallest magnitude; not commutative-looking, but it is, so MPI may
 * reorder it. */
static void combine(void* in, void* inout, int* len, MPI_Datatype* type)
{
	(void)type;
	const Triple* a = in;
	Triple* b = inout;
	for (int i = 0; i < *len; i++) {
		b[i].x += a[i].x;
		b[i].y = a[i].y > b[i].y ? a[i].y : b[i].y;
		b[i].z = a[i].z < b[i].z ? a[i].z : b[i].z;
	}
}

static int user_op(void)
{
	MPI_Datatype triple;
	MPI_Type_contiguous(3, MPI_DOUBLE, &triple);
	MPI_Type_commit(&triple);
	MPI_Op op;
	MPI_Op_create(combine, 1, &op);
	long checked = 0;
	for (long count = 1; count <= (1L << 20); count *= 4) {
		Triple* in = malloc((size_t)count * sizeof(Triple));
		Triple* out = malloc((size_t)count * sizeof(Triple));
		for (long i = 0; i < count; i++) {
			in[i].x = (double)(rank + 1) * (double)(i % 1000);
			in[i].y = (double)((rank * 7 + i) % 13);
			in[i].z = (double)((rank + 3) * (i % 5 + 1));
		}
		MPI_Allreduce(in, out, (int)count, triple, op, MPI_COMM_WORLD);
		for (long i = 0; i < count; i++) {
			const double want_x = (double)size * (size + 1) / 2 * (double)(i % 1000);
			double want_y = 0, want_z = 1e300;
			for (int r = 0; r < size; r++) {
				const double y = (double)((r * 7 + i) % 13),
					     z = (double)((r + 3) * (i % 5 + 1));
				want_y = y > want_y ? y : want_y;
				want_z = z < want_z ? z : want_z;
			}
			if (out[i].x != want_x)
				fail("user-op", "sum", i, out[i].x, want_x);
			if (out[i].y != want_y)
				fail("user-op", "max", i, out[i].y, want_y);
			if (out[i].z != want_z)
				fail("user-op", "min", i, out[i].z, want_z);
		}
		checked += count;
		free(in);
		free(out);
	}
	MPI_Op_free(&op);
	MPI_Type_free(&triple);
	if (rank == 0)
		printf("PASS user-op: user-defined allreduce of 3 doubles, counts 1..1M, %ld "
		       "elements checked "
		       "at %d ranks\n",
		       checked, size);
	return 0;
}

/* ------------------------------------------------------------ nonblocking */

enum { kComms = 4, kCount = 4096 };

static int nonblocking(void)
{
	MPI_Comm comms[kComms];
	for (int c = 0; c < kComms; c++)
		MPI_Comm_dup(MPI_COMM_WORLD, &comms[c]);
	static long sum_in[kComms][kCount], sum_out[kComms][kCount], bcast[kComms][kCount];
	long* gathered[kComms];
	MPI_Request requests[4 * kComms];
	MPI_Status statuses[4 * kComms];
	int n = 0;
	for (int round = 0; round < 20; round++) {
		n = 0;
		for (int c = 0; c < kComms; c++) {
			for (int i = 0; i < kCount; i++) {
				sum_in[c][i] = (long)rank * 1000 + c * 10 + round + i;
				bcast[c][i] =
					rank == c % size ? (long)c * 100000 + round * 100 + i : -1;
			}
			gathered[c] = malloc((size_t)size * sizeof(long));
			const long mine = (long)rank * 31 + c + round;
			MPI_Iallreduce(sum_in[c], sum_out[c], kCount, MPI_LONG, MPI_SUM, comms[c],
				       &requests[n++]);
			MPI_Ibcast(bcast[c], kCount, MPI_LONG, c % size, comms[c], &requests[n++]);
			MPI_Ibarrier(comms[c], &requests[n++]);
			MPI_Iallgather(&mine, 1, MPI_LONG, gathered[c], 1, MPI_LONG, comms[c],
				       &requests[n++]);
		}
		MPI_Waitall(n, requests, statuses);
		for (int c = 0; c < kComms; c++) {
			for (int i = 0; i < kCount; i++) {
				const long want = 1000L * size * (size - 1) / 2 +
						  (long)size * (c * 10 + round + i);
				if (sum_out[c][i] != want)
					fail("nonblocking", "iallreduce", i, (double)sum_out[c][i],
					     (double)want);
				const long want_b = (long)c * 100000 + round * 100 + i;
				if (bcast[c][i] != want_b)
					fail("nonblocking", "ibcast", i, (double)bcast[c][i],
					     (double)want_b);
			}
			for (int r = 0; r < size; r++) {
				const long want = (long)r * 31 + c + round;
				if (gathered[c][r] != want)
					fail("nonblocking", "iallgather", r, (double)gathered[c][r],
					     (double)want);
			}
			free(gathered[c]);
		}
	}
	for (int c = 0; c < kComms; c++)
		MPI_Comm_free(&comms[c]);
	if (rank == 0)
		printf("PASS nonblocking: 20 rounds of Iallreduce, Ibcast, Ibarrier and Iallgather "
		       "in flight on "
		       "%d communicators at %d ranks, checked\n",
		       kComms, size);
	return 0;
}

/* --------------------------------------------------------------- finalize */

enum { kMessages = 8, kWords = 256 }; /* 1 KiB: eager everywhere */

static int finalize_first(void)
{
	static int buffer[kWords];
	if (rank != 0) {
		for (int m = 0; m < kMessages; m++) {
			for (int i = 0; i < kWords; i++)
				buffer[i] = rank * 1000000 + m * 10000 + i;
			MPI_Send(buffer, kWords, MPI_INT, 0, m, MPI_COMM_WORLD);
		}
		return 0; /* finalizes at once; rank 0 has posted nothing yet */
	}
	sleep(2);
	for (int r = 1; r < size; r++) {
		for (int m = 0; m < kMessages; m++) {
			MPI_Recv(buffer, kWords, MPI_INT, r, m, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (int i = 0; i < kWords; i++) {
				const int want = r * 1000000 + m * 10000 + i;
				if (buffer[i] != want)
					fail("finalize", "payload", i, buffer[i], want);
			}
		}
	}
	printf("PASS finalize: %d ranks sent %d messages each and finalized before rank 0 "
	       "received; all "
	       "arrived intact\n",
	       size - 1, kMessages);
	return 0;
}

/* ---------------------------------------------------------------- rma */

/* One-sided traffic: MPI_Put, MPI_Get and MPI_Accumulate at sizes from 1 to
 * 64 Ki doubles. Without native atomics, MPICH's ch4:ofi runs accumulates
 * (and larger puts and gets) as its OFI active messages, which arrive in
 * FI_MULTI_RECV buffers. */
static int rma(void)
{
	enum { kMax = 65536, kRounds = 3 };
	double* window_memory;
	MPI_Win win;
	MPI_Win_allocate(2 * kMax * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD,
			 &window_memory, &win);
	double* source = malloc(kMax * sizeof(double));
	double* fetched = malloc(kMax * sizeof(double));
	const int right = (rank + 1) % size, left = (rank + size - 1) % size;
	long checked = 0;
	for (int count = 1; count <= kMax; count *= 8) {
		for (int round = 0; round < kRounds; round++) {
			for (int i = 0; i < 2 * kMax; i++)
				window_memory[i] = -1.0;
			for (int i = 0; i < count; i++)
				source[i] = rank * 1e6 + round * 1e5 + i;
			MPI_Win_fence(0, win);
			/* Put into the right neighbour's first half; every rank adds
			 * into rank 0's second half. */
			MPI_Put(source, count, MPI_DOUBLE, right, 0, count, MPI_DOUBLE, win);
			MPI_Accumulate(source, count, MPI_DOUBLE, 0, kMax, count, MPI_DOUBLE, MPI_SUM,
				       win);
			MPI_Win_fence(0, win);
			MPI_Get(fetched, count, MPI_DOUBLE, left, 0, count, MPI_DOUBLE, win);
			MPI_Win_fence(0, win);
			for (int i = 0; i < count; i++) {
				/* The left neighbour's own window holds what its left put. */
				const int origin = (left + size - 1) % size;
				const double want = origin * 1e6 + round * 1e5 + i;
				if (window_memory[i] != left * 1e6 + round * 1e5 + i)
					fail("rma", "put", i, window_memory[i], left * 1e6 + round * 1e5 + i);
				if (fetched[i] != want)
					fail("rma", "get", i, fetched[i], want);
				if (rank == 0) {
					/* -1 + sum over ranks of (r*1e6 + round*1e5 + i) */
					const double sum = -1.0 + 1e6 * size * (size - 1) / 2.0 +
							   size * (round * 1e5 + i);
					if (window_memory[kMax + i] != sum)
						fail("rma", "accumulate", i, window_memory[kMax + i], sum);
				}
			}
			checked += count;
		}
	}
	MPI_Win_free(&win);
	free(source);
	free(fetched);
	if (rank == 0)
		printf("PASS rma: MPI_Put, MPI_Get and MPI_Accumulate of 1..%d doubles, %ld "
		       "elements checked per rank at %d ranks\n",
		       kMax, checked, size);
	return 0;
}

int main(int argc, char** argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const char* name = argc > 1 ? argv[1] : "";
	int rc;
	if (!strcmp(name, "user-op"))
		rc = user_op();
	else if (!strcmp(name, "nonblocking"))
		rc = nonblocking();
	else if (!strcmp(name, "finalize"))
		rc = finalize_first();
	else if (!strcmp(name, "rma"))
		rc = rma();
	else {
		if (rank == 0)
			printf("FAIL %s: unknown program (user-op, nonblocking, finalize, rma)\n",
			       name);
		rc = 1;
	}
	fflush(stdout);
	MPI_Finalize();
	return rc;
}
