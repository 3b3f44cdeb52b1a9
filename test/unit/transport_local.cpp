// The node-local transport: the doorbell ring on its own, then regions
// shared between real processes (each test forks its members, as the
// members of a group on one host are separate processes), attach's checks,
// cross-memory writes and the host identity.
#include <criterion/criterion.h>

#include <sched.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/local.hpp"

using namespace rcoll::local;

// The endpoint key the tests' scratch files are created for.
constexpr uint64_t kOwner = 0x0123456789abcdefULL;

namespace {

struct Child {
	pid_t pid;
	int report; // read end of a pipe the child writes what went wrong into
};

// Runs `body` in a forked child, which exits 0 when it returns "" and 1
// otherwise, reporting the text. Criterion's asserts cannot cross the fork,
// so the parent turns the report into its own assert (see reap).
Child spawn(const std::function<std::string()>& body)
{
	int fds[2];
	cr_assert_eq(::pipe(fds), 0, "pipe: %s", std::strerror(errno));
	const pid_t parent = ::getpid();
	const pid_t pid = ::fork();
	cr_assert_geq(pid, 0, "fork: %s", std::strerror(errno));
	if (pid == 0) {
		::close(fds[0]);
		// A failed assert ends the parent early; don't leave a child
		// spinning on a full doorbell behind it.
		::prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (::getppid() != parent)
			::_exit(2);
		const std::string error = body();
		if (!error.empty() && ::write(fds[1], error.data(), error.size()) < 0)
			::_exit(3);
		::_exit(error.empty() ? 0 : 1); // no exit handlers: they are the parent's
	}
	::close(fds[1]);
	return {pid, fds[0]};
}

// Waits for the child; "" when it exited 0, else what went wrong.
std::string reap(const Child& child)
{
	std::string report;
	char buf[256];
	ssize_t n;
	while ((n = ::read(child.report, buf, sizeof(buf))) > 0)
		report.append(buf, size_t(n));
	::close(child.report);
	int status = 0;
	if (::waitpid(child.pid, &status, 0) != child.pid)
		return "waitpid: " + std::string(std::strerror(errno));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return "";
	if (report.empty())
		report = WIFSIGNALED(status)
				 ? "killed by signal " + std::to_string(WTERMSIG(status))
				 : "exit status " + std::to_string(WEXITSTATUS(status));
	return report;
}

void expect_clean(const Child& child)
{
	const std::string report = reap(child);
	cr_assert(report.empty(), "child %d: %s", int(child.pid), report.c_str());
}

std::unique_ptr<Doorbell> make_doorbell()
{
	auto doorbell = std::make_unique<Doorbell>(); // aligned new honours alignas(64)
	cr_assert_eq(reinterpret_cast<uintptr_t>(doorbell.get()) % alignof(Doorbell), 0u);
	doorbell->init();
	return doorbell;
}

uint64_t scratch_address(const ScratchFile& region)
{
	return reinterpret_cast<uint64_t>(region.scratch().data());
}

// A shared region of kSmallScratch bytes, and this process's own mapping
// of it as a member on its host would have it.
constexpr size_t kSmallScratch = 4096;
void create_and_attach(ScratchFile& region, PeerMapping& peer)
{
	cr_assert_eq(region.create(kSmallScratch, true, kOwner), 0);
	cr_assert_eq(peer.attach(::getpid(), region.fd(), region.nonce(), kOwner, kSmallScratch,
				 scratch_address(region)),
		     0);
}

} // namespace

// A ring that never reports full, or a lost arrival, would spin forever.
TestSuite(transport_local, .timeout = 60);

// ---------------------------------------------------------------------------
// The doorbell within one process.

