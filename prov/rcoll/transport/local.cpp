#include "transport/local.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux 5.14; older C libraries lack the name
#endif

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 // the same number on every architecture
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

namespace rcoll::local {
namespace {

constexpr size_t kPage = 4096;
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

size_t round_up(size_t n) { return (n + kPage - 1) & ~(kPage - 1); }

constexpr size_t kScratchOffset = (sizeof(ScratchFileHeader) + kPage - 1) & ~(kPage - 1);

// Bytes of a file holding a scratch of `scratch_bytes`; 0 when that does
// not fit (a size from a join record is not trusted).
size_t file_bytes(size_t scratch_bytes)
{
	if (scratch_bytes > (size_t(1) << 40))
		return 0;
	return kScratchOffset + round_up(scratch_bytes ? scratch_bytes : 1);
}

// Every page of a mapping faulted in for writing, its contents untouched.
// The kernel populates the pages, and then this process stores to each one
// once more, an atomic no-op, because where a hypervisor maps a guest's
// page only on the first access from user space, populating leaves that
// cost to the first write of an operation (6 us a page where it was seen).
// The store is atomic so that a byte another process or the core writes
// meanwhile is never put back to what it was.
int fault_in_for_writing(void* base, size_t len) noexcept
{
	if (!base)
		return -EINVAL;
	// EINVAL: a kernel older than 5.14 (every caller's mapping is
	// writable), and the stores take the faults.
	if (::madvise(base, len, MADV_POPULATE_WRITE) != 0 && errno != EINVAL)
		return -errno; // no memory for them: the stores would not fare better
	const size_t page = size_t(::sysconf(_SC_PAGESIZE));
	auto* bytes = static_cast<unsigned char*>(base);
	for (size_t at = 0; at < len; at += page)
		__atomic_fetch_or(bytes + at, 0, __ATOMIC_RELAXED);
	return 0;
}

uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdULL;
}

} // namespace

uint64_t host_identity() noexcept
{
	uint64_t h = 0xcbf29ce484222325ULL;
	char boot_id[64] = {};
	FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "re");
	if (!f)
		return 0;
	size_t n = std::fread(boot_id, 1, sizeof(boot_id) - 1, f);
	std::fclose(f);
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		h = mix(h, uint8_t(boot_id[i]));
	for (const char* ns : {"/proc/self/ns/net", "/proc/self/ns/pid"}) {
		struct stat st;
		if (::stat(ns, &st) != 0)
			return 0;
		h = mix(mix(h, st.st_dev), st.st_ino);
	}
	return h ? h : 1;
}

bool allow_memory_writes_from_siblings() noexcept
{
	static std::once_flag once;
	static bool allowed = false;
	std::call_once(once, [] {
		int scope = 0; // no Yama: the classic rules (same user) apply
		if (FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "re")) {
			if (std::fscanf(f, "%d", &scope) != 1)
				scope = 3;
			std::fclose(f);
		}
		if (scope == 0)
			allowed = true;
#ifdef PR_SET_PTRACER
		else if (scope == 1)
			allowed = ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0;
#endif
	});
	return allowed;
}

void Doorbell::init() noexcept
{
	head.store(0, std::memory_order_relaxed);
	for (uint64_t i = 0; i < kCells; i++) {
		cells[i].seq.store(i, std::memory_order_relaxed);
		cells[i].value = 0;
	}
}

bool Doorbell::has_room() const noexcept
{
	const uint64_t pos = head.load(std::memory_order_relaxed);
	return cells[pos % kCells].seq.load(std::memory_order_acquire) == pos;
}

