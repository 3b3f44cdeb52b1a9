// Every rcoll wire format in one place: the header in front of each core
// message, the control-message bodies and the connection handshake blobs.
// rcoll sends no immediate data with RDMA writes: a core's completion for
// one names no connection (and a write of no bytes passes the core's key
// check), so anybody connected could forge it. What a write did is said by
// a message behind it on the same connection, which the token binds.
//
// Rules: fixed-width fields at fixed offsets, little-endian, copied with
// memcpy (never a struct overlaid on a receive buffer); every size is a
// static_assert; nothing read from the network is used before
// validate_message()/check_handshake() accepted it. Reserved bytes must be
// zero so a later version can give them a meaning.
#pragma once

#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <variant>

namespace rcoll::proto {

inline constexpr std::uint8_t kProtocolVersion = 6;

namespace detail {

template <std::unsigned_integral T>
inline void store_le(std::byte* out, T value) noexcept
{
	if constexpr (std::endian::native == std::endian::little) {
		std::memcpy(out, &value, sizeof value);
	} else {
		for (std::size_t i = 0; i < sizeof value; ++i)
			out[i] = static_cast<std::byte>(value >> (8 * i));
	}
}

template <std::unsigned_integral T>
inline T load_le(const std::byte* in) noexcept
{
	T value{};
	if constexpr (std::endian::native == std::endian::little) {
		std::memcpy(&value, in, sizeof value);
	} else {
		for (std::size_t i = 0; i < sizeof value; ++i)
			value |= static_cast<T>(std::to_integer<unsigned>(in[i])) << (8 * i);
	}
	return value;
}

} // namespace detail

// ---------------------------------------------------------------------------
// Outcome of every check in this header.

enum class WireStatus : std::uint8_t {
	Ok,
	TooShort,        // fewer bytes than the fixed part needs
	BadMagic,        // handshake does not start with kHandshakeMagic
	BadVersion,      // protocol version differs from kProtocolVersion
	BadKind,         // handshake is not the kind (request/accept) expected
	BadOpcode,       // opcode outside Opcode
	BadFlags,        // unknown flag bits, or flags on a control message
	ReservedNotZero, // a reserved byte is set
	BadConnection,   // src_conn not below Limits::connection_count
	BadBodyLength,   // message length does not fit the opcode's body
	BadSize,         // a length field is zero where it cannot be, or too large
	EagerTooLarge,   // eager payload above Limits::eager_limit
	BadField,        // a field outside its defined values (mode, reason, id)
	LimitOutOfRange, // handshake limit outside [kMinEagerLimit, kMaxEagerLimit]
};

// Short, stable text for logs.
const char* describe(WireStatus status) noexcept;

// ---------------------------------------------------------------------------
// Message header: in front of every untagged core message rcoll sends.
//
//   off size field
//     0    1 version
//     1    1 opcode
//     2    1 flags
//     3    1 reserved (0)
//     4    4 src_conn  id the RECEIVER gave this connection in the handshake
//     8    8 tag       TAGGED only, else 0
//    16    8 cq_data   REMOTE_CQ_DATA only, else 0 (8 bytes on every core:
//                      rcoll carries it itself, not in the core's immediate)
//    24    8 size      EAGER: payload length; RTS: whole message length;
//                      ARRIVAL: inline payload length; every other opcode: 0
//    32    8 token     the random token the RECEIVER gave this connection in
//                      the handshake: a message names its connection by
//                      src_conn and proves it came in on it by the token
//                      (shared receive completions name no connection)
//
// EAGER and RTS carry a user message and may set both flags. WRITE_DATA is
// header only and sets exactly REMOTE_CQ_DATA. CTS, FIN, READ_DONE and
// ARRIVAL set no flag and carry their body (ARRIVAL, then its inline
// payload). PROBE is header only and sets no flag. DELIVERY_QUERY and
// DELIVERED set no flag and carry their body.

enum class Opcode : std::uint8_t {
	Eager = 1,     // payload follows the header
	Rts = 2,       // sender: "my buffer is here" (RtsBody)
	Cts = 3,       // receiver, PUT: "write into mine" (CtsBody)
	Fin = 4,       // sender, PUT: behind its last write, the write is done (FinBody)
	ReadDone = 5,  // receiver: finished with the sender's buffer (ReadDoneBody)
	WriteData = 6, // RMA initiator, right after the RDMA write of an
	// fi_writedata on the same connection (so it arrives after
	// the data): cq_data is the application's remote CQ data,
	// which the core's 4-byte immediate cannot carry
	Probe = 7,         // either side, while it waits on a silent peer: gives the
			   // peer's kernel (TCP ACK) or HCA (RC ACK) something to
			   // acknowledge, so a dead host fails the connection. The
			   // receiver only counts it as an arrival.
	Arrival = 8,       // collective member: an arrival at the target's group
			   // (ArrivalBody), behind the RDMA write it announces, or
			   // carrying that write's bytes itself
	DeliveryQuery = 9, // RMA initiator, behind the last write of an
			   // FI_DELIVERY_COMPLETE operation on the same
			   // connection: "answer once you have read this"
			   // (DeliveryBody)
	Delivered = 10,    // its target: every query up to the number in the
			   // body has been read, so the writes ahead of them on
			   // the connection have landed (DeliveryBody)
};
inline constexpr std::uint8_t kMinOpcode = 1;
inline constexpr std::uint8_t kMaxOpcode = 10;

enum HeaderFlags : std::uint8_t {
	kFlagTagged = 1u << 0,
	kFlagRemoteCqData = 1u << 1,
	// rcoll's own traffic (collective group joins): an eager tagged
	// message matched in a queue the application never sees.
	kFlagCollective = 1u << 2,
};
inline constexpr std::uint8_t kKnownHeaderFlags = kFlagTagged | kFlagRemoteCqData | kFlagCollective;

struct MsgHeader {
	static constexpr std::size_t kWireSize = 40;

