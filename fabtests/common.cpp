#include "common.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <arpa/inet.h>
#include <fcntl.h>
#include <fstream>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <new>
#include <sched.h>
#include <sstream>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace fabtests {

// ================================================================ errors

std::string strfmt(const char* fmt, ...)
{
	va_list args;
	va_start(args, fmt);
	va_list copy;
	va_copy(copy, args);
	const int length = std::vsnprintf(nullptr, 0, fmt, copy);
	va_end(copy);
	std::string text(length > 0 ? static_cast<size_t>(length) : 0, '\0');
	if (length > 0)
		std::vsnprintf(text.data(), text.size() + 1, fmt, args);
	va_end(args);
	return text;
}

namespace {

std::string fabric_error_text(std::string_view call, long rc, std::source_location where)
{
	const char* file = where.file_name();
	if (const char* slash = std::strrchr(file, '/'))
		file = slash + 1;
	return strfmt("%.*s returned %ld (%s) at %s:%u", static_cast<int>(call.size()), call.data(),
		      rc, fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)), file, where.line());
}

} // namespace

FabricError::FabricError(std::string_view call, long rc, std::source_location where)
	: std::runtime_error(fabric_error_text(call, rc, where)), rc_(rc)
{}

void check_rc(long rc, std::string_view call, std::source_location where)
{
	if (rc != 0)
		throw FabricError(call, rc, where);
}

void expect(bool cond, const char* fmt, ...)
{
	if (cond)
		return;
	va_list args;
	va_start(args, fmt);
	char text[1024];
	std::vsnprintf(text, sizeof text, fmt, args);
	va_end(args);
	throw CheckFailure(text);
}

std::chrono::milliseconds Deadline::remaining() const
{
	const auto left = end_ - Clock::now();
	return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(left),
			std::chrono::milliseconds{0});
}

// ================================================================ patterns

namespace {

// splitmix64's finaliser: every input bit affects every output bit.
uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

uint64_t pattern_word(uint64_t seed, uint64_t word_index)
{
	return mix64(seed ^ (word_index * 0xd6e8feb86659fd93ULL));
}

uint8_t pattern_byte(uint64_t seed, uint64_t offset)
{
	return static_cast<uint8_t>(pattern_word(seed, offset / 8) >> (8 * (offset % 8)));
}

static_assert(std::endian::native == std::endian::little,
	      "pattern words are stored with memcpy; byte k must be bits 8k..8k+7");

} // namespace

uint64_t make_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}

void fill_pattern(std::span<uint8_t> buf, uint64_t seed, size_t base_offset)
{
	size_t i = 0;
	const size_t n = buf.size();
	for (; i < n && (base_offset + i) % 8 != 0; ++i)
		buf[i] = pattern_byte(seed, base_offset + i);
	for (; i + 8 <= n; i += 8) {
		const uint64_t word = pattern_word(seed, (base_offset + i) / 8);
		std::memcpy(&buf[i], &word, sizeof word);
	}
	for (; i < n; ++i)
		buf[i] = pattern_byte(seed, base_offset + i);
}

std::optional<size_t> find_pattern_mismatch(std::span<const uint8_t> buf, uint64_t seed,
					    size_t base_offset)
{
	size_t i = 0;
	const size_t n = buf.size();
	for (; i < n && (base_offset + i) % 8 != 0; ++i)
		if (buf[i] != pattern_byte(seed, base_offset + i))
			return i;
	for (; i + 8 <= n; i += 8) {
		const uint64_t expected = pattern_word(seed, (base_offset + i) / 8);
		if (std::memcmp(&buf[i], &expected, sizeof expected) != 0)
			break; // the byte loop below names the exact offset
	}
	for (; i < n; ++i)
		if (buf[i] != pattern_byte(seed, base_offset + i))
			return i;
	return std::nullopt;
}

void expect_pattern(std::span<const uint8_t> buf, uint64_t seed, const std::string& what,
		    size_t base_offset)
{
	if (auto bad = find_pattern_mismatch(buf, seed, base_offset)) {
		const size_t at = *bad;
		throw CheckFailure(
			strfmt("%s: data mismatch at byte %zu of %zu (got 0x%02x, want 0x%02x)",
			       what.c_str(), at, buf.size(), buf[at],
			       pattern_byte(seed, base_offset + at)));
	}
}

void fill_guard(std::span<uint8_t> buf) { std::fill(buf.begin(), buf.end(), kGuardByte); }

void expect_guard(std::span<const uint8_t> buf, const std::string& what)
{
	auto bad = std::find_if(buf.begin(), buf.end(), [](uint8_t b) { return b != kGuardByte; });
	if (bad != buf.end())
		throw CheckFailure(strfmt("%s: guard byte %zu overwritten (0x%02x)", what.c_str(),
					  static_cast<size_t>(bad - buf.begin()), *bad));
}

// ================================================================ launcher

struct SharedState {
	std::atomic<uint32_t> barrier_arrived{0};
	std::atomic<uint32_t> barrier_generation{0};
	std::atomic<uint32_t> participants{0};
	std::atomic<uint32_t> abort{0};
	std::atomic<int32_t> pids[kMaxRanks]{};
	std::atomic<uint32_t> killed[kMaxRanks]{};
	// Set when the rank's body returned or threw: a rank that exits
	// without it died inside the case (a crash caught by a signal handler).
	std::atomic<uint32_t> finished[kMaxRanks]{};
	std::atomic<uint64_t> signals[kSignalCount]{};
	struct Slot {
		std::atomic<uint32_t> length{0};
		uint8_t bytes[kAddressSlotBytes]{};
	} slots[kMaxRanks];
	char notes[kMaxRanks][kNoteBytes]{};
	// For a barrier that times out: the generation each rank last entered,
	// and what each rank last waited for (Endpoint::progress_until).
	std::atomic<uint32_t> barrier_entered[kMaxRanks]{};
	char waiting_for[kMaxRanks][kNoteBytes]{};
	alignas(64) std::byte scratch[kScratchBytes]{};
};

