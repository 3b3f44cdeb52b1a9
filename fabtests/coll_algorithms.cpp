// Every algorithm rcoll implements, forced in turn through
// FI_RCOLL_COLL_TUNE, on groups of several sizes and at sizes on both sides
// of the eager/rendezvous and chunking thresholds.
//
// The list of algorithms comes from the engine's own table
// (rcoll::engine::algorithms_for), so an algorithm added there is covered
// here without editing this file; nothing else of the engine is used.
//
// Also: which path a group's writes take (node-local or through the core),
// as FI_RCOLL_COLL_LOCAL chooses it.
#include "coll_cases.hpp"

#include "engine/schedule.hpp"
#include "syscall_counter.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>
#include <unistd.h>

namespace fabtests::coll {

namespace {

using std::chrono::seconds;

// The engine's collectives are declared in fi_collective_op order.
fi_collective_op to_fi(rcoll::engine::Collective c)
{
	return static_cast<fi_collective_op>(static_cast<int>(c));
}

void require_rcoll(const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable("the case is about rcoll's own parameters");
}

// Sizes in bytes (per call, or per rank block) for the engine's algorithms
// (the shared-memory path is off here): tiny, around 16 KiB, just below and
// above the 64 KiB landing limit of the scratch, several 64 KiB chunks, and
// an odd megabyte.
std::vector<size_t> forced_sizes(bool quick)
{
	if (quick)
		return {1, 64 * 1024 + 1, 200 * 1024};
	return {1,
		100,
		16 * 1024 - 1,
		16 * 1024 + 1,
		64 * 1024 - 1,
		64 * 1024 + 1,
		200 * 1024,
		(1u << 20) + 3};
}

void run_forced(Bootstrap& boot, const TestOptions& options, fi_collective_op coll)
{
	require_rcoll(options);
	// The algorithms forced are the engine's: on one host the shared-memory
	// path would take the small calls, and in groups that keep a CPU each
	// every reduction and allgather.
	setenv("FI_RCOLL_COLL_SHM", "0", 1);
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	ProgressingBarrier sync(ep, boot, boot.size());
	CheckedCall checked;
	size_t verified = 0;
	std::string sizes_seen;
	// Full group and this rank's stride-2 group: two group sizes per launch.
	for (Shape shape : {Shape::full, Shape::strided}) {
		auto group = join_shape(ep, boot, world, shape);
		if (coll == FI_BARRIER) {
			check_barrier_semantics(ep, boot, *group,
						shape == Shape::full ? 0 : 1 + boot.rank() % 2,
						options.quick ? 5 : 20);
			verified += options.quick ? 5 : 20;
		} else {
			static constexpr fi_datatype kTypes[] = {FI_INT32, FI_FLOAT, FI_UINT8,
								 FI_DOUBLE, FI_INT64};
			const int last = group->size() - 1;
			uint64_t k = 0;
			std::vector<int> roots = {0};
			if (is_rooted(coll) && last > 0)
				roots.push_back(last);
			for (size_t bytes : forced_sizes(options.quick)) {
				for (int root : roots) {
					const fi_datatype type = kTypes[k % std::size(kTypes)];
					const size_t element = datatype_info(type).size;
					const CallSpec call{coll, (bytes + element - 1) / element,
							    type, valid_op(type, k), root};
					boot.note(strfmt("last started: %s on %s",
							 call.describe().c_str(),
							 group->label().c_str()));
					run_checked(ep, checked, *group, call,
						    make_seed(0xA160, k++,
							      static_cast<uint64_t>(shape)));
					++verified;
				}
			}
		}
		sizes_seen += strfmt("%s%d", sizes_seen.empty() ? "" : ",", group->size());
		sync.wait();
	}
	summary_note(boot,
		     strfmt("%zu verified calls on groups of %s", verified, sizes_seen.c_str()));
}

// Members that disagree on how to choose algorithms (FI_RCOLL_COLL_TUNE,
// the cost model's constants) would build schedules that do not match: the
// join must fail on both sides, which also shows that the variable reaches
// the provider. Members that spell the same constants differently (one sets
// a default's value, the other leaves it unset; `other_value` nullptr) agree.
void run_config_mismatch(Bootstrap& boot, const TestOptions& options, const char* variable,
			 const char* rank0_value, const char* other_value)
{
	require_rcoll(options);
	const char* mine = boot.rank() == 0 ? rank0_value : other_value;
	if (mine)
		setenv(variable, mine, 1);
	else
		unsetenv(variable);
	const bool must_refuse = other_value != nullptr;
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	AvSetPtr set = av_set_range(ep, world.front(), world.back(), 1, world.size());
	fi_addr_t set_addr = FI_ADDR_NOTAVAIL;
	FT_CHECK(fi_av_set_addr(set.get(), &set_addr));
	fid_mc* raw = nullptr;
	int join_context = 0;
	FT_CHECK(fi_join_collective(ep.ep(), set_addr, set.get(), 0, &raw, &join_context));
	FidPtr<fid_mc> mc(raw);
	const JoinEvent event =
		ep.wait_join(mc.get(), strfmt("join with %s set on rank 0", variable), seconds(10));
	expect(event.context == &join_context, "the join's event carries context %p, want %p",
	       event.context, static_cast<void*>(&join_context));
	if (must_refuse) {
		expect(event.error != 0,
		       "the join succeeded although rank 0 sets %s=%s and rank 1 %s", variable,
		       rank0_value, other_value);
		ProgressingBarrier(ep, boot, boot.size()).wait();
		summary_note(boot, strfmt("join refused with %s", fi_strerror(event.error)));
		return;
	}
	expect(event.error == 0, "the join failed (%s) although %s=%s is the default",
	       fi_strerror(event.error), variable, rank0_value);
	OpContext ctx;
	FT_CHECK(fi_barrier(ep.ep(), fi_mc_addr(mc.get()), &ctx));
	ep.track(ctx);
	ep.wait_done(ctx, "barrier on the group");
	expect_collective_completion(ctx, "barrier on the group");
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, strfmt("joined, %s=%s on rank 0 only", variable, rank0_value));
}

// FI_RCOLL_COLL_LOCAL as this rank's provider reads it (default on).
bool offers_node_local(const char* value) { return !value || std::string_view(value) != "0"; }

// Collective scratch files mapped into this process, told apart by inode
// (a registration may split one mapping into several lines).
int mapped_regions()
{
	std::ifstream maps("/proc/self/maps");
	std::set<std::string> inodes;
	for (std::string line; std::getline(maps, line);) {
		if (line.find("memfd:rcoll-coll") == std::string::npos)
			continue;
		std::istringstream fields(line);
		std::string range, perms, offset, device, inode;
		fields >> range >> perms >> offset >> device >> inode;
		inodes.insert(device + ":" + inode);
	}
	return static_cast<int>(inodes.size());
}

// Process descriptors (pidfds) this process holds.
int open_pidfds()
{
	int n = 0;
	for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
		std::error_code error;
		n += std::filesystem::read_symlink(entry.path(), error).string() ==
		     "anon_inode:[pidfd]";
	}
	return n;
}

