#include "cq.hpp"

#include "domain.hpp"
#include "ep.hpp"
#include "config.hpp"
#include "wait.hpp"

#include <sched.h>

#include <chrono>

#include <cstring>

namespace rcoll {
namespace {

size_t entry_size_of(fi_cq_format format)
{
	switch (format) {
	case FI_CQ_FORMAT_UNSPEC:
	case FI_CQ_FORMAT_CONTEXT: return sizeof(fi_cq_entry);
	case FI_CQ_FORMAT_MSG: return sizeof(fi_cq_msg_entry);
	case FI_CQ_FORMAT_DATA: return sizeof(fi_cq_data_entry);
	case FI_CQ_FORMAT_TAGGED: return sizeof(fi_cq_tagged_entry);
	}
	return 0;
}

int close_cq(fid* f)
{
	return guarded([&] {
		CompletionQueue* cq = owner_of<CompletionQueue>(f);
		if (!cq->endpoints.empty())
			return -FI_EBUSY;
		cq->domain->children--;
		delete cq;
		return 0;
	});
}

void progress_bound(CompletionQueue* cq)
{
	for (Endpoint* ep : cq->endpoints)
		ep->progress();
}

// Copies out up to `count` completions; the entry formats are prefixes of
// fi_cq_tagged_entry.
ssize_t take(CompletionQueue* cq, void* buf, size_t count, fi_addr_t* src)
{
	if (!cq->errors.empty())
		return -FI_EAVAIL;
	size_t n = 0;
	auto* out = static_cast<char*>(buf);
	while (n < count && !cq->entries.empty()) {
		const CompletionQueue::Entry& c = cq->entries.front();
		memcpy(out + n * cq->entry_size, &c.e, cq->entry_size);
		if (src)
			src[n] = c.source;
		cq->entries.pop_front();
		n++;
	}
	return n ? ssize_t(n) : -FI_EAGAIN;
}

ssize_t cq_readfrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src)
{
	return guarded([&]() -> ssize_t {
		CompletionQueue* cq = owner_of<CompletionQueue>(f);
		if (!buf && count)
			return -FI_EINVAL;
		ssize_t ret;
		{
			std::lock_guard guard(cq->domain->lock);
			if (cq->entries.empty() && cq->errors.empty())
				progress_bound(cq);
			ret = take(cq, buf, count, src);
		}
		if (ret == -FI_EAGAIN)
			yield_if_crowded();
		return ret;
	});
}

ssize_t cq_read(fid_cq* f, void* buf, size_t count) { return cq_readfrom(f, buf, count, nullptr); }

ssize_t cq_sreadfrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src, const void* cond,
		     int timeout)
{
	return guarded([&]() -> ssize_t {
		CompletionQueue* cq = owner_of<CompletionQueue>(f);
		if (cq->wait_obj == FI_WAIT_NONE || (!buf && count))
			return -FI_EINVAL;
		size_t threshold = 1;
		if (cond)
			threshold = std::max<size_t>(
				1, std::min(count, *static_cast<const size_t*>(cond)));
		std::unique_lock held(cq->domain->lock);
		int ret = wait_with_progress(
			held, cq->endpoints,
			[&] {
				return cq->signaled || !cq->errors.empty() ||
				       cq->entries.size() >= threshold;
			},
			timeout);
		if (cq->signaled && cq->entries.empty() && cq->errors.empty()) {
			cq->signaled = false;
			return -FI_ECANCELED;
		}
		cq->signaled = false;
		if (ret && cq->entries.empty() && cq->errors.empty())
			return -FI_EAGAIN;
		return take(cq, buf, count, src);
	});
}

ssize_t cq_sread(fid_cq* f, void* buf, size_t count, const void* cond, int timeout)
{
	return cq_sreadfrom(f, buf, count, nullptr, cond, timeout);
}

ssize_t cq_readerr(fid_cq* f, fi_cq_err_entry* buf, uint64_t flags)
{
	return guarded([&]() -> ssize_t {
		CompletionQueue* cq = owner_of<CompletionQueue>(f);
		if (!buf || flags)
			return -FI_EINVAL;
		std::lock_guard guard(cq->domain->lock);
		if (cq->errors.empty())
			progress_bound(cq);
		if (cq->errors.empty())
			return -FI_EAGAIN;
		const fi_cq_err_entry& e = cq->errors.front().e;
		uint32_t version = cq->domain->api_version();
		if (FI_VERSION_GE(version, FI_VERSION(1, 5))) {
			// The caller may supply its own err_data buffer.
			void* user_data = buf->err_data;
			size_t user_size = buf->err_data_size;
			*buf = e;
			if (user_size && user_data) {
				buf->err_data = user_data;
				buf->err_data_size = 0;
			} else {
				buf->err_data = nullptr;
				buf->err_data_size = 0;
			}
		} else {
			memcpy(buf, &e, offsetof(fi_cq_err_entry, err_data_size));
			buf->err_data = nullptr;
		}
		cq->errors.pop_front();
		return 1;
	});
}

int cq_signal(fid_cq* f)
{
	return guarded([&] {
		CompletionQueue* cq = owner_of<CompletionQueue>(f);
		std::lock_guard guard(cq->domain->lock);
		cq->signaled = true;
		return 0;
	});
}

fi_ops_cq cq_ops = {
	.size = sizeof(fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom,
	.readerr = cq_readerr,
	.sread = cq_sread,
	.sreadfrom = cq_sreadfrom,
	.signal = cq_signal,
	.strerror = prov_strerror<fid_cq>,
};

} // namespace

int CompletionQueue::open(Domain* domain, fi_cq_attr* attr, fid_cq** out, void* context)
{
	if (!attr || !out)
		return -FI_EINVAL;
	if (attr->flags & ~uint64_t(FI_AFFINITY)) {
		RCOLL_WARN(FI_LOG_CQ, "fi_cq_open flags %#llx not supported\n",
			   (unsigned long long)attr->flags);
		return -FI_EBADFLAGS;
	}
	size_t size = entry_size_of(attr->format);
	if (!size) {
		RCOLL_WARN(FI_LOG_CQ, "CQ format %d unknown\n", int(attr->format));
		return -FI_EINVAL;
	}
	switch (attr->wait_obj) {
	case FI_WAIT_NONE:
	case FI_WAIT_UNSPEC:
	case FI_WAIT_YIELD: break;
	default:
		RCOLL_WARN(FI_LOG_CQ, "CQ wait object %d not supported (use FI_WAIT_UNSPEC)\n",
			   int(attr->wait_obj));
		return -FI_ENOSYS;
	}
	auto cq = std::make_unique<CompletionQueue>();
	cq->domain = domain;
	cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
	cq->entry_size = size;
	cq->wait_obj = attr->wait_obj;
	cq->shell.owner = cq.get();
	cq->shell.fid.fid.fclass = FI_CLASS_CQ;
	cq->shell.fid.fid.context = context;
	cq->shell.fid.fid.ops = &fid_ops_table<close_cq>;
	cq->shell.fid.ops = &cq_ops;
	domain->children++;
	*out = &cq.release()->shell.fid;
	return 0;
}

} // namespace rcoll
