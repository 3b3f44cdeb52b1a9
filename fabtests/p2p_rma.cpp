// RMA cases: fi_write, fi_writedata and fi_read between two ranks on
// registered buffers whose addresses and keys travel in messages.
#include "p2p_cases.hpp"

#include <algorithm>
#include <thread>

namespace fabtests {

namespace {

enum class RmaOp { write, writedata, read };

const char* rma_name(RmaOp op)
{
	switch (op) {
	case RmaOp::write: return "fi_write";
	case RmaOp::writedata: return "fi_writedata";
	case RmaOp::read: return "fi_read";
	}
	return "?";
}

// Control message tags of the RMA protocol.
constexpr uint64_t kRegionTag = 1;
constexpr uint64_t kReadyTag = 2;
constexpr uint64_t kDoneTag = 3;

std::vector<size_t> rma_sizes(bool quick)
{
	const size_t max = quick ? (1u << 20) : (16u << 20);
	std::vector<size_t> sizes{1, 2, 7, 64, 4095, 4096, 4097, 65537, 1u << 20, 16u << 20};
	std::erase_if(sizes, [&](size_t s) { return s > max; });
	return sizes;
}

// Two ranks' RMA set-up: the peer, a guarded target region for the peer to
// reach and a local buffer, 1 B..max_size each way (unaligned offsets).
// Keys and addresses travel as ordinary messages.
struct RmaPair {
	fi_addr_t peer;
	RegisteredBuffer target;
	RegisteredBuffer local;
	ControlChannel control;
	RemoteRegion theirs;

