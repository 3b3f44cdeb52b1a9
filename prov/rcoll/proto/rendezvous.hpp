// Rendezvous for messages above the eager limit, as pure state machines:
// the glue feeds events (a control message arrived, an RDMA operation
// completed, the peer failed) and executes the actions that come back. The
// machines touch no libfabric object; the only memory they touch is the slot
// byte of the receive buffer in POLL_LAST_BYTE mode.
//
// Protocols after Takagi et al., "Revisiting rendezvous protocols in the
// context of RDMA-capable host channel adapters and many-core processors"
// (EuroMPI 2013), adapted to a sender that always announces itself first:
//
//   the sender posts an RTS with the message length and its exposed buffer;
//   the receiver, once a receive matched, knows both lengths and picks
//
//   PUT (receiver-initiated, the paper's PUT): it sends a CTS with its
//     exposed buffer and the transfer length min(send, receive); the sender
//     RDMA-writes that many bytes and completes when its write completes.
//     The receiver detects the end of the write
//       FIN: by a FIN (reason Written) that the sender sends behind its last
//         write on the same connection; portable, the default (a core's
//         write immediate would name no sender: anybody could forge it);
//       POLL_LAST_BYTE: by polling the last byte of the TRANSFERRED length,
//         set beforehand to a random slot value; when the sender's own byte
//         there equals the slot (a collision, p = 1/256 for random data) the
//         write cannot be seen, so the sender follows it with a FIN. This
//         assumes the write's bytes land in order, which neither PCIe nor IB
//         promise: keep it an option.
//   GET (sender-initiated): it RDMA-reads min(send, receive) bytes from the
//     RTS buffer, completes when the read completes, and sends READ_DONE so
//     the sender can complete. The paper uses it when the receive accepts
//     any source, because its PUT sends the CTS before the sender is known;
//     here the RTS comes first, so path_for() keeps that choice as a policy
//     and the glue may pick either path for any receive.
//
// A receive shorter than the message completes as Truncated and reports
// both lengths (FI_ETRUNC). A receive of length zero for a non-empty message
// moves no data: the receiver answers READ_DONE at once. Empty messages
// never use rendezvous (they have no last byte and fit any eager limit);
// a rendezvous for length 0 is refused as a protocol violation.
//
// Ordering the glue must provide: the FIN goes out once the whole write is
// posted, on the same connection, and must not overtake its data
// (FI_ORDER_SAW; true of RC queue pairs and of tcp streams); when it splits
// a write, the FIN waits for the last part.
//
// Errors: every operation completes exactly once. Peer failure completes it
// with PeerFailed; a failed RDMA operation with TransferFailed (the glue
// treats the connection as broken and closes it, so the peer's side fails
// with PeerFailed). An event a state does not expect yields a Violation
// action (the glue logs it and shuts the connection down) and completes the
// operation with ProtocolError. While an RDMA operation of this side is in
// flight the NIC still owns the user buffer, so any failure only records the
// outcome and the completion waits for the RDMA operation's own completion
// (the core flushes it with an error when the connection goes down).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>

#include "proto/match.hpp"
#include "proto/wire.hpp"

namespace rcoll::proto {

// How the peer addresses a registered buffer (virtual address, 64-bit key).
struct RemoteBuffer {
	std::uint64_t addr = 0;
	std::uint64_t key = 0;
};

enum class Outcome : std::uint8_t {
	Success,
	Truncated,      // receive shorter than the message (FI_ETRUNC)
	PeerFailed,     // connection lost
	TransferFailed, // a local RDMA read or write completed with an error
	ProtocolError,  // the peer (or the glue) broke the protocol
};
const char* describe(Outcome outcome) noexcept;

namespace action {
// Header: opcode RTS, size = message_length; the glue adds tag, flags, cq_data.
struct SendRts {
	RtsBody body;
	std::uint64_t message_length = 0;
};
struct SendCts {
	CtsBody body;
};
struct SendReadDone {
	ReadDoneBody body;
};
// RDMA-write the first `length` bytes of the send buffer to `target`, then
// send `fin`, if any, once every part of the write is posted.
struct Write {
	std::uint64_t length = 0;
	RemoteBuffer target;
	std::optional<FinBody> fin;
};
// RDMA-read `length` bytes from `source` into the start of the receive buffer.
struct Read {
	std::uint64_t length = 0;
	RemoteBuffer source;
};
// The operation is over. Receiver: `transferred` bytes landed of a message
// of `message_length`. Sender: both are the message length.
struct Complete {
	Outcome outcome = Outcome::Success;
	std::uint64_t transferred = 0;
	std::uint64_t message_length = 0;
};
// An event this state does not expect; `what` is a static string to log.
struct Violation {
	const char* what = "";
};
} // namespace action

using Action = std::variant<action::SendRts, action::SendCts, action::SendReadDone, action::Write,
			    action::Read, action::Complete, action::Violation>;

// The actions of one event, to execute in order. Two at most: a READ_DONE
// plus the completion, a violation plus the completion.
class Actions {
public:
	static constexpr std::size_t kCapacity = 2;

