#include "av.hpp"

#include "attr.hpp"
#include "av_set.hpp"
#include "domain.hpp"
#include "eq.hpp"

#include <cstring>

namespace rcoll {
namespace {

int close_av(fid* f)
{
	return guarded([&] {
		AddressVector* av = owner_of<AddressVector>(f);
		if (av->endpoints)
			return -FI_EBUSY;
		if (av->eq)
			av->eq->bound--;
		av->domain->children--;
		delete av;
		return 0;
	});
}

int bind_av(fid* f, fid* bfid, uint64_t)
{
	return guarded([&] {
		if (bfid->fclass != FI_CLASS_EQ)
			return -FI_EINVAL;
		AddressVector* av = owner_of<AddressVector>(f);
		if (av->eq)
			return -FI_EINVAL; // one EQ per AV
		av->eq = owner_of<EventQueue>(bfid);
		av->eq->bound++;
		return 0;
	});
}

int av_insert(fid_av* f, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags,
	      void* context)
{
	return guarded([&] {
		AddressVector* av = owner_of<AddressVector>(f);
		if (!addr && count)
			return -FI_EINVAL;
		if (flags & ~uint64_t(FI_MORE | FI_SYNC_ERR)) {
			RCOLL_WARN(FI_LOG_AV, "fi_av_insert flags %#llx not supported\n",
				   (unsigned long long)flags);
			return -FI_EBADFLAGS;
		}
		std::lock_guard guard(av->domain->lock);
		auto* in = static_cast<const EpAddress*>(addr);
		int inserted = 0;
		for (size_t i = 0; i < count; i++) {
			EpAddress a;
			memcpy(&a, &in[i], sizeof(a));
			fi_addr_t result = FI_ADDR_NOTAVAIL;
			int err = 0;
			if (!a.valid()) {
				RCOLL_WARN(FI_LOG_AV,
					   "fi_av_insert: entry %zu is not an rcoll address\n", i);
				err = FI_EINVAL;
			} else if (fi_addr_t existing = av->find(a); existing != FI_ADDR_NOTAVAIL) {
				result = existing; // the same endpoint inserted twice: one slot
				inserted++;
			} else {
				result = av->slots.size();
				av->slots.push_back(a);
				if (a.keyed())
					av->by_key.emplace(a.key, result);
				inserted++;
			}
			if (fi_addr)
				fi_addr[i] = result;
			if ((flags & FI_SYNC_ERR) && context)
				static_cast<int*>(context)[i] = err;
		}
		if (av->eq) {
			fi_eq_entry entry{};
			entry.context = context;
			entry.data = uint64_t(inserted);
			av->eq->push(FI_AV_COMPLETE, &entry, sizeof(entry));
			return 0;
		}
		return inserted;
	});
}

// fi_av_insertsvc: the endpoint listening at node:service, resolved by the
// core as fi_getinfo(node, service) would; it counts as one fi_av_insert.
int av_insertsvc(fid_av* f, const char* node, const char* service, fi_addr_t* fi_addr,
		 uint64_t flags, void* context)
{
	return guarded([&] {
		if (!node || !service)
			return -FI_EINVAL;
		AddressVector* av = owner_of<AddressVector>(f);
		EpAddress a;
		if (int err = resolve_listener(node, service, av->domain->info.get(), a)) {
			RCOLL_WARN(FI_LOG_AV, "fi_av_insertsvc: %s:%s does not resolve: %s\n", node,
				   service, fi_strerror(-err));
			return err;
		}
		return av_insert(f, &a, 1, fi_addr, flags, context);
	});
}

int av_remove(fid_av* f, fi_addr_t* fi_addr, size_t count, uint64_t flags)
{
	return guarded([&] {
		AddressVector* av = owner_of<AddressVector>(f);
		if (flags)
			return -FI_EBADFLAGS;
		std::lock_guard guard(av->domain->lock);
		for (size_t i = 0; i < count; i++) {
			if (!av->lookup(fi_addr[i]))
				return -FI_EINVAL;
		}
		for (size_t i = 0; i < count; i++) {
			EpAddress& slot = av->slots[fi_addr[i]];
			if (slot.keyed() && av->find(slot.key) == fi_addr[i])
				av->by_key.erase(slot.key);
			slot.core_len = 0;
		}
		return 0;
	});
}

int av_lookup(fid_av* f, fi_addr_t fi_addr, void* addr, size_t* addrlen)
{
	return guarded([&] {
		AddressVector* av = owner_of<AddressVector>(f);
		if (!addrlen)
			return -FI_EINVAL;
		std::lock_guard guard(av->domain->lock);
		const EpAddress* a = av->lookup(fi_addr);
		if (!a)
			return -FI_ENOENT;
		if (addr)
			memcpy(addr, a, std::min(*addrlen, sizeof(EpAddress)));
		*addrlen = sizeof(EpAddress);
		return 0;
	});
}

const char* av_straddr(fid_av*, const void* addr, char* buf, size_t* len)
{
	if (!addr || !buf || !len)
		return nullptr;
	EpAddress a;
	memcpy(&a, addr, sizeof(a));
	std::string s;
	try {
		s = a.magic == EpAddress::kMagic ? a.to_string() : "fi_addr_rcoll://(invalid)";
	} catch (...) {
		return nullptr;
	}
	if (*len > 0) {
		size_t n = std::min(*len - 1, s.size());
		memcpy(buf, s.data(), n);
		buf[n] = '\0';
	}
	*len = s.size() + 1;
	return buf;
}

int open_av_set(fid_av* f, fi_av_set_attr* attr, fid_av_set** out, void* context)
{
	return guarded([&] {
		AddressVector* av = owner_of<AddressVector>(f);
		std::lock_guard guard(av->domain->lock);
		return AvSet::open(av, attr, out, context);
	});
}

fi_ops_av av_ops = {
	.size = sizeof(fi_ops_av),
	.insert = av_insert,
	.insertsvc = av_insertsvc,
	.insertsym = enosys<decltype(fi_ops_av::insertsym)>,
	.remove = av_remove,
	.lookup = av_lookup,
	.straddr = av_straddr,
	.av_set = open_av_set,
};

} // namespace

fi_addr_t AddressVector::find(const EpAddress& a) const
{
	if (a.keyed())
		return find(a.key);
	for (fi_addr_t i = 0; i < slots.size(); i++) {
		if (slots[i].core_len && slots[i].same_listener(a))
			return i;
	}
	return FI_ADDR_NOTAVAIL;
}

void AddressVector::learn_key(const EpAddress& listener, uint64_t key)
{
	for (fi_addr_t i = 0; i < slots.size(); i++) {
		EpAddress& slot = slots[i];
		if (slot.core_len && !slot.keyed() && slot.same_listener(listener)) {
			slot.key = key;
			by_key.emplace(key, i); // an earlier keyed entry for it keeps its place
		}
	}
}

int AddressVector::open(Domain* domain, fi_av_attr* attr, fid_av** out, void* context)
{
	if (!attr || !out)
		return -FI_EINVAL;
	if (attr->flags & ~uint64_t(FI_EVENT)) {
		RCOLL_WARN(FI_LOG_AV, "fi_av_open flags %#llx not supported\n",
			   (unsigned long long)attr->flags);
		return -FI_EBADFLAGS;
	}
	if (attr->rx_ctx_bits || attr->name)
		return -FI_EOPNOTSUPP;
	auto av = std::make_unique<AddressVector>();
	av->domain = domain;
	av->type = attr->type == FI_AV_UNSPEC ? FI_AV_TABLE : attr->type;
	if (av->type != FI_AV_TABLE && av->type != FI_AV_MAP)
		return -FI_EINVAL;
	av->slots.reserve(attr->count);
	av->shell.owner = av.get();
	av->shell.fid.fid.fclass = FI_CLASS_AV;
	av->shell.fid.fid.context = context;
	av->shell.fid.fid.ops = &fid_ops_table<close_av, bind_av>;
	av->shell.fid.ops = &av_ops;
	attr->type = av->type;
	domain->children++;
	*out = &av.release()->shell.fid;
	return 0;
}

} // namespace rcoll
