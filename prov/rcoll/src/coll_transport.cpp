#include "coll_transport.hpp"

#include "config.hpp"
#include "domain.hpp"
#include "ep.hpp"

#include <unistd.h>

#include <algorithm>
#include <unordered_map>
#include <cstring>
#include <iterator>

namespace rcoll {

using engine::Errc;

// A core write completed or failed. A failure also ends the member's
// connection (after the transport kept it for the group's two-step failure).
void CollTransport::WriteContext::finish(Endpoint& ep, void* owner, const CoreEvent& event)
{
	auto* ctx = static_cast<WriteContext*>(owner);
	Peer* peer = ctx->peer;
	ctx->owner->part_done(ctx, event.err);
	if (event.err)
		ep.fail_connection_of(peer, event.err);
}

CollTransport::CollTransport(Endpoint& ep, uint32_t slot, std::vector<Peer*> members, uint32_t rank)
	: ep_(ep), slot_(slot), rank_(rank), members_(members.size()),
	  inject_limit_(ep.domain->core_info->tx_attr->inject_size)
{
	for (size_t i = 0; i < members.size(); i++)
		members_[i].peer = members[i];
}

CollTransport::~CollTransport()
{
	scratch_mr_ = CoreRegistration();
	call_buffers_.clear();
}

int CollTransport::init(size_t scratch_bytes, uint64_t counters, bool node_local)
{
	try {
		waiting_arrivals_.assign(counters, 0);
		counters_waiting_.reserve(counters);
	} catch (const std::bad_alloc&) {
		return -FI_ENOMEM;
	}
	host_ = local::host_identity();
	offer_local_ = node_local && host_;
	if (int err = scratch_file_.create(scratch_bytes, offer_local_, ep_.address.key)) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "collective scratch of %zu bytes: %s\n", scratch_bytes,
			   std::strerror(-err));
		return err == -ENOMEM ? -FI_ENOMEM : -FI_EINVAL;
	}
	if (offer_local_ && !scratch_file_.shared()) {
		RCOLL_INFO(FI_LOG_EP_CTRL, "no memory file for the collective scratch: members on "
					   "this host write to this one through the core\n");
		offer_local_ = false;
	}
	std::span<std::byte> s = scratch_file_.scratch();
	// Members write into the scratch; this member writes from it.
	return scratch_mr_.reg(*ep_.domain, s.data(), s.size() ? s.size() : 1,
			       FI_WRITE | FI_REMOTE_WRITE);
}

engine::MemoryKey CollTransport::encode(const RemoteBuffer& r)
{
	engine::MemoryKey k;
	static_assert(sizeof(RemoteBuffer) <= engine::memory_key_bytes);
	std::memcpy(k.bytes.data(), &r, sizeof(r));
	return k;
}

CollTransport::RemoteBuffer CollTransport::decode(const engine::MemoryKey& k)
{
	RemoteBuffer r;
	std::memcpy(&r, k.bytes.data(), sizeof(r));
	return r;
}

engine::MemoryKey CollTransport::scratch_key() const
{
	std::span<std::byte> s = scratch_file_.scratch();
	return encode({reinterpret_cast<uint64_t>(s.data()), scratch_mr_.key(), s.size()});
}

CollTransport::LocalAddress CollTransport::local_address() const
{
	LocalAddress a;
	a.host = host_;
	a.pid = int32_t(::getpid()); // also a hint for scheduling (cpus_on_host)
	if (offer_local_) {
		a.nonce = scratch_file_.nonce();
		a.fd = scratch_file_.fd();
	}
	return a;
}

std::vector<uint32_t> CollTransport::placement() const
{
	const LocalAddress own = local_address(); // as our record says it
	std::unordered_map<uint64_t, uint32_t> first_on_host;
	std::vector<uint32_t> index(members_.size());
	for (uint32_t rank = 0; rank < members_.size(); rank++) {
		const uint64_t host =
			rank == rank_ ? (own.fd >= 0 ? own.host : 0) : members_[rank].memory_host;
		index[rank] = host ? first_on_host.try_emplace(host, rank).first->second : rank;
	}
	return index;
}