// A rank that offers the node-local path keeps its scratch in a memory
// file, and members on one host map each other's when both offer the path,
// and only then: the mappings show which path each pair took, and verified
// calls show that it carries the data. Under RCOLL_TEST_COLL_LOCAL=even
// only even ranks offer it; with ranks on several "hosts" (network
// namespaces, RCOLL_TEST_NETNS) only those in the same one are local.
void run_node_local_path(Bootstrap& boot, const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable("the node-local path is rcoll's");
	const bool mixed = std::string_view(std::getenv("RCOLL_TEST_COLL_LOCAL") ?: "") == "even";
	const bool mine = offers_node_local(std::getenv("FI_RCOLL_COLL_LOCAL"));
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	expect(mapped_regions() == 0, "%d collective regions mapped before any join",
	       mapped_regions());
	auto group = join_shape(ep, boot, world, Shape::full);
	int peers_local = 0;
	for (int r = 0; r < boot.size(); ++r)
		if (r != boot.rank() && mine && (!mixed || r % 2 == 0) &&
		    namespace_of_rank(r) == namespace_of_rank(boot.rank()))
			++peers_local;
	const int mapped = mapped_regions();
	const int own = mine ? 1 : 0;
	expect(mapped == own + peers_local,
	       "rank %d (FI_RCOLL_COLL_LOCAL %s) maps %d collective scratch files; want %d of its "
	       "own and %d of "
	       "local members",
	       boot.rank(), mine ? "on" : "off", mapped, own, peers_local);
	// A second group of the same members maps their second files, but
	// watches each member's process with the pidfd it already has.
	auto second = join_shape(ep, boot, world, Shape::reversed);
	expect(mapped_regions() == 2 * (own + peers_local),
	       "rank %d maps %d collective scratch files with 2 groups; "
	       "want %d",
	       boot.rank(), mapped_regions(), 2 * (own + peers_local));
	expect(open_pidfds() == peers_local,
	       "rank %d holds %d pidfds for %d local members in 2 groups", boot.rank(),
	       open_pidfds(), peers_local);
	CheckedCall checked;
	uint64_t k = 0;
	run_checked(ep, checked, *second, {FI_ALLREDUCE, 1000, FI_INT32, FI_SUM},
		    make_seed(0x10CA, 99));
	for (const CallSpec& call :
	     {CallSpec{FI_BARRIER, 0, FI_UINT8}, CallSpec{FI_ALLREDUCE, 1, FI_INT64, FI_SUM},
	      CallSpec{FI_BROADCAST, (1u << 20) + 3, FI_UINT8, FI_SUM, boot.size() - 1},
	      CallSpec{FI_ALLREDUCE, 1u << 19, FI_DOUBLE, FI_SUM},
	      CallSpec{FI_ALLGATHER, 70000, FI_INT32}})
		run_checked(ep, checked, *group, call, make_seed(0x10CA, k++));
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot,
		     strfmt("rank %d maps %d members' scratch files (%s), %llu verified calls",
			    boot.rank(), mapped - own, mine ? "node-local on" : "node-local off",
			    static_cast<unsigned long long>(k)));
}

