// fi_collective(3) operations on joined groups: the entry points, posting
// to the engine (prov/rcoll/engine) and reporting its completions, and what
// rcoll supports per collective (fi_query_collective).
#include "coll.hpp"

#include "av.hpp"
#include "ep.hpp"

#include <algorithm>
#include <chrono>

#include <new>

namespace rcoll {

namespace {

// Reporting from a posting call, which accepted the operation: running out
// of memory for a completion must not become the call's return code (the
// application would post it again, and its group fall out of step). What
// was not reported waits in its runner for progress().
template <class Report>
void report_accepted(Report&& report) noexcept
{
	try {
		report();
	} catch (const std::bad_alloc&) {
	}
}

} // namespace

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

ssize_t Collectives::post(fi_addr_t coll_addr, fi_addr_t root_addr, engine::Request& req, uint64_t,
			  bool finish_here)
{
	CollGroup* g = group_at(coll_addr);
	if (!g) {
		RCOLL_WARN(FI_LOG_EP_DATA, "collective on an address that is no joined group\n");
		return -FI_EINVAL;
	}
	if (engine::is_rooted(req.coll)) {
		const EpAddress* a = ep_.app.av->lookup(root_addr);
		uint32_t root = g->size;
		for (uint32_t r = 0; a && r < g->size; r++)
			if (g->member_keys[r] == a->key)
				root = r;
		if (root == g->size) {
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "collective root is not a member of the group\n");
			return -FI_EINVAL;
		}
		req.root = root;
	}
	// The failure clock starts when the group goes from idle to busy, at
	// its first check (check_timeout): no clock read here.
	const bool alone = !group_busy(*g);
	if (alone)
		g->last_activity = {};
	if (g->shm && g->shm->takes(req)) {
		engine::Errc e = g->shm->post(req);
		if (e != engine::Errc::ok)
			return g->failure ? -g->failure : -ssize_t(int(e));
		if (finish_here && alone && finish_alone(*g))
			return FI_RCOLL_FINISHED;
		report_accepted([&] { settle_shm(*g); });
		return 0;
	}
	engine::Errc e = g->group->post(req);
	if (e != engine::Errc::ok)
		return g->failure ? -g->failure : -ssize_t(int(e));
	// Start it now: its first writes leave in this call rather than after
	// the next read of the core's queue. One that needs nothing else (a
	// broadcast root's eager writes) ends here too, so that the
	// application's next poll finds it done without a system call.
	ep_.run_collectives([&] { g->group->progress(); });
	report_accepted([&] { report_completions(*g, *g->group); });
	return 0;
}

// A node-local call just posted with nothing else of its group in flight,
// whose caller only waits for it (FI_RCOLL_FINISHING_COLL_OPS): driven here,
// as the caller's polls would drive it, minus the completion's round trip
// through the queue and the rest of progress. It holds the domain lock, and
// nothing else of the endpoint moves meanwhile: for up to FI_RCOLL_SPIN_US,
// at most kFinishSpinMax (not at all while the host is crowded), and only
// while no other thread waits for the domain (DomainLock). Whether it
// ended well here; its completion, the group's only one, is then taken. One
// that failed completes through the queue as any other, with its error and
// the group's failure, so that a failure has one path whichever call saw it.
bool Collectives::finish_alone(CollGroup& g)
{
	using namespace std::chrono;
	constexpr auto kFinishSpinMax = microseconds(50);
	// Progress rounds between clock reads: most calls end within the first
	// (a few hundred nanoseconds), before the clock is ever read.
	constexpr unsigned kClockEvery = 64;
	if (!g.shm->has_completion()) {
		const auto budget = std::min(microseconds(spin_budget_us()), kFinishSpinMax);
		if (budget.count() == 0)
			return false;
		steady_clock::time_point until{};
		for (unsigned round = 1; !g.shm->has_completion(); round++) {
			if (round % kClockEvery == 0) {
				const auto now = steady_clock::now();
				if (round == kClockEvery)
					until = now + budget;
				else if (now >= until)
					return false;
			}
			// Another thread waits for the domain: its call may be
			// the one this call's peer waits for.
			if (ep_.domain->lock.contended())
				return false;
			g.shm->progress();
		}
	}
	if (g.shm->first_completion().status != engine::Errc::ok)
		return false;
	engine::Completion c;
	g.shm->next_completion(c);
	return true;
}

