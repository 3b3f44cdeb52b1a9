// Collective groups from fi_join to close: the join protocol (itself a
// collective: members agree on the group and exchange their scratch regions
// and how members on one host reach each other), and group failure, which
// ends a group's operations without letting a member write into buffers the
// application got back.
#include "coll.hpp"

#include <cmath>
#include <string_view>

#include "attr.hpp"
#include "av.hpp"
#include "av_set.hpp"
#include "config.hpp"
#include "domain.hpp"
#include "engine/cost_model.hpp"
#include "engine/patterns.hpp"
#include "engine/tuning.hpp"
#include "ep.hpp"
#include "eq.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rcoll {

namespace {

// An idle group's failure clock is read on one check in this many.
constexpr uint32_t kIdleChecksPerClockRead = 8;

static_assert(proto::kScratchKeyBytes == engine::memory_key_bytes,
	      "a join record carries the transport's scratch key as it is");

uint64_t fnv1a(uint64_t h, const void* data, size_t len)
{
	auto* p = static_cast<const unsigned char*>(data);
	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

// An unset constant (empty) takes `fallback` silently.
double parse_double(const std::string& text, double fallback, const char* name)
{
	if (text.empty())
		return fallback;
	char* end = nullptr;
	double v = strtod(text.c_str(), &end);
	if (!end || *end || !(v >= 0) || !std::isfinite(v)) {
		RCOLL_WARN(FI_LOG_CORE, "FI_RCOLL_%s=%s is not a finite number >= 0; using %g\n",
			   name, text.c_str(), fallback);
		return fallback;
	}
	return v;
}

// The cost model's constants between hosts where the user set none: those
// of the core the endpoint runs on. On tcp a message costs system calls at
// both ends besides the wire: one-way 8 B takes about 10 us on loopback and
// streams reach about 3 GB/s, and of alpha 5, 10 and 20 us, 20 picked the
// fastest algorithms at 2 to 8 ranks (net, libfabric 1.17's successor to
// tcp, and sockets are the kernel's TCP too). RDMA cores keep the figures
// of an InfiniBand EDR link (2 us, 10 GB/s).
engine::CostParams core_costs(const fi_info* core)
{
	engine::CostParams cost;
	if (kernel_tcp_core(core)) {
		cost.alpha_us = 20;
		cost.beta_us_per_byte = 0.00033;
	}
	return cost;
}

// Tuning rules of the core the endpoint runs on, before the user's
// (FI_RCOLL_COLL_TUNE, whose rules win where both match).
std::string_view core_rules(const fi_info* core)
{
	return kernel_tcp_core(core) ? engine::kernel_tcp_tuning : std::string_view();
}

} // namespace

namespace {

int close_group(fid* f)
{
	return guarded([&] {
		CollGroup* g = owner_of<CollGroup>(f);
		std::lock_guard guard(g->ep->domain->lock);
		return g->ep->coll->close(*g);
	});
}

} // namespace

Collectives::Collectives(Endpoint& ep)
	: ep_(ep), config_(group_config(false)), local_config_(group_config(true))
{}

Collectives::~Collectives() = default;

// `local`: for groups whose members all reach each other through this
// host's memory, whose cost model has constants of its own (FI_RCOLL_COLL_
// LOCAL_*; an unset one takes the value between hosts). A group across
// hosts charges those constants to its edges between members on one host.
engine::GroupConfig Collectives::group_config(bool local) const
{
	const Config& c = config();
	const engine::CostParams core = core_costs(ep_.domain->core_info.get());
	engine::CostParams remote;
	remote.alpha_us = parse_double(c.coll_alpha_us, core.alpha_us, "COLL_ALPHA_US");
	remote.beta_us_per_byte = parse_double(c.coll_beta_us_per_byte, core.beta_us_per_byte,
					       "COLL_BETA_US_PER_BYTE");
	remote.gamma_us_per_byte = parse_double(c.coll_gamma_us_per_byte, core.gamma_us_per_byte,
						"COLL_GAMMA_US_PER_BYTE");
	remote.overhead_us = parse_double(c.coll_overhead_us, 0, "COLL_OVERHEAD_US");
	remote.local_alpha_us =
		parse_double(c.coll_local_alpha_us, remote.alpha_us, "COLL_LOCAL_ALPHA_US");
	remote.local_beta_us_per_byte =
		parse_double(c.coll_local_beta_us_per_byte, remote.beta_us_per_byte,
			     "COLL_LOCAL_BETA_US_PER_BYTE");
	remote.local_overhead_us = parse_double(c.coll_local_overhead_us, remote.overhead_us,
						"COLL_LOCAL_OVERHEAD_US");
	engine::CostParams cost = remote;
	if (local) {
		cost.alpha_us = remote.local_alpha_us;
		cost.beta_us_per_byte = remote.local_beta_us_per_byte;
		cost.overhead_us = remote.local_overhead_us;
		cost.gamma_us_per_byte =
			parse_double(c.coll_local_gamma_us_per_byte, remote.gamma_us_per_byte,
				     "COLL_LOCAL_GAMMA_US_PER_BYTE");
	}
	RCOLL_INFO(FI_LOG_CORE,
		   "collective cost model%s: alpha %g us, beta %g us/B, gamma %g us/B, o %g us\n",
		   local ? " on this host" : " between hosts", cost.alpha_us, cost.beta_us_per_byte,
		   cost.gamma_us_per_byte, cost.overhead_us);
	std::vector<engine::TuneRule> rules, user_rules;
	std::string error;
	if (engine::parse_tuning(core_rules(ep_.domain->core_info.get()), rules, error) !=
	    engine::Errc::ok)
		RCOLL_WARN(FI_LOG_CORE, "the core's tuning rules ignored: %s\n", error.c_str());
	if (engine::parse_tuning(c.coll_tune, user_rules, error) == engine::Errc::ok)
		rules.insert(rules.end(), user_rules.begin(), user_rules.end());
	else
		RCOLL_WARN(FI_LOG_CORE, "FI_RCOLL_COLL_TUNE ignored: %s\n", error.c_str());
	engine::GroupConfig g;
	g.selector = engine::Selector(cost, std::move(rules));
	// On the kernel's TCP a write straight into a member's buffer (after
	// its key came) measured slower than one staged through its scratch
	// and copied out: 2 ranks over loopback, interleaved rounds, 128 KiB
	// 107-117 us against 50-81, 256 KiB 150-163 against 71-124 (4 ranks:
	// 1.2x). Reductions keep the shared limit: staging a 256 KiB
	// allreduce as well showed no gain.
	if (!local && kernel_tcp_core(ep_.domain->core_info.get()))
		g.broadcast_eager_bytes = 256 * 1024;
	return g;
}

// Members must run the same configuration and engine (schedule_version):
// the schedules they build must mirror each other.
uint64_t Collectives::config_fingerprint() const
{
	const Config& c = config();
	uint64_t h = 0xcbf29ce484222325ULL;
	h = fnv1a(h, &engine::schedule_version, sizeof(engine::schedule_version));
	h = fnv1a(fnv1a(h, c.coll_tune.data(), c.coll_tune.size()), "|", 1);
	const std::string_view core_tune = core_rules(ep_.domain->core_info.get());
	h = fnv1a(fnv1a(h, core_tune.data(), core_tune.size()), "|", 1);
	// The constants in use, not their spelling: a value set to the core's
	// default agrees with one left unset, and two cores' defaults differ.
	for (const engine::GroupConfig* g : {&config_, &local_config_}) {
		const engine::CostParams& cost = g->selector.params();
		for (double v : {cost.alpha_us, cost.beta_us_per_byte, cost.gamma_us_per_byte,
				 cost.local_alpha_us, cost.local_beta_us_per_byte, cost.overhead_us,
				 cost.local_overhead_us}) {
			v = v == 0 ? 0.0 : v; // -0 and 0 alike
			h = fnv1a(h, &v, sizeof(v));
		}
		h = fnv1a(h, &g->broadcast_eager_bytes, sizeof(g->broadcast_eager_bytes));
	}
	// And on whether the model sees where they run.
	h = fnv1a(h, &c.coll_placement, sizeof(c.coll_placement));
	// Members must agree on which calls take the shared-memory path.
	for (size_t v :
	     {size_t(c.coll_shm), c.coll_shm_bcast_max, c.coll_shm_reduce_max, c.coll_shm_split_min,
	      c.coll_shm_single_copy_min, c.coll_shm_single_copy_allreduce_min})
		h = fnv1a(h, &v, sizeof(v));
	return h;
}

int Collectives::join(const fi_collective_addr* addr, uint64_t flags, fid_mc** mc, void* context)
{
	if (!(flags & FI_COLLECTIVE) || !addr || !addr->set || !mc)
		return -FI_EINVAL;
	if (!ep_.enabled)
		return -FI_EOPBADSTATE;
	if (!ep_.app.eq) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: bind an EQ to the endpoint first\n");
		return -FI_ENOEQ;
	}
	const AvSet* set = owner_of<AvSet>(const_cast<fid_av_set*>(addr->set));
	if (set->av != ep_.app.av)
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
		const EpAddress* a = ep_.app.av->lookup(set->members[r]);
		if (!a)
			return -FI_EINVAL;
		if (!a->keyed()) {
			// Members agree on a group by their keys.
			RCOLL_WARN(FI_LOG_EP_CTRL,
				   "fi_join: member %u was inserted by node and service "
				   "and has not been reached yet; insert its fi_getname address\n",
				   r);
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

	// Members agree on this join by its id: the member list, the set's
	// comm_key if it has one, and how many joins of that list and key this
	// endpoint made before (so joins of one list with different keys may
	// happen in any order).
	// The member list is known: this join has its id on every member from
	// here on, whether it goes on or fails. The ordinal is used up before
	// anything can fail, so that the next join of the list has the same id
	// everywhere; a join that fails tells the members it reaches (a stop
	// notice), whose joins of this id then fail too.
	uint64_t id_base = list_hash;
	if (!set->comm_key.empty())
		id_base = fnv1a(list_hash, set->comm_key.data(), set->comm_key.size());
	const uint32_t ordinal = ordinals_[id_base]++;
	g->join_id = fnv1a(id_base, &ordinal, sizeof(ordinal));

	int ret = 0;
	for (uint32_t r = 0; r < size; r++) {
		int err = 0;
		if (r != g->rank && !(peers[r] = ep_.peer_for(set->members[r], err)) && !ret)
			ret = err;
	}
	uint32_t slot = 0;
	while (slot < slots_.size() && slots_[slot])
		slot++;
	if (!ret && slot >= CollTransport::kMaxSlots) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: %u groups per endpoint at most\n",
			   CollTransport::kMaxSlots);
		ret = -FI_ENOSPC;
	}
	// Every arrival counter of the group must fit an arrival message.
	if (!ret && engine::Group::counter_count(size, config_) > CollTransport::kMaxCounters)
		ret = -FI_EINVAL;
	if (!ret) {
		g->peers = peers;
		g->transport = std::make_unique<CollTransport>(ep_, slot, peers, g->rank);
		ret = g->transport->init(engine::Group::scratch_bytes(size, config_),
					 engine::Group::counter_count(size, config_),
					 config().coll_local);
	}
	if (ret) {
		abandon_join(g->join_id, g->rank, peers);
		return ret;
	}

	g->join_context = context;
	g->heard.assign(size, false);
	g->heard[g->rank] = true;
	g->retired.assign(size, false);
	g->retired[g->rank] = true;
	g->missing = size - 1;

	g->shell.owner = g.get();
	g->shell.fid.fid.fclass = FI_CLASS_MC;
	g->shell.fid.fid.context = context;
	g->shell.fid.fid.ops = &fid_ops_table<close_group>;
	g->shell.fid.fi_addr = kGroupAddressBit | slot;

	// In its slot before its records go: whatever a send sets off (a
	// failed connection) finds the group, and so do the members' answers.
	if (slot == slots_.size())
		slots_.emplace_back();
	CollGroup& joined = *g;
	slots_[slot] = std::move(g);

	proto::JoinRecord rec;
	rec.rank = joined.rank;
	rec.size = size;
	rec.slot = slot;
	rec.config = config_fingerprint();
	rec.scratch = joined.transport->scratch_key().bytes;
	const CollTransport::LocalAddress local = joined.transport->local_address();
	rec.host = local.host;
	rec.nonce = local.nonce;
	rec.pid = local.pid;
	rec.fd = local.fd;
	std::byte record[proto::JoinRecord::kWireSize];
	proto::encode_join_record(rec, record);
	ret = send_notice(joined.join_id, joined.rank, joined.peers, record, &joined);
	if (ret) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: sending the join record: %s\n",
			   fi_strerror(-ret));
		// Members that got the record may write into our scratch: the
		// group fails like any other (their joins too, by our stop
		// notice) and keeps its slot until they stopped. The application
		// gets the error and no group, so no event either.
		joined.closed = true;
		begin_failure(joined, -ret);
		release_if_done(joined); // may free it
		return ret;
	}
	*mc = &joined.shell.fid;

	// Records and stop notices that arrived before this call.
	std::vector<Early> ready = take_early(joined.join_id);
	for (const Early& e : ready)
		if (!e.stop)
			accept_record(joined, e.peer_key, e.record);
	// A member that failed this join before we made it: ours fails too,
	// rather than complete from its record and wait for it in every call.
	for (const Early& e : ready)
		if (e.stop && e.stop_rank < joined.size &&
		    joined.member_keys[e.stop_rank] == e.peer_key) {
			begin_failure(joined, FI_EIO);
			joined.quiet[e.stop_rank] = true;
		}
	maybe_finish_join(joined);
	return 0;
}

