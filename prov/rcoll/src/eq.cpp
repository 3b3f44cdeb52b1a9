#include "eq.hpp"

#include "domain.hpp"
#include "ep.hpp"
#include "fabric.hpp"
#include "wait.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace rcoll {

namespace {

EventQueue::Bound* find_bound(EventQueue& eq, const Endpoint* ep)
{
	auto it = std::find_if(eq.endpoints.begin(), eq.endpoints.end(),
			       [&](const EventQueue::Bound& b) { return b.ep == ep; });
	return it == eq.endpoints.end() ? nullptr : &*it;
}

} // namespace

void EventQueue::attach(Endpoint* ep)
{
	{
		std::lock_guard guard(lock);
		endpoints.push_back({ep});
		attached++;
	}
	changed.notify_all();
}

void EventQueue::detach(Endpoint* ep)
{
	std::unique_lock held(lock);
	Bound* b = find_bound(*this, ep);
	if (!b)
		return;
	b->detaching = true;
	undriven.wait(held, [&] { return find_bound(*this, ep)->drivers == 0; });
	std::erase_if(endpoints, [&](const Bound& x) { return x.ep == ep; });
}

bool EventQueue::drive()
{
	std::vector<Endpoint*> eps;
	{
		std::lock_guard guard(lock);
		for (Bound& b : endpoints) {
			if (b.detaching)
				continue;
			b.drivers++;
			eps.push_back(b.ep);
		}
	}
	// This reader's hold on each endpoint ends however progress ends: a
	// detach() waits for it.
	struct Release {
		EventQueue& eq;
		const std::vector<Endpoint*>& eps;
		~Release()
		{
			{
				std::lock_guard guard(eq.lock);
				for (Endpoint* ep : eps)
					find_bound(eq, ep)->drivers--;
			}
			eq.undriven.notify_all();
		}
	} release{*this, eps};
	for (Endpoint* ep : eps) {
		std::lock_guard guard(ep->domain->lock);
		ep->progress();
	}
	return !eps.empty();
}

void EventQueue::push(uint32_t event, const void* data, size_t len, bool error)
{
	auto bytes = static_cast<const uint8_t*>(data);
	{
		std::lock_guard guard(lock);
		events.push_back({event, std::vector<uint8_t>(bytes, bytes + len), error});
	}
	changed.notify_all();
}