void CollTransport::set_member(uint32_t rank, uint32_t slot, const engine::MemoryKey& scratch,
			       const LocalAddress& local)
{
	RemoteBuffer r = decode(scratch);
	Member& m = members_[rank];
	m.slot = slot;
	m.scratch_addr = r.addr;
	m.scratch_key = r.key;
	m.scratch_len = r.len;
	m.memory_host = local.fd >= 0 ? local.host : 0;
	if (host_ && local.host == host_) {
		members_on_host_++;
		m.on_host = true;
		m.pid = local.pid > 0 ? pid_t(local.pid) : 0;
	}
	// Both ends must offer the node-local path: each then writes and rings
	// locally, and drains its own doorbell.
	if (!offer_local_ || local.host != host_ || local.fd < 0)
		return;
	// A record naming this very process is a lie (or a copy of ours); one
	// naming another process's file fails attach's owner check.
	if (local.pid == ::getpid()) {
		RCOLL_WARN(FI_LOG_EP_CTRL,
			   "member %u claims this process's memory file: writing "
			   "to it through the core\n",
			   rank);
		return;
	}
	// Its process is watched (whether it exited decides when it has
	// stopped writing into us, and a pidfd never names a later process
	// that got the same pid); a member we cannot watch is not mapped.
	int err = watch_process(*m.peer, local.pid);
	if (!err)
		m.process = m.peer->process;
	auto mapping = std::make_unique<local::PeerMapping>();
	if (!err)
		err = r.len == scratch_file_.scratch().size()
			      ? mapping->attach(local.pid, local.fd, local.nonce, m.peer->key,
						r.len,
						r.addr)
			      : -EINVAL; // every member's scratch has the same size
	// It will write into our call buffers as we into its own, once the
	// join completes (no write into a call buffer comes earlier), and read
	// them once it sees in our file that we settled this (own_verdict).
	if (!err) {
		if (config().coll_cma && !local::allow_memory_writes_from_siblings())
			RCOLL_INFO(FI_LOG_EP_CTRL,
				   "Yama forbids cross-memory attach here: members on this "
				   "host write into call buffers through the core\n");
		settle_memory_access();
	}
	// It learns from this mark, ahead of any of our writes, that we may
	// write into its memory: only then will it wait for our stop mark.
	if (!err)
		err = ring_error(mapping->ring(kMappedMark | rank_));
	if (err) {
		RCOLL_INFO(FI_LOG_EP_CTRL,
			   "member %u is on this host but its scratch cannot be "
			   "mapped (%s): writing to it through the core\n",
			   rank, std::strerror(-err));
		return;
	}
	m.mapping = std::move(mapping);
}

void CollTransport::settle_memory_access()
{
	local::Published* own = scratch_file_.published();
	if (own && verdict_ == local::Published::unknown)
		own->verdict.store(local::Published::settled, std::memory_order_release);
}

// One pidfd per peer process, whatever the number of groups: descriptors
// stay few. A record naming another pid than the one watched is refused.
int CollTransport::watch_process(Peer& peer, pid_t pid)
{
	if (peer.process)
		return peer.process->pid() == pid ? 0 : -EINVAL;
	try {
		auto watch = std::make_shared<local::ProcessWatch>();
		if (int err = watch->watch(pid))
			return err;
		peer.process = std::move(watch);
		return 0;
	} catch (const std::bad_alloc&) {
		return -ENOMEM;
	}
}

std::span<std::byte> CollTransport::scratch() noexcept { return scratch_file_.scratch(); }

