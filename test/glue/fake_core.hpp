// A core provider for the glue tests: "fake" (libfake-fi.so), loaded by
// libfabric like any provider and chosen with FI_RCOLL_CORE=fake. It carries
// what rcoll takes from a core (MSG endpoints with connection management, one
// shared receive context, RMA with remote CQ data, registrations) between the
// endpoints of one process, deterministically, under the test's control.
//
// It keeps the strictest rules of the real cores (design brief): provider
// keys and virtual addresses, local descriptors checked like verbs' lkeys,
// 4-byte CQ data, an iov limit of 4; and tcp's behaviour where rcoll relies
// on it: a send waits for a posted shared receive and keeps its connection's
// order, a write's immediate consumes no receive (verbs' does: not
// modelled), data moves only while some CQ or EQ of the process is read
// (tcp: the target's own), a bad remote access or an overlong message ends
// the connection (FI_SHUTDOWN on both sides).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace fake_core {

enum class Kind { Send, Write, Read };

// One transfer on its way. An owner is an rcoll endpoint, numbered by the
// order in which the endpoints opened their core CQ (one each), from 0.
struct Transfer {
	Kind kind;
	size_t len;
	bool immediate;   // a write with remote CQ data
	int from, to;     // owners
	uint64_t ordinal; // posts so far, this one included
};

enum class Verdict {
	Deliver,
	Hold,  // stays on the wire (and keeps its connection's later transfers back)
	Break, // its connection breaks instead (both sides see FI_SHUTDOWN)
};

// What the test scripts; every member may be left empty.
struct Plan {
	// At post time: true makes the core refuse the post with -FI_EAGAIN.
	std::function<bool(const Transfer&)> refuse;
	// At post time, after `refuse`: a non-zero (negative) return is the
	// error the core refuses the post with, as a broken connection does.
	std::function<int(const Transfer&)> fail;
	// At fi_mr_reg: true makes it fail with -FI_ENOMEM (a memlock limit).
	std::function<bool(size_t len)> refuse_registration;
	// At delivery time.
	std::function<Verdict(const Transfer&)> deliver;
	// Initiator completions of one delivery round are reported in reverse.
	bool reverse_completions = false;
};

struct Stats {
	uint64_t posted = 0, refused = 0, failed = 0, delivered = 0, refused_registrations = 0;
	uint64_t connects = 0, accepts = 0, rejects = 0, shutdowns = 0;
	uint64_t bad_descriptors = 0; // local buffers outside the descriptor's registration
};

// Forgets the plan and the counters (objects stay).
void reset();
Plan& plan();
const Stats& stats();

// The owner's process dies: every connection of its breaks, its listener
// refuses new connections, nothing it still posts goes anywhere.
void kill(int owner);
// Established connections between two owners (either direction).
size_t connections_between(int a, int b);

} // namespace fake_core
