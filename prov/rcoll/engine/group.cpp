#include "engine/group.hpp"

#include <algorithm>
#include <cstring>
#include <new>

#include "engine/patterns.hpp"
#include "engine/reduce.hpp"

namespace rcoll::engine {

namespace {

// Builds the recycle barrier of `half`: dissemination over the monotone
// recycle counters, epoch = number of recycles of that half.
Schedule recycle_schedule(uint32_t rank, uint32_t size, unsigned half)
{
	Schedule s;
	MonotoneCounters mc{size};
	pattern::Dissemination dis{size};
	for (unsigned j = 0; j < dis.rounds(); ++j) {
		Step w;
		w.kind = Step::Kind::write;
		w.peer = dis.to(rank, j);
		w.src = Buf::own_keys;
		w.dest = Dest::key_slot;
		w.control = true;
		w.counter = monotone_counter | mc.recycle(half, j);
		s.steps.push_back(w);
		s.writes++;
		Step wait;
		wait.kind = Step::Kind::wait;
		wait.counter = w.counter;
		wait.value = 1;
		s.steps.push_back(wait);
	}
	return s;
}

// Heap block aligned for every datatype, for rendezvous landing areas and
// private copies of in-place inputs.
struct AlignedBuffer {
	static constexpr std::align_val_t alignment{64};
	std::byte* data = nullptr;
	size_t size = 0;

	AlignedBuffer() = default;
	AlignedBuffer(const AlignedBuffer&) = delete;
	AlignedBuffer& operator=(const AlignedBuffer&) = delete;
	~AlignedBuffer() { reset(); }
	bool allocate(size_t n) noexcept
	{
		reset();
		if (n == 0)
			return true;
		data = static_cast<std::byte*>(::operator new(n, alignment, std::nothrow));
		size = data ? n : 0;
		return data != nullptr;
	}
	void reset() noexcept
	{
		if (data)
			::operator delete(data, alignment);
		data = nullptr;
		size = 0;
	}
};

// Spare rendezvous landing areas a group keeps between operations.
constexpr size_t spare_landings = 2;

// Full polls one progress round takes at most: a transport whose events
// never run dry (a member that rings a doorbell as fast as it is drained)
// must not hold the caller; what is left waits for the next round.
constexpr size_t max_polls_per_round = 16;

bool overlaps(const void* a, size_t na, const void* b, size_t nb) noexcept
{
	if (na == 0 || nb == 0)
		return false;
	auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
	return x < y + nb && y < x + na;
}

} // namespace

// A rendezvous landing area and its registration. Both are the group's own
// memory, never the application's, so keeping them for the next operation
// is safe: it saves the allocation, the page faults of first touch (large
// blocks come from mmap and go back at free) and the registration (pinning
// on verbs) on every call.
struct Group::Landing {
	AlignedBuffer memory;
	Registration registration;
	bool registered = false;
};

struct Group::Operation {
	uint64_t sequence = 0;
	unsigned recycle_half = 0; // recycle barriers: the half they free
	Request request;
	OpDescriptor desc;
	BufferSizes sizes;
	std::shared_ptr<const Schedule> plan; // shared with Group::plans_
	ReduceKernel kernel = nullptr;
	uint64_t epoch = 0; // barriers and recycles: compared with monotone counters

	bool started = false;
	size_t pc = 0;
	Errc status = Errc::ok;

	bool placed = false;
	unsigned half = 0;
	uint64_t scratch_offset = 0; // absolute, in the scratch region
	uint32_t counter_base = 0;   // absolute index of counter 0

	const std::byte* input = nullptr;
	std::byte* output = nullptr;
	AlignedBuffer input_copy;
	std::unique_ptr<Landing> landing; // rendezvous landing, when not in scratch
	Registration input_reg, output_reg;
	bool has_input_reg = false, has_output_reg = false;

