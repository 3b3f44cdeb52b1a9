// Wire formats: encode/validate round trips, the exact byte layout, every
// truncation, every malformed field, and random input.
#include <criterion/criterion.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "proto/wire.hpp"

using namespace rcoll::proto;

namespace {

constexpr Limits kLimits{
	.eager_limit = 4096, .connection_count = 16, .max_message_size = 1ull << 32};

using Bytes = std::vector<std::byte>;

MsgHeader header(Opcode opcode, std::uint64_t size = 0)
{
	MsgHeader h;
	h.opcode = opcode;
	h.src_conn = 7;
	h.size = size;
	return h;
}

template <WireBody Body>
Bytes control(const MsgHeader& h, const Body& body)
{
	Bytes out(kHeaderSize + Body::kWireSize);
	cr_assert_eq(encode_message(out.data(), out.size(), h, body), out.size());
	return out;
}

Bytes eager(const MsgHeader& h, std::size_t payload_len)
{
	Bytes out(kHeaderSize + payload_len);
	encode_header(h, out.data());
	for (std::size_t i = 0; i < payload_len; ++i)
		out[kHeaderSize + i] = static_cast<std::byte>(i * 7 + 1);
	return out;
}

Bytes write_data(std::uint64_t cq_data)
{
	MsgHeader h = header(Opcode::WriteData);
	h.flags = kFlagRemoteCqData;
	h.cq_data = cq_data;
	Bytes out(kHeaderSize);
	encode_header(h, out.data());
	return out;
}

Bytes arrival(const ArrivalBody& body, std::size_t payload_len)
{
	Bytes out(kHeaderSize + ArrivalBody::kWireSize + payload_len);
	encode_header(header(Opcode::Arrival, payload_len), out.data());
	encode_body(body, out.data() + kHeaderSize);
	for (std::size_t i = 0; i < payload_len; ++i)
		out[kHeaderSize + ArrivalBody::kWireSize + i] = static_cast<std::byte>(i * 5 + 3);
	return out;
}

Bytes probe()
{
	Bytes out(kHeaderSize);
	encode_header(header(Opcode::Probe), out.data());
	return out;
}

RtsBody sample_rts() { return {0x1122334455667788, 0x7f00deadbeef0000, 0xfedcba9876543210}; }
CtsBody sample_cts(CompletionMode mode = CompletionMode::PollLastByte)
{
	return {0x0102030405060708,
		0x0abcdef,
		mode == CompletionMode::PollLastByte ? std::uint8_t{0x5a} : std::uint8_t{0},
		mode,
		0x7f0012345678,
		0x42,
		65536};
}
FinBody sample_fin() { return {0x0123456, FinReason::Collision, 100000}; }
ReadDoneBody sample_read_done() { return {0xcafef00d}; }

// Every valid message kind, as bytes.
std::vector<Bytes> valid_messages()
{
	MsgHeader tagged = header(Opcode::Eager, 5);
	tagged.flags = kFlagTagged | kFlagRemoteCqData;
	tagged.tag = 0x8000000000000001;
	tagged.cq_data = 0xffffffffffffffff;
	MsgHeader rts = header(Opcode::Rts, 1 << 20);
	rts.flags = kFlagTagged;
	rts.tag = 3;
	return {eager(header(Opcode::Eager, 0), 0),
		write_data(0x0123456789abcdef),
		probe(),
		eager(tagged, 5),
		eager(header(Opcode::Eager, kLimits.eager_limit), kLimits.eager_limit),
		control(rts, sample_rts()),
		control(header(Opcode::Cts), sample_cts()),
		control(header(Opcode::Cts), sample_cts(CompletionMode::Fin)),
		control(header(Opcode::Fin), sample_fin()),
		control(header(Opcode::Fin), FinBody{0xffffffff, FinReason::Written, 1}),
		control(header(Opcode::ReadDone), sample_read_done()),
		control(header(Opcode::DeliveryQuery), DeliveryQueryBody{1}),
		control(header(Opcode::Delivered), DeliveredBody{0xffffffffffffffff}),
		arrival({0, 0, 0, 0}, 0),
		arrival({3, 77, 1, 4096}, 24)};
}

WireStatus check(const Bytes& b)
{
	ParsedMessage parsed;
	return validate_message(b.data(), b.size(), kLimits, parsed);
}

// Re-encodes an accepted message. Every bit of the wire formats means
// something, so an accepted buffer must come back byte for byte: a
// validator that let a stray bit through would break this.
Bytes reencode(const ParsedMessage& m)
{
	Bytes out(kHeaderSize);
	encode_header(m.header, out.data());
	auto append = [&out](const auto& body) {
		const std::size_t at = out.size();
		out.resize(at + std::remove_cvref_t<decltype(body)>::kWireSize);
		encode_body(body, out.data() + at);
	};
	std::visit(
		[&](const auto& body) {
			if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(body)>,
						      std::monostate>)
				append(body);
		},
		m.body);
	out.insert(out.end(), m.payload.begin(), m.payload.end());
	return out;
}

