#include "coll.hpp"

#include "av.hpp"
#include "config.hpp"
#include "domain.hpp"
#include "engine/cost_model.hpp"
#include "engine/tuning.hpp"
#include "ep.hpp"
#include "eq.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rcoll {

namespace {

// Bounded by the arrival counters a group needs (they must fit the
// immediate's counter bits, checked at join) and by what is tested.
constexpr size_t kMaxMembers = 16384;

// fi_mc addresses: a tag bit no AV index reaches, plus the group's slot.
constexpr fi_addr_t kGroupAddressBit = fi_addr_t(1) << 62;

// What each member tells every other during fi_join. Little-endian by
// memcpy on the hosts rcoll supports; fixed layout, checked before use.
struct JoinRecord {
	static constexpr uint32_t kMagic = 0x6a6f696e; // "join"
	uint32_t magic = kMagic;
	uint32_t rank = 0;
	uint32_t size = 0;
	uint32_t slot = 0;         // the sender's slot: goes into immediates to it
	uint64_t config = 0;       // fingerprint of the group configuration
	engine::MemoryKey scratch; // the sender's scratch region
	FabricTransport::LocalAddress local; // how members on its host reach it
};
static_assert(sizeof(JoinRecord) == 72);

// A member that failed a group tells every other member it writes no more
// into their buffers for that group (see Collectives::begin_failure).
struct StopNotice {
	static constexpr uint32_t kMagic = 0x73746f70; // "stop"
	uint32_t magic = kMagic;
	uint32_t rank = 0;
};
static_assert(sizeof(StopNotice) == 8);

uint64_t fnv1a(uint64_t h, const void* data, size_t len)
{
	auto* p = static_cast<const unsigned char*>(data);
	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

double parse_double(const std::string& text, double fallback, const char* name)
{
	char* end = nullptr;
	double v = strtod(text.c_str(), &end);
	if (text.empty() || !end || *end || !(v >= 0)) {
		RCOLL_WARN(FI_LOG_CORE, "FI_RCOLL_%s=%s is not a number; using %g\n", name,
			   text.c_str(), fallback);
		return fallback;
	}
	return v;
}

} // namespace

// ---------------------------------------------------------------------------
// Address-vector sets.

namespace {

AvSet* av_set_of(const fid_av_set* set)
{
	return owner_of<AvSet>(const_cast<fid_av_set*>(set));
}

int close_av_set(fid* f)
{
	return guarded([&] {
		delete owner_of<AvSet>(f);
		return 0;
	});
}

int close_group(fid* f)
{
	return guarded([&] {
		CollGroup* g = owner_of<CollGroup>(f);
		std::lock_guard guard(g->ep->domain->lock);
		return g->ep->coll->close(*g);
	});
}

bool contains(const std::vector<fi_addr_t>& v, fi_addr_t a)
{
	return std::find(v.begin(), v.end(), a) != v.end();
}

int set_union(fid_av_set* dst, const fid_av_set* src)
{
	return guarded([&] {
		auto& d = av_set_of(dst)->members;
		for (fi_addr_t a : av_set_of(src)->members)
			if (!contains(d, a))
				d.push_back(a);
		return 0;
	});
}

int set_intersect(fid_av_set* dst, const fid_av_set* src)
{
	return guarded([&] {
		auto& d = av_set_of(dst)->members;
		const auto& s = av_set_of(src)->members;
		std::erase_if(d, [&](fi_addr_t a) { return !contains(s, a); });
		return 0;
	});
}

int set_diff(fid_av_set* dst, const fid_av_set* src)
{
	return guarded([&] {
		auto& d = av_set_of(dst)->members;
		const auto& s = av_set_of(src)->members;
		std::erase_if(d, [&](fi_addr_t a) { return contains(s, a); });
		return 0;
	});
}

int set_insert(fid_av_set* set, fi_addr_t addr)
{
	return guarded([&] {
		AvSet* s = av_set_of(set);
		if (!s->av->lookup(addr))
			return -FI_EINVAL;
		if (contains(s->members, addr))
			return -FI_EINVAL;
		s->members.push_back(addr);
		return 0;
	});
}

int set_remove(fid_av_set* set, fi_addr_t addr)
{
	return guarded([&] {
		auto& m = av_set_of(set)->members;
		auto it = std::find(m.begin(), m.end(), addr);
		if (it == m.end())
			return -FI_EINVAL;
		m.erase(it);
		return 0;
	});
}

// A set is named by itself: fi_join_collective takes the set, and this
// address only has to be something the application can pass along.
int set_addr(fid_av_set* set, fi_addr_t* coll_addr)
{
	if (!coll_addr)
		return -FI_EINVAL;
	*coll_addr = reinterpret_cast<fi_addr_t>(set);
	return 0;
}

fi_ops_av_set av_set_ops = {
	.size = sizeof(fi_ops_av_set),
	.set_union = set_union,
	.intersect = set_intersect,
	.diff = set_diff,
	.insert = set_insert,
	.remove = set_remove,
	.addr = set_addr,
};

} // namespace

int AvSet::open(AddressVector* av, fi_av_set_attr* attr, fid_av_set** out, void* context)
{
	if (!attr || !out)
		return -FI_EINVAL;
	auto set = std::make_unique<AvSet>();
	set->av = av;
	if (attr->flags & FI_UNIVERSE) {
		for (fi_addr_t a = 0; a < av->slots.size(); a++)
			if (av->lookup(a))
				set->members.push_back(a);
	} else if (attr->start_addr != FI_ADDR_NOTAVAIL && attr->end_addr != FI_ADDR_NOTAVAIL) {
		if (attr->stride == 0 || attr->end_addr < attr->start_addr)
			return -FI_EINVAL;
		for (fi_addr_t a = attr->start_addr; a <= attr->end_addr; a += attr->stride) {
			if (!av->lookup(a)) {
				RCOLL_WARN(FI_LOG_AV, "fi_av_set: fi_addr %llu is not in the AV\n",
					   (unsigned long long)a);
				return -FI_EINVAL;
			}
			set->members.push_back(a);
		}
	}
	set->shell.owner = set.get();
	set->shell.fid.fid.fclass = FI_CLASS_AV_SET;
	set->shell.fid.fid.context = context;
	set->shell.fid.fid.ops = &fid_ops_table<close_av_set>;
	set->shell.fid.ops = &av_set_ops;
	*out = &set.release()->shell.fid;
	return 0;
}

// ---------------------------------------------------------------------------
// Joining.

Collectives::Collectives(Endpoint& ep) : ep_(ep), config_(group_config()) {}

Collectives::~Collectives() = default;

engine::GroupConfig Collectives::group_config() const
{
	const Config& c = config();
	engine::CostParams cost;
	cost.alpha_us = parse_double(c.coll_alpha_us, cost.alpha_us, "COLL_ALPHA_US");
	cost.beta_us_per_byte = parse_double(c.coll_beta_us_per_byte, cost.beta_us_per_byte,
					     "COLL_BETA_US_PER_BYTE");
	cost.gamma_us_per_byte = parse_double(c.coll_gamma_us_per_byte, cost.gamma_us_per_byte,
					      "COLL_GAMMA_US_PER_BYTE");
	std::vector<engine::TuneRule> rules;
	if (!c.coll_tune.empty()) {
		std::string error;
		if (engine::parse_tuning(c.coll_tune, rules, error) != engine::Errc::ok) {
			RCOLL_WARN(FI_LOG_CORE, "FI_RCOLL_COLL_TUNE ignored: %s\n", error.c_str());
			rules.clear();
		}
	}
	engine::GroupConfig g;
	g.selector = engine::Selector(cost, std::move(rules));
	return g;
}

// Members must run the same configuration: the schedules they build must
// mirror each other.
uint64_t Collectives::config_fingerprint() const
{
	const Config& c = config();
	uint64_t h = 0xcbf29ce484222325ULL;
	for (const std::string* s : {&c.coll_tune, &c.coll_alpha_us, &c.coll_beta_us_per_byte,
				     &c.coll_gamma_us_per_byte})
		h = fnv1a(fnv1a(h, s->data(), s->size()), "|", 1);
	return h;
}

int Collectives::join(const fi_collective_addr* addr, uint64_t flags, fid_mc** mc, void* context)
{
	if (!(flags & FI_COLLECTIVE) || !addr || !addr->set || !mc)
		return -FI_EINVAL;
	if (!ep_.enabled)
		return -FI_EOPBADSTATE;
	if (!ep_.eq) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: bind an EQ to the endpoint first\n");
		return -FI_ENOEQ;
	}
	const AvSet* set = av_set_of(addr->set);
	if (set->av != ep_.av)
		return -FI_EINVAL;
	const uint32_t size = uint32_t(set->members.size());
	if (size == 0 || size > kMaxMembers)
		return -FI_EINVAL;