// Shared across fork: only address-free (lock-free) atomics work there.
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);

namespace {

// Busy-waiting ranks outnumber cores (17 or 65 ranks on 2 cores): give the
// core away quickly, then sleep briefly so the ranks we wait for can run.
class Backoff {
public:
	void pause()
	{
		if (++spins_ < 64) {
			sched_yield();
		} else {
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
	}

private:
	unsigned spins_ = 0;
};

// This rank's slot for what it waits for, or last waited for (set in the
// rank's process).
char* this_rank_waiting_for = nullptr;

constexpr int kExitPassed = 0;
constexpr int kExitFailed = 1;
constexpr int kExitNotApplicable = 77;

} // namespace

void Bootstrap::check_abort() const
{
	if (shared_.abort.load(std::memory_order_acquire) != 0)
		throw CheckFailure("aborted: another rank failed");
}

void Bootstrap::barrier(std::chrono::milliseconds budget)
{
	// Central sense-reversing barrier; `participants` shrinks when a rank is
	// killed on purpose, so survivors can still synchronise.
	const uint32_t generation = shared_.barrier_generation.load(std::memory_order_acquire);
	shared_.barrier_entered[rank_].store(generation + 1, std::memory_order_release);
	const uint32_t arrived =
		shared_.barrier_arrived.fetch_add(1, std::memory_order_acq_rel) + 1;
	if (arrived >= shared_.participants.load(std::memory_order_acquire)) {
		shared_.barrier_arrived.store(0, std::memory_order_relaxed);
		shared_.barrier_generation.fetch_add(1, std::memory_order_acq_rel);
		return;
	}
	Deadline deadline(budget);
	Backoff backoff;
	while (shared_.barrier_generation.load(std::memory_order_acquire) == generation) {
		check_abort();
		if (deadline.expired())
			throw CheckFailure(strfmt("rank %d: barrier timed out after %lld ms%s",
						  rank_, static_cast<long long>(budget.count()),
						  absent_from_barrier(generation).c_str()));
		backoff.pause();
	}
}

LongWait::LongWait(const std::string& what) : what_(what), since_(Clock::now()) {}

void LongWait::check()
{
	if (!recorded_ && this_rank_waiting_for &&
	    Clock::now() - since_ > std::chrono::seconds(1)) {
		std::snprintf(this_rank_waiting_for, kNoteBytes, "waiting for %s", what_.c_str());
		recorded_ = true;
	}
}

LongWait::~LongWait()
{
	if (recorded_)
		std::snprintf(this_rank_waiting_for, kNoteBytes, "done waiting for %s",
			      what_.c_str());
}

// The ranks that have not reached the barrier of `generation`, and what
// each last waited for: the lead when a barrier times out.
std::string Bootstrap::absent_from_barrier(uint32_t generation) const
{
	std::string absent;
	for (int r = 0; r < size_; ++r) {
		if (!rank_alive(r) ||
		    shared_.barrier_entered[r].load(std::memory_order_acquire) == generation + 1)
			continue;
		absent += strfmt("; rank %d is not there", r);
		if (shared_.waiting_for[r][0] != '\0')
			absent += strfmt(" (%.*s)", static_cast<int>(kNoteBytes),
					 shared_.waiting_for[r]);
	}
	return absent;
}

std::vector<std::vector<uint8_t>> Bootstrap::allgather(std::span<const uint8_t> mine)
{
	expect(mine.size() <= kAddressSlotBytes,
	       "allgather blob of %zu bytes exceeds the %zu-byte slot", mine.size(),
	       kAddressSlotBytes);
	auto& slot = shared_.slots[rank_];
	std::memcpy(slot.bytes, mine.data(), mine.size());
	slot.length.store(static_cast<uint32_t>(mine.size()), std::memory_order_release);
	barrier();
	std::vector<std::vector<uint8_t>> all(static_cast<size_t>(size_));
	for (int r = 0; r < size_; ++r) {
		const auto& theirs = shared_.slots[r];
		const uint32_t length = theirs.length.load(std::memory_order_acquire);
		all[static_cast<size_t>(r)].assign(theirs.bytes, theirs.bytes + length);
	}
	barrier(); // nobody overwrites a slot before everyone has read it
	return all;
}

void Bootstrap::signal_set(int index, uint64_t value)
{
	shared_.signals[index].store(value, std::memory_order_release);
}

void Bootstrap::signal_add(int index, uint64_t value)
{
	shared_.signals[index].fetch_add(value, std::memory_order_acq_rel);
}

uint64_t Bootstrap::signal_get(int index) const
{
	return shared_.signals[index].load(std::memory_order_acquire);
}

void Bootstrap::signal_wait_at_least(int index, uint64_t value, const std::function<void()>& idle,
				     std::chrono::milliseconds budget)
{
	Deadline deadline(budget);
	while (signal_get(index) < value) {
		check_abort();
		if (deadline.expired())
			throw CheckFailure(strfmt(
				"rank %d: signal %d stayed at %llu < %llu for %lld ms", rank_,
				index, static_cast<unsigned long long>(signal_get(index)),
				static_cast<unsigned long long>(value),
				static_cast<long long>(budget.count())));
		if (idle)
			idle();
		else
			sched_yield();
	}
}

void Bootstrap::kill_rank(int victim)
{
	expect(victim != rank_ && victim >= 0 && victim < size_, "cannot kill rank %d", victim);
	shared_.killed[victim].store(1, std::memory_order_release);
	const pid_t pid = shared_.pids[victim].load(std::memory_order_acquire);
	expect(pid > 0 && ::kill(pid, SIGKILL) == 0, "kill(rank %d, SIGKILL) failed: %s", victim,
	       std::strerror(errno));
	shared_.participants.fetch_sub(1, std::memory_order_acq_rel);
}

bool Bootstrap::rank_alive(int r) const
{
	return shared_.killed[r].load(std::memory_order_acquire) == 0;
}

void Bootstrap::note(const std::string& text)
{
	std::snprintf(shared_.notes[rank_], kNoteBytes, "%s", text.c_str());
}

std::span<std::byte> Bootstrap::scratch() { return {shared_.scratch, kScratchBytes}; }

namespace {

struct SharedMapping {
	SharedState* state = nullptr;

