// Connections: one core MSG endpoint per peer, made on first use, with a
// handshake that checks protocol version and limits, and a rule for
// simultaneous connects (the connection initiated by the smaller endpoint
// key wins). A peer whose connection fails turns its pending operations
// into error completions; the endpoint keeps working with the others.
#include "av.hpp"
#include "coll.hpp"
#include "config.hpp"
#include "domain.hpp"
#include "ep.hpp"

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace rcoll {

// The accept of a connection to an unkeyed address named the endpoint
// listening there: the address vector learns it too, so that later
// operations and reported sources use the keyed address.
void Endpoint::learn_key(Peer& peer, uint64_t key)
{
	peers.learn_key(peer, key);
	if (app.av)
		app.av->learn_key(peer.address, key);
}

// The peer an operation addresses, connecting to it if needed.
Peer* Endpoint::peer_for(fi_addr_t addr, int& err, bool inject)
{
	const EpAddress* a = app.av ? app.av->lookup(addr) : nullptr;
	if (!a) {
		RCOLL_WARN(FI_LOG_EP_DATA, "fi_addr %llu is not in the address vector\n",
			   (unsigned long long)addr);
		err = -FI_EINVAL;
		return nullptr;
	}
	Peer& peer = peers.at(*a);
	if (!peer.address.core_len)
		peer.address = *a; // known so far only from its own connection request
	if (inject && peer.state == Peer::State::failed && peer.connect_error) {
		err = -peer.connect_error; // retrying would only fail the same way
		return nullptr;
	}
	if (peer.state == Peer::State::idle || peer.state == Peer::State::failed) {
		err = connect(peer);
		if (err)
			return nullptr;
	}
	// An injected message must reach the core now: queued behind a
	// connection still being set up, it would be lost if the endpoint closed
	// first (an MPI rank that injects, then finalizes).
	if (inject && (peer.state != Peer::State::connected || !peer.backlog.empty())) {
		err = -FI_EAGAIN;
		return nullptr;
	}
	err = 0;
	return &peer;
}

// The peer for a connection request from a key we have no peer for. One
// the address vector names (or ourselves) is always welcome; others
// (strangers) are allowed up to FI_RCOLL_UNKNOWN_PEERS_MAX, and never more
// than half the descriptors this process may open, each holding a
// connection. A failed stranger's record serves the next one, so strangers
// that come and go do not grow the table.
Peer* Endpoint::admit_stranger(uint64_t key)
{
	auto in_av = [&](uint64_t k) { return app.av && app.av->find(k) != FI_ADDR_NOTAVAIL; };
	if (key == address.key || in_av(key))
		return &peers.add(key, nullptr);
	size_t cap = config().unknown_peers_max;
	rlimit files{};
	if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
		cap = std::min<size_t>(cap, files.rlim_cur / 2);
	size_t strangers = 0;
	for (const auto& p : peers) {
		if (!p->stranger)
			continue;
		if (in_av(p->key)) {
			p->stranger = false; // the application named it since
			continue;
		}
		if (reusable(*p)) {
			if (coll)
				coll->forget_early(p->key);
			peers.recycle(*p, key);
			p->stranger = true;
			return p.get();
		}
		strangers++;
	}
	if (strangers >= cap)
		return nullptr;
	Peer& peer = peers.add(key, nullptr);
	peer.stranger = true;
	return &peer;
}

// A failed peer that nothing refers to any more: no connection, message,
// operation or unreceived message of its own.
bool Endpoint::reusable(const Peer& peer)
{
	if (peer.state != Peer::State::failed || peer.conn || peer.losing || peer.passive ||
	    peer.tx_held || !peer.backlog.empty() || !peer.controls.empty() ||
	    peer.unexpected_bytes)
		return false;
	for (const PendingFailure& f : failing)
		if (f.peer == &peer)
			return false;
	bool used = false;
	tx.sends.for_each([&](SendOp& op) { used |= op.peer == &peer; });
	rx.recvs.for_each([&](RecvOp& op) { used |= op.peer == &peer; });
	for (const auto& op : rma_ops)
		used |= op->peer == &peer;
	tx.buffers->for_each([&](BufferRecord& r) { used |= r.in_core && r.peer == &peer; });
	return !used;
}

fid_ep* Endpoint::open_core_ep(fi_info* core_info, Peer& peer)
{
	fid_ep* ep = nullptr;
	int ret = fi_endpoint(domain->core.get(), core_info, &ep, &peer);
	if (ret) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "core fi_endpoint: %s\n", fi_strerror(-ret));
		return nullptr;
	}
	FidPtr<fid_ep> guard(ep);
	if ((ret = fi_ep_bind(ep, &core.eq->fid, 0)) ||
	    (ret = fi_ep_bind(ep, &core.cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (ret = fi_ep_bind(ep, &core.srx->fid, 0)) || (ret = fi_enable(ep))) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "setting up a core connection: %s\n", fi_strerror(-ret));
		return nullptr;
	}
	return guard.release();
}

