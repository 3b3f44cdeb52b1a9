#include "engine/schedule.hpp"

#include <array>
#include <limits>
#include <new>

#include "engine/builder.hpp"

namespace rcoll::engine {

namespace {

constexpr std::array<std::string_view, algorithm_count> algorithm_names = {
	"auto",         "pairwise",           "dissemination", "binomial", "scatter_allgather",
	"ktree",        "recursive_doubling", "rabenseifner",  "ring",     "bruck",
	"hierarchical", "multi_leader",
};

struct Entry {
	Collective coll;
	Algorithm alg;
	detail::Builder build;
};

// The one table of which algorithm implements which collective. A
// collective's algorithms are listed in the order that breaks the cost
// model's ties; the tree barrier comes first, since it sends the fewest
// messages in all.
constexpr std::array<Entry, 21> builders = {{
	{Collective::barrier, Algorithm::ktree, detail::build_barrier_ktree},
	{Collective::barrier, Algorithm::pairwise, detail::build_barrier_pairwise},
	{Collective::barrier, Algorithm::dissemination, detail::build_barrier_dissemination},
	{Collective::broadcast, Algorithm::binomial, detail::build_broadcast_binomial},
	{Collective::broadcast, Algorithm::ktree, detail::build_broadcast_ktree},
	{Collective::broadcast, Algorithm::scatter_allgather,
	 detail::build_broadcast_scatter_allgather},
	{Collective::allreduce, Algorithm::ktree, detail::build_allreduce_ktree},
	{Collective::allreduce, Algorithm::recursive_doubling,
	 detail::build_allreduce_recursive_doubling},
	{Collective::allreduce, Algorithm::rabenseifner, detail::build_allreduce_rabenseifner},
	{Collective::allreduce, Algorithm::ring, detail::build_allreduce_ring},
	{Collective::reduce, Algorithm::ktree, detail::build_reduce_ktree},
	{Collective::reduce, Algorithm::ring, detail::build_reduce_ring},
	{Collective::reduce_scatter, Algorithm::ring, detail::build_reduce_scatter_ring},
	{Collective::reduce_scatter, Algorithm::ktree, detail::build_reduce_scatter_ktree},
	{Collective::allgather, Algorithm::ring, detail::build_allgather_ring},
	{Collective::allgather, Algorithm::bruck, detail::build_allgather_bruck},
	{Collective::allgather, Algorithm::hierarchical, detail::build_allgather_hierarchical},
	{Collective::allgather, Algorithm::multi_leader, detail::build_allgather_multi_leader},
	{Collective::scatter, Algorithm::binomial, detail::build_scatter_binomial},
	{Collective::gather, Algorithm::binomial, detail::build_gather_binomial},
	{Collective::alltoall, Algorithm::pairwise, detail::build_alltoall_pairwise},
}};

const Entry* find_entry(Collective c, Algorithm a) noexcept
{
	for (const auto& e : builders)
		if (e.coll == c && e.alg == a)
			return &e;
	return nullptr;
}

// a * b, or nullopt on 64-bit overflow or beyond size_t.
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) noexcept
{
	if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
		return std::nullopt;
	uint64_t r = a * b;
	if (r > std::numeric_limits<size_t>::max())
		return std::nullopt;
	return r;
}

} // namespace

std::string_view to_string(Algorithm a) noexcept
{
	auto i = static_cast<unsigned>(a);
	return i < algorithm_count ? algorithm_names[i] : "invalid";
}

Algorithm parse_algorithm(std::string_view name) noexcept
{
	for (unsigned i = 0; i < algorithm_count; ++i)
		if (algorithm_names[i] == name)
			return static_cast<Algorithm>(i);
	return Algorithm::automatic;
}

bool algorithm_supports(Collective c, Algorithm a) noexcept { return find_entry(c, a) != nullptr; }

std::vector<Algorithm> algorithms_for(Collective c)
{
	std::vector<Algorithm> out;
	for (const auto& e : builders)
		if (e.coll == c)
			out.push_back(e.alg);
	return out;
}

unsigned MonotoneCounters::rounds() const noexcept
{
	unsigned r = pattern::ceil_log2(size);
	return r ? r : 1;
}

Errc validate(const OpDescriptor& d) noexcept
{
	if (d.size == 0 || static_cast<unsigned>(d.coll) >= collective_count)
		return Errc::invalid_argument;
	if (static_cast<unsigned>(d.dtype) >= datatype_count)
		return Errc::invalid_argument;
	if (is_reduction(d.coll) && !is_valid_reduction(d.dtype, d.op))
		return Errc::not_supported;
	if (is_rooted(d.coll) && d.root >= d.size)
		return Errc::invalid_argument;
	if (d.algorithm != Algorithm::automatic && !algorithm_supports(d.coll, d.algorithm))
		return Errc::invalid_argument;
	auto bytes = checked_mul(d.count, datatype_size(d.dtype));
	if (!bytes)
		return Errc::overflow;
	// Per-block collectives move p blocks; every offset must stay in range,
	// with room for the landing areas (at most a few times the data).
	auto total = checked_mul(*bytes, d.size);
	if (!total || !checked_mul(*total, 4))
		return Errc::overflow;
	return Errc::ok;
}

BufferSizes buffer_sizes(const OpDescriptor& d, uint32_t rank) noexcept
{
	uint64_t n = d.count * datatype_size(d.dtype);
	uint64_t all = n * d.size;
	bool root = rank == d.root;
	switch (d.coll) {
	case Collective::barrier: return {0, 0};
	case Collective::broadcast: return {0, n};
	case Collective::allreduce: return {n, n};
	case Collective::reduce: return {n, root ? n : 0};
	case Collective::reduce_scatter: return {all, n};
	case Collective::allgather: return {n, all};
	case Collective::scatter: return {root ? all : 0, n};
	case Collective::gather: return {n, root ? all : 0};
	case Collective::alltoall: return {all, all};
	}
	return {0, 0};
}

