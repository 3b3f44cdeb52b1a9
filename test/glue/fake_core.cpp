// The "fake" core provider (fake_core.hpp): in-process MSG endpoints for the
// glue tests. Every operation is queued on one wire and delivered, in order
// per connection, whenever some CQ or EQ of the process is read.
#include "fake_core.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/providers/fi_prov.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <unordered_map>
#include <vector>

namespace fake_core {
namespace {

constexpr uint64_t kCaps =
	FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kStrictMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
constexpr size_t kInjectSize = 64;
constexpr size_t kIovLimit = 4;

struct Cq;
struct Eq;
struct Ep;

struct Fabric : fid_fabric {};

struct Domain : fid_domain {
	uint64_t mr_mode = 0;
};

struct Mr : fid_mr {
	Domain* domain;
	const std::byte* addr;
	size_t len;
	uint64_t access;
};

struct CqEntry {
	bool error = false;
	fi_cq_data_entry ok{};
	fi_cq_err_entry err{};
};

struct Cq : fid_cq {
	int owner;
	std::deque<CqEntry> entries;
};

struct EqEvent {
	uint32_t type = 0;
	fid_t fid = nullptr;
	fi_info* info = nullptr; // FI_CONNREQ: handed to the reader
	std::vector<uint8_t> data;
	int err = 0; // an error entry
};

struct Eq : fid_eq {
	int owner;
	std::deque<EqEvent> events;
};

struct Posted {
	void* buf;
	size_t len;
	void* desc;
	void* context;
};

struct Srx : fid_ep {
	Domain* domain;
	std::deque<Posted> posted;
};

struct Pep : fid_pep {
	fi_info* info = nullptr;
	Eq* eq = nullptr;
	sockaddr_in addr{};
	bool listening = false;
};

// The handle of a connection request, until it is accepted or rejected.
struct ConnReq : fid {
	Ep* from;
	Pep* to;
};

enum class State { Idle, Connecting, Connected, Down };

struct Ep : fid_ep {
	Domain* domain;
	Cq* cq = nullptr;
	Eq* eq = nullptr;
	Srx* srx = nullptr;
	Ep* peer = nullptr;
	ConnReq* request = nullptr; // the accepting half, until fi_accept
	State state = State::Idle;
	sockaddr_in local{}, remote{};
	int owner() const { return cq ? cq->owner : -1; }
};

struct Segment {
	std::byte* buf;
	size_t len;
	void* desc;
};

struct WireOp {
	Transfer info;
	Ep* from;
	Ep* to;
	std::vector<Segment> local;  // gathered (send, write) or scattered into (read)
	std::vector<std::byte> copy; // inject: the data, taken at post time
	uint64_t addr = 0, key = 0, data = 0;
	void* context = nullptr;
	bool completion = true;
};

struct Net {
	Plan plan;
	Stats stats;
	std::deque<WireOp> wire;
	std::set<Pep*> listeners;
	std::set<Ep*> eps;
	std::set<ConnReq*> requests;
	std::unordered_map<uint64_t, Mr*> mrs;
	std::set<int> dead;
	uint64_t next_key = 0x1000;
	uint16_t next_port = 41000;
	int cqs_opened = 0, eqs_opened = 0;
	bool pumping = false;
};

Net& net()
{
	static Net n;
	return n;
}

sockaddr_in loopback(uint16_t port)
{
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(port);
	return a;
}

bool same_address(const sockaddr_in& a, const sockaddr_in& b)
{
	return a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
}

// Every object derives from its libfabric struct alone, whose first member
// is the fid: the fid's address is the object's.
template <class T>
T* self(fid* f)
{
	return reinterpret_cast<T*>(f);
}

// --- completions and events --------------------------------------------

void complete(Cq* cq, void* context, uint64_t flags, size_t len, void* buf = nullptr,
	      uint64_t data = 0)
{
	if (!cq)
		return;
	CqEntry e;
	e.ok = {.op_context = context, .flags = flags, .len = len, .buf = buf, .data = data};
	cq->entries.push_back(e);
}

CqEntry error_entry(void* context, uint64_t flags, int err)
{
	CqEntry e;
	e.error = true;
	e.err.op_context = context;
	e.err.flags = flags;
	e.err.err = err;
	e.err.prov_errno = -err;
	return e;
}

void post_event(Eq* eq, uint32_t type, fid_t fid, const void* data = nullptr, size_t len = 0)
{
	if (!eq)
		return;
	EqEvent ev;
	ev.type = type;
	ev.fid = fid;
	if (len)
		ev.data.assign(static_cast<const uint8_t*>(data),
			       static_cast<const uint8_t*>(data) + len);
	eq->events.push_back(std::move(ev));
}

void post_error(Eq* eq, fid_t fid, int err)
{
	if (!eq)
		return;
	EqEvent ev;
	ev.fid = fid;
	ev.err = err;
	eq->events.push_back(std::move(ev));
}

uint64_t local_flags(Kind kind)
{
	switch (kind) {
	case Kind::Send: return FI_SEND | FI_MSG;
	case Kind::Write: return FI_WRITE | FI_RMA;
	case Kind::Read: return FI_READ | FI_RMA;
	}
	return 0;
}

// A connection ends: both halves see FI_SHUTDOWN; what is still on the wire
// for it fails when the wire reaches it.
void break_connection(Ep* ep)
{
	if (!ep || ep->state != State::Connected)
		return;
	Ep* peer = ep->peer;
	ep->state = State::Down;
	post_event(ep->eq, FI_SHUTDOWN, &ep->fid);
	if (peer && peer->state == State::Connected) {
		peer->state = State::Down;
		post_event(peer->eq, FI_SHUTDOWN, &peer->fid);
	}
	net().stats.shutdowns++;
}

bool connected(const WireOp& op)
{
	return op.from->state == State::Connected && op.to && op.to->state == State::Connected &&
	       op.to->peer == op.from && !net().dead.count(op.info.to);
}

// Like verbs' lkey check: with FI_MR_LOCAL every local buffer lies inside
// the registration its descriptor names.
bool local_ok(const Domain* domain, const void* buf, size_t len, void* desc)
{
	if (!(domain->mr_mode & FI_MR_LOCAL) || !len)
		return true;
	auto* mr = static_cast<Mr*>(desc);
	auto it = mr ? net().mrs.find(mr->key) : net().mrs.end();
	const auto* b = static_cast<const std::byte*>(buf);
	if (it == net().mrs.end() || it->second != mr || b < mr->addr ||
	    b + len > mr->addr + mr->len) {
		net().stats.bad_descriptors++;
		return false;
	}
	return true;
}

// The target memory of an RMA: key, range and access checked like tcp does.
std::byte* remote_memory(uint64_t addr, uint64_t key, size_t len, uint64_t access)
{
	auto it = net().mrs.find(key);
	if (it == net().mrs.end())
		return nullptr;
	const Mr* mr = it->second;
	auto* p = reinterpret_cast<const std::byte*>(uintptr_t(addr));
	if (!(mr->access & access) || p < mr->addr || p + len > mr->addr + mr->len)
		return nullptr;
	return const_cast<std::byte*>(p);
}

enum class Outcome { Done, Blocked };

Outcome deliver(WireOp& op, std::vector<std::pair<Cq*, CqEntry>>& local)
{
	for (const Segment& s : op.local) {
		if (!local_ok(op.from->domain, s.buf, s.len, s.desc)) {
			if (op.completion)
				local.emplace_back(
					op.from->cq,
					error_entry(op.context, local_flags(op.info.kind), FI_EIO));
			return Outcome::Done;
		}
	}
	auto gather = [&](std::byte* out) {
		if (!op.copy.empty()) {
			memcpy(out, op.copy.data(), op.copy.size());
			return;
		}
		for (const Segment& s : op.local) {
			memcpy(out, s.buf, s.len);
			out += s.len;
		}
	};
	Ep* to = op.to;
	switch (op.info.kind) {
	case Kind::Send: {
		if (!to->srx || to->srx->posted.empty())
			return Outcome::Blocked;
		Posted p = to->srx->posted.front();
		to->srx->posted.pop_front();
		if (op.info.len > p.len) {
			if (to->cq)
				to->cq->entries.push_back(
					error_entry(p.context, FI_RECV | FI_MSG, FI_ETRUNC));
			break_connection(op.from);
			break;
		}
		gather(static_cast<std::byte*>(p.buf));
		complete(to->cq, p.context, FI_RECV | FI_MSG, op.info.len, p.buf);
		break;
	}
	case Kind::Write: {
		std::byte* target = remote_memory(op.addr, op.key, op.info.len, FI_REMOTE_WRITE);
		if (!target) {
			break_connection(op.from); // the initiator still sees success, as on tcp
			break;
		}
		gather(target);
		if (op.info.immediate)
			complete(to->cq, nullptr, FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA, 0,
				 nullptr, op.data & 0xffffffffu);
		break;
	}
	case Kind::Read: {
		std::byte* source = remote_memory(op.addr, op.key, op.info.len, FI_REMOTE_READ);
		if (!source) {
			break_connection(op.from);
			if (op.completion)
				local.emplace_back(
					op.from->cq,
					error_entry(op.context, FI_READ | FI_RMA, FI_EIO));
			return Outcome::Done;
		}
		for (const Segment& s : op.local) {
			memcpy(s.buf, source, s.len);
			source += s.len;
		}
		break;
	}
	}
	net().stats.delivered++;
	if (op.completion) {
		CqEntry e;
		e.ok = {.op_context = op.context,
			.flags = local_flags(op.info.kind),
			.len = op.info.kind == Kind::Read ? op.info.len : 0,
			.buf = nullptr,
			.data = 0};
		local.emplace_back(op.from->cq, e);
	}
	return Outcome::Done;
}

// Moves what can move, in wire order per connection.
void pump()
{
	Net& n = net();
	if (n.pumping)
		return;
	n.pumping = true;
	std::vector<std::pair<Cq*, CqEntry>> local;
	std::set<Ep*> held;
	for (auto it = n.wire.begin(); it != n.wire.end();) {
		WireOp& op = *it;
		if (held.count(op.from)) {
			++it;
			continue;
		}
		if (!connected(op)) {
			if (op.completion)
				local.emplace_back(op.from->cq,
						   error_entry(op.context,
							       local_flags(op.info.kind),
							       FI_ECONNRESET));
			it = n.wire.erase(it);
			continue;
		}
		const Verdict v = n.plan.deliver ? n.plan.deliver(op.info) : Verdict::Deliver;
		if (v == Verdict::Break) {
			break_connection(op.from);
			continue; // fails above
		}
		if (v == Verdict::Hold || deliver(op, local) == Outcome::Blocked) {
			held.insert(op.from);
			++it;
			continue;
		}
		it = n.wire.erase(it);
	}
	if (n.plan.reverse_completions)
		std::reverse(local.begin(), local.end());
	for (auto& [cq, e] : local)
		if (cq)
			cq->entries.push_back(e);
	n.pumping = false;
}

ssize_t post(Ep* ep, Kind kind, std::vector<Segment> segments, const void* inject, size_t len,
	     uint64_t addr, uint64_t key, bool immediate, uint64_t data, void* context,
	     bool completion)
{
	Net& n = net();
	if (segments.size() > kIovLimit || (inject && len > kInjectSize))
		return -FI_EINVAL;
	if (ep->state != State::Connected && ep->state != State::Down)
		return -FI_ENOTCONN;
	WireOp op;
	op.info = {.kind = kind,
		   .len = len,
		   .immediate = immediate,
		   .from = ep->owner(),
		   .to = ep->peer ? ep->peer->owner() : -1,
		   .ordinal = ++n.stats.posted};
	if (n.plan.refuse && n.plan.refuse(op.info)) {
		n.stats.refused++;
		return -FI_EAGAIN;
	}
	if (n.plan.fail) {
		if (int err = n.plan.fail(op.info)) {
			n.stats.failed++;
			return err;
		}
	}
	if (n.dead.count(op.info.from))
		return 0; // a dead process sends nothing
	op.from = ep;
	op.to = ep->peer;
	op.local = std::move(segments);
	if (inject)
		op.copy.assign(static_cast<const std::byte*>(inject),
			       static_cast<const std::byte*>(inject) + len);
	op.addr = addr;
	op.key = key;
	op.data = data;
	op.context = context;
	op.completion = completion;
	n.wire.push_back(std::move(op));
	return 0;
}

Ep* ep_of(fid_ep* f) { return static_cast<Ep*>(f); }

std::vector<Segment> one(const void* buf, size_t len, void* desc)
{
	return {Segment{static_cast<std::byte*>(const_cast<void*>(buf)), len, desc}};
}

std::vector<Segment> gathered(const iovec* iov, void** desc, size_t count, size_t& total)
{
	std::vector<Segment> s;
	total = 0;
	for (size_t i = 0; i < count; i++) {
		s.push_back({static_cast<std::byte*>(iov[i].iov_base), iov[i].iov_len,
			     desc ? desc[i] : nullptr});
		total += iov[i].iov_len;
	}
	return s;
}

// --- message and RMA operations ----------------------------------------

ssize_t ep_recv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t, void* context)
{
	auto* srx = static_cast<Srx*>(f);
	if (!local_ok(srx->domain, buf, len, desc))
		return -FI_EINVAL;
	srx->posted.push_back({buf, len, desc, context});
	return 0;
}

ssize_t ep_send(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t, void* context)
{
	return post(ep_of(f), Kind::Send, one(buf, len, desc), nullptr, len, 0, 0, false, 0,
		    context, true);
}

ssize_t ep_sendmsg(fid_ep* f, const fi_msg* msg, uint64_t flags)
{
	size_t total;
	auto segments = gathered(msg->msg_iov, msg->desc, msg->iov_count, total);
	return post(ep_of(f), Kind::Send, std::move(segments), nullptr, total, 0, 0, false, 0,
		    msg->context, !(flags & FI_INJECT) || (flags & FI_COMPLETION));
}

ssize_t ep_inject(fid_ep* f, const void* buf, size_t len, fi_addr_t)
{
	return post(ep_of(f), Kind::Send, {}, buf, len, 0, 0, false, 0, nullptr, false);
}

ssize_t ep_write(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t, uint64_t addr,
		 uint64_t key, void* context)
{
	return post(ep_of(f), Kind::Write, one(buf, len, desc), nullptr, len, addr, key, false, 0,
		    context, true);
}

ssize_t ep_writedata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t,
		     uint64_t addr, uint64_t key, void* context)
{
	return post(ep_of(f), Kind::Write, one(buf, len, desc), nullptr, len, addr, key, true, data,
		    context, true);
}