Doorbell::Push Doorbell::push(uint32_t value) noexcept
{
	// Contention among the few writers of one host settles in a handful of
	// rounds; far more means somebody keeps rewriting the indices.
	constexpr int kMaxRounds = 1 << 16;
	uint64_t pos = head.load(std::memory_order_relaxed);
	for (int round = 0;; round++) {
		if (round == kMaxRounds)
			return Push::corrupt;
		Cell& c = cells[pos % kCells];
		const uint64_t seq = c.seq.load(std::memory_order_acquire);
		const int64_t turn = int64_t(seq - pos);
		if (turn == 0) {
			if (head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed))
				break;
		} else if (turn < 0) {
			return Push::full; // the consumer has not freed this cell yet
		} else {
			// Another writer took `pos`, so head moved past it; a cell
			// ahead of a head that stands still cannot happen.
			const uint64_t now = head.load(std::memory_order_relaxed);
			if (now == pos)
				return Push::corrupt;
			pos = now;
		}
	}
	Cell& c = cells[pos % kCells];
	c.value = value;
	c.seq.store(pos + 1, std::memory_order_release); // publishes the data placed before
	return Push::rung;
}

bool Doorbell::pop(uint64_t& tail, uint32_t& value) noexcept
{
	Cell& c = cells[tail % kCells];
	if (c.seq.load(std::memory_order_acquire) != tail + 1)
		return false;
	value = uint32_t(c.value);
	c.seq.store(tail + kCells, std::memory_order_release);
	tail++;
	return true;
}

// ---------------------------------------------------------------------------

ScratchFile::~ScratchFile()
{
	if (base_)
		::munmap(base_, mapped_);
	if (fd_ >= 0)
		::close(fd_);
}

int ScratchFile::create(size_t scratch_bytes, bool shared, uint64_t owner) noexcept
{
	const size_t len = file_bytes(scratch_bytes);
	if (!len)
		return -EINVAL;
	int fd = -1;
	if (shared) {
		fd = ::memfd_create("rcoll-coll", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		// Members map it at this size: nobody may change it under them.
		if (fd >= 0 &&
		    (::ftruncate(fd, off_t(len)) != 0 || ::fcntl(fd, F_ADD_SEALS, kSeals) != 0)) {
			::close(fd);
			fd = -1;
		}
	}
	void* base = fd >= 0 ? ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
			     : ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		int err = errno;
		if (fd >= 0)
			::close(fd);
		return -err;
	}
	fd_ = fd;
	base_ = base;
	mapped_ = len;
	auto* header = new (base) ScratchFileHeader;
	header->magic = ScratchFileHeader::kMagic;
	if (::getrandom(&header->nonce, sizeof(header->nonce), 0) != sizeof(header->nonce))
		header->nonce = mix(uint64_t(::getpid()), reinterpret_cast<uint64_t>(base));
	header->owner = owner;
	header->scratch_bytes = scratch_bytes;
	header->ended.store(0, std::memory_order_relaxed);
	header->doorbell.init();
	header->published.arrived.store(0, std::memory_order_relaxed);
	header->published.finished.store(0, std::memory_order_relaxed);
	header->published.verdict.store(Published::unknown, std::memory_order_relaxed);
	header->published.stopped.store(0, std::memory_order_relaxed);
	scratch_ = static_cast<std::byte*>(base) + kScratchOffset;
	scratch_bytes_ = scratch_bytes;
	return 0;
}

// The whole mapping: the scratch itself starts at a 4 KiB boundary, which
// is no page boundary where pages are larger.
int ScratchFile::prefault() noexcept { return fault_in_for_writing(base_, mapped_); }

uint64_t ScratchFile::nonce() const noexcept
{
	return base_ ? static_cast<const ScratchFileHeader*>(base_)->nonce : 0;
}

Published* ScratchFile::published() const noexcept
{
	return base_ ? &static_cast<ScratchFileHeader*>(base_)->published : nullptr;
}

int ScratchFile::expose(uint64_t addr, uint64_t key, uint64_t len) noexcept
{
	if (fd_ < 0 || addr == 0)
		return -EINVAL;
	ExposedBuffers& table = static_cast<ScratchFileHeader*>(base_)->exposed;
	for (size_t i = 0; i < ExposedBuffers::kEntries; i++) {
		ExposedBuffers::Entry& e = table.entries[i];
		// Still held by a writer withdraw gave up on: not reused.
		if (e.addr.load(std::memory_order_relaxed) != 0 ||
		    e.writers.load(std::memory_order_relaxed) != 0)
			continue;
		e.key.store(key, std::memory_order_relaxed);
		e.len.store(len, std::memory_order_relaxed);
		e.addr.store(addr, std::memory_order_release); // live from here
		return int(i);
	}
	return -ENOSPC;
}

