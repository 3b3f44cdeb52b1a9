// fid_ep (FI_EP_RDM): the endpoint. Owns one core passive endpoint peers
// connect to, one core MSG endpoint per peer (connected on demand), ONE core
// shared receive context fed from a registered bounce-buffer pool
// (papers/sur2005: receive memory does not grow with peers), one core CQ and
// EQ, rcoll's tag matching and its rendezvous (papers/takagi2013).
#pragma once

#include "address.hpp"
#include "common.hpp"
#include "domain.hpp"
#include "mr.hpp"
#include "proto/fifo.hpp"
#include "proto/match.hpp"
#include "proto/pool.hpp"
#include "proto/rendezvous.hpp"
#include "proto/wire.hpp"
#include "slab.hpp"
#include "transport/local.hpp"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <random>
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
struct Endpoint;
struct EventQueue;

// What rcoll hands the core as an operation context: the core may use the
// fi_context2 space (FI_CONTEXT/FI_CONTEXT2 modes); `kind` and `owner` say
// which rcoll record it belongs to when the completion comes back.
struct CoreContext {
	enum class Kind : uint8_t { rx_buffer, tx_buffer, rma, rndv_write, rndv_read, coll_write };
	fi_context2 space{};
	Kind kind;
	void* owner;
	CoreContext(Kind k, void* o) : kind(k), owner(o) {}
};

struct Peer;
struct SendOp;

// What rcoll knows about one bounce buffer of its pools while the core has
// it: the buffer, and on the transmit side where it goes and for whom.
struct BufferRecord {
	CoreContext cc;
	proto::BounceBuffer* buffer = nullptr;
	// Transmit side.
	Peer* peer = nullptr;
	proto::MsgHeader header;   // encoded at post time, when src_conn is known
	size_t len = 0;            // header + body/payload
	void* context = nullptr;   // eager send: the application's, reported on completion
	uint64_t cq_flags = 0;
	bool report = false;       // write a CQ entry
	bool count = false;        // bump the send counter
	bool in_core = false;      // posted to the core, completion pending
	uint64_t proves = 0;       // the peer's injects posted before it (InjectLedger)
	// The send may complete once rcoll holds the data (FI_INJECT_COMPLETE):
	// small ones are then injected into the core, which reports nothing.
	bool may_inject = true;
	// A direct eager send: the buffer holds only the header, the payload
	// goes from the application's registered memory (a two-entry gather).
	const std::byte* payload = nullptr;
	void* payload_desc = nullptr;
	size_t payload_len = 0;
	explicit BufferRecord(CoreContext::Kind k) : cc(k, this) {}
};

// Registers pool chunks with the core domain.
class CoreRegistrar final : public proto::Registrar {
public:
	explicit CoreRegistrar(fid_domain* core) : core_(core) {}
	int register_region(void* addr, size_t length, proto::RegisteredRegion& out) noexcept override;
	void deregister_region(const proto::RegisteredRegion& region) noexcept override;

private:
	fid_domain* core_;
};

// A control message (CTS, FIN, READ_DONE, WRITE_DATA, a join record) that
// found the transmit pool empty. It is kept by value and sent once a buffer
// frees up: a lost CTS or READ_DONE would leave both sides of a rendezvous
// waiting forever, so protocol messages never fail for want of a buffer.
// Their number is bounded by the operations in flight (each has at most one
// pending). They may overtake or be overtaken by the peer's buffered
// messages: none of them takes part in message matching or ordering.
struct QueuedControl {
	proto::MsgHeader header;
	std::vector<std::byte> body;
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
	uint32_t local_id = 0;   // our id for this connection: the peer puts it in src_conn
	uint32_t remote_id = 0;  // the peer's id for it: we put it in our headers
	uint64_t key = 0;        // the peer endpoint's key (its address identity)
	EpAddress address{};     // core_len == 0 until the AV names it
	State state = State::idle;
	int connect_error = 0;   // our latest connect attempt failed with it (injects report it)
	uint32_t failures = 0;   // times the peer failed: a rendezvous request from before cannot be served
	bool active = false;     // `conn` is our own connect (not an accepted one)
	FidPtr<fid_ep> conn;     // the connection in use
	FidPtr<fid_ep> losing;   // our connect that lost a simultaneous-connect race
	FidPtr<fid_ep> passive;  // the accepted side of a connection to ourselves
	uint32_t eager_limit = 0;
	proto::Fifo<BufferRecord*> backlog; // waiting for the connection or for core queue space
	proto::Fifo<QueuedControl> controls; // waiting for a transmit buffer
	std::chrono::steady_clock::time_point connect_started;
	// Silent-host detection (Endpoint::probe_silent_peers): a message
	// count, so the data path reads no clock; the scans turn it into a
	// coarse time of last arrival.
	uint64_t arrivals = 0;
	uint64_t arrivals_seen = 0;       // `arrivals` when a scan last looked
	uint64_t awaited_in_scan = 0;     // the last scan that found an operation waiting on it
	bool watched = false;             // awaited at the previous scan too: quiet_since is valid
	std::chrono::steady_clock::time_point quiet_since; // last arrival or probe, as scans saw it
	InjectLedger injects;
	// Its process, once a collective group found it on this host: one
	// pidfd for every group (transport/local.hpp).
	std::shared_ptr<local::ProcessWatch> process;
};