// What an accepted message must satisfy whatever the input was.
void assert_invariants(const Bytes& input, const ParsedMessage& m)
{
	const MsgHeader& h = m.header;
	cr_assert_eq(h.version, kProtocolVersion);
	const auto op = static_cast<std::uint8_t>(h.opcode);
	cr_assert(op >= kMinOpcode && op <= kMaxOpcode);
	cr_assert_lt(h.src_conn, kLimits.connection_count);
	cr_assert_eq(h.flags & ~kKnownHeaderFlags, 0);
	if (h.opcode == Opcode::Eager) {
		cr_assert_eq(h.size, input.size() - kHeaderSize);
		cr_assert_leq(h.size, kLimits.eager_limit);
		cr_assert_eq(m.payload.size(), h.size);
		cr_assert(std::holds_alternative<std::monostate>(m.body));
	} else if (const auto* a = std::get_if<ArrivalBody>(&m.body)) {
		cr_assert_eq(h.size, input.size() - kHeaderSize - ArrivalBody::kWireSize);
		cr_assert_leq(h.size, kLimits.eager_limit);
		cr_assert_eq(m.payload.size(), h.size);
		cr_assert_lt(a->slot, kMaxCollectiveSlots);
		cr_assert_lt(a->counter, kMaxArrivalCounters);
	} else {
		cr_assert(m.payload.empty());
	}
	if (h.opcode == Opcode::WriteData) {
		cr_assert_eq(input.size(), kHeaderSize);
		cr_assert_eq(h.flags, kFlagRemoteCqData);
		cr_assert_eq(h.tag, 0u);
		cr_assert_eq(h.size, 0u);
	}
	if (h.opcode == Opcode::Probe) {
		cr_assert_eq(input.size(), kHeaderSize);
		cr_assert_eq(h.flags, 0);
		cr_assert_eq(h.tag | h.cq_data | h.size, 0u);
		cr_assert(std::holds_alternative<std::monostate>(m.body));
	}
	if (h.opcode == Opcode::Rts) {
		cr_assert(h.size > 0 && h.size <= kLimits.max_message_size);
		cr_assert_eq(input.size(), kHeaderSize + RtsBody::kWireSize);
	}
	if (const auto* cts = std::get_if<CtsBody>(&m.body)) {
		cr_assert(cts->transfer_length > 0 &&
			  cts->transfer_length <= kLimits.max_message_size);
		cr_assert(cts->mode == CompletionMode::Fin ||
			  cts->mode == CompletionMode::PollLastByte);
	}
	if (const auto* fin = std::get_if<FinBody>(&m.body))
		cr_assert(fin->reason == FinReason::Collision || fin->reason == FinReason::Written);
	cr_assert(reencode(m) == input, "accepted bytes are not canonical");
}

} // namespace

Test(wire, sizes_are_fixed)
{
	cr_assert_eq(kHeaderSize, 40u);
	cr_assert_eq(RtsBody::kWireSize, 24u);
	cr_assert_eq(CtsBody::kWireSize, 40u);
	cr_assert_eq(FinBody::kWireSize, 16u);
	cr_assert_eq(ReadDoneBody::kWireSize, 8u);
	cr_assert_eq(DeliveryQueryBody::kWireSize, 8u);
	cr_assert_eq(DeliveredBody::kWireSize, 8u);
	cr_assert_eq(Handshake::kWireSize, 48u);
	cr_assert_leq(Handshake::kWireSize, 56u);
	cr_assert_eq(kMaxControlMessageSize, 80u);
}