int Endpoint::connect(Peer& peer)
{
	if (!peer.address.core_len)
		return -FI_EINVAL;
	InfoPtr info(fi_dupinfo(domain->core_info.get()));
	if (!info)
		return -FI_ENOMEM;
	free(info->dest_addr);
	info->dest_addr = malloc(peer.address.core_len);
	if (!info->dest_addr)
		return -FI_ENOMEM;
	memcpy(info->dest_addr, peer.address.core, peer.address.core_len);
	info->dest_addrlen = peer.address.core_len;
	// Active connections leave from the listening address with port 0, so
	// each connect gets its own port.
	if (info->src_addr)
		clear_port(info->src_addr);
	fid_ep* ep = open_core_ep(info.get(), peer);
	if (!ep)
		return -FI_EIO;
	RCOLL_INFO(FI_LOG_EP_CTRL, "connecting to %016llx\n", (unsigned long long)peer.key);
	FidPtr<fid_ep> conn(ep);
	proto::Handshake request;
	request.kind = proto::HandshakeKind::Request;
	request.endpoint_key = address.key;
	request.conn_id = peer.local_id;
	request.eager_limit = uint32_t(eager_limit);
	request.token = peer.rx_token;
	// Proof that a reconnect comes from the far end of the connection it
	// replaces, should that one still look alive there.
	request.prior_token = peer.tx_token;
	request.host = host;
	std::byte blob[proto::Handshake::kWireSize];
	proto::encode_handshake(request, blob);
	int ret = fi_connect(ep, info->dest_addr, blob, sizeof(blob));
	if (ret) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "core fi_connect to %s: %s\n",
			   peer.address.to_string().c_str(), fi_strerror(-ret));
		return ret;
	}
	peer.conn = std::move(conn);
	peer.active = true;
	peer.state = Peer::State::connecting;
	pace.cm_busy = true;
	peer.connect_started = std::chrono::steady_clock::now();
	return 0;
}