ssize_t ep_inject_write(fid_ep* f, const void* buf, size_t len, fi_addr_t, uint64_t addr,
			uint64_t key)
{
	return post(ep_of(f), Kind::Write, {}, buf, len, addr, key, false, 0, nullptr, false);
}

ssize_t ep_inject_writedata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t,
			    uint64_t addr, uint64_t key)
{
	return post(ep_of(f), Kind::Write, {}, buf, len, addr, key, true, data, nullptr, false);
}

ssize_t ep_read(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t, uint64_t addr,
		uint64_t key, void* context)
{
	return post(ep_of(f), Kind::Read, one(buf, len, desc), nullptr, len, addr, key, false, 0,
		    context, true);
}

ssize_t no_recvv(fid_ep*, const iovec*, void**, size_t, fi_addr_t, void*) { return -FI_ENOSYS; }
ssize_t no_recvmsg(fid_ep*, const fi_msg*, uint64_t) { return -FI_ENOSYS; }
ssize_t no_sendv(fid_ep*, const iovec*, void**, size_t, fi_addr_t, void*) { return -FI_ENOSYS; }
ssize_t no_senddata(fid_ep*, const void*, size_t, void*, uint64_t, fi_addr_t, void*)
{
	return -FI_ENOSYS;
}
ssize_t no_injectdata(fid_ep*, const void*, size_t, uint64_t, fi_addr_t) { return -FI_ENOSYS; }
ssize_t no_recv(fid_ep*, void*, size_t, void*, fi_addr_t, void*) { return -FI_ENOSYS; }
ssize_t no_send(fid_ep*, const void*, size_t, void*, fi_addr_t, void*) { return -FI_ENOSYS; }
ssize_t no_sendmsg(fid_ep*, const fi_msg*, uint64_t) { return -FI_ENOSYS; }
ssize_t no_inject(fid_ep*, const void*, size_t, fi_addr_t) { return -FI_ENOSYS; }
ssize_t no_rmav(fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, uint64_t, void*)
{
	return -FI_ENOSYS;
}
ssize_t no_rmamsg(fid_ep*, const fi_msg_rma*, uint64_t) { return -FI_ENOSYS; }

