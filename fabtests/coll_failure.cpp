// A member killed in the middle of a collective: the survivors must get
// error completions within a bound, and groups without the dead rank must
// keep working. A member that enters a collective long after the others
// gave up on it: everyone gets an error, nobody hangs.
#include "coll_cases.hpp"

#include <dirent.h>
#include <unistd.h>

#include <climits>
#include <csignal>

namespace fabtests::coll {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kRanks = 4;
constexpr int kVictim = 3;
constexpr int kKiller = 0;
constexpr int kVictimPostedSignal = 0;
constexpr int kSurvivorSyncSignal = 1;
constexpr int kErrorsSeenSignal = 2;

// After the kill, every operation on the dead rank's group must end within
// this bound (rcoll sees a killed peer's connections reset within
// milliseconds, when the CQ is read).
constexpr seconds kFailureBound{10};

// Memory files (memfd) this process holds open: a provider that shares
// memory with members on its host keeps one per group.
size_t open_memory_files()
{
	size_t n = 0;
	DIR* dir = opendir("/proc/self/fd");
	if (!dir)
		return 0;
	while (const dirent* e = readdir(dir)) {
		const std::string path = std::string("/proc/self/fd/") + e->d_name;
		char target[PATH_MAX];
		const ssize_t len = readlink(path.c_str(), target, sizeof(target) - 1);
		n += len > 0 && std::string_view(target, size_t(len)).starts_with("/memfd:");
	}
	closedir(dir);
	return n;
}

// A failed group, once closed, must give back what it holds: where the
// provider kept a memory file for it, the count of open files drops.
void expect_failed_group_released(CollEndpoint& ep, size_t files_before_close, const char* what)
{
	if (files_before_close == 0)
		return; // nothing shared through memory files on this rank
	const Deadline deadline(kFailureBound);
	while (open_memory_files() >= files_before_close && !deadline.expired())
		ep.progress();
	expect(open_memory_files() < files_before_close,
	       "%s: %zu memory files still open %lld s after its close, as before it", what,
	       files_before_close, static_cast<long long>(kFailureBound.count()));
}

void run_rank_killed(Bootstrap& boot, const TestOptions& options)
{
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	const int me = boot.rank();
	auto full = join_shape(ep, boot, world, Shape::full);
	std::unique_ptr<Group> survivors;
	if (me != kVictim)
		survivors = std::make_unique<Group>(ep, av_set_range(ep, world[0], world[2], 1, 3),
						    std::vector<int>{0, 1, 2}, world, me,
						    "survivor group {0,1,2}");
	CheckedCall checked;
	run_checked(ep, checked, *full, {FI_ALLREDUCE, 1000, FI_INT32, FI_SUM},
		    make_seed(0xDEAD, 0));
	ProgressingBarrier(ep, boot, kRanks).wait();

	// Everyone enters a 16 MiB allreduce, the victim first and alone: it
	// drives progress for a moment, then stops itself (every thread, a
	// progress thread too) and is killed while the others wait. However
	// fast the machine, its part cannot finish: its later steps need the
	// others', who post only after it said it stops.
	const CallSpec doomed{FI_ALLREDUCE, 4u << 20, FI_INT32, FI_SUM};
	CheckedCall big;
	big.prepare(*full, doomed, make_seed(0xDEAD, 1));
	if (me == kVictim) {
		big.post(ep);
		const Deadline briefly(milliseconds(5));
		while (!briefly.expired())
			ep.progress();
		boot.signal_set(kVictimPostedSignal, 1);
		raise(SIGSTOP);
		for (;;)
			pause();
	}
	boot.signal_wait_at_least(kVictimPostedSignal, 1, nullptr, seconds(30));
	big.post(ep);
	if (me == kKiller)
		boot.kill_rank(kVictim);
	const auto killed_at = Clock::now();

	// While the survivors fail the big allreduce, a large one on the group
	// without the victim runs over the same connections: failing one group
	// must not disturb them (a late write into a buffer the failing group
	// released makes the core close the connection it came on).
	CheckedCall alongside;
	alongside.prepare(*survivors, {FI_ALLREDUCE, 1u << 20, FI_INT32, FI_SUM},
			  make_seed(0xDEAD, 2));
	alongside.post(ep);

	ep.wait_done(big.context(), "the allreduce the killed rank was part of", kFailureBound);
	const double ended_after = std::chrono::duration<double>(Clock::now() - killed_at).count();
	// A survivor whose result did not depend on the victim's later steps may
	// complete; then its result must be right. Somebody must see the error.
	const bool failed = big.context().error != 0;
	if (!failed)
		big.verify();
	boot.signal_add(kErrorsSeenSignal, failed ? 1 : 0);

	// A further call on the broken group must fail too, not hang.
	OpContext after;
	const ssize_t rc = issue(ep, *full, {FI_BARRIER}, nullptr, nullptr, after);
	if (rc == 0) {
		ep.wait_done(after, "a barrier posted on the broken group", kFailureBound);
		expect(after.error != 0,
		       "a barrier on a group with a dead member completed successfully");
	} else {
		expect(rc != -FI_EAGAIN,
		       "a barrier on the broken group keeps returning -FI_EAGAIN");
	}
	const size_t files = open_memory_files();
	expect(full->close() == 0, "fi_close of the broken group failed");
	expect_failed_group_released(ep, files, "the broken group");

	alongside.wait(ep);
	alongside.verify();

	// The group without the dead rank still works, and so does a new one.
	ProgressingBarrier survivors_sync(ep, boot, kRanks - 1, kSurvivorSyncSignal);
	survivors_sync.wait();
	expect(boot.signal_get(kErrorsSeenSignal) > 0,
	       "no survivor got an error completion for the allreduce rank %d was killed in",
	       kVictim);
	uint64_t k = 3;
	for (const CallSpec& call : {CallSpec{FI_ALLREDUCE, 4099, FI_INT64, FI_SUM},
				     CallSpec{FI_BROADCAST, 70000, FI_UINT8, FI_SUM, 2},
				     CallSpec{FI_BARRIER}, CallSpec{FI_ALLGATHER, 513, FI_DOUBLE}})
		run_checked(ep, checked, *survivors, call, make_seed(0xDEAD, k++));
	Group fresh(ep, av_set_inserted(ep, std::vector<fi_addr_t>{world[2], world[1], world[0]}),
		    {2, 1, 0}, world, me, "new group {2,1,0} after the failure");
	run_checked(ep, checked, fresh, {FI_REDUCE_SCATTER, 257, FI_FLOAT, FI_SUM},
		    make_seed(0xDEAD, k++));
	run_checked(ep, checked, fresh, {FI_GATHER, 100, FI_INT16, FI_SUM, 0},
		    make_seed(0xDEAD, k++));
	survivors_sync.wait();
	boot.note(strfmt("rank %d: %s %.3f s after the kill, survivor groups verified", me,
			 failed ? fi_strerror(big.context().error) : "completed correctly",
			 ended_after));
}

constexpr int kLateRanks = 3;
constexpr int kLate = 2;
constexpr milliseconds kCollTimeout{1000};

// The cases below run with a short FI_RCOLL_COLL_TIMEOUT_MS, rcoll's own.
void shorten_coll_timeout(const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable("FI_RCOLL_COLL_TIMEOUT_MS is an rcoll parameter");
	setenv("FI_RCOLL_COLL_TIMEOUT_MS", std::to_string(kCollTimeout.count()).c_str(), 1);
}

// The others time out waiting for the late member and fail the group in two
// steps; the late member, alive and on this host, cannot confirm it stopped
// while it computes, so they wait out the bound, then end their calls. When
// it wakes, it must learn that the group failed (stop notices, and on the
// node-local path the stop marks in its doorbell) and end its own call with
// an error rather than wait for members that left.
void run_member_too_late(Bootstrap& boot, const TestOptions& options)
{
	shorten_coll_timeout(options);
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	const int me = boot.rank();
	auto group = join_shape(ep, boot, world, Shape::full);
	CheckedCall checked;
	run_checked(ep, checked, *group, {FI_ALLREDUCE, 100, FI_INT32, FI_SUM},
		    make_seed(0x1A7E, 0));
	ProgressingBarrier sync(ep, boot, kLateRanks);
	sync.wait();

	// Timeout, then at most the same again for stop confirmations: well
	// under this bound.
	const milliseconds bound = 8 * kCollTimeout;
	if (me == kLate)
		::usleep(static_cast<useconds_t>(
			std::chrono::microseconds(3 * kCollTimeout).count()));
	const auto posted = Clock::now();
	OpContext barrier;
	const ssize_t rc = issue(ep, *group, {FI_BARRIER}, nullptr, nullptr, barrier);
	double after = 0;
	if (rc == 0) {
		ep.wait_done(barrier,
			     me == kLate ? "the late member's barrier"
					 : "a barrier the late member misses",
			     bound);
		after = std::chrono::duration<double>(Clock::now() - posted).count();
		expect(barrier.error != 0,
		       "rank %d: the barrier completed although rank %d came %lld ms late", me,
		       kLate, static_cast<long long>(3 * kCollTimeout.count()));
	} else {
		expect(rc != -FI_EAGAIN,
		       "rank %d: fi_barrier on the failed group keeps returning -FI_EAGAIN", me);
	}
	const size_t files = open_memory_files();
	expect(group->close() == 0, "fi_close of the failed group failed");
	expect_failed_group_released(ep, files, "the failed group");

	// The connections the failed group shares still carry a new group.
	sync.wait();
	Group fresh(ep, av_set_inserted(ep, std::vector<fi_addr_t>{world[1], world[2], world[0]}),
		    {1, 2, 0}, world, me, "new group {1,2,0} after the failure");
	run_checked(ep, checked, fresh, {FI_ALLREDUCE, 1u << 18, FI_INT64, FI_SUM},
		    make_seed(0x1A7E, 1));
	run_checked(ep, checked, fresh, {FI_BARRIER}, make_seed(0x1A7E, 2));
	sync.wait();
	boot.note(strfmt("rank %d%s: %s %.2f s after posting; a new group verified", me,
			 me == kLate ? " (late)" : "",
			 rc == 0 ? fi_strerror(barrier.error) : "refused at posting", after));
}

constexpr int kLateJoiner = 2;

// The others' joins time out while one member has not joined yet; their
// stop notices reach it before it joins. Its join must then fail too: it
// has every other member's join record, but those members are gone, and a
// join that completed would leave its first call waiting out the timeout.
void run_late_joiner(Bootstrap& boot, const TestOptions& options)
{
	shorten_coll_timeout(options);
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	const int me = boot.rank();
	ProgressingBarrier sync(ep, boot, kLateRanks);
	sync.wait(); // every endpoint is up
	if (me == kLateJoiner) {
		::usleep(static_cast<useconds_t>(
			std::chrono::microseconds(3 * kCollTimeout).count()));
		// What the others sent arrives before the join is made.
		const Deadline settle(milliseconds(500));
		while (!settle.expired())
			ep.progress();
	}
	AvSetPtr set = av_set_range(ep, world.front(), world.back(), 1, world.size());
	fi_addr_t set_addr = FI_ADDR_NOTAVAIL;
	FT_CHECK(fi_av_set_addr(set.get(), &set_addr));
	fid_mc* raw = nullptr;
	FT_CHECK(fi_join_collective(ep.ep(), set_addr, set.get(), 0, &raw, nullptr));
	FidPtr<fid_mc> mc(raw);
	const auto joined_at = Clock::now();
	const JoinEvent event = ep.wait_join(raw, "the join", 8 * kCollTimeout);
	const double after = std::chrono::duration<double>(Clock::now() - joined_at).count();
	expect(event.error != 0,
	       me == kLateJoiner
		       ? "rank %d: the late join completed although the others had failed it"
		       : "rank %d: the join completed although rank 2 had not joined",
	       me);
	if (me == kLateJoiner)
		expect(after < 0.5 * std::chrono::duration<double>(kCollTimeout).count(),
		       "rank %d: the late join failed only after %.2f s (its own timeout)", me,
		       after);
	mc.reset();

	// A new group of the same members works.
	sync.wait();
	Group fresh(ep, av_set_inserted(ep, std::vector<fi_addr_t>{world[0], world[1], world[2]}),
		    {0, 1, 2}, world, me, "new group after the failed join");
	CheckedCall checked;
	run_checked(ep, checked, fresh, {FI_ALLREDUCE, 1000, FI_INT32, FI_SUM},
		    make_seed(0x1A7E, 7));
	sync.wait();
	boot.note(strfmt("rank %d%s: join failed with %s %.2f s after fi_join; a new group "
			 "verified",
			 me, me == kLateJoiner ? " (late)" : "", fi_strerror(event.error), after));
}

} // namespace

void add_failure_cases(std::vector<CollCase>& cases)
{
	cases.push_back(
		{"rank-killed",
		 "4 ranks: SIGKILL one inside a 16 MiB allreduce; the others get error completions "
		 "within "
		 "10 s, further calls on that group fail, a 4 MiB allreduce of the group without "
		 "it "
		 "posted during the failure succeeds, and that group and a new one keep working",
		 kRanks, seconds(120), "", run_rank_killed});
	cases.push_back({"late-joiner",
			 "3 ranks, FI_RCOLL_COLL_TIMEOUT_MS=1000: two join, the third 3 s later; "
			 "the two joins time out, the late one fails at once on their stop "
			 "notices, and a new group works",
			 kLateRanks, seconds(60), "", run_late_joiner});
	cases.push_back(
		{"member-too-late",
		 "3 ranks, FI_RCOLL_COLL_TIMEOUT_MS=1000: one enters a barrier 3 s after the "
		 "others; they get "
		 "errors, so does it when it arrives, none waits past 8 s, and a new group works",
		 kLateRanks, seconds(60), "", run_member_too_late});
}

} // namespace fabtests::coll