// Binds the ranks, all on one host, to a CPU each (apart) or all to the
// first; not applicable where they are not on one host, or too many.
void bind_on_one_host(Bootstrap& boot, bool apart)
{
	if (apart && usable_cpus() < boot.size())
		throw NotApplicable(strfmt("%d ranks bound apart need as many CPUs; %d usable",
					   boot.size(), usable_cpus()));
	for (int r = 0; r < boot.size(); ++r)
		if (namespace_of_rank(r) != namespace_of_rank(boot.rank()))
			throw NotApplicable("the ranks run on different hosts");
	expect(bind_to_cpu(apart ? boot.rank() : 0), "rank %d could not be bound to a CPU",
	       boot.rank());
}

// Every rank's `mine`, in rank order.
std::vector<uint64_t> counts_of_all(Bootstrap& boot, uint64_t mine)
{
	std::vector<uint64_t> all;
	for (const auto& theirs :
	     boot.allgather(std::span(reinterpret_cast<const uint8_t*>(&mine), sizeof(mine)))) {
		uint64_t n = 0;
		std::memcpy(&n, theirs.data(), std::min(sizeof(n), theirs.size()));
		all.push_back(n);
	}
	return all;
}

// Ranks bound to CPUs of their own, as mpirun binds them by default, do not
// crowd the host: a rank waiting for another must spin, not yield (under
// load a yield hands the CPU to whoever else is runnable for a whole time
// slice). Ranks bound to one CPU do: there a spinner keeps the rank it waits
// for off the CPU, and must yield. So must ranks told that the host is
// crowded (FI_RCOLL_YIELD_WHEN_IDLE: by what rcoll cannot see, such as
// namespaces sharing the CPUs), bound apart or not. Counts the sched_yield
// calls made while this rank waits for barriers in a loop of its own that
// only reads the CQ.
void run_bound_ranks(Bootstrap& boot, const TestOptions& options, bool apart, bool told_crowded)
{
	require_rcoll(options);
	if (told_crowded)
		setenv("FI_RCOLL_YIELD_WHEN_IDLE", "1", 1);
	const bool must_yield = !apart || told_crowded;
	const SyscallCounter yields("syscalls/sys_enter_sched_yield");
	if (!yields.available())
		throw NotApplicable("sched_yield calls cannot be counted: " + yields.why_not());
	bind_on_one_host(boot, apart);
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	ProgressingBarrier(ep, boot, boot.size()).wait();
	// Ranks sharing a CPU switch at least once per barrier: fewer suffice,
	// and each may cost a scheduler slice on a loaded host.
	const int calls = must_yield ? 500 : 2000;
	const uint64_t before = yields.count();
	for (int i = 0; i < calls; ++i) {
		OpContext ctx;
		post(ep, *group, CallSpec{FI_BARRIER, 0, FI_UINT8}, nullptr, nullptr, ctx);
		const Deadline deadline(kDefaultWait);
		for (unsigned polls = 1; !ctx.done; ++polls) {
			ep.progress();
			expect(polls % 4096 || !deadline.expired(), "barrier %d did not complete",
			       i);
		}
		expect_collective_completion(ctx, "barrier");
	}
	const uint64_t made = yields.count() - before;
	// In each barrier only the rank that arrives first waits, so a rank
	// that is mostly late yields little: what must yield is the ranks'
	// waiting, summed.
	uint64_t all_made = 0;
	for (uint64_t n : counts_of_all(boot, made))
		all_made += n;
	if (!must_yield)
		expect(made < unsigned(calls) / 10,
		       "rank %d, bound to a CPU of its own, yielded %llu times in %d barriers",
		       boot.rank(), static_cast<unsigned long long>(made), calls);
	else // the opposite of the bound-apart bound: a stray yield is not enough
		expect(all_made >= unsigned(calls) / 10,
		       "ranks bound %s yielded %llu times in %d barriers between them",
		       apart ? "to CPUs of their own but told the host is crowded" : "to one CPU",
		       static_cast<unsigned long long>(all_made), calls);
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, strfmt("rank %d: %llu yields in %d barriers", boot.rank(),
				  static_cast<unsigned long long>(made), calls));
}