	SharedMapping()
	{
		void* memory = mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE,
				    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (memory == MAP_FAILED)
			throw std::runtime_error(strfmt("mmap of the bootstrap region failed: %s",
							std::strerror(errno)));
		state = new (memory) SharedState();
	}
	~SharedMapping()
	{
		state->~SharedState();
		munmap(state, sizeof(SharedState));
	}
	SharedMapping(const SharedMapping&) = delete;
	SharedMapping& operator=(const SharedMapping&) = delete;
};

void join_host(int rank); // defined with the placement helpers below

// RCOLL_TEST_COLL_LOCAL=even: only even ranks offer rcoll's node-local
// collective path (FI_RCOLL_COLL_LOCAL), so that one group mixes members
// reached through memory and members reached through the core provider.
void apply_rank_environment(int rank)
{
	const char* mode = std::getenv("RCOLL_TEST_COLL_LOCAL");
	if (mode && std::strcmp(mode, "even") == 0)
		setenv("FI_RCOLL_COLL_LOCAL", rank % 2 == 0 ? "1" : "0", 1);
}

[[noreturn]] void run_rank(SharedState& shared, int rank, int ranks, std::chrono::seconds timeout,
			   const RankBody& body)
{
	this_rank_waiting_for = shared.waiting_for[rank];
	// A rank must never outlive the launcher, nor hang past its budget:
	// SIGALRM's default action ends it and the parent reports a hang.
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(static_cast<unsigned>(timeout.count()));
	shared.pids[rank].store(getpid(), std::memory_order_release);
	Bootstrap boot(shared, rank, ranks);
	int code = kExitPassed;
	try {
		apply_rank_environment(rank);
		join_host(rank);
		body(boot);
		shared.finished[rank].store(1, std::memory_order_release);
	} catch (const NotApplicable& na) {
		shared.finished[rank].store(1, std::memory_order_release);
		boot.note(na.what());
		code = kExitNotApplicable;
	} catch (const std::exception& error) {
		shared.finished[rank].store(1, std::memory_order_release);
		std::fprintf(stderr, "[rank %d] %s\n", rank, error.what());
		boot.note(error.what());
		shared.abort.store(1, std::memory_order_release);
		code = kExitFailed;
	}
	std::fflush(nullptr);
	_exit(code); // no atexit handlers or stdio buffers inherited from the parent
}

std::string describe_status(int status, std::chrono::seconds timeout)
{
	if (WIFEXITED(status))
		return strfmt("exited with status %d", WEXITSTATUS(status));
	if (WIFSIGNALED(status)) {
		const int sig = WTERMSIG(status);
		if (sig == SIGALRM)
			return strfmt("watchdog expired after %lld s (hang)",
				      static_cast<long long>(timeout.count()));
		return strfmt("killed by signal %d (%s)", sig, strsignal(sig));
	}
	return strfmt("ended with wait status 0x%x", status);
}

} // namespace

LaunchResult launch_ranks(int ranks, std::chrono::seconds timeout, const RankBody& body,
			  std::vector<std::byte>* scratch_out)
{
	if (ranks < 1 || ranks > kMaxRanks)
		return {Outcome::failed,
			strfmt("cannot launch %d ranks (1..%d)", ranks, kMaxRanks)};

	SharedMapping mapping;
	SharedState& shared = *mapping.state;
	shared.participants.store(static_cast<uint32_t>(ranks));

	std::fflush(nullptr);
	std::vector<pid_t> pids(static_cast<size_t>(ranks), -1);
	for (int r = 0; r < ranks; ++r) {
		const pid_t pid = fork();
		if (pid == 0)
			run_rank(shared, r, ranks, timeout, body);
		if (pid < 0) {
			const std::string reason = strfmt("fork failed: %s", std::strerror(errno));
			for (pid_t started : pids)
				if (started > 0)
					::kill(started, SIGKILL);
			while (wait(nullptr) > 0) {
			}
			return {Outcome::failed, reason};
		}
		pids[static_cast<size_t>(r)] = pid;
		shared.pids[r].store(pid, std::memory_order_release);
	}

	// Reap ranks. The first unexpected failure (or N/A) decides the outcome;
	// ranks still running two seconds later are waiting for the one that
	// failed, so they are killed rather than left to run into their own
	// timeouts.
	const auto hard_deadline = Clock::now() + timeout + std::chrono::seconds(5);
	std::optional<Clock::time_point> give_up_at;
	std::string first_failure;
	std::string not_applicable;
	int alive = ranks;
	auto rank_of = [&](pid_t pid) {
		return static_cast<int>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
	};
	while (alive > 0) {
		int status = 0;
		const pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid > 0) {
			const int r = rank_of(pid);
			if (r >= ranks)
				continue;
			--alive;
			pids[static_cast<size_t>(r)] = -1;
			const bool intended_kill =
				shared.killed[r].load() != 0 || give_up_at.has_value();
			if (WIFEXITED(status) && WEXITSTATUS(status) == kExitPassed)
				continue;
			if (WIFEXITED(status) && WEXITSTATUS(status) == kExitNotApplicable) {
				if (not_applicable.empty())
					not_applicable = shared.notes[r];
				if (!give_up_at)
					give_up_at = Clock::now() + std::chrono::seconds(2);
				continue;
			}
			if (intended_kill && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
				continue;
			if (first_failure.empty()) {
				first_failure = strfmt("rank %d %s", r,
						       describe_status(status, timeout).c_str());
				if (shared.finished[r].load() == 0)
					first_failure += " while still inside the case (crash or "
							 "abort; see its stderr)";
				if (shared.notes[r][0] != '\0')
					first_failure += strfmt(": %s%s",
								shared.finished[r].load()
									? ""
									: "last progress note: ",
								shared.notes[r]);
			}
			shared.abort.store(1, std::memory_order_release);
			if (!give_up_at)
				give_up_at = Clock::now() + std::chrono::seconds(2);
			continue;
		}
		if (pid < 0 && errno != EINTR)
			break;
		const auto now = Clock::now();
		if (now >= hard_deadline && first_failure.empty())
			first_failure = strfmt("timed out after %lld s",
					       static_cast<long long>(timeout.count()));
		if (now >= hard_deadline + std::chrono::seconds(10)) {
			// SIGKILLed ranks that still do not go away (stuck in the kernel):
			// report rather than wait without bound.
			first_failure += strfmt("; %d rank(s) did not exit after SIGKILL", alive);
			break;
		}
		if (now >= hard_deadline || (give_up_at && now >= *give_up_at)) {
			give_up_at = give_up_at.value_or(now);
			for (pid_t running : pids)
				if (running > 0)
					::kill(running, SIGKILL);
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(2));
	}

	if (scratch_out)
		scratch_out->assign(shared.scratch, shared.scratch + kScratchBytes);
	if (!first_failure.empty())
		return {Outcome::failed, first_failure};
	if (!not_applicable.empty())
		return {Outcome::not_applicable, not_applicable};
	std::string notes;
	for (int r = 0; r < ranks; ++r) {
		if (shared.notes[r][0] == '\0')
			continue;
		if (!notes.empty())
			notes += "; ";
		notes += shared.notes[r];
	}
	return {Outcome::passed, notes};
}

void prefer_loopback_interfaces()
{
	// Loopback unless told otherwise: the tests and benchmarks never leave
	// this host. An interface named for the test runs outranks an
	// FI_TCP_IFACE=lo inherited from the run scripts.
	if (const char* chosen = std::getenv("RCOLL_TEST_IFACE"); chosen && *chosen) {
		setenv("FI_TCP_IFACE", chosen, 1);
		setenv("FI_SOCKETS_IFACE", chosen, 1);
		return;
	}
	setenv("FI_TCP_IFACE", "lo", 0);
	setenv("FI_SOCKETS_IFACE", "lo", 0);
}

// ================================================================ hosts

namespace {

class UniqueFd {
public:
	explicit UniqueFd(int fd) : fd_(fd) {}
	UniqueFd(const UniqueFd&) = delete;
	UniqueFd& operator=(const UniqueFd&) = delete;
	~UniqueFd()
	{
		if (fd_ >= 0)
			close(fd_);
	}
	int get() const { return fd_; }

private:
	int fd_;
};

struct IfaddrsDeleter {
	void operator()(ifaddrs* list) const noexcept { freeifaddrs(list); }
};

struct Ipv4Interface {
	std::string name;
	std::string address; // the first IPv4 address, dotted
	bool loopback = false;
};

// Up interfaces of this process's namespace that have an IPv4 address.
std::vector<Ipv4Interface> ipv4_interfaces()
{
	ifaddrs* raw = nullptr;
	if (getifaddrs(&raw) != 0)
		throw CheckFailure(strfmt("getifaddrs failed: %s", std::strerror(errno)));
	std::unique_ptr<ifaddrs, IfaddrsDeleter> list(raw);
	std::vector<Ipv4Interface> found;
	for (const ifaddrs* it = list.get(); it; it = it->ifa_next) {
		if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET ||
		    (it->ifa_flags & IFF_UP) == 0)
			continue;
		if (std::any_of(found.begin(), found.end(),
				[&](const auto& known) { return known.name == it->ifa_name; }))
			continue;
		char text[INET_ADDRSTRLEN] = {};
		inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(it->ifa_addr)->sin_addr,
			  text, sizeof text);
		found.push_back({it->ifa_name, text, (it->ifa_flags & IFF_LOOPBACK) != 0});
	}
	return found;
}