	auto g = std::make_unique<CollGroup>();
	g->ep = &ep_;
	g->size = size;
	bool found = false;
	std::vector<Peer*> peers(size, nullptr);
	uint64_t list_hash = 0xcbf29ce484222325ULL;
	for (uint32_t r = 0; r < size; r++) {
		const EpAddress* a = ep_.av->lookup(set->members[r]);
		if (!a)
			return -FI_EINVAL;
		if (!a->keyed()) {
			// Members agree on a group by their keys.
			RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: member %u was inserted by node and service "
				   "and has not been reached yet; insert its fi_getname address\n", r);
			return -FI_EINVAL;
		}
		g->member_keys.push_back(a->key);
		list_hash = fnv1a(list_hash, &a->key, sizeof(a->key));
		if (a->key == ep_.address.key) {
			if (found)
				return -FI_EINVAL; // the same endpoint twice
			found = true;
			g->rank = r;
		}
	}
	if (!found) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: this endpoint is not in the set\n");
		return -FI_EINVAL;
	}
	for (uint32_t r = 0; r < size; r++) {
		if (r == g->rank)
			continue;
		int err = 0;
		peers[r] = ep_.peer_for(set->members[r], err);
		if (!peers[r])
			return err;
	}

	uint32_t slot = 0;
	while (slot < slots_.size() && slots_[slot])
		slot++;
	if (slot >= FabricTransport::kMaxSlots) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: %u groups per endpoint at most\n",
			   FabricTransport::kMaxSlots);
		return -FI_ENOSPC;
	}
	// Every arrival counter of the group must fit the immediate.
	if (engine::Group::counter_count(size, config_) > FabricTransport::kMaxCounters)
		return -FI_EINVAL;

	g->peers = peers;
	g->transport = std::make_unique<FabricTransport>(ep_, slot, peers, g->rank);
	int ret = g->transport->init(engine::Group::scratch_bytes(size, config_), config().coll_local);
	if (ret)
		return ret;

	// Members agree on this join by its id: the member list and how many
	// joins of that same list this endpoint made before.
	uint32_t ordinal = ordinals_[list_hash]++;
	g->join_id = fnv1a(list_hash, &ordinal, sizeof(ordinal));
	g->join_context = context;
	g->heard.assign(size, false);
	g->heard[g->rank] = true;
	g->missing = size - 1;

	g->shell.owner = g.get();
	g->shell.fid.fid.fclass = FI_CLASS_MC;
	g->shell.fid.fid.context = context;
	g->shell.fid.fid.ops = &fid_ops_table<close_group>;
	g->shell.fid.fi_addr = kGroupAddressBit | slot;

	JoinRecord rec;
	rec.rank = g->rank;
	rec.size = size;
	rec.slot = slot;
	rec.config = config_fingerprint();
	rec.scratch = g->transport->scratch_key();
	rec.local = g->transport->local_address();
	proto::MsgHeader h;
	h.opcode = proto::Opcode::Eager;
	h.flags = proto::kFlagCollective | proto::kFlagTagged;
	h.tag = g->join_id;
	h.size = sizeof(rec);
	for (uint32_t r = 0; r < size; r++) {
		if (r == g->rank)
			continue;
		ret = int(ep_.send_control(*peers[r], h, &rec, sizeof(rec)));
		if (ret) {
			RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: sending the join record: %s\n",
				   fi_strerror(-ret));
			return ret;
		}
	}

	if (slot == slots_.size())
		slots_.emplace_back();
	CollGroup& joined = *g;
	slots_[slot] = std::move(g);
	*mc = &joined.shell.fid;

	// Records that arrived before this call.
	auto [first, last] = early_.equal_range(joined.join_id);
	std::vector<Early> ready;
	for (auto it = first; it != last; ++it)
		ready.push_back(std::move(it->second));
	early_.erase(joined.join_id);
	for (const Early& e : ready)
		accept_record(joined, e.peer_key, e.record);
	maybe_finish_join(joined);
	return 0;
}

