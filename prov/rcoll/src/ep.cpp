#include "ep.hpp"

#include "attr.hpp"
#include "av.hpp"
#include "cntr.hpp"
#include "coll.hpp"
#include "config.hpp"
#include "cq.hpp"
#include "domain.hpp"
#include "eq.hpp"
#include "fabric.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstring>
#include <random>

namespace rcoll {

extern fi_ops_msg msg_ops;
extern fi_ops_tagged tagged_ops;
extern fi_ops_rma rma_ops_table;

namespace {

template <class T>
void unlink(std::vector<T*>& list, T* item)
{
	list.erase(std::remove(list.begin(), list.end(), item), list.end());
}

int close_ep(fid* f)
{
	return guarded([&] {
		Endpoint* ep = owner_of<Endpoint>(f);
		Domain* domain = ep->domain;
		EventQueue* eq = nullptr;
		{
			std::lock_guard guard(domain->lock);
			eq = ep->app.eq;
		}
		// Readers of the EQ drive this endpoint under the domain lock: they
		// are waited for outside it, and pick it up no more.
		if (eq)
			eq->detach(ep);
		{
			std::lock_guard guard(domain->lock);
			unlink(domain->endpoints, ep);
			for (CompletionQueue* cq : {ep->app.tx_cq, ep->app.rx_cq})
				if (cq)
					unlink(cq->endpoints, ep);
			for (Counter* c : {ep->app.send_cntr, ep->app.recv_cntr, ep->app.read_cntr,
					   ep->app.write_cntr})
				if (c)
					unlink(c->endpoints, ep);
			if (ep->app.av)
				ep->app.av->endpoints--;
			delete ep; // its last progress may still report to the EQ
			if (eq)
				eq->bound--;
		}
		domain->children--;
		return 0;
	});
}

int bind_ep(fid* f, fid* bfid, uint64_t flags)
{
	return guarded([&] {
		Endpoint* ep = owner_of<Endpoint>(f);
		if (!bfid)
			return -FI_EINVAL;
		std::lock_guard guard(ep->domain->lock);
		if (ep->enabled)
			return -FI_EOPBADSTATE;
		auto add = [](auto& list, Endpoint* e) {
			if (std::find(list.begin(), list.end(), e) == list.end())
				list.push_back(e);
		};
		switch (bfid->fclass) {
		case FI_CLASS_AV: {
			auto* av = owner_of<AddressVector>(bfid);
			if (ep->app.av)
				return -FI_EALREADY;
			if (av->domain != ep->domain)
				return -FI_EINVAL;
			ep->app.av = av;
			av->endpoints++;
			return 0;
		}
		case FI_CLASS_CQ: {
			auto* cq = owner_of<CompletionQueue>(bfid);
			if (cq->domain != ep->domain)
				return -FI_EINVAL;
			if (flags & ~uint64_t(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION))
				return -FI_EBADFLAGS;
			if (flags & FI_TRANSMIT) {
				ep->app.tx_cq = cq;
				ep->app.tx_selective = flags & FI_SELECTIVE_COMPLETION;
			}
			if (flags & FI_RECV) {
				ep->app.rx_cq = cq;
				ep->app.rx_selective = flags & FI_SELECTIVE_COMPLETION;
			}
			add(cq->endpoints, ep);
			return 0;
		}
		case FI_CLASS_CNTR: {
			auto* c = owner_of<Counter>(bfid);
			if (c->domain != ep->domain)
				return -FI_EINVAL;
			if (flags & ~uint64_t(FI_SEND | FI_RECV | FI_READ | FI_WRITE)) {
				RCOLL_WARN(FI_LOG_EP_CTRL,
					   "counter bind flags %#llx not supported\n",
					   (unsigned long long)flags);
				return -FI_EBADFLAGS;
			}
			if (flags & FI_SEND)
				ep->app.send_cntr = c;
			if (flags & FI_RECV)
				ep->app.recv_cntr = c;
			if (flags & FI_READ)
				ep->app.read_cntr = c;
			if (flags & FI_WRITE)
				ep->app.write_cntr = c;
			add(c->endpoints, ep);
			return 0;
		}
		case FI_CLASS_EQ:
			if (ep->app.eq)
				return -FI_EINVAL; // one EQ per endpoint
			ep->app.eq = owner_of<EventQueue>(bfid);
			ep->app.eq->bound++;
			ep->app.eq->attach(ep);
			return 0;
		default: return -FI_EINVAL;
		}
	});
}

// rcoll's extensions (fi_ext_rcoll.h).
int ops_open_ep(fid* f, const char* name, uint64_t flags, void** ops, void*)
{
	return guarded([&] {
		Endpoint* ep = owner_of<Endpoint>(f);
		if (!name || !ops || flags)
			return -FI_EINVAL;
		if (std::strcmp(name, FI_RCOLL_FINISHING_COLL_OPS) != 0)
			return -FI_ENOSYS;
		if (!(ep->caps & FI_COLLECTIVE))
			return -FI_EOPNOTSUPP;
		*ops = const_cast<fi_rcoll_finishing_coll_ops*>(&finishing_collective_ops);
		return 0;
	});
}

int control_ep(fid* f, int command, void* arg)
{
	return guarded([&] {
		Endpoint* ep = owner_of<Endpoint>(f);
		std::lock_guard guard(ep->domain->lock);
		switch (command) {
		case FI_ENABLE: return ep->enable();
		case FI_GETOPSFLAG: {
			auto* flags = static_cast<uint64_t*>(arg);
			if (!flags)
				return -FI_EINVAL;
			*flags = (*flags & FI_TRANSMIT) ? ep->tx_op_flags : ep->rx_op_flags;
			return 0;
		}
		case FI_SETOPSFLAG: {
			auto* flags = static_cast<uint64_t*>(arg);
			if (!flags)
				return -FI_EINVAL;
			if (*flags & FI_TRANSMIT)
				ep->tx_op_flags = *flags & ~uint64_t(FI_TRANSMIT | FI_RECV);
			else
				ep->rx_op_flags = *flags & ~uint64_t(FI_TRANSMIT | FI_RECV);
			return 0;
		}
		default: return -FI_ENOSYS;
		}
	});
}

ssize_t cancel_ep(fid_t f, void* context)
{
	return guarded([&]() -> ssize_t {
		Endpoint* ep = owner_of<Endpoint>(f);
		std::lock_guard guard(ep->domain->lock);
		return ep->cancel(context);
	});
}

int getopt_ep(fid_t f, int level, int name, void* value, size_t* len)
{
	return guarded([&] {
		Endpoint* ep = owner_of<Endpoint>(f);
		if (level != FI_OPT_ENDPOINT || !value || !len)
			return -FI_ENOPROTOOPT;
		switch (name) {
		case FI_OPT_MIN_MULTI_RECV: {
			if (*len < sizeof(size_t))
				return -FI_ETOOSMALL;
			std::lock_guard guard(ep->domain->lock);
			*static_cast<size_t*>(value) = ep->min_multi_recv;
			*len = sizeof(size_t);
			return 0;
		}
		case FI_OPT_CM_DATA_SIZE: return -FI_ENOPROTOOPT;
		case FI_OPT_BUFFERED_LIMIT:
		case FI_OPT_BUFFERED_MIN:
			if (*len < sizeof(size_t))
				return -FI_ETOOSMALL;
			*static_cast<size_t*>(value) = ep->eager_limit;
			*len = sizeof(size_t);
			return 0;
		default: return -FI_ENOPROTOOPT;
		}
	});
}

int setopt_ep(fid_t f, int level, int name, const void* value, size_t len)
{
	return guarded([&] {
		Endpoint* ep = owner_of<Endpoint>(f);
		if (level != FI_OPT_ENDPOINT || name != FI_OPT_MIN_MULTI_RECV)
			return -FI_ENOPROTOOPT;
		if (!value || len != sizeof(size_t))
			return -FI_EINVAL;
		std::lock_guard guard(ep->domain->lock);
		ep->min_multi_recv = *static_cast<const size_t*>(value);
		return 0;
	});
}

ssize_t tx_size_left(fid_ep* f)
{
	return guarded([&]() -> ssize_t {
		Endpoint* ep = owner_of<Endpoint>(f);
		std::lock_guard guard(ep->domain->lock);
		return ssize_t(std::min(ep->tx.buffers->room(), ep->tx_room()));
	});
}

ssize_t rx_size_left(fid_ep* f)
{
	return guarded([&]() -> ssize_t {
		Endpoint* ep = owner_of<Endpoint>(f);
		return ssize_t(ep->info->rx_attr->size);
	});
}

int getname_ep(fid_t f, void* addr, size_t* addrlen)
{
	return guarded([&] {
		Endpoint* ep = owner_of<Endpoint>(f);
		if (!addrlen)
			return -FI_EINVAL;
		size_t have = *addrlen;
		*addrlen = sizeof(EpAddress);
		if (!addr || have < sizeof(EpAddress))
			return -FI_ETOOSMALL;
		memcpy(addr, &ep->address, sizeof(EpAddress));
		return 0;
	});
}

// The address is that of the core listener; it is bound when the endpoint
// is opened, so setname is only allowed to re-state it, not to move it.
int setname_ep(fid_t f, void* addr, size_t addrlen)
{
	return guarded([&] {
		Endpoint* ep = owner_of<Endpoint>(f);
		if (!addr || addrlen != sizeof(EpAddress))
			return -FI_EINVAL;
		EpAddress a;
		memcpy(&a, addr, sizeof(a));
		if (!a.valid() || !a.keyed())
			return -FI_EINVAL;
		std::lock_guard guard(ep->domain->lock);
		if (ep->enabled)
			return -FI_EOPBADSTATE;
		if (a.core_len != ep->address.core_len ||
		    memcmp(a.core, ep->address.core, a.core_len))
			return -FI_EOPNOTSUPP;
		ep->address.key = a.key;
		return 0;
	});
}

fi_ops_ep ep_ops = {
	.size = sizeof(fi_ops_ep),
	.cancel = cancel_ep,
	.getopt = getopt_ep,
	.setopt = setopt_ep,
	.tx_ctx = enosys<decltype(fi_ops_ep::tx_ctx)>,
	.rx_ctx = enosys<decltype(fi_ops_ep::rx_ctx)>,
	.rx_size_left = rx_size_left,
	.tx_size_left = tx_size_left,
};

int join_ep(fid_ep* f, const void* addr, uint64_t flags, fid_mc** mc, void* context)
{
	return int(with_ep(f, [&](Endpoint& ep) -> ssize_t {
		if (!ep.coll)
			return -FI_EOPNOTSUPP;
		return ep.coll->join(static_cast<const fi_collective_addr*>(addr), flags, mc,
				     context);
	}));
}

fi_ops_cm cm_ops = {
	.size = sizeof(fi_ops_cm),
	.setname = setname_ep,
	.getname = getname_ep,
	.getpeer = enosys<decltype(fi_ops_cm::getpeer)>,
	.connect = enosys<decltype(fi_ops_cm::connect)>,
	.listen = enosys<decltype(fi_ops_cm::listen)>,
	.accept = enosys<decltype(fi_ops_cm::accept)>,
	.reject = enosys<decltype(fi_ops_cm::reject)>,
	.shutdown = enosys<decltype(fi_ops_cm::shutdown)>,
	.join = join_ep,
};

fi_ops_atomic atomic_ops = {
	.size = sizeof(fi_ops_atomic),
	.write = enosys<decltype(fi_ops_atomic::write)>,
	.writev = enosys<decltype(fi_ops_atomic::writev)>,
	.writemsg = enosys<decltype(fi_ops_atomic::writemsg)>,
	.inject = enosys<decltype(fi_ops_atomic::inject)>,
	.readwrite = enosys<decltype(fi_ops_atomic::readwrite)>,
	.readwritev = enosys<decltype(fi_ops_atomic::readwritev)>,
	.readwritemsg = enosys<decltype(fi_ops_atomic::readwritemsg)>,
	.compwrite = enosys<decltype(fi_ops_atomic::compwrite)>,
	.compwritev = enosys<decltype(fi_ops_atomic::compwritev)>,
	.compwritemsg = enosys<decltype(fi_ops_atomic::compwritemsg)>,
	.writevalid = enosys<decltype(fi_ops_atomic::writevalid)>,
	.readwritevalid = enosys<decltype(fi_ops_atomic::readwritevalid)>,
	.compwritevalid = enosys<decltype(fi_ops_atomic::compwritevalid)>,
};

uint64_t random_key(std::mt19937_64& rng)
{
	uint64_t key;
	do
		key = rng();
	while (key == 0 || key == proto::kAnySource);
	return key;
}

// The core info an endpoint listens with: the source address of its own
// fi_info (the port it names, so that several endpoints of one domain do not
// all bind the domain's), else the domain's host on any port.
InfoPtr listener_info(const fi_info* core_info, const fi_info* ep_info)
{
	InfoPtr listen(fi_dupinfo(core_info));
	if (!listen)
		throw std::bad_alloc();
	const auto* own = static_cast<const EpAddress*>(ep_info->src_addr);
	if (own && ep_info->src_addrlen == sizeof(EpAddress) && own->valid()) {
		void* core = malloc(own->core_len);
		if (!core)
			throw std::bad_alloc();
		memcpy(core, own->core, own->core_len);
		free(listen->src_addr);
		listen->src_addr = core;
		listen->src_addrlen = own->core_len;
	} else if (listen->src_addr) {
		clear_port(listen->src_addr);
	}
	return listen;
}

} // namespace

int Endpoint::open(Domain* domain, fi_info* info, fid_ep** out, void* context)
{
	if (!info || !out || !info->ep_attr)
		return -FI_EINVAL;
	if (info->ep_attr->type != FI_EP_RDM) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "only FI_EP_RDM endpoints\n");
		return -FI_EINVAL;
	}
	const Config& cfg = config();
	auto ep = std::make_unique<Endpoint>();
	ep->domain = domain;
	ep->info.reset(fi_dupinfo(info));
	if (!ep->info)
		return -FI_ENOMEM;
	ep->caps = info->caps ? info->caps : domain->info->caps;
	ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags : 0;
	ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : 0;
	ep->eager_limit = eager_size_for(domain->core_info.get());
	// As ofi_rxm: room for at least one message that arrives whole.
	ep->min_multi_recv = ep->eager_limit;
	if (const fi_tx_attr* core_tx = domain->core_info->tx_attr) {
		ep->tx.inject_size = core_tx->inject_size;
		ep->tx.iov_limit = core_tx->iov_limit;
	}

	std::random_device seed;
	std::mt19937_64 rng((uint64_t(seed()) << 32) ^ seed() ^
			    uint64_t(reinterpret_cast<uintptr_t>(ep.get())));
	ep->address.key = random_key(rng);
	ep->host = local::host_identity();
	ep->slot_random = proto::SlotRandom(rng());

	fid_fabric* core_fabric = domain->fabric->core.get();
	fid_domain* core_domain = domain->core.get();
	fi_eq_attr eq_attr{};
	eq_attr.wait_obj = FI_WAIT_FD;
	fid_eq* eq = nullptr;
	int ret = fi_eq_open(core_fabric, &eq_attr, &eq, nullptr);
	if (ret) {
		eq_attr.wait_obj = FI_WAIT_NONE;
		ret = fi_eq_open(core_fabric, &eq_attr, &eq, nullptr);
	}
	if (ret) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "core fi_eq_open: %s\n", fi_strerror(-ret));
		return ret;
	}
	ep->core.eq.reset(eq);

	// No wait object on the core CQ: with one, the tcp core polls its
	// sockets through the wait set's epoll on every read, and signals a
	// descriptor for every completion; that doubles the system calls of a
	// round trip. Blocking waits sleep in short slices instead (wait.cpp).
	fi_cq_attr cq_attr{};
	cq_attr.format = FI_CQ_FORMAT_DATA;
	cq_attr.wait_obj = FI_WAIT_NONE;
	cq_attr.size = cfg.rx_pool_max + cfg.tx_pool_size + 64;
	fid_cq* cq = nullptr;
	ret = fi_cq_open(core_domain, &cq_attr, &cq, nullptr);
	if (ret) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "core fi_cq_open: %s\n", fi_strerror(-ret));
		return ret;
	}
	ep->core.cq.reset(cq);

	fi_rx_attr rx_attr{};
	rx_attr.size = cfg.rx_pool_max;
	rx_attr.iov_limit = 1;
	fid_ep* srx = nullptr;
	ret = fi_srx_context(core_domain, &rx_attr, &srx, nullptr);
	if (ret) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "core fi_srx_context: %s\n", fi_strerror(-ret));
		return ret;
	}
	ep->core.srx.reset(srx);

	fid_pep* pep = nullptr;
	InfoPtr listen_info = listener_info(domain->core_info.get(), info);
	ret = fi_passive_ep(core_fabric, listen_info.get(), &pep, nullptr);
	if (ret) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "core fi_passive_ep: %s\n", fi_strerror(-ret));
		return ret;
	}
	ep->core.pep.reset(pep);
	if ((ret = fi_pep_bind(pep, &ep->core.eq->fid, 0)) || (ret = fi_listen(pep))) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "core listen: %s\n", fi_strerror(-ret));
		return ret;
	}
	size_t len = EpAddress::kCoreMax;
	ret = fi_getname(&pep->fid, ep->address.core, &len);
	if (ret || len > EpAddress::kCoreMax) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "core fi_getname: %s\n",
			   ret ? fi_strerror(-ret) : "too long");
		return ret ? ret : -FI_EINVAL;
	}
	ep->address.core_len = uint16_t(len);

	ep->core.registrar = std::make_unique<CoreRegistrar>(*domain);
	proto::ReceivePoolConfig rx;
	rx.buffer_size = proto::kBounceOverhead + ep->eager_limit;
	rx.buffers_per_chunk = 64;
	rx.target_posted = cfg.rx_posted;
	rx.low_watermark = cfg.rx_low_watermark;
	rx.max_buffers = cfg.rx_pool_max;
	ep->rx.buffers = std::make_unique<ReceiveBuffers>(
		std::make_unique<proto::ReceivePool>(*ep->core.registrar, rx));
	if ((ret = ep->rx.buffers->init()))
		return ret;
	proto::BufferPoolConfig tx;
	tx.buffer_size = proto::kBounceOverhead + ep->eager_limit;
	tx.buffers_per_chunk = 64;
	tx.max_buffers = cfg.tx_pool_size;
	const fi_tx_attr* tx_attr = info->tx_attr;
	ep->tx.size = tx_attr && tx_attr->size ? std::min(tx_attr->size, cfg.tx_pool_size)
					       : cfg.tx_pool_size;
	ep->tx.buffers = std::make_unique<TransmitBuffers>(
		std::make_unique<proto::TransmitPool>(*ep->core.registrar, tx));

	ep->shell.owner = ep.get();
	ep->shell.fid.fid.fclass = FI_CLASS_EP;
	ep->shell.fid.fid.context = context;
	ep->shell.fid.fid.ops = &fid_ops_table<close_ep, bind_ep, control_ep, ops_open_ep>;
	ep->shell.fid.ops = &ep_ops;
	ep->shell.fid.cm = &cm_ops;
	ep->shell.fid.msg = &msg_ops;
	ep->shell.fid.tagged = &tagged_ops;
	ep->shell.fid.rma = &rma_ops_table;
	if (ep->caps & FI_COLLECTIVE)
		ep->coll = std::make_unique<Collectives>(*ep);
	ep->shell.fid.atomic = &atomic_ops;
	ep->shell.fid.collective = &collective_ops;
	{
		std::lock_guard guard(domain->lock);
		domain->endpoints.push_back(ep.get());
	}
	domain->children++;
	RCOLL_INFO(FI_LOG_EP_CTRL, "endpoint %s\n", ep->address.to_string().c_str());
	*out = &ep.release()->shell.fid;
	return 0;
}