HostPlacement resolve_placement(const std::string& netns)
{
	HostPlacement placement;
	placement.netns = netns;
	const char* chosen = std::getenv("RCOLL_TEST_IFACE");
	if (chosen && *chosen) {
		placement.interface = chosen;
	} else if (!netns.empty()) {
		// A namespace standing in for a host has one "NIC": take it.
		std::vector<std::string> candidates;
		for (const auto& candidate : ipv4_interfaces())
			if (!candidate.loopback)
				candidates.push_back(candidate.name);
		if (candidates.size() != 1)
			throw CheckFailure(
				strfmt("network namespace %s has %zu up interfaces with an IPv4 "
				       "address besides "
				       "loopback; name the one to use in RCOLL_TEST_IFACE",
				       netns.c_str(), candidates.size()));
		placement.interface = candidates.front();
	} else {
		placement.interface = "lo";
		placement.address = "127.0.0.1";
		return placement;
	}
	for (const auto& candidate : ipv4_interfaces())
		if (candidate.name == placement.interface)
			placement.address = candidate.address;
	if (placement.address.empty())
		throw CheckFailure(strfmt("interface %s %s is missing, down or has no IPv4 address",
					  placement.interface.c_str(),
					  netns.empty()
						  ? "of this host"
						  : ("of network namespace " + netns).c_str()));
	return placement;
}

