// The two sides of the endpoint's point-to-point data path: what each owns.
// Their logic lives with its job (recv.cpp, send.cpp, transmit.cpp).
#pragma once

#include "bounce_buffers.hpp"
#include "ops.hpp"
#include "proto/match.hpp"
#include "slab.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace rcoll {

// Receiving: the shared receive context's bounce buffers, posted receives
// and messages that came first (rcoll's own matching, one queue per
// interface), and the receives in progress.
struct ReceiveSide {
	std::unique_ptr<ReceiveBuffers> buffers;
	proto::MatchQueue msg_queue, tagged_queue;
	std::vector<std::unique_ptr<Unexpected>> spare_unexpected;
	// What peers outside the address vector have waiting, together: they
	// share one FI_RCOLL_UNEXPECTED_MAX, or any number of them, each under a
	// new key, would multiply it.
	size_t strangers_unexpected_bytes = 0;
	Slab<RecvOp> recvs;
	std::vector<uint32_t> polling; // receives in POLL_LAST_BYTE mode

	proto::MatchQueue& queue_for(uint64_t flags)
	{
		return (flags & FI_TAGGED) ? tagged_queue : msg_queue;
	}
};

// Sending: the bounce buffers messages are built in, the sends in progress,
// and what the core allows per operation.
struct TransmitSide {
	std::unique_ptr<TransmitBuffers> buffers;
	Slab<SendOp> sends;
	size_t backlogged = 0;  // > 0: some peer may hold queued sends
	size_t inject_size = 0; // the core's tx_attr: largest fi_inject
	size_t iov_limit = 1;   // ... and most gather entries of a send
	size_t size = 0;        // our tx_attr->size: most operations outstanding
};

} // namespace rcoll
