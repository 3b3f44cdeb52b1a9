// Fuzz target: what a peer's message reaches first, proto::validate_message
// (headers, bodies, lengths against the receiver's limits), and the
// immediate-data decoders of RDMA writes.
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
	if (len >= 4) {
		uint32_t word;
		std::memcpy(&word, message, sizeof(word));
		if (auto imm = decode_immediate(word)) {
			FUZZ_CHECK(imm->id <= kMaxImmediateId);
			if (imm->kind == ImmediateKind::Collective) {
				const CollectiveArrival a = decode_collective(imm->id);
				FUZZ_CHECK(a.slot < kMaxCollectiveSlots);
				FUZZ_CHECK(a.counter < kMaxArrivalCounters);
				FUZZ_CHECK(encode_collective(a) == word);
			} else {
				FUZZ_CHECK(encode_immediate(imm->kind, imm->id) == word);
			}
		}
	}
	return 0;
}
