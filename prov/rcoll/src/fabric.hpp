// fid_fabric: wraps the core provider's fabric.
#pragma once

#include "common.hpp"

#include <string>

namespace rcoll {

struct Fabric {
	FidShell<fid_fabric, Fabric> shell;
	FidPtr<fid_fabric> core;
	std::string name;
	uint32_t version = FI_VERSION(1, 17);

	static int open(fi_fabric_attr* attr, fid_fabric** out, void* context);
};

} // namespace rcoll