// A member's record can arrive before our own record to it has left: it
// waits in the peer's queue until our side of that connection is set up
// (the peer's data may come in before the core reports the connection to
// us, and a lost simultaneous connect waits for the peer's). Completing
// then would let the application stop calling in (under manual progress,
// nothing else sends it) while that member's join waits for the record
// forever. So the join completes once every record was heard and ours
// were all handed to the core.
bool Collectives::records_sent(const CollGroup& g) const
{
	return std::all_of(g.peers.begin(), g.peers.end(), [](const Peer* p) {
		return !p || (p->state == Peer::State::connected && p->backlog.empty() && p->controls.empty());
	});
}

void Collectives::maybe_finish_join(CollGroup& g)
{
	if (g.state == CollGroup::State::joining && !g.missing && records_sent(g))
		finish_join(g, 0);
}

void Collectives::on_join_message(Peer& peer, const proto::MsgHeader& h,
				  std::span<const std::byte> payload)
{
	if (payload.size() == sizeof(StopNotice)) {
		StopNotice notice;
		std::memcpy(&notice, payload.data(), sizeof(notice));
		if (notice.magic == StopNotice::kMagic)
			on_stop_notice(peer, h.tag, notice.rank);
		else
			RCOLL_WARN(FI_LOG_EP_CTRL, "dropping a collective control message: bad magic\n");
		return;
	}
	for (auto& g : slots_) {
		if (g && g->state == CollGroup::State::joining && g->join_id == h.tag) {
			accept_record(*g, peer.key, payload);
			maybe_finish_join(*g);
			return;
		}
	}
	early_.emplace(h.tag, Early{peer.key, {payload.begin(), payload.end()}});
}

