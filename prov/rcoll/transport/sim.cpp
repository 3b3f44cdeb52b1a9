#include "transport/sim.hpp"

#include <algorithm>
#include <cstring>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_CHECK_MEM_IS_DEFINED(p, n) 0
#endif

namespace rcoll::sim {

using engine::Errc;
using engine::TransportEvent;

namespace {

constexpr uint32_t scratch_region = 0;

struct KeyFields {
	uint32_t rank;
	uint32_t region;
};

engine::MemoryKey encode_key(uint32_t rank, uint32_t region) noexcept
{
	engine::MemoryKey k;
	std::memcpy(k.bytes.data(), &rank, sizeof rank);
	std::memcpy(k.bytes.data() + sizeof rank, &region, sizeof region);
	return k;
}

KeyFields decode_key(const engine::MemoryKey& k) noexcept
{
	KeyFields f;
	std::memcpy(&f.rank, k.bytes.data(), sizeof f.rank);
	std::memcpy(&f.region, k.bytes.data() + sizeof f.rank, sizeof f.region);
	return f;
}

} // namespace

// A registered piece of a rank's memory, with its shadow state when memory
// checks are on: `unread` marks bytes a peer wrote that the owner has not
// read yet; `sourcing` counts in-flight writes reading each byte.
struct Fabric::Region {
	uint32_t id = 0;
	std::byte* base = nullptr;
	size_t length = 0;
	engine::Access access = engine::Access::read_write; // the scratch: both
	std::vector<uint8_t> unread;
	std::vector<uint16_t> sourcing;

	bool contains(const std::byte* p, size_t n) const noexcept
	{
		return p >= base && n <= length && size_t(p - base) <= length - n;
	}
};

struct Fabric::Flight {
	uint32_t from = 0, to = 0;
	const std::byte* source = nullptr;
	uint32_t source_region = 0;
	size_t length = 0;
	std::vector<std::byte> staging;
	uint32_t target_rank = 0; // from the key, must equal `to`
	uint32_t target_region = 0;
	uint64_t offset = 0;
	bool has_immediate = false;
	uint32_t immediate = 0;
	uint64_t cookie = 0;
};

class Fabric::Checker final : public engine::MemoryObserver {
public:
	Checker(Fabric& f, uint32_t rank) : fabric_(f), rank_(rank) {}

	void on_local_read(const void* p, size_t n) noexcept override
	{
		for (Region& r : fabric_.regions_[rank_])
			for_overlap(r, p, n, [&](size_t i) { r.unread[i] = 0; });
	}
	void on_local_write(const void* p, size_t n) noexcept override
	{
		for (Region& r : fabric_.regions_[rank_]) {
			bool clobbers = false, races = false;
			for_overlap(r, p, n, [&](size_t i) {
				clobbers |= r.unread[i] != 0;
				races |= r.sourcing[i] != 0;
				r.unread[i] = 0;
			});
			if (clobbers)
				fabric_.violation(
					"rank " + std::to_string(rank_) +
					": local write over data a peer wrote and nobody read");
			if (races)
				fabric_.violation(
					"rank " + std::to_string(rank_) +
					": local write over the source of a write not yet read");
		}
	}

private:
	template <class F>
	static void for_overlap(Region& r, const void* p, size_t n, F f)
	{
		auto b = reinterpret_cast<uintptr_t>(r.base), e = b + r.length;
		auto x = reinterpret_cast<uintptr_t>(p), y = x + n;
		if (r.unread.empty() || y <= b || x >= e)
			return;
		for (uintptr_t a = std::max(b, x); a < std::min(e, y); ++a)
			f(size_t(a - b));
	}