void Collectives::forget_early(uint64_t peer_key)
{
	auto sender = early_senders_.find(peer_key);
	if (sender == early_senders_.end())
		return;
	for (const uint64_t join_id : sender->second.joins) {
		auto [it, last] = early_.equal_range(join_id);
		while (it != last)
			it = it->second.peer_key == peer_key ? early_.erase(it) : std::next(it);
	}
	early_senders_.erase(sender);
}

std::vector<Collectives::Early> Collectives::take_early(uint64_t join_id)
{
	auto [first, last] = early_.equal_range(join_id);
	std::vector<Early> taken;
	for (auto it = first; it != last; ++it) {
		if (auto sender = early_senders_.find(it->second.peer_key);
		    sender != early_senders_.end()) {
			sender->second.joins.erase(join_id);
			if (--sender->second.total == 0)
				early_senders_.erase(sender);
		}
		taken.push_back(std::move(it->second));
	}
	early_.erase(join_id);
	return taken;
}

// A join that failed before this member exposed anything (no record sent):
// the members it reaches fail theirs by its stop notice, and what they sent
// or send for it is dropped (it is never made here).
void Collectives::abandon_join(uint64_t join_id, uint32_t rank, const std::vector<Peer*>& peers)
{
	std::byte notice[proto::StopNotice::kWireSize];
	proto::encode_stop_notice({rank}, notice);
	send_notice(join_id, rank, peers, notice);
	take_early(join_id);
	abandoned_.insert(join_id);
}

