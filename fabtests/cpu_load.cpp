#include "cpu_load.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

namespace fabtests {

CpuLoad::CpuLoad(int processes)
{
	for (int i = 0; i < processes; ++i) {
		const pid_t pid = fork();
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			setpriority(PRIO_PROCESS, 0, 19);
			// Bounded all the same: an hour at most.
			const auto end = std::chrono::steady_clock::now() + std::chrono::hours(1);
			volatile unsigned long spins = 0;
			while (std::chrono::steady_clock::now() < end)
				for (int k = 0; k < 1000000; ++k)
					spins = spins + 1;
			_exit(0);
		}
		if (pid > 0)
			children_.push_back(pid);
	}
}

CpuLoad::~CpuLoad()
{
	for (pid_t pid : children_)
		kill(pid, SIGKILL);
	for (pid_t pid : children_)
		waitpid(pid, nullptr, 0);
}

} // namespace fabtests
