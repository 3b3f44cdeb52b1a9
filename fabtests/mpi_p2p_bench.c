/* rcoll_mpi_p2p_bench: an MPI's point-to-point latency and bandwidth
 * between ranks 0 and 1, OSU-style, whatever transport the MPI runs on
 * (scripts/bench-mpich-p2p.sh runs it under MPICH over rcoll and over
 * tcp;ofi_rxm).
 *
 *   latency    ping-pong, half the round trip, microseconds
 *   bandwidth  a window of 64 MPI_Isend (MPI_Irecv on the other side) and
 *              a 4-byte acknowledgement, MB/s (10^6 bytes)
 *
 * Every message is checked: its first and last bytes carry the iteration.
 * Prints "latency <bytes> <us>" and "bandwidth <bytes> <MB/s>" from rank 0;
 * "FAIL <why>" and exit 1 on a wrong byte.
 *   rcoll_mpi_p2p_bench [--quick] */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kWindow = 64, kMaxSize = 4 << 20 };

static int rank;

static void stamp(unsigned char* buf, size_t size, int iteration)
{
	if (size == 0)
		return;
	buf[0] = (unsigned char)iteration;
	buf[size - 1] = (unsigned char)(iteration * 7 + 1);
}

static void check(const unsigned char* buf, size_t size, int iteration)
{
	if (size == 0)
		return;
	if (buf[0] != (unsigned char)iteration ||
	    buf[size - 1] != (unsigned char)(iteration * 7 + 1)) {
		printf("FAIL rank %d: a %zu-byte message of iteration %d arrived wrong\n", rank,
		       size, iteration);
		fflush(stdout);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}

static int iterations_for(size_t size, int quick)
{
	int n = size <= 8192 ? 2000 : size <= 262144 ? 400 : 60;
	return quick ? n / 10 + 2 : n;
}

static double latency(unsigned char* buf, size_t size, int iterations)
{
	const int warmup = iterations / 10 + 1;
	double start = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = 0; i < warmup + iterations; i++) {
		if (i == warmup)
			start = MPI_Wtime();
		if (rank == 0) {
			stamp(buf, size, i);
			MPI_Send(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
			MPI_Recv(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			check(buf, size, i + 1);
		} else if (rank == 1) {
			MPI_Recv(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			check(buf, size, i);
			stamp(buf, size, i + 1);
			MPI_Send(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
		}
	}
	return (MPI_Wtime() - start) * 1e6 / (2.0 * iterations);
}

static double bandwidth(unsigned char* buf, size_t size, int iterations)
{
	MPI_Request requests[kWindow];
	MPI_Status statuses[kWindow]; /* not MPI_STATUSES_IGNORE: gcc 12 takes it for an array */
	const int warmup = iterations / 10 + 1;
	double start = 0;
	int ack = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = 0; i < warmup + iterations; i++) {
		if (i == warmup)
			start = MPI_Wtime();
		if (rank == 0) {
			for (int w = 0; w < kWindow; w++) {
				stamp(buf + (size_t)w * size, size, i + w);
				MPI_Isend(buf + (size_t)w * size, (int)size, MPI_BYTE, 1, 2,
					  MPI_COMM_WORLD, &requests[w]);
			}
			MPI_Waitall(kWindow, requests, statuses);
			MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else if (rank == 1) {
			for (int w = 0; w < kWindow; w++)
				MPI_Irecv(buf + (size_t)w * size, (int)size, MPI_BYTE, 0, 2,
					  MPI_COMM_WORLD, &requests[w]);
			MPI_Waitall(kWindow, requests, statuses);
			for (int w = 0; w < kWindow; w++)
				check(buf + (size_t)w * size, size, i + w);
			MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
		}
	}
	const double seconds = MPI_Wtime() - start;
	return (double)size * kWindow * iterations / seconds / 1e6;
}

int main(int argc, char** argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	const int quick = argc > 1 && !strcmp(argv[1], "--quick");
	/* The bandwidth window holds kWindow messages of up to 1 MiB. */
	unsigned char* buf = calloc((size_t)kWindow << 20, 1);
	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (size_t size = 8; size <= kMaxSize; size *= 4) {
		const double us = latency(buf, size, iterations_for(size, quick));
		if (rank == 0)
			printf("latency %zu %.2f\n", size, us);
	}
	for (size_t size = 8; size <= (1u << 20); size *= 4) {
		const double mbs = bandwidth(buf, size, iterations_for(size, quick) / 8 + 2);
		if (rank == 0)
			printf("bandwidth %zu %.1f\n", size, mbs);
	}
	fflush(stdout);
	free(buf);
	MPI_Finalize();
	return 0;
}