// A member's join record: checked against what we know of the group before
// its scratch key is trusted.
void Collectives::accept_record(CollGroup& g, uint64_t peer_key, std::span<const std::byte> payload)
{
	JoinRecord rec;
	auto refuse = [&](const char* why) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: bad join record: %s\n", why);
		finish_join(g, -FI_EINVAL);
	};
	if (payload.size() != sizeof(rec))
		return refuse("size");
	std::memcpy(&rec, payload.data(), sizeof(rec));
	if (rec.magic != JoinRecord::kMagic)
		return refuse("magic");
	if (rec.size != g.size || rec.rank >= g.size || g.member_keys[rec.rank] != peer_key)
		return refuse("member list differs");
	if (rec.slot >= FabricTransport::kMaxSlots)
		return refuse("slot");
	if (rec.config != config_fingerprint())
		return refuse("collective configuration (FI_RCOLL_COLL_*) differs between members");
	if (g.state != CollGroup::State::joining || g.heard[rec.rank])
		return;
	g.heard[rec.rank] = true;
	g.missing--;
	g.transport->set_member(rec.rank, rec.slot, rec.scratch, rec.local);
}

void Collectives::finish_join(CollGroup& g, int err)
{
	if (g.state != CollGroup::State::joining)
		return;
	if (!err) {
		std::unique_ptr<engine::Group> group;
		engine::Errc e = engine::Group::create(g.rank, g.size, *g.transport, config_, group);
		if (e != engine::Errc::ok)
			err = -int(e);
		else
			g.group = std::move(group);
	}
	if (err) {
		g.state = CollGroup::State::failed;
		fi_eq_err_entry e{};
		e.fid = &g.shell.fid.fid;
		e.context = g.join_context;
		e.err = -err;
		e.prov_errno = err;
		ep_.eq->push(FI_JOIN_COMPLETE, &e, sizeof(e), true);
		return;
	}
	g.state = CollGroup::State::joined;
	if (g.transport->members_on_host() > CrowdedHost::usable_cpus())
		g.crowded.emplace();
	fi_eq_entry e{};
	e.fid = &g.shell.fid.fid;
	e.context = g.join_context;
	ep_.eq->push(FI_JOIN_COMPLETE, &e, sizeof(e));
}