Test(transport_local, doorbell_pops_in_push_order)
{
	auto doorbell = make_doorbell();
	uint64_t tail = 0;
	uint32_t value = 0;
	cr_assert_not(doorbell->pop(tail, value), "a fresh ring is empty");
	for (uint32_t v : {7u, 0u, 0xffffffffu, 42u})
		cr_assert(doorbell->push(v) == Doorbell::Push::rung);
	for (uint32_t want : {7u, 0u, 0xffffffffu, 42u}) {
		cr_assert(doorbell->pop(tail, value));
		cr_assert_eq(value, want);
	}
	cr_assert_not(doorbell->pop(tail, value));
	cr_assert_eq(tail, 4u);
}

Test(transport_local, doorbell_holds_exactly_kcells)
{
	auto doorbell = make_doorbell();
	for (uint64_t i = 0; i < Doorbell::kCells; i++)
		cr_assert(doorbell->push(uint32_t(i)) == Doorbell::Push::rung, "push %llu of %llu",
			  (unsigned long long)i, (unsigned long long)Doorbell::kCells);
	cr_assert(doorbell->push(0xdead) == Doorbell::Push::full, "the ring is full");
	cr_assert(doorbell->push(0xdead) == Doorbell::Push::full, "and stays full");

	// One pop frees exactly one cell.
	uint64_t tail = 0;
	uint32_t value = 0;
	cr_assert(doorbell->pop(tail, value));
	cr_assert_eq(value, 0u);
	cr_assert(doorbell->push(0xbeef) == Doorbell::Push::rung);
	cr_assert(doorbell->push(0xdead) == Doorbell::Push::full);

	for (uint64_t i = 1; i < Doorbell::kCells; i++) {
		cr_assert(doorbell->pop(tail, value));
		cr_assert_eq(value, uint32_t(i));
	}
	cr_assert(doorbell->pop(tail, value));
	cr_assert_eq(value, 0xbeefu, "the push after the pop comes last");
	cr_assert_not(doorbell->pop(tail, value));
}

// The indices live in a file other processes map: whoever can write it can
// make them contradict each other. A writer must then give up, not spin
// (it holds the domain lock), and must not write outside the ring.
Test(transport_local, doorbell_corrupt_indices_end_the_push, .timeout = 10)
{
	auto doorbell = make_doorbell();
	cr_assert(doorbell->push(1) == Doorbell::Push::rung);
	// A cell ahead of a head that stands still.
	doorbell->cells[1].seq.store(1000, std::memory_order_relaxed);
	cr_assert(doorbell->push(2) == Doorbell::Push::corrupt);
	// A head far beyond every cell's sequence: the ring looks full.
	doorbell->head.store(uint64_t(1) << 60, std::memory_order_relaxed);
	cr_assert(doorbell->push(3) == Doorbell::Push::full);
	// Any head stays inside the ring.
	doorbell->head.store(~uint64_t(0), std::memory_order_relaxed);
	doorbell->cells[Doorbell::kCells - 1].seq.store(~uint64_t(0), std::memory_order_relaxed);
	cr_assert(doorbell->push(4) == Doorbell::Push::rung);
	cr_assert_eq(doorbell->cells[Doorbell::kCells - 1].value, 4u);
}

Test(transport_local, doorbell_wraps_around_in_order)
{
	auto doorbell = make_doorbell();
	uint64_t tail = 0;
	uint32_t value = 0;
	uint32_t pushed = 0, popped = 0;
	// Uneven batches, so head and tail cross the ring's end at varying
	// distances from each other, sometimes with the ring full.
	const uint32_t total = uint32_t(5 * Doorbell::kCells + 123);
	for (uint32_t round = 0; popped < total; round++) {
		const uint32_t batch = 1 + (round * 977) % uint32_t(Doorbell::kCells);
		for (uint32_t k = 0; k < batch && pushed < total; k++, pushed++) {
			if (doorbell->push(pushed * 3 + 1) != Doorbell::Push::rung)
				break;
		}
		const uint32_t take = 1 + (round * 613) % uint32_t(Doorbell::kCells);
		for (uint32_t k = 0; k < take && doorbell->pop(tail, value); k++, popped++)
			cr_assert_eq(value, popped * 3 + 1, "value %u", popped);
		cr_assert_leq(pushed - popped, uint32_t(Doorbell::kCells));
	}
	cr_assert_eq(tail, uint64_t(total));
	cr_assert_not(doorbell->pop(tail, value));
}