fi_ops_msg ep_msg_ops = {
	.size = sizeof(fi_ops_msg),
	.recv = no_recv,
	.recvv = no_recvv,
	.recvmsg = no_recvmsg,
	.send = ep_send,
	.sendv = no_sendv,
	.sendmsg = ep_sendmsg,
	.inject = ep_inject,
	.senddata = no_senddata,
	.injectdata = no_injectdata,
};

fi_ops_msg srx_msg_ops = {
	.size = sizeof(fi_ops_msg),
	.recv = ep_recv,
	.recvv = no_recvv,
	.recvmsg = no_recvmsg,
	.send = no_send,
	.sendv = no_sendv,
	.sendmsg = no_sendmsg,
	.inject = no_inject,
	.senddata = no_senddata,
	.injectdata = no_injectdata,
};

fi_ops_rma ep_rma_ops = {
	.size = sizeof(fi_ops_rma),
	.read = ep_read,
	.readv = no_rmav,
	.readmsg = no_rmamsg,
	.write = ep_write,
	.writev = no_rmav,
	.writemsg = no_rmamsg,
	.inject = ep_inject_write,
	.writedata = ep_writedata,
	.injectdata = ep_inject_writedata,
};

// --- connection management ---------------------------------------------

int cm_setname(fid_t, void*, size_t) { return -FI_ENOSYS; }