// One application send above the eager limit (takagi2013 rendezvous).
struct SendOp {
	void* context = nullptr;
	uint64_t flags = 0;       // FI_SEND | FI_MSG or FI_TAGGED
	bool report = true;       // write a CQ entry (FI_SELECTIVE_COMPLETION)
	Peer* peer = nullptr;
	const std::byte* buf = nullptr;
	size_t len = 0;
	void* core_desc = nullptr;
	CoreRegistration own_mr;  // when the application passed no descriptor
	uint32_t cookie = 0;
	MemoryRegion* app_mr = nullptr;
	proto::MsgHeader header{}; // tag, flags and CQ data for the RTS
	std::optional<proto::RendezvousSender> machine;
	// The write the machine asked for, issued in chunks of at most rma_chunk.
	proto::action::Write write{};
	uint64_t written = 0, write_chunk = 0;
	bool write_in_flight = false, write_retry = false;
	CoreContext write_cc{CoreContext::Kind::rndv_write, this};
};

// One posted application receive; once it matched a rendezvous request, also
// the receiving half of that rendezvous.
// The matching fields (source, tag, ignore, and the application's context,
// which fi_cancel names) live in the PostedReceive base.
struct RecvOp : proto::PostedReceive {
	uint64_t flags = 0;       // FI_RECV | FI_MSG or FI_TAGGED
	bool report = true;
	std::byte* buf = nullptr;
	size_t len = 0;
	void* core_desc = nullptr;
	CoreRegistration own_mr;
	uint32_t id = 0;          // slab id: carried in the CTS and the immediate
	// Once matched to a rendezvous request.
	Peer* peer = nullptr;
	proto::MsgHeader header{};
	std::optional<proto::RendezvousReceiver> machine;
	MemoryRegion* app_mr = nullptr;
	proto::action::Read read{};
	uint64_t done_reading = 0, read_chunk = 0;
	bool read_in_flight = false, read_retry = false;
	bool polling = false;
	CoreContext read_cc{CoreContext::Kind::rndv_read, this};
};

// A message that arrived before its receive.
struct Unexpected {
	proto::UnexpectedMessage match;
	Peer* peer = nullptr;
	proto::MsgHeader header{};
	std::vector<std::byte> payload;   // eager data
	proto::RtsBody rts{};             // rendezvous request (header.opcode == Rts)
	uint32_t peer_failures = 0;       // peer->failures when it arrived
};

// One application RMA operation, issued in core operations of at most
// rma_chunk bytes, one after the other.
struct RmaOp {
	CoreContext cc{CoreContext::Kind::rma, this};
	bool write = false;
	void* context = nullptr;
	uint64_t flags = 0;
	bool report = true;
	Peer* peer = nullptr;
	std::byte* local = nullptr;
	void* core_desc = nullptr;
	CoreRegistration own_mr;
	std::vector<std::byte> inject_copy; // FI_INJECT: the data, owned
	uint64_t remote_addr = 0, key = 0, data = 0;
	size_t len = 0, done = 0, chunk = 0;
};

struct Endpoint {
	FidShell<fid_ep, Endpoint> shell;
	Domain* domain = nullptr;
	InfoPtr info;
	uint64_t caps = 0;
	uint64_t tx_op_flags = 0, rx_op_flags = 0;
	bool enabled = false;

	AddressVector* av = nullptr;
	CompletionQueue* tx_cq = nullptr;
	CompletionQueue* rx_cq = nullptr;
	bool tx_selective = false, rx_selective = false;
	Counter* send_cntr = nullptr;
	Counter* recv_cntr = nullptr;
	Counter* read_cntr = nullptr;
	Counter* write_cntr = nullptr;
	EventQueue* eq = nullptr;

	// Core objects; ~Endpoint closes connections before these.
	FidPtr<fid_eq> core_eq;
	FidPtr<fid_cq> core_cq;
	FidPtr<fid_ep> srx;
	FidPtr<fid_pep> pep;
	EpAddress address{};

	std::vector<std::unique_ptr<Peer>> peers; // index: local_id
	std::unordered_map<uint64_t, Peer*> peer_by_key;
	std::vector<Peer*> unkeyed_peers;         // connecting to a listener whose key is not known yet
	std::vector<FidPtr<fid_ep>> graveyard;    // connections to close after this progress round