// ---------------------------------------------------------------------------
// Regions shared between processes.

Test(transport_local, children_ring_parent_region)
{
	constexpr uint32_t kChildren = 3;
	constexpr uint32_t kRings = 20000; // per child; must stay below 1 << 20
	constexpr size_t kScratch = 64 << 10;
	constexpr size_t kSlice = kScratch / 4 / sizeof(uint32_t); // words per child
	constexpr uint32_t kPatterned = 1024; // rings preceded by a scratch write
	static_assert(kPatterned <= kSlice && kRings < (1u << 20));
	auto pattern = [](uint32_t child, uint32_t i) { return ((child << 20) | i) ^ 0xa5a5a5a5u; };

	ScratchFile region;
	cr_assert_eq(region.create(kScratch, true, kOwner), 0);
	cr_assert_eq(region.scratch().size(), kScratch);
	const pid_t parent = ::getpid();
	auto* words = reinterpret_cast<volatile uint32_t*>(region.scratch().data());

	std::vector<Child> children;
	for (uint32_t child = 0; child < kChildren; child++) {
		children.push_back(spawn([&, child]() -> std::string {
			// Through the parent's /proc entry, not the inherited
			// descriptor: that is how an unrelated member gets in.
			PeerMapping peer;
			int rc = peer.attach(parent, region.fd(), region.nonce(), kOwner, kScratch,
					     scratch_address(region));
			if (rc != 0)
				return "attach: " + std::string(std::strerror(-rc));
			auto* slice = reinterpret_cast<volatile uint32_t*>(peer.scratch()) +
				      child * kSlice;
			for (uint32_t i = 0; i < kRings; i++) {
				if (i < kPatterned)
					slice[i] = pattern(
						child, i); // placed before the ring announces it
				while (peer.ring((child << 20) | i) != Doorbell::Push::rung)
					::sched_yield();
			}
			return "";
		}));
	}

	// Each child's values must arrive exactly once and in its order, and
	// a value announces a scratch write that is already visible.
	std::vector<uint32_t> next(kChildren, 0);
	std::vector<uint32_t> batch(512);
	uint32_t received = 0;
	std::string error;
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
	while (received < kChildren * kRings && error.empty()) {
		const size_t n = region.drain(batch);
		if (n == 0) {
			if (std::chrono::steady_clock::now() > deadline)
				error = "timed out after " + std::to_string(received) + " arrivals";
			::sched_yield();
			continue;
		}
		for (size_t k = 0; k < n && error.empty(); k++, received++) {
			const uint32_t child = batch[k] >> 20, i = batch[k] & 0xfffff;
			if (child >= kChildren || i != next[child])
				error = "unexpected arrival child " + std::to_string(child) +
					" i " + std::to_string(i) +
					(child < kChildren
						 ? ", wanted i " + std::to_string(next[child])
						 : "");
			else if (i < kPatterned && words[child * kSlice + i] != pattern(child, i))
				error = "arrival before its data: child " + std::to_string(child) +
					" i " + std::to_string(i);
			else
				next[child]++;
		}
	}
	if (!error.empty()) {
		for (const Child& c : children)
			::kill(c.pid, SIGKILL);
	}
	for (const Child& c : children) {
		const std::string report = reap(c);
		cr_expect(report.empty() || !error.empty(), "child %d: %s", int(c.pid),
			  report.c_str());
	}
	cr_assert(error.empty(), "%s", error.c_str());
	for (uint32_t child = 0; child < kChildren; child++) {
		cr_assert_eq(next[child], kRings, "child %u", child);
		for (uint32_t i = 0; i < kPatterned; i++)
			cr_assert_eq(words[child * kSlice + i], pattern(child, i),
				     "child %u word %u", child, i);
		for (uint32_t i = kPatterned; i < kSlice; i++)
			cr_assert_eq(words[child * kSlice + i], 0u, "child %u wrote past its words",
				     child);
	}
	cr_assert_eq(region.drain(batch), 0u, "nothing beyond what the children rang");
}