void Endpoint::handle_cm_event(uint32_t event, const fi_eq_cm_entry& entry, size_t len)
{
	const size_t data_len = len > sizeof(fi_eq_cm_entry) ? len - sizeof(fi_eq_cm_entry) : 0;
	if (event == FI_CONNREQ) {
		InfoPtr info(entry.info);
		proto::Handshake hs;
		auto status = proto::check_handshake(entry.data, data_len,
						     proto::HandshakeKind::Request, hs);
		auto reject = [&](const char* why) {
			RCOLL_WARN(FI_LOG_EP_CTRL, "rejecting a connection request: %s\n", why);
			fi_reject(core.pep.get(), info->handle, nullptr, 0);
		};
		if (status != proto::WireStatus::Ok)
			return reject(proto::describe(status));
		RCOLL_INFO(FI_LOG_EP_CTRL, "connection request from %016llx\n",
			   (unsigned long long)hs.endpoint_key);
		Peer* known = peers.by_key(hs.endpoint_key);
		if (!known)
			known = admit_stranger(hs.endpoint_key);
		if (!known)
			return reject(
				"FI_RCOLL_UNKNOWN_PEERS_MAX endpoints not in the address vector "
				"are connected");
		Peer& peer = *known;
		const bool self = hs.endpoint_key == address.key;
		if (self && hs.token != peer.rx_token)
			return reject("it claims this endpoint's own key");
		const bool ours_live = peer.active && peer.conn &&
				       (peer.state == Peer::State::connecting ||
					peer.state == Peer::State::connected);
		if (!self && ours_live && address.key < hs.endpoint_key) {
			// Both sides connected at once: the smaller key's connect wins.
			return reject("simultaneous connect; ours wins");
		} else if (!self && ours_live && peer.state == Peer::State::connecting) {
			peer.losing = std::move(peer.conn);
		} else if (!self && peer.state == Peer::State::connected) {
			// A new request on a live connection: the peer saw it die
			// first, and shows the token of that connection. Anyone else
			// claiming its key is refused, and the live connection is
			// probed: if it is dead after all, the probe fails it and
			// the peer's next request goes through.
			if (hs.prior_token != peer.rx_token) {
				send_probe(peer);
				return reject("it claims the key of a live peer without its token");
			}
			fail_peer(peer, -FI_ECONNRESET);
		}
		fid_ep* ep = open_core_ep(info.get(), peer);
		if (!ep)
			return reject("cannot open a core endpoint");
		FidPtr<fid_ep> conn(ep);
		proto::Handshake accept;
		accept.kind = proto::HandshakeKind::Accept;
		accept.endpoint_key = address.key;
		accept.conn_id = peer.local_id;
		accept.eager_limit = uint32_t(eager_limit);
		accept.token = peer.rx_token;
		accept.host = host;
		std::byte blob[proto::Handshake::kWireSize];
		proto::encode_handshake(accept, blob);
		int ret = fi_accept(ep, blob, sizeof(blob));
		if (ret) {
			RCOLL_WARN(FI_LOG_EP_CTRL, "core fi_accept: %s\n", fi_strerror(-ret));
			return;
		}
		if (self) {
			peer.passive = std::move(conn);
			return;
		}
		peer.conn = std::move(conn);
		peer.active = false;
		peer.remote_id = hs.conn_id;
		peer.tx_token = hs.token;
		peer.eager_limit = hs.eager_limit;
		peer.host = hs.host;
		peer.state = Peer::State::connecting;
		peer.connect_started = std::chrono::steady_clock::now();
		return;
	}

	auto* peer = static_cast<Peer*>(entry.fid->context);
	if (!peer)
		return;
	const bool is_conn = peer->conn && entry.fid == &peer->conn->fid;
	RCOLL_INFO(FI_LOG_EP_CTRL, "CM event %s on %s connection to %016llx (state %d)\n",
		   fi_tostr(&event, FI_TYPE_EQ_EVENT),
		   is_conn                                             ? "the"
		   : (peer->losing && entry.fid == &peer->losing->fid) ? "a losing"
								       : "another",
		   (unsigned long long)peer->key, int(peer->state));
	if (event == FI_CONNECTED) {
		if (!is_conn)
			return; // the accepted half of a self connection, or a stale one
		if (peer->active) {
			proto::Handshake hs;
			auto status = proto::check_handshake(entry.data, data_len,
							     proto::HandshakeKind::Accept, hs);
			const bool key_differs =
				peer->key != EpAddress::kUnkeyed && hs.endpoint_key != peer->key;
			if (status != proto::WireStatus::Ok || key_differs) {
				RCOLL_WARN(FI_LOG_EP_CTRL, "bad connection accept from %s: %s\n",
					   peer->address.to_string().c_str(),
					   status != proto::WireStatus::Ok
						   ? proto::describe(status)
						   : "endpoint key differs");
				fail_peer(*peer, -FI_ECONNREFUSED);
				return;
			}
			peer->remote_id = hs.conn_id;
			peer->tx_token = hs.token;
			peer->eager_limit = hs.eager_limit;
			peer->host = hs.host;
			if (peer->key == EpAddress::kUnkeyed)
				learn_key(*peer, hs.endpoint_key);
		}
		peer->state = Peer::State::connected;
		peer->connect_error = 0;
		count_peers_on_host();
		RCOLL_INFO(FI_LOG_EP_CTRL, "connected to %s\n", peer->address.to_string().c_str());
		flush_backlog(*peer);
	} else if (event == FI_SHUTDOWN) {
		if (is_conn) {
			// What the peer sent before it closed may still wait in the
			// core CQ behind this event: take it first, it stays receivable.
			while (read_core_cq(8) > 0) {
			}
			fail_peer(*peer, -FI_ECONNRESET);
		} else if (peer->losing && entry.fid == &peer->losing->fid) {
			graveyard.push_back(std::move(peer->losing));
		} else if (peer->passive && entry.fid == &peer->passive->fid) {
			graveyard.push_back(std::move(peer->passive));
		}
	}
}