// The placement of this process; a forked rank replaces the launcher's.
std::optional<HostPlacement>& placement_slot()
{
	static std::optional<HostPlacement> placement;
	return placement;
}

void join_host(int rank)
{
	const std::string netns = namespace_of_rank(rank);
	if (!netns.empty()) {
		// /run/netns/<name> is where `ip netns add` keeps the namespace.
		const std::string path = "/run/netns/" + netns;
		UniqueFd handle(open(path.c_str(), O_RDONLY | O_CLOEXEC));
		if (handle.get() < 0)
			throw CheckFailure(strfmt("rank %d: cannot open network namespace %s: %s",
						  rank, path.c_str(), std::strerror(errno)));
		if (setns(handle.get(), CLONE_NEWNET) != 0)
			throw CheckFailure(strfmt("rank %d: setns(%s, CLONE_NEWNET) failed: %s",
						  rank, path.c_str(), std::strerror(errno)));
	}
	placement_slot() = resolve_placement(netns);
	if (!netns.empty() || std::getenv("RCOLL_TEST_IFACE")) {
		// libfabric reads these at its first fi_getinfo, which comes later.
		setenv("FI_TCP_IFACE", placement_slot()->interface.c_str(), 1);
		setenv("FI_SOCKETS_IFACE", placement_slot()->interface.c_str(), 1);
	}
}

} // namespace

std::vector<std::string> host_namespaces()
{
	std::vector<std::string> names;
	const char* list = std::getenv("RCOLL_TEST_NETNS");
	if (!list)
		return names;
	std::stringstream stream(list);
	std::string name;
	while (std::getline(stream, name, ','))
		if (!name.empty())
			names.push_back(name);
	return names;
}

std::string namespace_of_rank(int rank)
{
	const auto names = host_namespaces();
	return names.empty() ? std::string() : names[static_cast<size_t>(rank) % names.size()];
}

const HostPlacement& host_placement()
{
	auto& placement = placement_slot();
	if (!placement)
		placement = resolve_placement("");
	return *placement;
}

std::string source_node() { return host_placement().address; }

uint16_t unused_tcp_port()
{
	const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
	expect(fd >= 0, "socket: %s", std::strerror(errno));
	sockaddr_in sin{};
	sin.sin_family = AF_INET;
	const bool parsed = inet_pton(AF_INET, source_node().c_str(), &sin.sin_addr) == 1;
	socklen_t len = sizeof(sin);
	const bool bound = parsed &&
			   ::bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) == 0 &&
			   ::getsockname(fd, reinterpret_cast<sockaddr*>(&sin), &len) == 0;
	const int error = errno;
	::close(fd);
	expect(bound, "no free TCP port on %s: %s", source_node().c_str(), std::strerror(error));
	return ntohs(sin.sin_port);
}

InterfaceCounters interface_counters(const std::string& interface)
{
	// /proc/self/net follows the calling thread's network namespace
	// (/sys/class/net would show the namespace sysfs was mounted in).
	std::ifstream dev("/proc/self/net/dev");
	std::string line;
	while (std::getline(dev, line)) {
		const size_t colon = line.find(':');
		if (colon == std::string::npos)
			continue;
		const size_t start = line.find_first_not_of(' ');
		if (line.compare(start, colon - start, interface) != 0)
			continue;
		// Fields after the colon: rx bytes packets errs drop fifo frame
		// compressed multicast, then tx bytes ...
		std::istringstream fields(line.substr(colon + 1));
		uint64_t value[9] = {};
		for (auto& v : value)
			fields >> v;
		if (!fields)
			break;
		return {value[0], value[8]};
	}
	throw CheckFailure(strfmt("no interface %s in /proc/self/net/dev", interface.c_str()));
}

// ================================================================ libfabric objects

void close_fid(fid_t fid) noexcept
{
	if (int rc = fi_close(fid); rc != 0)
		std::fprintf(stderr, "fi_close(fid class %zu) returned %d (%s)\n", fid->fclass, rc,
			     fi_strerror(-rc));
}

void OpContext::reset()
{
	provider_context = {};
	rearm();
}

void OpContext::rearm()
{
	done = false;
	error = 0;
	entry = {};
	err = {};
	source = FI_ADDR_NOTAVAIL;
	err_text.clear();
	pieces.clear();
}

namespace {

InfoPtr make_hints(const EndpointConfig& config, uint64_t caps)
{
	InfoPtr hints(fi_allocinfo());
	if (!hints)
		throw std::bad_alloc();
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = caps;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = config.mr_mode;
	hints->domain_attr->av_type = config.av_type;
	hints->tx_attr->msg_order = config.msg_order;
	hints->rx_attr->msg_order = config.msg_order;
	hints->tx_attr->op_flags = config.tx_op_flags;
	hints->domain_attr->threading = config.threading;
	hints->fabric_attr->prov_name = strdup(config.provider.c_str());
	return hints;
}

// This host's source address first (loopback unless the ranks were placed
// on other interfaces); a provider that takes no node gets none. A client
// resolving a server by node and service asks for exactly that.
long query_info(const EndpointConfig& config, uint64_t caps, InfoPtr& out)
{
	InfoPtr hints = make_hints(config, caps);
	fi_info* found = nullptr;
	if (!config.dest_service.empty()) {
		long rc = fi_getinfo(FI_VERSION(1, 17), config.dest_node.c_str(),
				     config.dest_service.c_str(), 0, hints.get(), &found);
		out.reset(found);
		return rc;
	}
	const char* service = config.service.empty() ? nullptr : config.service.c_str();
	long rc = fi_getinfo(FI_VERSION(1, 17), source_node().c_str(), service, FI_SOURCE,
			     hints.get(), &found);
	if (rc == -FI_ENODATA && !service)
		rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints.get(), &found);
	out.reset(found);
	return rc;
}

} // namespace