// A member's record can arrive before our own record to it has left: it
// waits in the peer's queue until our side of that connection is set up
// (the peer's data may come in before the core reports the connection to
// us, and a lost simultaneous connect waits for the peer's), or in the
// core behind a full connection. Completing then would let the
// application stop calling in (under manual progress, nothing else sends
// it) while that member's join waits for the record forever. So the join
// completes once every record was heard and the core reported ours sent.
void Collectives::maybe_finish_join(CollGroup& g)
{
	if (g.state != CollGroup::State::joining)
		return;
	if (g.record_error)
		return begin_failure(g, g.record_error);
	if (g.missing || g.records_unsent)
		return;
	// Whether the group's calls may go straight through shared memory:
	// every member says whether it maps all the others, and the join waits
	// until the members this one maps have said it.
	const auto agreed = g.transport->shm_path_agreed();
	if (!agreed)
		return;
	if (agreed->shm && config().coll_shm) {
		// Broadcasts and allgather blocks from coll_shm_single_copy_min go
		// in one copy by cross-memory attach wherever every member may
		// read every member's memory: at 2 ranks with a CPU each it took
		// 0.78-1.07x of Open MPI's time (which copies the same way) from
		// 32 KiB to 16 MiB, where two copies pipelined through the slots
		// (of 16 KiB then) took 1.3-1.5x as long as one from 256 KiB to 4 MiB (0.8x at
		// 16 MiB), and 2.4-3.5x when the two CPUs pass cache lines slowly
		// (a flag exchange of 0.24 us, not 0.05). With 64 KiB slots and
		// the CPUs passing lines fast it is the other way round: 2-rank
		// broadcasts of 32 KiB-64 MiB through the slots took 0.38-0.59x
		// of Open MPI's time in-job, in one copy 0.95-1.20x (which copies
		// the same way); allgathers 0.35-1.01x against 0.77-1.00x. One
		// copy stays: it is at par with Open MPI in either placement, and
		// a host's placement moves while a job runs.
		// Allreduces from coll_shm_single_copy_allreduce_min go the same
		// way (each member reads its share of the others' inputs, then
		// their reduced shares): at 2 ranks 0.78-0.82x of Open MPI at 1 MiB
		// where the slots took 1.04-1.14x.
		// Reductions go through the slots, two pipelined copies that beat
		// the engine's 1.3-1.9x from 256 KiB; but a member that yields
		// gives its CPU away at every chunk, so crowded, the slots take
		// only reductions up to coll_shm_reduce_max.
		const bool crowded = agreed->crowded;
		const bool single_copy = agreed->reads_all;
		try {
			g.shm = g.transport->local_collectives(
				{.broadcast_max = config().coll_shm_bcast_max,
				 .reduction_max = crowded ? config().coll_shm_reduce_max
							  : std::max(config().coll_shm_reduce_max,
								     config().coll_shm_bcast_max),
				 .split_min = config().coll_shm_split_min,
				 .member_0_releases = crowded},
				single_copy
					? std::optional(local::LocalCollectives::SingleCopyMin{
						  .broadcast = config().coll_shm_single_copy_min,
						  .allreduce =
							  config().coll_shm_single_copy_allreduce_min})
					: std::nullopt);
		} catch (const std::bad_alloc&) {
			return finish_join(g, -FI_ENOMEM);
		}
		RCOLL_INFO(FI_LOG_EP_CTRL,
			   "collective group (slot %u, %u members): shared-memory path, %s, %s\n",
			   g.transport->slot(), g.size, crowded ? "crowded" : "a CPU each",
			   single_copy ? "single copy" : "no single copy");
	}
	// Every member sees the same verdict, so all pick the same constants.
	finish_join(g, 0, agreed->shm ? local_config_ : config_);
}