Test(transport_local, attach_checks_what_it_maps)
{
	constexpr size_t kScratch = 64 << 10;
	ScratchFile region;
	cr_assert_eq(region.create(kScratch, true, kOwner), 0);
	const pid_t self = ::getpid();
	const uint64_t address = scratch_address(region);

	// The right credentials work, so the failures below are the checks'.
	{
		PeerMapping peer;
		cr_assert_eq(
			peer.attach(self, region.fd(), region.nonce(), kOwner, kScratch, address),
			0);
		cr_assert_not_null(peer.scratch());
		cr_assert(peer.has_room());
	}
	{
		PeerMapping peer;
		cr_assert_eq(peer.attach(self, region.fd(), region.nonce() + 1, kOwner, kScratch,
					 address),
			     -EINVAL);
		cr_assert(peer.ring(1) != Doorbell::Push::rung,
			  "a failed attach leaves nothing to ring");
	}
	{
		// A member that names another member's file (nonce and all, as a
		// member of a group with it knows them) is refused: the file says
		// whose it is.
		PeerMapping peer;
		cr_assert_eq(peer.attach(self, region.fd(), region.nonce(), kOwner ^ 1, kScratch,
					 address),
			     -EINVAL);
	}
	{
		PeerMapping peer; // a different file size
		cr_assert_lt(peer.attach(self, region.fd(), region.nonce(), kOwner, 2 * kScratch,
					 address),
			     0);
	}
	{
		PeerMapping peer; // the same file size, told apart by the header
		cr_assert_lt(peer.attach(self, region.fd(), region.nonce(), kOwner, kScratch - 1,
					 address),
			     0);
	}
	{
		// The number dup() hands out is the lowest free one; closed
		// again, it names no open file.
		const int spare = ::dup(region.fd());
		cr_assert_geq(spare, 0);
		cr_assert_eq(::close(spare), 0);
		PeerMapping peer;
		cr_assert_lt(peer.attach(self, spare, region.nonce(), kOwner, kScratch, address),
			     0);
		cr_assert_lt(peer.attach(self, -1, region.nonce(), kOwner, kScratch, address), 0);
	}
	{
		// The same bytes in a file that is not sealed: it could shrink
		// under the mapping, so it is refused.
		const int copy = ::memfd_create("copy", MFD_CLOEXEC);
		cr_assert_geq(copy, 0);
		const off_t size = ::lseek(region.fd(), 0, SEEK_END);
		std::vector<char> bytes(size_t(size), 0);
		cr_assert_eq(::pread(region.fd(), bytes.data(), bytes.size(), 0),
			     ssize_t(bytes.size()));
		cr_assert_eq(::write(copy, bytes.data(), bytes.size()), ssize_t(bytes.size()));
		PeerMapping peer;
		cr_assert_eq(peer.attach(self, copy, region.nonce(), kOwner, kScratch, address),
			     -EINVAL);
		::close(copy);
	}
	{
		// A pipe is never opened for writing: it is no regular file.
		int fds[2];
		cr_assert_eq(::pipe(fds), 0);
		PeerMapping peer;
		cr_assert_eq(peer.attach(self, fds[1], region.nonce(), kOwner, kScratch, address),
			     -EINVAL);
		::close(fds[0]);
		::close(fds[1]);
	}
	{
		PeerMapping peer; // a size from a join record that would overflow
		cr_assert_eq(peer.attach(self, region.fd(), region.nonce(), kOwner, SIZE_MAX - 100,
					 address),
			     -EINVAL);
	}
}