	std::size_t size() const noexcept { return count_; }
	bool empty() const noexcept { return count_ == 0; }
	const Action* begin() const noexcept { return items_.data(); }
	const Action* end() const noexcept { return items_.data() + count_; }
	const Action& operator[](std::size_t i) const noexcept { return items_[i]; }

	// The first action of type T, or nullptr.
	template <class T>
	const T* find() const noexcept
	{
		for (const Action& a : *this)
			if (const T* p = std::get_if<T>(&a))
				return p;
		return nullptr;
	}

private:
	friend class RendezvousSender;
	friend class RendezvousReceiver;
	void push(const Action& action) noexcept;

	std::array<Action, kCapacity> items_{};
	std::size_t count_ = 0;
};

// The slot values of POLL_LAST_BYTE mode: SplitMix64 (Steele, Lea, Flood,
// "Fast splittable pseudorandom number generators", OOPSLA 2014). Not for
// secrecy, only so that the slot is unlikely to equal the data's last byte
// (Takagi et al. 2013: a constant slot collides with frequent values like 0).
class SlotRandom {
public:
	explicit SlotRandom(std::uint64_t seed) noexcept : state_(seed) {}
	std::uint8_t next_byte() noexcept;

private:
	std::uint64_t state_;
};

class RendezvousSender {
public:
	enum class State : std::uint8_t { Idle, AwaitingReply, Writing, Done };

	// `cookie` comes back in CTS and READ_DONE; `exposed` is how the peer
	// reads `payload` (registered for remote read).
	RendezvousSender(std::uint64_t cookie, std::span<const std::byte> payload,
			 RemoteBuffer exposed) noexcept;

	Actions start() noexcept;                                // Idle -> AwaitingReply: SendRts
	Actions on_cts(const CtsBody& cts) noexcept;             // -> Writing: Write (and its FIN)
	Actions on_read_done(const ReadDoneBody& done) noexcept; // -> Done: Complete
	Actions on_write_complete() noexcept;                    // Writing -> Done: Complete
	Actions on_write_failed() noexcept;                      // Writing -> Done: Complete
	Actions on_peer_failed() noexcept;

	State state() const noexcept { return state_; }
	bool done() const noexcept { return state_ == State::Done; }
	std::uint64_t cookie() const noexcept { return cookie_; }

private:
	Actions finish(Outcome outcome) noexcept;
	Actions unexpected(const char* what) noexcept;

	std::uint64_t cookie_;
	std::span<const std::byte> payload_;
	RemoteBuffer exposed_;
	State state_ = State::Idle;
	std::optional<Outcome> failure_; // recorded while the write is in flight
};

class RendezvousReceiver {
public:
	enum class State : std::uint8_t { Idle, AwaitingPut, Reading, Done };
	enum class Path : std::uint8_t { Put, Get };

	// `op_id` names this operation in CTS and FIN;
	// `exposed` is how the peer writes into `buffer` (registered for
	// remote write).
	RendezvousReceiver(std::uint32_t op_id, std::span<std::byte> buffer,
			   RemoteBuffer exposed) noexcept;

	// the choice of Takagi et al. 2013: PUT needs the sender named in advance, GET serves
	// receives from any source.
	static constexpr Path path_for(std::uint64_t receive_source) noexcept
	{
		return receive_source == kAnySource ? Path::Get : Path::Put;
	}

	// A matched RTS. PUT -> AwaitingPut: SendCts (POLL mode first writes a
	// slot value from `random` at the last transferred byte). GET -> Reading:
	// Read. Nothing to transfer -> Done: SendReadDone + Complete(Truncated).
	Actions on_rts(const RtsBody& rts, std::uint64_t message_length, Path path,
		       CompletionMode mode, SlotRandom& random) noexcept;
	Actions poll() noexcept;                     // PUT, POLL: -> Done once the slot changed
	Actions on_fin(const FinBody& fin) noexcept; // PUT, FIN or POLL collision: -> Done
	Actions on_read_complete() noexcept;         // GET: -> Done: SendReadDone + Complete
	Actions on_read_failed() noexcept;           // GET: -> Done: Complete
	Actions on_peer_failed() noexcept;

	State state() const noexcept { return state_; }
	bool done() const noexcept { return state_ == State::Done; }
	std::uint32_t op_id() const noexcept { return op_id_; }
	std::uint64_t transfer_length() const noexcept { return transfer_length_; }

private:
	action::Complete complete(Outcome outcome) noexcept; // -> Done
	Outcome transfer_outcome() const noexcept;           // Success or Truncated
	Actions finish(Outcome outcome) noexcept;
	Actions unexpected(const char* what) noexcept;
	std::uint8_t load_slot() const noexcept;

	std::uint32_t op_id_;
	std::span<std::byte> buffer_;
	RemoteBuffer exposed_;
	State state_ = State::Idle;
	CompletionMode mode_ = CompletionMode::Fin;
	std::uint8_t slot_value_ = 0;
	std::uint64_t sender_cookie_ = 0;
	std::uint64_t message_length_ = 0;
	std::uint64_t transfer_length_ = 0;
	std::optional<Outcome> failure_; // recorded while the read is in flight
};

} // namespace rcoll::proto
