// fid_av_set: an ordered list of AV addresses; a member's rank in a group
// joined from it is its position.
#pragma once

#include "common.hpp"

#include <vector>

namespace rcoll {

struct AddressVector;

struct AvSet {
	FidShell<fid_av_set, AvSet> shell;
	AddressVector* av = nullptr;
	std::vector<fi_addr_t> members;
	// fi_av_set_attr's comm_key, when given: members then identify a group
	// joined from this set by it rather than by the order of their joins.
	std::vector<uint8_t> comm_key;
	static constexpr size_t kMaxCommKey = 256;

	static int open(AddressVector* av, fi_av_set_attr* attr, fid_av_set** out, void* context);
};

} // namespace rcoll
