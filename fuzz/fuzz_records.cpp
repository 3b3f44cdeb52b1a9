// Fuzz target: the collective control records a group member sends (join
// records, stop and retire notices, proto::decode_coll_record).
#include "fuzz_check.hpp"
#include "proto/wire.hpp"

#include <cstring>

using namespace rcoll::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	const std::span<const std::byte> payload(reinterpret_cast<const std::byte*>(data), size);
	JoinRecord join;
	StopNotice stop;
	const CollRecord kind = decode_coll_record(payload, join, stop);
	switch (kind) {
	case CollRecord::join: {
		FUZZ_CHECK(size == JoinRecord::kWireSize);
		std::byte again[JoinRecord::kWireSize];
		encode_join_record(join, again);
		FUZZ_CHECK(std::memcmp(again, data, size) == 0);
		break;
	}
	case CollRecord::stop:
	case CollRecord::retire: {
		FUZZ_CHECK(size == StopNotice::kWireSize);
		std::byte again[StopNotice::kWireSize];
		if (kind == CollRecord::stop)
			encode_stop_notice(stop, again);
		else
			encode_retire_notice(stop, again);
		FUZZ_CHECK(std::memcmp(again, data, size) == 0);
		break;
	}
	case CollRecord::invalid: break;
	}
	return 0;
}