int cm_getname(fid_t f, void* addr, size_t* len)
{
	const sockaddr_in& a = f->fclass == FI_CLASS_PEP ? self<Pep>(f)->addr : self<Ep>(f)->local;
	const size_t need = sizeof(a);
	if (*len < need) {
		*len = need;
		return -FI_ETOOSMALL;
	}
	memcpy(addr, &a, need);
	*len = need;
	return 0;
}

int cm_getpeer(fid_ep* f, void* addr, size_t* len)
{
	if (*len < sizeof(sockaddr_in)) {
		*len = sizeof(sockaddr_in);
		return -FI_ETOOSMALL;
	}
	memcpy(addr, &ep_of(f)->remote, sizeof(sockaddr_in));
	*len = sizeof(sockaddr_in);
	return 0;
}

int cm_connect(fid_ep* f, const void* addr, const void* param, size_t paramlen)
{
	Net& n = net();
	Ep* ep = ep_of(f);
	if (ep->state != State::Idle || !ep->eq)
		return -FI_EINVAL;
	n.stats.connects++;
	memcpy(&ep->remote, addr, sizeof(sockaddr_in));
	ep->local = loopback(n.next_port++);
	ep->state = State::Connecting;
	Pep* to = nullptr;
	for (Pep* pep : n.listeners)
		if (pep->listening && same_address(pep->addr, ep->remote) &&
		    !(pep->eq && n.dead.count(pep->eq->owner)))
			to = pep;
	if (!to) {
		ep->state = State::Idle;
		post_error(ep->eq, &ep->fid, FI_ECONNREFUSED);
		return 0;
	}
	auto* req = new ConnReq{};
	req->fclass = FI_CLASS_CONNREQ;
	req->from = ep;
	req->to = to;
	n.requests.insert(req);
	EqEvent ev;
	ev.type = FI_CONNREQ;
	ev.fid = &to->fid;
	ev.info = fi_dupinfo(to->info);
	ev.info->handle = req;
	if (paramlen)
		ev.data.assign(static_cast<const uint8_t*>(param),
			       static_cast<const uint8_t*>(param) + paramlen);
	to->eq->events.push_back(std::move(ev));
	return 0;
}

int cm_listen(fid_pep* f)
{
	auto* pep = static_cast<Pep*>(f);
	pep->listening = true;
	net().listeners.insert(pep);
	return 0;
}

int cm_accept(fid_ep* f, const void* param, size_t paramlen)
{
	Net& n = net();
	Ep* ep = ep_of(f);
	ConnReq* req = ep->request;
	if (!req || !ep->eq)
		return -FI_EINVAL;
	ep->request = nullptr;
	Ep* from = req->from;
	n.requests.erase(req);
	delete req;
	if (!from || from->state != State::Connecting)
		return -FI_ECONNABORTED;
	n.stats.accepts++;
	ep->peer = from;
	from->peer = ep;
	ep->local = from->remote;
	ep->remote = from->local;
	ep->state = from->state = State::Connected;
	post_event(ep->eq, FI_CONNECTED, &ep->fid);
	post_event(from->eq, FI_CONNECTED, &from->fid, param, paramlen);
	return 0;
}