Test(wire, header_layout_is_little_endian_at_fixed_offsets)
{
	MsgHeader h;
	h.opcode = Opcode::Rts;
	h.flags = kFlagTagged | kFlagRemoteCqData;
	h.src_conn = 0x04030201;
	h.tag = 0x1817161514131211;
	h.cq_data = 0x2827262524232221;
	h.size = 0x3837363534333231;
	h.token = 0x4847464544434241;
	std::array<std::byte, kHeaderSize> raw;
	raw.fill(std::byte{0xee});
	encode_header(h, raw.data());
	const std::array<std::uint8_t, kHeaderSize> expected = {kProtocolVersion,
								2,
								3,
								0,
								0x01,
								0x02,
								0x03,
								0x04,
								0x11,
								0x12,
								0x13,
								0x14,
								0x15,
								0x16,
								0x17,
								0x18,
								0x21,
								0x22,
								0x23,
								0x24,
								0x25,
								0x26,
								0x27,
								0x28,
								0x31,
								0x32,
								0x33,
								0x34,
								0x35,
								0x36,
								0x37,
								0x38,
								0x41,
								0x42,
								0x43,
								0x44,
								0x45,
								0x46,
								0x47,
								0x48};
	for (std::size_t i = 0; i < kHeaderSize; ++i)
		cr_assert_eq(std::to_integer<unsigned>(raw[i]), expected[i], "byte %zu", i);
}

Test(wire, cts_layout_is_fixed)
{
	std::array<std::byte, CtsBody::kWireSize> raw;
	raw.fill(std::byte{0xee});
	encode_body(CtsBody{0x0807060504030201, 0x0c0b0a09, 0x0d, CompletionMode::PollLastByte,
			    0x1716151413121110, 0x1f1e1d1c1b1a1918, 0x2726252423222120},
		    raw.data());
	const std::array<std::uint8_t, CtsBody::kWireSize> expected = {
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 2,
		0,    0,    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b,
		0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27};
	for (std::size_t i = 0; i < raw.size(); ++i)
		cr_assert_eq(std::to_integer<unsigned>(raw[i]), expected[i], "byte %zu", i);
}

Test(wire, every_opcode_round_trips)
{
	MsgHeader rts_header = header(Opcode::Rts, 123456);
	rts_header.flags = kFlagTagged | kFlagRemoteCqData;
	rts_header.tag = 0xabcdef;
	rts_header.cq_data = 99;
	ParsedMessage m;

	Bytes b = control(rts_header, sample_rts());
	cr_assert_eq(validate_message(b.data(), b.size(), kLimits, m), WireStatus::Ok);
	cr_assert_eq(m.header.opcode, Opcode::Rts);
	cr_assert_eq(m.header.src_conn, 7u);
	cr_assert_eq(m.header.tag, 0xabcdefu);
	cr_assert_eq(m.header.cq_data, 99u);
	cr_assert_eq(m.header.size, 123456u);
	const auto& rts = std::get<RtsBody>(m.body);
	cr_assert_eq(rts.sender_cookie, sample_rts().sender_cookie);
	cr_assert_eq(rts.addr, sample_rts().addr);
	cr_assert_eq(rts.key, sample_rts().key);

	b = control(header(Opcode::Cts), sample_cts());
	cr_assert_eq(validate_message(b.data(), b.size(), kLimits, m), WireStatus::Ok);
	const auto& cts = std::get<CtsBody>(m.body);
	const CtsBody want = sample_cts();
	cr_assert_eq(cts.sender_cookie, want.sender_cookie);
	cr_assert_eq(cts.receiver_op_id, want.receiver_op_id);
	cr_assert_eq(cts.slot_value, want.slot_value);
	cr_assert_eq(cts.mode, want.mode);
	cr_assert_eq(cts.addr, want.addr);
	cr_assert_eq(cts.key, want.key);
	cr_assert_eq(cts.transfer_length, want.transfer_length);

	b = control(header(Opcode::Fin), sample_fin());
	cr_assert_eq(validate_message(b.data(), b.size(), kLimits, m), WireStatus::Ok);
	const auto& fin = std::get<FinBody>(m.body);
	cr_assert_eq(fin.receiver_op_id, sample_fin().receiver_op_id);
	cr_assert_eq(fin.reason, FinReason::Collision);
	cr_assert_eq(fin.sender_length, sample_fin().sender_length);

	b = control(header(Opcode::ReadDone), sample_read_done());
	cr_assert_eq(validate_message(b.data(), b.size(), kLimits, m), WireStatus::Ok);
	cr_assert_eq(std::get<ReadDoneBody>(m.body).sender_cookie, 0xcafef00du);

	b = control(header(Opcode::DeliveryQuery), DeliveryQueryBody{0x0102030405060708});
	cr_assert_eq(validate_message(b.data(), b.size(), kLimits, m), WireStatus::Ok);
	cr_assert_eq(std::get<DeliveryQueryBody>(m.body).sequence, 0x0102030405060708u);
	cr_assert_eq(b[kHeaderSize], std::byte{0x08}, "sequence is little-endian at offset 0");

	b = control(header(Opcode::Delivered), DeliveredBody{7});
	cr_assert_eq(validate_message(b.data(), b.size(), kLimits, m), WireStatus::Ok);
	cr_assert_eq(std::get<DeliveredBody>(m.body).sequence, 7u,
		     "an answer is told apart from a query by its opcode");

	b = write_data(42);
	cr_assert_eq(validate_message(b.data(), b.size(), kLimits, m), WireStatus::Ok);
	cr_assert_eq(m.header.opcode, Opcode::WriteData);
	cr_assert_eq(m.header.cq_data, 42u);
	cr_assert(m.payload.empty());
	cr_assert(std::holds_alternative<std::monostate>(m.body));

	b = eager(header(Opcode::Eager, 100), 100);
	cr_assert_eq(validate_message(b.data(), b.size(), kLimits, m), WireStatus::Ok);
	cr_assert_eq(m.header.opcode, Opcode::Eager);
	cr_assert_eq(m.payload.data(), b.data() + kHeaderSize,
		     "payload must point into the buffer");
	cr_assert_eq(m.payload.size(), 100u);

	for (const Bytes& valid : valid_messages()) {
		cr_assert_eq(check(valid), WireStatus::Ok);
		cr_assert_eq(validate_message(valid.data(), valid.size(), kLimits, m),
			     WireStatus::Ok);
		assert_invariants(valid, m);
	}
}