void Collectives::on_join_message(Peer& peer, const proto::MsgHeader& h,
				  std::span<const std::byte> payload)
{
	proto::JoinRecord join;
	proto::StopNotice stop;
	switch (proto::decode_coll_record(payload, join, stop)) {
	case proto::CollRecord::stop: on_stop_notice(peer, h.tag, stop.rank); return;
	case proto::CollRecord::retire: on_retire_notice(peer, h.tag, stop.rank); return;
	case proto::CollRecord::join: break;
	case proto::CollRecord::invalid:
		RCOLL_WARN(FI_LOG_EP_CTRL, "dropping a collective control message: neither a join "
					   "record nor a stop notice\n");
		return;
	}
	for (auto& g : slots_) {
		if (g && g->join_id == h.tag) {
			// Of a join made here; once it is over, nothing to keep.
			if (g->state == CollGroup::State::joining) {
				accept_record(*g, peer.key, join);
				maybe_finish_join(*g);
			}
			return;
		}
	}
	if (abandoned_.count(h.tag))
		return;
	keep_early(peer, h.tag, Early{peer.key, join});
}

// Kept without ageing (members of a lazily created group may join minutes
// apart), but only so many per peer: a record is only worth keeping for a
// join this endpoint may still make.
void Collectives::keep_early(Peer& peer, uint64_t join_id, Early e)
{
	EarlyBySender& sender = early_senders_[peer.key];
	if (sender.total >= config().coll_early_max) {
		RCOLL_WARN(FI_LOG_EP_CTRL,
			   "peer %016llx sent %zu join records or stop notices for joins this "
			   "endpoint has not made (FI_RCOLL_COLL_EARLY_MAX): failing it\n",
			   (unsigned long long)peer.key, sender.total + 1);
		ep_.schedule_failure(peer, -FI_ENOSPC);
		return;
	}
	early_.emplace(join_id, std::move(e));
	sender.total++;
	sender.joins.insert(join_id);
}

