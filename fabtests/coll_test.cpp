// rcoll_coll_test: fi_collective(3) conformance cases for any provider with
// FI_COLLECTIVE, each run in freshly forked ranks on this host.
//
//   rcoll_coll_test [--prov NAME] [--quick] CASE... | all
//   rcoll_coll_test --list
//
// Prints one line per case: "PASS <case> ...", "FAIL <case> ..." or
// "N/A <case> ...". Exits 0 when no case failed.
#include "coll_cases.hpp"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace fabtests::coll {

std::vector<CollCase> all_cases()
{
	std::vector<CollCase> cases;
	add_sweep_cases(cases);
	add_algorithm_cases(cases);
	add_stress_cases(cases);
	add_error_cases(cases);
	add_failure_cases(cases);
	add_mismatch_cases(cases);
	add_finishing_cases(cases);
	return cases;
}

} // namespace fabtests::coll

namespace {

using namespace fabtests;
using namespace fabtests::coll;

void usage(FILE* out)
{
	std::fprintf(out, "usage: rcoll_coll_test [--prov NAME] [--quick] CASE... | all\n"
			  "       rcoll_coll_test --list\n"
			  "  --prov NAME  libfabric provider, default \"rcoll\"; \"tcp;ofi_rxm\" "
			  "runs the cases over\n"
			  "               libfabric's own util_coll collectives\n"
			  "  --quick      fewer counts and rounds\n"
			  "rcoll is found through FI_PROVIDER_PATH (the build tree's .libs).\n");
}

} // namespace

int main(int argc, char** argv)
{
	const std::vector<CollCase> cases = all_cases();
	TestOptions options;
	std::vector<const CollCase*> selected;
	for (int i = 1; i < argc; ++i) {
		const std::string_view arg = argv[i];
		if (arg == "--prov") {
			options.provider = option_value(i, argc, argv);
		} else if (arg == "--quick") {
			options.quick = true;
		} else if (arg == "--list") {
			list_cases(cases, 36);
			return 0;
		} else if (arg == "--help" || arg == "-h") {
			usage(stdout);
			return 0;
		} else if (!select_case(cases, arg, selected)) {
			std::fprintf(stderr, "unknown case or option: %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (selected.empty()) {
		usage(stderr);
		return 2;
	}

	// The parent never loads a provider: each rank initialises libfabric
	// itself after fork, with its own environment.
	prefer_loopback_interfaces();
	CaseReport report;
	for (const CollCase* c : selected) {
		const auto started = Clock::now();
		const LaunchResult result =
			launch_ranks(c->ranks, c->timeout, [&](Bootstrap& boot) {
				if (!c->tune.empty())
					setenv("FI_RCOLL_COLL_TUNE", c->tune.c_str(), 1);
				c->run(boot, options);
			});
		report.add(result, c->name,
			   strfmt("%s, %d ranks", options.provider.c_str(), c->ranks),
			   std::chrono::duration<double>(Clock::now() - started).count());
	}
	return report.finish();
}