bool ScratchFile::withdraw(int entry, std::chrono::milliseconds limit) noexcept
{
	if (fd_ < 0 || entry < 0 || size_t(entry) >= ExposedBuffers::kEntries)
		return true;
	ExposedBuffers::Entry& e = static_cast<ScratchFileHeader*>(base_)->exposed.entries[entry];
	// Sequentially consistent with the writer's hold (take, then look at
	// the address): either it sees the entry withdrawn, or we see its hold.
	e.addr.store(0);
	const auto deadline = std::chrono::steady_clock::now() + limit;
	for (unsigned spins = 0; e.writers.load() != 0; spins++) {
		if (spins < 64)
			continue;
		if (std::chrono::steady_clock::now() > deadline)
			return false;
		::sched_yield(); // one piece of a copy: its writer may be off the CPU
	}
	return true;
}

void ScratchFile::mark_ended() noexcept
{
	if (base_)
		static_cast<ScratchFileHeader*>(base_)->ended.store(1, std::memory_order_release);
}

size_t ScratchFile::drain(std::span<uint32_t> out) noexcept
{
	if (fd_ < 0)
		return 0; // nobody can ring it
	Doorbell& d = static_cast<ScratchFileHeader*>(base_)->doorbell;
	size_t n = 0;
	while (n < out.size() && d.pop(tail_, out[n]))
		n++;
	return n;
}

// ---------------------------------------------------------------------------

PeerMapping::~PeerMapping()
{
	if (base_)
		::munmap(base_, mapped_);
}

int PeerMapping::attach(pid_t pid, int fd, uint64_t nonce, uint64_t owner, size_t scratch_bytes,
			uint64_t remote_scratch) noexcept
{
	const size_t len = file_bytes(scratch_bytes);
	if (pid <= 0 || fd < 0 || !len)
		return -EINVAL;
	// Look before opening it for writing: the pair (pid, fd) comes from a
	// join record and may name a device or a pipe.
	char path[64];
	std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", int(pid), fd);
	int look = ::open(path, O_PATH | O_CLOEXEC);
	if (look < 0)
		return -errno;
	struct stat st;
	bool suitable = ::fstat(look, &st) == 0 && S_ISREG(st.st_mode) && size_t(st.st_size) == len;
	int file = -1;
	if (suitable) {
		std::snprintf(path, sizeof(path), "/proc/self/fd/%d", look);
		file = ::open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	}
	::close(look);
	if (!suitable)
		return -EINVAL;
	if (file < 0)
		return -errno;
	// Sealed, its size can no longer change: look at it once more.
	const int seals = ::fcntl(file, F_GET_SEALS);
	if (seals < 0 || (seals & kSeals) != kSeals || ::fstat(file, &st) != 0 ||
	    size_t(st.st_size) != len) {
		::close(file); // it could shrink under us: SIGBUS
		return -EINVAL;
	}
	void* base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
	::close(file);
	if (base == MAP_FAILED)
		return -errno;
	auto* header = static_cast<ScratchFileHeader*>(base);
	if (header->magic != ScratchFileHeader::kMagic || header->nonce != nonce ||
	    header->owner != owner || header->scratch_bytes != scratch_bytes) {
		::munmap(base, len);
		return -EINVAL; // another file under that number: the member is not who it says
	}
	pid_ = pid;
	base_ = base;
	mapped_ = len;
	doorbell_ = &header->doorbell;
	published_ = &header->published;
	exposed_ = &header->exposed;
	scratch_ = static_cast<std::byte*>(base) + kScratchOffset;

	remote_scratch_ = remote_scratch;
	return 0;
}

int PeerMapping::prefault() noexcept { return fault_in_for_writing(base_, mapped_); }