	uint64_t first_cookie = 0;
	uint32_t writes_posted = 0;
	uint32_t writes_completed = 0;
	std::vector<bool> write_done;
};

namespace {

// The auto values of a configuration, for a group of `size`.
struct Sizes {
	uint64_t scratch_half_bytes;
	uint32_t counters_per_half;
};

Sizes sizes_of(uint32_t size, const GroupConfig& c) noexcept
{
	Sizes z{c.scratch_half_bytes, c.counters_per_half};
	// Alltoall in rendezvous mode needs a key slot per peer.
	const uint64_t keys = (uint64_t(size) + 2) * memory_key_bytes;
	if (z.scratch_half_bytes == 0)
		z.scratch_half_bytes = std::max<uint64_t>(Limits{}.scratch_bytes, 2 * keys + 4096);
	z.scratch_half_bytes = ScheduleLayout::align(z.scratch_half_bytes);
	// The ring needs two counters per peer and step of one chunk.
	if (z.counters_per_half == 0)
		z.counters_per_half = std::max<uint32_t>(1024, 4 * size + 64);
	return z;
}

} // namespace

GroupConfig Group::resolve(uint32_t size, GroupConfig c)
{
	const Sizes z = sizes_of(size, c);
	c.scratch_half_bytes = z.scratch_half_bytes;
	c.counters_per_half = z.counters_per_half;
	c.max_active = std::max<uint32_t>(c.max_active, 1);
	c.bcast_blocks = std::max<uint32_t>(c.bcast_blocks, 1);
	c.chunk_bytes = std::max<uint64_t>(c.chunk_bytes, 1);
	c.radix = std::max<uint32_t>(c.radix, 1);
	return c;
}

uint64_t Group::scratch_bytes(uint32_t size, const GroupConfig& config) noexcept
{
	return 2 * sizes_of(size, config).scratch_half_bytes;
}

uint64_t Group::counter_count(uint32_t size, const GroupConfig& config) noexcept
{
	return MonotoneCounters{size}.total() +
	       2 * uint64_t(sizes_of(size, config).counters_per_half);
}

Limits Group::limits(uint32_t size, const GroupConfig& c) noexcept
{
	const Sizes z = sizes_of(size, c);
	Limits l;
	l.scratch_bytes = z.scratch_half_bytes;
	l.counters = z.counters_per_half;
	l.eager_bytes = c.eager_bytes;
	l.broadcast_eager_bytes = c.broadcast_eager_bytes;
	l.chunk_bytes = std::max<uint64_t>(c.chunk_bytes, 1);
	l.radix = std::max<uint32_t>(c.radix, 1);
	l.bcast_blocks = std::max<uint32_t>(c.bcast_blocks, 1);
	return l;
}

Group::Group(uint32_t rank, uint32_t size, Transport& transport, const GroupConfig& config)
	: rank_(rank), size_(size), transport_(transport), config_(resolve(size, config)),
	  limits_(limits(size, config)), monotone_{size}
{}

Group::~Group()
{
	for (auto& op : queue_)
		release_resources(*op);
	for (auto& landing : spare_landings_)
		free_landing(*landing);
}

Errc Group::create(uint32_t rank, uint32_t size, Transport& transport, const GroupConfig& config,
		   std::unique_ptr<Group>& out) noexcept
{
	if (size == 0 || rank >= size)
		return Errc::invalid_argument;
	if (transport.scratch().size() < scratch_bytes(size, config))
		return Errc::invalid_argument;
	// Every counter must be nameable by a 28-bit immediate.
	const uint64_t total = counter_count(size, config);
	if (total > immediate_mask)
		return Errc::invalid_argument;
	try {
		std::unique_ptr<Group> g(new Group(rank, size, transport, config));
		g->counters_.assign(total, 0);
		out = std::move(g);
	} catch (const std::bad_alloc&) {
		return Errc::no_memory;
	}
	return Errc::ok;
}

Errc Group::post(const Request& req) noexcept
{
	if (failed_)
		return Errc::io_error;
	OpDescriptor d;
	d.coll = req.coll;
	d.size = size_;
	d.root = req.root;
	d.count = req.coll == Collective::barrier ? 0 : req.count;
	d.dtype = req.dtype;
	d.op = req.op;
	d.algorithm = req.algorithm;
	d.params = req.params;
	if (Errc e = validate(d); e != Errc::ok)
		return e;
	const BufferSizes sizes = buffer_sizes(d, rank_);
	if ((sizes.input && !req.input) || (sizes.output && !req.output))
		return Errc::invalid_argument;
	std::unique_ptr<Operation> op(new (std::nothrow) Operation);
	if (!op)
		return Errc::no_memory;
	if (Errc e = plan(d, op->plan); e != Errc::ok)
		return e;
	if (is_reduction(d.coll))
		op->kernel = reduction_kernel(d.dtype, d.op);
	op->sequence = next_sequence_++;
	op->request = req;
	op->desc = d;
	op->sizes = sizes;
	switch (op->plan->epoch) {
	case EpochClass::none: break;
	case EpochClass::pairwise:
	case EpochClass::dissemination:
	case EpochClass::tree:
		op->epoch = ++barrier_epoch_[static_cast<unsigned>(op->plan->epoch)];
		break;
	}
	try {
		queue_.push_back(std::move(op));
	} catch (const std::bad_alloc&) {
		return Errc::no_memory;
	}
	settled_ = false;
	return Errc::ok;
}

// Applications repeat a few calls, and choosing an algorithm and building
// its schedule costs more than running a small one: recent plans are kept,
// keyed by the call as posted. `d` becomes the call as chosen.
Errc Group::plan(OpDescriptor& d, std::shared_ptr<const Schedule>& out) noexcept
{
	for (const Plan& p : plans_) {
		if (p.schedule && p.posted == d) {
			d = p.chosen;
			out = p.schedule;
			return Errc::ok;
		}
	}
	const OpDescriptor posted = d;
	try {
		if (d.algorithm == Algorithm::automatic) {
			const Choice c = config_.selector.choose(d, limits_, config_.hosts,
								 config_.price_placement);
			d.algorithm = c.algorithm;
			d.params = c.params;
			if (!algorithm_supports(d.coll, d.algorithm))
				return Errc::invalid_argument;
		}
		auto schedule = std::make_shared<Schedule>();
		if (Errc e = build_schedule(d, rank_, limits_, *schedule, config_.hosts);
		    e != Errc::ok)
			return e;
		out = std::move(schedule);
	} catch (const std::bad_alloc&) {
		return Errc::no_memory;
	}
	plans_[next_plan_] = {posted, d, out};
	next_plan_ = (next_plan_ + 1) % plans_.size();
	return Errc::ok;
}

bool Group::place(Operation& op) noexcept
{
	const uint32_t counters = op.plan->layout.counters;
	if (counters == 0)
		return true;
	const uint64_t bytes = op.plan->layout.scratch_bytes();
	unsigned half = cursor_half_;
	uint64_t at_bytes = cursor_bytes_;
	uint32_t at_counters = cursor_counters_;
	const bool fits = at_bytes + bytes <= limits_.scratch_bytes &&
			  uint64_t(at_counters) + counters <= limits_.counters;
	if (!fits) {
		half ^= 1;
		at_bytes = 0;
		at_counters = 0;
	}
	// The other half is reused once every member is done with its previous
	// generation (its recycle barrier completed); until then, wait. The
	// decision to move depends only on the sequence of operations, so all
	// members move at the same operation.
	if (!halves_[half].ready)
		return false;
	if (!fits) {
		halves_[cursor_half_].closed = true;
		halves_[cursor_half_].ready = false;
		cursor_half_ = half;
	}
	op.placed = true;
	op.half = half;
	op.scratch_offset = uint64_t(half) * limits_.scratch_bytes + at_bytes;
	op.counter_base = monotone_.total() + half * limits_.counters + at_counters;
	cursor_bytes_ = at_bytes + bytes;
	cursor_counters_ = at_counters + counters;
	halves_[half].live++;
	return true;
}

bool Group::try_start(Operation& op) noexcept
{
	// Placement happens at start, in posting order, so that it is the same
	// on every member whatever the timing. A failed group places nothing:
	// the recycle barrier that would make a scratch half ready again cannot
	// complete, and an operation waiting for one would wait forever.
	if (!failed_ && !place(op))
		return false;
	op.started = true;
	op.first_cookie = next_cookie_;
	next_cookie_ += op.plan->writes;
	op.status = failed_ ? Errc::io_error : acquire(op);
	return true;
}

Errc Group::acquire(Operation& op) noexcept
{
	const Schedule& s = *op.plan;
	try {
		op.write_done.assign(s.writes, false);
	} catch (const std::bad_alloc&) {
		return Errc::no_memory;
	}
	op.input = static_cast<const std::byte*>(op.request.input);
	op.output = static_cast<std::byte*>(op.request.output);
	// An input that overlaps the output (in-place use) is read from a
	// private copy, since schedules write the output before they are done
	// reading the input.
	if ((s.uses_input || s.input_access != Access::none) &&
	    overlaps(op.input, op.sizes.input, op.output, op.sizes.output)) {
		if (!op.input_copy.allocate(op.sizes.input))
			return Errc::no_memory;
		std::memcpy(op.input_copy.data, op.input, op.sizes.input);
		op.input = op.input_copy.data;
	}
	if (s.input_access != Access::none && op.sizes.input) {
		auto span = std::span<std::byte>(const_cast<std::byte*>(op.input), op.sizes.input);
		if (Errc e = transport_.register_memory(span, s.input_access, op.input_reg);
		    e != Errc::ok)
			return e;
		op.has_input_reg = true;
	}
	if (s.output_access != Access::none && op.sizes.output) {
		auto span = std::span<std::byte>(op.output, op.sizes.output);
		if (Errc e = transport_.register_memory(span, s.output_access, op.output_reg);
		    e != Errc::ok)
			return e;
		op.has_output_reg = true;
	}
	if (!s.layout.landing_in_scratch && s.layout.landing_bytes) {
		if (Errc e = take_landing(s.layout.landing_bytes, op.landing); e != Errc::ok)
			return e;
	}
	if (op.placed) {
		std::byte* keys = transport_.scratch().data() + op.scratch_offset +
				  ScheduleLayout::own_keys_offset;
		const MemoryKey none;
		const MemoryKey& landing_key = op.landing ? op.landing->registration.key : none;
		std::memcpy(keys, landing_key.bytes.data(), memory_key_bytes);
		std::memcpy(keys + memory_key_bytes, op.output_reg.key.bytes.data(),
			    memory_key_bytes);
		if (observer_)
			observer_->on_local_write(keys, 2 * memory_key_bytes);
	}
	return Errc::ok;
}

// The smallest spare that holds `bytes`, else a new area. A spare larger
// than needed is fine: peers are given its key, and a key only bounds writes.
Errc Group::take_landing(uint64_t bytes, std::unique_ptr<Landing>& out) noexcept
{
	auto best = spare_landings_.end();
	for (auto it = spare_landings_.begin(); it != spare_landings_.end(); ++it)
		if ((*it)->memory.size >= bytes &&
		    (best == spare_landings_.end() || (*it)->memory.size < (*best)->memory.size))
			best = it;
	if (best != spare_landings_.end()) {
		out = std::move(*best);
		spare_landings_.erase(best);
		return Errc::ok;
	}
	std::unique_ptr<Landing> landing(new (std::nothrow) Landing);
	if (!landing || !landing->memory.allocate(bytes))
		return Errc::no_memory;
	// Zeroed once, like the mmap'd scratch that holds eager landings: a
	// reduction into the landing stores only the 10 value bytes of an x87
	// long double and leaves its 6 padding bytes alone, and the range is
	// then sent whole, one write per block (leaving the padding out would
	// take a write per element). Peers never read padding, but it should
	// not be memory this process never wrote.
	std::memset(landing->memory.data, 0, landing->memory.size);
	auto span = std::span<std::byte>(landing->memory.data, landing->memory.size);
	if (Errc e = transport_.register_memory(span, Access::read_write, landing->registration);
	    e != Errc::ok)
		return e;
	landing->registered = true;
	out = std::move(landing);
	return Errc::ok;
}

// Keeps the largest few areas for later operations; frees the rest.
void Group::give_back_landing(std::unique_ptr<Landing> landing) noexcept
{
	if (failed_ || !landing->registered) {
		free_landing(*landing);
		return;
	}
	if (spare_landings_.size() == spare_landings) {
		auto smallest = std::min_element(spare_landings_.begin(), spare_landings_.end(),
						 [](const auto& x, const auto& y) {
							 return x->memory.size < y->memory.size;
						 });
		if ((*smallest)->memory.size >= landing->memory.size) {
			free_landing(*landing);
			return;
		}
		free_landing(**smallest);
		*smallest = std::move(landing);
		return;
	}
	try {
		spare_landings_.push_back(std::move(landing));
	} catch (const std::bad_alloc&) {
		free_landing(*landing);
	}
}

void Group::free_landing(Landing& landing) noexcept
{
	if (landing.registered)
		transport_.deregister_memory(landing.registration);
	landing.registered = false;
	landing.memory.reset();
}

uint64_t& Group::counter(const Operation& op, uint32_t c) noexcept
{
	if (c & monotone_counter)
		return counters_[c & ~monotone_counter];
	return counters_[op.counter_base + c];
}

std::byte* Group::buffer(Operation& op, Buf b) noexcept
{
	switch (b) {
	case Buf::input: return const_cast<std::byte*>(op.input);
	case Buf::output: return op.output;
	case Buf::landing:
		if (op.plan->layout.landing_in_scratch)
			return transport_.scratch().data() + op.scratch_offset +
			       op.plan->layout.landing_offset();
		return op.landing ? op.landing->memory.data : nullptr;
	case Buf::own_keys:
		return transport_.scratch().data() + op.scratch_offset +
		       ScheduleLayout::own_keys_offset;
	}
	return nullptr;
}

const Registration* Group::registration(const Operation& op, Buf b) const noexcept
{
	switch (b) {
	case Buf::input: return &op.input_reg;
	case Buf::output: return &op.output_reg;
	case Buf::landing: return op.landing ? &op.landing->registration : nullptr;
	case Buf::own_keys: return nullptr;
	}
	return nullptr;
}

Errc Group::execute_write(Operation& op, const Step& st) noexcept
{
	WriteRequest w;
	w.peer = st.peer;
	w.source = buffer(op, st.src) + st.src_off;
	w.length = st.length;
	w.source_registration = registration(op, st.src);
	const std::byte* scratch = transport_.scratch().data();
	const ScheduleLayout& layout = op.plan->layout;
	MemoryKey key;
	bool by_key =
		st.dest == Dest::output || (st.dest == Dest::landing && !layout.landing_in_scratch);
	if (by_key) {
		const std::byte* slot = scratch + op.scratch_offset +
					ScheduleLayout::key_slots_offset +
					uint64_t(st.key) * memory_key_bytes;
		std::memcpy(key.bytes.data(), slot, memory_key_bytes);
		if (observer_)
			observer_->on_local_read(slot, memory_key_bytes);
		w.target_key = &key;
		w.offset = st.dst_off;
	} else if (st.dest == Dest::landing) {
		w.offset = op.scratch_offset + layout.landing_offset() + st.dst_off;
	} else {
		w.offset = op.scratch_offset + ScheduleLayout::key_slots_offset +
			   uint64_t(st.key) * memory_key_bytes;
	}
	w.has_immediate = true;
	w.immediate = (st.counter & monotone_counter) ? (st.counter & ~monotone_counter)
						      : op.counter_base + st.counter;
	w.cookie = op.first_cookie + op.writes_posted;
	Errc e = transport_.write(w);
	if (e != Errc::ok)
		return e;
	if (observer_ && st.length)
		observer_->on_local_read(w.source, st.length);
	op.writes_posted++;
	stats_.writes++;
	(st.control ? stats_.control_bytes : stats_.payload_bytes) += st.length;
	return Errc::ok;
}

bool Group::run(Operation& op) noexcept
{
	const auto& steps = op.plan->steps;
	while (op.pc < steps.size() && op.status == Errc::ok) {
		const Step& st = steps[op.pc];
		switch (st.kind) {
		case Step::Kind::write: {
			Errc e = execute_write(op, st);
			if (e == Errc::would_block) {
				transport_blocked_ = true;
				return false;
			}
			if (e != Errc::ok) {
				op.status = e;
				return true;
			}
			break;
		}
		case Step::Kind::wait: {
			uint64_t want = st.value;
			if (st.counter & monotone_counter)
				want *= op.epoch;
			if (counter(op, st.counter) < want)
				return false;
			break;
		}
		case Step::Kind::wait_sent:
			if (st.value >= op.writes_posted || !op.write_done[st.value])
				return false;
			break;
		case Step::Kind::copy: {
			std::byte* dst = buffer(op, st.dst) + st.dst_off;
			const std::byte* src = buffer(op, st.src) + st.src_off;
			if (observer_) {
				observer_->on_local_read(src, st.length);
				observer_->on_local_write(dst, st.length);
			}
			std::memmove(dst, src, st.length);
			stats_.copied_bytes += st.length;
			break;
		}
		case Step::Kind::reduce: {
			const size_t esz = datatype_size(op.desc.dtype);
			std::byte* dst = buffer(op, st.dst) + st.dst_off;
			const std::byte* a = buffer(op, st.a) + st.a_off;
			const std::byte* b = buffer(op, st.src) + st.src_off;
			if (observer_) {
				observer_->on_local_read(a, st.length * esz);
				observer_->on_local_read(b, st.length * esz);
				observer_->on_local_write(dst, st.length * esz);
			}
			op.kernel(dst, a, b, st.length);
			stats_.reduced_bytes += st.length * esz;
			break;
		}
		}
		++op.pc;
	}
	return op.pc == steps.size() || op.status != Errc::ok;
}

Group::Operation* Group::owner_of_cookie(uint64_t cookie) noexcept
{
	auto owns = [cookie](const std::unique_ptr<Operation>& op) {
		return op->started && cookie >= op->first_cookie &&
		       cookie < op->first_cookie + op->plan->writes;
	};
	for (auto& op : queue_)
		if (owns(op))
			return op.get();
	for (auto& op : recycles_)
		if (owns(op))
			return op.get();
	return nullptr;
}

void Group::handle_event(const TransportEvent& ev) noexcept
{
	settled_ = false;
	switch (ev.kind) {
	case TransportEvent::Kind::arrival:
		if (ev.immediate < counters_.size())
			counters_[ev.immediate] += ev.arrivals;
		else
			misbehaved_ = true; // ignored; see peer_misbehaved()
		break;
	case TransportEvent::Kind::write_complete:
		if (Operation* op = owner_of_cookie(ev.cookie)) {
			uint64_t i = ev.cookie - op->first_cookie;
			if (!op->write_done[i]) {
				op->write_done[i] = true;
				op->writes_completed++;
			}
		}
		break;
	case TransportEvent::Kind::error:
		// A lost write leaves peers waiting forever: the group is unusable.
		failed_ = true;
		if (Operation* op = owner_of_cookie(ev.cookie))
			op->status = ev.error == Errc::ok ? Errc::io_error : ev.error;
		break;
	}
}

void Group::release_resources(Operation& op) noexcept
{
	if (op.has_input_reg)
		transport_.deregister_memory(op.input_reg);
	if (op.has_output_reg)
		transport_.deregister_memory(op.output_reg);
	op.has_input_reg = op.has_output_reg = false;
	if (op.landing)
		give_back_landing(std::move(op.landing));
	op.input_copy.reset();
}

void Group::finish(Operation& op) noexcept
{
	release_resources(op);
	if (op.placed)
		halves_[op.half].live--;
	stats_.operations++;
	try {
		done_.push_back(Completion{op.request.context, op.sequence, op.status});
	} catch (const std::bad_alloc&) {
		failed_ = true;
	}
}

bool Group::quiescent() const noexcept
{
	if (!queue_.empty() || !done_.empty() || !recycles_.empty())
		return false;
	for (const Half& half : halves_)
		if (half.closed && !half.recycling && !half.ready && half.live == 0)
			return false; // its recycle is due
	return true;
}

bool Group::start_recycles() noexcept
{
	bool started = false;
	for (unsigned h = 0; h < 2; ++h) {
		Half& half = halves_[h];
		if (!half.closed || half.recycling || half.ready || half.live != 0)
			continue;
		// Nothing of ours reads this half any more, and every write into it
		// was matched by one of our waits: clear its counters before telling
		// anybody, so that no early write of the next generation is lost.
		auto first = counters_.begin() + monotone_.total() + h * limits_.counters;
		std::fill(first, first + limits_.counters, 0);
		half.recycling = true;
		half.recycles++;
		std::unique_ptr<Operation> op(new (std::nothrow) Operation);
		if (!op) {
			failed_ = true;
			return started;
		}
		op->recycle_half = h;
		op->epoch = half.recycles;
		try {
			if (!recycle_plans_[h])
				recycle_plans_[h] = std::make_shared<const Schedule>(
					recycle_schedule(rank_, size_, h));
			op->plan = recycle_plans_[h];
			op->write_done.assign(op->plan->writes, false);
			op->first_cookie = next_cookie_;
			next_cookie_ += op->plan->writes;
			op->started = true;
			recycles_.push_back(std::move(op));
		} catch (const std::bad_alloc&) {
			failed_ = true;
			return started;
		}
		stats_.recycles++;
		started = true;
	}
	return started;
}

void Group::progress() noexcept
{
	if (progress_round())
		progress_round();
}

bool Group::progress_round() noexcept
{
	size_t handled = 0;
	for (size_t polls = 0; polls < max_polls_per_round; ++polls) {
		size_t n = transport_.poll(event_buffer_);
		for (size_t i = 0; i < n; ++i)
			handle_event(event_buffer_[i]);
		handled += n;
		if (n < event_buffer_.size())
			break;
	}
	// Applications poll in tight loops: with no event and no post since a
	// pass that moved nothing, another pass would move nothing either.
	if (!handled && settled_)
		return false;
	transport_blocked_ = false;

	// Each pass may unblock the next (a finished operation lets a queued
	// one start, a finished recycle lets an operation be placed), so loop
	// until nothing moves: progress() must not leave work that no future
	// event would trigger.
	bool any_moved = false;
	for (bool moved = true; moved; any_moved |= moved) {
		moved = false;
		// Recycle barriers first: operations may be waiting for them.
		for (size_t i = 0; i < recycles_.size();) {
			Operation& op = *recycles_[i];
			if (run(op) && op.writes_completed == op.plan->writes) {
				Half& half = halves_[op.recycle_half];
				half.recycling = false;
				half.closed = false;
				half.ready = true;
				recycles_.erase(recycles_.begin() + static_cast<std::ptrdiff_t>(i));
				moved = true;
				continue;
			}
			++i;
		}
		// Start operations in posting order, then run the started ones.
		uint32_t active = 0;
		for (auto& op : queue_) {
			if (!op->started) {
				if (active >= config_.max_active || !try_start(*op))
					break;
				moved = true;
			}
			++active;
		}
		for (auto it = queue_.begin(); it != queue_.end();) {
			Operation& op = **it;
			if (!op.started)
				break;
			if (failed_ && op.status == Errc::ok)
				op.status = Errc::io_error;
			bool finished = run(op);
			// Complete when the last step ran and the sources of all
			// its writes may be reused.
			if (finished &&
			    (op.writes_completed == op.writes_posted || op.status != Errc::ok)) {
				finish(op);
				it = queue_.erase(it);
				moved = true;
				continue;
			}
			++it;
		}
		if (start_recycles())
			moved = true;
	}
	// A write the transport refused must be retried on the next call (no
	// event announces that it would now be accepted), and a failed group
	// must keep ending its operations.
	settled_ = !transport_blocked_ && !failed_;
	return handled || any_moved;
}

bool Group::next_completion(Completion& out) noexcept
{
	if (done_.empty())
		return false;
	out = done_.front();
	done_.pop_front();
	return true;
}

} // namespace rcoll::engine
