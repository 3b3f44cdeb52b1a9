#include "transport/local.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

namespace rcoll::local {
namespace {

constexpr size_t kPage = 4096;
constexpr uint64_t kMagic = 0x72636f6c6c6c6f63ULL; // "rcolllocal"-ish

size_t round_up(size_t n) { return (n + kPage - 1) & ~(kPage - 1); }

// The start of every region: what an attaching member checks before it
// trusts the rest, then the doorbell. The scratch follows, page-aligned.
struct Control {
	uint64_t magic;
	uint64_t nonce;
	uint64_t scratch_bytes;
	Doorbell doorbell;
};
constexpr size_t kScratchOffset = (sizeof(Control) + kPage - 1) & ~(kPage - 1);

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

void Doorbell::init() noexcept
{
	head.store(0, std::memory_order_relaxed);
	for (uint64_t i = 0; i < kCells; i++) {
		cells[i].seq.store(i, std::memory_order_relaxed);
		cells[i].value = 0;
	}
}

bool Doorbell::push(uint32_t value) noexcept
{
	uint64_t pos = head.load(std::memory_order_relaxed);
	for (;;) {
		Cell& c = cells[pos % kCells];
		const uint64_t seq = c.seq.load(std::memory_order_acquire);
		const int64_t turn = int64_t(seq - pos);
		if (turn == 0) {
			if (head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed))
				break;
		} else if (turn < 0) {
			return false; // the consumer has not freed this cell yet
		} else {
			pos = head.load(std::memory_order_relaxed);
		}
	}
	Cell& c = cells[pos % kCells];
	c.value = value;
	c.seq.store(pos + 1, std::memory_order_release); // publishes the data placed before
	return true;
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

OwnRegion::~OwnRegion()
{
	if (base_)
		::munmap(base_, mapped_);
	if (fd_ >= 0)
		::close(fd_);
}

int OwnRegion::create(size_t scratch_bytes) noexcept
{
	const size_t len = kScratchOffset + round_up(scratch_bytes ? scratch_bytes : 1);
	int fd = ::memfd_create("rcoll-coll", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (::ftruncate(fd, off_t(len)) != 0) {
		int err = errno;
		::close(fd);
		return -err;
	}
	void* base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		int err = errno;
		::close(fd);
		return -err;
	}
	fd_ = fd;
	base_ = base;
	mapped_ = len;
	auto* control = new (base) Control;
	control->magic = kMagic;
	if (::getrandom(&control->nonce, sizeof(control->nonce), 0) != sizeof(control->nonce))
		control->nonce = mix(uint64_t(::getpid()), reinterpret_cast<uint64_t>(base));
	control->scratch_bytes = scratch_bytes;
	control->doorbell.init();
	scratch_ = static_cast<std::byte*>(base) + kScratchOffset;
	scratch_bytes_ = scratch_bytes;
	// Under Yama's ptrace_scope 1 only ancestors may write into a process's
	// memory; the local members of a group are siblings. Opening ourselves
	// to processes of the same user is what MPI's shared-memory transports
	// do for cross-memory attach too.
#ifdef PR_SET_PTRACER
	::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
	return 0;
}

uint64_t OwnRegion::nonce() const noexcept
{
	return base_ ? static_cast<const Control*>(base_)->nonce : 0;
}

size_t OwnRegion::drain(std::span<uint32_t> out) noexcept
{
	if (!base_)
		return 0;
	Doorbell& d = static_cast<Control*>(base_)->doorbell;
	size_t n = 0;
	while (n < out.size() && d.pop(tail_, out[n]))
		n++;
	return n;
}

// ---------------------------------------------------------------------------

PeerRegion::~PeerRegion()
{
	if (base_)
		::munmap(base_, mapped_);
}

int PeerRegion::attach(pid_t pid, int fd, uint64_t nonce, size_t scratch_bytes,
		       uint64_t remote_scratch) noexcept
{
	if (pid <= 0 || fd < 0)
		return -EINVAL;
	char path[64];
	std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", int(pid), fd);
	int file = ::open(path, O_RDWR | O_CLOEXEC);
	if (file < 0)
		return -errno;
	const size_t len = kScratchOffset + round_up(scratch_bytes ? scratch_bytes : 1);
	struct stat st;
	if (::fstat(file, &st) != 0 || size_t(st.st_size) != len) {
		::close(file);
		return -EINVAL;
	}
	void* base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
	::close(file);
	if (base == MAP_FAILED)
		return -errno;
	auto* control = static_cast<Control*>(base);
	if (control->magic != kMagic || control->nonce != nonce ||
	    control->scratch_bytes != scratch_bytes) {
		::munmap(base, len);
		return -EINVAL; // another file under that number: the member is not who it says
	}
	pid_ = pid;
	base_ = base;
	mapped_ = len;
	doorbell_ = &control->doorbell;
	scratch_ = static_cast<std::byte*>(base) + kScratchOffset;
	scratch_bytes_ = scratch_bytes;

	// One harmless read tells whether the kernel lets us write there too.
	char probe;
	iovec local_iov{&probe, 1};
	iovec remote_iov{reinterpret_cast<void*>(remote_scratch), 1};
	memory_writes_ = ::process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0) == 1;
	return 0;
}

int PeerRegion::write_memory(uint64_t remote_address, const void* source, size_t length) noexcept
{
	auto* from = static_cast<const char*>(source);
	while (length) {
		iovec local_iov{const_cast<char*>(from), length};
		iovec remote_iov{reinterpret_cast<void*>(remote_address), length};
		ssize_t n = ::process_vm_writev(pid_, &local_iov, 1, &remote_iov, 1, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		from += n;
		remote_address += uint64_t(n);
		length -= size_t(n);
	}
	return 0;
}

bool PeerRegion::ring(uint32_t value) noexcept
{
	return doorbell_ && doorbell_->push(value);
}

} // namespace rcoll::local
