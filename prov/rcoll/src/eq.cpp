#include "eq.hpp"

#include "fabric.hpp"

#include <chrono>
#include <cstring>

namespace rcoll {

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

ssize_t eq_read(fid_eq* f, uint32_t* event, void* buf, size_t len, uint64_t flags)
{
	return guarded([&]() -> ssize_t {
		EventQueue* eq = owner_of<EventQueue>(f);
		std::lock_guard guard(eq->lock);
		return take(eq, event, buf, len, flags);
	});
}

ssize_t eq_sread(fid_eq* f, uint32_t* event, void* buf, size_t len, int timeout, uint64_t flags)
{
	return guarded([&]() -> ssize_t {
		EventQueue* eq = owner_of<EventQueue>(f);
		if (eq->wait_obj == FI_WAIT_NONE)
			return -FI_EINVAL;
		std::unique_lock held(eq->lock);
		auto ready = [&] { return !eq->events.empty(); };
		if (timeout < 0)
			eq->changed.wait(held, ready);
		else if (!eq->changed.wait_for(held, std::chrono::milliseconds(timeout), ready))
			return -FI_EAGAIN;
		return take(eq, event, buf, len, flags);
	});
}

ssize_t eq_readerr(fid_eq* f, fi_eq_err_entry* buf, uint64_t flags)
{
	return guarded([&]() -> ssize_t {
		EventQueue* eq = owner_of<EventQueue>(f);
		if (!buf)
			return -FI_EINVAL;
		std::lock_guard guard(eq->lock);
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