// Whether Yama lets this process attach to its peers (cross-memory attach):
// scope 0 and 1 do (rcoll allows its peers under 1), 2 only with
// CAP_SYS_PTRACE (taken as root), 3 never.
bool may_attach_to_peers()
{
	std::ifstream in("/proc/sys/kernel/yama/ptrace_scope");
	int scope = 0;
	if (!(in >> scope))
		return true; // no Yama
	return scope <= 1 || (scope == 2 && geteuid() == 0);
}

void require_cross_memory_attach()
{
	if (!offers_node_local(std::getenv("FI_RCOLL_COLL_CMA")) || !may_attach_to_peers())
		throw NotApplicable(
			"cross-memory attach is off or refused (FI_RCOLL_COLL_CMA, Yama)");
}

// Large broadcasts of members on one host go in one copy out of the root's
// buffer (process_vm_readv), and so do large allreduces (each member reads
// its share of the other's input, then the other's reduced share), where
// each member has a CPU of its own. Mid-size reductions go through the
// shared slots, one member copying a chunk in while another copies the
// previous one out. Members that crowd their CPUs would yield at every
// chunk, and their large reductions go through the engine, which writes
// into the other members' memory (process_vm_writev). Counts both system
// calls in verified broadcasts and allreduces of 1 MiB: a read or more per
// broadcast at the non-root; in the allreduces two reads or more per member
// apart, writes crowded; and none in allreduces of 128 KiB apart.
void run_large_copies(Bootstrap& boot, const TestOptions& options, bool apart)
{
	require_rcoll(options);
	if (!offers_node_local(std::getenv("FI_RCOLL_COLL_LOCAL")) ||
	    !offers_node_local(std::getenv("FI_RCOLL_COLL_SHM")))
		throw NotApplicable("the shared-memory path is off");
	if (std::getenv("FI_RCOLL_YIELD_WHEN_IDLE"))
		throw NotApplicable("FI_RCOLL_YIELD_WHEN_IDLE says the host is crowded");
	if (std::getenv("FI_RCOLL_COLL_SHM_SINGLE_COPY_ALLREDUCE_MIN"))
		throw NotApplicable("FI_RCOLL_COLL_SHM_SINGLE_COPY_ALLREDUCE_MIN is set");
	require_cross_memory_attach();
	const SyscallCounter reads("syscalls/sys_enter_process_vm_readv");
	const SyscallCounter writes("syscalls/sys_enter_process_vm_writev");
	if (!reads.available() || !writes.available())
		throw NotApplicable("cross-memory attach calls cannot be counted: " +
				    reads.why_not() + writes.why_not());
	bind_on_one_host(boot, apart);
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	constexpr int kCalls = 8;
	CheckedCall checked;
	uint64_t before = reads.count();
	for (int i = 0; i < kCalls; ++i)
		run_checked(ep, checked, *group, {FI_BROADCAST, 1u << 20, FI_UINT8, FI_SUM, 0},
			    make_seed(0xB0C, uint64_t(i)));
	const uint64_t read = reads.count() - before;
	// Reads and writes in kCalls allreduces of `count` int64.
	auto allreduces = [&](uint32_t count, uint64_t seed) {
		const uint64_t read_before = reads.count(), written_before = writes.count();
		for (int i = 0; i < kCalls; ++i)
			run_checked(ep, checked, *group, {FI_ALLREDUCE, count, FI_INT64, FI_SUM},
				    make_seed(seed, uint64_t(i)));
		return std::pair{reads.count() - read_before, writes.count() - written_before};
	};
	const auto [large_read, large_written] = allreduces(1u << 17, 0xA11);
	const auto [mid_read, mid_written] =
		apart ? allreduces(1u << 14, 0xA12) : std::pair<uint64_t, uint64_t>{};
	const auto all_read = counts_of_all(boot, read);
	const auto all_written = counts_of_all(boot, large_written);
	uint64_t sum_written = 0;
	std::string counts;
	for (size_t r = 0; r < all_read.size(); ++r) {
		sum_written += all_written[r];
		counts += strfmt("%s%llu/%llu", counts.empty() ? "" : ", ",
				 static_cast<unsigned long long>(all_read[r]),
				 static_cast<unsigned long long>(all_written[r]));
	}
	expect(boot.rank() == 0 || read >= unsigned(kCalls),
	       "rank %d read the root's memory %llu times in %d broadcasts", boot.rank(),
	       static_cast<unsigned long long>(read), kCalls);
	if (apart) {
		expect(sum_written == 0 && large_read >= 2u * kCalls,
		       "rank %d, bound to a CPU of its own, read the other's memory %llu times in "
		       "%d allreduces of 1 MiB (one copy: two or more each), and the ranks wrote "
		       "each other's %llu times",
		       boot.rank(), static_cast<unsigned long long>(large_read), kCalls,
		       static_cast<unsigned long long>(sum_written));
		expect(mid_read == 0 && mid_written == 0,
		       "rank %d read the other's memory %llu times and wrote it %llu times in %d "
		       "allreduces of 128 KiB (the slots carry them)",
		       boot.rank(), static_cast<unsigned long long>(mid_read),
		       static_cast<unsigned long long>(mid_written), kCalls);
	} else {
		expect(sum_written >= unsigned(kCalls),
		       "ranks bound to one CPU wrote each other's memory %llu times in %d "
		       "allreduces",
		       static_cast<unsigned long long>(sum_written), kCalls);
	}
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, strfmt("process_vm_readv/writev calls by rank in %d verified broadcasts "
				  "and %d allreduces of 1 MiB: %s; in the 1 MiB allreduces this "
				  "rank read %llu times",
				  kCalls, kCalls, counts.c_str(),
				  static_cast<unsigned long long>(large_read)));
}

