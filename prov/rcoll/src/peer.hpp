// What an endpoint keeps per peer: its core connection and the messages
// waiting for it (the per-peer term of the SRQ design: Sur et al. 2005).
#pragma once

#include "address.hpp"
#include "common.hpp"
#include "proto/fifo.hpp"
#include "proto/wire.hpp"
#include "transport/local.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace rcoll {

struct BufferRecord;

// Told once that a message left this process (the core completed its send)
// or never will (err). A message that carries one is never injected: only a
// completion says that the core let go of it.
struct SentHook {
	void (*fn)(void* owner, int err) = nullptr;
	void* owner = nullptr;
	explicit operator bool() const { return fn != nullptr; }
	void run(int err)
	{
		if (auto f = fn) {
			fn = nullptr;
			f(owner, err);
		}
	}
};

// A control message (CTS, FIN, READ_DONE, WRITE_DATA, DELIVERY_QUERY,
// DELIVERED, a join record, a collective's ARRIVAL) that found the transmit
// pool empty. It is kept by value and sent once a buffer frees up: a lost
// CTS or READ_DONE would leave both sides of a rendezvous waiting forever,
// so protocol messages never fail for want of a buffer. Their number is
// bounded by the operations in flight (each rendezvous has at most one
// pending, each collective write one ARRIVAL), and a peer's DELIVERED
// answers by one (Endpoint::on_delivery_query). They may overtake
// or be overtaken by the peer's buffered messages: none of them takes part
// in message matching or ordering.
struct QueuedControl {
	proto::MsgHeader header;
	std::vector<std::byte> body;
	SentHook sent;
};

// Injected messages (small sends, control messages, small collective
// writes) report no completion: the core may still hold them, unseen. A
// message posted with a completion proves, when it completes, that all
// posted before it on the connection left too (the core sends in order).
// Injection pauses while kWindow injected messages are unproven, so the
// next ones carry completions: that bounds what the core holds for a slow
// peer (tcp never refuses an inject), and tells close when all has left.
struct InjectLedger {
	static constexpr uint64_t kWindow = 64;
	uint64_t posted = 0; // messages injected so far
	uint64_t proven = 0; // of them, known to have left
	bool may_inject() const { return posted - proven < kWindow; }
	bool all_proven() const { return posted == proven; }
	void prove(uint64_t upto) { proven = std::max(proven, upto); }
};

struct Peer {
	enum class State { idle, connecting, connected, failed };
	uint32_t local_id = 0;  // our id for this connection: the peer puts it in src_conn
	uint32_t remote_id = 0; // the peer's id for it: we put it in our headers
	uint64_t key = 0;       // the peer endpoint's key (its address identity)
	// The secret the peer must put in every header it sends us (random,
	// chosen here, told only through this peer's handshakes), and the one
	// it chose for ours: a message names its connection by src_conn and
	// proves it by the token, since a shared receive context cannot say
	// which connection a message came in on.
	uint64_t rx_token = 0;
	uint64_t tx_token = 0; // 0 until a handshake with the peer
	EpAddress address{};   // core_len == 0 until the AV names it
	State state = State::idle;
	int connect_error = 0; // our latest connect attempt failed with it (injects report it)
	uint32_t failures =
		0; // times the peer failed: a rendezvous request from before cannot be served
	bool active = false;    // `conn` is our own connect (not an accepted one)
	FidPtr<fid_ep> conn;    // the connection in use
	FidPtr<fid_ep> losing;  // our connect that lost a simultaneous-connect race
	FidPtr<fid_ep> passive; // the accepted side of a connection to ourselves
	uint32_t eager_limit = 0;
	uint64_t host = 0; // the host identity its handshake named (a hint: see proto::Handshake)
	proto::Fifo<BufferRecord*> backlog;  // waiting for the connection or for core queue space
	proto::Fifo<QueuedControl> controls; // waiting for a transmit buffer
	std::chrono::steady_clock::time_point connect_started;
	// Silent-host detection (Endpoint::probe_silent_peers): a message
	// count, so the data path reads no clock; the scans turn it into a
	// coarse time of last arrival.
	uint64_t arrivals = 0;
	uint64_t arrivals_seen = 0;   // `arrivals` when a scan last looked
	uint64_t awaited_in_scan = 0; // the last scan that found an operation waiting on it
	bool watched = false;         // awaited at the previous scan too: quiet_since is valid
	std::chrono::steady_clock::time_point quiet_since; // last arrival or probe, as scans saw it
	InjectLedger injects;
	// DELIVERY_QUERY messages sent to it: the last one's number (never
	// reset; writes still waiting when a connection fails fail with it).
	uint64_t delivery_queries = 0;
	// A DELIVERED answer to it holds a transmit buffer (backlogged, or in
	// the core): later answers wait in `controls`, merged into one, so a
	// peer's queries hold at most one buffer.
	bool answer_held = false;
	// Bytes of its messages waiting for a receive (Unexpected::charged):
	// bounded by FI_RCOLL_UNEXPECTED_MAX.
	size_t unexpected_bytes = 0;
	// Messages to it holding transmit buffers (its backlog, and those the
	// core still sends): at most FI_RCOLL_BACKLOG_MAX take an application
	// send. `tx_left` counts those the core finished; a scan that finds it
	// unchanged since `stuck_since` for FI_RCOLL_BACKLOG_TIMEOUT_MS fails
	// the peer (it stopped reading).
	size_t tx_held = 0;
	uint64_t tx_left = 0;
	uint64_t tx_left_seen = 0;
	bool backlog_watched = false; // held at the last scan too: stuck_since is valid
	std::chrono::steady_clock::time_point stuck_since;
	// Made for a connection request from a key not in the AV: counted
	// against FI_RCOLL_UNKNOWN_PEERS_MAX, and reused once dead.
	bool stranger = false;
	// Its process, once a collective group found it on this host: one
	// pidfd for every group (transport/local.hpp).
	std::shared_ptr<local::ProcessWatch> process;
};

} // namespace rcoll
