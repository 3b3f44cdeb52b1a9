// fid_ep (FI_EP_RDM): the endpoint. Owns one core passive endpoint peers
// connect to, one core MSG endpoint per peer (connected on demand), ONE core
// shared receive context fed from a registered bounce-buffer pool (Sur et
// al. 2005: receive memory does not grow with peers), one core CQ and EQ,
// rcoll's tag matching and its rendezvous (Takagi et al. 2013).
//
// Its parts: what the application bound and where completions go
// (AppBindings), the core objects it owns (CoreObjects), the peers
// (PeerTable), the receiving and the sending side (ReceiveSide,
// TransmitSide, each with its bounce buffers), and the pace of progress
// (ProgressPace).
// Its methods live with their job: connections (conn.cpp), sending
// (send.cpp), core messages (transmit.cpp), receiving (recv.cpp), RMA
// (rma.cpp), progress and core-completion dispatch (progress.cpp), peer
// failure (peer_failure.cpp), completions to the application
// (completion.cpp).
#pragma once

#include "address.hpp"
#include "data_sides.hpp"
#include "coarse_clock.hpp"
#include "common.hpp"
#include "domain.hpp"
#include "mr.hpp"
#include "ops.hpp"
#include "peer.hpp"
#include "peer_table.hpp"
#include "proto/rendezvous.hpp"
#include "proto/wire.hpp"
#include "slab.hpp"
#include "wait.hpp"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace rcoll {

// Internal operation flag of the fi_inject family, which reports no
// completion. An application's FI_INJECT on fi_sendmsg and the like only
// makes the buffer reusable at once: that operation still completes.
inline constexpr uint64_t kNoCompletion = 1ULL << 61;

struct AddressVector;
class Collectives;
struct CompletionQueue;
struct Counter;
struct Domain;
struct EventQueue;

// A receive-side completion for the application's CQ and counter.
struct RxCompletion {
	void* context = nullptr;
	uint64_t flags = 0;
	size_t len = 0;
	void* buf = nullptr;
	uint64_t data = 0; // reported with FI_REMOTE_CQ_DATA only
	uint64_t tag = 0;
	fi_addr_t src = FI_ADDR_NOTAVAIL;
	int err = 0;        // fi_errno; an error is always reported
	size_t olen = 0;    // FI_ETRUNC: the bytes that did not fit
	bool report = true; // write a CQ entry on success (FI_SELECTIVE_COMPLETION)
};

// What the application bound to the endpoint, and where completions go
// (completion.cpp).
struct AppBindings {
	AddressVector* av = nullptr;
	CompletionQueue* tx_cq = nullptr;
	CompletionQueue* rx_cq = nullptr;
	bool tx_selective = false, rx_selective = false;
	Counter* send_cntr = nullptr;
	Counter* recv_cntr = nullptr;
	Counter* read_cntr = nullptr;
	Counter* write_cntr = nullptr;
	EventQueue* eq = nullptr;

	void report_tx(void* context, uint64_t flags, size_t len, int err, bool report,
		       Counter* cntr);
	// The next report_tx cannot fail for memory: std::bad_alloc comes
	// from here instead, before a completion is taken from where it waits.
	void make_room_tx();
	void report_rx(const RxCompletion& c);
	// The application's address of a peer, when its AV holds one.
	fi_addr_t source_of(const Peer* peer) const;
};

// The core objects the endpoint owns besides its connections: its event
// queue, completion queue, shared receive context and listener, and the
// registrations of its pools. ~Endpoint closes the connections first.
struct CoreObjects {
	FidPtr<fid_eq> eq;
	FidPtr<fid_cq> cq;
	FidPtr<fid_ep> srx;
	FidPtr<fid_pep> pep;
	std::unique_ptr<CoreRegistrar> registrar;
};

// How progress paces its work on the core (progress.cpp, peer_failure.cpp).
struct ProgressPace {
	uint64_t core_rounds = 0; // progress calls that drove the core
	// While only collectives among members on this host are waited for,
	// the core is read at most once per FI_RCOLL_CORE_POLL_US (core_due()).
	bool core_deferred = false;
	uint64_t deferred_calls = 0;
	CoarseClock::time_point next_core_round;
	size_t stalled = 0;       // > 0: some rendezvous transfer waits to be retried
	bool cm_busy = false;     // a connection is being set up: read the core EQ often
	bool coll_posted = false; // collectives posted core sends in this progress call
	uint64_t probe_scans = 0;
	std::chrono::steady_clock::time_point next_probe_scan;
};

struct Endpoint {
	FidShell<fid_ep, Endpoint> shell;
	Domain* domain = nullptr;
	InfoPtr info;
	uint64_t caps = 0;
	uint64_t tx_op_flags = 0, rx_op_flags = 0;
	bool enabled = false;