Endpoint::Endpoint(const EndpointConfig& config) : track_contexts_(config.track_contexts)
{
	long rc = query_info(config, config.caps, info_);
	if (rc == -FI_ENODATA && (config.caps & config.secondary_caps) != 0) {
		InfoPtr without;
		if (query_info(config, config.caps & ~config.secondary_caps, without) == 0)
			throw NotApplicable(strfmt(
				"provider %s does not offer %s", config.provider.c_str(),
				describe_flags(config.caps & config.secondary_caps).c_str()));
	}
	if (rc == -FI_ENODATA)
		throw CheckFailure(
			strfmt("fi_getinfo found no FI_EP_RDM endpoint of provider \"%s\" with %s "
			       "(is it loaded? FI_PROVIDER_PATH=%s)",
			       config.provider.c_str(), describe_flags(config.caps).c_str(),
			       std::getenv("FI_PROVIDER_PATH") ? std::getenv("FI_PROVIDER_PATH")
							       : "(unset)"));
	check_rc(rc, "fi_getinfo");

	fid_fabric* fabric = nullptr;
	FT_CHECK(fi_fabric(info_->fabric_attr, &fabric, nullptr));
	fabric_.reset(fabric);

	fid_domain* domain = nullptr;
	FT_CHECK(fi_domain(fabric_.get(), info_.get(), &domain, nullptr));
	domain_.reset(domain);

	fi_cq_attr cq_attr{};
	cq_attr.format = FI_CQ_FORMAT_TAGGED;
	cq_attr.size = config.cq_size;
	cq_attr.wait_obj = FI_WAIT_NONE;
	fid_cq* cq = nullptr;
	FT_CHECK(fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr));
	cq_.reset(cq);

	fi_av_attr av_attr{};
	av_attr.type = config.av_type;
	fid_av* av = nullptr;
	FT_CHECK(fi_av_open(domain_.get(), &av_attr, &av, nullptr));
	av_.reset(av);

	fid_ep* ep = nullptr;
	FT_CHECK(fi_endpoint(domain_.get(), info_.get(), &ep, nullptr));
	ep_.reset(ep);
	FT_CHECK(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV));
	FT_CHECK(fi_ep_bind(ep_.get(), &av_->fid, 0));
	if (config.bind_eq) {
		fi_eq_attr eq_attr{};
		eq_attr.wait_obj = config.eq_wait_obj;
		fid_eq* eq = nullptr;
		FT_CHECK(fi_eq_open(fabric_.get(), &eq_attr, &eq, nullptr));
		eq_.reset(eq);
		FT_CHECK(fi_ep_bind(ep_.get(), &eq_->fid, 0));
	}
	if (config.bind_write_counter) {
		fi_cntr_attr cntr_attr{};
		cntr_attr.events = FI_CNTR_EVENTS_COMP;
		cntr_attr.wait_obj = FI_WAIT_NONE;
		fid_cntr* cntr = nullptr;
		FT_CHECK(fi_cntr_open(domain_.get(), &cntr_attr, &cntr, nullptr));
		write_counter_.reset(cntr);
		FT_CHECK(fi_ep_bind(ep_.get(), &write_counter_->fid, FI_WRITE));
	}
	FT_CHECK(fi_enable(ep_.get()));
}

Endpoint::~Endpoint() = default;

std::string Endpoint::provider_name() const
{
	return info_->fabric_attr->prov_name ? info_->fabric_attr->prov_name : "(unnamed)";
}

uint64_t Endpoint::cq_data_mask() const
{
	const size_t bytes = info_->domain_attr->cq_data_size;
	return bytes >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * bytes)) - 1;
}

size_t Endpoint::buffered_limit(size_t otherwise) const
{
	size_t limit = 0, len = sizeof(limit);
	return fi_getopt(&ep_->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &limit, &len) == 0
		       ? limit
		       : otherwise;
}

std::vector<uint8_t> Endpoint::local_address() const
{
	size_t length = 0;
	const int probe = fi_getname(&ep_->fid, nullptr, &length);
	if (probe != -FI_ETOOSMALL)
		check_rc(probe, "fi_getname(ep, NULL, &length)");
	std::vector<uint8_t> address(length);
	FT_CHECK(fi_getname(&ep_->fid, address.data(), &length));
	address.resize(length);
	return address;
}

fi_addr_t Endpoint::insert_address(std::span<const uint8_t> address)
{
	fi_addr_t fi_addr = FI_ADDR_NOTAVAIL;
	const int inserted = fi_av_insert(av_.get(), address.data(), 1, &fi_addr, 0, nullptr);
	if (inserted < 0)
		throw FabricError("fi_av_insert(av, address, 1, &fi_addr, 0, NULL)", inserted,
				  std::source_location::current());
	expect(inserted == 1, "fi_av_insert inserted %d of 1 addresses", inserted);
	return fi_addr;
}

std::vector<fi_addr_t> Endpoint::exchange_addresses(Bootstrap& boot)
{
	const auto names = boot.allgather(local_address());
	std::vector<fi_addr_t> addresses;
	addresses.reserve(names.size());
	for (const auto& name : names)
		addresses.push_back(insert_address(name));
	return addresses;
}

