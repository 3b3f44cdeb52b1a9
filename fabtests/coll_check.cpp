// The verified-call machinery shared by the rcoll_coll_test cases.
#include "coll_cases.hpp"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

namespace fabtests::coll {

namespace {

// Noise the outputs start as, different for every call.
constexpr uint64_t kNoiseSalt = 0x6E6F697365ULL;

std::span<uint8_t> block_of(GuardedBuffer& buffer, size_t block_bytes, int block)
{
	return buffer.bytes().subspan(static_cast<size_t>(block) * block_bytes, block_bytes);
}

} // namespace

std::string CheckedCall::describe() const
{
	return strfmt("%s on %s (group rank %d of %d)", call_.describe().c_str(),
		      group_ ? group_->label().c_str() : "?", group_ ? group_->rank() : -1,
		      group_ ? group_->size() : 0);
}

void CheckedCall::prepare(const Group& group, const CallSpec& call, uint64_t seed)
{
	group_ = &group;
	call_ = call;
	seed_ = seed;
	const int p = group.size();
	const int me = group.rank();
	const BufferBytes bytes = buffer_bytes(call, p, me);
	const size_t block = call.count * datatype_info(call.type).size;
	const bool is_root = me == call.root;

	// Buffers a rank has no use for are passed as null: only the root
	// reads scatter's input and receives reduce's and gather's output.
	has_input_ = call.coll != FI_BARRIER && call.coll != FI_BROADCAST &&
		     (call.coll != FI_SCATTER || is_root);
	has_output_ = call.coll != FI_BARRIER &&
		      ((call.coll != FI_REDUCE && call.coll != FI_GATHER) || is_root);
	input_.prepare(bytes.input);
	output_.prepare(bytes.output);
	fill_pattern(output_.bytes(), make_seed(seed, kNoiseSalt, static_cast<uint64_t>(me)));

	switch (call.coll) {
	case FI_BARRIER: break;
	case FI_BROADCAST:
		if (is_root)
			fill_pattern(output_.bytes(), block_seed(seed, call.root));
		break;
	case FI_ALLREDUCE:
	case FI_REDUCE:
	case FI_REDUCE_SCATTER:
		fill_reduction_input(call.type, call.op, input_.span(), 0, me, p);
		break;
	case FI_ALLGATHER:
	case FI_GATHER: fill_pattern(input_.bytes(), block_seed(seed, me)); break;
	case FI_SCATTER:
		for (int j = 0; is_root && j < p; ++j)
			fill_pattern(block_of(input_, block, j), block_seed(seed, call.root, j));
		break;
	case FI_ALLTOALL:
		for (int j = 0; j < p; ++j)
			fill_pattern(block_of(input_, block, j), block_seed(seed, me, j));
		break;
	}
	input_copy_.assign(input_.span().begin(), input_.span().end());
}

void CheckedCall::post(CollEndpoint& ep)
{
	coll::post(ep, *group_, call_, has_input_ ? &input_ : nullptr,
		   has_output_ ? &output_ : nullptr, ctx_);
}

void CheckedCall::wait(CollEndpoint& ep, std::chrono::milliseconds budget)
{
	// Whatever goes wrong while waiting (a timeout, a completion for
	// something never posted) is reported against this call.
	try {
		ep.wait_done(ctx_, "its completion", budget);
	} catch (const CheckFailure& failure) {
		throw CheckFailure(strfmt("%s: %s", describe().c_str(), failure.what()));
	}
}

void CheckedCall::verify()
{
	const std::string what = describe();
	expect_collective_completion(ctx_, what);
	input_.expect_guards(what + ", input");
	output_.expect_guards(what + ", output");
	expect(input_copy_.empty() ||
		       std::memcmp(input_copy_.data(), input_.data(), input_copy_.size()) == 0,
	       "%s: the provider modified the input buffer", what.c_str());

	const int p = group_->size();
	const int me = group_->rank();
	const size_t block = call_.count * datatype_info(call_.type).size;
	const bool is_root = me == call_.root;
	auto check_block = [&](int block_index, uint64_t seed, const char* part) {
		expect_pattern(block_of(output_, block, block_index), seed,
			       strfmt("%s, %s block %d", what.c_str(), part, block_index));
	};
	auto check_reduction = [&](std::span<const std::byte> out, size_t first_index) {
		if (auto wrong = check_reduction_output(call_.type, call_.op, out, first_index, p))
			throw CheckFailure(strfmt("%s: %s", what.c_str(), wrong->c_str()));
	};
	switch (call_.coll) {
	case FI_BARRIER: break;
	case FI_BROADCAST: check_block(0, block_seed(seed_, call_.root), "broadcast"); break;
	case FI_ALLREDUCE: check_reduction(output_.span(), 0); break;
	case FI_REDUCE:
		if (is_root)
			check_reduction(output_.span(), 0);
		break;
	case FI_REDUCE_SCATTER:
		check_reduction(output_.span(), static_cast<size_t>(me) * call_.count);
		break;
	case FI_ALLGATHER:
		for (int j = 0; j < p; ++j)
			check_block(j, block_seed(seed_, j), "gathered");
		break;
	case FI_GATHER:
		for (int j = 0; is_root && j < p; ++j)
			check_block(j, block_seed(seed_, j), "gathered");
		break;
	case FI_SCATTER: check_block(0, block_seed(seed_, call_.root, me), "scattered"); break;
	case FI_ALLTOALL:
		for (int j = 0; j < p; ++j)
			check_block(j, block_seed(seed_, j, me), "received");
		break;
	}
}

std::string Tally::skipped_text() const
{
	return unsupported ? strfmt(" (%zu calls skipped: fi_query_collective says unsupported)",
				    unsupported)
			   : "";
}

void Tally::require_some(const std::string& provider) const
{
	if (verified == 0)
		throw NotApplicable(strfmt("%s supports none of the %zu calls of this case",
					   provider.c_str(), unsupported));
}

bool provider_supports(CollEndpoint& ep, const CallSpec& call)
{
	fi_collective_attr attr{};
	attr.datatype = call.coll == FI_BARRIER ? FI_VOID : call.type;
	attr.op = is_reduction(call.coll) ? call.op : FI_NOOP;
	return fi_query_collective(ep.domain(), call.coll, &attr, 0) == 0;
}

bool run_checked(CollEndpoint& ep, CheckedCall& checked, const Group& group, const CallSpec& call,
		 uint64_t seed, std::chrono::milliseconds budget)
{
	if (!provider_supports(ep, call))
		return false;
	checked.prepare(group, call, seed);
	checked.post(ep);
	checked.wait(ep, budget);
	checked.verify();
	return true;
}

void check_barrier_semantics(CollEndpoint& ep, Bootstrap& boot, const Group& group, int signal,
			     int rounds)
{
	const auto p = static_cast<uint64_t>(group.size());
	// fi_barrier2 with a flag needs the provider's barrier2 entry point
	// (ops table size); rcoll must have it.
	const fi_ops_collective* ops = ep.ep()->collective;
	const bool barrier2_offered =
		ep.provider() == "rcoll" || FI_CHECK_OP(ops, fi_ops_collective, barrier2);
	for (int round = 0; round < rounds; ++round) {
		// One member per round arrives late: nobody may leave before it.
		if (round % group.size() == group.rank())
			std::this_thread::sleep_for(std::chrono::milliseconds(3));
		boot.signal_add(signal, 1);
		// Odd rounds go through fi_barrier2, where the provider offers it.
		CallSpec call{FI_BARRIER};
		call.barrier2 = round % 2 == 1 && barrier2_offered;
		OpContext ctx;
		post(ep, group, call, nullptr, nullptr, ctx);
		const std::string what = strfmt("%s round %d on %s", call.describe().c_str(), round,
						group.label().c_str());
		ep.wait_done(ctx, what);
		expect_collective_completion(ctx, what);
		const uint64_t entered = boot.signal_get(signal);
		expect(entered >= p * static_cast<uint64_t>(round + 1),
		       "%s: left the barrier when only %llu of %llu entries had happened",
		       what.c_str(), static_cast<unsigned long long>(entered),
		       static_cast<unsigned long long>(p * (round + 1)));
	}
}

std::unique_ptr<Group> join_shape(CollEndpoint& ep, Bootstrap& boot,
				  std::span<const fi_addr_t> world, Shape shape)
{
	auto members = shape_members(shape, boot.size(), boot.rank());
	const std::string label = strfmt("%s group of %zu", shape_name(shape), members.size());
	return std::make_unique<Group>(ep, make_shape_set(ep, shape, world, boot.rank()),
				       std::move(members), world, boot.rank(), label);
}

bool shared_memory_path()
{
	auto on = [](const char* name) {
		const char* v = std::getenv(name);
		return !v || std::string_view(v) != "0";
	};
	return on("FI_RCOLL_COLL_LOCAL") && on("FI_RCOLL_COLL_SHM") &&
	       !std::getenv("RCOLL_TEST_COLL_LOCAL");
}

void summary_note(Bootstrap& boot, const std::string& text)
{
	boot.note(boot.rank() == 0 ? text : std::string());
}

fi_op valid_op(fi_datatype type, size_t index)
{
	std::vector<fi_op> valid;
	for (fi_op op : reduction_ops())
		if (reduction_allowed(type, op))
			valid.push_back(op);
	return valid[index % valid.size()];
}

} // namespace fabtests::coll