int cm_reject(fid_pep*, fid_t handle, const void*, size_t)
{
	Net& n = net();
	auto* req = static_cast<ConnReq*>(handle);
	if (!n.requests.count(req))
		return -FI_EINVAL;
	n.requests.erase(req);
	n.stats.rejects++;
	if (Ep* from = req->from) {
		from->state = State::Idle;
		post_error(from->eq, &from->fid, FI_ECONNREFUSED);
	}
	delete req;
	return 0;
}

int cm_shutdown(fid_ep* f, uint64_t)
{
	break_connection(ep_of(f));
	return 0;
}

int cm_join(fid_ep*, const void*, uint64_t, fid_mc**, void*) { return -FI_ENOSYS; }

fi_ops_cm cm_ops = {
	.size = sizeof(fi_ops_cm),
	.setname = cm_setname,
	.getname = cm_getname,
	.getpeer = cm_getpeer,
	.connect = cm_connect,
	.listen = cm_listen,
	.accept = cm_accept,
	.reject = cm_reject,
	.shutdown = cm_shutdown,
	.join = cm_join,
};

ssize_t no_cancel(fid_t, void*) { return -FI_ENOSYS; }
int no_getopt(fid_t, int, int, void*, size_t*) { return -FI_ENOPROTOOPT; }
int no_setopt(fid_t, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; }
int no_ctx(fid_ep*, int, fi_tx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int no_rx_ctx(fid_ep*, int, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
ssize_t no_size_left(fid_ep*) { return -FI_ENOSYS; }

fi_ops_ep ep_ops = {
	.size = sizeof(fi_ops_ep),
	.cancel = no_cancel,
	.getopt = no_getopt,
	.setopt = no_setopt,
	.tx_ctx = no_ctx,
	.rx_ctx = no_rx_ctx,
	.rx_size_left = no_size_left,
	.tx_size_left = no_size_left,
};

// --- fids --------------------------------------------------------------

int no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int no_control(fid*, int, void*) { return -FI_ENOSYS; }
int no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int no_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int no_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

template <int (*Close)(fid*), int (*Bind)(fid*, fid*, uint64_t) = no_bind,
	  int (*Control)(fid*, int, void*) = no_control>
fi_ops fid_ops = {
	.size = sizeof(fi_ops),
	.close = Close,
	.bind = Bind,
	.control = Control,
	.ops_open = no_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

// A closed fid's events go with it, as libfabric's own EQs drop them.
void drop_events(Eq* eq, const fid* f)
{
	if (!eq)
		return;
	std::erase_if(eq->events, [&](EqEvent& ev) {
		if (ev.fid != f)
			return false;
		fi_freeinfo(ev.info);
		return true;
	});
}

int close_ep(fid* f)
{
	Net& n = net();
	Ep* ep = self<Ep>(f);
	if (ep->state == State::Connected && ep->peer && ep->peer->state == State::Connected) {
		ep->peer->state = State::Down;
		post_event(ep->peer->eq, FI_SHUTDOWN, &ep->peer->fid);
		n.stats.shutdowns++;
	}
	if (ep->peer && ep->peer->peer == ep)
		ep->peer->peer = nullptr;
	// What it still had on the wire is discarded with it; what others sent
	// it fails at their end.
	for (auto it = n.wire.begin(); it != n.wire.end();) {
		if (it->from == ep) {
			it = n.wire.erase(it);
		} else if (it->to == ep) {
			if (it->completion && it->from->cq)
				it->from->cq->entries.push_back(error_entry(
					it->context, local_flags(it->info.kind), FI_ECONNRESET));
			it = n.wire.erase(it);
		} else {
			++it;
		}
	}
	for (ConnReq* req : n.requests)
		if (req->from == ep)
			req->from = nullptr;
	drop_events(ep->eq, &ep->fid);
	if (ep->request) {
		n.requests.erase(ep->request);
		delete ep->request;
	}
	n.eps.erase(ep);
	delete ep;
	return 0;
}

int bind_ep(fid* f, fid* bf, uint64_t)
{
	Ep* ep = self<Ep>(f);
	switch (bf->fclass) {
	case FI_CLASS_CQ: ep->cq = self<Cq>(bf); return 0;
	case FI_CLASS_EQ: ep->eq = self<Eq>(bf); return 0;
	case FI_CLASS_SRX_CTX: ep->srx = self<Srx>(bf); return 0;
	default: return -FI_EINVAL;
	}
}

int control_ep(fid*, int command, void*) { return command == FI_ENABLE ? 0 : -FI_ENOSYS; }

int close_srx(fid* f)
{
	delete self<Srx>(f);
	return 0;
}

int close_pep(fid* f)
{
	Pep* pep = self<Pep>(f);
	net().listeners.erase(pep);
	// Requests not taken yet go with it (their connectors wait in vain, as
	// for a listener that closed without answering).
	drop_events(pep->eq, &pep->fid);
	for (ConnReq* req : net().requests)
		if (req->to == pep)
			req->to = nullptr;
	fi_freeinfo(pep->info);
	delete pep;
	return 0;
}

int bind_pep(fid* f, fid* bf, uint64_t)
{
	if (bf->fclass != FI_CLASS_EQ)
		return -FI_EINVAL;
	self<Pep>(f)->eq = self<Eq>(bf);
	return 0;
}

int close_cq(fid* f)
{
	delete self<Cq>(f);
	return 0;
}

int close_eq(fid* f)
{
	Eq* eq = self<Eq>(f);
	for (EqEvent& ev : eq->events)
		fi_freeinfo(ev.info);
	delete eq;
	return 0;
}

int close_mr(fid* f)
{
	Mr* mr = self<Mr>(f);
	net().mrs.erase(mr->key);
	delete mr;
	return 0;
}

int close_domain(fid* f)
{
	delete self<Domain>(f);
	return 0;
}

int close_fabric(fid* f)
{
	delete self<Fabric>(f);
	return 0;
}

// --- CQ and EQ ---------------------------------------------------------

ssize_t cq_read(fid_cq* f, void* buf, size_t count)
{
	pump();
	Cq* cq = static_cast<Cq*>(f);
	auto* out = static_cast<fi_cq_data_entry*>(buf);
	size_t n = 0;
	while (n < count && !cq->entries.empty() && !cq->entries.front().error) {
		out[n++] = cq->entries.front().ok;
		cq->entries.pop_front();
	}
	if (n)
		return ssize_t(n);
	return cq->entries.empty() ? -FI_EAGAIN : -FI_EAVAIL;
}

ssize_t cq_readfrom(fid_cq* f, void* buf, size_t count, fi_addr_t*)
{
	return cq_read(f, buf, count);
}

ssize_t cq_readerr(fid_cq* f, fi_cq_err_entry* buf, uint64_t)
{
	Cq* cq = static_cast<Cq*>(f);
	if (cq->entries.empty() || !cq->entries.front().error)
		return -FI_EAGAIN;
	*buf = cq->entries.front().err;
	cq->entries.pop_front();
	return 1;
}

ssize_t cq_sread(fid_cq*, void*, size_t, const void*, int) { return -FI_ENOSYS; }
ssize_t cq_sreadfrom(fid_cq*, void*, size_t, fi_addr_t*, const void*, int) { return -FI_ENOSYS; }
int cq_signal(fid_cq*) { return -FI_ENOSYS; }
const char* cq_strerror(fid_cq*, int, const void*, char*, size_t) { return "fake core error"; }

fi_ops_cq cq_ops = {
	.size = sizeof(fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom,
	.readerr = cq_readerr,
	.sread = cq_sread,
	.sreadfrom = cq_sreadfrom,
	.signal = cq_signal,
	.strerror = cq_strerror,
};

ssize_t eq_read(fid_eq* f, uint32_t* event, void* buf, size_t len, uint64_t flags)
{
	pump();
	Eq* eq = static_cast<Eq*>(f);
	if (eq->events.empty())
		return -FI_EAGAIN;
	EqEvent& ev = eq->events.front();
	if (ev.err)
		return -FI_EAVAIL;
	const size_t need = sizeof(fi_eq_cm_entry) + ev.data.size();
	if (len < need)
		return -FI_ETOOSMALL;
	auto* entry = static_cast<fi_eq_cm_entry*>(buf);
	entry->fid = ev.fid;
	entry->info = ev.info;
	if (!ev.data.empty())
		memcpy(entry->data, ev.data.data(), ev.data.size());
	*event = ev.type;
	if (!(flags & FI_PEEK))
		eq->events.pop_front(); // the info now belongs to the reader
	return ssize_t(need);
}

ssize_t eq_readerr(fid_eq* f, fi_eq_err_entry* buf, uint64_t)
{
	Eq* eq = static_cast<Eq*>(f);
	if (eq->events.empty() || !eq->events.front().err)
		return -FI_EAGAIN;
	*buf = {};
	buf->fid = eq->events.front().fid;
	buf->err = eq->events.front().err;
	eq->events.pop_front();
	return sizeof(*buf);
}

ssize_t eq_write(fid_eq*, uint32_t, const void*, size_t, uint64_t) { return -FI_ENOSYS; }
ssize_t eq_sread(fid_eq*, uint32_t*, void*, size_t, int, uint64_t) { return -FI_ENOSYS; }
const char* eq_strerror(fid_eq*, int, const void*, char*, size_t) { return "fake core error"; }

fi_ops_eq eq_ops = {
	.size = sizeof(fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = eq_write,
	.sread = eq_sread,
	.strerror = eq_strerror,
};

// --- domain and fabric -------------------------------------------------

int mr_reg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t, uint64_t, uint64_t,
	   fid_mr** out, void* context)
{
	Net& n = net();
	if (n.plan.refuse_registration && n.plan.refuse_registration(len)) {
		n.stats.refused_registrations++;
		return -FI_ENOMEM;
	}
	auto* mr = new Mr{};
	mr->fid.fclass = FI_CLASS_MR;
	mr->fid.context = context;
	mr->fid.ops = &fid_ops<close_mr>;
	mr->domain = self<Domain>(f);
	mr->addr = static_cast<const std::byte*>(buf);
	mr->len = len;
	mr->access = access;
	mr->key = n.next_key++;
	mr->mem_desc = mr;
	n.mrs[mr->key] = mr;
	*out = mr;
	return 0;
}

int no_regv(fid*, const iovec*, size_t, uint64_t, uint64_t, uint64_t, uint64_t, fid_mr**, void*)
{
	return -FI_ENOSYS;
}
int no_regattr(fid*, const fi_mr_attr*, uint64_t, fid_mr**) { return -FI_ENOSYS; }

fi_ops_mr mr_ops = {
	.size = sizeof(fi_ops_mr),
	.reg = mr_reg,
	.regv = no_regv,
	.regattr = no_regattr,
};

int open_cq(fid_domain*, fi_cq_attr* attr, fid_cq** out, void* context)
{
	if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
		return -FI_ENOSYS;
	if (attr && attr->format != FI_CQ_FORMAT_DATA)
		return -FI_EINVAL;
	auto* cq = new Cq{};
	cq->fid.fclass = FI_CLASS_CQ;
	cq->fid.context = context;
	cq->fid.ops = &fid_ops<close_cq>;
	cq->ops = &cq_ops;
	cq->owner = net().cqs_opened++;
	*out = cq;
	return 0;
}

int open_ep(fid_domain* d, fi_info* info, fid_ep** out, void* context)
{
	auto* ep = new Ep{};
	ep->fid.fclass = FI_CLASS_EP;
	ep->fid.context = context;
	ep->fid.ops = &fid_ops<close_ep, bind_ep, control_ep>;
	ep->ops = &ep_ops;
	ep->cm = &cm_ops;
	ep->msg = &ep_msg_ops;
	ep->rma = &ep_rma_ops;
	ep->domain = self<Domain>(&d->fid);
	if (info && info->handle) {
		ep->request = static_cast<ConnReq*>(info->handle);
		if (!net().requests.count(ep->request)) {
			delete ep;
			return -FI_EINVAL;
		}
	}
	net().eps.insert(ep);
	*out = ep;
	return 0;
}

int open_srx(fid_domain* d, fi_rx_attr*, fid_ep** out, void* context)
{
	auto* srx = new Srx{};
	srx->fid.fclass = FI_CLASS_SRX_CTX;
	srx->fid.context = context;
	srx->fid.ops = &fid_ops<close_srx>;
	srx->msg = &srx_msg_ops;
	srx->domain = self<Domain>(&d->fid);
	*out = srx;
	return 0;
}

int no_av_open(fid_domain*, fi_av_attr*, fid_av**, void*) { return -FI_ENOSYS; }
int no_sep(fid_domain*, fi_info*, fid_ep**, void*) { return -FI_ENOSYS; }
int no_cntr_open(fid_domain*, fi_cntr_attr*, fid_cntr**, void*) { return -FI_ENOSYS; }
int no_poll_open(fid_domain*, fi_poll_attr*, fid_poll**) { return -FI_ENOSYS; }
int no_stx(fid_domain*, fi_tx_attr*, fid_stx**, void*) { return -FI_ENOSYS; }
int no_query_atomic(fid_domain*, fi_datatype, fi_op, fi_atomic_attr*, uint64_t)
{
	return -FI_ENOSYS;
}
int no_query_collective(fid_domain*, fi_collective_op, fi_collective_attr*, uint64_t)
{
	return -FI_ENOSYS;
}
int no_endpoint2(fid_domain*, fi_info*, fid_ep**, uint64_t, void*) { return -FI_ENOSYS; }

fi_ops_domain domain_ops = {
	.size = sizeof(fi_ops_domain),
	.av_open = no_av_open,
	.cq_open = open_cq,
	.endpoint = open_ep,
	.scalable_ep = no_sep,
	.cntr_open = no_cntr_open,
	.poll_open = no_poll_open,
	.stx_ctx = no_stx,
	.srx_ctx = open_srx,
	.query_atomic = no_query_atomic,
	.query_collective = no_query_collective,
	.endpoint2 = no_endpoint2,
};

int open_domain(fid_fabric*, fi_info* info, fid_domain** out, void* context)
{
	auto* d = new Domain{};
	d->fid.fclass = FI_CLASS_DOMAIN;
	d->fid.context = context;
	d->fid.ops = &fid_ops<close_domain>;
	d->ops = &domain_ops;
	d->mr = &mr_ops;
	d->mr_mode = info && info->domain_attr ? uint64_t(info->domain_attr->mr_mode) : 0;
	*out = d;
	return 0;
}

int open_pep(fid_fabric*, fi_info* info, fid_pep** out, void* context)
{
	Net& n = net();
	auto* pep = new Pep{};
	pep->fid.fclass = FI_CLASS_PEP;
	pep->fid.context = context;
	pep->fid.ops = &fid_ops<close_pep, bind_pep>;
	pep->ops = &ep_ops;
	pep->cm = &cm_ops;
	pep->info = fi_dupinfo(info);
	pep->addr = loopback(0);
	if (info && info->src_addr && info->src_addrlen == sizeof(sockaddr_in))
		memcpy(&pep->addr, info->src_addr, sizeof(sockaddr_in));
	if (!pep->addr.sin_port)
		pep->addr.sin_port = htons(n.next_port++);
	for (Pep* other : n.listeners)
		if (same_address(other->addr, pep->addr)) {
			fi_freeinfo(pep->info);
			delete pep;
			return -FI_EADDRINUSE;
		}
	*out = pep;
	return 0;
}

int open_eq(fid_fabric*, fi_eq_attr* attr, fid_eq** out, void* context)
{
	if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
		return -FI_ENOSYS;
	auto* eq = new Eq{};
	eq->fid.fclass = FI_CLASS_EQ;
	eq->fid.context = context;
	eq->fid.ops = &fid_ops<close_eq>;
	eq->ops = &eq_ops;
	eq->owner = net().eqs_opened++;
	*out = eq;
	return 0;
}

int no_wait_open(fid_fabric*, fi_wait_attr*, fid_wait**) { return -FI_ENOSYS; }
int no_trywait(fid_fabric*, fid**, int) { return -FI_ENOSYS; }
int no_domain2(fid_fabric*, fi_info*, fid_domain**, uint64_t, void*) { return -FI_ENOSYS; }

fi_ops_fabric fabric_ops = {
	.size = sizeof(fi_ops_fabric),
	.domain = open_domain,
	.passive_ep = open_pep,
	.eq_open = open_eq,
	.wait_open = no_wait_open,
	.trywait = no_trywait,
	.domain2 = no_domain2,
};

// --- the provider ------------------------------------------------------

sockaddr_in* parse_address(const char* node, const char* service)
{
	auto* a = static_cast<sockaddr_in*>(calloc(1, sizeof(sockaddr_in)));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (node && inet_pton(AF_INET, node, &a->sin_addr) != 1) {
		free(a);
		return nullptr;
	}
	a->sin_port = htons(service ? uint16_t(atoi(service)) : 0);
	return a;
}

int getinfo(uint32_t, const char* node, const char* service, uint64_t flags, const fi_info* hints,
	    fi_info** out)
{
	if (hints) {
		if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC &&
		    hints->ep_attr->type != FI_EP_MSG)
			return -FI_ENODATA;
		if (hints->caps & ~kCaps)
			return -FI_ENODATA;
	}
	fi_info* info = fi_allocinfo();
	if (!info)
		return -FI_ENOMEM;
	info->caps = kCaps;
	info->mode = 0;
	info->addr_format = FI_SOCKADDR_IN;
	info->ep_attr->type = FI_EP_MSG;
	info->ep_attr->protocol = FI_PROTO_SOCK_TCP;
	info->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	info->ep_attr->tx_ctx_cnt = 1;
	info->ep_attr->max_msg_size = size_t(1) << 31;
	info->domain_attr->name = strdup("fake");
	info->domain_attr->threading = FI_THREAD_SAFE;
	info->domain_attr->mr_mode =
		hints && hints->domain_attr ? int(hints->domain_attr->mr_mode & kStrictMrMode) : 0;
	info->domain_attr->cq_data_size = 4;
	info->domain_attr->mr_key_size = 8;
	info->domain_attr->cq_cnt = 256;
	info->domain_attr->ep_cnt = 8192;
	info->domain_attr->tx_ctx_cnt = 256;
	info->domain_attr->rx_ctx_cnt = 256;
	info->domain_attr->mr_cnt = 1 << 16;
	info->tx_attr->size = 1024;
	info->tx_attr->msg_order = info->rx_attr->msg_order = FI_ORDER_SAW | FI_ORDER_SAS;
	info->tx_attr->iov_limit = kIovLimit;
	info->tx_attr->rma_iov_limit = 1;
	info->tx_attr->inject_size = kInjectSize;
	info->rx_attr->size = 1024;
	info->rx_attr->iov_limit = kIovLimit;
	info->fabric_attr->name = strdup("fake");
	info->fabric_attr->prov_version = FI_VERSION(1, 0);
	sockaddr_in* given = (node || service) ? parse_address(node, service) : nullptr;
	if ((node || service) && !given) {
		fi_freeinfo(info);
		return -FI_ENODATA;
	}
	if (given && !(flags & FI_SOURCE)) {
		info->dest_addr = given;
		info->dest_addrlen = sizeof(sockaddr_in);
		given = nullptr;
	}
	if (!given && hints && hints->src_addr && hints->src_addrlen == sizeof(sockaddr_in)) {
		given = static_cast<sockaddr_in*>(malloc(sizeof(sockaddr_in)));
		memcpy(given, hints->src_addr, sizeof(sockaddr_in));
	}
	info->src_addr = given ? given : parse_address(nullptr, nullptr);
	info->src_addrlen = sizeof(sockaddr_in);
	*out = info;
	return 0;
}

int open_fabric(fi_fabric_attr*, fid_fabric** out, void* context)
{
	auto* f = new Fabric{};
	f->fid.fclass = FI_CLASS_FABRIC;
	f->fid.context = context;
	f->fid.ops = &fid_ops<close_fabric>;
	f->ops = &fabric_ops;
	f->api_version = FI_VERSION(1, 17);
	*out = f;
	return 0;
}

void cleanup() {}

fi_provider provider = {
	.version = FI_VERSION(1, 0),
	.fi_version = FI_VERSION(1, 17),
	.context = {},
	.name = "fake",
	.getinfo = getinfo,
	.fabric = open_fabric,
	.cleanup = cleanup,
};

} // namespace

void reset()
{
	net().plan = {};
	net().stats = {};
}

Plan& plan() { return net().plan; }

const Stats& stats() { return net().stats; }

void kill(int owner)
{
	Net& n = net();
	n.dead.insert(owner);
	for (Ep* ep : n.eps)
		if (ep->owner() == owner)
			break_connection(ep);
}

size_t connections_between(int a, int b)
{
	size_t count = 0;
	for (Ep* ep : net().eps)
		count += ep->state == State::Connected && ep->peer && ep->owner() == a &&
			 ep->peer->owner() == b;
	return count;
}

} // namespace fake_core

extern "C" __attribute__((visibility("default"))) fi_provider* fi_prov_ini()
{
	return &fake_core::provider;
}