	Fabric& fabric_;
	uint32_t rank_;
};

SimTransport::SimTransport(Fabric& fabric, uint32_t rank, uint64_t scratch_bytes)
	: fabric_(fabric), rank_(rank), scratch_(scratch_bytes)
{}

std::span<std::byte> SimTransport::scratch() noexcept { return scratch_; }

Errc SimTransport::register_memory(std::span<std::byte> buffer, engine::Access access,
				   engine::Registration& out) noexcept
{
	if (fabric_.options_.refuse_registration)
		return Errc::no_resources;
	try {
		Fabric::Region r;
		r.id = fabric_.next_region_id_[rank_]++;
		r.base = buffer.data();
		r.length = buffer.size();
		r.access = access;
		if (fabric_.options_.check_memory) {
			r.unread.assign(r.length, 0);
			r.sourcing.assign(r.length, 0);
		}
		out.handle = r.id;
		out.key = encode_key(rank_, r.id);
		fabric_.regions_[rank_].push_back(std::move(r));
		fabric_.stats_[rank_].registrations++;
		if (engine::grants(access, engine::Access::remote_write))
			fabric_.stats_[rank_].open_to_peers++;
	} catch (const std::bad_alloc&) {
		return Errc::no_memory;
	}
	return Errc::ok;
}

void SimTransport::deregister_memory(const engine::Registration& reg) noexcept
{
	auto& regions = fabric_.regions_[rank_];
	auto it = std::find_if(regions.begin(), regions.end(),
			       [&](const Fabric::Region& r) { return r.id == reg.handle; });
	if (it == regions.end() || it->id == scratch_region) {
		fabric_.violation("rank " + std::to_string(rank_) +
				  ": deregistering an unknown region");
		return;
	}
	for (uint16_t c : it->sourcing)
		if (c) {
			fabric_.violation("rank " + std::to_string(rank_) +
					  ": deregistered a buffer with writes still reading it");
			break;
		}
	regions.erase(it);
}

Errc SimTransport::write(const engine::WriteRequest& w) noexcept { return fabric_.post(rank_, w); }

size_t SimTransport::poll(std::span<TransportEvent> out) noexcept
{
	size_t n = std::min(out.size(), inbox_.size() - inbox_head_);
	std::copy_n(inbox_.begin() + static_cast<std::ptrdiff_t>(inbox_head_), n, out.begin());
	inbox_head_ += n;
	if (inbox_head_ == inbox_.size()) {
		inbox_.clear();
		inbox_head_ = 0;
	}
	return n;
}

Fabric::Fabric(uint32_t ranks, uint64_t scratch_bytes, Options options)
	: options_(options), groups_(ranks, nullptr), regions_(ranks), next_region_id_(ranks, 1),
	  inflight_(ranks, 0), stats_(ranks), clock_(ranks, 0), nic_free_(ranks, 0),
	  cpu_free_(ranks, 0), rx_free_(ranks, 0), call_start_(ranks, 0),
	  reduced_at_call_(ranks, 0), rng_(options.seed * 0x9E3779B97F4A7C15ull + 1)
{
	transports_.reserve(ranks);
	checkers_.reserve(ranks);
	for (uint32_t r = 0; r < ranks; ++r) {
		transports_.push_back(std::make_unique<SimTransport>(*this, r, scratch_bytes));
		checkers_.push_back(std::make_unique<Checker>(*this, r));
		Region s;
		s.id = scratch_region;
		s.base = transports_[r]->scratch_.data();
		s.length = scratch_bytes;
		if (options_.check_memory) {
			s.unread.assign(s.length, 0);
			s.sourcing.assign(s.length, 0);
		}
		regions_[r].push_back(std::move(s));
	}
}

Fabric::~Fabric() = default;

void Fabric::attach(uint32_t rank, engine::Group* group)
{
	groups_[rank] = group;
	if (group && options_.check_memory)
		group->set_observer(checkers_[rank].get());
}

uint64_t Fabric::random_bits() noexcept
{
	// xorshift64*: deterministic given the seed.
	rng_ ^= rng_ >> 12;
	rng_ ^= rng_ << 25;
	rng_ ^= rng_ >> 27;
	return rng_ * 0x2545F4914F6CDD1Dull;
}

double Fabric::random_delay() noexcept
{
	return options_.max_delay * double(random_bits() >> 11) / double(uint64_t(1) << 53);
}

void Fabric::violation(std::string what)
{
	if (violations_.size() < 64)
		violations_.push_back(std::move(what));
}

Fabric::Region* Fabric::find_region(uint32_t rank, uint32_t id) noexcept
{
	for (Region& r : regions_[rank])
		if (r.id == id)
			return &r;
	return nullptr;
}

double Fabric::rank_time(uint32_t rank) const noexcept
{
	if (options_.timing != Timing::modelled || !groups_[rank])
		return now_;
	uint64_t reduced = groups_[rank]->stats().reduced_bytes - reduced_at_call_[rank];
	return call_start_[rank] + double(reduced) * options_.cost.gamma_us_per_byte;
}

Errc Fabric::post(uint32_t rank, const engine::WriteRequest& w) noexcept
{
	if (options_.max_inflight && inflight_[rank] >= options_.max_inflight)
		return Errc::would_block;
	uint32_t src_region = w.source_registration
				      ? static_cast<uint32_t>(w.source_registration->handle)
				      : scratch_region;
	Region* src = find_region(rank, src_region);
	if (w.length && (!src || !src->contains(w.source, w.length))) {
		violation("rank " + std::to_string(rank) +
			  ": write source outside its registration");
		return Errc::io_error;
	}
	// As a NIC would: a source registered only for peers' writes cannot be read.
	if (w.length && !engine::grants(src->access, engine::Access::read)) {
		violation("rank " + std::to_string(rank) +
			  ": write source registered without read access");
		return Errc::io_error;
	}
	if (w.peer >= ranks() || (w.has_immediate && w.immediate > engine::immediate_mask)) {
		violation("rank " + std::to_string(rank) + ": bad peer or immediate");
		return Errc::invalid_argument;
	}
	uint64_t id;
	try {
		if (!free_flights_.empty()) {
			id = free_flights_.back();
			free_flights_.pop_back();
		} else {
			id = flights_.size();
			flights_.push_back(std::make_unique<Flight>());
		}
	} catch (const std::bad_alloc&) {
		return Errc::no_memory;
	}
	Flight& f = *flights_[id];
	f.from = rank;
	f.to = w.peer;
	f.source = w.source;
	f.source_region = src_region;
	f.length = w.length;
	if (w.target_key) {
		KeyFields k = decode_key(*w.target_key);
		f.target_rank = k.rank;
		f.target_region = k.region;
	} else {
		f.target_rank = w.peer;
		f.target_region = scratch_region;
	}
	f.offset = w.offset;
	f.has_immediate = w.has_immediate;
	f.immediate = w.immediate;
	f.cookie = w.cookie;
	if (src && !src->sourcing.empty() && w.length)
		for (size_t i = 0; i < w.length; ++i)
			src->sourcing[size_t(w.source - src->base) + i]++;

	double when = now_;
	uint64_t order = order_++;
	switch (options_.timing) {
	case Timing::ordered: break;
	case Timing::random:
		when += random_delay();
		order = random_bits();
		break;
	case Timing::modelled: {
		// The rank's CPU posts its messages one after another (LogP's
		// o), its link sends their bytes one after another.
		const double posted = std::max(rank_time(rank), cpu_free_[rank]);
		cpu_free_[rank] = posted + options_.cost.overhead_us;
		const double start = std::max(posted, nic_free_[rank]);
		nic_free_[rank] = start + double(w.length) * options_.cost.beta_us_per_byte;
		when = nic_free_[rank];
		break;
	}
	}
	try {
		push_event(Event{when, order, id, false});
	} catch (const std::bad_alloc&) {
		free_flights_.push_back(id);
		return Errc::no_memory;
	}
	inflight_[rank]++;
	stats_[rank].writes++;
	stats_[rank].bytes += w.length;
	return Errc::ok;
}

void Fabric::read_source(Flight& f)
{
	Region* src = find_region(f.from, f.source_region);
	if (f.length) {
		if (!src || !src->contains(f.source, f.length)) {
			violation("rank " + std::to_string(f.from) +
				  ": write source deregistered before it was read");
			f.staging.clear();
		} else {
			// Where a real NIC or sendmsg() reads the source: under
			// memcheck, a write of bytes nothing wrote is reported here.
			(void)VALGRIND_CHECK_MEM_IS_DEFINED(f.source, f.length);
			f.staging.assign(f.source, f.source + f.length);
			if (!src->sourcing.empty())
				for (size_t i = 0; i < f.length; ++i)
					src->sourcing[size_t(f.source - src->base) + i]--;
		}
	}
	inflight_[f.from]--;
	transports_[f.from]->inbox_.push_back(
		TransportEvent{TransportEvent::Kind::write_complete, 0, f.cookie, Errc::ok});
}

void Fabric::place(Flight& f)
{
	auto who = [&] { return "write " + std::to_string(f.from) + "->" + std::to_string(f.to); };
	if (f.target_rank != f.to) {
		violation(who() + ": key of another rank");
		return;
	}
	Region* dst = find_region(f.to, f.target_region);
	if (!dst) {
		violation(who() + ": key of a deregistered buffer");
		return;
	}
	if (f.offset > dst->length || f.length > dst->length - f.offset) {
		violation(who() + ": outside the target buffer");
		return;
	}
	if (!engine::grants(dst->access, engine::Access::remote_write)) {
		violation(who() + ": key of a buffer registered without remote write access");
		return;
	}
	if (f.length && f.staging.size() == f.length) {
		if (!dst->unread.empty()) {
			bool clobbers = false, races = false;
			for (size_t i = 0; i < f.length; ++i) {
				clobbers |= dst->unread[f.offset + i] != 0;
				races |= dst->sourcing[f.offset + i] != 0;
				dst->unread[f.offset + i] = 1;
			}
			if (clobbers)
				violation(who() + ": overwrites data the target has not read yet");
			if (races)
				violation(who() + ": overwrites the source of the target's own "
						  "pending write");
		}
		std::memcpy(dst->base + f.offset, f.staging.data(), f.length);
	}
	if (f.has_immediate)
		transports_[f.to]->inbox_.push_back(
			TransportEvent{TransportEvent::Kind::arrival, f.immediate, 0, Errc::ok});
}

void Fabric::progress(uint32_t rank)
{
	engine::Group* g = groups_[rank];
	if (!g)
		return;
	call_start_[rank] = std::max(clock_[rank], now_);
	reduced_at_call_[rank] = g->stats().reduced_bytes;
	uint64_t done_before = g->stats().operations;
	g->progress();
	clock_[rank] = options_.timing == Timing::modelled ? rank_time(rank) : now_;
	if (g->stats().operations != done_before)
		stats_[rank].finish_time = clock_[rank];
}

void Fabric::push_event(const Event& ev)
{
	if (options_.timing == Timing::ordered)
		fifo_events_.push_back(ev);
	else
		timed_events_.push(ev);
}

bool Fabric::pop_event(Event& ev)
{
	if (options_.timing == Timing::ordered) {
		if (fifo_events_.empty())
			return false;
		ev = fifo_events_.front();
		fifo_events_.pop_front();
		return true;
	}
	if (timed_events_.empty())
		return false;
	ev = timed_events_.top();
	timed_events_.pop();
	return true;
}

uint64_t Fabric::run()
{
	for (uint32_t r = 0; r < ranks(); ++r)
		progress(r);
	uint64_t processed = 0;
	Event ev;
	while (pop_event(ev)) {
		now_ = std::max(now_, ev.time);
		Flight& f = *flights_[ev.flight];
		++processed;
		if (!ev.placement) {
			read_source(f);
			double when = now_;
			uint64_t order = order_++;
			if (options_.timing == Timing::random) {
				when += random_delay();
				order = random_bits();
			} else if (options_.timing == Timing::modelled) {
				// Cut-through: the last byte lands alpha after it left,
				// unless the target is still taking in an earlier
				// message: its link the bytes, its CPU o.
				const double busy =
					std::max(double(f.length) * options_.cost.beta_us_per_byte,
						 options_.cost.overhead_us);
				when = std::max(now_ + options_.cost.alpha_us,
						rx_free_[f.to] + busy);
				rx_free_[f.to] = when;
			}
			push_event(Event{when, order, ev.flight, true});
			progress(f.from);
		} else {
			place(f);
			f.staging.clear();
			uint32_t to = f.to;
			free_flights_.push_back(ev.flight);
			progress(to);
		}
	}
	return processed;
}

double Fabric::makespan() const noexcept
{
	double m = 0;
	for (const RankStats& s : stats_)
		m = std::max(m, s.finish_time);
	return m;
}

Cluster::Cluster(uint32_t p, const engine::GroupConfig& config, const Options& options)
	: config_(engine::Group::resolve(p, config)),
	  fabric_(p, engine::Group::scratch_bytes(p, config_), options)
{
	groups_.reserve(p);
	for (uint32_t r = 0; r < p; ++r) {
		std::unique_ptr<engine::Group> g;
		status_ = engine::Group::create(r, p, fabric_.transport(r), config_, g);
		if (status_ != Errc::ok)
			return;
		fabric_.attach(r, g.get());
		groups_.push_back(std::move(g));
	}
}

} // namespace rcoll::sim
