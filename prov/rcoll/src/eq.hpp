// fid_eq: events rcoll reports to the application (AV insert completion,
// and FI_JOIN_COMPLETE for collective groups). Reading it drives the
// progress of the endpoints bound to it, as reading a CQ does: a join
// completes only while its endpoint progresses, and an application may wait
// for FI_JOIN_COMPLETE in fi_eq_sread alone.
#pragma once

#include "common.hpp"

#include <rdma/fi_eq.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

namespace rcoll {

struct Endpoint;
struct Fabric;

struct EventQueue {
	struct Event {
		uint32_t event;
		std::vector<uint8_t> data;
		bool error;
	};

	FidShell<fid_eq, EventQueue> shell;
	Fabric* fabric = nullptr;
	std::mutex lock; // its own: events may be written from any domain
	std::condition_variable changed;
	std::deque<Event> events;
	fi_wait_obj wait_obj = FI_WAIT_NONE;
	// Endpoints and AVs bound to it: while any is, close is -FI_EBUSY (they
	// would report events into freed memory).
	std::atomic<size_t> bound{0};

	// Endpoints bound to it (under `lock`), and how many readers are driving
	// each one's progress right now. A reader drives them outside `lock`,
	// under each endpoint's domain lock (domain lock before EQ lock, never
	// the reverse: push() runs under the domain lock).
	struct Bound {
		Endpoint* ep;
		size_t drivers = 0;
		bool detaching = false; // closing: no new reader picks it up
	};
	std::vector<Bound> endpoints;
	uint64_t attached = 0;            // attach() calls: wakes a blocked reader
	std::condition_variable undriven; // a reader finished driving

	void push(uint32_t event, const void* data, size_t len, bool error = false);
	// Under the endpoint's domain lock (fi_ep_bind).
	void attach(Endpoint* ep);
	// Not under the domain lock: waits until no reader drives `ep` any more
	// (they take that lock), so the endpoint may then be freed.
	void detach(Endpoint* ep);
	// One progress round of every bound endpoint; holds neither lock on
	// entry. False when none is bound.
	bool drive();

	static int open(Fabric* fabric, fi_eq_attr* attr, fid_eq** out, void* context);
};

} // namespace rcoll
