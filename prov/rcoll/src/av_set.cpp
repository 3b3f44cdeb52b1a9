// fi_av_set(3): set algebra on AV addresses.
#include "av_set.hpp"

#include "av.hpp"
#include "domain.hpp"

#include <algorithm>
#include <memory>

namespace rcoll {

namespace {

AvSet* av_set_of(const fid_av_set* set) { return owner_of<AvSet>(const_cast<fid_av_set*>(set)); }

int close_av_set(fid* f)
{
	return guarded([&] {
		delete owner_of<AvSet>(f);
		return 0;
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
		std::lock_guard guard(s->av->domain->lock); // the AV changes under it
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
	if (attr->comm_key_size > kMaxCommKey || (attr->comm_key_size && !attr->comm_key)) {
		RCOLL_WARN(FI_LOG_AV, "fi_av_set: comm_key of %zu bytes (at most %zu)\n",
			   attr->comm_key_size, kMaxCommKey);
		return -FI_EINVAL;
	}
	auto set = std::make_unique<AvSet>();
	set->av = av;
	set->comm_key.assign(attr->comm_key, attr->comm_key + attr->comm_key_size);
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

} // namespace rcoll