Test(wire, every_truncation_is_rejected)
{
	for (const Bytes& valid : valid_messages()) {
		for (std::size_t len = 0; len < valid.size(); ++len) {
			ParsedMessage m;
			m.header.src_conn = 12345; // must stay untouched on failure
			const WireStatus s = validate_message(valid.data(), len, kLimits, m);
			cr_assert_neq(s, WireStatus::Ok, "length %zu of %zu accepted", len,
				      valid.size());
			cr_assert_eq(m.header.src_conn, 12345u, "output written on failure");
			if (len < kHeaderSize)
				cr_assert_eq(s, WireStatus::TooShort);
		}
	}
	ParsedMessage m;
	cr_assert_eq(validate_message(nullptr, 64, kLimits, m), WireStatus::TooShort);
}

Test(wire, trailing_bytes_are_rejected)
{
	for (Bytes b : valid_messages()) {
		b.push_back(std::byte{0});
		cr_assert_neq(check(b), WireStatus::Ok);
	}
}

Test(wire, header_fields_are_checked)
{
	const Bytes good = control(header(Opcode::ReadDone), sample_read_done());
	auto with = [&good](std::size_t offset, std::uint8_t value) {
		Bytes b = good;
		b[offset] = std::byte{value};
		return check(b);
	};
	for (int v : {0, kProtocolVersion - 1, kProtocolVersion + 1, 255})
		cr_assert_eq(with(0, std::uint8_t(v)), WireStatus::BadVersion);
	for (std::uint8_t v : {0, kMaxOpcode + 1, 128, 255})
		cr_assert_eq(with(1, v), WireStatus::BadOpcode, "opcode %u", v);
	cr_assert_eq(with(3, 1), WireStatus::ReservedNotZero);
	cr_assert_eq(with(2, kFlagTagged), WireStatus::BadFlags, "flags on a control message");
	cr_assert_eq(with(8, 1), WireStatus::BadField, "tag on a control message");
	cr_assert_eq(with(16, 1), WireStatus::BadField, "cq_data on a control message");
	cr_assert_eq(with(24, 1), WireStatus::BadField, "size on a control message");
	cr_assert_eq(with(4, static_cast<std::uint8_t>(kLimits.connection_count)),
		     WireStatus::BadConnection);
	cr_assert_eq(with(4, static_cast<std::uint8_t>(kLimits.connection_count - 1)),
		     WireStatus::Ok);

	Bytes e = eager(header(Opcode::Eager, 4), 4);
	e[2] = std::byte{0x08}; // unknown flag bit
	cr_assert_eq(check(e), WireStatus::BadFlags);
	e[2] = std::byte{kFlagCollective}; // internal traffic must be tagged
	cr_assert_eq(check(e), WireStatus::BadFlags);
	e = eager(header(Opcode::Eager, 4), 4);
	e[8] = std::byte{1}; // tag without kFlagTagged
	cr_assert_eq(check(e), WireStatus::BadField);
	e = eager(header(Opcode::Eager, 4), 4);
	e[16] = std::byte{1}; // cq_data without kFlagRemoteCqData
	cr_assert_eq(check(e), WireStatus::BadField);
}

