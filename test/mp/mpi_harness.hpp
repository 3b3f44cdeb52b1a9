// A small harness for the MPI correctness programs: every check runs on all
// ranks, failures are agreed on collectively and rank 0 prints one line per
// check ("PASS <suite> <check> (np=N): ..." or "FAIL ...: <first error>").
#pragma once

#include <mpi.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace mpitest {

class Failure : public std::runtime_error {
public:
	using std::runtime_error::runtime_error;
};

[[gnu::format(printf, 1, 2)]] inline std::string strfmt(const char* fmt, ...)
{
	va_list args;
	va_start(args, fmt);
	char text[1024];
	std::vsnprintf(text, sizeof text, fmt, args);
	va_end(args);
	return text;
}

[[gnu::format(printf, 2, 3)]] inline void expect(bool cond, const char* fmt, ...)
{
	if (cond)
		return;
	va_list args;
	va_start(args, fmt);
	char text[1024];
	std::vsnprintf(text, sizeof text, fmt, args);
	va_end(args);
	throw Failure(text);
}

// MPI_COMM_WORLD is switched to MPI_ERRORS_RETURN, so a failing call is
// reported with its text instead of aborting the job.
inline void check_mpi(int rc, const char* call)
{
	if (rc == MPI_SUCCESS)
		return;
	char text[MPI_MAX_ERROR_STRING];
	int length = 0;
	MPI_Error_string(rc, text, &length);
	throw Failure(strfmt("%s returned %d (%.*s)", call, rc, length, text));
}
#define MPI_CHECK(call) ::mpitest::check_mpi((call), #call)

// Payload byte of a message: depends on who sent it, a per-test key and
// the offset, so misdelivered, shifted or stale data is caught.
inline uint8_t pattern(uint64_t source, uint64_t key, uint64_t offset)
{
	uint64_t x = (source + 1) * 0x9e3779b97f4a7c15ULL ^ (key + 1) * 0xbf58476d1ce4e5b9ULL ^
		     (offset / 8) * 0x94d049bb133111ebULL;
	x ^= x >> 31;
	x *= 0xd6e8feb86659fd93ULL;
	x ^= x >> 29;
	return static_cast<uint8_t>(x >> (8 * (offset % 8)));
}

inline void fill(std::vector<uint8_t>& buf, uint64_t source, uint64_t key, size_t from = 0,
		 size_t length = SIZE_MAX)
{
	const size_t end = length == SIZE_MAX ? buf.size() : from + length;
	for (size_t i = from; i < end; ++i)
		buf[i] = pattern(source, key, i - from);
}

inline void expect_filled(const uint8_t* data, size_t length, uint64_t source, uint64_t key,
			  const std::string& what)
{
	for (size_t i = 0; i < length; ++i)
		if (data[i] != pattern(source, key, i))
			throw Failure(strfmt("%s: byte %zu of %zu is 0x%02x, expected 0x%02x",
					     what.c_str(), i, length, data[i],
					     pattern(source, key, i)));
}

class Suite {
public:
	// `threads`: the thread level to ask MPI_Init_thread for (the job
	// ends if the MPI does not provide it); MPI_Init when negative.
	Suite(const char* name, int* argc, char*** argv, int threads = -1) : name_(name)
	{
		int provided = threads;
		if (threads < 0)
			MPI_Init(argc, argv);
		else
			MPI_Init_thread(argc, argv, threads, &provided);
		if (provided != threads) {
			std::fprintf(stderr, "%s: the MPI provides thread level %d, not %d\n", name,
				     provided, threads);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
		MPI_Comm_size(MPI_COMM_WORLD, &size_);
		// A hang becomes a failure: SIGALRM ends the rank, mpirun the job.
		alarm(100);
	}
	~Suite() { MPI_Finalize(); }
	Suite(const Suite&) = delete;
	Suite& operator=(const Suite&) = delete;

	int rank() const { return rank_; }
	int size() const { return size_; }

	// Runs check on every rank. The lowest failing rank's message is the
	// one printed.
	void run(const char* check, const std::string& description,
		 const std::function<void()>& body)
	{
		std::string error;
		try {
			body();
		} catch (const std::exception& e) {
			error = e.what();
		}
		int failing_rank = error.empty() ? size_ : rank_;
		int first_failing = size_;
		MPI_Allreduce(&failing_rank, &first_failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
		if (first_failing != size_ && first_failing != 0) {
			char text[1024] = {};
			if (rank_ == first_failing) {
				std::snprintf(text, sizeof text, "%s", error.c_str());
				MPI_Send(text, sizeof text, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
			} else if (rank_ == 0) {
				MPI_Recv(text, sizeof text, MPI_CHAR, first_failing, 0,
					 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				error = text;
			}
		}
		if (rank_ == 0) {
			if (first_failing == size_) {
				++passed_;
				std::printf("PASS %s %s (np=%d): %s\n", name_, check, size_,
					    description.c_str());
			} else {
				++failed_;
				std::printf("FAIL %s %s (np=%d): rank %d: %s\n", name_, check,
					    size_, first_failing, error.c_str());
			}
			std::fflush(stdout);
		}
	}

	// Prints the completion marker run-mpi.sh looks for: without it, the
	// job died somewhere between checks.
	int exit_code() const
	{
		int failed = failed_;
		MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
		if (rank_ == 0) {
			std::printf("# %s finished: %d passed, %d failed\n", name_, passed_,
				    failed_);
			std::fflush(stdout);
		}
		return failed == 0 ? 0 : 1;
	}

private:
	const char* name_;
	int rank_ = 0;
	int size_ = 1;
	int passed_ = 0;
	int failed_ = 0;
};

} // namespace mpitest