// A member's join record: checked against what we know of the group before
// its scratch key is trusted.
void Collectives::accept_record(CollGroup& g, uint64_t peer_key, const proto::JoinRecord& rec)
{
	auto refuse = [&](const char* why) {
		RCOLL_WARN(FI_LOG_EP_CTRL, "fi_join: bad join record: %s\n", why);
		if (g.state == CollGroup::State::joining)
			begin_failure(g, FI_EINVAL);
	};
	if (std::find(g.member_keys.begin(), g.member_keys.end(), peer_key) ==
	    g.member_keys.end()) {
		RCOLL_WARN(FI_LOG_EP_CTRL,
			   "dropping a join record from a peer that is no member\n");
		return;
	}
	if (rec.size != g.size || rec.rank >= g.size || g.member_keys[rec.rank] != peer_key)
		return refuse("member list differs");
	if (rec.slot >= CollTransport::kMaxSlots)
		return refuse("slot");
	if (rec.config != config_fingerprint())
		return refuse("collective configuration (FI_RCOLL_COLL_*) differs between members");
	if (g.state != CollGroup::State::joining || g.heard[rec.rank])
		return;
	g.heard[rec.rank] = true;
	g.missing--;
	engine::MemoryKey scratch;
	scratch.bytes = rec.scratch;
	g.transport->set_member(
		rec.rank, rec.slot, scratch,
		{.host = rec.host, .nonce = rec.nonce, .pid = rec.pid, .fd = rec.fd});
}