// Members on one host that disagree on a broadcast's length: the one that
// finds out fails the call and the group, and so does every member, also
// for the calls that the engine runs. The larger broadcast goes in one copy
// (from FI_RCOLL_COLL_SHM_SINGLE_COPY_MIN), whose reader checks the length
// the root published, while the root's goes through the slots and ends when
// posted;
// the reader finds out inside its posting call too, and neither member has
// a call pending when it does.
void run_mismatch_on_host(Bootstrap& boot, const TestOptions& options)
{
	require_rcoll(options);
	if (!offers_node_local(std::getenv("FI_RCOLL_COLL_LOCAL")) ||
	    !offers_node_local(std::getenv("FI_RCOLL_COLL_SHM")) ||
	    std::getenv("RCOLL_TEST_COLL_LOCAL"))
		throw NotApplicable("not every member takes the shared-memory path");
	require_cross_memory_attach();
	bind_on_one_host(boot, false);
	constexpr int kRootPostedSignal = 0;
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	const bool root = group->rank() == 0;
	const size_t bytes = root ? 16 * 1024 : 128 * 1024;
	GuardedBuffer buffer;
	buffer.prepare(bytes);
	std::memset(buffer.data(), 0, bytes);
	OpContext broadcast;
	if (!root)
		boot.signal_wait_at_least(kRootPostedSignal, 1, nullptr, seconds(30));
	post(ep, *group, {FI_BROADCAST, bytes, FI_UINT8, FI_SUM, 0}, nullptr, &buffer, broadcast);
	if (root)
		boot.signal_set(kRootPostedSignal, 1);
	ep.wait_done(broadcast, strfmt("a %zu-byte broadcast", bytes));
	if (!root)
		expect(broadcast.error != 0,
		       "a 128 KiB broadcast whose root sent 16 KiB completed without error");
	// The group failed: a barrier (through shared memory) and an alltoall
	// (through the engine, which the shared-memory path does not take)
	// fail on both members.
	std::string outcomes;
	for (const CallSpec& call :
	     {CallSpec{FI_BARRIER}, CallSpec{FI_ALLTOALL, 1, FI_UINT64, FI_SUM}}) {
		const BufferBytes sizes = buffer_bytes(call, group->size(), group->rank());
		GuardedBuffer input, output;
		input.prepare(sizes.input);
		output.prepare(sizes.output);
		OpContext after;
		const std::string what =
			strfmt("%s after the broadcast of two lengths", collective_name(call.coll));
		const ssize_t rc = issue(ep, *group, call, sizes.input ? &input : nullptr,
					 sizes.output ? &output : nullptr, after);
		if (rc == 0) {
			ep.wait_done(after, what, seconds(10));
			expect(after.error != 0, "rank %d: %s succeeded", boot.rank(),
			       what.c_str());
		} else {
			expect(rc != -FI_EAGAIN, "rank %d: %s returns -FI_EAGAIN", boot.rank(),
			       what.c_str());
		}
		outcomes += strfmt(", %s %s", collective_name(call.coll),
				   fi_strerror(rc ? int(-rc) : after.error));
	}
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot, strfmt("rank %d: broadcast %s%s", boot.rank(),
				  broadcast.error ? fi_strerror(broadcast.error) : "done",
				  outcomes.c_str()));
}

