// The address of an rcoll endpoint: what fi_getname returns and fi_av_insert
// takes. It names the core listening address peers connect to, plus a random
// 64-bit key that identifies the endpoint instance (a restarted process that
// reuses the port gets a new key, and simultaneous connects are ordered by it).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace rcoll {

struct EpAddress {
	static constexpr uint32_t kMagic = 0x72636f6c; // "rcol"
	static constexpr uint16_t kVersion = 1;
	static constexpr size_t kCoreMax = 48;       // fits sockaddr_in6 and sockaddr_ib

	uint32_t magic = kMagic;
	uint16_t version = kVersion;
	uint16_t core_len = 0;
	uint64_t key = 0;
	uint8_t core[kCoreMax] = {};

	bool valid() const
	{
		return magic == kMagic && version == kVersion && core_len > 0 &&
		       core_len <= kCoreMax && key != 0;
	}
	std::string to_string() const;
};
static_assert(sizeof(EpAddress) == 64);

} // namespace rcoll
