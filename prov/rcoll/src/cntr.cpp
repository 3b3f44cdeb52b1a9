#include "cntr.hpp"

#include "domain.hpp"
#include "ep.hpp"
#include "wait.hpp"

namespace rcoll {
namespace {

int close_cntr(fid* f)
{
	return guarded([&] {
		Counter* c = owner_of<Counter>(f);
		if (!c->endpoints.empty())
			return -FI_EBUSY;
		c->domain->children--;
		delete c;
		return 0;
	});
}

template <class F>
auto with_counter(fid_cntr* f, F&& body)
{
	Counter* c = owner_of<Counter>(f);
	std::lock_guard guard(c->domain->lock);
	return body(c);
}

// Applications poll counters in a loop too: an unchanged value is an idle
// poll (see yield_if_crowded).
uint64_t cntr_read(fid_cntr* f)
{
	bool idle = false;
	const uint64_t value = with_counter(f, [&idle](Counter* c) {
		for (Endpoint* ep : c->endpoints)
			ep->progress();
		idle = c->value == c->last_read;
		c->last_read = c->value;
		return c->value;
	});
	if (idle)
		yield_if_crowded();
	return value;
}

uint64_t cntr_readerr(fid_cntr* f)
{
	return with_counter(f, [](Counter* c) {
		for (Endpoint* ep : c->endpoints)
			ep->progress();
		return c->errors;
	});
}

int cntr_add(fid_cntr* f, uint64_t v)
{
	return with_counter(f, [v](Counter* c) { return c->value += v, 0; });
}
int cntr_set(fid_cntr* f, uint64_t v)
{
	return with_counter(f, [v](Counter* c) { return c->value = v, 0; });
}
int cntr_adderr(fid_cntr* f, uint64_t v)
{
	return with_counter(f, [v](Counter* c) { return c->errors += v, 0; });
}
int cntr_seterr(fid_cntr* f, uint64_t v)
{
	return with_counter(f, [v](Counter* c) { return c->errors = v, 0; });
}

int cntr_wait(fid_cntr* f, uint64_t threshold, int timeout)
{
	return guarded([&] {
		Counter* c = owner_of<Counter>(f);
		std::unique_lock held(c->domain->lock);
		uint64_t errors_before = c->errors;
		int ret = wait_with_progress(
			held, c->endpoints,
			[&] { return c->value >= threshold || c->errors != errors_before; },
			timeout);
		if (c->errors != errors_before)
			return -FI_EAVAIL;
		return ret ? -FI_ETIMEDOUT : 0;
	});
}

fi_ops_cntr cntr_ops = {
	.size = sizeof(fi_ops_cntr),
	.read = cntr_read,
	.readerr = cntr_readerr,
	.add = cntr_add,
	.set = cntr_set,
	.wait = cntr_wait,
	.adderr = cntr_adderr,
	.seterr = cntr_seterr,
};

} // namespace

int Counter::open(Domain* domain, fi_cntr_attr* attr, fid_cntr** out, void* context)
{
	if (!out)
		return -FI_EINVAL;
	if (attr) {
		if (attr->events != FI_CNTR_EVENTS_COMP || attr->flags)
			return -FI_EINVAL;
		if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
		    attr->wait_obj != FI_WAIT_YIELD) {
			RCOLL_WARN(FI_LOG_CNTR, "counter wait object %d not supported\n",
				   int(attr->wait_obj));
			return -FI_ENOSYS;
		}
	}
	auto c = std::make_unique<Counter>();
	c->domain = domain;
	c->shell.owner = c.get();
	c->shell.fid.fid.fclass = FI_CLASS_CNTR;
	c->shell.fid.fid.context = context;
	c->shell.fid.fid.ops = &fid_ops_table<close_cntr>;
	c->shell.fid.ops = &cntr_ops;
	domain->children++;
	*out = &c.release()->shell.fid;
	return 0;
}

} // namespace rcoll
