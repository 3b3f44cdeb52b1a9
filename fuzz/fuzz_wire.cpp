// Fuzz target: what a peer's message reaches first, proto::validate_message
// (headers, bodies, lengths against the receiver's limits).
#include "fuzz_check.hpp"
#include "proto/wire.hpp"

#include <cstring>

using namespace rcoll::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	if (size < 4)
		return 0;
	// The first bytes choose the receiver's limits, the rest is the message.
	Limits limits;
	limits.eager_limit = kMinEagerLimit + ((data[0] | data[1] << 8) % kMaxEagerLimit);
	limits.connection_count = 1u + data[2];
	limits.max_message_size = uint64_t(1) << (20 + data[3] % 24);
	const uint8_t* message = data + 4;
	const size_t len = size - 4;
	ParsedMessage m;
	const WireStatus status = validate_message(message, len, limits, m);
	FUZZ_CHECK(describe(status) != nullptr);
	if (status == WireStatus::Ok) {
		FUZZ_CHECK(len >= kHeaderSize);
		FUZZ_CHECK(m.header.src_conn < limits.connection_count);
		const auto* payload = reinterpret_cast<const uint8_t*>(m.payload.data());
		FUZZ_CHECK(m.payload.empty() ||
			   (payload >= message && payload + m.payload.size() <= message + len));
		FUZZ_CHECK(m.payload.size() <= limits.eager_limit);
		// What was accepted is canonical: encoding the header gives it back.
		std::byte header[kHeaderSize];
		encode_header(m.header, header);
		FUZZ_CHECK(std::memcmp(header, message, kHeaderSize) == 0);
	}
	if (status == WireStatus::Ok && m.header.opcode == Opcode::Arrival) {
		const auto& a = std::get<ArrivalBody>(m.body);
		FUZZ_CHECK(a.slot < kMaxCollectiveSlots);
		FUZZ_CHECK(a.counter < kMaxArrivalCounters);
		FUZZ_CHECK(len == kHeaderSize + ArrivalBody::kWireSize + m.payload.size());
		std::byte body[ArrivalBody::kWireSize];
		encode_body(a, body);
		FUZZ_CHECK(std::memcmp(body, message + kHeaderSize, sizeof(body)) == 0);
	}
	if (status == WireStatus::Ok && (m.header.opcode == Opcode::DeliveryQuery ||
					 m.header.opcode == Opcode::Delivered)) {
		const std::uint64_t sequence =
			m.header.opcode == Opcode::Delivered
				? std::get<DeliveredBody>(m.body).sequence
				: std::get<DeliveryQueryBody>(m.body).sequence;
		FUZZ_CHECK(sequence != 0);
		FUZZ_CHECK(len == kHeaderSize + DeliveredBody::kWireSize);
		std::byte body[DeliveredBody::kWireSize];
		encode_body(DeliveredBody{sequence}, body);
		FUZZ_CHECK(std::memcmp(body, message + kHeaderSize, sizeof(body)) == 0);
	}
	return 0;
}
