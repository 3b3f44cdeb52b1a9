#include "mpi_baseline.hpp"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

namespace fabtests {

namespace {

// stdout (and stderr) of a shell command, and its exit status.
std::string capture(const std::string& command, int& status)
{
	std::string out;
	FILE* pipe = popen((command + " 2>&1").c_str(), "r");
	if (!pipe) {
		status = -1;
		return out;
	}
	std::array<char, 4096> chunk;
	size_t n;
	while ((n = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0)
		out.append(chunk.data(), n);
	status = pclose(pipe);
	return out;
}

std::string directory_of_this_program()
{
	std::array<char, 4096> path{};
	const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
	if (n <= 0)
		return ".";
	std::string p(path.data(), static_cast<size_t>(n));
	return p.substr(0, p.rfind('/'));
}

} // namespace

MpiBaseline::MpiBaseline()
{
	program_ = directory_of_this_program() + "/rcoll_mpi_coll_bench";
	if (access(program_.c_str(), X_OK) != 0) {
		why_not_ = "rcoll_mpi_coll_bench was not built (no MPI compiler at configure time)";
		return;
	}
	int status = 0;
	const std::string version = capture("mpirun --version", status);
	if (status != 0 || version.find("Open MPI") == std::string::npos)
		why_not_ = "mpirun is not Open MPI's";
}

std::string MpiBaseline::command(const std::string& mca, int ranks, bool bind,
				 const std::string& args) const
{
	// Ranks as rcoll's: on this host, bound as rcoll_coll_bench binds its
	// own, the runtime on loopback.
	std::ostringstream line;
	line << "mpirun" << (geteuid() == 0 ? " --allow-run-as-root" : "") << " --oversubscribe "
	     << (bind ? "--bind-to hwthread --map-by hwthread" : "--bind-to none") << " -np "
	     << ranks << " --mca oob_tcp_if_include lo " << mca << " " << program_ << " " << args;
	return line.str();
}

MpiRun MpiBaseline::run(const std::string& command, std::chrono::seconds limit) const
{
	MpiRun result;
	int status = 0;
	const std::string out =
		capture("timeout -k 5 " + std::to_string(limit.count()) + " " + command, status);
	std::istringstream lines(out);
	std::string line, last_other;
	while (std::getline(lines, line)) {
		std::istringstream fields(line);
		std::string word, verdict;
		MpiPoint p;
		if (fields >> word && word == "point" &&
		    fields >> p.coll >> p.bytes >> verdict >> p.median_us >> p.syscalls) {
			p.right = verdict == "ok";
			result.points.push_back(p);
		} else if (!line.empty()) {
			last_other = line;
		}
	}
	if (status != 0)
		result.error = "mpirun exited with status " + std::to_string(status) +
			       (last_other.empty() ? "" : ": " + last_other);
	return result;
}

} // namespace fabtests
