// Fuzz target: FI_RCOLL_COLL_TUNE, the one string rcoll parses from its
// environment (engine::parse_tuning).
#include "engine/tuning.hpp"
#include "fuzz_check.hpp"

#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	const std::string_view text(reinterpret_cast<const char*>(data), size);
	std::vector<rcoll::engine::TuneRule> rules;
	std::string error;
	const auto e = rcoll::engine::parse_tuning(text, rules, error);
	FUZZ_CHECK(e == rcoll::engine::Errc::ok || !error.empty());
	return 0;
}