	AppBindings app;
	CoreObjects core;
	EpAddress address{};
	uint64_t host = 0; // local::host_identity(), told to peers in handshakes
	// Held while more connected peers run on this host than this process
	// may use CPUs (see yield_if_crowded).
	std::optional<CrowdedHost> crowded;

	PeerTable peers;
	std::vector<FidPtr<fid_ep>> graveyard; // connections to close after this progress round

	ReceiveSide rx;
	TransmitSide tx;
	size_t eager_limit = 0;    // of our bounce buffers: told to peers
	size_t min_multi_recv = 0; // FI_OPT_MIN_MULTI_RECV
	std::vector<std::unique_ptr<RmaOp>> rma_ops;
	proto::SlotRandom slot_random{0};
	ProgressPace pace;
	std::unique_ptr<Collectives> coll; // with FI_COLLECTIVE

	static int open(Domain* domain, fi_info* info, fid_ep** out, void* context);
	int enable();
	~Endpoint();

	// Peers to fail once no operation is in the middle of its actions: a
	// protocol violation, a control message the core refused. The
	// connection is remembered so a newer one is not failed by mistake.
	struct PendingFailure {
		Peer* peer;
		fid_ep* conn;
		int err;
	};
	std::vector<PendingFailure> failing;

	// Transmit operations that may still start before tx_attr->size are
	// outstanding: eager sends and control messages (each holds a bounce
	// buffer), rendezvous sends and RMA operations.
	size_t tx_room() const
	{
		const size_t used = tx.buffers->in_use() + tx.sends.live() + rma_ops.size();
		return used < tx.size ? tx.size - used : 0;
	}

	// Application operations (caller holds the domain lock).
	ssize_t send(const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag,
		     uint64_t data, uint64_t flags, void* context);
	ssize_t recv(void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
		     uint64_t ignore, uint64_t flags, void* context);
	ssize_t rma(bool write, const void* buf, size_t len, void* desc, fi_addr_t dest,
		    uint64_t addr, uint64_t key, uint64_t data, uint64_t flags, void* context);
	ssize_t cancel(void* context);

	// Connections (conn.cpp).
	// The peer behind an address, connecting to it if needed. For an inject
	// (no completion to wait for), -FI_EAGAIN until the message can go to
	// the core at once, or the error of the latest failed connect.
	Peer* peer_for(fi_addr_t addr, int& err, bool inject = false);
	void learn_key(Peer& peer, uint64_t key);
	int connect(Peer& peer);
	fid_ep* open_core_ep(fi_info* core_info, Peer& peer);
	void handle_cm_event(uint32_t event, const fi_eq_cm_entry& entry, size_t len);
	void handle_cm_error(const fi_eq_err_entry& err);
	void count_peers_on_host();
	int poll_cm();
	// A peer for a connection request from a key no peer has; nullptr when
	// FI_RCOLL_UNKNOWN_PEERS_MAX strangers are about already.
	Peer* admit_stranger(uint64_t key);
	bool reusable(const Peer& peer);

	// Core messages through bounce buffers (transmit.cpp).
	ssize_t post_tx(BufferRecord* r);
	ssize_t transmit(Peer& peer, BufferRecord* r);
	void flush_backlog(Peer& peer);
	// A message's bytes after the header: its body, then `tail` (an
	// arrival's inline payload).
	// `sent` runs once the message left, if the call returned 0.
	ssize_t send_buffered(Peer& peer, const proto::MsgHeader& header, const void* body,
			      size_t body_len, std::span<const std::byte> tail = {},
			      SentHook sent = {});
	ssize_t send_control(Peer& peer, const proto::MsgHeader& header, const void* body,
			     size_t body_len, std::span<const std::byte> tail = {},
			     SentHook sent = {});
	// Behind the peer's other queued control messages, taking no buffer.
	void queue_control(Peer& peer, const proto::MsgHeader& header, const void* body,
			   size_t body_len, std::span<const std::byte> tail = {},
			   SentHook sent = {});
	template <class Body>
	ssize_t send_control(Peer& peer, const proto::MsgHeader& header, const Body& body,
			     std::span<const std::byte> tail = {}, SentHook sent = {})
	{
		std::byte bytes[Body::kWireSize];
		proto::encode_body(body, bytes);
		return send_control(peer, header, bytes, sizeof(bytes), tail, sent);
	}
	template <class Body>
	void queue_control(Peer& peer, const proto::MsgHeader& header, const Body& body)
	{
		std::byte bytes[Body::kWireSize];
		proto::encode_body(body, bytes);
		queue_control(peer, header, bytes, sizeof(bytes));
	}

	// Sending: eager, and the rendezvous sender (send.cpp).
	ssize_t run_send_actions(SendOp& op, const proto::Actions& actions);
	void issue_chunk(SendOp& op);
	void on_chunk_done(SendOp& op, int err);
	void on_cts(Peer& peer, const proto::CtsBody& cts);
	void on_read_done(Peer& peer, const proto::ReadDoneBody& done);

