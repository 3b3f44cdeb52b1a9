// Busy processes at the lowest priority beside a benchmark, standing for
// what a node rarely lacks (daemons, a compile, another job's threads): a
// provider that gives its core away while waiting pays for it here.
#pragma once

#include <sys/types.h>

#include <vector>

namespace fabtests {

class CpuLoad {
public:
	// Starts `processes` children at nice 19, each spinning until this
	// object goes (or this process dies).
	explicit CpuLoad(int processes);
	CpuLoad(const CpuLoad&) = delete;
	CpuLoad& operator=(const CpuLoad&) = delete;
	~CpuLoad();

private:
	std::vector<pid_t> children_;
};

} // namespace fabtests