Test(wire, write_data_is_header_only_with_cq_data)
{
	auto with = [](std::size_t offset, std::uint8_t value) {
		Bytes b = write_data(7);
		b[offset] = std::byte{value};
		return check(b);
	};
	cr_assert_eq(with(2, 0), WireStatus::BadFlags, "the cq_data flag is required");
	cr_assert_eq(with(2, kFlagTagged | kFlagRemoteCqData), WireStatus::BadFlags);
	cr_assert_eq(with(8, 1), WireStatus::BadField, "no tag");
	cr_assert_eq(with(24, 1), WireStatus::BadField, "no size");
	Bytes b = write_data(7);
	b.push_back(std::byte{0});
	cr_assert_eq(check(b), WireStatus::BadBodyLength);
	cr_assert_eq(check(write_data(0)), WireStatus::Ok, "zero is valid CQ data");
}

// A probe carries nothing: any flag, field or body byte is a sender bug.
Test(wire, probe_is_header_only)
{
	ParsedMessage m;
	const Bytes good = probe();
	cr_assert_eq(validate_message(good.data(), good.size(), kLimits, m), WireStatus::Ok);
	cr_assert_eq(m.header.opcode, Opcode::Probe);
	cr_assert_eq(m.header.src_conn, 7u);
	cr_assert(m.payload.empty());
	cr_assert(std::holds_alternative<std::monostate>(m.body));
	auto with = [&good](std::size_t offset, std::uint8_t value) {
		Bytes b = good;
		b[offset] = std::byte{value};
		return check(b);
	};
	for (std::uint8_t flag : {kFlagTagged, kFlagRemoteCqData, kFlagCollective})
		cr_assert_eq(with(2, flag), WireStatus::BadFlags, "flag %#x on a probe", flag);
	cr_assert_eq(with(3, 1), WireStatus::ReservedNotZero);
	cr_assert_eq(with(8, 1), WireStatus::BadField, "no tag");
	cr_assert_eq(with(16, 1), WireStatus::BadField, "no cq_data");
	cr_assert_eq(with(24, 1), WireStatus::BadField, "no size");
	cr_assert_eq(with(4, static_cast<std::uint8_t>(kLimits.connection_count)),
		     WireStatus::BadConnection);
	Bytes longer = good;
	longer.push_back(std::byte{0});
	cr_assert_eq(check(longer), WireStatus::BadBodyLength);
}

Test(wire, sizes_are_checked_per_opcode)
{
	// Eager: size must equal the payload and stay within the eager limit.
	cr_assert_eq(check(eager(header(Opcode::Eager, 5), 4)), WireStatus::BadSize);
	cr_assert_eq(check(eager(header(Opcode::Eager, 3), 4)), WireStatus::BadSize);
	cr_assert_eq(check(eager(header(Opcode::Eager, kLimits.eager_limit + 1),
				 kLimits.eager_limit + 1)),
		     WireStatus::EagerTooLarge);

	// RTS: a rendezvous is never for an empty message, nor above the maximum.
	cr_assert_eq(check(control(header(Opcode::Rts, 0), sample_rts())), WireStatus::BadSize);
	cr_assert_eq(
		check(control(header(Opcode::Rts, kLimits.max_message_size + 1), sample_rts())),
		WireStatus::BadSize);
	cr_assert_eq(check(control(header(Opcode::Rts, kLimits.max_message_size), sample_rts())),
		     WireStatus::Ok);

	// A control body of the wrong length, announced as another opcode.
	Bytes b = control(header(Opcode::Fin), sample_fin());
	b[1] = std::byte{static_cast<std::uint8_t>(Opcode::Cts)};
	cr_assert_eq(check(b), WireStatus::BadBodyLength);
	b[1] = std::byte{static_cast<std::uint8_t>(Opcode::ReadDone)};
	cr_assert_eq(check(b), WireStatus::BadBodyLength);
}

Test(wire, cts_fields_are_checked)
{
	auto cts_status = [](CtsBody body) { return check(control(header(Opcode::Cts), body)); };
	CtsBody c = sample_cts();
	c.transfer_length = 0;
	cr_assert_eq(cts_status(c), WireStatus::BadSize);
	c = sample_cts();
	c.transfer_length = kLimits.max_message_size + 1;
	cr_assert_eq(cts_status(c), WireStatus::BadSize);
	c = sample_cts();
	c.receiver_op_id = 0xffffffff; // any id: the receiver checks it is its own
	cr_assert_eq(cts_status(c), WireStatus::Ok);
	c = sample_cts(CompletionMode::Fin);
	c.slot_value = 1; // a slot has no meaning without polling
	cr_assert_eq(cts_status(c), WireStatus::BadField);
	for (std::uint8_t mode : {0, 3, 255}) {
		Bytes b = control(header(Opcode::Cts), sample_cts());
		b[kHeaderSize + 13] = std::byte{mode};
		cr_assert_eq(check(b), WireStatus::BadField, "mode %u", mode);
	}
	Bytes b = control(header(Opcode::Cts), sample_cts());
	b[kHeaderSize + 15] = std::byte{1};
	cr_assert_eq(check(b), WireStatus::ReservedNotZero);
}