Errc CollTransport::register_memory(std::span<std::byte> buffer, engine::Access access,
				    engine::Registration& out) noexcept
{
	// Only what the engine asked for: a source of writes, a target of the
	// members' writes, or both.
	uint64_t core_access = 0;
	if (engine::grants(access, engine::Access::read))
		core_access |= FI_WRITE;
	if (engine::grants(access, engine::Access::remote_write))
		core_access |= FI_REMOTE_WRITE;
	uint64_t handle;
	try {
		if (!free_call_buffers_.empty()) {
			handle = free_call_buffers_.back();
			free_call_buffers_.pop_back();
		} else {
			handle = call_buffers_.size();
			call_buffers_.emplace_back();
		}
	} catch (const std::bad_alloc&) {
		return Errc::no_memory;
	}
	CallBuffer& b = call_buffers_[handle];
	b.bytes = buffer;
	b.core_access = core_access;
	b.in_use = true;
	out.handle = handle;
	const RemoteBuffer r{reinterpret_cast<uint64_t>(buffer.data()), 0, buffer.size()};
	if (core_access & FI_REMOTE_WRITE) {
		// Members write into it with the key it ships: registered now, and
		// listed for the members on this host.
		if (ensure_registered(b)) {
			deregister_memory(out);
			return Errc::no_resources;
		}
		if (scratch_file_.shared() && !buffer.empty()) {
			b.exposed = scratch_file_.expose(r.addr, b.core.key(), r.len);
			if (b.exposed < 0) {
				RCOLL_WARN(
					FI_LOG_EP_DATA,
					"collective group (slot %u): %zu buffers exposed at once\n",
					slot_, local::ExposedBuffers::kEntries);
				deregister_memory(out);
				return Errc::no_resources;
			}
		}
	}
	out.key = encode({r.addr, b.core.key(), r.len});
	return Errc::ok;
}

void CollTransport::deregister_memory(const engine::Registration& r) noexcept
{
	if (r.handle >= call_buffers_.size() || !call_buffers_[r.handle].in_use)
		return;
	if (!scratch_file_.withdraw(call_buffers_[r.handle].exposed))
		RCOLL_WARN(FI_LOG_EP_DATA,
			   "collective group (slot %u): a member on this host still holds a "
			   "buffer for writing after a second\n",
			   slot_);
	call_buffers_[r.handle] = CallBuffer();
	try {
		free_call_buffers_.push_back(r.handle);
	} catch (...) {
		// The slot is simply not reused.
	}
}

// Registers a call buffer with the core unless it is already (or empty).
// Returns 0 or a negative fi_errno.
int CollTransport::ensure_registered(CallBuffer& b) noexcept
{
	if (b.core || b.bytes.empty())
		return 0;
	return b.core.reg(*ep_.domain, b.bytes.data(), b.bytes.size(), b.core_access);
}

// The core descriptor of a write's source: the scratch's, or its call
// buffer's, registered now if this is the first write that needs one.
// Returns 0 or a negative fi_errno.
int CollTransport::source_desc(const engine::WriteRequest& w, void*& desc) noexcept
{
	if (!w.source_registration) {
		desc = scratch_mr_.desc();
		return 0;
	}
	const uint64_t handle = w.source_registration->handle;
	if (handle >= call_buffers_.size() || !call_buffers_[handle].in_use)
		return -FI_EINVAL;
	CallBuffer& b = call_buffers_[handle];
	if (int err = ensure_registered(b))
		return err;
	desc = b.core.desc();
	return 0;
}

// The engine ends an operation at once on an error, but once it started,
// some of its writes may be in flight and members may hold keys to its
// buffers: a write this member cannot make fails the group in two steps
// instead (its operations wait, seeing would_block, until fail()).
Errc CollTransport::write(const engine::WriteRequest& w) noexcept
{
	if (failed_)
		return Errc::io_error;
	const Errc e = post_write(w);
	if (e == Errc::ok || e == Errc::would_block)
		return e;
	if (!write_error_) {
		RCOLL_WARN(FI_LOG_EP_DATA,
			   "collective group (slot %u): a write to member %u cannot be made (%s); "
			   "failing the group\n",
			   slot_, w.peer, engine::to_string(e).data());
		write_error_ = int(e);
	}
	return Errc::would_block;
}