int Collectives::close(CollGroup& g)
{
	if (g.group && g.group->outstanding())
		return -FI_EBUSY;
	// Members may still write into our scratch (the tail of a recycle
	// barrier), so the slot and its registration stay until the endpoint
	// closes; the group only stops taking operations.
	g.closed = true;
	return 0;
}

// ---------------------------------------------------------------------------
// Operations.

CollGroup* Collectives::group_at(fi_addr_t coll_addr)
{
	if (!(coll_addr & kGroupAddressBit))
		return nullptr;
	fi_addr_t slot = coll_addr & ~kGroupAddressBit;
	if (slot >= slots_.size() || !slots_[slot])
		return nullptr;
	CollGroup* g = slots_[slot].get();
	return g->group && !g->closed ? g : nullptr;
}

ssize_t Collectives::post(fi_addr_t coll_addr, fi_addr_t root_addr, engine::Request req,
			  uint64_t)
{
	CollGroup* g = group_at(coll_addr);
	if (!g) {
		RCOLL_WARN(FI_LOG_EP_DATA, "collective on an address that is no joined group\n");
		return -FI_EINVAL;
	}
	if (engine::is_rooted(req.coll)) {
		const EpAddress* a = ep_.av->lookup(root_addr);
		uint32_t root = g->size;
		for (uint32_t r = 0; a && r < g->size; r++)
			if (g->member_keys[r] == a->key)
				root = r;
		if (root == g->size) {
			RCOLL_WARN(FI_LOG_EP_DATA, "collective root is not a member of the group\n");
			return -FI_EINVAL;
		}
		req.root = root;
	}
	// The failure clock starts when the group goes from idle to busy.
	if (!g->group->outstanding())
		g->last_activity = std::chrono::steady_clock::now();
	engine::Errc e = g->group->post(req);
	if (e != engine::Errc::ok)
		return g->failure ? -g->failure : -ssize_t(int(e));
	// Start it now: its first writes leave in this call rather than after
	// the next read of the core's queue. Completions wait for progress().
	g->group->progress();
	return 0;
}

void Collectives::progress()
{
	const auto now = std::chrono::steady_clock::now();
	for (auto& g : slots_) {
		if (!g)
			continue;
		if (g->state == CollGroup::State::joining) {
			maybe_finish_join(*g);
			if (g->state == CollGroup::State::joining)
				check_timeout(*g, now);
			continue;
		}
		if (!g->failure && (g->transport->write_error() || g->transport->member_stopped()))
			begin_failure(*g, FI_EIO); // a member that stopped failed the group: so do we
		// A failing group is driven even when idle: the marks that say
		// which members stopped arrive through its transport.
		const bool failing = g->failure && !g->transport->failed();
		if (g->group && (g->group->outstanding() || g->transport->writes_in_flight() || failing)) {
			g->group->progress();
			engine::Completion c;
			while (g->group->next_completion(c)) {
				int err = 0;
				if (c.status != engine::Errc::ok)
					err = g->failure ? g->failure : int(c.status);
				ep_.report_tx(c.context, FI_COLLECTIVE, 0, err, true, nullptr);
			}
			if (g->group->outstanding())
				check_timeout(*g, now);
		}
		if (g->failure) {
			g->transport->retry_stop_marks(); // also after fail(): members wait for them
			check_quiet(*g, now);
		}
	}
}