// A broadcast root whose writes go eagerly has nothing left to wait for
// when fi_broadcast returns: its completion is in the CQ by then, so the
// application's next fi_cq_read finds it without the provider first reading
// the core (a system call or two on tcp). Through the core, 2 ranks; calls
// that wait for the group's scratch to be recycled are not done at once,
// so at least half of them must be.
void run_root_done_when_posted(Bootstrap& boot, const TestOptions& options)
{
	require_rcoll(options);
	setenv("FI_RCOLL_COLL_LOCAL", "0", 1);
	const SyscallCounter syscalls;
	if (!syscalls.available())
		throw NotApplicable("system calls cannot be counted: " + syscalls.why_not());
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	auto group = join_shape(ep, boot, world, Shape::full);
	constexpr int kCalls = 200;
	const bool root = group->rank() == 0;
	GuardedBuffer buffer;
	buffer.prepare(8);
	int quiet = 0; // completions the first read found with no system call
	for (int i = 0; i < kCalls; ++i) {
		OpContext barrier;
		post(ep, *group, {FI_BARRIER}, nullptr, nullptr, barrier);
		ep.wait_done(barrier, "a barrier between broadcasts");
		std::memset(buffer.data(), root ? i : 0xFF, 8);
		OpContext ctx;
		post(ep, *group, {FI_BROADCAST, 8, FI_UINT8, FI_SUM, 0}, nullptr, &buffer, ctx);
		if (root) {
			const uint64_t before = syscalls.count();
			ep.progress();
			// The second count() is a system call of its own.
			quiet += ctx.done && syscalls.count() - before == 1;
		}
		ep.wait_done(ctx, "an 8-byte broadcast");
		expect_collective_completion(ctx, "an 8-byte broadcast");
		for (size_t b = 0; b < 8; ++b)
			expect(buffer.data()[b] == std::byte(i & 0xFF),
			       "rank %d: byte %zu of broadcast %d is %d, not the root's %d",
			       boot.rank(), b, i, int(buffer.data()[b]), i & 0xFF);
		buffer.expect_guards("an 8-byte broadcast");
	}
	if (root)
		expect(quiet >= kCalls / 2,
		       "the root's first fi_cq_read after fi_broadcast found the completion "
		       "without a system call in %d of %d calls; want at least %d",
		       quiet, kCalls, kCalls / 2);
	ProgressingBarrier(ep, boot, boot.size()).wait();
	summary_note(boot,
		     strfmt("the root's first read found %d of %d broadcasts done, with "
			    "no system call",
			    static_cast<int>(counts_of_all(boot, uint64_t(quiet))[0]), kCalls));
}