Test(wire, fin_fields_are_checked)
{
	for (std::uint8_t reason : {0, 3, 255}) {
		Bytes b = control(header(Opcode::Fin), sample_fin());
		b[kHeaderSize + 4] = std::byte{reason};
		cr_assert_eq(check(b), WireStatus::BadField, "reason %u", reason);
	}
	for (std::size_t off = 5; off < 8; ++off) {
		Bytes b = control(header(Opcode::Fin), sample_fin());
		b[kHeaderSize + off] = std::byte{1};
		cr_assert_eq(check(b), WireStatus::ReservedNotZero);
	}
	FinBody f = sample_fin();
	f.sender_length = 0;
	cr_assert_eq(check(control(header(Opcode::Fin), f)), WireStatus::BadSize);
}

Test(wire, delivery_sequences_start_at_one)
{
	cr_assert_eq(check(control(header(Opcode::DeliveryQuery), DeliveryQueryBody{0})),
		     WireStatus::BadField);
	cr_assert_eq(check(control(header(Opcode::Delivered), DeliveredBody{0})),
		     WireStatus::BadField);
	MsgHeader flagged = header(Opcode::Delivered);
	flagged.flags = kFlagRemoteCqData;
	cr_assert_eq(check(control(flagged, DeliveredBody{1})), WireStatus::BadFlags);
}

Test(wire, encode_message_refuses_short_buffers_and_wrong_opcodes)
{
	std::array<std::byte, kMaxControlMessageSize> buf{};
	cr_assert_eq(encode_message(buf.data(), kHeaderSize + RtsBody::kWireSize - 1,
				    header(Opcode::Rts, 10), sample_rts()),
		     0u);
	cr_assert_eq(encode_message(buf.data(), buf.size(), header(Opcode::Cts), sample_rts()), 0u);
	cr_assert_eq(encode_message(nullptr, buf.size(), header(Opcode::Rts, 10), sample_rts()),
		     0u);
	for (std::byte x : buf)
		cr_assert_eq(x, std::byte{0}, "nothing may be written on refusal");
	cr_assert_eq(encode_message(buf.data(), buf.size(), header(Opcode::Cts), sample_cts()),
		     kMaxControlMessageSize);
}

Test(wire, arrival_round_trips)
{
	for (std::size_t payload :
	     {std::size_t{0}, std::size_t{8}, std::size_t{kLimits.eager_limit}}) {
		const ArrivalBody body{kMaxCollectiveSlots - 1, kMaxArrivalCounters - 1, 12345,
				       0x100000};
		const Bytes b = arrival(body, payload);
		// The largest arrival a peer accepts fits its bounce buffers.
		cr_assert_leq(b.size(), kBounceOverhead + kLimits.eager_limit);
		ParsedMessage m;
		cr_assert_eq(validate_message(b.data(), b.size(), kLimits, m), WireStatus::Ok);
		const auto* back = std::get_if<ArrivalBody>(&m.body);
		cr_assert_not_null(back);
		cr_assert_eq(back->slot, body.slot);
		cr_assert_eq(back->counter, body.counter);
		cr_assert_eq(back->rank, body.rank);
		cr_assert_eq(back->offset, body.offset);
		cr_assert_eq(m.payload.size(), payload);
		cr_assert(std::equal(m.payload.begin(), m.payload.end(),
				     b.begin() + kHeaderSize + ArrivalBody::kWireSize));
	}
}

Test(wire, arrival_fields_are_checked)
{
	ArrivalBody a{1, 2, 3, 4};
	a.slot = kMaxCollectiveSlots;
	cr_assert_eq(check(arrival(a, 0)), WireStatus::BadField, "slot out of range");
	a = {1, kMaxArrivalCounters, 3, 4};
	cr_assert_eq(check(arrival(a, 0)), WireStatus::BadField, "counter out of range");
	Bytes b = arrival({1, 2, 3, 4}, 8);
	b[kHeaderSize + 12] = std::byte{1};
	cr_assert_eq(check(b), WireStatus::ReservedNotZero);
	b = arrival({1, 2, 3, 4}, 8);
	b.pop_back(); // the payload is shorter than the header says
	cr_assert_eq(check(b), WireStatus::BadSize);
	b = arrival({1, 2, 3, 4}, 0);
	b.resize(kHeaderSize + ArrivalBody::kWireSize - 1); // a cut body
	cr_assert_eq(check(b), WireStatus::BadBodyLength);
	cr_assert_eq(check(arrival({1, 2, 3, 4}, kLimits.eager_limit + 1)),
		     WireStatus::EagerTooLarge);
	MsgHeader h = header(Opcode::Arrival, 0);
	h.flags = kFlagTagged;
	cr_assert_eq(check(control(h, ArrivalBody{1, 2, 3, 4})), WireStatus::BadFlags);
}