	// Receiving: posting, matching, unexpected messages, the rendezvous
	// receiver (recv.cpp).
	void refill_rx();
	void deliver(Peer& peer, const proto::ParsedMessage& m);
	void match_unexpected(RecvOp& op, Unexpected* u);
	Unexpected* new_unexpected();
	void drop_unexpected(Unexpected* u);
	void discard_unexpected(Unexpected* u);
	void complete_eager(RecvOp& op, Peer* peer, const proto::MsgHeader& h,
			    const std::byte* data, size_t size);
	void start_rendezvous_recv(RecvOp& op, Peer& peer, const proto::MsgHeader& h,
				   const proto::RtsBody& rts);
	void run_recv_actions(RecvOp& op, const proto::Actions& actions);
	void issue_chunk(RecvOp& op);
	void on_chunk_done(RecvOp& op, int err);
	void on_fin(Peer& peer, const proto::FinBody& fin);
	void poll_last_bytes();
	bool failed_source(uint64_t key) const;
	// A posted receive ends without data, with `err` (FI_EIO, FI_ECANCELED).
	void end_receive(RecvOp& op, int err);
	// A posted receive for one source that failed ends with FI_EIO.
	void end_if_source_failed(RecvOp& op);
	// A receive's last completion: reported, and the record freed.
	void finish_recv(RecvOp& op, RxCompletion c);

	// Multi-receive buffers (multi_recv.cpp).
	ssize_t post_multi_recv(RecvOp& buffer);
	// The receive a message of `size` bytes from `peer` goes to: `op`
	// itself, or a piece of it if it is a multi-receive buffer.
	RecvOp* receive_for(RecvOp& op, Peer& peer, uint64_t size);

	// RMA (rma.cpp).
	void issue_chunk(RmaOp& op);
	void on_chunk_done(RmaOp& op, int err);
	void complete_rma(RmaOp& op, int err);
	void on_delivery_query(Peer& peer, const proto::DeliveryQueryBody& query);
	void on_delivered(Peer& peer, const proto::DeliveredBody& answer);

	// Progress and dispatch of what the core reports (progress.cpp).
	// Drives the core: connection events, completions, refills, retries.
	// Returns the number of events handled. Caller holds the domain lock.
	int progress();
	bool core_due();
	int read_core_cq(int rounds);
	// Runs `collectives` (what drives collective work), and again when
	// they posted core sends and one read of the core's queue found
	// completions. A collective write completes once it and its arrival
	// left (CollTransport::part_done), which the core reports at once when
	// the connection took them: the operation then ends in this call, not
	// in the next. Returns the core completions that read handled.
	template <class F>
	int run_collectives(F&& collectives)
	{
		pace.coll_posted = false;
		collectives();
		if (!pace.coll_posted)
			return 0;
		const int more = read_core_cq(8);
		if (more)
			collectives();
		return more;
	}
	void on_core_completion(const fi_cq_data_entry& e);
	void on_core_error(const fi_cq_err_entry& e);
	void on_receive(BufferRecord* r, size_t len);
	void on_remote_write(uint64_t data);
	ssize_t post_chunk(Peer& peer, ChunkedRma& transfer, CoreContext& cc);
	void retry_stalled();

	// Peer failure: detection and what follows (peer_failure.cpp).
	void check_connect_timeouts();
	void check_backlogs();
	void probe_silent_peers();
	void send_probe(Peer& peer);
	uint64_t mark_awaited_peers();
	void fail_peer(Peer& peer, int err);
	// A core operation with `peer` failed: so does its connection.
	void fail_connection_of(Peer* peer, int err);
	void schedule_failure(Peer& peer, int err);
	// Failures scheduled, or connections to close, that settle_failures()
	// has yet to handle.
	bool failures_pending() const { return !failing.empty() || !graveyard.empty(); }
	void settle_failures();
	void complete_orphans();
};

// The core finished a chunk of an operation's transfer (err == 0) or failed
// it; a failure also ends the peer's connection.
template <class Op>
void finish_transfer(Endpoint& ep, void* owner, const CoreEvent& event)
{
	auto& op = *static_cast<Op*>(owner);
	Peer* peer = op.peer; // op may be gone after on_chunk_done
	ep.on_chunk_done(op, event.err);
	if (event.err)
		ep.fail_connection_of(peer, event.err);
}

// Runs an application operation on the endpoint behind `f`, under the
// domain lock, behind the noexcept boundary.
template <class F>
ssize_t with_ep(fid_ep* f, F&& body)
{
	return guarded([&]() -> ssize_t {
		Endpoint* ep = owner_of<Endpoint>(f);
		std::lock_guard guard(ep->domain->lock);
		return body(*ep);
	});
}

} // namespace rcoll