// A member that died without its connection failing (a host gone silent:
// TCP notices only after minutes) must not hang the others: a group that has
// work pending and sees nothing move for FI_RCOLL_COLL_TIMEOUT_MS fails. The
// price: a member that computes longer than that before entering a
// collective the others already wait in fails them too (0 disables).
void Collectives::check_timeout(CollGroup& g, std::chrono::steady_clock::time_point now)
{
	const size_t limit_ms = config().coll_timeout_ms;
	if (!limit_ms || g.failure)
		return;
	if (g.transport->activity() != g.seen_activity ||
	    g.last_activity == std::chrono::steady_clock::time_point{}) {
		g.seen_activity = g.transport->activity();
		g.last_activity = now;
		return;
	}
	if (now - g.last_activity < std::chrono::milliseconds(limit_ms))
		return;
	RCOLL_WARN(FI_LOG_EP_DATA, "collective group (slot %u) made no progress for %zu ms: failing it\n",
		   g.transport->slot(), limit_ms);
	begin_failure(g, FI_ETIMEDOUT);
}

// Failing a group without corrupting anything. Its operations may have
// buffers registered for members to write into; ending them deregisters
// those buffers, and a member's write that arrives after that would either
// hit a dead key (the core then tears down the connection, which other
// groups share) or land in memory the application got back. So: stop
// starting writes, tell every live member, and end the operations only once
// every member has said it stopped too (its notice travels behind its
// writes on the same connection) or is dead, or after a bounded wait.
void Collectives::begin_failure(CollGroup& g, int err)
{
	if (g.failure)
		return;
	g.failure = err;
	g.failing_since = std::chrono::steady_clock::now();
	if (g.state == CollGroup::State::joining) {
		g.transport->fail(err);
		finish_join(g, -err);
		return;
	}
	g.transport->stop();
	g.quiet.assign(g.size, false);
	g.quiet[g.rank] = true;
	StopNotice notice;
	notice.rank = g.rank;
	proto::MsgHeader h;
	h.opcode = proto::Opcode::Eager;
	h.flags = proto::kFlagCollective | proto::kFlagTagged;
	h.tag = g.join_id;
	h.size = sizeof(notice);
	for (uint32_t r = 0; r < g.size; r++)
		if (r != g.rank && g.peers[r]->state != Peer::State::failed)
			ep_.send_control(*g.peers[r], h, &notice, sizeof(notice));
	check_quiet(g, g.failing_since);
}

void Collectives::check_quiet(CollGroup& g, std::chrono::steady_clock::time_point now)
{
	if (!g.failure || g.transport->failed() || g.quiet.empty())
		return;
	// A member is quiet once nothing of it can still arrive: not through its
	// connection (it sent its notice behind its writes, or the connection is
	// gone), and not through this host's memory (it rang its stop mark, or
	// its process is gone), since a broken connection does not stop a live
	// member's memory writes.
	bool all = g.transport->writes_in_flight() == 0;
	for (uint32_t r = 0; all && r < g.size; r++)
		all = (g.quiet[r] || g.peers[r]->state == Peer::State::failed) &&
		      !g.transport->may_write_memory(r);
	const size_t bound_ms = config().coll_timeout_ms ? config().coll_timeout_ms : 10000;
	if (!all && now - g.failing_since < std::chrono::milliseconds(bound_ms))
		return;
	if (!all)
		RCOLL_WARN(FI_LOG_EP_DATA, "collective group (slot %u): members did not confirm they "
			   "stopped; ending its operations anyway\n", g.transport->slot());
	g.transport->fail(g.failure);
}

void Collectives::on_stop_notice(Peer& peer, uint64_t join_id, uint32_t rank)
{
	for (auto& g : slots_) {
		if (!g || g->join_id != join_id || rank >= g->size || g->member_keys[rank] != peer.key)
			continue;
		begin_failure(*g, FI_EIO); // a member failed the group: so do we
		if (!g->quiet.empty())
			g->quiet[rank] = true;
		check_quiet(*g, std::chrono::steady_clock::now());
		return;
	}
}

bool Collectives::group_busy(const CollGroup& g)
{
	return g.group && (g.group->outstanding() || g.transport->writes_in_flight());
}

