#include "syscall_counter.hpp"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace fabtests {

namespace {

// The tracepoint's id, from whichever tracefs mount exists; 0 if none.
uint64_t tracepoint_id(const char* tracepoint)
{
	for (const char* tracefs : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}) {
		std::ifstream in(std::string(tracefs) + "/events/" + tracepoint + "/id");
		uint64_t id = 0;
		if (in >> id)
			return id;
	}
	return 0;
}

} // namespace

SyscallCounter::SyscallCounter(const char* tracepoint)
{
	const uint64_t id = tracepoint_id(tracepoint);
	if (!id) {
		why_not_ = std::string("no tracepoint ") + tracepoint +
			   " in tracefs (not mounted? as root: mount -t tracefs nodev "
			   "/sys/kernel/tracing)";
		return;
	}
	perf_event_attr attr{};
	attr.size = sizeof attr;
	attr.type = PERF_TYPE_TRACEPOINT;
	attr.config = id;
	attr.inherit = 1; // threads started later count too
	attr.exclude_kernel = 0;
	const long fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0) {
		why_not_ = std::string("perf_event_open: ") + std::strerror(errno) +
			   " (needs root, CAP_PERFMON or kernel.perf_event_paranoid <= 1)";
		return;
	}
	fd_ = static_cast<int>(fd);
}

SyscallCounter::~SyscallCounter()
{
	if (fd_ >= 0)
		close(fd_);
}

uint64_t SyscallCounter::count() const
{
	uint64_t value = 0;
	if (fd_ < 0 || read(fd_, &value, sizeof value) != static_cast<ssize_t>(sizeof value))
		return 0;
	return value;
}

} // namespace fabtests