Test(wire, collective_records_round_trip_and_are_told_apart)
{
	JoinRecord join;
	join.rank = 3;
	join.size = 7;
	join.slot = 1023;
	join.config = 0x1122334455667788;
	for (std::size_t i = 0; i < join.scratch.size(); i++)
		join.scratch[i] = std::byte(i * 11);
	join.host = 0xabcdef;
	join.nonce = 42;
	join.pid = 12345;
	join.fd = -1;
	std::array<std::byte, JoinRecord::kWireSize> bytes;
	encode_join_record(join, bytes.data());
	JoinRecord got;
	StopNotice stop;
	cr_assert(decode_coll_record(bytes, got, stop) == CollRecord::join);
	cr_assert_eq(got.rank, 3u);
	cr_assert_eq(got.size, 7u);
	cr_assert_eq(got.slot, 1023u);
	cr_assert_eq(got.config, join.config);
	cr_assert(got.scratch == join.scratch);
	cr_assert_eq(got.host, join.host);
	cr_assert_eq(got.nonce, 42u);
	cr_assert_eq(got.pid, 12345);
	cr_assert_eq(got.fd, -1);
	std::array<std::byte, StopNotice::kWireSize> notice;
	encode_stop_notice({9}, notice.data());
	cr_assert(decode_coll_record(notice, got, stop) == CollRecord::stop);
	cr_assert_eq(stop.rank, 9u);
	std::array<std::byte, StopNotice::kWireSize> retire;
	encode_retire_notice({4}, retire.data());
	cr_assert(decode_coll_record(retire, got, stop) == CollRecord::retire);
	cr_assert_eq(stop.rank, 4u);
	retire[0] = std::byte{0};
	cr_assert(decode_coll_record(retire, got, stop) == CollRecord::invalid);
	// Wrong magic, wrong sizes.
	bytes[0] = std::byte{0};
	cr_assert(decode_coll_record(bytes, got, stop) == CollRecord::invalid);
	cr_assert(decode_coll_record(std::span(bytes).first(71), got, stop) == CollRecord::invalid);
	notice[3] = std::byte{0};
	cr_assert(decode_coll_record(notice, got, stop) == CollRecord::invalid);
	cr_assert(decode_coll_record({}, got, stop) == CollRecord::invalid);
}

Test(wire, handshake_round_trips_and_tolerates_padding)
{
	const Handshake sent{
		HandshakeKind::Accept, 0x0123456789abcdef, 4242, 8192, 0xfedcba9876543210, 0,
		0x5566778899aabbcc};
	std::array<std::byte, kMaxHandshakeSize> blob{}; // rdma_cm pads to 56 with zeros
	encode_handshake(sent, blob.data());
	for (std::size_t len : {Handshake::kWireSize, kMaxHandshakeSize}) {
		Handshake got;
		cr_assert_eq(check_handshake(blob.data(), len, HandshakeKind::Accept, got),
			     WireStatus::Ok);
		cr_assert_eq(got.kind, HandshakeKind::Accept);
		cr_assert_eq(got.endpoint_key, sent.endpoint_key);
		cr_assert_eq(got.conn_id, sent.conn_id);
		cr_assert_eq(got.eager_limit, sent.eager_limit);
		cr_assert_eq(got.token, sent.token);
		cr_assert_eq(got.prior_token, 0u);
		cr_assert_eq(got.host, sent.host);
	}
	const Handshake request{HandshakeKind::Request, 5, 6, 4096, 7, 0x1122334455667788};
	encode_handshake(request, blob.data());
	Handshake got;
	cr_assert_eq(
		check_handshake(blob.data(), Handshake::kWireSize, HandshakeKind::Request, got),
		WireStatus::Ok);
	cr_assert_eq(got.token, 7u);
	cr_assert_eq(got.prior_token, 0x1122334455667788u);
}