bool Collectives::busy() const
{
	for (const auto& g : slots_)
		if (g && group_busy(*g))
			return true;
	return false;
}

void Collectives::on_arrival(uint32_t id)
{
	uint32_t slot = id >> FabricTransport::kCounterBits;
	if (slot >= slots_.size() || !slots_[slot]) {
		RCOLL_WARN(FI_LOG_EP_DATA, "collective arrival for unknown group slot %u\n", slot);
		return;
	}
	slots_[slot]->transport->on_arrival(id & (FabricTransport::kMaxCounters - 1));
}

void Collectives::on_peer_failed(Peer& peer)
{
	for (auto& g : slots_) {
		if (!g || !g->transport->has_member(&peer))
			continue;
		begin_failure(*g, FI_EIO);
		check_quiet(*g, std::chrono::steady_clock::now());
	}
}

// ---------------------------------------------------------------------------
// Entry points.

namespace {

engine::Datatype to_engine(fi_datatype d) { return static_cast<engine::Datatype>(d); }
engine::ReduceOp to_engine(fi_op o) { return static_cast<engine::ReduceOp>(o); }

bool valid_datatype(fi_datatype d) { return unsigned(d) < engine::datatype_count; }

template <class F>
ssize_t with_coll(fid_ep* f, F&& body)
{
	return with_ep(f, [&](Endpoint& ep) -> ssize_t {
		if (!ep.coll || !(ep.caps & FI_COLLECTIVE))
			return -FI_EOPNOTSUPP;
		return body(*ep.coll);
	});
}

engine::Request request(engine::Collective c, const void* in, void* out, size_t count,
			fi_datatype dtype, void* context)
{
	engine::Request r;
	r.coll = c;
	r.input = in;
	r.output = out;
	r.count = count;
	r.dtype = to_engine(dtype);
	r.context = context;
	return r;
}

ssize_t coll_barrier2(fid_ep* ep, fi_addr_t coll_addr, uint64_t flags, void* context)
{
	return with_coll(ep, [&](Collectives& c) {
		return c.post(coll_addr, FI_ADDR_NOTAVAIL,
			      request(engine::Collective::barrier, nullptr, nullptr, 0, FI_UINT8, context),
			      flags);
	});
}

ssize_t coll_barrier(fid_ep* ep, fi_addr_t coll_addr, void* context)
{
	return coll_barrier2(ep, coll_addr, 0, context);
}

ssize_t coll_broadcast(fid_ep* ep, void* buf, size_t count, void*, fi_addr_t coll_addr,
		       fi_addr_t root_addr, fi_datatype datatype, uint64_t flags, void* context)
{
	if (!valid_datatype(datatype))
		return -FI_EINVAL;
	return with_coll(ep, [&](Collectives& c) {
		return c.post(coll_addr, root_addr,
			      request(engine::Collective::broadcast, buf, buf, count, datatype, context),
			      flags);
	});
}

// The collectives with an input and a result buffer share one shape.
template <engine::Collective Kind>
ssize_t coll_data(fid_ep* ep, const void* buf, size_t count, void*, void* result, void*,
		  fi_addr_t coll_addr, fi_addr_t root_addr, fi_datatype datatype, fi_op op,
		  uint64_t flags, void* context)
{
	if (!valid_datatype(datatype))
		return -FI_EINVAL;
	engine::Request r = request(Kind, buf, result, count, datatype, context);
	if constexpr (engine::is_reduction(Kind)) {
		if (unsigned(op) >= engine::reduce_op_count ||
		    !engine::is_valid_reduction(r.dtype, to_engine(op)))
			return -FI_EOPNOTSUPP;
		r.op = to_engine(op);
	}
	return with_coll(ep, [&](Collectives& c) { return c.post(coll_addr, root_addr, r, flags); });
}

ssize_t coll_alltoall(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		      void* result_desc, fi_addr_t coll_addr, fi_datatype datatype, uint64_t flags,
		      void* context)
{
	return coll_data<engine::Collective::alltoall>(ep, buf, count, desc, result, result_desc,
						       coll_addr, FI_ADDR_NOTAVAIL, datatype, FI_MIN,
						       flags, context);
}

ssize_t coll_allreduce(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		       void* result_desc, fi_addr_t coll_addr, fi_datatype datatype, fi_op op,
		       uint64_t flags, void* context)
{
	return coll_data<engine::Collective::allreduce>(ep, buf, count, desc, result, result_desc,
							coll_addr, FI_ADDR_NOTAVAIL, datatype, op,
							flags, context);
}

ssize_t coll_allgather(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		       void* result_desc, fi_addr_t coll_addr, fi_datatype datatype, uint64_t flags,
		       void* context)
{
	return coll_data<engine::Collective::allgather>(ep, buf, count, desc, result, result_desc,
							coll_addr, FI_ADDR_NOTAVAIL, datatype, FI_MIN,
							flags, context);
}

ssize_t coll_reduce_scatter(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
			    void* result_desc, fi_addr_t coll_addr, fi_datatype datatype, fi_op op,
			    uint64_t flags, void* context)
{
	return coll_data<engine::Collective::reduce_scatter>(ep, buf, count, desc, result,
							     result_desc, coll_addr, FI_ADDR_NOTAVAIL,
							     datatype, op, flags, context);
}

ssize_t coll_reduce(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		    void* result_desc, fi_addr_t coll_addr, fi_addr_t root_addr,
		    fi_datatype datatype, fi_op op, uint64_t flags, void* context)
{
	return coll_data<engine::Collective::reduce>(ep, buf, count, desc, result, result_desc,
						     coll_addr, root_addr, datatype, op, flags,
						     context);
}

ssize_t coll_scatter(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		     void* result_desc, fi_addr_t coll_addr, fi_addr_t root_addr,
		     fi_datatype datatype, uint64_t flags, void* context)
{
	return coll_data<engine::Collective::scatter>(ep, buf, count, desc, result, result_desc,
						      coll_addr, root_addr, datatype, FI_MIN, flags,
						      context);
}

ssize_t coll_gather(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		    void* result_desc, fi_addr_t coll_addr, fi_addr_t root_addr,
		    fi_datatype datatype, uint64_t flags, void* context)
{
	return coll_data<engine::Collective::gather>(ep, buf, count, desc, result, result_desc,
						     coll_addr, root_addr, datatype, FI_MIN, flags,
						     context);
}

} // namespace

