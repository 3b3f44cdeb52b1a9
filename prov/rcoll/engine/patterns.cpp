#include "engine/patterns.hpp"

#include <algorithm>
#include <unordered_map>

namespace rcoll::engine::pattern {

HostOrder::HostOrder(uint32_t p, uint32_t root, std::span<const uint32_t> hosts)
	: p_(p), root_(root)
{
	if (hosts.size() != p || p < 3)
		return;
	// Hosts numbered in the order their first member follows the root.
	std::vector<uint32_t> slot_of(p, UINT32_MAX), members;
	bool grouped = false;
	for (uint32_t v = 0; v < p; v++) {
		const uint32_t host = hosts[pattern::to_real(v, root, p)];
		if (host >= p)
			return; // not a host index of this group: the rotation
		if (slot_of[host] == UINT32_MAX) {
			slot_of[host] = uint32_t(members.size());
			members.push_back(0);
		}
		grouped |= ++members[slot_of[host]] > 1;
	}
	if (!grouped || members.size() == 1)
		return;
	// Counting sort by host, the rotation's order within each.
	std::vector<uint32_t> next(members.size(), 0);
	for (size_t h = 1; h < members.size(); h++)
		next[h] = next[h - 1] + members[h - 1];
	real_.resize(p);
	virtual_.resize(p);
	for (uint32_t v = 0; v < p; v++) {
		const uint32_t rank = pattern::to_real(v, root, p);
		const uint32_t position = next[slot_of[hosts[rank]]]++;
		real_[position] = rank;
		virtual_[rank] = position;
	}
}

HostGroups::HostGroups(uint32_t p, std::span<const uint32_t> hosts) : host_of_(p), position_(p)
{
	const bool known = hosts.size() == p;
	std::unordered_map<uint32_t, uint32_t> index_of; // the placement's host number: index
	for (uint32_t r = 0; r < p; r++) {
		uint32_t h = uint32_t(members_.size());
		if (known)
			h = index_of.try_emplace(hosts[r], h).first->second;
		if (h == members_.size())
			members_.emplace_back();
		host_of_[r] = h;
		position_[r] = uint32_t(members_[h].size());
		members_[h].push_back(r);
	}
	before_.resize(members_.size());
	for (size_t h = 1; h < members_.size(); h++)
		before_[h] = before_[h - 1] + uint32_t(members_[h - 1].size());
}

uint32_t HostGroups::largest() const noexcept
{
	size_t most = 0;
	for (const auto& m : members_)
		most = std::max(most, m.size());
	return uint32_t(most);
}

std::vector<std::pair<uint32_t, uint32_t>> HostGroups::runs_of(std::span<const uint32_t> ranks)
{
	std::vector<std::pair<uint32_t, uint32_t>> out;
	for (uint32_t r : ranks)
		if (!out.empty() && out.back().second == r)
			out.back().second = r + 1;
		else
			out.emplace_back(r, r + 1);
	return out;
}

uint32_t HostGroups::dealt_to(uint32_t x, uint32_t g) const noexcept
{
	const auto& there = members_[g];
	return there[(deal_base(host_of_[x], g) + position_[x]) % there.size()];
}

std::vector<uint32_t> HostGroups::dealt_blocks(uint32_t r) const
{
	const uint32_t g = host_of_[r];
	const uint32_t m = uint32_t(members_[g].size());
	std::vector<uint32_t> out;
	for (uint32_t h = 0; h < count(); h++) {
		if (h == g)
			continue;
		// The first i with (base + i) mod m equal to r's position.
		const uint32_t base = deal_base(h, g) % m;
		for (uint32_t i = (position_[r] + m - base) % m; i < members_[h].size(); i += m)
			out.push_back(members_[h][i]);
	}
	std::sort(out.begin(), out.end());
	return out;
}

std::vector<uint32_t> BinomialTree::children(uint32_t v) const
{
	std::vector<uint32_t> out;
	uint32_t limit = v == 0 ? std::bit_ceil(p) : lowest_bit(v);
	for (uint32_t mask = limit >> 1; mask > 0; mask >>= 1)
		if (uint64_t(v) + mask < p)
			out.push_back(v + mask);
	return out;
}

unsigned KnomialTree::levels() const noexcept
{
	unsigned l = 0;
	for (uint64_t span = 1; span < p; span *= uint64_t(k) + 1)
		++l;
	return l;
}

unsigned KnomialTree::send_level(uint32_t v) const noexcept
{
	if (v == 0)
		return levels();
	unsigned level = 0;
	uint64_t radix = uint64_t(k) + 1;
	for (uint64_t x = v; x % radix == 0; x /= radix)
		++level;
	return level;
}

std::optional<uint32_t> KnomialTree::parent(uint32_t v) const noexcept
{
	if (v == 0)
		return std::nullopt;
	uint64_t radix = uint64_t(k) + 1;
	uint64_t stride = 1;
	for (unsigned j = send_level(v); j > 0; --j)
		stride *= radix;
	uint64_t digit = (v / stride) % radix;
	return static_cast<uint32_t>(v - digit * stride);
}

std::vector<uint32_t> KnomialTree::children_in_send_order(uint32_t v) const
{
	std::vector<uint32_t> out;
	for (unsigned level = levels(); level-- > 0;) {
		auto at = children_at(v, level);
		out.insert(out.end(), at.rbegin(), at.rend());
	}
	return out;
}

std::vector<uint32_t> KnomialTree::children_at(uint32_t v, unsigned level) const
{
	std::vector<uint32_t> out;
	if (v != 0 && level >= send_level(v))
		return out;
	uint64_t stride = 1;
	for (unsigned j = 0; j < level; ++j)
		stride *= uint64_t(k) + 1;
	for (uint64_t c = 1; c <= k; ++c) {
		uint64_t child = v + c * stride;
		if (child >= p)
			break;
		out.push_back(static_cast<uint32_t>(child));
	}
	return out;
}

uint32_t KnomialTree::child_slot(uint32_t child) const noexcept
{
	unsigned level = send_level(child);
	uint64_t stride = 1;
	for (unsigned j = 0; j < level; ++j)
		stride *= uint64_t(k) + 1;
	uint64_t digit = (child / stride) % (uint64_t(k) + 1);
	return static_cast<uint32_t>(level * k + digit - 1);
}

} // namespace rcoll::engine::pattern