Errc CollTransport::post_write(const engine::WriteRequest& w) noexcept
{
	if (stopped_)
		return Errc::would_block;
	if (w.peer >= members_.size())
		return Errc::invalid_argument;
	const Member& m = members_[w.peer];
	Peer* peer = m.peer;
	if (peer->state == Peer::State::failed)
		return Errc::io_error;
	if (peer->state != Peer::State::connected)
		return Errc::would_block;

	uint64_t addr, key, limit;
	if (w.target_key) {
		RemoteBuffer r = decode(*w.target_key);
		addr = r.addr;
		key = r.key;
		limit = r.len;
	} else {
		addr = m.scratch_addr;
		key = m.scratch_key;
		limit = m.scratch_len;
	}
	// Never let a peer's key take us past its buffer. An honest member's
	// is smaller than our write when the members passed different counts.
	if (w.offset > limit || w.length > limit - w.offset)
		return Errc::invalid_argument;
	if (members_[w.peer].mapping)
		if (auto done = write_local(w, members_[w.peer]))
			return *done;
	if (w.has_immediate && w.immediate >= kMaxCounters)
		return Errc::invalid_argument;

	// A write completes to the engine only once everything it sent left
	// this process (WriteContext): under manual progress, an operation
	// that completed while its last message still waited in the core
	// would let the application stop calling in (an MPI then waits in its
	// own calls) while the members that need that message wait forever.

	// An arrival whose bytes fit a message is that message alone: one
	// core operation, as a write with immediate data would have been.
	if (w.has_immediate && !w.target_key &&
	    w.length <= std::min<size_t>(peer->eager_limit, ep_.eager_limit)) {
		WriteContext* ctx = spare_context(w, peer);
		if (!ctx)
			return Errc::no_memory;
		claim(ctx, 1);
		return send_arrival(w, m, {static_cast<const std::byte*>(w.source), w.length}, ctx);
	}

	// A small write is injected (the core reports no completion for it,
	// which on tcp spares the wait-fd signal it raises per completion and
	// the CQ poll that would fetch it) when its arrival follows it: the
	// arrival's completion proves that both left (the connection keeps
	// their order). The peer's InjectLedger bounds the unproven injects.
	if (w.has_immediate && w.length <= inject_limit_ && peer->injects.may_inject()) {
		WriteContext* ctx = spare_context(w, peer);
		if (!ctx)
			return Errc::no_memory;
		ssize_t ret = post_core_write(peer->conn.get(), w.source, w.length, nullptr,
					      addr + w.offset, key, nullptr);
		if (ret)
			return refused(ret);
		peer->injects.posted++;
		ctx->proves = peer->injects.posted;
		claim(ctx, 1);
		send_arrival(w, m, {}, ctx);
		return Errc::ok;
	}

	// A registration that fails here fails the group in two steps, like a
	// write the core refuses: members may already hold keys to this
	// operation's buffers, which must outlive their writes.
	void* desc = nullptr;
	if (w.length) {
		if (int err = source_desc(w, desc)) {
			RCOLL_WARN(FI_LOG_EP_DATA, "collective write source not registered: %s\n",
				   fi_strerror(-err));
			if (!write_error_)
				write_error_ = -err;
			return Errc::would_block;
		}
	}

	WriteContext* ctx = spare_context(w, peer);
	if (!ctx)
		return Errc::no_memory;
	ssize_t ret = post_core_write(peer->conn.get(), w.source, w.length, desc, addr + w.offset,
				      key, &ctx->cc.space);
	if (ret)
		return refused(ret);
	claim(ctx, w.has_immediate ? 2 : 1);
	if (w.has_immediate)
		send_arrival(w, m, {}, ctx);
	return Errc::ok;
}

// A free context for `w`, not yet taken from the free list (nullptr when
// none could be allocated).
CollTransport::WriteContext* CollTransport::spare_context(const engine::WriteRequest& w,
							  Peer* peer) noexcept
{
	try {
		if (free_contexts_.empty()) {
			contexts_.push_back(std::make_unique<WriteContext>(this));
			// Completions return contexts without allocating.
			free_contexts_.reserve(contexts_.size());
			free_contexts_.push_back(contexts_.back().get());
		}
	} catch (const std::bad_alloc&) {
		return nullptr;
	}
	WriteContext* ctx = free_contexts_.back();
	ctx->cookie = w.cookie;
	ctx->peer = peer;
	ctx->proves = peer->injects.posted;
	ctx->err = 0;
	return ctx;
}

// `ctx` is in use until `parts` completions (the core write, the arrival
// message) came back.
void CollTransport::claim(WriteContext* ctx, unsigned parts) noexcept
{
	free_contexts_.pop_back();
	ctx->parts = parts;
	in_flight_++;
	ep_.pace.coll_posted = true;
}

