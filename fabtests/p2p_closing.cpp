// A peer that sends and then closes its endpoint (an MPI rank reaching
// MPI_Finalize before its messages were received): what it delivered stays
// receivable, and nothing waits for it forever.
#include "p2p_cases.hpp"

#include <atomic>
#include <cstdlib>
#include <thread>

namespace fabtests {

namespace {

constexpr int kReceiver = 0;
constexpr int kClosedSignal = 0;
constexpr int kStartedSignal = 1;
constexpr uint64_t kTaggedTag = 0xC105ED0100; // + rank
constexpr uint64_t kLargeTag = 0xC105ED0200;  // + rank
constexpr size_t kTaggedBytes = 1000;
constexpr size_t kUntaggedBytes = 3000;
constexpr size_t kLargeBytes = size_t{1} << 20; // past any eager limit
constexpr std::chrono::seconds kFailureBound{10};

uint64_t seed_of(int rank, uint64_t what)
{
	return make_seed(0xC105ED, static_cast<uint64_t>(rank), what);
}

// Connects to the receiver, sends an eager-sized tagged and untagged
// message, waits for them to complete, leaves a rendezvous-sized send
// pending and closes.
void send_and_close(Bootstrap& boot, const TestOptions& options)
{
	{
		EndpointConfig config{options.provider};
		config.caps |= FI_DIRECTED_RECV;
		Endpoint ep(config);
		const fi_addr_t receiver = ep.exchange_addresses(boot)[kReceiver];
		ControlChannel control(ep);
		uint8_t hello = 1;
		control.send(receiver, &hello, 1);
		control.recv(&hello, 1);
		boot.barrier(); // connected: from here on the receiver drives no progress

		RegisteredBuffer buffer(ep, kTaggedBytes + kUntaggedBytes + kLargeBytes);
		auto tagged = buffer.bytes(0, kTaggedBytes);
		auto untagged = buffer.bytes(kTaggedBytes, kUntaggedBytes);
		auto large = buffer.bytes(kTaggedBytes + kUntaggedBytes, kLargeBytes);
		fill_pattern(tagged, seed_of(boot.rank(), kTaggedTag));
		fill_pattern(untagged, seed_of(boot.rank(), 0));
		fill_pattern(large, seed_of(boot.rank(), kLargeTag));
		OpContext tagged_ctx, untagged_ctx, large_ctx;
		const uint64_t me = static_cast<uint64_t>(boot.rank());
		post_send(ep,
			  {Api::tagged,
			   tagged.data(),
			   kTaggedBytes,
			   buffer.desc(),
			   receiver,
			   kTaggedTag + me,
			   0,
			   {}},
			  tagged_ctx);
		post_send(ep,
			  {Api::msg,
			   untagged.data(),
			   kUntaggedBytes,
			   buffer.desc(),
			   receiver,
			   0,
			   0,
			   {}},
			  untagged_ctx);
		if (!known_defect(options.provider, "close-with-pending-send"))
			post_send(ep,
				  {Api::tagged,
				   large.data(),
				   kLargeBytes,
				   buffer.desc(),
				   receiver,
				   kLargeTag + me,
				   0,
				   {}},
				  large_ctx);
		ep.wait_ok(tagged_ctx, "tagged send");
		ep.wait_ok(untagged_ctx, "untagged send");
		// The endpoint closes here, the rendezvous-sized send still pending.
	}
	boot.signal_add(kClosedSignal, 1);
}

} // namespace

void case_peer_closed(Bootstrap& boot, const TestOptions& options)
{
	const int senders = boot.size() - 1;
	if (boot.rank() != kReceiver) {
		send_and_close(boot, options);
		return;
	}
	EndpointConfig config{options.provider};
	config.caps |= FI_DIRECTED_RECV;
	Endpoint ep(config);
	const auto peers = ep.exchange_addresses(boot);
	ControlChannel control(ep);
	uint8_t hello = 1;
	for (int r = 1; r <= senders; ++r)
		control.recv(&hello, 1);
	for (int r = 1; r <= senders; ++r)
		control.send(peers[static_cast<size_t>(r)], &hello, 1);
	boot.barrier();
	// Senders connect, send and close while the receiver drives no progress:
	// their messages and the end of their connections then wait together.
	boot.signal_wait_at_least(kClosedSignal, static_cast<uint64_t>(senders), [] {
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	});
	const auto settle_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
	while (std::chrono::steady_clock::now() < settle_until)
		ep.progress();

	RegisteredBuffer buffer(ep, kLargeBytes + kGuardBytes);
	for (int r = 1; r <= senders; ++r) {
		const uint64_t rank = static_cast<uint64_t>(r);
		OpContext ctx;
		auto slot = buffer.bytes(0, kTaggedBytes + kGuardBytes);
		fill_guard(slot.subspan(kTaggedBytes));
		post_recv(ep,
			  {Api::tagged,
			   slot.data(),
			   kTaggedBytes,
			   buffer.desc(),
			   FI_ADDR_UNSPEC,
			   kTaggedTag + rank,
			   0,
			   {}},
			  ctx);
		ep.wait_done(ctx, strfmt("tagged message of closed rank %d", r));
		expect_recv(ctx,
			    {Api::tagged, kTaggedBytes, kTaggedTag + rank, std::nullopt,
			     seed_of(r, kTaggedTag)},
			    slot, kGuardBytes, strfmt("tagged message of closed rank %d", r));
	}
	for (int k = 1; k <= senders; ++k) {
		OpContext ctx;
		auto slot = buffer.bytes(0, kUntaggedBytes + kGuardBytes);
		fill_guard(slot.subspan(kUntaggedBytes));
		post_recv(ep,
			  {Api::msg,
			   slot.data(),
			   kUntaggedBytes,
			   buffer.desc(),
			   FI_ADDR_UNSPEC,
			   0,
			   0,
			   {}},
			  ctx);
		ep.wait_done(ctx, strfmt("untagged message %d", k));
		expect(ctx.error == 0, "untagged message %d of closed ranks: %s", k,
		       describe_error(ctx).c_str());
		bool from_a_sender = false;
		for (int r = 1; r <= senders; ++r)
			from_a_sender |= !find_pattern_mismatch(slot.subspan(0, kUntaggedBytes),
								seed_of(r, 0))
						  .has_value();
		expect(from_a_sender && ctx.entry.len == kUntaggedBytes,
		       "untagged message %d: %zu bytes, payload of no sender", k, ctx.entry.len);
		expect_guard(slot.subspan(kUntaggedBytes), strfmt("untagged message %d", k));
	}
	// The rendezvous-sized sends were pending when their senders closed:
	// their receives end in bounded time, whatever the outcome.
	const char* defect = known_defect(options.provider, "close-with-pending-send");
	size_t large_failed = 0;
	for (int r = 1; r <= senders && !defect; ++r) {
		OpContext ctx;
		post_recv(ep,
			  {Api::tagged,
			   buffer.data(),
			   kLargeBytes,
			   buffer.desc(),
			   FI_ADDR_UNSPEC,
			   kLargeTag + static_cast<uint64_t>(r),
			   0,
			   {}},
			  ctx);
		ep.wait_done(ctx, strfmt("rendezvous-sized message of closed rank %d", r),
			     kFailureBound);
		if (ctx.error == 0)
			expect_pattern(buffer.bytes(0, kLargeBytes), seed_of(r, kLargeTag),
				       strfmt("rendezvous-sized message of closed rank %d", r));
		large_failed += ctx.error != 0;
	}
	// A receive directed at a closed rank that nothing delivered fails.
	const fi_addr_t closed = peers[1];
	OpContext directed;
	post_recv(ep,
		  {Api::tagged,
		   buffer.data(),
		   kTaggedBytes,
		   buffer.desc(),
		   closed,
		   kTaggedTag + 1,
		   0,
		   {}},
		  directed);
	std::string directed_note;
	try {
		ep.wait_done(directed, "receive directed at closed rank 1", kFailureBound);
		expect(directed.error != 0,
		       "a receive directed at closed rank 1 completed without an error");
		directed_note = strfmt("a receive directed at a closed rank failed (%s)",
				       directed.err_text.c_str());
	} catch (const CheckFailure& failure) {
		const char* directed_defect =
			known_defect(options.provider, "closed-peer-directed-recv");
		if (!directed_defect)
			throw;
		directed_note = strfmt("KNOWN DEFECT of %s reproduced (%s): %s",
				       options.provider.c_str(), directed_defect, failure.what());
		fi_cancel(&ep.ep()->fid, &directed);
		ep.wait_done(directed, "cancel of the receive directed at closed rank 1");
	}
	const std::string large_note = defect ? strfmt("no rendezvous-sized send was left pending "
						       "(KNOWN DEFECT of %s: %s)",
						       options.provider.c_str(), defect)
					      : strfmt("%zu of %d pending rendezvous-sized ones "
						       "failed (the others arrived intact)",
						       large_failed, senders);
	boot.note(strfmt("%d ranks sent and closed before any receive: their %d eager messages "
			 "arrived intact, %s; %s",
			 senders, 2 * senders, large_note.c_str(), directed_note.c_str()));
}

// A rank injects to a peer it has never talked to, while that peer is busy
// elsewhere for a second (no progress: it cannot accept the connection
// yet), and closes as soon as the calls return. Injects report no
// completion, so the provider may only take them once they can reach the
// core; the receiver gets them all.
void case_inject_then_close(Bootstrap& boot, const TestOptions& options)
{
	constexpr int kInjects = 8;
	constexpr size_t kBytes = 64;
	constexpr uint64_t kTag = 0x1C10'5E00;
	EndpointConfig config{options.provider};
	Endpoint ep(config);
	const auto peers = ep.exchange_addresses(boot);
	RegisteredBuffer buffer(ep, kInjects * kBytes);
	if (boot.rank() == 1) {
		boot.signal_add(kStartedSignal, 1);
		for (int i = 0; i < kInjects; ++i) {
			auto slot = buffer.bytes(static_cast<size_t>(i) * kBytes, kBytes);
			fill_pattern(slot, make_seed(0x1C, static_cast<uint64_t>(i)));
			FT_POST(ep, fi_tinject(ep.ep(), slot.data(), kBytes, peers[kReceiver],
					       kTag + static_cast<uint64_t>(i)));
		}
		boot.signal_add(kClosedSignal, 1);
		return; // closes the endpoint at once
	}
	boot.signal_wait_at_least(kStartedSignal, 1, [] {
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	});
	std::this_thread::sleep_for(std::chrono::seconds(1));
	std::vector<OpContext> ctx(kInjects);
	for (int i = 0; i < kInjects; ++i)
		post_recv(ep,
			  {Api::tagged,
			   buffer.data() + static_cast<size_t>(i) * kBytes,
			   kBytes,
			   buffer.desc(),
			   FI_ADDR_UNSPEC,
			   kTag + static_cast<uint64_t>(i),
			   0,
			   {}},
			  ctx[static_cast<size_t>(i)]);
	for (int i = 0; i < kInjects; ++i) {
		const std::string what =
			strfmt("injected message %d of a rank that closed right after", i);
		ep.wait_ok(ctx[static_cast<size_t>(i)], what, kFailureBound);
		expect_pattern(buffer.bytes(static_cast<size_t>(i) * kBytes, kBytes),
			       make_seed(0x1C, static_cast<uint64_t>(i)), what);
	}
	boot.note(strfmt("%d messages injected to an unconnected peer right before closing all "
			 "arrived intact",
			 kInjects));
}

// fi_close of an EQ that an endpoint is still bound to must fail with
// -FI_EBUSY (fi_eq(3)): the endpoint would report into freed memory.
void case_close_bound_eq(Bootstrap& boot, const TestOptions& options)
{
	EndpointConfig config{options.provider};
	config.bind_eq = true;
	Endpoint ep(config);
	const int rc = fi_close(&ep.eq()->fid);
	expect(rc == -FI_EBUSY, "fi_close of a bound EQ returned %d (%s), not -FI_EBUSY", rc,
	       fi_strerror(-rc));
	boot.note("fi_close of an EQ bound to an open endpoint: -FI_EBUSY; the endpoint then "
		  "closes before it");
}

// One thread waits in fi_eq_sread, which drives the progress of the
// endpoint bound to the EQ, while another closes that endpoint: the close
// must wait until the reader has left the endpoint (AddressSanitizer sees a
// read of freed memory otherwise), and the reader goes on waiting on the EQ
// alone. The endpoint has a peer connection and a receive pending, so its
// progress has work to do when it closes.
void case_eq_read_while_closing(Bootstrap& boot, const TestOptions& options)
{
	const int rounds = options.quick ? 10 : 40;
	const int peer = 1 - boot.rank();
	// rcoll's fi_eq_sread then drives the endpoint for its whole timeout
	// instead of sleeping between rounds: a close meets a reader inside the
	// endpoint's progress far more often (read once, when rcoll loads).
	setenv("FI_RCOLL_SPIN_US", "1000000", 1);
	for (int round = 0; round < rounds; ++round) {
		EndpointConfig config{options.provider};
		config.bind_eq = true;
		config.eq_wait_obj = FI_WAIT_UNSPEC;
		Endpoint ep(config);
		const auto addresses = ep.exchange_addresses(boot);
		const fi_addr_t to = addresses[static_cast<size_t>(peer)];
		std::vector<uint8_t> out(64, static_cast<uint8_t>(round)), in(64), never(64);
		OpContext sent, received, pending;
		auto tagged = [&](std::vector<uint8_t>& buf, uint64_t tag) {
			return Transfer{Api::tagged, buf.data(), buf.size(), nullptr,
					to,          tag,        0,          {}};
		};
		post_recv(ep, tagged(in, 1), received);
		post_recv(ep, tagged(never, 2), pending);
		post_send(ep, tagged(out, 1), sent);
		ep.wait_ok(sent, "tagged send");
		ep.wait_ok(received, "tagged receive");
		boot.barrier();

		std::atomic<bool> stop{false};
		std::atomic<long> reads{0};
		ssize_t odd = 0; // a result other than -FI_EAGAIN: no event was due
		std::thread reader([&] {
			while (!stop.load()) {
				uint32_t event = 0;
				fi_eq_entry entry{};
				const ssize_t rc =
					fi_eq_sread(ep.eq(), &event, &entry, sizeof entry, 1, 0);
				if (rc != -FI_EAGAIN)
					odd = rc;
				reads.fetch_add(1);
			}
		});
		while (reads.load() < 2)
			std::this_thread::yield();
		// At varying points of the reader's round.
		std::this_thread::sleep_for(std::chrono::microseconds(97 * (round % 7)));
		const int rc = ep.close_endpoint();
		const long before = reads.load();
		while (reads.load() < before + 2) // it reads on, from the EQ alone
			std::this_thread::yield();
		stop = true;
		reader.join();
		expect(rc == 0, "round %d: fi_close of the endpoint: %s", round, fi_strerror(-rc));
		expect(odd == 0, "round %d: fi_eq_sread returned %zd (%s) with no event due", round,
		       odd, fi_strerror(static_cast<int>(-odd)));
		boot.barrier();
	}
	if (boot.rank() == 0)
		boot.note(
			strfmt("%d endpoints closed while another thread waited in fi_eq_sread on "
			       "their EQ: every close returned 0, every read -FI_EAGAIN",
			       rounds));
}

} // namespace fabtests