void Collectives::finish_join(CollGroup& g, int err, const engine::GroupConfig& config)
{
	if (g.state != CollGroup::State::joining)
		return;
	if (!err) {
		std::unique_ptr<engine::Group> group;
		engine::Errc e = engine::Errc::no_memory;
		try {
			// The trees group the members of each host, and the cost
			// model may price where they run.
			engine::GroupConfig placed = config;
			placed.hosts = g.transport->placement();
			placed.price_placement = rcoll::config().coll_placement;
			if (engine::spread_of(placed.hosts, g.size) == engine::Spread::shared)
				RCOLL_INFO(
					FI_LOG_EP_CTRL,
					"collective group (slot %u, %u members) on %u hosts: "
					"trees go between hosts at their top levels%s\n",
					g.transport->slot(), g.size,
					engine::pattern::HostGroups(g.size, placed.hosts).count(),
					placed.price_placement ? ", and the cost model prices it"
							       : "");
			e = engine::Group::create(g.rank, g.size, *g.transport, placed, group);
		} catch (const std::bad_alloc&) {
		}
		if (e != engine::Errc::ok)
			err = -int(e);
		else
			g.group = std::move(group);
	}
	if (err) {
		if (!g.failure)
			return begin_failure(g, -err); // which comes back here
		g.state = CollGroup::State::failed;
		if (g.closed)
			return; // the application gave the group up: no event names it
		fi_eq_err_entry e{};
		e.fid = &g.shell.fid.fid;
		e.context = g.join_context;
		e.err = -err;
		e.prov_errno = err;
		ep_.app.eq->push(FI_JOIN_COMPLETE, &e, sizeof(e), true);
		return;
	}
	g.state = CollGroup::State::joined;
	// A group on the shared-memory path reaches its scratch, and the
	// others', only in the calls that path leaves to the engine: faulting
	// them all in made its join 4-5x as slow (4 ranks: 4.5 ms, 24 ms).
	if (!g.shm)
		g.transport->prefault_scratch();
	if (g.transport->members_outnumber_cpus())
		g.crowded.emplace();
	ep_.count_peers_on_host(); // the join may have mapped peers' processes (pidfds)
	fi_eq_entry e{};
	e.fid = &g.shell.fid.fid;
	e.context = g.join_context;
	ep_.app.eq->push(FI_JOIN_COMPLETE, &e, sizeof(e));
}

int Collectives::close(CollGroup& g)
{
	if (g.state == CollGroup::State::joining) {
		// Closed before its join completed: the members fail their joins
		// by our stop notice (rather than complete a group this member
		// left), and the slot stays until they stopped writing into it.
		g.closed = true;
		begin_failure(g, FI_ECANCELED);
		release_if_done(g); // may free it
		return 0;
	}
	if (group_busy(g))
		return -FI_EBUSY;
	// Members may still write into our scratch (the tail of a recycle
	// barrier, a credit): the slot and its registrations stay until every
	// member retired (retire()); the group only stops taking operations.
	g.closed = true;
	retire(g);
	return 0;
}