// The cores that are the kernel's TCP share one default cost model (alpha
// 20 us): a member spelling it out joins one that leaves it unset, through
// the core, where the constants between hosts are the ones in use.
void run_core_cost_default(Bootstrap& boot, const TestOptions& options)
{
	const char* core = std::getenv("FI_RCOLL_CORE");
	const std::string name = core ? core : "auto";
	// auto takes verbs where an RDMA device exists, else net or tcp.
	std::error_code none;
	const bool rdma_device = !std::filesystem::is_empty("/sys/class/infiniband", none) && !none;
	if (name != "tcp" && name != "net" && (name != "auto" || rdma_device))
		throw NotApplicable("FI_RCOLL_CORE=" + name +
				    ": the default is the tcp and net cores'");
	setenv("FI_RCOLL_COLL_LOCAL", "0", 1);
	run_config_mismatch(boot, options, "FI_RCOLL_COLL_ALPHA_US", "20", nullptr);
}

} // namespace

void add_algorithm_cases(std::vector<CollCase>& cases)
{
	for (unsigned c = 0; c < rcoll::engine::collective_count; ++c) {
		const auto engine_coll = static_cast<rcoll::engine::Collective>(c);
		const fi_collective_op coll = to_fi(engine_coll);
		const std::string_view coll_text = rcoll::engine::to_string(engine_coll);
		for (rcoll::engine::Algorithm algorithm :
		     rcoll::engine::algorithms_for(engine_coll)) {
			const std::string_view algorithm_text = rcoll::engine::to_string(algorithm);
			const std::string tune = strfmt(
				"%.*s:@%.*s", static_cast<int>(coll_text.size()), coll_text.data(),
				static_cast<int>(algorithm_text.size()), algorithm_text.data());
			for (int ranks : {5, 8}) {
				cases.push_back(
					{strfmt("algorithm-%s-%.*s-%d", collective_name(coll),
						static_cast<int>(algorithm_text.size()),
						algorithm_text.data(), ranks),
					 strfmt("FI_RCOLL_COLL_TUNE=%s, %d ranks: full and "
						"stride-2 groups, 1 B..1 MiB, "
						"first and last root",
						tune.c_str(), ranks),
					 ranks, seconds(180), tune,
					 [coll](Bootstrap& boot, const TestOptions& options) {
						 run_forced(boot, options, coll);
					 }});
			}
		}
	}
	cases.push_back({"node-local-path",
			 "5 ranks: members on one host map each other's collective scratch exactly "
			 "when both offer "
			 "the node-local path (FI_RCOLL_COLL_LOCAL), a second group adds mappings "
			 "but no pidfds, and "
			 "verified calls of 8 B to 4 MiB work over it",
			 5, seconds(60), "", run_node_local_path});
	cases.push_back({"bound-ranks-spin",
			 "2 ranks bound to CPUs of their own: waiting for barriers yields the CPU "
			 "fewer than 200 times in 2,000 calls",
			 2, seconds(60), "", [](Bootstrap& boot, const TestOptions& options) {
				 run_bound_ranks(boot, options, true, false);
			 }});
	cases.push_back({"bound-ranks-yield",
			 "2 ranks bound to one CPU: waiting for 500 barriers yields it at least 50 "
			 "times between them",
			 2, seconds(60), "", [](Bootstrap& boot, const TestOptions& options) {
				 run_bound_ranks(boot, options, false, false);
			 }});
	cases.push_back(
		{"large-copies-apart",
		 "2 ranks on one host bound to CPUs of their own: verified 1 MiB broadcasts "
		 "and allreduces go in one copy (process_vm_readv), 128 KiB allreduces "
		 "through the shared slots (neither call)",
		 2, seconds(60), "", [](Bootstrap& boot, const TestOptions& options) {
			 run_large_copies(boot, options, true);
		 }});
	cases.push_back(
		{"large-copies-crowded",
		 "2 ranks on one host bound to one CPU: verified 1 MiB broadcasts go in one "
		 "copy (process_vm_readv), allreduces through the engine (process_vm_writev)",
		 2, seconds(60), "", [](Bootstrap& boot, const TestOptions& options) {
			 run_large_copies(boot, options, false);
		 }});
	cases.push_back({"bound-ranks-told-crowded",
			 "2 ranks bound to CPUs of their own with FI_RCOLL_YIELD_WHEN_IDLE=1: "
			 "waiting for 500 barriers yields the CPU at least 50 times between them",
			 2, seconds(60), "", [](Bootstrap& boot, const TestOptions& options) {
				 run_bound_ranks(boot, options, true, true);
			 }});
	cases.push_back({"tune-mismatch",
			 "members with different FI_RCOLL_COLL_TUNE: fi_join completes with an "
			 "error on both",
			 2, seconds(60), "", [](Bootstrap& boot, const TestOptions& options) {
				 run_config_mismatch(boot, options, "FI_RCOLL_COLL_TUNE",
						     "allreduce:@ring",
						     "allreduce:@recursive_doubling");
			 }});
	cases.push_back({"local-cost-mismatch",
			 "members with different FI_RCOLL_COLL_LOCAL_ALPHA_US: fi_join completes "
			 "with an error on both",
			 2, seconds(60), "", [](Bootstrap& boot, const TestOptions& options) {
				 run_config_mismatch(boot, options, "FI_RCOLL_COLL_LOCAL_ALPHA_US",
						     "0.5", "4");
			 }});
	cases.push_back(
		{"cost-default-spelled-out",
		 "one member sets FI_RCOLL_COLL_LOCAL_ALPHA_US=0.50 (its default, 0.5), the "
		 "other leaves it unset: the join succeeds",
		 2, seconds(60), "", [](Bootstrap& boot, const TestOptions& options) {
			 run_config_mismatch(boot, options, "FI_RCOLL_COLL_LOCAL_ALPHA_US", "0.50",
					     nullptr);
		 }});
	cases.push_back(
		{"mismatch-on-host",
		 "2 ranks bound to one CPU: a member posting a 128 KiB broadcast whose root "
		 "sent 16 KiB gets an error, and a barrier and an alltoall after it fail on "
		 "both within 10 s",
		 2, seconds(60), "", run_mismatch_on_host});
	cases.push_back({"root-done-when-posted",
			 "2 ranks through the core: the root's first fi_cq_read after an 8-byte "
			 "fi_broadcast finds it done without a system call in at least 100 of 200 "
			 "verified calls",
			 2, seconds(60), "", run_root_done_when_posted});
	cases.push_back({"core-cost-default",
			 "on the tcp or net core, one member sets FI_RCOLL_COLL_ALPHA_US=20 "
			 "(the default on both), the other leaves it unset: the join through the "
			 "core succeeds",
			 2, seconds(60), "", run_core_cost_default});
}

} // namespace fabtests::coll
