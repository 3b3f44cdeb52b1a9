// Counts the system calls the calling thread (and threads it starts later)
// makes, or those of one kind, through the kernel's raw_syscalls:sys_enter tracepoint and a
// perf counter: nothing is traced or slowed down, the kernel only counts.
// Needs tracefs (mounted at /sys/kernel/tracing or under debugfs) and the
// right to open tracepoint counters (root, CAP_PERFMON, or
// kernel.perf_event_paranoid <= 1): available() says why not otherwise.
#pragma once

#include <cstdint>
#include <string>

namespace fabtests {

class SyscallCounter {
public:
	// Every system call by default; or those of one tracepoint, e.g.
	// "syscalls/sys_enter_sched_yield".
	explicit SyscallCounter(const char* tracepoint = "raw_syscalls/sys_enter");
	SyscallCounter(const SyscallCounter&) = delete;
	SyscallCounter& operator=(const SyscallCounter&) = delete;
	~SyscallCounter();

	bool available() const { return fd_ >= 0; }
	// Why it is not available ("" when it is).
	const std::string& why_not() const { return why_not_; }
	// System calls since the counter opened; 0 when not available.
	uint64_t count() const;

private:
	int fd_ = -1;
	std::string why_not_;
};

} // namespace fabtests