	std::uint8_t version = kProtocolVersion;
	Opcode opcode = Opcode::Eager;
	std::uint8_t flags = 0;
	std::uint32_t src_conn = 0;
	std::uint64_t tag = 0;
	std::uint64_t cq_data = 0;
	std::uint64_t size = 0;
	std::uint64_t token = 0;
};
inline constexpr std::size_t kHeaderSize = MsgHeader::kWireSize;

// ---------------------------------------------------------------------------
// Bodies, following the header directly.

// RTS: the sender's whole buffer, registered and exposed for an RDMA read.
//   0 sender_cookie u64 | 8 addr u64 | 16 key u64
struct RtsBody {
	static constexpr std::size_t kWireSize = 24;
	static constexpr Opcode kOpcode = Opcode::Rts;

	std::uint64_t sender_cookie = 0; // echoed in CTS / READ_DONE
	std::uint64_t addr = 0;          // virtual address (FI_MR_VIRT_ADDR)
	std::uint64_t key = 0;           // 64-bit provider key
};

// How the receiver of a PUT detects that the data has landed.
enum class CompletionMode : std::uint8_t {
	Fin = 1,          // a FIN (reason Written) follows the last write
	PollLastByte = 2, // the receiver polls the slot byte (Takagi et al. 2013, PUT)
};

// CTS: the receiver's buffer for the sender's RDMA write.
//   0 sender_cookie u64 | 8 receiver_op_id u32 | 12 slot_value u8 |
//  13 mode u8 | 14 reserved u16 | 16 addr u64 | 24 key u64 |
//  32 transfer_length u64
struct CtsBody {
	static constexpr std::size_t kWireSize = 40;
	static constexpr Opcode kOpcode = Opcode::Cts;

	std::uint64_t sender_cookie = 0;
	std::uint32_t receiver_op_id = 0; // echoed in the FIN
	std::uint8_t slot_value = 0;      // PollLastByte only, else 0
	CompletionMode mode = CompletionMode::Fin;
	std::uint64_t addr = 0;
	std::uint64_t key = 0;
	std::uint64_t transfer_length = 0; // min(send length, receive length) > 0
};

enum class FinReason : std::uint8_t {
	// POLL_LAST_BYTE: the sender's byte at transfer_length - 1 equals the
	// slot value, so the receiver's poll cannot see the write land
	// (Takagi et al. 2013, PS2).
	Collision = 1,
	// FIN mode: the write is done; it came first on this connection, so
	// its bytes have landed when this FIN is read.
	Written = 2,
};

// FIN:  0 receiver_op_id u32 | 4 reason u8 | 5 reserved (3) | 8 sender_length u64
struct FinBody {
	static constexpr std::size_t kWireSize = 16;
	static constexpr Opcode kOpcode = Opcode::Fin;

	std::uint32_t receiver_op_id = 0;
	FinReason reason = FinReason::Collision;
	std::uint64_t sender_length = 0; // checked against the RTS
};

// READ_DONE: 0 sender_cookie u64
struct ReadDoneBody {
	static constexpr std::size_t kWireSize = 8;
	static constexpr Opcode kOpcode = Opcode::ReadDone;

	std::uint64_t sender_cookie = 0;
};

// DELIVERY_QUERY and DELIVERED: 0 sequence u64, the query's number, counted
// from 1 by the initiator for each peer. A target answers with the number of
// the latest query it read; one answer covers every query before it.
template <Opcode Op>
struct DeliveryBody {
	static constexpr std::size_t kWireSize = 8;
	static constexpr Opcode kOpcode = Op;

