// Fuzz target: the collective control records a group member sends (join
// records and stop notices, proto::decode_coll_record).
#include "fuzz_check.hpp"
#include "proto/wire.hpp"

#include <cstring>

using namespace rcoll::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	const std::span<const std::byte> payload(reinterpret_cast<const std::byte*>(data), size);
	JoinRecord join;
	StopNotice stop;
	switch (decode_coll_record(payload, join, stop)) {
	case CollRecord::join: {
		FUZZ_CHECK(size == JoinRecord::kWireSize);
		std::byte again[JoinRecord::kWireSize];
		encode_join_record(join, again);
		FUZZ_CHECK(std::memcmp(again, data, size) == 0);
		break;
	}
	case CollRecord::stop: {
		FUZZ_CHECK(size == StopNotice::kWireSize);
		std::byte again[StopNotice::kWireSize];
		encode_stop_notice(stop, again);
		FUZZ_CHECK(std::memcmp(again, data, size) == 0);
		break;
	}
	case CollRecord::invalid: break;
	}
	return 0;
}