ExposedHold PeerMapping::hold_exposed(uint64_t addr, uint64_t key, uint64_t len) noexcept
{
	if (!exposed_ || addr == 0)
		return {};
	for (ExposedBuffers::Entry& e : exposed_->entries) {
		if (e.addr.load(std::memory_order_relaxed) != addr)
			continue;
		// Held first, then looked at, both sequentially consistent with
		// withdraw (address cleared, then holds counted): either it waits
		// for this hold, or the address read here is no longer ours. While
		// held, the entry is not filled anew (expose skips held entries),
		// so the key and length read after the address are its own.
		e.writers.fetch_add(1);
		ExposedHold hold(&e);
		if (e.addr.load() == addr && e.key.load(std::memory_order_relaxed) == key &&
		    e.len.load(std::memory_order_relaxed) == len)
			return hold;
	}
	return {};
}

bool PeerMapping::cross_memory_allowed() noexcept
{
	if (memory_writes_ == Writes::untested && base_) {
		// One harmless read tells whether the kernel lets us write there.
		char probe;
		iovec local_iov{&probe, 1};
		iovec remote_iov{reinterpret_cast<void*>(remote_scratch_), 1};
		memory_writes_ = ::process_vm_readv(pid_, &local_iov, 1, &remote_iov, 1, 0) == 1
					 ? Writes::allowed
					 : Writes::refused;
	}
	return memory_writes_ == Writes::allowed;
}

bool PeerMapping::target_ended() const noexcept
{
	auto* header = static_cast<const ScratchFileHeader*>(base_);
	return header && header->ended.load(std::memory_order_acquire) != 0;
}

namespace {

// process_vm_writev or _readv until all `length` bytes moved.
int cross_memory(pid_t pid, bool write, uint64_t remote_address, char* local, size_t length)
{
	while (length) {
		iovec local_iov{local, length};
		iovec remote_iov{reinterpret_cast<void*>(remote_address), length};
		ssize_t n = write ? ::process_vm_writev(pid, &local_iov, 1, &remote_iov, 1, 0)
				  : ::process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		local += n;
		remote_address += uint64_t(n);
		length -= size_t(n);
	}
	return 0;
}

} // namespace

int PeerMapping::write_memory(uint64_t remote_address, const void* source, size_t length) noexcept
{
	return cross_memory(pid_, true, remote_address,
			    const_cast<char*>(static_cast<const char*>(source)), length);
}

int PeerMapping::write_exposed(uint64_t addr, uint64_t key, uint64_t len, size_t offset,
			       const void* source, size_t length) noexcept
{
	const auto* from = static_cast<const std::byte*>(source);
	for (size_t done = 0; done < length;) {
		const ExposedHold hold = hold_exposed(addr, key, len);
		if (!hold)
			return -EPERM;
		const size_t piece = std::min(length - done, kExposedPieceBytes);
		if (int err = write_memory(addr + offset + done, from + done, piece))
			return err;
		done += piece;
	}
	return 0;
}

int PeerMapping::read_memory(uint64_t remote_address, void* target, size_t length) noexcept
{
	return cross_memory(pid_, false, remote_address, static_cast<char*>(target), length);
}

ProcessWatch::~ProcessWatch()
{
	if (fd_ >= 0)
		::close(fd_);
}

int ProcessWatch::watch(pid_t pid) noexcept
{
	if (pid <= 0)
		return -EINVAL;
	// The system call itself: glibc's wrapper is younger than some of the
	// systems rcoll runs on.
	int fd = int(::syscall(SYS_pidfd_open, pid, 0));
	if (fd < 0)
		return -errno;
	if (fd_ >= 0)
		::close(fd_);
	fd_ = fd;
	pid_ = pid;
	return 0;
}

bool ProcessWatch::exited() const noexcept
{
	if (fd_ < 0)
		return false;
	pollfd p{fd_, POLLIN, 0};
	return ::poll(&p, 1, 0) > 0; // readable once the process is gone
}

} // namespace rcoll::local