	std::uint64_t sequence = 0;
};
using DeliveryQueryBody = DeliveryBody<Opcode::DeliveryQuery>;
using DeliveredBody = DeliveryBody<Opcode::Delivered>;

// ARRIVAL: 0 slot u32 | 4 counter u32 | 8 rank u32 | 12 reserved u32 |
//  16 offset u64, then header.size bytes for the target's scratch at
// `offset` (none: an RDMA write ahead of it on the connection placed the
// data).
inline constexpr std::uint32_t kMaxCollectiveSlots = 1u << 10;
inline constexpr std::uint32_t kMaxArrivalCounters = 1u << 18;
struct ArrivalBody {
	static constexpr std::size_t kWireSize = 24;
	static constexpr Opcode kOpcode = Opcode::Arrival;

	std::uint32_t slot = 0;    // the TARGET's slot for the group
	std::uint32_t counter = 0; // the engine's arrival counter
	std::uint32_t rank = 0;    // the sender's rank: its connection must be that member's
	std::uint64_t offset = 0;  // where the inline payload goes in the scratch
};

template <class T>
concept WireBody = std::same_as<T, RtsBody> || std::same_as<T, CtsBody> ||
	std::same_as<T, FinBody> || std::same_as<T, ReadDoneBody> || std::same_as<T, ArrivalBody> ||
	std::same_as<T, DeliveryQueryBody> || std::same_as<T, DeliveredBody>;

// A bounce buffer holds one message: the header, the largest body that
// travels with a payload (an arrival's) and eager_limit payload bytes, so
// an arrival carries as many bytes inline as an eager message does (a
// broadcast of eager_limit bytes is one message, not a write and its
// arrival).
inline constexpr std::size_t kBounceOverhead = kHeaderSize + ArrivalBody::kWireSize;

// Encoders write exactly kWireSize bytes; `out` needs no alignment.
void encode_header(const MsgHeader& header, void* out) noexcept;
void encode_body(const RtsBody& body, void* out) noexcept;
void encode_body(const CtsBody& body, void* out) noexcept;
void encode_body(const FinBody& body, void* out) noexcept;
void encode_body(const ReadDoneBody& body, void* out) noexcept;
void encode_body(const ArrivalBody& body, void* out) noexcept;
void encode_body(const DeliveryQueryBody& body, void* out) noexcept;
void encode_body(const DeliveredBody& body, void* out) noexcept;

// Header + body of one control message (RTS, CTS, FIN, READ_DONE,
// DELIVERY_QUERY, DELIVERED). Returns
// the bytes written, or 0 (nothing written) when `capacity` is too small or
// header.opcode is not the body's opcode.
template <WireBody Body>
std::size_t encode_message(void* out, std::size_t capacity, const MsgHeader& header,
			   const Body& body) noexcept
{
	constexpr std::size_t total = kHeaderSize + Body::kWireSize;
	if (out == nullptr || capacity < total || header.opcode != Body::kOpcode)
		return 0;
	encode_header(header, out);
	encode_body(body, static_cast<std::byte*>(out) + kHeaderSize);
	return total;
}

// The largest control message; bounce buffers must hold at least this.
inline constexpr std::size_t kMaxControlMessageSize = kHeaderSize + CtsBody::kWireSize;

// ---------------------------------------------------------------------------
// Validation of a received buffer.

struct Limits {
	std::uint32_t eager_limit = 0;      // largest eager payload accepted
	std::uint32_t connection_count = 0; // src_conn must be below this
	std::uint64_t max_message_size = 0; // RTS/CTS/FIN lengths above it are refused
};

struct ParsedMessage {
	MsgHeader header;
	// EAGER and ARRIVAL: the payload inside the caller's buffer
	// (header.size bytes).
	std::span<const std::byte> payload;
	// The decoded body for RTS, CTS, FIN, READ_DONE, ARRIVAL; monostate for
	// EAGER, WRITE_DATA and PROBE.
	std::variant<std::monostate, RtsBody, CtsBody, FinBody, ReadDoneBody, ArrivalBody,
		     DeliveryQueryBody, DeliveredBody>
		body;
};

// Checks everything before anything is trusted: length >= header, version,
// opcode, flags allowed for the opcode, reserved bytes, src_conn, exact
// body length per opcode (0 for WRITE_DATA and PROBE),
// eager (and arrival inline) size == what follows <= eager_limit, arrival
// slot and counter in range, nonzero lengths within
// max_message_size, enum fields, and that tag/cq_data are zero unless
// flagged. `out` is written only when the result is Ok.
WireStatus validate_message(const void* buf, std::size_t len, const Limits& limits,
			    ParsedMessage& out) noexcept;

// ---------------------------------------------------------------------------
// Collective control records: eager tagged messages with kFlagCollective,
// tagged with the join id, that rcoll's own matching takes before the
// application's queues.
//
// Join record (each member to every other during fi_join):
//   0 magic u32 "join" | 4 rank u32 | 8 size u32 | 12 slot u32 |
//  16 config u64 | 24 scratch key (24 bytes, the sender's transport's) |
//  48 host u64 | 56 nonce u64 | 64 pid i32 | 68 fd i32
// Stop notice (a member that failed the group writes no more into the
// others' buffers): 0 magic u32 "stop" | 4 rank u32

inline constexpr std::uint32_t kJoinMagic = 0x6a6f696e;   // "join"
inline constexpr std::uint32_t kStopMagic = 0x73746f70;   // "stop"
inline constexpr std::uint32_t kRetireMagic = 0x72746972; // "rtir"
inline constexpr std::size_t kScratchKeyBytes = 24;

struct JoinRecord {
	static constexpr std::size_t kWireSize = 72;