void Collectives::progress()
{
	LazyNow now;
	for (auto& g : slots_) {
		if (!g)
			continue;
		if (g->state == CollGroup::State::joining) {
			maybe_finish_join(*g);
			if (g->state == CollGroup::State::joining)
				check_timeout(*g, now);
			continue;
		}
		// First: these complete in a few hundred nanoseconds.
		if (g->shm && g->shm->any_outstanding()) {
			g->shm->progress();
			settle_shm(*g);
			if (g->shm->any_outstanding())
				check_timeout(*g, now);
		}
		if (!g->failure && g->group && g->group->peer_misbehaved()) {
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "collective group (slot %u): an arrival for a counter "
				   "it does not have; failing it\n",
				   g->transport->slot());
			begin_failure(*g, FI_EIO);
		}
		if (!g->failure && g->transport->misbehaved())
			begin_failure(*g, FI_EIO);
		// A member that stopped failed the group: so do we.
		if (!g->failure && (g->transport->write_error() || g->transport->member_stopped()))
			begin_failure(*g, FI_EIO);
		// A failing group is driven even when idle: the marks that say
		// which members stopped arrive through its transport. So is a
		// closed one until it retired: its recycles finish first.
		const bool failing = g->failure && !g->transport->failed();
		const bool retiring = g->closed && !g->retire_sent && !g->failure;
		if (g->group && (engine_busy(*g) || failing || retiring)) {
			g->group->progress();
			report_completions(*g, *g->group);
			if (g->group->any_outstanding())
				check_timeout(*g, now);
		}
		if (g->closed && !g->failure)
			retire(*g);
		if (g->failure) {
			g->transport
				->retry_stop_marks(); // also after fail(): members wait for them
			check_quiet(*g, now());
		}
		if (g->closed)
			release_if_done(*g); // may free `g`
	}
}

// A member on this host that failed the group's node-local calls fails the
// group here too (their completions carry the error), whether that showed
// in progress() or inside a posting call; then what they finished is
// reported.
void Collectives::settle_shm(CollGroup& g)
{
	if (g.shm->failed() && !g.failure) {
		if (g.shm->failure() == engine::Errc::invalid_argument) {
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "collective group (slot %u): members posted one call with "
				   "different arguments (count, datatype, operation, root or "
				   "collective), or a member's input and output overlap in part "
				   "where others read them; failing the group\n",
				   g.transport->slot());
			begin_failure(g, FI_EINVAL);
		} else {
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "collective group (slot %u): a member on this host failed it\n",
				   g.transport->slot());
			begin_failure(g, FI_EIO);
		}
	}
	report_completions(g, *g.shm);
}

template <class Runner>
void Collectives::report_completions(const CollGroup& g, Runner& runner)
{
	while (runner.has_completion()) {
		// Room first: when the CQ cannot grow, the completion stays with
		// the runner for a later call rather than being taken and lost.
		ep_.app.make_room_tx();
		engine::Completion c;
		runner.next_completion(c);
		int err = 0;
		if (c.status != engine::Errc::ok)
			err = g.failure ? g.failure : int(c.status);
		ep_.app.report_tx(c.context, FI_COLLECTIVE, 0, err, true, nullptr);
	}
}

bool Collectives::engine_busy(const CollGroup& g)
{
	return g.group && (g.group->any_outstanding() || g.transport->writes_in_flight());
}

bool Collectives::group_busy(const CollGroup& g)
{
	return engine_busy(g) || (g.shm && g.shm->any_outstanding());
}