void Endpoint::dispatch(const fi_cq_tagged_entry& entry, fi_addr_t source)
{
	if (entry.op_context == nullptr) {
		unsolicited_.push_back({entry, source, 0});
		return;
	}
	OpContext* ctx = &context_of(entry.op_context, entry.flags);
	// The message is built only when it is needed: this runs per completion.
	if (ctx->done)
		throw CheckFailure(strfmt("second completion for one operation (flags %s)",
					  describe_flags(entry.flags).c_str()));
	if (ctx->multi) {
		ctx->pieces.push_back({entry, 0, 0});
		keep_multi_pending(*ctx, entry.flags);
		return;
	}
	ctx->entry = entry;
	ctx->source = source;
	ctx->done = true;
}

// A multi-receive buffer is done at its release; until then, a tracked one
// stays pending for its next completion.
void Endpoint::keep_multi_pending(OpContext& ctx, uint64_t flags)
{
	if (flags & FI_MULTI_RECV)
		ctx.done = true;
	else if (track_contexts_)
		pending_.push_back(&ctx);
}

bool Endpoint::forget_pending(const OpContext* ctx)
{
	for (size_t i = pending_.size(); i-- > 0;) {
		if (pending_[i] == ctx) {
			pending_[i] = pending_.back();
			pending_.pop_back();
			return true;
		}
	}
	return false;
}

OpContext& Endpoint::context_of(void* op_context, uint64_t flags)
{
	auto* ctx = static_cast<OpContext*>(op_context);
	if (track_contexts_ && !forget_pending(ctx))
		throw CheckFailure(
			strfmt("a completion (flags %s) names op_context %p, which is no "
			       "operation this client has pending",
			       describe_flags(flags).c_str(), op_context));
	return *ctx;
}

void Endpoint::dispatch_error()
{
	fi_cq_err_entry err{};
	const ssize_t rc = fi_cq_readerr(cq_.get(), &err, 0);
	if (rc == -FI_EAGAIN)
		return;
	if (rc < 0)
		throw FabricError("fi_cq_readerr(cq, &err, 0)", rc,
				  std::source_location::current());
	char buffer[256] = {};
	const char* text =
		fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buffer, sizeof buffer);
	if (err.op_context == nullptr) {
		UnsolicitedEvent event;
		event.entry.flags = err.flags;
		event.entry.len = err.len;
		event.entry.data = err.data;
		event.entry.tag = err.tag;
		event.error = err.err;
		unsolicited_.push_back(event);
		return;
	}
	OpContext* ctx = &context_of(err.op_context, err.flags);
	expect(!ctx->done, "error completion (%d, %s) for an operation that already completed",
	       err.err, fi_strerror(err.err));
	if (ctx->multi) {
		fi_cq_tagged_entry entry{err.op_context, err.flags, err.len,
					 err.buf,        err.data,  err.tag};
		ctx->pieces.push_back({entry, err.err, err.olen});
		keep_multi_pending(*ctx, err.flags);
		return;
	}
	ctx->err = err;
	ctx->err.err_data = nullptr; // only valid until the next CQ read
	ctx->error = err.err;
	ctx->err_text = text ? text : "";
	ctx->done = true;
}

size_t Endpoint::progress()
{
	constexpr size_t kBatch = 32;
	fi_cq_tagged_entry entries[kBatch];
	fi_addr_t sources[kBatch];
	const ssize_t n = has_source() ? fi_cq_readfrom(cq_.get(), entries, kBatch, sources)
				       : fi_cq_read(cq_.get(), entries, kBatch);
	if (n > 0) {
		for (ssize_t i = 0; i < n; ++i)
			dispatch(entries[i], has_source() ? sources[i] : FI_ADDR_NOTAVAIL);
		return static_cast<size_t>(n);
	}
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		dispatch_error();
		return 1;
	}
	throw FabricError(has_source() ? "fi_cq_readfrom" : "fi_cq_read", n,
			  std::source_location::current());
}

void Endpoint::progress_until(const std::function<bool()>& pred, const std::string& what,
			      std::chrono::milliseconds budget)
{
	Deadline deadline(budget);
	LongWait long_wait(what);
	Backoff backoff;
	unsigned polls = 0;
	while (!pred()) {
		if (progress() == 0)
			backoff.pause();
		if (++polls % 64 != 0)
			continue;
		long_wait.check();
		if (deadline.expired())
			throw CheckFailure(strfmt("timed out after %lld ms waiting for %s",
						  static_cast<long long>(budget.count()),
						  what.c_str()));
	}
}

void Endpoint::wait_done(OpContext& ctx, const std::string& what, std::chrono::milliseconds budget)
{
	progress_until([&] { return ctx.done; }, what, budget);
}

void Endpoint::wait_ok(OpContext& ctx, const std::string& what, std::chrono::milliseconds budget)
{
	wait_done(ctx, what, budget);
	if (ctx.error != 0)
		throw CheckFailure(strfmt("%s completed with an error: %s", what.c_str(),
					  describe_error(ctx).c_str()));
}

void Endpoint::post(std::string_view call, const std::function<ssize_t()>& op,
		    std::source_location where, std::chrono::milliseconds budget)
{
	Deadline deadline(budget);
	Backoff backoff;
	for (;;) {
		const ssize_t rc = op();
		if (rc == 0)
			return;
		if (rc != -FI_EAGAIN)
			throw FabricError(call, rc, where);
		if (progress() == 0)
			backoff.pause();
		if (deadline.expired())
			throw CheckFailure(strfmt("%.*s still returned -FI_EAGAIN after %lld ms",
						  static_cast<int>(call.size()), call.data(),
						  static_cast<long long>(budget.count())));
	}
}

