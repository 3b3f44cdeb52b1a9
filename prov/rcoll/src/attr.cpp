#include "attr.hpp"

#include "address.hpp"
#include "config.hpp"

#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace rcoll {
namespace {

// libfabric 1.17's internal "hidden" getinfo flag (OFI_GETINFO_HIDDEN).
// With FI_PROVIDER=rcoll, libfabric hides every other core provider, so the
// plain fi_getinfo for "tcp" or "verbs" finds nothing; this flag is how a
// layered provider still reaches the core it runs on (ofi_rxm uses the same).
constexpr uint64_t kHiddenCoreFlag = 1ULL << 60;

std::vector<std::string> core_candidates()
{
	const std::string& core = config().core;
	// net is libfabric 1.17's rewrite of tcp, which 1.18 made its tcp: it
	// signals no descriptor per completion, and a small collective through
	// it takes about a tenth less time. Libraries without it have tcp.
	if (core == "auto")
		return {"verbs", "net", "tcp"};
	return {core};
}

// The core's name for the address family of a socket address.
uint32_t sockaddr_format(const void* addr)
{
	switch (static_cast<const sockaddr*>(addr)->sa_family) {
	case AF_INET: return FI_SOCKADDR_IN;
	case AF_INET6: return FI_SOCKADDR_IN6;
	case AF_IB: return FI_SOCKADDR_IB;
	default: return FI_SOCKADDR;
	}
}

InfoPtr make_core_hints(const char* prov, const fi_info* rcoll_hints)
{
	InfoPtr h(fi_allocinfo());
	if (!h)
		throw std::bad_alloc();
	h->caps = FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
		  FI_REMOTE_WRITE;
	// rcoll always hands the core fi_context2-sized contexts and accounts for
	// receives a peer's write-with-immediate consumes (rcoll sends none, a
	// stranger may), so it can live with these.
	h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
	h->ep_attr->type = FI_EP_MSG;
	h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	h->domain_attr->mr_mode = kCoreMrMode;
	h->domain_attr->threading = FI_THREAD_DOMAIN; // rcoll serialises core calls per domain
	h->tx_attr->msg_order = h->rx_attr->msg_order = kCoreOrder;
	h->fabric_attr->prov_name = strdup(prov);
	if (rcoll_hints) {
		if (rcoll_hints->fabric_attr && rcoll_hints->fabric_attr->name)
			h->fabric_attr->name = strdup(rcoll_hints->fabric_attr->name);
		if (rcoll_hints->domain_attr && rcoll_hints->domain_attr->name)
			h->domain_attr->name = strdup(rcoll_hints->domain_attr->name);
		auto* addr = static_cast<const EpAddress*>(rcoll_hints->src_addr);
		if (addr && rcoll_hints->src_addrlen == sizeof(EpAddress) && addr->core_len &&
		    addr->core_len <= EpAddress::kCoreMax) {
			h->src_addr = malloc(addr->core_len);
			if (!h->src_addr)
				throw std::bad_alloc();
			memcpy(h->src_addr, addr->core, addr->core_len);
			h->src_addrlen = addr->core_len;
			h->addr_format = sockaddr_format(h->src_addr);
		}
	}
	return h;
}

InfoPtr core_getinfo(const char* node, const char* service, uint64_t flags,
		     const fi_info* rcoll_hints)
{
	const uint32_t core_version = fi_version();
	for (const std::string& prov : core_candidates()) {
		InfoPtr hints = make_core_hints(prov.c_str(), rcoll_hints);
		fi_info* found = nullptr;
		uint64_t core_flags = flags & (FI_SOURCE | FI_NUMERICHOST);
		// rcoll speaks the current API to its core whatever version the
		// application asked for (an FI_VERSION(1, 0) client, such as Open
		// MPI 4.1's mtl/ofi, would otherwise make mr_mode bits invalid).
		int ret = fi_getinfo(core_version, node, service, core_flags, hints.get(), &found);
		if (ret == -FI_ENODATA)
			ret = fi_getinfo(core_version, node, service, core_flags | kHiddenCoreFlag,
					 hints.get(), &found);
		if (ret == FI_SUCCESS && found &&
		    ((found->tx_attr->msg_order & kCoreOrder) != kCoreOrder ||
		     (found->rx_attr->msg_order & kCoreOrder) != kCoreOrder)) {
			RCOLL_WARN(FI_LOG_CORE,
				   "core %s: sends may pass sends or writes before them, "
				   "which rcoll's protocol needs them not to\n",
				   prov.c_str());
			fi_freeinfo(found);
			continue;
		}
		if (ret == FI_SUCCESS && found)
			return InfoPtr(found);
		RCOLL_DBG(FI_LOG_CORE, "core %s: %s\n", prov.c_str(), fi_strerror(-ret));
	}
	// Named by the user, it must exist: say so rather than vanish from fi_info.
	if (config().core != "auto")
		RCOLL_WARN(FI_LOG_CORE,
			   "FI_RCOLL_CORE=%s found no core endpoint%s%s: is it a provider with "
			   "FI_EP_MSG endpoints, RMA and a shared receive context?\n",
			   config().core.c_str(), node ? " for " : "", node ? node : "");
	return nullptr;
}

char* dup_or_null(const char* s)
{
	if (!s)
		return nullptr;
	char* d = strdup(s);
	if (!d)
		throw std::bad_alloc();
	return d;
}

// Does the application take the registration rules RMA needs (kAppMrMode)?
// FI_MR_BASIC, and every mode of the API before 1.5, names them as a whole;
// without hints it takes whatever rcoll says.
bool takes_rma_mr_rules(uint32_t version, const fi_info* hints)
{
	if (!hints || !hints->domain_attr || FI_VERSION_LT(version, FI_VERSION(1, 5)))
		return true;
	const int mr_mode = hints->domain_attr->mr_mode;
	return mr_mode == FI_MR_BASIC || (mr_mode & kAppMrMode) == kAppMrMode;
}

// Does the application's hint ask for more than rcoll gives? Each check that
// fails is logged, so `FI_LOG_LEVEL=info` explains an -FI_ENODATA.
bool hints_acceptable(uint32_t version, const fi_info* hints)
{
	auto no = [](const char* why) {
		RCOLL_INFO(FI_LOG_CORE, "hints not supported: %s\n", why);
		return false;
	};
	if (!hints)
		return true;
	if (hints->caps & ~kCaps)
		return no("capabilities");
	if (hints->addr_format != FI_FORMAT_UNSPEC)
		return no("address format (rcoll uses its own)");
	if (hints->ep_attr) {
		if (hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM)
			return no("endpoint type (only FI_EP_RDM)");
		if (hints->ep_attr->max_msg_size > kMaxMsgSize)
			return no("max_msg_size");
		if (hints->ep_attr->tx_ctx_cnt > 1 || hints->ep_attr->rx_ctx_cnt > 1)
			return no("scalable or shared contexts");
		if (hints->ep_attr->protocol != FI_PROTO_UNSPEC)
			return no("protocol");
	}
	if (hints->domain_attr) {
		const fi_domain_attr* d = hints->domain_attr;
		if (d->cq_data_size > kCqDataSize)
			return no("cq_data_size (4 bytes, as on verbs)");
		if (d->mr_mode == FI_MR_SCALABLE)
			return no("FI_MR_SCALABLE");
		if ((hints->caps & FI_RMA) && !takes_rma_mr_rules(version, hints))
			return no("mr_mode: RMA needs FI_MR_VIRT_ADDR, FI_MR_ALLOCATED and "
				  "FI_MR_PROV_KEY");
		if (d->caps & ~kDomainCaps)
			return no("domain capabilities");
	}
	if (const fi_tx_attr* tx = hints->tx_attr) {
		if (tx->caps & ~kCaps)
			return no("tx capabilities");
		if (tx->msg_order & ~uint64_t(FI_ORDER_SAS))
			return no("tx msg_order beyond FI_ORDER_SAS");
		if (tx->comp_order & ~uint64_t(FI_ORDER_NONE))
			return no("tx comp_order");
		if (tx->iov_limit > 1 || tx->rma_iov_limit > 1)
			return no("tx iov_limit");
		if (tx->size > config().tx_pool_size)
			return no("tx size");
	}
	if (hints->rx_attr) {
		const fi_rx_attr* rx = hints->rx_attr;
		if (rx->caps & ~kCaps)
			return no("rx capabilities");
		if (rx->msg_order & ~uint64_t(FI_ORDER_SAS))
			return no("rx msg_order beyond FI_ORDER_SAS");
		if (rx->comp_order & ~uint64_t(FI_ORDER_NONE))
			return no("rx comp_order");
		if (rx->iov_limit > 1)
			return no("rx iov_limit");
		if (rx->total_buffered_recv > 0)
			return no("total_buffered_recv");
	}
	return true;
}

// An rcoll address (malloc'ed, for an fi_info) naming a core address.
EpAddress* unkeyed_address(const void* core, size_t len)
{
	if (!core || !len || len > EpAddress::kCoreMax)
		return nullptr;
	auto* addr = static_cast<EpAddress*>(calloc(1, sizeof(EpAddress)));
	if (!addr)
		throw std::bad_alloc();
	*addr = EpAddress{};
	addr->core_len = uint16_t(len);
	memcpy(addr->core, core, len);
	return addr;
}

fi_info* make_rcoll_info(uint32_t version, const fi_info* core, const fi_info* hints)
{
	InfoPtr info(fi_allocinfo());
	if (!info)
		throw std::bad_alloc();
	const Config& cfg = config();
	const fi_domain_attr* hd = hints ? hints->domain_attr : nullptr;
	uint64_t caps = hints && hints->caps ? hints->caps : kCaps;
	// Without the registration rules RMA needs, the default is everything else.
	const bool rma_rules = takes_rma_mr_rules(version, hints);
	if (!rma_rules)
		caps &= ~uint64_t(FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
	// Secondary capabilities the application did not ask for cost nothing.
	caps |= kDomainCaps;
	info->caps = caps;
	info->mode = 0;
	info->addr_format = FI_FORMAT_UNSPEC;

	// Both carry no key: the endpoint draws its own when it opens, and the
	// one listening at a destination tells its key when it accepts.
	info->src_addr = unkeyed_address(core->src_addr, core->src_addrlen);
	info->src_addrlen = info->src_addr ? sizeof(EpAddress) : 0;
	info->dest_addr = unkeyed_address(core->dest_addr, core->dest_addrlen);
	info->dest_addrlen = info->dest_addr ? sizeof(EpAddress) : 0;

	// Default operation flags (FI_COMPLETION with FI_SELECTIVE_COMPLETION,
	// say) are the application's to choose.
	constexpr uint64_t kOpFlags =
		FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
	fi_tx_attr* tx = info->tx_attr;
	tx->caps = caps & kTxCaps;
	tx->op_flags = hints && hints->tx_attr ? hints->tx_attr->op_flags & kOpFlags : 0;
	tx->msg_order = FI_ORDER_SAS;
	tx->comp_order = FI_ORDER_NONE;
	tx->inject_size = eager_size_for(core);
	tx->size = cfg.tx_pool_size;
	tx->iov_limit = 1;
	tx->rma_iov_limit = 1;

	fi_rx_attr* rx = info->rx_attr;
	rx->caps = caps & kRxCaps;
	rx->op_flags = hints && hints->rx_attr
			       ? hints->rx_attr->op_flags & (FI_COMPLETION | FI_MULTI_RECV)
			       : 0;
	rx->msg_order = FI_ORDER_SAS;
	rx->comp_order = FI_ORDER_NONE;
	rx->size = 65536;
	rx->iov_limit = 1;

	fi_ep_attr* ep = info->ep_attr;
	ep->type = FI_EP_RDM;
	ep->protocol = FI_PROTO_UNSPEC;
	ep->protocol_version = 1;
	ep->max_msg_size = kMaxMsgSize;
	ep->mem_tag_format = ~uint64_t(0); // every tag bit is the application's
	ep->tx_ctx_cnt = 1;
	ep->rx_ctx_cnt = 1;

	fi_domain_attr* d = info->domain_attr;
	d->name = dup_or_null(core->domain_attr->name);
	d->threading = hd && hd->threading != FI_THREAD_UNSPEC ? hd->threading : FI_THREAD_SAFE;
	d->control_progress = hd && hd->control_progress != FI_PROGRESS_UNSPEC
				      ? hd->control_progress
				      : FI_PROGRESS_MANUAL;
	d->data_progress = hd && hd->data_progress != FI_PROGRESS_UNSPEC ? hd->data_progress
									 : FI_PROGRESS_MANUAL;
	d->resource_mgmt =
		hd && hd->resource_mgmt != FI_RM_UNSPEC ? hd->resource_mgmt : FI_RM_ENABLED;
	// Both kinds work (an FI_AV_UNSPEC one opens as a table): unless the
	// application names one, say so, as tcp and ofi_rxm do. Applications
	// read FI_AV_TABLE as "index i is the i-th address inserted" and may
	// skip reading back the fi_addr (libfabric's fi_rdm_multi_client does).
	d->av_type = hd ? hd->av_type : FI_AV_UNSPEC;
	// Only bits the application offered: it may count on the others being off.
	const int asked_mr_mode = hd ? hd->mr_mode : kAppMrMode;
	if (FI_VERSION_LT(version, FI_VERSION(1, 5)) || asked_mr_mode == FI_MR_BASIC)
		d->mr_mode = FI_MR_BASIC; // the old name for the same rules
	else
		d->mr_mode = asked_mr_mode & (FI_MR_LOCAL | (rma_rules ? kAppMrMode : 0));
	d->mr_key_size = sizeof(uint64_t);
	d->cq_data_size = kCqDataSize;
	d->cq_cnt = core->domain_attr->cq_cnt;
	d->ep_cnt = core->domain_attr->ep_cnt;
	d->tx_ctx_cnt = core->domain_attr->tx_ctx_cnt;
	d->rx_ctx_cnt = core->domain_attr->rx_ctx_cnt;
	d->max_ep_tx_ctx = 1;
	d->max_ep_rx_ctx = 1;
	d->max_ep_stx_ctx = 0;
	d->max_ep_srx_ctx = 0;
	d->cntr_cnt = 1024;
	d->mr_iov_limit = 1;
	d->mr_cnt = core->domain_attr->mr_cnt;
	d->caps = kDomainCaps;
	d->max_err_data = 256;

	fi_fabric_attr* f = info->fabric_attr;
	f->name = dup_or_null(core->fabric_attr->name);
	f->prov_name = nullptr; // libfabric fills in "rcoll"
	f->prov_version = kProviderVersion;
	f->api_version = FI_VERSION(1, 17);
	return info.release();
}

} // namespace

bool kernel_tcp_core(const fi_info* core)
{
	const char* name = core && core->fabric_attr ? core->fabric_attr->prov_name : nullptr;
	return name && (!strcmp(name, "tcp") || !strcmp(name, "net") || !strcmp(name, "sockets"));
}

size_t eager_size_for(const fi_info* core)
{
	if (config().eager_size)
		return config().eager_size;
	return kernel_tcp_core(core) ? 65536 : 16384;
}

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
	    const fi_info* hints, fi_info** info)
{
	*info = nullptr;
	if (!hints_acceptable(version, hints))
		return -FI_ENODATA;
	InfoPtr cores = core_getinfo(node, service, flags, hints);
	if (!cores)
		return -FI_ENODATA;
	fi_info* head = nullptr;
	fi_info** tail = &head;
	std::vector<std::string> seen;
	for (fi_info* core = cores.get(); core; core = core->next) {
		// One rcoll entry per core fabric/domain/source address.
		std::string id =
			std::string(core->fabric_attr->name ? core->fabric_attr->name : "") + "|" +
			(core->domain_attr->name ? core->domain_attr->name : "") + "|" +
			std::string(static_cast<const char*>(core->src_addr),
				    core->src_addr ? core->src_addrlen : 0);
		bool dup = false;
		for (const auto& s : seen)
			dup |= s == id;
		if (dup)
			continue;
		seen.push_back(id);
		if (hints && hints->tx_attr && hints->tx_attr->inject_size > eager_size_for(core)) {
			RCOLL_INFO(FI_LOG_CORE, "hints not supported: inject_size\n");
			continue;
		}
		*tail = make_rcoll_info(version, core, hints);
		tail = &(*tail)->next;
	}
	*info = head;
	return head ? FI_SUCCESS : -FI_ENODATA;
}