void Collectives::retire(CollGroup& g)
{
	if (!g.closed || g.retire_sent || g.failure || g.state != CollGroup::State::joined ||
	    !g.group->quiescent() || g.transport->writes_in_flight())
		return;
	// Behind every write of ours on each connection: when it arrives, all
	// of them have landed.
	std::byte notice[proto::StopNotice::kWireSize];
	proto::encode_retire_notice({g.rank}, notice);
	send_to_members(g, notice);
	g.retire_sent = true;
}

void Collectives::send_to_members(const CollGroup& g, std::span<const std::byte> notice)
{
	send_notice(g.join_id, g.rank, g.peers, notice);
}

namespace {

// A join record left, or could not go: that member would wait for it
// until its join timed out, so ours fails (maybe_finish_join).
void record_left(void* group, int err)
{
	auto* g = static_cast<CollGroup*>(group);
	g->records_unsent--;
	if (err && !g->record_error)
		g->record_error = err;
}

} // namespace

int Collectives::send_notice(uint64_t join_id, uint32_t rank, const std::vector<Peer*>& peers,
			     std::span<const std::byte> record, CollGroup* counted)
{
	proto::MsgHeader h;
	h.opcode = proto::Opcode::Eager;
	h.flags = proto::kFlagCollective | proto::kFlagTagged;
	h.tag = join_id;
	h.size = record.size();
	int first = 0;
	for (uint32_t r = 0; r < peers.size(); r++) {
		if (r == rank || !peers[r] || peers[r]->state == Peer::State::failed)
			continue;
		SentHook sent;
		if (counted) {
			sent = {&record_left, counted};
			counted->records_unsent++;
		}
		int ret;
		try {
			ret = int(ep_.send_control(*peers[r], h, record.data(), record.size(), {},
						   sent));
		} catch (const std::bad_alloc&) {
			if (!counted)
				throw;    // a retire notice is sent again at the next call
			ret = -FI_ENOMEM; // queuing the record found no memory
		}
		if (ret && counted)
			counted->records_unsent--; // the hook runs only for a message that went
		if (ret && !first)
			first = ret;
	}
	return first;
}

// Freeing the slot is safe once nothing of any member can arrive at it
// through the core: an arrival names the slot, and a write the scratch
// registration. What members on this host write lands in our scratch file
// through their own mappings, which outlive ours, and no call buffer of
// ours is exposed once the group is idle or its operations ended. So a
// member counts once it retired or sent its stop notice (behind its last
// write on the connection), or once its connection failed. A failed group
// waits for that however long it takes: a member that wakes late still
// writes into the slot before it reads our notice, and the slot must not
// belong to another group by then.
bool Collectives::release_if_done(CollGroup& g)
{
	if (!g.closed)
		return false;
	bool done = g.failure ? g.transport->failed() && !g.transport->stop_marks_pending() &&
					!g.quiet.empty()
			      : g.retire_sent;
	// A record's hook names the group.
	done = done && !g.transport->writes_in_flight() && !g.records_unsent;
	for (uint32_t r = 0; done && r < g.size; r++)
		done = stopped_on_core(g, r);
	if (done)
		slots_[g.transport->slot()].reset();
	return done;
}

// Nothing of any member can still arrive: not through its connection (it
// sent its stop notice behind its writes, or the connection is gone), and
// not through this host's memory (it rang its stop mark, or its process is
// gone), since a broken connection does not stop a live member's memory
// writes into our call buffers.
bool Collectives::members_quiet(const CollGroup& g) const
{
	if (g.quiet.empty() || g.transport->writes_in_flight())
		return false;
	for (uint32_t r = 0; r < g.size; r++)
		if (!stopped_on_core(g, r) || g.transport->may_write_memory(r))
			return false;
	return true;
}

// A retire notice says as much as a stop notice: each travels behind the
// member's last write on its connection.
bool Collectives::stopped_on_core(const CollGroup& g, uint32_t r)
{
	return g.retired[r] || (!g.quiet.empty() && g.quiet[r]) ||
	       g.peers[r]->state == Peer::State::failed;
}

std::chrono::milliseconds Collectives::quiet_bound()
{
	return std::chrono::milliseconds(config().coll_timeout_ms ? config().coll_timeout_ms
								  : 10000);
}