// The ARRIVAL behind a write (the connection keeps it behind the data), or
// carrying the write's bytes. Once a write is posted the engine must not
// repeat it: a message that cannot go fails the group instead.
Errc CollTransport::send_arrival(const engine::WriteRequest& w, const Member& m,
				 std::span<const std::byte> inline_payload,
				 WriteContext* ctx) noexcept
{
	proto::MsgHeader h;
	h.opcode = proto::Opcode::Arrival;
	h.size = inline_payload.size();
	// Without a payload the write placed the data: no offset to tell.
	const proto::ArrivalBody body{m.slot, w.immediate, rank_,
				      inline_payload.empty() ? 0 : w.offset};
	ssize_t ret;
	try {
		ret = ep_.send_control(*m.peer, h, body, inline_payload,
				       {&WriteContext::arrival_sent, ctx});
	} catch (const std::bad_alloc&) {
		ret = -FI_ENOMEM;
	}
	if (ret == 0) {
		activity_++;
		return Errc::ok;
	}
	RCOLL_WARN(FI_LOG_EP_DATA, "collective arrival not sent: %s\n", fi_strerror(int(-ret)));
	if (!write_error_)
		write_error_ = int(-ret); // fails the group, as a failed write does
	part_done(ctx, int(-ret));
	return inline_payload.empty() ? Errc::ok : Errc::would_block;
}

// A member on this host: the data is copied into its memory (its mapped
// scratch, or a call buffer through cross-memory attach), then its doorbell
// is rung with the immediate, so the arrival is seen only after the data is
// in place. Done when it returns: the source may be reused at once. nullopt:
// this write must go through the core (no cross-memory attach).
std::optional<Errc> CollTransport::write_local(const engine::WriteRequest& w, Member& m) noexcept
{
	local::PeerMapping& peer = *m.mapping;
	if (w.target_key && (!config().coll_cma || !peer.cross_memory_allowed()))
		return std::nullopt;
	auto imm = w.has_immediate ? std::optional<uint32_t>(w.immediate) : std::nullopt;
	if (imm && *imm >= kMaxCounters)
		return Errc::invalid_argument;
	// A full doorbell: the member has not drained it yet; the engine tries
	// again later (would_block). Checked first so that a large copy is not
	// repeated for nothing; should another writer take the last cell in
	// between, repeating the copy is still harmless: the target's slot stays
	// reserved until the arrival is consumed, and the engine keeps the
	// source as it is until the write is accepted.
	if (imm && !peer.has_room())
		return Errc::would_block;
	// First, so that a write whose arrival was rung is always reported:
	// rung twice, an arrival would count for data that is not there.
	if (!queue_completion(w.cookie))
		return Errc::no_memory;
	// The member ended this group's operations (it failed the group): its
	// call buffers may be the application's again. Before a cross-memory
	// copy, the pidfd check (a system call, so not for the scratch, which
	// is the file's) keeps a reused pid from receiving the bytes. Both
	// leave a window of a few instructions before the copy.
	int err = peer.target_ended() ? -ECANCELED : 0;
	// No core checks the key of a cross-memory write, and any member, from
	// any host, may have written the slot it was read from: it must name a
	// buffer the member lists as exposed (ExposedBuffers), and held piece by
	// piece while it is copied.
	if (!err && w.length && !w.target_key) {
		// Whole, at the first write into it, as our own scratch is at the
		// join: only the members the schedules write to, rather than every
		// member on this host at every join.
		if (!m.faulted_in) {
			m.faulted_in = true;
			if (prefault_peers_)
				if (int err = peer.prefault())
					RCOLL_INFO(FI_LOG_EP_DATA,
						   "member %u's scratch not faulted in ahead: %s\n",
						   w.peer, std::strerror(-err));
		}
		std::memcpy(peer.scratch() + w.offset, w.source, w.length);
	} else if (!err && w.length) {
		const RemoteBuffer r = decode(*w.target_key);
		err = m.process->exited() ? -ESRCH
					  : peer.write_exposed(r.addr, r.key, r.len, w.offset,
							       w.source, w.length);
		if (err == -EPERM)
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "collective group (slot %u): a key for member %u that names no "
				   "buffer it exposes (or no longer)\n",
				   slot_, w.peer);
	}
	// -EAGAIN: another writer took the last cell since has_room().
	if (!err && imm)
		err = ring_error(peer.ring(*imm));
	if (err) {
		events_.pop_back();
		// Gone, failed, or a key naming memory it does not have: like a
		// failed core write, the group fails in two steps.
		if (err != -EAGAIN && !write_error_) {
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "collective write to a member on this host: %s\n",
				   std::strerror(-err));
			write_error_ = FI_EIO;
		}
		return Errc::would_block;
	}
	activity_++;
	return Errc::ok;
}