int Endpoint::enable()
{
	if (enabled)
		return 0;
	if (!app.av) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_enable: no address vector bound\n");
		return -FI_ENOAV;
	}
	if (!app.tx_cq || !app.rx_cq) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_enable: bind CQs for FI_TRANSMIT and FI_RECV\n");
		return -FI_ENOCQ;
	}
	enabled = true;
	refill_rx();
	return 0;
}

namespace {

// Lets what this endpoint sent reach its peers before the connections
// close. A completed send has only left this process: the core may still
// hold it in a socket, and a socket closed with unread data in it (a peer's
// late message) is reset, which drops what was still queued for that peer.
// So: progress until every send completed locally, every injected message
// is proven to have left (a probe, which carries a completion, follows the
// unproven ones: InjectLedger) and nothing arrived for a short quiet
// period, within FI_RCOLL_LINGER_MS.
void linger(Endpoint& ep)
{
	using clock = std::chrono::steady_clock;
	if (!ep.enabled || !config().linger_ms)
		return;
	auto unproven = [&ep](const Peer& peer) {
		return peer.state == Peer::State::connected && !peer.injects.all_proven();
	};
	for (const auto& peer : ep.peers) {
		if (unproven(*peer))
			ep.send_probe(*peer);
	}
	const auto start = clock::now();
	const auto deadline = start + std::chrono::milliseconds(config().linger_ms);
	const auto quiet = std::chrono::milliseconds(std::min<size_t>(20, config().linger_ms));
	auto last_activity = start;
	for (auto now = start; now < deadline; now = clock::now()) {
		bool busy = !ep.tx.buffers->all_free() || !ep.rma_ops.empty() ||
			    (ep.coll && ep.coll->busy()) ||
			    std::any_of(ep.peers.begin(), ep.peers.end(),
					[&](const auto& p) { return unproven(*p); });
		if (ep.progress() > 0 || busy)
			last_activity = now;
		else if (now - last_activity > quiet)
			return;
		std::this_thread::yield();
	}
}

} // namespace

Endpoint::~Endpoint()
{
	linger(*this);
	// Connections first (they hold posted buffers of the shared receive
	// context and registrations of the pools), then the core queues, then
	// the pools.
	for (auto& p : peers) {
		p->conn.reset();
		p->losing.reset();
		p->passive.reset();
	}
	graveyard.clear();
	coll.reset(); // its scratch registrations, now that no connection writes into them
	core.pep.reset();
	core.srx.reset();
	core.cq.reset();
	core.eq.reset();
	rma_ops.clear();
	// Messages no receive took: rcoll allocated them (deliver).
	for (proto::MatchQueue* q : {&rx.msg_queue, &rx.tagged_queue})
		q->drain_unexpected([](proto::UnexpectedMessage& m) {
			delete static_cast<Unexpected*>(m.context);
		});
	tx.sends = {};
	rx.recvs = {};
	rx.buffers.reset();
	tx.buffers.reset();
}

} // namespace rcoll
