// The address of an rcoll endpoint: what fi_getname returns and fi_av_insert
// takes. It names the core listening address peers connect to, plus a random
// 64-bit key that identifies the endpoint instance (a restarted process that
// reuses the port gets a new key, and simultaneous connects are ordered by it).
// An address resolved from a node and service (fi_getinfo without
// FI_SOURCE) has no key yet (kUnkeyed): it names whichever endpoint listens
// there, and the first connection's accept tells its key.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace rcoll {

struct EpAddress {
	static constexpr uint32_t kMagic = 0x72636f6c; // "rcol"
	static constexpr uint16_t kVersion = 1;
	static constexpr size_t kCoreMax = 48; // fits sockaddr_in6 and sockaddr_ib
	static constexpr uint64_t kUnkeyed = 0;

	uint32_t magic = kMagic;
	uint16_t version = kVersion;
	uint16_t core_len = 0;
	uint64_t key = 0;
	uint8_t core[kCoreMax] = {};

	// Well formed; the key may still be unknown.
	bool valid() const
	{
		return magic == kMagic && version == kVersion && core_len > 0 &&
		       core_len <= kCoreMax;
	}
	bool keyed() const { return key != kUnkeyed; }
	bool same_listener(const EpAddress& other) const
	{
		return core_len == other.core_len && memcmp(core, other.core, core_len) == 0;
	}
	std::string to_string() const;
};
static_assert(sizeof(EpAddress) == 64);

// Sets the port of an IPv4 or IPv6 socket address to 0 (any); other
// families are left alone.
void clear_port(void* sockaddr_any);

} // namespace rcoll