Test(transport_local, file_that_cannot_be_sealed_is_refused)
{
	// A regular file on disk carries no seals at all (F_GET_SEALS fails):
	// with the right size and header it must still be refused.
	constexpr size_t kScratch = 64 << 10;
	ScratchFile region;
	cr_assert_eq(region.create(kScratch, true, kOwner), 0);
	char name[] = "transport_local.XXXXXX";
	const int file = ::mkstemp(name);
	cr_assert_geq(file, 0, "mkstemp: %s", std::strerror(errno));
	::unlink(name);
	const off_t size = ::lseek(region.fd(), 0, SEEK_END);
	std::vector<char> bytes(size_t(size), 0);
	cr_assert_eq(::pread(region.fd(), bytes.data(), bytes.size(), 0), ssize_t(bytes.size()));
	cr_assert_eq(::write(file, bytes.data(), bytes.size()), ssize_t(bytes.size()));
	PeerMapping peer;
	cr_assert_eq(peer.attach(::getpid(), file, region.nonce(), kOwner, kScratch,
				 scratch_address(region)),
		     -EINVAL);
	::close(file);
}

Test(transport_local, ended_file_is_seen_by_writers)
{
	ScratchFile region;
	PeerMapping peer;
	create_and_attach(region, peer);
	cr_assert_not(peer.target_ended());
	region.mark_ended();
	cr_assert(peer.target_ended(), "a writer must see that the owner ended its operations");
	PeerMapping unattached;
	cr_assert_not(unattached.target_ended());
}

// What a member lists as exposed is what a writer on its host may copy into:
// exactly each buffer as its key describes it, while it is listed, at most
// kEntries at once, and nothing without a memory file.
Test(transport_local, exposed_buffers_match_exactly_while_listed)
{
	using rcoll::local::ExposedBuffers;
	ScratchFile region;
	PeerMapping peer;
	create_and_attach(region, peer);
	const int entry = region.expose(0x10000, 77, 4096);
	cr_assert_geq(entry, 0);
	cr_assert(peer.hold_exposed(0x10000, 77, 4096));
	cr_assert_not(peer.hold_exposed(0x10000, 78, 4096), "another key");
	cr_assert_not(peer.hold_exposed(0x10000, 77, 4097), "a longer buffer");
	cr_assert_not(peer.hold_exposed(0x10001, 77, 4096), "another address");
	cr_assert_lt(region.expose(0, 77, 4096), 0, "address 0 marks a free entry");
	cr_assert_not(peer.hold_exposed(0, 0, 0));
	region.withdraw(entry);
	cr_assert_not(peer.hold_exposed(0x10000, 77, 4096), "withdrawn");
	for (size_t i = 0; i < ExposedBuffers::kEntries; i++)
		cr_assert_geq(region.expose(0x20000 + i * 64, i, 64), 0, "entry %zu", i);
	cr_assert_eq(region.expose(0x90000, 1, 64), -ENOSPC);
	cr_assert(peer.hold_exposed(0x20000 + 5 * 64, 5, 64));
	ScratchFile private_region;
	cr_assert_eq(private_region.create(kSmallScratch, false, kOwner), 0);
	cr_assert_eq(private_region.expose(0x10000, 77, 4096), -EINVAL);
	PeerMapping unattached;
	cr_assert_not(unattached.hold_exposed(0x10000, 77, 4096));
}