	std::unique_ptr<CoreRegistrar> registrar;
	std::unique_ptr<proto::ReceivePool> rx_pool;
	std::unique_ptr<proto::TransmitPool> tx_pool;
	std::deque<BufferRecord> rx_records, tx_records; // by buffer index; stable addresses
	size_t eager_limit = 0;
	size_t core_inject_size = 0; // the core's tx_attr: largest fi_inject
	size_t core_iov_limit = 1;   // ... and most gather entries of a send

	proto::MatchQueue msg_queue, tagged_queue;
	std::vector<std::unique_ptr<Unexpected>> spare_unexpected;
	Slab<SendOp> sends;
	Slab<RecvOp> recvs;
	std::vector<uint32_t> polling;            // receives in POLL_LAST_BYTE mode
	std::vector<std::unique_ptr<RmaOp>> rma_ops;
	proto::SlotRandom slot_random{0};
	uint64_t progress_calls = 0;
	size_t backlogged = 0;  // > 0: some peer may hold queued sends
	size_t stalled = 0;     // > 0: some rendezvous transfer waits to be retried
	bool cm_busy = false;   // a connection is being set up: read the core EQ often
	uint64_t probe_scans = 0;
	std::chrono::steady_clock::time_point next_probe_scan;
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

	// Drives the core: connection events, completions, refills, retries.
	// Returns the number of events handled. Caller holds the domain lock.
	int progress();

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
	Peer* peer_by_local_id(uint32_t id);
	Peer& add_peer(uint64_t key, const EpAddress* address);
	Peer& peer_at(const EpAddress& address);
	void learn_key(Peer& peer, uint64_t key);
	int connect(Peer& peer);
	fid_ep* open_core_ep(fi_info* core_info, Peer& peer);
	void handle_cm_event(uint32_t event, const fi_eq_cm_entry& entry, size_t len);
	void handle_cm_error(const fi_eq_err_entry& err);
	int poll_cm();
	void check_connect_timeouts();
	void probe_silent_peers();
	void send_probe(Peer& peer);
	uint64_t mark_awaited_peers();
	void fail_peer(Peer& peer, int err);
	void fail_receive(RecvOp& op);
	bool failed_source(uint64_t key) const;
	void schedule_failure(Peer& peer, int err);
	void settle_failures();
	void complete_orphans();

	// Data path (xfer.cpp).
	BufferRecord* get_tx_buffer();
	void release_tx_buffer(BufferRecord* r);
	void refill_rx();
	void release_rx(BufferRecord* r);
	ssize_t post_tx(BufferRecord* r);
	ssize_t transmit(Peer& peer, BufferRecord* r);
	void flush_backlog(Peer& peer);
	ssize_t send_buffered(Peer& peer, const proto::MsgHeader& header, const void* body,
			      size_t body_len);
	ssize_t send_control(Peer& peer, const proto::MsgHeader& header, const void* body,
			     size_t body_len);
	bool tx_buffer_available() const;
	ssize_t run_send_actions(SendOp& op, const proto::Actions& actions);
	void run_recv_actions(RecvOp& op, const proto::Actions& actions);
	void issue_write(SendOp& op);
	void on_write_done(SendOp& op, int err);
	void issue_read(RecvOp& op);
	void on_read_finished(RecvOp& op, int err);
	ssize_t issue_rma(RmaOp& op);
	void on_rma_done(RmaOp& op, int err);
	void retry_stalled();
	int read_core_cq(int rounds);
	void on_core_completion(const fi_cq_data_entry& e);
	void on_core_error(const fi_cq_err_entry& e);
	void on_receive(BufferRecord* r, size_t len);
	void deliver(Peer& peer, const proto::ParsedMessage& m);
	void on_remote_write(uint64_t data);
	void poll_last_bytes();
	void match_unexpected(RecvOp& op, Unexpected* u);
	Unexpected* new_unexpected();
	void drop_unexpected(Unexpected* u);
	void discard_unexpected(Unexpected* u);
	void complete_eager(RecvOp& op, Peer* peer, const proto::MsgHeader& h,
			    const std::byte* data, size_t size);
	void start_rendezvous_recv(RecvOp& op, Peer& peer, const proto::MsgHeader& h,
				   const proto::RtsBody& rts);
	void report_tx(void* context, uint64_t flags, size_t len, int err, bool report,
		       Counter* cntr);
	void report_rx(void* context, uint64_t flags, size_t len, void* buf, uint64_t data,
		       uint64_t tag, fi_addr_t src, int err, size_t olen, bool report);
	fi_addr_t source_of(Peer* peer) const;
	proto::MatchQueue& queue_for(uint64_t flags)
	{
		return (flags & FI_TAGGED) ? tagged_queue : msg_queue;
	}
};

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
