// RMA cases: fi_write, fi_writedata and fi_read between two ranks on
// registered buffers whose addresses and keys travel in messages.
#include "p2p_cases.hpp"

#include <algorithm>

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

void run_rma(Bootstrap& boot, const TestOptions& options, RmaOp op)
{
	Endpoint ep({options.provider});
	if (op == RmaOp::writedata && ep.info().domain_attr->cq_data_size == 0)
		throw NotApplicable(
			strfmt("provider %s reports cq_data_size 0", ep.provider_name().c_str()));
	const auto peers = ep.exchange_addresses(boot);
	const fi_addr_t peer = peers[static_cast<size_t>(1 - boot.rank())];
	const auto sizes = rma_sizes(options.quick);
	const size_t max_size = sizes.back();
	// Target offsets are deliberately unaligned and guarded on both sides.
	const size_t region_size = kGuardBytes + 8 + max_size + kGuardBytes;
	RegisteredBuffer target(ep, region_size, FI_REMOTE_READ | FI_REMOTE_WRITE);
	RegisteredBuffer local(ep, max_size + kGuardBytes, FI_READ | FI_WRITE);
	ControlChannel control(ep);

	// Keys and addresses travel as ordinary messages.
	const RemoteRegion mine{target.remote_address(0), target.key(), region_size};
	control.send(peer, &mine, sizeof mine, kRegionTag);
	RemoteRegion theirs;
	control.recv(&theirs, sizeof theirs, kRegionTag);
	expect(theirs.size == region_size, "peer announced a %llu-byte region",
	       static_cast<unsigned long long>(theirs.size));

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