// Checking an entry and copying into its buffer are two steps: the owner's
// withdraw must not return (giving the buffer back to the application) while
// a writer that checked it still copies.
Test(transport_local, withdraw_waits_for_the_writer_that_holds_the_buffer)
{
	ScratchFile region;
	PeerMapping peer;
	create_and_attach(region, peer);
	const int entry = region.expose(0x10000, 77, 4096);
	cr_assert_geq(entry, 0);
	auto hold = peer.hold_exposed(0x10000, 77, 4096);
	cr_assert(hold);
	std::atomic<bool> copy_done{false};
	std::thread writer([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		copy_done.store(true);
		hold = {};
	});
	cr_assert(region.withdraw(entry));
	cr_assert(copy_done.load(), "withdraw returned while a writer held the buffer");
	writer.join();
	cr_assert_not(peer.hold_exposed(0x10000, 77, 4096), "withdrawn");

	// A writer that never lets go (it died holding it): withdraw gives up,
	// and the entry is not filled anew until the hold ends.
	const int again = region.expose(0x10000, 77, 4096);
	auto stuck = peer.hold_exposed(0x10000, 77, 4096);
	cr_assert(stuck);
	cr_assert_not(region.withdraw(again, std::chrono::milliseconds(10)));
	for (size_t i = 0; i + 1 < rcoll::local::ExposedBuffers::kEntries; i++)
		cr_assert_neq(region.expose(0x20000 + i * 64, i, 64), again, "entry %zu", i);
	cr_assert_eq(region.expose(0x90000, 1, 64), -ENOSPC, "the held entry is not reused");
	stuck = {};
	cr_assert_eq(region.expose(0x90000, 1, 64), again, "reused once the hold ended");
}

