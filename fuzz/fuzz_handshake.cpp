// Fuzz target: the connection handshake any process that reaches the
// listening port can send (proto::check_handshake), as request and accept.
#include "fuzz_check.hpp"
#include "proto/wire.hpp"

#include <cstring>

using namespace rcoll::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	if (size < 1)
		return 0;
	const HandshakeKind kind = (data[0] & 1) ? HandshakeKind::Accept : HandshakeKind::Request;
	Handshake hs;
	if (check_handshake(data + 1, size - 1, kind, hs) != WireStatus::Ok)
		return 0;
	FUZZ_CHECK(hs.kind == kind);
	FUZZ_CHECK(hs.eager_limit >= kMinEagerLimit && hs.eager_limit <= kMaxEagerLimit);
	FUZZ_CHECK(hs.token != 0);
	FUZZ_CHECK(kind == HandshakeKind::Request || hs.prior_token == 0);
	// Accepted bytes are canonical (trailing padding aside).
	std::byte again[Handshake::kWireSize];
	encode_handshake(hs, again);
	FUZZ_CHECK(std::memcmp(again, data + 1, Handshake::kWireSize) == 0);
	return 0;
}
