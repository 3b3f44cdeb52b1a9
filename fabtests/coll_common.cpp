#include "coll_common.hpp"

#include <sched.h>
#include <algorithm>
#include <array>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>

namespace fabtests::coll {

// ================================================================ vocabulary

namespace {

constexpr std::array<DatatypeInfo, 14> kDatatypes = {{
	{FI_INT8, sizeof(int8_t), true, true, false},
	{FI_UINT8, sizeof(uint8_t), true, false, false},
	{FI_INT16, sizeof(int16_t), true, true, false},
	{FI_UINT16, sizeof(uint16_t), true, false, false},
	{FI_INT32, sizeof(int32_t), true, true, false},
	{FI_UINT32, sizeof(uint32_t), true, false, false},
	{FI_INT64, sizeof(int64_t), true, true, false},
	{FI_UINT64, sizeof(uint64_t), true, false, false},
	{FI_FLOAT, sizeof(float), false, true, false},
	{FI_DOUBLE, sizeof(double), false, true, false},
	{FI_FLOAT_COMPLEX, sizeof(std::complex<float>), false, true, true},
	{FI_DOUBLE_COMPLEX, sizeof(std::complex<double>), false, true, true},
	{FI_LONG_DOUBLE, sizeof(long double), false, true, false},
	{FI_LONG_DOUBLE_COMPLEX, sizeof(std::complex<long double>), false, true, true},
}};

constexpr std::array<fi_op, 10> kReductionOps = {FI_MIN,  FI_MAX, FI_SUM,  FI_PROD, FI_LOR,
						 FI_LAND, FI_BOR, FI_BAND, FI_LXOR, FI_BXOR};

} // namespace

const char* collective_name(fi_collective_op coll)
{
	switch (coll) {
	case FI_BARRIER: return "barrier";
	case FI_BROADCAST: return "broadcast";
	case FI_ALLTOALL: return "alltoall";
	case FI_ALLREDUCE: return "allreduce";
	case FI_ALLGATHER: return "allgather";
	case FI_REDUCE_SCATTER: return "reduce_scatter";
	case FI_REDUCE: return "reduce";
	case FI_SCATTER: return "scatter";
	case FI_GATHER: return "gather";
	}
	return "invalid-collective";
}

const char* datatype_name(fi_datatype type)
{
	switch (type) {
	case FI_INT8: return "int8";
	case FI_UINT8: return "uint8";
	case FI_INT16: return "int16";
	case FI_UINT16: return "uint16";
	case FI_INT32: return "int32";
	case FI_UINT32: return "uint32";
	case FI_INT64: return "int64";
	case FI_UINT64: return "uint64";
	case FI_FLOAT: return "float";
	case FI_DOUBLE: return "double";
	case FI_FLOAT_COMPLEX: return "float_complex";
	case FI_DOUBLE_COMPLEX: return "double_complex";
	case FI_LONG_DOUBLE: return "long_double";
	case FI_LONG_DOUBLE_COMPLEX: return "long_double_complex";
	default: return "invalid-datatype";
	}
}

const char* op_name(fi_op op)
{
	switch (op) {
	case FI_MIN: return "min";
	case FI_MAX: return "max";
	case FI_SUM: return "sum";
	case FI_PROD: return "prod";
	case FI_LOR: return "lor";
	case FI_LAND: return "land";
	case FI_BOR: return "bor";
	case FI_BAND: return "band";
	case FI_LXOR: return "lxor";
	case FI_BXOR: return "bxor";
	case FI_ATOMIC_READ: return "atomic_read";
	case FI_ATOMIC_WRITE: return "atomic_write";
	case FI_CSWAP: return "cswap";
	default: return "invalid-op";
	}
}

std::span<const DatatypeInfo> datatypes() { return kDatatypes; }

const DatatypeInfo& datatype_info(fi_datatype type)
{
	for (const auto& info : kDatatypes)
		if (info.type == type)
			return info;
	throw std::invalid_argument(
		strfmt("datatype %d has no element type", static_cast<int>(type)));
}

std::span<const fi_op> reduction_ops() { return kReductionOps; }

bool reduction_allowed(fi_datatype type, fi_op op)
{
	const auto found = std::find_if(kDatatypes.begin(), kDatatypes.end(),
					[&](const DatatypeInfo& d) { return d.type == type; });
	if (found == kDatatypes.end())
		return false;
	switch (op) {
	case FI_MIN:
	case FI_MAX: return !found->complex;
	case FI_SUM:
	case FI_PROD:
	case FI_LOR:
	case FI_LAND:
	case FI_LXOR: return true;
	case FI_BOR:
	case FI_BAND:
	case FI_BXOR: return found->integer;
	default: return false;
	}
}

std::string CallSpec::describe() const
{
	if (coll == FI_BARRIER)
		return barrier2 ? "barrier2(FI_COMPLETION)" : "barrier";
	std::string text =
		strfmt("%s count=%zu %s", collective_name(coll), count, datatype_name(type));
	if (is_reduction(coll))
		text += strfmt(" %s", op_name(op));
	if (is_rooted(coll))
		text += strfmt(" root=%d", root);
	return text;
}

BufferBytes buffer_bytes(const CallSpec& call, int group_size, int group_rank)
{
	const size_t block = call.count * datatype_info(call.type).size;
	const size_t all = block * static_cast<size_t>(group_size);
	const bool root = group_rank == call.root;
	switch (call.coll) {
	case FI_BARRIER: return {0, 0};
	case FI_BROADCAST: return {0, block};
	case FI_ALLREDUCE: return {block, block};
	case FI_REDUCE: return {block, root ? block : 0};
	case FI_REDUCE_SCATTER: return {all, block};
	case FI_ALLGATHER: return {block, all};
	case FI_SCATTER: return {root ? all : 0, block};
	case FI_GATHER: return {block, root ? all : 0};
	case FI_ALLTOALL: return {all, all};
	}
	return {0, 0};
}

// ================================================================ endpoint

namespace {

EndpointConfig endpoint_config(const EndpointOptions& options)
{
	EndpointConfig config;
	config.provider = options.provider;
	config.caps = options.caps;
	config.bind_eq = options.bind_eq;
	config.eq_wait_obj = options.eq_wait_obj;
	config.threading = options.threading;
	// No FI_MR_LOCAL: util_coll (tcp;ofi_rxm) posts its internal sends
	// without descriptors and its joins stall when the domain demands them.
	// The clients pass no descriptors either.
	config.mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	config.msg_order = 0;
	config.secondary_caps = FI_COLLECTIVE;
	config.track_contexts = true;
	return config;
}

} // namespace

CollEndpoint::CollEndpoint(const EndpointOptions& options)
	: provider_(options.provider), base_(endpoint_config(options))
{}

void CollEndpoint::progress_until(const std::function<bool()>& pred, const std::string& what,
				  std::chrono::milliseconds budget, Bootstrap* boot)
{
	Deadline deadline(budget);
	LongWait long_wait(what);
	unsigned polls = 0;
	while (!pred()) {
		// Ranks outnumber cores: an idle poll gives the core away.
		if (progress() == 0)
			sched_yield();
		if (++polls % 256 == 0) {
			long_wait.check();
			if (boot)
				boot->check_abort();
			if (deadline.expired())
				throw CheckFailure(strfmt("timed out after %lld ms waiting for %s",
							  static_cast<long long>(budget.count()),
							  what.c_str()));
		}
	}
}

void CollEndpoint::wait_done(OpContext& ctx, const std::string& what,
			     std::chrono::milliseconds budget)
{
	progress_until([&] { return ctx.done; }, what, budget);
}

bool CollEndpoint::read_eq_event()
{
	if (!base_.eq())
		throw CheckFailure("no event queue is bound to the endpoint");
	uint32_t event = 0;
	fi_eq_entry entry{};
	const ssize_t rc = fi_eq_read(base_.eq(), &event, &entry, sizeof entry, 0);
	if (rc == -FI_EAGAIN)
		return false;
	if (rc == -FI_EAVAIL) {
		fi_eq_err_entry err{};
		const ssize_t got = fi_eq_readerr(base_.eq(), &err, 0);
		if (got < 0)
			throw FabricError("fi_eq_readerr", got, std::source_location::current());
		join_events_.push_back({err.fid, err.context, err.err != 0 ? err.err : FI_EOTHER});
		return true;
	}
	if (rc < 0)
		throw FabricError("fi_eq_read", rc, std::source_location::current());
	expect(event == FI_JOIN_COMPLETE, "unexpected event %u on the endpoint's EQ", event);
	join_events_.push_back({entry.fid, entry.context, 0});
	return true;
}

JoinEvent CollEndpoint::wait_join(fid_mc* mc, const std::string& what,
				  std::chrono::milliseconds budget)
{
	Deadline deadline(budget);
	for (;;) {
		const auto mine =
			std::find_if(join_events_.begin(), join_events_.end(),
				     [&](const JoinEvent& e) { return e.fid == &mc->fid; });
		if (mine != join_events_.end()) {
			const JoinEvent event = *mine;
			join_events_.erase(mine);
			return event;
		}
		// libfabric's util_coll (tcp;ofi_rxm) names the AV's internal parent
		// group in the event, not the new one: with one join outstanding, its
		// event is ours. rcoll is held to the specification.
		if (join_events_.size() == 1 && provider_ != "rcoll") {
			const JoinEvent event = join_events_.front();
			join_events_.clear();
			return event;
		}
		const bool got = read_eq_event();
		if (!got && progress() == 0)
			sched_yield();
		if (deadline.expired())
			throw CheckFailure(
				strfmt("timed out after %lld ms waiting for FI_JOIN_COMPLETE of %s",
				       static_cast<long long>(budget.count()), what.c_str()));
	}
}

void ProgressingBarrier::wait()
{
	// Nobody adds for the next round before everyone added for this one,
	// so the count seen before adding names the round (any number of
	// ProgressingBarrier objects may take turns in one launch).
	const auto ranks = static_cast<uint64_t>(ranks_);
	const uint64_t before = boot_.signal_get(signal_);
	boot_.signal_add(signal_, 1);
	boot_.signal_wait_at_least(signal_, (before / ranks + 1) * ranks, [&] { ep_.progress(); });
}

// ================================================================ groups

AvSetPtr av_set_range(CollEndpoint& ep, fi_addr_t start, fi_addr_t end, uint64_t stride,
		      size_t count)
{
	fi_av_set_attr attr{};
	attr.count = count;
	attr.start_addr = start;
	attr.end_addr = end;
	attr.stride = stride;
	fid_av_set* set = nullptr;
	FT_CHECK(fi_av_set(ep.av(), &attr, &set, nullptr));
	return AvSetPtr(set);
}

AvSetPtr av_set_inserted(CollEndpoint& ep, std::span<const fi_addr_t> members)
{
	AvSetPtr set = av_set_range(ep, FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, 0, members.size());
	for (fi_addr_t member : members)
		FT_CHECK(fi_av_set_insert(set.get(), member));
	return set;
}

const char* shape_name(Shape shape)
{
	switch (shape) {
	case Shape::full: return "full";
	case Shape::strided: return "strided";
	case Shape::reversed: return "reversed";
	}
	return "?";
}

std::vector<int> shape_members(Shape shape, int world_size, int world_rank)
{
	std::vector<int> members;
	switch (shape) {
	case Shape::full:
		for (int r = 0; r < world_size; ++r)
			members.push_back(r);
		break;
	case Shape::strided:
		for (int r = world_rank % 2; r < world_size; r += 2)
			members.push_back(r);
		break;
	case Shape::reversed:
		for (int r = world_size - 1; r >= 0; --r)
			members.push_back(r);
		break;
	}
	return members;
}

AvSetPtr make_shape_set(CollEndpoint& ep, Shape shape, std::span<const fi_addr_t> world,
			int my_rank)
{
	const int size = static_cast<int>(world.size());
	switch (shape) {
	case Shape::full: return av_set_range(ep, world.front(), world.back(), 1, world.size());
	case Shape::strided: {
		// start/end/stride count in AV indices; ranks inserted their names in
		// rank order into an FI_AV_TABLE, so stride 2 there is stride 2 in ranks.
		for (int r = 0; r < size; ++r)
			expect(world[static_cast<size_t>(r)] == static_cast<fi_addr_t>(r),
			       "rank %d has fi_addr %llu: the strided set needs the AV in rank "
			       "order",
			       r, static_cast<unsigned long long>(world[static_cast<size_t>(r)]));
		const int parity = my_rank % 2;
		const int last = (size - 1) % 2 == parity ? size - 1 : size - 2;
		return av_set_range(ep, world[static_cast<size_t>(parity)],
				    world[static_cast<size_t>(last)], 2,
				    static_cast<size_t>((last - parity) / 2 + 1));
	}
	case Shape::reversed: {
		std::vector<fi_addr_t> reversed(world.rbegin(), world.rend());
		return av_set_inserted(ep, reversed);
	}
	}
	return {};
}

Group::Group(CollEndpoint& ep, AvSetPtr set, std::vector<int> members,
	     std::span<const fi_addr_t> world, int world_rank, std::string label,
	     std::chrono::milliseconds budget)
	: Group(ep, std::move(set), std::move(members), world, world_rank, std::move(label),
		Deferred{})
{
	wait_joined(ep, budget);
}

Group::Group(CollEndpoint& ep, AvSetPtr set, std::vector<int> members,
	     std::span<const fi_addr_t> world, int world_rank, std::string label, Deferred)
	: members_(std::move(members)), set_(std::move(set)), label_(std::move(label))
{
	for (size_t i = 0; i < members_.size(); ++i) {
		addresses_.push_back(world[static_cast<size_t>(members_[i])]);
		if (members_[i] == world_rank)
			rank_ = static_cast<int>(i);
	}
	expect(rank_ >= 0, "%s: rank %d is not a member", label_.c_str(), world_rank);

	fi_addr_t set_addr = FI_ADDR_NOTAVAIL;
	FT_CHECK(fi_av_set_addr(set_.get(), &set_addr));
	fid_mc* mc = nullptr;
	// The join context is this object: the FI_JOIN_COMPLETE must carry it.
	FT_CHECK(fi_join_collective(ep.ep(), set_addr, set_.get(), 0, &mc, this));
	mc_.reset(mc);
}

void Group::wait_joined(CollEndpoint& ep, std::chrono::milliseconds budget)
{
	fid_mc* mc = mc_.get();
	const JoinEvent event = ep.wait_join(mc, label_, budget);
	expect(event.error == 0, "%s: fi_join_collective completed with error %d (%s)",
	       label_.c_str(), event.error, fi_strerror(event.error));
	if (ep.provider() == "rcoll")
		expect(event.fid == &mc->fid && event.context == this,
		       "%s: FI_JOIN_COMPLETE names fid %p context %p, want the new group %p and "
		       "the join context %p",
		       label_.c_str(), static_cast<void*>(event.fid), event.context,
		       static_cast<void*>(&mc->fid), static_cast<void*>(this));
	coll_addr_ = fi_mc_addr(mc);
}

Group::~Group() = default;

int Group::close()
{
	fid_mc* mc = mc_.release();
	return mc ? fi_close(&mc->fid) : 0;
}

// ================================================================ buffers

void GuardedBuffer::prepare(size_t bytes)
{
	constexpr size_t kPage = 4096;
	const size_t needed = bytes + 2 * kGuardBytes;
	if (needed > capacity_) {
		const size_t allocated = (needed + kPage - 1) / kPage * kPage;
		memory_.reset(static_cast<std::byte*>(std::aligned_alloc(kPage, allocated)));
		if (!memory_)
			throw std::bad_alloc();
		capacity_ = allocated;
	}
	bytes_ = bytes;
	std::memset(memory_.get(), kGuardByte, kGuardBytes);
	std::memset(data() + bytes_, kGuardByte, kGuardBytes);
}

void GuardedBuffer::expect_guards(const std::string& what) const
{
	const auto* before = reinterpret_cast<const uint8_t*>(memory_.get());
	const auto* after = reinterpret_cast<const uint8_t*>(data() + bytes_);
	for (size_t i = 0; i < kGuardBytes; ++i) {
		expect(before[i] == kGuardByte, "%s: wrote 0x%02x at %zu bytes before the buffer",
		       what.c_str(), before[i], kGuardBytes - i);
		expect(after[i] == kGuardByte,
		       "%s: wrote 0x%02x at byte %zu past the end of the %zu-byte buffer",
		       what.c_str(), after[i], i, bytes_);
	}
}

// ================================================================ posting

ssize_t issue(CollEndpoint& ep, const Group& group, const CallSpec& call, GuardedBuffer* input,
	      GuardedBuffer* output, OpContext& ctx)
{
	fid_ep* e = ep.ep();
	const fi_addr_t coll = group.coll_addr();
	void* in = input ? input->data() : nullptr;
	void* out = output ? output->data() : nullptr;
	void* const in_desc = nullptr; // no FI_MR_LOCAL (see GuardedBuffer)
	void* const out_desc = nullptr;
	const fi_addr_t root = is_rooted(call.coll) && call.root >= 0 && call.root < group.size()
				       ? group.address_of(call.root)
				       : FI_ADDR_NOTAVAIL;
	ssize_t rc = -FI_EINVAL;
	switch (call.coll) {
	case FI_BARRIER:
		rc = call.barrier2 ? fi_barrier2(e, coll, FI_COMPLETION, &ctx)
				   : fi_barrier(e, coll, &ctx);
		break;
	case FI_BROADCAST:
		rc = fi_broadcast(e, out, call.count, out_desc, coll, root, call.type, 0, &ctx);
		break;
	case FI_ALLTOALL:
		rc = fi_alltoall(e, in, call.count, in_desc, out, out_desc, coll, call.type, 0,
				 &ctx);
		break;
	case FI_ALLREDUCE:
		rc = fi_allreduce(e, in, call.count, in_desc, out, out_desc, coll, call.type,
				  call.op, 0, &ctx);
		break;
	case FI_ALLGATHER:
		rc = fi_allgather(e, in, call.count, in_desc, out, out_desc, coll, call.type, 0,
				  &ctx);
		break;
	case FI_REDUCE_SCATTER:
		rc = fi_reduce_scatter(e, in, call.count, in_desc, out, out_desc, coll, call.type,
				       call.op, 0, &ctx);
		break;
	case FI_REDUCE:
		rc = fi_reduce(e, in, call.count, in_desc, out, out_desc, coll, root, call.type,
			       call.op, 0, &ctx);
		break;
	case FI_SCATTER:
		rc = fi_scatter(e, in, call.count, in_desc, out, out_desc, coll, root, call.type, 0,
				&ctx);
		break;
	case FI_GATHER:
		rc = fi_gather(e, in, call.count, in_desc, out, out_desc, coll, root, call.type, 0,
			       &ctx);
		break;
	}
	if (rc == 0)
		ep.track(ctx);
	return rc;
}

void post(CollEndpoint& ep, const Group& group, const CallSpec& call, GuardedBuffer* input,
	  GuardedBuffer* output, OpContext& ctx, std::chrono::milliseconds budget)
{
	ctx.reset();
	// The clock is read only once the provider refused (a benchmark of
	// sub-microsecond calls would notice it on every call).
	std::optional<Deadline> deadline;
	for (;;) {
		const ssize_t rc = issue(ep, group, call, input, output, ctx);
		if (rc == 0)
			return;
		if (!deadline)
			deadline.emplace(budget);
		if (rc != -FI_EAGAIN)
			throw CheckFailure(strfmt("%s on %s: posting returned %zd (%s)",
						  call.describe().c_str(), group.label().c_str(),
						  rc, fi_strerror(static_cast<int>(-rc))));
		if (ep.progress() == 0)
			sched_yield();
		expect(!deadline->expired(), "%s on %s: still -FI_EAGAIN after %lld ms",
		       call.describe().c_str(), group.label().c_str(),
		       static_cast<long long>(budget.count()));
	}
}

void expect_collective_completion(const OpContext& ctx, const std::string& what)
{
	expect(ctx.done, "%s: not completed", what.c_str());
	expect(ctx.error == 0, "%s: error completion: %s", what.c_str(),
	       describe_error(ctx).c_str());
	expect((ctx.entry.flags & FI_COLLECTIVE) != 0, "%s: completion flags %s lack FI_COLLECTIVE",
	       what.c_str(), describe_flags(ctx.entry.flags).c_str());
}

} // namespace fabtests::coll