bool Collectives::waits_only_on_host() const
{
	bool waiting = false;
	for (const auto& g : slots_) {
		if (!g)
			continue;
		if (g->state != CollGroup::State::joined || g->failure)
			return false;
		const bool engine = engine_busy(*g);
		if (engine &&
		    (g->transport->writes_in_flight() || !g->transport->reaches_all_on_host()))
			return false;
		waiting |= engine || (g->shm && g->shm->any_outstanding());
	}
	return waiting;
}

bool Collectives::busy() const
{
	for (const auto& g : slots_)
		if (g && group_busy(*g))
			return true;
	return false;
}

void Collectives::on_arrival(Peer& peer, const proto::ArrivalBody& a,
			     std::span<const std::byte> payload)
{
	if (a.slot >= slots_.size() || !slots_[a.slot]) {
		RCOLL_WARN(FI_LOG_EP_DATA, "collective arrival for unknown group slot %u\n",
			   a.slot);
		return;
	}
	slots_[a.slot]->transport->on_arrival(peer, a, payload);
}

// ---------------------------------------------------------------------------
// Entry points.

namespace {

// The engine declares its enums in libfabric's order, so these are casts.
static_assert(int(engine::Datatype::int8) == FI_INT8 &&
	      int(engine::Datatype::uint64) == FI_UINT64 &&
	      int(engine::Datatype::float32) == FI_FLOAT &&
	      int(engine::Datatype::float64) == FI_DOUBLE &&
	      int(engine::Datatype::float_complex) == FI_FLOAT_COMPLEX &&
	      int(engine::Datatype::long_double) == FI_LONG_DOUBLE &&
	      int(engine::Datatype::long_double_complex) == FI_LONG_DOUBLE_COMPLEX &&
	      engine::datatype_count == FI_LONG_DOUBLE_COMPLEX + 1);
static_assert(int(engine::ReduceOp::min) == FI_MIN && int(engine::ReduceOp::sum) == FI_SUM &&
	      int(engine::ReduceOp::band) == FI_BAND && int(engine::ReduceOp::bxor) == FI_BXOR &&
	      engine::reduce_op_count == FI_BXOR + 1);
static_assert(int(engine::Collective::barrier) == FI_BARRIER &&
	      int(engine::Collective::allreduce) == FI_ALLREDUCE &&
	      int(engine::Collective::reduce_scatter) == FI_REDUCE_SCATTER &&
	      int(engine::Collective::gather) == FI_GATHER &&
	      engine::collective_count == FI_GATHER + 1);

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

template <bool FinishHere>
ssize_t coll_barrier2(fid_ep* ep, fi_addr_t coll_addr, uint64_t flags, void* context)
{
	engine::Request r =
		request(engine::Collective::barrier, nullptr, nullptr, 0, FI_UINT8, context);
	return with_coll(ep, [&](Collectives& c) {
		return c.post(coll_addr, FI_ADDR_NOTAVAIL, r, flags, FinishHere);
	});
}

template <bool FinishHere>
ssize_t coll_barrier(fid_ep* ep, fi_addr_t coll_addr, void* context)
{
	return coll_barrier2<FinishHere>(ep, coll_addr, 0, context);
}

template <bool FinishHere>
ssize_t coll_broadcast(fid_ep* ep, void* buf, size_t count, void*, fi_addr_t coll_addr,
		       fi_addr_t root_addr, fi_datatype datatype, uint64_t flags, void* context)
{
	if (!valid_datatype(datatype))
		return -FI_EINVAL;
	engine::Request r =
		request(engine::Collective::broadcast, buf, buf, count, datatype, context);
	return with_coll(ep, [&](Collectives& c) {
		return c.post(coll_addr, root_addr, r, flags, FinishHere);
	});
}

// The collectives with an input and a result buffer share one shape.
template <engine::Collective Kind, bool FinishHere>
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
	return with_coll(ep, [&](Collectives& c) {
		return c.post(coll_addr, root_addr, r, flags, FinishHere);
	});
}