// A writer holds an entry for one piece of its copy at a time, so the
// owner's withdraw waits for one piece, not for a whole message (a copy of a
// gigabyte outlasts withdraw's limit), and the copy stops there: nothing
// lands in the buffer once withdraw returned. The withdraw must come while
// the copy runs, which a loaded host may delay past its end: up to 10 tries.
Test(transport_local, withdraw_stops_a_long_copy_after_one_piece)
{
	constexpr size_t kBytes = size_t(256) << 20;
	ScratchFile region;
	PeerMapping peer;
	create_and_attach(region, peer);
	cr_assert(peer.cross_memory_allowed());
	auto* target = static_cast<unsigned char*>(::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
							  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	cr_assert_neq(static_cast<void*>(target), MAP_FAILED);
	const std::vector<unsigned char> source(kBytes, 1);
	const uint64_t addr = reinterpret_cast<uint64_t>(target);
	auto landed = [&] { return size_t(std::count(target, target + kBytes, 1)); };
	bool stopped_mid_copy = false;
	for (int attempt = 0; attempt < 10 && !stopped_mid_copy; attempt++) {
		std::memset(target, 0, kBytes);
		const int entry = region.expose(addr, 77, kBytes);
		cr_assert_geq(entry, 0);
		std::atomic<int> result{1};
		std::thread writer([&] {
			result.store(
				peer.write_exposed(addr, 77, kBytes, 0, source.data(), kBytes));
		});
		while (*reinterpret_cast<volatile unsigned char*>(target) == 0)
			std::this_thread::yield();
		cr_assert(region.withdraw(entry),
			  "withdraw waited past its limit for a live writer");
		const size_t at_withdraw = landed();
		writer.join();
		cr_assert_eq(landed(), at_withdraw, "bytes landed after withdraw returned");
		stopped_mid_copy = at_withdraw < kBytes;
		cr_assert_eq(result.load(), stopped_mid_copy ? -EPERM : 0,
			     "%zu of %zu bytes at withdraw, the copy returned %d", at_withdraw,
			     kBytes, result.load());
	}
	cr_assert(stopped_mid_copy, "withdraw never returned while the copy ran: it waited for "
				    "the whole copy each time");
	::munmap(target, kBytes);
}

Test(transport_local, sealed_file_keeps_its_size)
{
	ScratchFile region;
	cr_assert_eq(region.create(8192, true, kOwner), 0);
	cr_assert(region.shared());
	cr_assert_neq(::ftruncate(region.fd(), 0), 0,
		      "a member could shrink the scratch under the others");
	cr_assert_eq(errno, EPERM);
}

Test(transport_local, private_scratch_offers_nothing)
{
	ScratchFile region;
	cr_assert_eq(region.create(10000, false, kOwner), 0);
	cr_assert_not(region.shared());
	cr_assert_lt(region.fd(), 0);
	cr_assert_eq(region.scratch().size(), 10000u);
	for (std::byte b : region.scratch())
		cr_assert_eq(b, std::byte{0}, "the scratch starts zeroed");
	uint32_t out[4];
	cr_assert_eq(region.drain(out), 0u);
}

Test(transport_local, prefault_takes_the_page_faults_ahead_and_keeps_the_contents)
{
	const size_t page = size_t(::sysconf(_SC_PAGESIZE));
	constexpr size_t kPages = 64;
	ScratchFile region;
	cr_assert_eq(region.create(kPages * page, false, kOwner), 0);
	std::span<std::byte> s = region.scratch();
	s[3 * page + 5] = std::byte{0x5a}; // a peer's write that came before
	const int err = region.prefault();
	cr_assert_eq(err, 0, "%s", std::strerror(-err));
	cr_assert_eq(s[3 * page + 5], std::byte{0x5a}, "prefault changed the contents");
	cr_assert_eq(s[4 * page], std::byte{0});
	rusage before{}, after{};
	::getrusage(RUSAGE_THREAD, &before);
	for (size_t i = 0; i < kPages; i++)
		s[i * page + 1] = std::byte{1};
	::getrusage(RUSAGE_THREAD, &after);
	// Without it, each page's first write is a fault (63 here); ASan's
	// shadow memory takes a few of its own.
	cr_assert_lt(after.ru_minflt - before.ru_minflt, long(kPages / 2),
		     "%ld page faults after prefault", after.ru_minflt - before.ru_minflt);
}

// The prefault's stores race the other members' writes into the scratch:
// a child writes every 4 KiB of the scratch over and over, each time
// checking that what it wrote last is still there, while this process
// faults its mapping of the file in again and again. A store that wrote
// back a value it had read would undo one of the child's writes.
Test(transport_local, prefault_loses_no_write_made_meanwhile)
{
	constexpr size_t kBytes = 64 * 4096;
	constexpr unsigned kPasses = 3000;
	ScratchFile region;
	PeerMapping peer;
	cr_assert_eq(region.create(kBytes, true, kOwner), 0);
	cr_assert_eq(peer.attach(::getpid(), region.fd(), region.nonce(), kOwner, kBytes,
				 scratch_address(region)),
		     0);
	// Flags off the bytes the prefault stores to (every page's first).
	auto* flags = reinterpret_cast<std::atomic<uint32_t>*>(region.scratch().data() + 64);
	std::atomic<uint32_t>& started = flags[0];
	std::atomic<uint32_t>& stop = flags[1];
	Child writer = spawn([&]() -> std::string {
		auto* bytes = reinterpret_cast<volatile uint8_t*>(region.scratch().data());
		started.store(1, std::memory_order_release);
		for (uint32_t round = 1; !stop.load(std::memory_order_acquire); round++)
			for (size_t at = 0; at < kBytes; at += 4096) {
				if (bytes[at] != uint8_t(round - 1))
					return "round " + std::to_string(round) + ": offset " +
					       std::to_string(at) + " went back to " +
					       std::to_string(int(bytes[at]));
				bytes[at] = uint8_t(round);
			}
		return "";
	});
	while (!started.load(std::memory_order_acquire))
		::sched_yield();
	for (unsigned pass = 0; pass < kPasses; pass++) {
		cr_assert_eq(peer.prefault(), 0);
		cr_assert_eq(region.prefault(), 0);
	}
	stop.store(1, std::memory_order_release);
	expect_clean(writer);
}

Test(transport_local, process_watch_sees_the_exit)
{
	int go[2];
	cr_assert_eq(::pipe(go), 0);
	const pid_t pid = ::fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char c;
		::close(go[1]);
		::_exit(::read(go[0], &c, 1) == 1 ? 0 : 1); // lives until told
	}
	::close(go[0]);
	ProcessWatch watch;
	cr_assert_not(watch.watching());
	cr_assert_not(watch.exited(), "an empty watch sees no exit");
	cr_assert_eq(watch.watch(pid), 0);
	cr_assert(watch.watching());
	cr_assert_not(watch.exited(), "the child still lives");
	cr_assert_eq(::write(go[1], "x", 1), 1);
	::close(go[1]);
	int status = 0;
	cr_assert_eq(::waitpid(pid, &status, 0), pid);
	cr_assert(watch.exited(), "the child is gone");
	ProcessWatch gone;
	cr_assert_eq(gone.watch(pid), -ESRCH, "a reaped pid names no process");
}