// 0 when rung; -EAGAIN when the doorbell is full; -EPROTO when the
// member's doorbell contradicts itself, which fails the group.
int CollTransport::ring_error(local::Doorbell::Push result) noexcept
{
	switch (result) {
	case local::Doorbell::Push::rung: return 0;
	case local::Doorbell::Push::full: return -EAGAIN;
	case local::Doorbell::Push::corrupt: break;
	}
	return -EPROTO;
}

bool CollTransport::queue_completion(uint64_t cookie) noexcept
{
	engine::TransportEvent done;
	done.kind = engine::TransportEvent::Kind::write_complete;
	done.cookie = cookie;
	try {
		events_.push_back(done);
		return true;
	} catch (const std::bad_alloc&) {
		return false;
	}
}

// The core refused a write. Anything but a full queue is a connection
// failure, handled like a failed write (part_done): the operation waits,
// and the group fails in two steps, so that its buffers outlive the other
// members' writes into them.
Errc CollTransport::refused(ssize_t ret) noexcept
{
	if (ret == -FI_EAGAIN)
		return Errc::would_block;
	RCOLL_WARN(FI_LOG_EP_DATA, "collective write refused: %s\n", fi_strerror(int(-ret)));
	if (!write_error_)
		write_error_ = int(-ret);
	return Errc::would_block;
}

size_t CollTransport::poll(std::span<engine::TransportEvent> out) noexcept
{
	size_t n = 0;
	while (n < out.size() && !events_.empty()) {
		out[n++] = events_.front();
		events_.pop_front();
	}
	while (n < out.size() && !counters_waiting_.empty()) {
		const uint32_t counter = counters_waiting_.back();
		counters_waiting_.pop_back();
		out[n] = engine::TransportEvent{};
		out[n].kind = engine::TransportEvent::Kind::arrival;
		out[n].immediate = counter;
		out[n].arrivals = std::exchange(waiting_arrivals_[counter], 0);
		n++;
	}
	// What members on this host rang: arrivals, and marks (see stop()). At
	// most a ring's worth per poll: whoever can write the doorbell could
	// refill it as fast as it is drained, and marks fill no event.
	for (size_t budget = local::Doorbell::kCells; n < out.size() && budget;) {
		uint32_t rung[64];
		size_t k = scratch_file_.drain(
			{rung, std::min({std::size(rung), out.size() - n, budget})});
		budget -= k;
		for (size_t i = 0; i < k; i++) {
			if (rung[i] & kMark) {
				activity_ += on_rung(rung[i]);
				continue;
			}
			out[n] = engine::TransportEvent{};
			out[n].kind = engine::TransportEvent::Kind::arrival;
			out[n].immediate = rung[i];
			n++;
			activity_++;
		}
		if (k < std::size(rung))
			break;
	}
	if (n < out.size() && failed_) {
		out[n].kind = engine::TransportEvent::Kind::error;
		out[n].error = Errc::io_error;
		n++;
	}
	return n;
}

void CollTransport::on_arrival(Peer& from, const proto::ArrivalBody& a,
			       std::span<const std::byte> payload)
{
	if (a.rank >= members_.size() || members_[a.rank].peer != &from) {
		RCOLL_WARN(FI_LOG_EP_DATA,
			   "collective group (slot %u): an arrival claiming rank %u from a peer "
			   "that is not that member: dropped\n",
			   slot_, a.rank);
		return;
	}
	if (failed_)
		return; // the group's operations ended: nothing waits for it
	std::span<std::byte> scratch = scratch_file_.scratch();
	const bool outside = !payload.empty() && (a.offset > scratch.size() ||
						  payload.size() > scratch.size() - a.offset);
	// A counter the group lacks, or 2^20 arrivals on one counter before the
	// engine took any (members run at most two operations ahead), no honest
	// member sends.
	constexpr uint32_t kMaxWaitingArrivals = uint32_t(1) << 20;
	if (outside || a.counter >= waiting_arrivals_.size() ||
	    waiting_arrivals_[a.counter] >= kMaxWaitingArrivals) {
		if (!misbehaved_)
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "collective group (slot %u): member %u sent an arrival for "
				   "bytes out of its scratch, a counter the group lacks or "
				   "beyond what can wait (counter %u): failing it and the "
				   "group\n",
				   slot_, a.rank, a.counter);
		misbehaved_ = true;
		ep_.schedule_failure(from, -FI_EOTHER);
		return;
	}
	if (!payload.empty())
		std::memcpy(scratch.data() + a.offset, payload.data(), payload.size());
	if (waiting_arrivals_[a.counter]++ == 0)
		counters_waiting_.push_back(a.counter); // reserved: never allocates
	activity_++;
}