fi_ops_collective collective_ops = {
	.size = sizeof(fi_ops_collective),
	.barrier = coll_barrier,
	.broadcast = coll_broadcast,
	.alltoall = coll_alltoall,
	.allreduce = coll_allreduce,
	.allgather = coll_allgather,
	.reduce_scatter = coll_reduce_scatter,
	.reduce = coll_reduce,
	.scatter = coll_scatter,
	.gather = coll_gather,
	.msg = enosys<decltype(fi_ops_collective::msg)>,
	.barrier2 = coll_barrier2,
};

// What rcoll can do, per collective, operation and datatype.
int query_collective(fid_domain*, fi_collective_op coll, fi_collective_attr* attr, uint64_t flags)
{
	if (unsigned(coll) >= engine::collective_count)
		return -FI_EOPNOTSUPP;
	if (flags)
		return -FI_EOPNOTSUPP; // no FI_SCATTER_SET/FI_GATHER_SET-style variants
	if (!attr)
		return 0;
	const auto kind = static_cast<engine::Collective>(coll);
	if (kind != engine::Collective::barrier) {
		if (!valid_datatype(attr->datatype))
			return -FI_EOPNOTSUPP;
		if (engine::is_reduction(kind) &&
		    (unsigned(attr->op) >= engine::reduce_op_count ||
		     !engine::is_valid_reduction(to_engine(attr->datatype), to_engine(attr->op))))
			return -FI_EOPNOTSUPP;
		attr->datatype_attr.size = engine::datatype_size(to_engine(attr->datatype));
		attr->datatype_attr.count = SIZE_MAX / attr->datatype_attr.size;
	}
	attr->max_members = kMaxMembers;
	attr->mode = 0;
	return 0;
}

} // namespace rcoll