template <bool FinishHere>
ssize_t coll_alltoall(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		      void* result_desc, fi_addr_t coll_addr, fi_datatype datatype, uint64_t flags,
		      void* context)
{
	return coll_data<engine::Collective::alltoall, FinishHere>(
		ep, buf, count, desc, result, result_desc, coll_addr, FI_ADDR_NOTAVAIL, datatype,
		FI_MIN, flags, context);
}

template <bool FinishHere>
ssize_t coll_allreduce(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		       void* result_desc, fi_addr_t coll_addr, fi_datatype datatype, fi_op op,
		       uint64_t flags, void* context)
{
	return coll_data<engine::Collective::allreduce, FinishHere>(
		ep, buf, count, desc, result, result_desc, coll_addr, FI_ADDR_NOTAVAIL, datatype,
		op, flags, context);
}

template <bool FinishHere>
ssize_t coll_allgather(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		       void* result_desc, fi_addr_t coll_addr, fi_datatype datatype, uint64_t flags,
		       void* context)
{
	return coll_data<engine::Collective::allgather, FinishHere>(
		ep, buf, count, desc, result, result_desc, coll_addr, FI_ADDR_NOTAVAIL, datatype,
		FI_MIN, flags, context);
}

template <bool FinishHere>
ssize_t coll_reduce_scatter(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
			    void* result_desc, fi_addr_t coll_addr, fi_datatype datatype, fi_op op,
			    uint64_t flags, void* context)
{
	return coll_data<engine::Collective::reduce_scatter, FinishHere>(
		ep, buf, count, desc, result, result_desc, coll_addr, FI_ADDR_NOTAVAIL, datatype,
		op, flags, context);
}

template <bool FinishHere>
ssize_t coll_reduce(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		    void* result_desc, fi_addr_t coll_addr, fi_addr_t root_addr,
		    fi_datatype datatype, fi_op op, uint64_t flags, void* context)
{
	return coll_data<engine::Collective::reduce, FinishHere>(ep, buf, count, desc, result,
								 result_desc, coll_addr, root_addr,
								 datatype, op, flags, context);
}

template <bool FinishHere>
ssize_t coll_scatter(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		     void* result_desc, fi_addr_t coll_addr, fi_addr_t root_addr,
		     fi_datatype datatype, uint64_t flags, void* context)
{
	return coll_data<engine::Collective::scatter, FinishHere>(ep, buf, count, desc, result,
								  result_desc, coll_addr, root_addr,
								  datatype, FI_MIN, flags, context);
}

template <bool FinishHere>
ssize_t coll_gather(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
		    void* result_desc, fi_addr_t coll_addr, fi_addr_t root_addr,
		    fi_datatype datatype, uint64_t flags, void* context)
{
	return coll_data<engine::Collective::gather, FinishHere>(ep, buf, count, desc, result,
								 result_desc, coll_addr, root_addr,
								 datatype, FI_MIN, flags, context);
}

template <bool FinishHere>
constexpr fi_ops_collective collective_table = {
	.size = sizeof(fi_ops_collective),
	.barrier = coll_barrier<FinishHere>,
	.broadcast = coll_broadcast<FinishHere>,
	.alltoall = coll_alltoall<FinishHere>,
	.allreduce = coll_allreduce<FinishHere>,
	.allgather = coll_allgather<FinishHere>,
	.reduce_scatter = coll_reduce_scatter<FinishHere>,
	.reduce = coll_reduce<FinishHere>,
	.scatter = coll_scatter<FinishHere>,
	.gather = coll_gather<FinishHere>,
	.msg = enosys<decltype(fi_ops_collective::msg)>,
	.barrier2 = coll_barrier2<FinishHere>,
};

} // namespace

fi_ops_collective collective_ops = collective_table<false>;
const fi_rcoll_finishing_coll_ops finishing_collective_ops = {
	.size = sizeof(fi_rcoll_finishing_coll_ops),
	.coll = collective_table<true>,
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