void CollTransport::WriteContext::arrival_sent(void* owner, int err)
{
	auto* ctx = static_cast<WriteContext*>(owner);
	ctx->owner->part_done(ctx, err);
}

void CollTransport::part_done(WriteContext* ctx, int err)
{
	if (err && !ctx->err)
		ctx->err = err;
	if (--ctx->parts)
		return;
	in_flight_--;
	activity_++;
	free_contexts_.push_back(ctx);
	if (ctx->err) {
		// Typically a write to a member that died, flushed when its
		// connection closed. The live members may still be writing into
		// this rank's buffers; the engine must not end the operations
		// owning them before fail().
		if (!write_error_)
			write_error_ = ctx->err;
		return;
	}
	ctx->peer->injects.prove(ctx->proves);
	engine::TransportEvent ev;
	ev.kind = engine::TransportEvent::Kind::write_complete;
	ev.cookie = ctx->cookie;
	try { // runs inside core completions, where nothing may throw
		events_.push_back(ev);
	} catch (const std::bad_alloc&) {
		if (!write_error_)
			write_error_ = FI_ENOMEM;
	}
}

// Marks ride in the same doorbell as arrivals, above every counter: the
// top bit, the kind, and the rank of the member that rang it.
void CollTransport::stop()
{
	if (stopped_)
		return;
	stopped_ = true;
	for (Member& m : members_)
		m.stop_pending = m.mapping != nullptr;
	retry_stop_marks();
}

void CollTransport::retry_stop_marks()
{
	// A corrupt doorbell will never take the mark: its member is left to
	// the bounded wait of check_quiet. Nor will a dead member's full one:
	// nobody is left to read it.
	for (Member& m : members_)
		if (m.stop_pending &&
		    ((m.process && m.process->exited()) ||
		     m.mapping->ring(kStopMark | rank_) != local::Doorbell::Push::full))
			m.stop_pending = false;
}

bool CollTransport::stop_marks_pending() const
{
	for (const Member& m : members_)
		if (m.stop_pending)
			return true;
	return false;
}

bool CollTransport::on_rung(uint32_t value)
{
	const uint32_t rank = value & kMarkRank;
	if (rank >= members_.size() || rank == rank_)
		return false;
	Member& m = members_[rank];
	if ((value & ~kMarkRank) == kMappedMark && !m.maps_us) {
		m.maps_us = true;
		return true;
	}
	if ((value & ~kMarkRank) == kStopMark && !m.stop_rung) {
		m.stop_rung = true;
		stop_marks_seen_++;
		// It failed the group: start no write after this one.
		stop();
		return true;
	}
	return false;
}

bool CollTransport::may_write_memory(uint32_t rank) const
{
	const Member& m = members_[rank];
	return m.maps_us && !m.stop_rung && !(m.process && m.process->exited());
}

void CollTransport::fail(int err)
{
	stop(); // members that mapped us learn it here too
	scratch_file_.mark_ended();
	if (!failed_)
		failed_ = err ? err : FI_EIO;
}

bool CollTransport::reaches_all_on_host() const
{
	if (!config().coll_cma)
		return false;
	for (uint32_t rank = 0; rank < members_.size(); rank++)
		if (rank != rank_ &&
		    (!members_[rank].mapping || members_[rank].mapping->cross_memory_refused()))
			return false;
	return true;
}

