// The endpoint's peers. Each is made once and kept for the endpoint's life:
// its index is the connection id peers put in their headers. Found by that
// id, by endpoint key, or, for an address whose key is not known yet, by
// the listener it names until that listener's accept tells the key.
#pragma once

#include "address.hpp"
#include "peer.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace rcoll {

class PeerTable {
public:
	// A new peer with its own secret token (EpAddress::kUnkeyed: key unknown).
	Peer& add(uint64_t key, const EpAddress* address);
	// The peer behind an address, made on first use.
	Peer& at(const EpAddress& address);
	Peer* by_local_id(uint32_t id) const;
	Peer* by_key(uint64_t key) const;
	// The accept of a connection to an unkeyed address named the endpoint
	// listening there: this peer serves the key from now on, unless another
	// has a live connection to it already (an earlier one, or one to
	// ourselves, keeps its halves where they are: only the lookup moves).
	void learn_key(Peer& peer, uint64_t key);
	// A dead peer's record serves `key` from now on, as if new (a new
	// secret token: the old connection's messages no longer pass).
	void recycle(Peer& peer, uint64_t key);

	size_t size() const { return peers_.size(); }
	auto begin() const { return peers_.begin(); }
	auto end() const { return peers_.end(); }

private:
	void reset(Peer& peer, uint32_t local_id, uint64_t key, const EpAddress* address);
	void index(Peer& peer);
	std::vector<std::unique_ptr<Peer>> peers_; // index: local_id
	std::unordered_map<uint64_t, Peer*> by_key_;
	std::vector<Peer*> unkeyed_; // connecting to a listener whose key is not known yet
};

} // namespace rcoll
