#include "peer_table.hpp"

#include "secret.hpp"

#include <algorithm>

namespace rcoll {

Peer& PeerTable::add(uint64_t key, const EpAddress* address)
{
	auto peer = std::make_unique<Peer>();
	reset(*peer, uint32_t(peers_.size()), key, address);
	peers_.push_back(std::move(peer)); // may throw: nothing is indexed yet
	index(*peers_.back());
	return *peers_.back();
}

// A fresh record for `key`, with a token of its own, in `peer`'s place
// (drawn first: should that throw, `peer` is as it was).
void PeerTable::reset(Peer& peer, uint32_t local_id, uint64_t key, const EpAddress* address)
{
	const uint64_t token = unguessable_u64();
	peer = Peer{};
	peer.local_id = local_id;
	peer.key = key;
	peer.rx_token = token;
	if (address)
		peer.address = *address;
}

void PeerTable::index(Peer& peer)
{
	if (peer.key != EpAddress::kUnkeyed)
		by_key_.emplace(peer.key, &peer);
	else
		unkeyed_.push_back(&peer);
}

Peer& PeerTable::at(const EpAddress& a)
{
	if (a.keyed()) {
		Peer* known = by_key(a.key);
		return known ? *known : add(a.key, &a);
	}
	for (Peer* p : unkeyed_) {
		if (p->address.same_listener(a))
			return *p;
	}
	return add(EpAddress::kUnkeyed, &a);
}

Peer* PeerTable::by_local_id(uint32_t id) const
{
	return id < peers_.size() ? peers_[id].get() : nullptr;
}

Peer* PeerTable::by_key(uint64_t key) const
{
	auto it = by_key_.find(key);
	return it != by_key_.end() ? it->second : nullptr;
}

void PeerTable::recycle(Peer& peer, uint64_t key)
{
	const uint64_t old_key = peer.key;
	reset(peer, peer.local_id, key, nullptr);
	auto it = by_key_.find(old_key);
	if (it != by_key_.end() && it->second == &peer)
		by_key_.erase(it);
	std::erase(unkeyed_, &peer);
	index(peer);
}

void PeerTable::learn_key(Peer& peer, uint64_t key)
{
	std::erase(unkeyed_, &peer);
	peer.key = key;
	peer.address.key = key;
	auto [it, added] = by_key_.emplace(key, &peer);
	if (added)
		return;
	const Peer& known = *it->second;
	const bool known_live = known.conn && (known.state == Peer::State::connecting ||
					       known.state == Peer::State::connected);
	if (!known_live)
		it->second = &peer;
}

} // namespace rcoll
