// fid_eq: events rcoll reports to the application (AV insert completion,
// and FI_JOIN_COMPLETE for collective groups).
#pragma once

#include "common.hpp"

#include <rdma/fi_eq.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

namespace rcoll {

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

	void push(uint32_t event, const void* data, size_t len, bool error = false);

	static int open(Fabric* fabric, fi_eq_attr* attr, fid_eq** out, void* context);
};

} // namespace rcoll
