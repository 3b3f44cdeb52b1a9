// fid_cntr: success and error counts for the endpoints bound to it.
#pragma once

#include "common.hpp"
#include "wait.hpp"

#include <rdma/fi_eq.h>

#include <vector>

namespace rcoll {

struct Domain;
struct Endpoint;

struct Counter {
	FidShell<fid_cntr, Counter> shell;
	Domain* domain = nullptr;
	uint64_t value = 0; // under the domain lock
	uint64_t errors = 0;
	std::vector<Endpoint*> endpoints;
	uint64_t last_read = 0; // what cntr_read returned last

	static int open(Domain* domain, fi_cntr_attr* attr, fid_cntr** out, void* context);
};

} // namespace rcoll