Test(wire, handshake_rejections)
{
	const Handshake sent{HandshakeKind::Request, 77, 3, 4096, 99};
	std::array<std::byte, Handshake::kWireSize> good;
	encode_handshake(sent, good.data());
	Handshake out;
	out.conn_id = 999;

	for (std::size_t len = 0; len < good.size(); ++len)
		cr_assert_eq(check_handshake(good.data(), len, HandshakeKind::Request, out),
			     WireStatus::TooShort);
	cr_assert_eq(check_handshake(good.data(), good.size(), HandshakeKind::Accept, out),
		     WireStatus::BadKind);

	auto mutated = [&good](std::size_t offset, std::uint8_t value) {
		auto b = good;
		b[offset] = std::byte{value};
		Handshake h;
		return check_handshake(b.data(), b.size(), HandshakeKind::Request, h);
	};
	cr_assert_eq(mutated(0, 'x'), WireStatus::BadMagic);
	cr_assert_eq(mutated(3, 0), WireStatus::BadMagic);
	cr_assert_eq(mutated(4, kProtocolVersion - 1), WireStatus::BadVersion);
	cr_assert_eq(mutated(4, kProtocolVersion + 1), WireStatus::BadVersion);
	cr_assert_eq(mutated(4, 0), WireStatus::BadVersion);
	cr_assert_eq(mutated(6, 1), WireStatus::ReservedNotZero);
	cr_assert_eq(mutated(7, 1), WireStatus::ReservedNotZero);
	cr_assert_eq(out.conn_id, 999u, "output written on failure");

	for (std::uint32_t limit : {0u, kMinEagerLimit - 1, kMaxEagerLimit + 1, 0xffffffffu}) {
		std::array<std::byte, Handshake::kWireSize> b;
		encode_handshake(Handshake{HandshakeKind::Request, 77, 3, limit, 99}, b.data());
		cr_assert_eq(check_handshake(b.data(), b.size(), HandshakeKind::Request, out),
			     WireStatus::LimitOutOfRange, "limit %u", limit);
	}
	for (std::uint32_t limit : {kMinEagerLimit, kMaxEagerLimit}) {
		std::array<std::byte, Handshake::kWireSize> b;
		encode_handshake(Handshake{HandshakeKind::Request, 77, 3, limit, 99}, b.data());
		cr_assert_eq(check_handshake(b.data(), b.size(), HandshakeKind::Request, out),
			     WireStatus::Ok);
	}
	{
		// A token of 0 is no secret; an accept names no prior connection.
		std::array<std::byte, Handshake::kWireSize> b;
		encode_handshake(Handshake{HandshakeKind::Request, 77, 3, 4096, 0}, b.data());
		cr_assert_eq(check_handshake(b.data(), b.size(), HandshakeKind::Request, out),
			     WireStatus::BadField);
		encode_handshake(Handshake{HandshakeKind::Accept, 77, 3, 4096, 5, 6}, b.data());
		cr_assert_eq(check_handshake(b.data(), b.size(), HandshakeKind::Accept, out),
			     WireStatus::BadField);
		// Key 0 names no endpoint (an address not yet keyed).
		encode_handshake(Handshake{HandshakeKind::Request, 0, 3, 4096, 5}, b.data());
		cr_assert_eq(check_handshake(b.data(), b.size(), HandshakeKind::Request, out),
			     WireStatus::BadField);
	}
	cr_assert_eq(check_handshake(nullptr, 56, HandshakeKind::Request, out),
		     WireStatus::TooShort);
	cr_assert_str_neq(describe(WireStatus::LimitOutOfRange), describe(WireStatus::BadVersion));
}

// Random buffers almost never pass the version byte, so the second half
// mutates valid messages: a few random bytes, random lengths.
Test(wire, random_input_never_accepts_garbage)
{
	std::mt19937_64 rng(20240607);
	std::size_t accepted = 0;
	const std::vector<Bytes> seeds = valid_messages();
	for (int iter = 0; iter < 200000; ++iter) {
		Bytes b;
		if (iter % 2 == 0) {
			b.resize(rng() % 160);
			for (auto& x : b)
				x = static_cast<std::byte>(rng());
			if (!b.empty() && rng() % 2)
				b[0] = std::byte{kProtocolVersion};
		} else {
			b = seeds[rng() % seeds.size()];
			const int flips = 1 + static_cast<int>(rng() % 3);
			for (int f = 0; f < flips; ++f)
				b[rng() % b.size()] = static_cast<std::byte>(rng());
			if (rng() % 4 == 0)
				b.resize(rng() % (b.size() + 16));
		}
		ParsedMessage m;
		if (validate_message(b.data(), b.size(), kLimits, m) == WireStatus::Ok) {
			++accepted;
			assert_invariants(b, m);
		}
	}
	// Mutations that hit payload bytes, cookies or keys stay valid; make
	// sure the invariant checks above actually ran.
	cr_assert_gt(accepted, 1000u);
}
