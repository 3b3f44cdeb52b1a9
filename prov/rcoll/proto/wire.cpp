#include "proto/wire.hpp"

namespace rcoll::proto {

using detail::load_le;
using detail::store_le;

// Field offsets; the layouts are drawn in wire.hpp.
namespace {

namespace header_off {
constexpr std::size_t version = 0, opcode = 1, flags = 2, reserved = 3, src_conn = 4, tag = 8,
		      cq_data = 16, size = 24, token = 32;
static_assert(token + 8 == MsgHeader::kWireSize);
} // namespace header_off

namespace rts_off {
constexpr std::size_t cookie = 0, addr = 8, key = 16;
static_assert(key + 8 == RtsBody::kWireSize);
} // namespace rts_off

namespace cts_off {
constexpr std::size_t cookie = 0, op_id = 8, slot = 12, mode = 13, reserved = 14, addr = 16,
		      key = 24, length = 32;
static_assert(length + 8 == CtsBody::kWireSize);
} // namespace cts_off

namespace fin_off {
constexpr std::size_t op_id = 0, reason = 4, reserved = 5, reserved_len = 3, sender_length = 8;
static_assert(reserved + reserved_len == sender_length);
static_assert(sender_length + 8 == FinBody::kWireSize);
} // namespace fin_off

namespace arrival_off {
constexpr std::size_t slot = 0, counter = 4, rank = 8, reserved = 12, offset = 16;
static_assert(offset + 8 == ArrivalBody::kWireSize);
} // namespace arrival_off

namespace handshake_off {
constexpr std::size_t magic = 0, version = 4, kind = 5, reserved = 6, endpoint_key = 8,
		      conn_id = 16, eager_limit = 20, token = 24, prior_token = 32, host = 40;
static_assert(host + 8 == Handshake::kWireSize);
} // namespace handshake_off

static_assert(kHeaderSize + kMinEagerLimit >= kMaxControlMessageSize,
	      "a bounce buffer of the smallest eager limit must hold every control message");

std::byte* bytes(void* p) noexcept { return static_cast<std::byte*>(p); }
const std::byte* bytes(const void* p) noexcept { return static_cast<const std::byte*>(p); }

std::uint8_t load_u8(const std::byte* p) noexcept { return std::to_integer<std::uint8_t>(*p); }
void store_u8(std::byte* p, std::uint8_t v) noexcept { *p = static_cast<std::byte>(v); }

bool valid_mode(std::uint8_t raw) noexcept
{
	return raw == static_cast<std::uint8_t>(CompletionMode::Fin) ||
	       raw == static_cast<std::uint8_t>(CompletionMode::PollLastByte);
}

bool valid_length(std::uint64_t length, const Limits& limits) noexcept
{
	return length > 0 && length <= limits.max_message_size;
}

WireStatus parse_rts(const std::byte* p, const MsgHeader& header, const Limits& limits,
		     RtsBody& out) noexcept
{
	if (!valid_length(header.size, limits))
		return WireStatus::BadSize;
	out.sender_cookie = load_le<std::uint64_t>(p + rts_off::cookie);
	out.addr = load_le<std::uint64_t>(p + rts_off::addr);
	out.key = load_le<std::uint64_t>(p + rts_off::key);
	return WireStatus::Ok;
}

WireStatus parse_cts(const std::byte* p, const Limits& limits, CtsBody& out) noexcept
{
	const auto op_id = load_le<std::uint32_t>(p + cts_off::op_id);
	const auto slot = load_u8(p + cts_off::slot);
	const auto mode = load_u8(p + cts_off::mode);
	const auto length = load_le<std::uint64_t>(p + cts_off::length);
	if (load_le<std::uint16_t>(p + cts_off::reserved) != 0)
		return WireStatus::ReservedNotZero;
	if (!valid_mode(mode))
		return WireStatus::BadField;
	if (mode == static_cast<std::uint8_t>(CompletionMode::Fin) && slot != 0)
		return WireStatus::BadField;
	if (!valid_length(length, limits))
		return WireStatus::BadSize;
	out.sender_cookie = load_le<std::uint64_t>(p + cts_off::cookie);
	out.receiver_op_id = op_id;
	out.slot_value = slot;
	out.mode = static_cast<CompletionMode>(mode);
	out.addr = load_le<std::uint64_t>(p + cts_off::addr);
	out.key = load_le<std::uint64_t>(p + cts_off::key);
	out.transfer_length = length;
	return WireStatus::Ok;
}

WireStatus parse_fin(const std::byte* p, const Limits& limits, FinBody& out) noexcept
{
	for (std::size_t i = 0; i < fin_off::reserved_len; ++i)
		if (load_u8(p + fin_off::reserved + i) != 0)
			return WireStatus::ReservedNotZero;
	const auto op_id = load_le<std::uint32_t>(p + fin_off::op_id);
	const auto reason = load_u8(p + fin_off::reason);
	const auto sender_length = load_le<std::uint64_t>(p + fin_off::sender_length);
	if (reason != static_cast<std::uint8_t>(FinReason::Collision) &&
	    reason != static_cast<std::uint8_t>(FinReason::Written))
		return WireStatus::BadField;
	if (!valid_length(sender_length, limits))
		return WireStatus::BadSize;
	out.receiver_op_id = op_id;
	out.reason = static_cast<FinReason>(reason);
	out.sender_length = sender_length;
	return WireStatus::Ok;
}

template <class Body>
WireStatus accept(ParsedMessage& out, const MsgHeader& header, std::span<const std::byte> payload,
		  const Body& body) noexcept
{
	out.header = header;
	out.payload = payload;
	out.body = body;
	return WireStatus::Ok;
}

std::size_t body_size(Opcode opcode) noexcept
{
	switch (opcode) {
	case Opcode::Rts: return RtsBody::kWireSize;
	case Opcode::Cts: return CtsBody::kWireSize;
	case Opcode::Fin: return FinBody::kWireSize;
	case Opcode::ReadDone: return ReadDoneBody::kWireSize;
	case Opcode::DeliveryQuery:
	case Opcode::Delivered: return DeliveryQueryBody::kWireSize;
	case Opcode::Arrival: return ArrivalBody::kWireSize;
	case Opcode::Eager:
	case Opcode::WriteData:
	case Opcode::Probe: break;
	}
	return 0;
}

} // namespace

const char* describe(WireStatus status) noexcept
{
	switch (status) {
	case WireStatus::Ok: return "ok";
	case WireStatus::TooShort: return "shorter than the fixed part";
	case WireStatus::BadMagic: return "bad magic";
	case WireStatus::BadVersion: return "protocol version mismatch";
	case WireStatus::BadKind: return "unexpected handshake kind";
	case WireStatus::BadOpcode: return "unknown opcode";
	case WireStatus::BadFlags: return "unknown or misplaced flags";
	case WireStatus::ReservedNotZero: return "reserved bytes not zero";
	case WireStatus::BadConnection: return "unknown connection id";
	case WireStatus::BadBodyLength: return "body length does not match the opcode";
	case WireStatus::BadSize: return "length field zero or above the maximum message size";
	case WireStatus::EagerTooLarge: return "eager payload above the eager limit";
	case WireStatus::BadField: return "field outside its defined values";
	case WireStatus::LimitOutOfRange: return "handshake limit out of range";
	}
	return "unknown status";
}

void encode_header(const MsgHeader& h, void* out) noexcept
{
	std::byte* p = bytes(out);
	store_u8(p + header_off::version, h.version);
	store_u8(p + header_off::opcode, static_cast<std::uint8_t>(h.opcode));
	store_u8(p + header_off::flags, h.flags);
	store_u8(p + header_off::reserved, 0);
	store_le(p + header_off::src_conn, h.src_conn);
	store_le(p + header_off::tag, h.tag);
	store_le(p + header_off::cq_data, h.cq_data);
	store_le(p + header_off::size, h.size);
	store_le(p + header_off::token, h.token);
}

void encode_body(const RtsBody& b, void* out) noexcept
{
	std::byte* p = bytes(out);
	store_le(p + rts_off::cookie, b.sender_cookie);
	store_le(p + rts_off::addr, b.addr);
	store_le(p + rts_off::key, b.key);
}

void encode_body(const CtsBody& b, void* out) noexcept
{
	std::byte* p = bytes(out);
	store_le(p + cts_off::cookie, b.sender_cookie);
	store_le(p + cts_off::op_id, b.receiver_op_id);
	store_u8(p + cts_off::slot, b.slot_value);
	store_u8(p + cts_off::mode, static_cast<std::uint8_t>(b.mode));
	store_le(p + cts_off::reserved, std::uint16_t{0});
	store_le(p + cts_off::addr, b.addr);
	store_le(p + cts_off::key, b.key);
	store_le(p + cts_off::length, b.transfer_length);
}

void encode_body(const FinBody& b, void* out) noexcept
{
	std::byte* p = bytes(out);
	store_le(p + fin_off::op_id, b.receiver_op_id);
	store_u8(p + fin_off::reason, static_cast<std::uint8_t>(b.reason));
	std::memset(p + fin_off::reserved, 0, fin_off::reserved_len);
	store_le(p + fin_off::sender_length, b.sender_length);
}

void encode_body(const ReadDoneBody& b, void* out) noexcept
{
	store_le(bytes(out), b.sender_cookie);
}

void encode_body(const DeliveryQueryBody& b, void* out) noexcept
{
	store_le(bytes(out), b.sequence);
}

void encode_body(const DeliveredBody& b, void* out) noexcept { store_le(bytes(out), b.sequence); }

void encode_body(const ArrivalBody& b, void* out) noexcept
{
	std::byte* p = bytes(out);
	store_le(p + arrival_off::slot, b.slot);
	store_le(p + arrival_off::counter, b.counter);
	store_le(p + arrival_off::rank, b.rank);
	store_le(p + arrival_off::reserved, std::uint32_t{0});
	store_le(p + arrival_off::offset, b.offset);
}

WireStatus validate_message(const void* buf, std::size_t len, const Limits& limits,
			    ParsedMessage& out) noexcept
{
	if (buf == nullptr || len < kHeaderSize)
		return WireStatus::TooShort;
	const std::byte* p = bytes(buf);

	MsgHeader h;
	h.version = load_u8(p + header_off::version);
	const auto opcode = load_u8(p + header_off::opcode);
	h.flags = load_u8(p + header_off::flags);
	h.src_conn = load_le<std::uint32_t>(p + header_off::src_conn);
	h.tag = load_le<std::uint64_t>(p + header_off::tag);
	h.cq_data = load_le<std::uint64_t>(p + header_off::cq_data);
	h.size = load_le<std::uint64_t>(p + header_off::size);
	h.token = load_le<std::uint64_t>(p + header_off::token);

	if (h.version != kProtocolVersion)
		return WireStatus::BadVersion;
	if (opcode < kMinOpcode || opcode > kMaxOpcode)
		return WireStatus::BadOpcode;
	h.opcode = static_cast<Opcode>(opcode);
	if (load_u8(p + header_off::reserved) != 0)
		return WireStatus::ReservedNotZero;
	if ((h.flags & ~kKnownHeaderFlags) != 0)
		return WireStatus::BadFlags;
	if (h.src_conn >= limits.connection_count)
		return WireStatus::BadConnection;

	const bool carries_user_message = h.opcode == Opcode::Eager || h.opcode == Opcode::Rts;
	if (carries_user_message) {
		// Fields a flag does not announce must be zero: a sender bug then
		// shows up here instead of as a wrong tag or cq_data at the user.
		if (!(h.flags & kFlagTagged) && h.tag != 0)
			return WireStatus::BadField;
		if (!(h.flags & kFlagRemoteCqData) && h.cq_data != 0)
			return WireStatus::BadField;
		// Internal traffic: eager, tagged, nothing else.
		if ((h.flags & kFlagCollective) &&
		    (h.opcode != Opcode::Eager || h.flags != (kFlagCollective | kFlagTagged)))
			return WireStatus::BadFlags;
	} else if (h.opcode == Opcode::WriteData) {
		// Header only: the remote CQ data and nothing else.
		if (h.flags != kFlagRemoteCqData)
			return WireStatus::BadFlags;
		if (h.tag != 0 || h.size != 0)
			return WireStatus::BadField;
	} else {
		if (h.flags != 0)
			return WireStatus::BadFlags;
		if (h.tag != 0 || h.cq_data != 0 || (h.size != 0 && h.opcode != Opcode::Arrival))
			return WireStatus::BadField;
	}

	const std::byte* body = p + kHeaderSize;
	const std::size_t body_len = len - kHeaderSize;
	if (h.opcode == Opcode::Eager) {
		if (h.size != body_len)
			return WireStatus::BadSize;
		if (h.size > limits.eager_limit)
			return WireStatus::EagerTooLarge;
		return accept(out, h, std::span<const std::byte>(body, body_len), std::monostate{});
	}
	if (h.opcode == Opcode::Arrival) {
		if (body_len < ArrivalBody::kWireSize)
			return WireStatus::BadBodyLength;
		if (h.size != body_len - ArrivalBody::kWireSize)
			return WireStatus::BadSize;
		if (h.size > limits.eager_limit)
			return WireStatus::EagerTooLarge;
		if (load_le<std::uint32_t>(body + arrival_off::reserved) != 0)
			return WireStatus::ReservedNotZero;
		ArrivalBody a;
		a.slot = load_le<std::uint32_t>(body + arrival_off::slot);
		a.counter = load_le<std::uint32_t>(body + arrival_off::counter);
		a.rank = load_le<std::uint32_t>(body + arrival_off::rank);
		a.offset = load_le<std::uint64_t>(body + arrival_off::offset);
		if (a.slot >= kMaxCollectiveSlots || a.counter >= kMaxArrivalCounters)
			return WireStatus::BadField;
		return accept(out, h,
			      std::span<const std::byte>(body + ArrivalBody::kWireSize, h.size), a);
	}
	if (body_len != body_size(h.opcode))
		return WireStatus::BadBodyLength;

	// Each body is decoded into a local and `out` written once, on success.
	switch (h.opcode) {
	case Opcode::Rts: {
		RtsBody rts;
		const WireStatus status = parse_rts(body, h, limits, rts);
		return status == WireStatus::Ok ? accept(out, h, {}, rts) : status;
	}
	case Opcode::Cts: {
		CtsBody cts;
		const WireStatus status = parse_cts(body, limits, cts);
		return status == WireStatus::Ok ? accept(out, h, {}, cts) : status;
	}
	case Opcode::Fin: {
		FinBody fin;
		const WireStatus status = parse_fin(body, limits, fin);
		return status == WireStatus::Ok ? accept(out, h, {}, fin) : status;
	}
	case Opcode::ReadDone:
		return accept(out, h, {}, ReadDoneBody{load_le<std::uint64_t>(body)});
	case Opcode::DeliveryQuery:
	case Opcode::Delivered: {
		const auto sequence = load_le<std::uint64_t>(body);
		if (sequence == 0)
			return WireStatus::BadField; // numbering starts at 1
		if (h.opcode == Opcode::Delivered)
			return accept(out, h, {}, DeliveredBody{sequence});
		return accept(out, h, {}, DeliveryQueryBody{sequence});
	}
	case Opcode::WriteData:
	case Opcode::Probe: return accept(out, h, {}, std::monostate{});
	case Opcode::Eager:
	case Opcode::Arrival: break;
	}
	return WireStatus::BadOpcode; // not reached: the opcode was range-checked
}

namespace join_off {
constexpr std::size_t magic = 0, rank = 4, size = 8, slot = 12, config = 16, scratch = 24,
		      host = 48, nonce = 56, pid = 64, fd = 68;
static_assert(fd + 4 == JoinRecord::kWireSize);
} // namespace join_off

void encode_join_record(const JoinRecord& r, void* out) noexcept
{
	std::byte* p = bytes(out);
	store_le(p + join_off::magic, kJoinMagic);
	store_le(p + join_off::rank, r.rank);
	store_le(p + join_off::size, r.size);
	store_le(p + join_off::slot, r.slot);
	store_le(p + join_off::config, r.config);
	std::memcpy(p + join_off::scratch, r.scratch.data(), r.scratch.size());
	store_le(p + join_off::host, r.host);
	store_le(p + join_off::nonce, r.nonce);
	store_le(p + join_off::pid, static_cast<std::uint32_t>(r.pid));
	store_le(p + join_off::fd, static_cast<std::uint32_t>(r.fd));
}

void encode_stop_notice(const StopNotice& n, void* out) noexcept
{
	std::byte* p = bytes(out);
	store_le(p, kStopMagic);
	store_le(p + 4, n.rank);
}

void encode_retire_notice(const StopNotice& n, void* out) noexcept
{
	std::byte* p = bytes(out);
	store_le(p, kRetireMagic);
	store_le(p + 4, n.rank);
}

CollRecord decode_coll_record(std::span<const std::byte> payload, JoinRecord& join,
			      StopNotice& stop) noexcept
{
	const std::byte* p = payload.data();
	if (payload.size() == StopNotice::kWireSize) {
		const auto magic = load_le<std::uint32_t>(p);
		if (magic != kStopMagic && magic != kRetireMagic)
			return CollRecord::invalid;
		stop.rank = load_le<std::uint32_t>(p + 4);
		return magic == kStopMagic ? CollRecord::stop : CollRecord::retire;
	}
	if (payload.size() != JoinRecord::kWireSize ||
	    load_le<std::uint32_t>(p + join_off::magic) != kJoinMagic)
		return CollRecord::invalid;
	join.rank = load_le<std::uint32_t>(p + join_off::rank);
	join.size = load_le<std::uint32_t>(p + join_off::size);
	join.slot = load_le<std::uint32_t>(p + join_off::slot);
	join.config = load_le<std::uint64_t>(p + join_off::config);
	std::memcpy(join.scratch.data(), p + join_off::scratch, join.scratch.size());
	join.host = load_le<std::uint64_t>(p + join_off::host);
	join.nonce = load_le<std::uint64_t>(p + join_off::nonce);
	join.pid = static_cast<std::int32_t>(load_le<std::uint32_t>(p + join_off::pid));
	join.fd = static_cast<std::int32_t>(load_le<std::uint32_t>(p + join_off::fd));
	return CollRecord::join;
}

void encode_handshake(const Handshake& hs, void* out) noexcept
{
	std::byte* p = bytes(out);
	store_le(p + handshake_off::magic, kHandshakeMagic);
	store_u8(p + handshake_off::version, kProtocolVersion);
	store_u8(p + handshake_off::kind, static_cast<std::uint8_t>(hs.kind));
	store_le(p + handshake_off::reserved, std::uint16_t{0});
	store_le(p + handshake_off::endpoint_key, hs.endpoint_key);
	store_le(p + handshake_off::conn_id, hs.conn_id);
	store_le(p + handshake_off::eager_limit, hs.eager_limit);
	store_le(p + handshake_off::token, hs.token);
	store_le(p + handshake_off::prior_token, hs.prior_token);
	store_le(p + handshake_off::host, hs.host);
}

WireStatus check_handshake(const void* buf, std::size_t len, HandshakeKind expected,
			   Handshake& out) noexcept
{
	if (buf == nullptr || len < Handshake::kWireSize)
		return WireStatus::TooShort;
	const std::byte* p = bytes(buf);
	if (load_le<std::uint32_t>(p + handshake_off::magic) != kHandshakeMagic)
		return WireStatus::BadMagic;
	if (load_u8(p + handshake_off::version) != kProtocolVersion)
		return WireStatus::BadVersion;
	if (load_u8(p + handshake_off::kind) != static_cast<std::uint8_t>(expected))
		return WireStatus::BadKind;
	if (load_le<std::uint16_t>(p + handshake_off::reserved) != 0)
		return WireStatus::ReservedNotZero;
	const auto eager_limit = load_le<std::uint32_t>(p + handshake_off::eager_limit);
	if (eager_limit < kMinEagerLimit || eager_limit > kMaxEagerLimit)
		return WireStatus::LimitOutOfRange;
	const auto token = load_le<std::uint64_t>(p + handshake_off::token);
	const auto prior_token = load_le<std::uint64_t>(p + handshake_off::prior_token);
	const auto endpoint_key = load_le<std::uint64_t>(p + handshake_off::endpoint_key);
	if (token == 0 || endpoint_key == 0 ||
	    (expected == HandshakeKind::Accept && prior_token != 0))
		return WireStatus::BadField;
	out.kind = expected;
	out.token = token;
	out.prior_token = prior_token;
	out.endpoint_key = endpoint_key;
	out.conn_id = load_le<std::uint32_t>(p + handshake_off::conn_id);
	out.eager_limit = eager_limit;
	out.host = load_le<std::uint64_t>(p + handshake_off::host);
	return WireStatus::Ok;
}

} // namespace rcoll::proto