	RmaPair(Bootstrap& boot, Endpoint& ep, size_t max)
		: peer(ep.exchange_addresses(boot)[static_cast<size_t>(1 - boot.rank())]),
		  target(ep, region_size(max), FI_REMOTE_READ | FI_REMOTE_WRITE),
		  local(ep, max + kGuardBytes, FI_READ | FI_WRITE), control(ep)
	{
		const RemoteRegion mine{target.remote_address(0), target.key(), target.size()};
		control.send(peer, &mine, sizeof mine, kRegionTag);
		control.recv(&theirs, sizeof theirs, kRegionTag);
		expect(theirs.size == target.size(), "peer announced a %llu-byte region",
		       static_cast<unsigned long long>(theirs.size));
	}
	static size_t region_size(size_t max) { return kGuardBytes + 8 + max + kGuardBytes; }
};

void run_rma(Bootstrap& boot, const TestOptions& options, RmaOp op)
{
	Endpoint ep({options.provider});
	if (op == RmaOp::writedata && ep.info().domain_attr->cq_data_size == 0)
		throw NotApplicable(
			strfmt("provider %s reports cq_data_size 0", ep.provider_name().c_str()));
	const auto sizes = rma_sizes(options.quick);
	const size_t max_size = sizes.back();
	RmaPair pair(boot, ep, max_size);
	auto& [peer, target, local, control, theirs] = pair;

	// Without send-after-write ordering, the "done" message could overtake
	// the data: ask for delivery completion instead.
	const bool ordered = (ep.info().tx_attr->msg_order & FI_ORDER_SAW) != 0;
	size_t transfers = 0;

	for (int initiator = 0; initiator < 2; ++initiator) {
		for (size_t size : sizes) {
			const size_t offset = kGuardBytes + size % 7;
			const uint64_t seed =
				make_seed(0x8A, static_cast<uint64_t>(op), size, initiator);
			const uint64_t cq_data = (0xDA7A0000ULL | size) & ep.cq_data_mask();
			const std::string what =
				strfmt("%s of %s at offset %zu, rank %d -> rank %d", rma_name(op),
				       format_size(size).c_str(), offset, initiator, 1 - initiator);
			uint8_t token = 0;
			if (boot.rank() != initiator) {
				// Target: prepare the region, say so, check the result.
				fill_guard(target.bytes(0, offset + size + kGuardBytes));
				if (op == RmaOp::read)
					fill_pattern(target.bytes(offset, size), seed);
				control.send(peer, &token, 1, kReadyTag);
				if (op == RmaOp::writedata) {
					// The remote CQ entry alone says the data is in place.
					ep.progress_until([&] { return !ep.unsolicited().empty(); },
							  what + " (remote CQ data)");
					const UnsolicitedEvent event = ep.unsolicited().front();
					ep.unsolicited().pop_front();
					expect(event.error == 0, "%s: target got error %d (%s)",
					       what.c_str(), event.error, fi_strerror(event.error));
					expect((event.entry.flags & FI_REMOTE_CQ_DATA) &&
						       (event.entry.flags & FI_REMOTE_WRITE),
					       "%s: target completion flags %s lack "
					       "FI_REMOTE_WRITE|FI_REMOTE_CQ_DATA",
					       what.c_str(),
					       describe_flags(event.entry.flags).c_str());
					expect(event.entry.data == cq_data,
					       "%s: target cq data 0x%llx, sent 0x%llx",
					       what.c_str(),
					       static_cast<unsigned long long>(event.entry.data),
					       static_cast<unsigned long long>(cq_data));
					expect_pattern(target.bytes(offset, size), seed,
						       what + " (on the remote CQ event)");
				}
				control.recv(&token, 1, kDoneTag);
				if (op != RmaOp::read)
					expect_pattern(target.bytes(offset, size), seed, what);
				else
					expect_pattern(target.bytes(offset, size), seed,
						       what + " (read source changed)");
				expect_guard(target.bytes(0, offset),
					     what + ": bytes before the target range");
				expect_guard(target.bytes(offset + size, kGuardBytes),
					     what + ": bytes after the target range");
				continue;
			}
			// Initiator.
			control.recv(&token, 1, kReadyTag);
			OpContext ctx;
			void* desc = local.desc();
			const uint64_t remote = theirs.address + offset;
			uint64_t expected_flags = FI_RMA;
			if (op == RmaOp::read) {
				fill_guard(local.bytes(0, size + kGuardBytes));
				FT_POST(ep, fi_read(ep.ep(), local.data(), size, desc, peer, remote,
						    theirs.key, &ctx));
				expected_flags |= FI_READ;
			} else {
				fill_pattern(local.bytes(0, size), seed);
				iovec iov{local.data(), size};
				fi_rma_iov rma_iov{remote, size, theirs.key};
				fi_msg_rma msg{&iov,     &desc,
					       1,        peer,
					       &rma_iov, 1,
					       &ctx,     op == RmaOp::writedata ? cq_data : 0};
				const uint64_t flags =
					(op == RmaOp::writedata ? FI_REMOTE_CQ_DATA : 0) |
					(ordered ? 0 : FI_DELIVERY_COMPLETE);
				if (op == RmaOp::write && ordered)
					FT_POST(ep, fi_write(ep.ep(), local.data(), size, desc,
							     peer, remote, theirs.key, &ctx));
				else if (op == RmaOp::writedata && ordered)
					FT_POST(ep, fi_writedata(ep.ep(), local.data(), size, desc,
								 cq_data, peer, remote, theirs.key,
								 &ctx));
				else
					FT_POST(ep, fi_writemsg(ep.ep(), &msg, flags));
				expected_flags |= FI_WRITE;
			}
			ep.wait_ok(ctx, what);
			expect((ctx.entry.flags & expected_flags) == expected_flags,
			       "%s: completion flags %s, expected %s", what.c_str(),
			       describe_flags(ctx.entry.flags).c_str(),
			       describe_flags(expected_flags).c_str());
			if (op == RmaOp::read) {
				expect_pattern(local.bytes(0, size), seed, what);
				expect_guard(local.bytes(size, kGuardBytes),
					     what + ": bytes past the read length");
			}
			control.send(peer, &token, 1, kDoneTag);
			++transfers;
		}
	}
	boot.barrier();
	if (boot.rank() == 0)
		boot.note(strfmt(
			"%s: %zu transfers per rank, 1 B..%s each way at unaligned offsets, "
			"keys/addresses "
			"from messages (%s addressing), data and guards on both sides verified%s%s",
			rma_name(op), transfers, format_size(max_size).c_str(),
			ep.mr_virtual_addresses() ? "virtual" : "offset",
			op == RmaOp::writedata ? ", target CQ entry with FI_REMOTE_CQ_DATA and data"
					       : "",
			ordered ? "" : " (FI_DELIVERY_COMPLETE: provider lacks FI_ORDER_SAW)"));
}

} // namespace

// FI_DELIVERY_COMPLETE (fi_cq(3)): a write completes only once its data is
// visible at the target. MPI implementations lean on it: MPICH's
// MPI_Win_fence counts its puts' completions and then synchronises through
// other peers, so a completion that only meant "sent" let a third rank read
// the target before the put had landed. Here the initiator tells the target
// out of band, through shared memory and not through the provider, the
// moment its write completes. The target does not progress its endpoint
// for a few milliseconds after it is ready, so no write can land then
// (manual progress), and progresses while it waits; told, it checks its
// memory at once. Three ways of asking: the flag on fi_writemsg, the
// endpoint's default op_flags under fi_write, and fi_inject_write, seen
// through the write counter only; and the flag with remote CQ data, whose
// CQ entry the target must have by then too.
void case_rma_delivery(Bootstrap& boot, const TestOptions& options)
{
	EndpointConfig config{options.provider};
	config.tx_op_flags = FI_DELIVERY_COMPLETE;
	config.bind_write_counter = true;
	Endpoint ep(config);
	if (!(ep.info().tx_attr->op_flags & FI_DELIVERY_COMPLETE))
		throw NotApplicable(strfmt("provider %s does not take FI_DELIVERY_COMPLETE",
					   ep.provider_name().c_str()));
	const auto sizes = rma_sizes(options.quick);
	const size_t max_size = sizes.back();
	RmaPair pair(boot, ep, max_size);
	auto& [peer, target, local, control, theirs] = pair;

	const char* inject_defect = known_defect(options.provider, "inject-write-delivery");
	const bool cq_data = ep.info().domain_attr->cq_data_size > 0;
	enum class Way { writemsg_flag, write_op_flags, inject_counted, with_cq_data };
	const char* const way_names[] = {"fi_writemsg(FI_DELIVERY_COMPLETE)",
					 "fi_write (op_flags FI_DELIVERY_COMPLETE)",
					 "fi_inject_write (write counter)",
					 "fi_writemsg(FI_DELIVERY_COMPLETE | FI_REMOTE_CQ_DATA)"};
	constexpr int kReadySignal = 0, kDoneSignal = 1;
	uint64_t step = 0, writes = 0; // writes: this rank's, as the counter counts them
	size_t checked = 0;
	for (int initiator = 0; initiator < 2; ++initiator) {
		for (size_t size : sizes) {
			for (Way way : {Way::writemsg_flag, Way::write_op_flags,
					Way::inject_counted, Way::with_cq_data}) {
				if (way == Way::inject_counted &&
				    (size > ep.inject_size() || inject_defect))
					continue;
				if (way == Way::with_cq_data && !cq_data)
					continue;
				++step;
				const size_t offset = kGuardBytes + size % 7;
				const uint64_t seed = make_seed(0xDC, static_cast<uint64_t>(way),
								size, initiator);
				const std::string what =
					strfmt("%s of %s, rank %d -> rank %d",
					       way_names[static_cast<int>(way)],
					       format_size(size).c_str(), initiator, 1 - initiator);
				if (boot.rank() != initiator) {
					fill_guard(target.bytes(0, offset + size + kGuardBytes));
					boot.signal_set(kReadySignal, step);
					// Not progressing for a while: a write cannot land
					// meanwhile (manual progress), so a completion
					// reported then cannot have been a delivery.
					std::this_thread::sleep_for(std::chrono::milliseconds(5));
					boot.signal_wait_at_least(kDoneSignal, step,
								  [&] { ep.progress(); });
					expect_pattern(
						target.bytes(offset, size), seed,
						what + ", read by the target the moment the "
						       "initiator's completion was reported");
					expect_guard(target.bytes(0, offset),
						     what + ": bytes before the target range");
					expect_guard(target.bytes(offset + size, kGuardBytes),
						     what + ": bytes after the target range");
					if (way == Way::with_cq_data) {
						// It came ahead of the query the answer
						// was for: already read.
						expect(!ep.unsolicited().empty(),
						       "%s: no remote CQ entry when the "
						       "initiator's "
						       "completion was reported",
						       what.c_str());
						const UnsolicitedEvent event =
							ep.unsolicited().front();
						ep.unsolicited().pop_front();
						expect(event.error == 0 &&
							       (event.entry.flags &
								FI_REMOTE_CQ_DATA) &&
							       event.entry.data ==
								       (step & ep.cq_data_mask()),
						       "%s: remote CQ entry error %d, flags %s, "
						       "data %llu",
						       what.c_str(), event.error,
						       describe_flags(event.entry.flags).c_str(),
						       static_cast<unsigned long long>(
							       event.entry.data));
					}
					++checked;
					continue;
				}
				boot.signal_wait_at_least(kReadySignal, step,
							  [&] { ep.progress(); });
				fill_pattern(local.bytes(0, size), seed);
				const uint64_t remote = theirs.address + offset;
				void* desc = local.desc();
				if (way == Way::inject_counted) {
					// The source may be reused at once; the counter says
					// when the data is visible.
					FT_POST(ep, fi_inject_write(ep.ep(), local.data(), size,
								    peer, remote, theirs.key));
					fill_guard(local.bytes(0, size));
					ep.progress_until(
						[&] {
							return fi_cntr_read(ep.write_counter()) >
								       writes ||
							       fi_cntr_readerr(ep.write_counter()) >
								       0;
						},
						what);
					expect(fi_cntr_readerr(ep.write_counter()) == 0,
					       "%s: the write counter counts %llu errors",
					       what.c_str(),
					       static_cast<unsigned long long>(
						       fi_cntr_readerr(ep.write_counter())));
				} else {
					OpContext ctx;
					if (way == Way::write_op_flags) {
						FT_POST(ep,
							fi_write(ep.ep(), local.data(), size, desc,
								 peer, remote, theirs.key, &ctx));
					} else {
						const bool data = way == Way::with_cq_data;
						iovec iov{local.data(), size};
						fi_rma_iov rma_iov{remote, size, theirs.key};
						fi_msg_rma msg{&iov,
							       &desc,
							       1,
							       peer,
							       &rma_iov,
							       1,
							       &ctx,
							       data ? step & ep.cq_data_mask() : 0};
						FT_POST(ep,
							fi_writemsg(
								ep.ep(), &msg,
								FI_COMPLETION |
									FI_DELIVERY_COMPLETE |
									(data ? FI_REMOTE_CQ_DATA
									      : 0)));
					}
					ep.wait_ok(ctx, what);
				}
				++writes;
				boot.signal_set(kDoneSignal, step);
			}
		}
	}
	boot.barrier();
	if (boot.rank() == 0)
		boot.note(strfmt("%zu writes of 1 B..%s checked by their targets, out of band, "
				 "the moment they completed (%d ways of asking for "
				 "FI_DELIVERY_COMPLETE)%s%s",
				 2 * checked, format_size(max_size).c_str(),
				 2 + !inject_defect + cq_data,
				 inject_defect ? "; fi_inject_write not checked: " : "",
				 inject_defect ? inject_defect : ""));
}

void case_rma_write(Bootstrap& boot, const TestOptions& options)
{
	run_rma(boot, options, RmaOp::write);
}
void case_rma_writedata(Bootstrap& boot, const TestOptions& options)
{
	run_rma(boot, options, RmaOp::writedata);
}
void case_rma_read(Bootstrap& boot, const TestOptions& options)
{
	run_rma(boot, options, RmaOp::read);
}

} // namespace fabtests