	std::uint32_t rank = 0;
	std::uint32_t size = 0;
	std::uint32_t slot = 0;   // the sender's group slot: named in arrivals to it
	std::uint64_t config = 0; // fingerprint of the group configuration
	std::array<std::byte, kScratchKeyBytes> scratch{}; // how to write into its scratch
	// Where it runs and how members on its host map its memory file
	// (host 0: unknown; fd -1: not offered).
	std::uint64_t host = 0;
	std::uint64_t nonce = 0;
	std::int32_t pid = 0;
	std::int32_t fd = -1;
};

struct StopNotice {
	static constexpr std::size_t kWireSize = 8;

	std::uint32_t rank = 0;
};

void encode_join_record(const JoinRecord& record, void* out) noexcept;
void encode_stop_notice(const StopNotice& notice, void* out) noexcept;
// A member that closed the group sends a retire notice after its last write
// into the group's memory: it writes nothing more, and the others may free
// what they registered for it once every member retired. Same layout as a
// stop notice, another magic.
void encode_retire_notice(const StopNotice& notice, void* out) noexcept;

enum class CollRecord : std::uint8_t { join, stop, retire, invalid };
// Which record `payload` holds, by its size and magic; the matching output
// is written only then.
CollRecord decode_coll_record(std::span<const std::byte> payload, JoinRecord& join,
			      StopNotice& stop) noexcept;

// ---------------------------------------------------------------------------
// Connection handshake, carried in the core's connection request / accept
// private data. Some cores (verbs through rdma_cm) allow only 56 bytes and
// deliver the blob zero-padded to that size, so trailing bytes are ignored.
//
//   0 magic u32 | 4 version u8 | 5 kind u8 | 6 reserved u16 |
//   8 endpoint_key u64 | 16 conn_id u32 | 20 eager_limit u32 |
//  24 token u64 | 32 prior_token u64

inline constexpr std::uint32_t kHandshakeMagic = 0x6c6f6372; // "rcol" in little-endian
inline constexpr std::size_t kMaxHandshakeSize = 56;
// The sender's eager limit must leave room for every control message in a
// bounce buffer, and stay small enough that bounce buffers stay cheap.
inline constexpr std::uint32_t kMinEagerLimit = 64;
inline constexpr std::uint32_t kMaxEagerLimit = 1u << 20;

enum class HandshakeKind : std::uint8_t {
	Request = 1,
	Accept = 2,
};

struct Handshake {
	static constexpr std::size_t kWireSize = 48;

	HandshakeKind kind = HandshakeKind::Request;
	std::uint64_t endpoint_key = 0; // identifies the sending rcoll endpoint; never 0
	std::uint32_t conn_id = 0;      // src_conn the peer must put in its headers
	std::uint32_t eager_limit = 0;  // largest eager payload the sender accepts
	// A random secret the peer must put in its headers on this connection
	// (never 0): only the two ends of the connection know it.
	std::uint64_t token = 0;
	// Request only: the token the requester put in its headers on its
	// previous connection to this endpoint (0: none). A request that would
	// replace a live connection must show it.
	std::uint64_t prior_token = 0;
	// The sender's host identity (0: unknown). Only a hint for scheduling
	// (how many of the processes it works with share its cores), never for
	// trust: the node-local path proves locality by other means.
	std::uint64_t host = 0;
};
static_assert(Handshake::kWireSize <= kMaxHandshakeSize);

// Writes Handshake::kWireSize bytes (magic and version included).
void encode_handshake(const Handshake& handshake, void* out) noexcept;

// Rejects short blobs, bad magic, version mismatch, the wrong kind,
// reserved bytes set and eager limits out of range. `out` is written only
// when the result is Ok; describe() gives the reason to log otherwise.
WireStatus check_handshake(const void* buf, std::size_t len, HandshakeKind expected,
			   Handshake& out) noexcept;

} // namespace rcoll::proto