namespace {

int close_eq(fid* f)
{
	return guarded([&] {
		EventQueue* eq = owner_of<EventQueue>(f);
		if (eq->bound)
			return -FI_EBUSY;
		delete eq;
		return 0;
	});
}

// Returns the bytes copied, -FI_EAVAIL when an error event is at the head.
ssize_t take(EventQueue* eq, uint32_t* event, void* buf, size_t len, uint64_t flags)
{
	if (eq->events.empty())
		return -FI_EAGAIN;
	EventQueue::Event& head = eq->events.front();
	if (head.error)
		return -FI_EAVAIL;
	if (buf && len < head.data.size())
		return -FI_ETOOSMALL;
	if (event)
		*event = head.event;
	size_t n = head.data.size();
	if (buf)
		memcpy(buf, head.data.data(), n);
	if (!(flags & FI_PEEK))
		eq->events.pop_front();
	return ssize_t(n);
}

// The error event at the head, under the EQ lock.
ssize_t take_error(EventQueue* eq, fi_eq_err_entry* buf, uint64_t flags)
{
	if (eq->events.empty() || !eq->events.front().error)
		return -FI_EAGAIN;
	const auto& data = eq->events.front().data;
	fi_eq_err_entry e{};
	memcpy(&e, data.data(), std::min(data.size(), sizeof(e)));
	e.err_data = nullptr;
	e.err_data_size = 0;
	*buf = e;
	if (!(flags & FI_PEEK))
		eq->events.pop_front();
	return sizeof(*buf);
}

// `attempt` under the EQ lock; on an empty queue, once more after a
// progress round of the bound endpoints (manual progress: nothing else may
// drive them while the application waits here for FI_JOIN_COMPLETE).
template <class F>
ssize_t read_driving(EventQueue* eq, F&& attempt)
{
	{
		std::lock_guard guard(eq->lock);
		if (!eq->events.empty())
			return attempt();
	}
	if (!eq->drive())
		return -FI_EAGAIN;
	ssize_t ret;
	{
		std::lock_guard guard(eq->lock);
		ret = attempt();
	}
	if (ret == -FI_EAGAIN)
		yield_if_crowded();
	return ret;
}

ssize_t eq_read(fid_eq* f, uint32_t* event, void* buf, size_t len, uint64_t flags)
{
	return guarded([&]() -> ssize_t {
		EventQueue* eq = owner_of<EventQueue>(f);
		return read_driving(eq, [&] { return take(eq, event, buf, len, flags); });
	});
}

// Drives the bound endpoints like wait_with_progress: spinning for
// FI_RCOLL_SPIN_US, then sleeping in slices growing from a yield to a
// millisecond, woken early by an event. With no endpoint bound (an EQ of
// AVs alone) there is nothing to drive: it sleeps until an event, a bind or
// the timeout.
ssize_t eq_sread(fid_eq* f, uint32_t* event, void* buf, size_t len, int timeout, uint64_t flags)
{
	return guarded([&]() -> ssize_t {
		using namespace std::chrono;
		EventQueue* eq = owner_of<EventQueue>(f);
		if (eq->wait_obj == FI_WAIT_NONE)
			return -FI_EINVAL;
		const auto start = steady_clock::now();
		const auto spin_until = start + microseconds(spin_budget_us());
		const auto deadline = start + milliseconds(timeout);
		microseconds nap{0};
		for (;;) {
			{
				std::lock_guard guard(eq->lock);
				if (!eq->events.empty())
					return take(eq, event, buf, len, flags);
			}
			const bool driving = eq->drive();
			std::unique_lock held(eq->lock);
			const uint64_t attached = eq->attached;
			auto ready = [&] {
				return !eq->events.empty() || eq->attached != attached;
			};
			if (eq->events.empty()) {
				const auto now = steady_clock::now();
				if (timeout >= 0 && now >= deadline)
					return -FI_EAGAIN;
				if (!driving) {
					if (timeout < 0)
						eq->changed.wait(held, ready);
					else
						eq->changed.wait_until(held, deadline, ready);
				} else if (now >= spin_until) {
					if (nap.count() == 0) {
						held.unlock();
						std::this_thread::yield();
						nap = microseconds(20);
						continue;
					}
					auto until = now + nap;
					if (timeout >= 0)
						until = std::min(until, deadline);
					eq->changed.wait_until(held, until, ready);
					nap = std::min(nap * 2, microseconds(1000));
				}
			}
			if (!eq->events.empty())
				return take(eq, event, buf, len, flags);
		}
	});
}

ssize_t eq_readerr(fid_eq* f, fi_eq_err_entry* buf, uint64_t flags)
{
	return guarded([&]() -> ssize_t {
		EventQueue* eq = owner_of<EventQueue>(f);
		if (!buf)
			return -FI_EINVAL;
		return read_driving(eq, [&]() -> ssize_t { return take_error(eq, buf, flags); });
	});
}

ssize_t eq_write(fid_eq* f, uint32_t event, const void* buf, size_t len, uint64_t)
{
	return guarded([&]() -> ssize_t {
		if (!buf && len)
			return -FI_EINVAL;
		owner_of<EventQueue>(f)->push(event, buf, len, false);
		return ssize_t(len);
	});
}

fi_ops_eq eq_ops = {
	.size = sizeof(fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = eq_write,
	.sread = eq_sread,
	.strerror = prov_strerror<fid_eq>,
};

} // namespace

int EventQueue::open(Fabric* fabric, fi_eq_attr* attr, fid_eq** out, void* context)
{
	if (!attr || !out)
		return -FI_EINVAL;
	if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
	    attr->wait_obj != FI_WAIT_MUTEX_COND) {
		RCOLL_WARN(FI_LOG_EQ, "EQ wait object %d not supported\n", int(attr->wait_obj));
		return -FI_ENOSYS;
	}
	auto eq = std::make_unique<EventQueue>();
	eq->fabric = fabric;
	eq->wait_obj = attr->wait_obj;
	eq->shell.owner = eq.get();
	eq->shell.fid.fid.fclass = FI_CLASS_EQ;
	eq->shell.fid.fid.context = context;
	eq->shell.fid.fid.ops = &fid_ops_table<close_eq>;
	eq->shell.fid.ops = &eq_ops;
	*out = &eq.release()->shell.fid;
	return 0;
}

} // namespace rcoll
