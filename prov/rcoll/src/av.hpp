// fid_av: rcoll endpoint addresses (FI_AV_TABLE and FI_AV_MAP; in both the
// fi_addr_t is the slot index). Connections are not made here but on first
// use by an endpoint.
#pragma once

#include "address.hpp"
#include "common.hpp"

#include <unordered_map>
#include <vector>

namespace rcoll {

struct Domain;
struct EventQueue;

struct AddressVector {
	FidShell<fid_av, AddressVector> shell;
	Domain* domain = nullptr;
	fi_av_type type = FI_AV_TABLE;
	EventQueue* eq = nullptr;
	std::vector<EpAddress> slots; // core_len == 0: removed
	std::unordered_map<uint64_t, fi_addr_t> by_key;
	size_t endpoints = 0; // bound endpoints (close is -FI_EBUSY)

	// nullptr when fi_addr names no live entry.
	const EpAddress* lookup(fi_addr_t addr) const
	{
		return addr < slots.size() && slots[addr].core_len ? &slots[addr] : nullptr;
	}
	fi_addr_t find(uint64_t key) const
	{
		auto it = by_key.find(key);
		return it == by_key.end() ? FI_ADDR_NOTAVAIL : it->second;
	}

	// The slot of an address: by key, or for an unkeyed one by its listener.
	fi_addr_t find(const EpAddress& a) const;
	// A connection's handshake told the key of the endpoint listening at
	// `listener`: unkeyed entries naming it become that endpoint's.
	void learn_key(const EpAddress& listener, uint64_t key);

	static int open(Domain* domain, fi_av_attr* attr, fid_av** out, void* context);
};

} // namespace rcoll