RegisteredBuffer::RegisteredBuffer(Endpoint& endpoint, size_t bytes, uint64_t access)
	: size_(bytes), virtual_addresses_(endpoint.mr_virtual_addresses())
{
	constexpr size_t kPage = 4096;
	const size_t allocated = std::max<size_t>(kPage, (bytes + kPage - 1) / kPage * kPage);
	memory_.reset(static_cast<uint8_t*>(std::aligned_alloc(kPage, allocated)));
	if (!memory_)
		throw std::bad_alloc();
	std::memset(memory_.get(), 0, allocated);

	fid_mr* mr = nullptr;
	const uint64_t requested_key = endpoint.next_requested_key();
	FT_CHECK(fi_mr_reg(endpoint.domain(), memory_.get(), allocated, access, 0, requested_key, 0,
			   &mr, nullptr));
	mr_.reset(mr);
	key_ = fi_mr_key(mr_.get());
	expect(key_ != FI_KEY_NOTAVAIL,
	       "fi_mr_key returned FI_KEY_NOTAVAIL (raw keys are not supported "
	       "by these tests)");
}

RegisteredBuffer::~RegisteredBuffer() = default;

std::span<uint8_t> RegisteredBuffer::bytes(size_t offset, size_t length) const
{
	const size_t available = offset <= size_ ? size_ - offset : 0;
	return {memory_.get() + offset, std::min(length, available)};
}

uint64_t RegisteredBuffer::remote_address(size_t offset) const
{
	return virtual_addresses_ ? reinterpret_cast<uint64_t>(memory_.get()) + offset : offset;
}

// ================================================================ descriptions

std::string describe_flags(uint64_t flags)
{
	static constexpr std::pair<uint64_t, const char*> kNames[] = {
		{FI_MSG, "FI_MSG"},
		{FI_RMA, "FI_RMA"},
		{FI_TAGGED, "FI_TAGGED"},
		{FI_ATOMIC, "FI_ATOMIC"},
		{FI_READ, "FI_READ"},
		{FI_WRITE, "FI_WRITE"},
		{FI_RECV, "FI_RECV"},
		{FI_SEND, "FI_SEND"},
		{FI_REMOTE_READ, "FI_REMOTE_READ"},
		{FI_REMOTE_WRITE, "FI_REMOTE_WRITE"},
		{FI_MULTI_RECV, "FI_MULTI_RECV"},
		{FI_REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"},
		{FI_PEEK, "FI_PEEK"},
		{FI_CLAIM, "FI_CLAIM"},
		{FI_DISCARD, "FI_DISCARD"},
		{FI_SOURCE, "FI_SOURCE"},
		{FI_SOURCE_ERR, "FI_SOURCE_ERR"},
		{FI_DIRECTED_RECV, "FI_DIRECTED_RECV"},
	};
	std::string text;
	uint64_t rest = flags;
	for (const auto& [bit, name] : kNames) {
		if ((flags & bit) == 0)
			continue;
		if (!text.empty())
			text += '|';
		text += name;
		rest &= ~bit;
	}
	if (rest != 0)
		text += strfmt("%s0x%llx", text.empty() ? "" : "|",
			       static_cast<unsigned long long>(rest));
	return text.empty() ? "0" : text;
}

void progress_for(Endpoint& ep, std::chrono::milliseconds duration)
{
	Deadline deadline(duration);
	while (!deadline.expired())
		if (ep.progress() == 0)
			std::this_thread::sleep_for(std::chrono::microseconds(100));
}

std::string describe_error(const OpContext& ctx)
{
	return strfmt("err=%d (%s), prov_errno=%d (%s), len=%zu, olen=%zu, flags=%s", ctx.error,
		      fi_strerror(ctx.error), ctx.err.prov_errno, ctx.err_text.c_str(), ctx.err.len,
		      ctx.err.olen, describe_flags(ctx.err.flags).c_str());
}

size_t resident_bytes()
{
	std::ifstream statm("/proc/self/statm");
	size_t total_pages = 0;
	size_t resident_pages = 0;
	statm >> total_pages >> resident_pages;
	return resident_pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// ================================================================ command lines

const char* option_value(int& i, int argc, char** argv)
{
	if (i + 1 >= argc) {
		std::fprintf(stderr, "%s needs a value\n", argv[i]);
		std::exit(2);
	}
	return argv[++i];
}

void CaseReport::add(const LaunchResult& result, std::string_view name, const std::string& where,
		     double seconds)
{
	const char* label = result.outcome == Outcome::passed   ? "PASS"
			    : result.outcome == Outcome::failed ? "FAIL"
								: "N/A";
	std::printf("%s %.*s [%s, %.1f s]: %s\n", label, static_cast<int>(name.size()), name.data(),
		    where.c_str(), seconds, result.detail.c_str());
	std::fflush(stdout);
	passed_ += result.outcome == Outcome::passed;
	failed_ += result.outcome == Outcome::failed;
	not_applicable_ += result.outcome == Outcome::not_applicable;
}

int CaseReport::finish() const
{
	const int cases = passed_ + failed_ + not_applicable_;
	if (cases > 1)
		std::printf("# %d cases: %d PASS, %d FAIL, %d N/A\n", cases, passed_, failed_,
			    not_applicable_);
	return failed_ == 0 ? 0 : 1;
}

int usable_cpus()
{
	cpu_set_t set;
	return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

bool bind_to_cpu(int index)
{
	cpu_set_t allowed;
	if (index < 0 || sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
		return false;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed) || index-- > 0)
			continue;
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		return sched_setaffinity(0, sizeof(one), &one) == 0;
	}
	return false;
}

} // namespace fabtests