Test(transport_local, write_memory_into_parent)
{
	constexpr size_t kScratch = 4096;
	constexpr size_t kBytes = 1 << 20;
	ScratchFile region;
	cr_assert_eq(region.create(kScratch, true, kOwner), 0);
	allow_memory_writes_from_siblings(); // what offering the path does (Yama ptrace_scope 1)
	const pid_t parent = ::getpid();
	std::vector<unsigned char> target(kBytes, 0);
	auto byte = [](size_t k) { return (unsigned char)((k * 131 + 17) ^ (k >> 12)); };

	Child child = spawn([&]() -> std::string {
		PeerMapping peer;
		int rc = peer.attach(parent, region.fd(), region.nonce(), kOwner, kScratch,
				     scratch_address(region));
		if (rc != 0)
			return "attach: " + std::string(std::strerror(-rc));
		if (!peer.cross_memory_allowed())
			return "process_vm_readv into the parent was refused: this environment "
			       "forbids "
			       "cross-memory attach (ptrace rules, seccomp or a missing "
			       "capability)";
		std::vector<unsigned char> source(kBytes);
		for (size_t k = 0; k < kBytes; k++)
			source[k] = byte(k);
		rc = peer.write_memory(reinterpret_cast<uint64_t>(target.data()), source.data(),
				       kBytes);
		if (rc != 0)
			return "write_memory: " + std::string(std::strerror(-rc));
		return "";
	});
	expect_clean(child);
	for (size_t k = 0; k < kBytes; k++)
		cr_assert_eq(target[k], byte(k), "byte %zu", k);
}

Test(transport_local, write_memory_to_unmapped_address_fails)
{
	constexpr size_t kScratch = 4096;
	ScratchFile region;
	cr_assert_eq(region.create(kScratch, true, kOwner), 0);
	allow_memory_writes_from_siblings();
	const pid_t parent = ::getpid();
	// A hole in the parent: mapped, then unmapped before the child writes.
	void* hole =
		::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(hole, MAP_FAILED);
	cr_assert_eq(::munmap(hole, 4096), 0);

	Child child = spawn([&]() -> std::string {
		PeerMapping peer;
		int rc = peer.attach(parent, region.fd(), region.nonce(), kOwner, kScratch,
				     scratch_address(region));
		if (rc != 0)
			return "attach: " + std::string(std::strerror(-rc));
		const char bytes[64] = {1};
		rc = peer.write_memory(reinterpret_cast<uint64_t>(hole), bytes, sizeof(bytes));
		if (rc >= 0)
			return "write_memory to an unmapped address returned " + std::to_string(rc);
		if (rc != -EFAULT)
			return "write_memory to an unmapped address: " +
			       std::string(std::strerror(-rc)) + ", wanted EFAULT";
		return "";
	});
	expect_clean(child);
}

// ---------------------------------------------------------------------------

Test(transport_local, host_identity_is_stable)
{
	const uint64_t id = host_identity();
	cr_assert_neq(id, 0u);
	cr_assert_eq(host_identity(), id);
	Child child = spawn([id]() -> std::string {
		const uint64_t theirs = host_identity();
		return theirs == id ? ""
				    : "identity in the child differs: " + std::to_string(theirs);
	});
	expect_clean(child);
}
