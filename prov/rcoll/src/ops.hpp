// The records of operations an endpoint has with the core: bounce buffers,
// rendezvous sends and receives (Takagi et al. 2013), messages that arrived
// before their receive, and application RMA.
#pragma once

#include "common.hpp"
#include "core_rma.hpp"
#include "mr.hpp"
#include "peer.hpp"
#include "proto/match.hpp"
#include "proto/pool.hpp"
#include "proto/rendezvous.hpp"
#include "proto/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace rcoll {

struct Endpoint;
struct Peer;

// The fi_errno a rendezvous outcome completes with.
inline int outcome_errno(proto::Outcome o)
{
	switch (o) {
	case proto::Outcome::Success: return 0;
	case proto::Outcome::Truncated: return FI_ETRUNC;
	case proto::Outcome::PeerFailed: return FI_EIO;
	case proto::Outcome::TransferFailed: return FI_EIO;
	case proto::Outcome::ProtocolError: return FI_EOTHER;
	}
	return FI_EOTHER;
}

// What the core reported of an operation: fi_errno (0: success), the bytes
// received, and whether it was a remote write that consumed a posted
// receive (verbs).
struct CoreEvent {
	int err = 0;
	size_t len = 0;
	bool remote_write = false;
};

// A CoreContext::Finish for an operation's chunked transfer (ep.hpp).
template <class Op>
void finish_transfer(Endpoint& ep, void* owner, const CoreEvent& event);

// What rcoll hands the core as an operation context. The core may use the
// fi_context2 space (FI_CONTEXT/FI_CONTEXT2 modes), so it comes first;
// `finish` ends the rcoll record that owns it when the core reports it.
struct CoreContext {
	using Finish = void (*)(Endpoint& ep, void* owner, const CoreEvent& event);
	fi_context2 space{};
	Finish finish;
	void* owner;
	CoreContext(Finish f, void* o) : finish(f), owner(o) {}
	static CoreContext* of(void* op_context) { return static_cast<CoreContext*>(op_context); }
};

// What rcoll knows about one bounce buffer of its pools while the core has
// it: the buffer, and on the transmit side where it goes and for whom.
struct BufferRecord {
	CoreContext cc;
	proto::BounceBuffer* buffer = nullptr;
	// Transmit side.
	Peer* peer = nullptr;
	proto::MsgHeader header; // encoded at post time, when src_conn is known
	size_t len = 0;          // header + body/payload
	void* context = nullptr; // eager send: the application's, reported on completion
	uint64_t cq_flags = 0;
	bool report = false;  // write a CQ entry
	bool count = false;   // bump the send counter
	bool in_core = false; // posted to the core, completion pending
	bool held = false;    // counted in peer->tx_held until released
	bool answer = false;  // a DELIVERED answer: peer->answer_held until released
	uint64_t proves = 0;  // the peer's injects posted before it (InjectLedger)
	// The send may complete once rcoll holds the data (FI_INJECT_COMPLETE):
	// small ones are then injected into the core, which reports nothing.
	bool may_inject = true;
	SentHook sent;
	// A direct eager send: the buffer holds only the header, the payload
	// goes from the application's registered memory (a two-entry gather).
	const std::byte* payload = nullptr;
	void* payload_desc = nullptr;
	size_t payload_len = 0;

	explicit BufferRecord(CoreContext::Finish finish) : cc(finish, this) {}
	static void finish_receive(Endpoint& ep, void* owner, const CoreEvent& event);
	static void finish_send(Endpoint& ep, void* owner, const CoreEvent& event);
};

// One application send above the eager limit: the sender's half of a
// rendezvous.
struct SendOp {
	void* context = nullptr;
	uint64_t flags = 0; // FI_SEND | FI_MSG or FI_TAGGED
	bool report = true; // write a CQ entry (FI_SELECTIVE_COMPLETION)
	Peer* peer = nullptr;
	const std::byte* buf = nullptr;
	size_t len = 0;
	CoreRegistration own_mr; // when the application passed no descriptor
	uint32_t cookie = 0;
	proto::MsgHeader header{}; // tag, flags and CQ data for the RTS
	std::optional<proto::RendezvousSender> machine;
	ChunkedRma transfer;               // the write the machine asked for
	std::optional<proto::FinBody> fin; // to send once its last chunk is posted
	CoreContext transfer_cc{&finish_transfer<SendOp>, this};
};

// One posted application receive; once it matched a rendezvous request, also
// the receiving half of that rendezvous.
// The matching fields (source, tag, ignore, and the application's context,
// which fi_cancel names) live in the PostedReceive base.
struct RecvOp : proto::PostedReceive {
	uint64_t flags = 0; // FI_RECV | FI_MSG or FI_TAGGED
	bool report = true;
	std::byte* buf = nullptr;
	size_t len = 0;
	void* core_desc = nullptr;
	CoreRegistration own_mr;
	uint32_t id = 0; // slab id: carried in the CTS and the FIN
	// Once matched to a rendezvous request.
	Peer* peer = nullptr;
	proto::MsgHeader header{};
	std::optional<proto::RendezvousReceiver> machine;
	MemoryRegion* app_mr = nullptr;
	ChunkedRma transfer; // the read the machine asked for
	bool polling = false;
	CoreContext transfer_cc{&finish_transfer<RecvOp>, this};

	// FI_MULTI_RECV: the buffer stays posted (keep_posted) and each message
	// it takes gets a piece of it, a RecvOp of its own, until less than
	// FI_OPT_MIN_MULTI_RECV is left and it is released.
	bool released = false;    // a buffer that takes no more messages
	size_t used = 0;          // bytes of the buffer given to pieces
	uint32_t pieces = 0;      // pieces not yet completed
	RecvOp* buffer = nullptr; // a piece: the buffer it belongs to
};

// A message that arrived before its receive.
struct Unexpected {
	proto::UnexpectedMessage match;
	Peer* peer = nullptr;
	proto::MsgHeader header{};
	std::vector<std::byte> payload;    // eager data
	proto::RtsBody rts{};              // rendezvous request (header.opcode == Rts)
	uint32_t peer_failures = 0;        // peer->failures when it arrived
	size_t charged = 0;                // counted in peer->unexpected_bytes
	bool charged_to_strangers = false; // ... and in the strangers' budget
};

// One application RMA operation.
struct RmaOp {
	void* context = nullptr;
	uint64_t flags = 0;
	bool report = true;
	Peer* peer = nullptr;
	CoreRegistration own_mr;
	std::vector<std::byte> inject_copy; // FI_INJECT: the data, owned
	uint64_t data = 0;                  // fi_writedata's
	// FI_DELIVERY_COMPLETE write: completes when the target answers the
	// query (DELIVERY_QUERY) sent behind its last chunk, numbered here.
	bool delivery = false;
	uint64_t query_seq = 0; // 0 until asked
	// peer->failures when it began: a connection that failed meanwhile may
	// have lost what it wrote, and the rest must not go on the next one.
	uint32_t connection_failures = 0;
	ChunkedRma transfer;
	CoreContext transfer_cc{&finish_transfer<RmaOp>, this};
};

} // namespace rcoll