std::optional<Spread> spread_of(Placement placement, uint32_t p)
{
	if (p == 0 || placement.size() != p)
		return std::nullopt;
	const uint32_t hosts = pattern::HostGroups(p, placement).count();
	if (hosts == 1)
		return Spread::one_host;
	return hosts == p ? Spread::apart : Spread::shared;
}

Errc build_schedule(const OpDescriptor& d, uint32_t rank, const Limits& limits, Schedule& out,
		    Placement placement) noexcept
{
	if (Errc e = validate(d); e != Errc::ok)
		return e;
	if (rank >= d.size)
		return Errc::invalid_argument;
	const Entry* entry = find_entry(d.coll, d.algorithm);
	if (!entry)
		return Errc::invalid_argument;
	try {
		out = Schedule{};
		detail::ScheduleBuilder b(out, d, rank, placement);
		if (Errc e = entry->build(b, limits); e != Errc::ok)
			return e;
	} catch (const std::bad_alloc&) {
		return Errc::no_memory;
	}
	if (out.layout.scratch_bytes() > limits.scratch_bytes ||
	    out.layout.counters > limits.counters)
		return Errc::no_resources;
	return Errc::ok;
}

namespace detail {

uint32_t ScheduleBuilder::write(uint32_t peer, Buf src, uint64_t src_off, Dest dest,
				uint64_t dst_off, uint64_t bytes, uint32_t counter, uint32_t key)
{
	Step st;
	st.kind = Step::Kind::write;
	st.peer = peer;
	st.src = src;
	st.src_off = src_off;
	st.dest = dest;
	st.dst_off = dst_off;
	st.length = bytes;
	st.counter = counter;
	st.key = key;
	st.control = src == Buf::own_keys || bytes == 0;
	// A write into a peer's output uses the key that peer shipped: it
	// registers nothing here.
	if (src == Buf::input)
		s_.input_access = s_.input_access | Access::read;
	if (src == Buf::output)
		s_.output_access = s_.output_access | Access::read;
	(st.control ? s_.control_bytes : s_.payload_bytes) += bytes;
	s_.steps.push_back(st);
	return s_.writes++;
}

uint32_t ScheduleBuilder::signal(uint32_t peer, uint32_t counter)
{
	return write(peer, Buf::own_keys, 0, Dest::key_slot, 0, 0, counter);
}

uint32_t ScheduleBuilder::ship_key(uint32_t peer, OwnKey which, uint32_t slot, uint32_t counter)
{
	if (which == OwnKey::output)
		s_.output_access = s_.output_access | Access::remote_write;
	return write(peer, Buf::own_keys, static_cast<uint64_t>(which) * memory_key_bytes,
		     Dest::key_slot, 0, memory_key_bytes, counter, slot);
}

void ScheduleBuilder::wait(uint32_t counter, uint64_t arrivals)
{
	if (arrivals == 0)
		return;
	Step st;
	st.kind = Step::Kind::wait;
	st.counter = counter;
	st.value = arrivals;
	s_.steps.push_back(st);
}

void ScheduleBuilder::wait_sent(uint32_t write_index)
{
	Step st;
	st.kind = Step::Kind::wait_sent;
	st.value = write_index;
	s_.steps.push_back(st);
}

void ScheduleBuilder::copy(Buf dst, uint64_t dst_off, Buf src, uint64_t src_off, uint64_t bytes)
{
	if (bytes == 0 || (dst == src && dst_off == src_off))
		return;
	if (src == Buf::input)
		s_.uses_input = true;
	Step st;
	st.kind = Step::Kind::copy;
	st.dst = dst;
	st.dst_off = dst_off;
	st.src = src;
	st.src_off = src_off;
	st.length = bytes;
	s_.steps.push_back(st);
}

void ScheduleBuilder::reduce(Buf dst, uint64_t dst_off, Buf a, uint64_t a_off, Buf b,
			     uint64_t b_off, uint64_t elements)
{
	if (elements == 0)
		return;
	if (a == Buf::input || b == Buf::input)
		s_.uses_input = true;
	Step st;
	st.kind = Step::Kind::reduce;
	st.dst = dst;
	st.dst_off = dst_off;
	st.a = a;
	st.a_off = a_off;
	st.src = b;
	st.src_off = b_off;
	st.length = elements;
	s_.steps.push_back(st);
}

void ScheduleBuilder::choose_landing(uint64_t landing_bytes, uint64_t copied_bytes,
				     uint32_t key_slots_if_eager, uint32_t key_slots_if_rendezvous,
				     const Limits& limits)
{
	ScheduleLayout eager_layout;
	eager_layout.key_slots = key_slots_if_eager;
	eager_layout.landing_bytes = landing_bytes;
	eager_layout.landing_in_scratch = true;
	const uint64_t eager_limit = d_.coll == Collective::broadcast ? limits.broadcast_eager_bytes
								      : limits.eager_bytes;
	bool fits =
		eager_layout.scratch_bytes() <= limits.scratch_bytes && copied_bytes <= eager_limit;
	ScheduleLayout& l = s_.layout;
	l.landing_bytes = landing_bytes;
	l.landing_in_scratch = fits;
	l.key_slots = fits ? key_slots_if_eager : key_slots_if_rendezvous;
}

} // namespace detail

} // namespace rcoll::engine