std::optional<CollTransport::ShmAgreement> CollTransport::shm_path_agreed()
{
	using local::Published;
	Published* own = scratch_file_.published();
	if (!offer_local_ || !own)
		return ShmAgreement{}; // nobody maps an anonymous scratch: they say so too
	// Said once: a member may read it at any time after, so it must not
	// change when this is asked again while others have not said theirs
	// (kept here, not read back from the file that members map). Whether
	// this member may read another's memory is tested once that member
	// settled it (or said its verdict, without mapping ours): tested
	// earlier, Yama could refuse what it allows a moment later.
	if (verdict_ == Published::unknown) {
		for (uint32_t rank = 0; rank < members_.size(); rank++)
			if (rank != rank_ && members_[rank].mapping &&
			    !(members_[rank].mapping->published()->verdict.load(
				      std::memory_order_acquire) &
			      (Published::settled | Published::said)))
				return std::nullopt;
		verdict_ = own_verdict();
		own->verdict.store(verdict_, std::memory_order_release);
	}
	const uint32_t mine = verdict_;
	if (!(mine & Published::maps_all))
		return ShmAgreement{};
	ShmAgreement agreed{true, (mine & Published::reads_all) != 0,
			    (mine & Published::crowded) != 0};
	for (uint32_t rank = 0; rank < members_.size(); rank++) {
		if (rank == rank_)
			continue;
		const uint32_t verdict = members_[rank].mapping->published()->verdict.load(
			std::memory_order_acquire);
		if (!(verdict & Published::said))
			return std::nullopt;
		agreed.shm &= (verdict & Published::maps_all) != 0;
		agreed.reads_all &= (verdict & Published::reads_all) != 0;
		agreed.crowded |= (verdict & Published::crowded) != 0;
	}
	return agreed;
}

uint32_t CollTransport::own_verdict()
{
	using local::Published;
	bool maps_all = true, reads_all = config().coll_cma;
	for (uint32_t rank = 0; rank < members_.size(); rank++) {
		if (rank == rank_)
			continue;
		maps_all &= members_[rank].mapping != nullptr;
		reads_all &= maps_all && members_[rank].mapping->cross_memory_allowed();
	}
	uint32_t verdict = Published::said | Published::settled;
	if (maps_all)
		verdict |= Published::maps_all;
	if (reads_all)
		verdict |= Published::reads_all;
	// Whether this member yields while it waits (CrowdedHost): see
	// Collectives::maybe_finish_join for what that decides.
	if (members_outnumber_cpus() || CrowdedHost::held())
		verdict |= Published::crowded;
	return verdict;
}

std::unique_ptr<local::LocalCollectives> CollTransport::local_collectives(
	const local::LocalCollectives::Limits& limits,
	std::optional<local::LocalCollectives::SingleCopyMin> single_copy_min)
{
	std::vector<const local::Published*> areas(members_.size());
	for (uint32_t rank = 0; rank < members_.size(); rank++)
		areas[rank] = rank == rank_ ? scratch_file_.published()
					    : members_[rank].mapping->published();
	auto shm = std::make_unique<local::LocalCollectives>(
		std::move(areas), *scratch_file_.published(), rank_, limits);
	if (single_copy_min)
		shm->enable_single_copy(
			[this](uint32_t member, uint64_t address, void* target, size_t length) {
				Member& m = members_[member];
				// A pid reused since could not be read from by mistake:
				// the pidfd says whether it is still that process.
				if (!m.mapping || (m.process && m.process->exited()))
					return -ESRCH;
				return m.mapping->read_memory(address, target, length);
			},
			*single_copy_min);
	return shm;
}

void CollTransport::prefault_scratch()
{
	if (!config().coll_prefault)
		return;
	prefault_peers_ = true;
	if (int err = scratch_file_.prefault())
		RCOLL_INFO(FI_LOG_EP_CTRL, "collective scratch not faulted in ahead: %s\n",
			   std::strerror(-err));
}

bool CollTransport::members_outnumber_cpus()
{
	if (!outnumbered_) {
		HostCpus cpus;
		for (const Member& m : members_)
			if (m.on_host)
				cpus.add(m.pid);
		outnumbered_ = members_on_host_ > cpus.count();
	}
	return *outnumbered_;
}

bool CollTransport::has_member(const Peer* peer) const
{
	for (const Member& m : members_)
		if (m.peer == peer)
			return true;
	return false;
}

} // namespace rcoll