// A member that died without its connection failing (a host gone silent:
// TCP notices only after minutes) must not hang the others: a group that has
// work pending and sees nothing move for FI_RCOLL_COLL_TIMEOUT_MS fails. The
// price: a member that computes longer than that before entering a
// collective the others already wait in fails them too (0 disables).
void Collectives::check_timeout(CollGroup& g, LazyNow& now)
{
	if (g.failure)
		return;
	// Movement restarts the clock, from the next check that sees none: the
	// clock is not read while the group moves.
	const uint64_t activity = g.transport->activity() + (g.shm ? g.shm->activity() : 0);
	if (activity != g.seen_activity) {
		g.seen_activity = activity;
		g.last_activity = {};
		g.idle_checks = 0;
		return;
	}
	// Nor on every check of an idle group: a node-local call waits in
	// polls of about a hundred nanoseconds, and a read of the clock would
	// be a tenth of each.
	if (++g.idle_checks % kIdleChecksPerClockRead != 0)
		return;
	const size_t limit_ms = config().coll_timeout_ms;
	if (!limit_ms)
		return;
	if (g.last_activity == CoarseClock::time_point{}) {
		g.last_activity = now();
		return;
	}
	if (now() - g.last_activity < std::chrono::milliseconds(limit_ms))
		return;
	RCOLL_WARN(FI_LOG_EP_DATA,
		   "collective group (slot %u) made no progress for %zu ms: failing it\n",
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
	g.failing_since = CoarseClock::now();
	g.quiet.assign(g.size, false);
	g.quiet[g.rank] = true;
	std::byte notice[proto::StopNotice::kWireSize];
	proto::encode_stop_notice({g.rank}, notice);
	if (g.state == CollGroup::State::joining) {
		// Members that finished their join may write already: they
		// learn it too, and say when they stopped.
		g.transport->fail(err);
		send_to_members(g, notice);
		finish_join(g, -err);
		return;
	}
	g.transport->stop();
	// Nothing of another process writes into the buffers of the calls that
	// run through shared memory: they end at once (progress reports them).
	if (g.shm)
		g.shm->fail(engine::Errc::io_error);
	send_to_members(g, notice); // behind our last write
	check_quiet(g, g.failing_since);
}

void Collectives::check_quiet(CollGroup& g, CoarseClock::time_point now)
{
	if (!g.failure || g.transport->failed() || g.quiet.empty())
		return;
	const bool all = members_quiet(g);
	if (!all && now - g.failing_since < quiet_bound())
		return;
	if (!all)
		RCOLL_WARN(FI_LOG_EP_DATA,
			   "collective group (slot %u): members did not confirm they "
			   "stopped; ending its operations anyway\n",
			   g.transport->slot());
	g.transport->fail(g.failure);
}

void Collectives::on_stop_notice(Peer& peer, uint64_t join_id, uint32_t rank)
{
	for (auto& g : slots_) {
		if (!g || g->join_id != join_id || rank >= g->size ||
		    g->member_keys[rank] != peer.key)
			continue;
		begin_failure(*g, FI_EIO); // a member failed the group: so do we
		if (!g->quiet.empty())
			g->quiet[rank] = true;
		check_quiet(*g, CoarseClock::now());
		return;
	}
	// For a join not made yet: it fails when it is made (each member sends
	// one notice per group, so none arrives for a group already released).
	// One that failed here before it began needs no notice.
	if (!abandoned_.count(join_id))
		keep_early(peer, join_id, Early{peer.key, {}, true, rank});
}

void Collectives::on_retire_notice(Peer& peer, uint64_t join_id, uint32_t rank)
{
	for (auto& g : slots_) {
		if (!g || g->join_id != join_id || rank >= g->size ||
		    g->member_keys[rank] != peer.key)
			continue;
		g->retired[rank] = true;
		release_if_done(*g);
		return;
	}
}

void Collectives::on_peer_failed(Peer& peer)
{
	for (auto& g : slots_) {
		if (!g || !g->transport->has_member(&peer))
			continue;
		// A retired group has nothing left to fail: a dead member writes
		// nothing more either.
		if (g->retire_sent) {
			release_if_done(*g);
			continue;
		}
		begin_failure(*g, FI_EIO);
		check_quiet(*g, CoarseClock::now());
	}
}

} // namespace rcoll