// Processes on this host that this one works with, against the CPUs they
// may use: while they outnumber them, waiting yields (CrowdedHost). A peer's
// process is known once a collective group on this host named it.
void Endpoint::count_peers_on_host()
{
	size_t on_host = 1; // this process
	HostCpus cpus;
	for (const auto& peer : peers)
		if (host && peer->host == host && peer->state == Peer::State::connected) {
			on_host++;
			cpus.add(peer->process ? peer->process->pid() : 0);
		}
	if (on_host > cpus.count()) {
		if (!crowded)
			crowded.emplace();
	} else {
		crowded.reset();
	}
}

void Endpoint::handle_cm_error(const fi_eq_err_entry& err)
{
	if (!err.fid)
		return;
	auto* peer = static_cast<Peer*>(err.fid->context);
	if (!peer)
		return;
	if (peer->losing && err.fid == &peer->losing->fid) {
		// Our connect lost the race and was rejected, as it should be.
		graveyard.push_back(std::move(peer->losing));
		return;
	}
	RCOLL_INFO(FI_LOG_EP_CTRL, "CM error %s on %s connection to %016llx (state %d)\n",
		   fi_strerror(err.err),
		   peer->conn && err.fid == &peer->conn->fid ? "the" : "another",
		   (unsigned long long)peer->key, int(peer->state));
	if (!peer->conn || err.fid != &peer->conn->fid)
		return;
	if (err.err == FI_ECONNREFUSED && peer->active && peer->key != EpAddress::kUnkeyed &&
	    peer->key < address.key && peer->state == Peer::State::connecting) {
		// The peer connected to us at the same time and its connect wins;
		// its request may still be on the way. Wait for it (bounded by the
		// connect timeout) instead of failing our sends.
		graveyard.push_back(std::move(peer->conn));
		return;
	}
	RCOLL_WARN(FI_LOG_EP_CTRL, "connection to %s failed: %s\n",
		   peer->address.to_string().c_str(), fi_strerror(err.err));
	if (peer->state == Peer::State::connecting)
		peer->connect_error = err.err;
	fail_peer(*peer, -err.err);
}

int Endpoint::poll_cm()
{
	int handled = 0;
	alignas(fi_eq_cm_entry) std::byte cm[sizeof(fi_eq_cm_entry) + 256];
	uint32_t event;
	ssize_t ret;
	// Read dry, errors included: an error (a refused connect that lost a
	// simultaneous-connect race, say) must not leave the events queued
	// behind it, such as an FI_CONNECTED whose connection already carries
	// data, for a later call.
	for (;;) {
		ret = fi_eq_read(core.eq.get(), &event, cm, sizeof(cm), 0);
		if (ret > 0) {
			handle_cm_event(event, *reinterpret_cast<fi_eq_cm_entry*>(cm), size_t(ret));
		} else if (ret == -FI_EAVAIL) {
			fi_eq_err_entry err{};
			if (fi_eq_readerr(core.eq.get(), &err, 0) <= 0)
				break;
			handle_cm_error(err);
		} else {
			break;
		}
		handled++;
	}
	pace.cm_busy = std::any_of(peers.begin(), peers.end(), [](const auto& p) {
		return p->state == Peer::State::connecting || p->losing;
	});
	return handled;
}

void Endpoint::check_connect_timeouts()
{
	const auto limit = std::chrono::milliseconds(config().connect_timeout_ms);
	const auto now = std::chrono::steady_clock::now();
	for (auto& peer : peers) {
		if (peer->state == Peer::State::connecting && now - peer->connect_started > limit) {
			RCOLL_WARN(FI_LOG_EP_CTRL, "connection to %s timed out\n",
				   peer->address.to_string().c_str());
			peer->connect_error = FI_ETIMEDOUT;
			fail_peer(*peer, -FI_ETIMEDOUT);
		}
	}
}

} // namespace rcoll
