#include "engine/tuning.hpp"

#include <charconv>

namespace rcoll::engine {

namespace {

std::vector<std::string_view> split(std::string_view text, char sep)
{
	std::vector<std::string_view> out;
	size_t start = 0;
	for (;;) {
		size_t pos = text.find(sep, start);
		out.push_back(
			text.substr(start, pos == std::string_view::npos ? pos : pos - start));
		if (pos == std::string_view::npos)
			return out;
		start = pos + 1;
	}
}

bool parse_count(std::string_view text, uint64_t& out) noexcept
{
	if (text.empty())
		return false;
	auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
	return ec == std::errc() && end == text.data() + text.size();
}

// "lo-hi" with sizes (hi may be "inf").
bool parse_range(std::string_view text, uint64_t& lo, uint64_t& hi, bool counts) noexcept
{
	size_t dash = text.find('-');
	if (dash == std::string_view::npos)
		return false;
	std::string_view a = text.substr(0, dash), b = text.substr(dash + 1);
	auto one = [&](std::string_view t, uint64_t& v) {
		return counts ? parse_count(t, v) : parse_size(t, v);
	};
	if (!one(a, lo))
		return false;
	if (b == "inf")
		hi = UINT64_MAX;
	else if (!one(b, hi))
		return false;
	return lo <= hi;
}

} // namespace

bool parse_size(std::string_view text, uint64_t& out) noexcept
{
	if (text.empty())
		return false;
	uint64_t mult = 1;
	switch (text.back()) {
	case 'k':
	case 'K': mult = uint64_t(1) << 10; break;
	case 'm':
	case 'M': mult = uint64_t(1) << 20; break;
	case 'g':
	case 'G': mult = uint64_t(1) << 30; break;
	default: break;
	}
	if (mult != 1)
		text.remove_suffix(1);
	uint64_t v = 0;
	if (!parse_count(text, v) || v > UINT64_MAX / mult)
		return false;
	out = v * mult;
	return true;
}

Errc parse_tuning(std::string_view text, std::vector<TuneRule>& rules, std::string& error)
{
	std::vector<TuneRule> parsed;
	if (text.empty()) {
		rules.clear();
		return Errc::ok;
	}
	for (std::string_view rule_text : split(text, '#')) {
		auto fail = [&](std::string_view why, std::string_view field) {
			error = "tuning rule '" + std::string(rule_text) + "': " + std::string(why);
			if (!field.empty())
				error += " '" + std::string(field) + "'";
			return Errc::invalid_argument;
		};
		auto fields = split(rule_text, ':');
		auto coll = parse_collective(fields[0]);
		if (!coll)
			return fail("unknown collective", fields[0]);
		TuneRule rule;
		rule.coll = *coll;
		bool named = false;
		for (size_t i = 1; i < fields.size(); ++i) {
			std::string_view f = fields[i];
			if (f.empty())
				return fail("empty field", f);
			if (f == "@auto") {
				rule.algorithm = Algorithm::automatic;
				named = true;
			} else if (f[0] == '@') {
				Algorithm a = parse_algorithm(f.substr(1));
				if (a == Algorithm::automatic || !algorithm_supports(rule.coll, a))
					return fail("algorithm not available for this collective",
						    f.substr(1));
				rule.algorithm = a;
				named = true;
			} else if (f.starts_with("p=")) {
				uint64_t lo = 0, hi = 0;
				if (!parse_range(f.substr(2), lo, hi, true) || lo == 0)
					return fail("bad group size range", f);
				rule.min_size =
					static_cast<uint32_t>(std::min<uint64_t>(lo, UINT32_MAX));
				rule.max_size =
					static_cast<uint32_t>(std::min<uint64_t>(hi, UINT32_MAX));
			} else if (f.starts_with("k=")) {
				uint64_t k = 0;
				if (!parse_count(f.substr(2), k) || k == 0 || k > UINT32_MAX)
					return fail("bad tree degree", f);
				rule.params.radix = static_cast<uint32_t>(k);
			} else if (f.starts_with("hosts=")) {
				const std::string_view h = f.substr(6);
				if (h == "one")
					rule.hosts = Spread::one_host;
				else if (h == "apart")
					rule.hosts = Spread::apart;
				else if (h == "shared")
					rule.hosts = Spread::shared;
				else
					return fail("bad placement (one, apart or shared)", f);
			} else if (f.starts_with("chunk=")) {
				uint64_t c = 0;
				if (!parse_size(f.substr(6), c) || c == 0)
					return fail("bad chunk size", f);
				rule.params.chunk_bytes = c;
			} else if (f.find('-') != std::string_view::npos) {
				if (!parse_range(f, rule.min_bytes, rule.max_bytes, false))
					return fail("bad message size range", f);
			} else {
				return fail("unknown field", f);
			}
		}
		if (!named)
			return fail("no @algorithm or @auto", "");
		if (rule.algorithm == Algorithm::automatic &&
		    (rule.params.radix || rule.params.chunk_bytes))
			return fail("@auto takes no k= or chunk=", "");
		parsed.push_back(rule);
	}
	rules = std::move(parsed);
	return Errc::ok;
}

} // namespace rcoll::engine
