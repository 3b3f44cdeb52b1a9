// getinfo: what rcoll offers, and how it finds the core provider under it.
#pragma once

#include "address.hpp"
#include "common.hpp"

namespace rcoll {

inline constexpr uint64_t kTxCaps =
	FI_MSG | FI_TAGGED | FI_RMA | FI_COLLECTIVE | FI_SEND | FI_READ | FI_WRITE;
inline constexpr uint64_t kRxCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_COLLECTIVE | FI_RECV |
				    FI_REMOTE_READ | FI_REMOTE_WRITE | FI_DIRECTED_RECV |
				    FI_SOURCE | FI_MULTI_RECV;
inline constexpr uint64_t kDomainCaps = FI_LOCAL_COMM | FI_REMOTE_COMM;
inline constexpr uint64_t kCaps = kTxCaps | kRxCaps | kDomainCaps;

// Whether an endpoint of these capabilities is a target of remote writes:
// FI_RMA with FI_REMOTE_WRITE, or with none of the four that narrow it.
constexpr bool takes_remote_writes(uint64_t caps)
{
	constexpr uint64_t narrowing = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	return (caps & FI_RMA) && (!(caps & narrowing) || (caps & FI_REMOTE_WRITE));
}
// What rcoll asks of applications: registered memory with provider keys and
// virtual addresses, exactly what the strictest core (verbs) needs for RMA.
inline constexpr int kAppMrMode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
// What rcoll itself always honours towards the core, whichever it is.
inline constexpr int kCoreMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
inline constexpr size_t kCqDataSize = 4; // what applications may send, as on verbs
// What rcoll needs of the core's order on one connection: the message that
// says what a write did (a rendezvous FIN, a collective ARRIVAL) arrives
// after the write, and messages in the order they were sent.
inline constexpr uint64_t kCoreOrder = FI_ORDER_SAW | FI_ORDER_SAS;
inline constexpr size_t kMaxMsgSize = size_t(1) << 40;
inline constexpr uint32_t kProviderVersion = FI_VERSION(0, 1);

// Whether the core runs over the kernel's TCP (tcp; net, its successor;
// sockets): every message then costs system calls at both ends besides the
// wire, which the cost model and the eager size account for.
bool kernel_tcp_core(const fi_info* core);

// FI_RCOLL_EAGER_SIZE, or unset its default for the core: 64 KiB over the
// kernel's TCP, where one message beats two (a rendezvous, or a collective
// write and its arrival); 16 KiB on RDMA cores, where a write is zero-copy
// and bounce buffers are registered, so pinned, whole.
size_t eager_size_for(const fi_info* core);

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
	    const fi_info* hints, fi_info** info);

// The core MSG info behind an rcoll fabric/domain/endpoint: found again by the
// fabric and domain names rcoll copied from it, and the core part of src_addr.
InfoPtr core_info_for(const char* fabric_name, const char* domain_name, const fi_info* rcoll_info);

// The address of whatever rcoll endpoint listens at node:service, as the
// core of this domain resolves it: unkeyed until a connection learns its key.
// Returns 0 or the core's negative error.
int resolve_listener(const char* node, const char* service, const fi_info* domain_info,
		     EpAddress& out);

} // namespace rcoll
