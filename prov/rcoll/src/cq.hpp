// fid_cq: completions rcoll generates for the endpoints bound to it. Reading
// drives the progress of those endpoints (manual progress).
#pragma once

#include "common.hpp"
#include "proto/fifo.hpp"
#include "wait.hpp"

#include <rdma/fi_eq.h>

#include <chrono>
#include <vector>

namespace rcoll {

struct Domain;
struct Endpoint;

struct CompletionQueue {
	struct Entry {
		fi_cq_tagged_entry e;
		fi_addr_t source;
	};
	struct Error {
		fi_cq_err_entry e;
		fi_addr_t source;
	};

	FidShell<fid_cq, CompletionQueue> shell;
	Domain* domain = nullptr;
	fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
	size_t entry_size = sizeof(fi_cq_entry);
	fi_wait_obj wait_obj = FI_WAIT_NONE;
	proto::Fifo<Entry> entries; // a ring: no allocation per completion once grown
	proto::Fifo<Error> errors;
	std::vector<Endpoint*> endpoints; // bound endpoints, progressed on read
	bool signaled = false;

	// Under the domain lock.
	// A completion whose fields `fill` sets on a zeroed entry, in place in
	// the ring (an entry built first and copied in stalls on its loads).
	template <class Fill>
	void push(fi_addr_t source, Fill&& fill)
	{
		entries.push_back_with([&](Entry& slot) {
			slot.e = {};
			fill(slot.e);
			slot.source = source;
		});
	}
	// The next push and push_error cannot fail for memory (std::bad_alloc
	// is thrown here instead, before anything is taken).
	void make_room()
	{
		entries.reserve_one();
		errors.reserve_one();
	}
	void push_error(const fi_cq_err_entry& e, fi_addr_t source)
	{
		errors.push_back({e, source});
	}

	static int open(Domain* domain, fi_cq_attr* attr, fid_cq** out, void* context);
};

} // namespace rcoll