namespace {

InfoPtr lookup_hints(const char* fabric_name, const char* domain_name, const fi_info* rcoll_info)
{
	InfoPtr hints(fi_allocinfo());
	if (!hints)
		throw std::bad_alloc();
	if (fabric_name)
		hints->fabric_attr->name = strdup(fabric_name);
	if (domain_name)
		hints->domain_attr->name = strdup(domain_name);
	if (rcoll_info && rcoll_info->src_addr) {
		hints->src_addr = malloc(rcoll_info->src_addrlen);
		if (!hints->src_addr)
			throw std::bad_alloc();
		memcpy(hints->src_addr, rcoll_info->src_addr, rcoll_info->src_addrlen);
		hints->src_addrlen = rcoll_info->src_addrlen;
	}
	return hints;
}

} // namespace

InfoPtr core_info_for(const char* fabric_name, const char* domain_name, const fi_info* rcoll_info)
{
	InfoPtr hints = lookup_hints(fabric_name, domain_name, rcoll_info);
	return core_getinfo(nullptr, nullptr, 0, hints.get());
}

int resolve_listener(const char* node, const char* service, const fi_info* domain_info,
		     EpAddress& out)
{
	InfoPtr hints = lookup_hints(domain_info->fabric_attr->name, domain_info->domain_attr->name,
				     domain_info);
	InfoPtr core = core_getinfo(node, service, 0, hints.get());
	if (!core)
		return -FI_ENODATA;
	if (!core->dest_addr || !core->dest_addrlen || core->dest_addrlen > EpAddress::kCoreMax)
		return -FI_EADDRNOTAVAIL;
	out = EpAddress{};
	out.core_len = uint16_t(core->dest_addrlen);
	memcpy(out.core, core->dest_addr, core->dest_addrlen);
	return 0;
}

} // namespace rcoll
