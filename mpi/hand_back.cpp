#include "hand_back.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <utility>

namespace rcoll::mpi {
namespace {

std::string_view trim(std::string_view s)
{
	while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
		s.remove_prefix(1);
	while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
		s.remove_suffix(1);
	return s;
}

// A number with an optional k, m or g (binary) suffix.
bool parse_number(std::string_view s, uint64_t& out)
{
	unsigned shift = 0;
	if (!s.empty()) {
		switch (s.back()) {
		case 'k':
		case 'K': shift = 10; break;
		case 'm':
		case 'M': shift = 20; break;
		case 'g':
		case 'G': shift = 30; break;
		}
		if (shift)
			s.remove_suffix(1);
	}
	if (s.empty())
		return false;
	uint64_t n = 0;
	const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
	if (ec != std::errc() || end != s.data() + s.size() || n > (UINT64_MAX >> shift))
		return false;
	out = n << shift;
	return true;
}

bool parse_range(std::string_view s, uint64_t& min, uint64_t& max)
{
	s = trim(s);
	if (s == "*") {
		min = 0;
		max = UINT64_MAX;
		return true;
	}
	const size_t dash = s.find('-');
	if (dash == std::string_view::npos)
		return parse_number(s, min) && (max = min, true);
	const std::string_view low = trim(s.substr(0, dash)), high = trim(s.substr(dash + 1));
	if (low.empty() && high.empty())
		return false;
	min = 0;
	max = UINT64_MAX;
	return (low.empty() || parse_number(low, min)) &&
	       (high.empty() || parse_number(high, max)) && min <= max;
}

std::string parse_rule(std::string_view text, HandBackRule& rule)
{
	std::vector<std::string_view> fields;
	for (size_t start = 0;;) {
		const size_t colon = text.find(':', start);
		fields.push_back(trim(text.substr(start, colon - start)));
		if (colon == std::string_view::npos)
			break;
		start = colon + 1;
	}
	if (fields.size() > 3)
		return "more than three fields";
	size_t next = 0;
	using W = HandBackRule::Where;
	static constexpr std::pair<std::string_view, W> kWheres[] = {
		{"host", W::host}, {"net", W::net}, {"apart", W::apart}, {"shared", W::shared}};
	const auto where = std::find_if(std::begin(kWheres), std::end(kWheres),
					[&](const auto& w) { return w.first == fields[0]; });
	if (fields.size() > 1 && where != std::end(kWheres)) {
		rule.where = where->second;
		next = 1;
	} else if (fields.size() == 3) {
		return "where the members run is \"host\", \"net\", \"apart\" or \"shared\", "
		       "not \"" +
		       std::string(fields[0]) + "\"";
	}
	if (fields.size() - next == 2 &&
	    !parse_range(fields[next++], rule.ranks_min, rule.ranks_max))
		return "communicator sizes \"" + std::string(fields[next - 1]) +
		       "\" are not N, N-, N-M, -M or *";
	if (!parse_range(fields[next], rule.bytes_min, rule.bytes_max))
		return "payload sizes \"" + std::string(fields[next]) +
		       "\" are not N, N-, N-M, -M or * (N may end in k, m or g)";
	return "";
}

} // namespace

std::string HandBack::parse(std::string_view text)
{
	std::vector<HandBackRule> rules;
	for (size_t start = 0; start <= text.size();) {
		size_t end = text.find(';', start);
		if (end == std::string_view::npos)
			end = text.size();
		const std::string_view item = trim(text.substr(start, end - start));
		start = end + 1;
		if (item.empty())
			continue;
		HandBackRule rule;
		if (std::string why = parse_rule(item, rule); !why.empty())
			return "rule \"" + std::string(item) + "\": " + why;
		rules.push_back(rule);
	}
	rules_ = std::move(rules);
	return "";
}

} // namespace rcoll::mpi
