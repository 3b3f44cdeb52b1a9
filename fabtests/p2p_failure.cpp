// A peer killed mid-transfer: the survivor must see errors, not hang, and
// keep talking to everyone else.
#include "p2p_cases.hpp"

#include <csignal>
#include <unistd.h>

namespace fabtests {

namespace {

constexpr int kSurvivor = 0;
constexpr int kVictim = 1;
constexpr int kThird = 2;
constexpr int kVictimReceivedSignal = 0;
constexpr int kSurvivorReadySignal = 1;
constexpr uint64_t kToVictimTag = 0xDEAD01;
constexpr uint64_t kFromVictimTag = 0xDEAD02;
constexpr uint64_t kThirdTag = 0x3D;

// After the victim dies, everything addressed to or expected from it must
// end (with an error or, for what got through, success) within this bound.
constexpr std::chrono::seconds kFailureBound{10};

} // namespace

// Survivor and victim stream large messages at each other. Once the victim
// has received one, it stops driving progress (so the rest are stuck
// mid-transfer) and the survivor SIGKILLs it. The survivor must then see
// error completions for its in-flight sends within kFailureBound, be able
// to cancel receives that can no longer match, and still exchange verified
// messages with the third rank.
void case_peer_killed(Bootstrap& boot, const TestOptions& options)
{
	Endpoint ep({options.provider});
	const auto peers = ep.exchange_addresses(boot);
	const size_t large = options.quick ? (4u << 20) : (16u << 20);
	constexpr size_t kInFlight = 6;
	const int me = boot.rank();

	// Connect every pair that will talk before anything is killed.
	ControlChannel control(ep);
	uint8_t hello = 1;
	if (me == kSurvivor) {
		control.send(peers[kVictim], &hello, 1);
		control.send(peers[kThird], &hello, 1);
		control.recv(&hello, 1);
		control.recv(&hello, 1);
	} else {
		control.recv(&hello, 1);
		control.send(peers[kSurvivor], &hello, 1);
	}
	boot.barrier();

	if (me == kVictim) {
		RegisteredBuffer inbox(ep, kInFlight * large);
		RegisteredBuffer outbox(ep, kInFlight * large);
		std::vector<OpContext> recvs(kInFlight), sends(kInFlight);
		for (size_t k = 0; k < kInFlight; ++k)
			post_recv(ep,
				  {Api::tagged,
				   inbox.data() + k * large,
				   large,
				   inbox.desc(),
				   FI_ADDR_UNSPEC,
				   kToVictimTag,
				   0,
				   {}},
				  recvs[k]);
		for (size_t k = 0; k < kInFlight; ++k) {
			fill_pattern(outbox.bytes(k * large, large), make_seed(0xDD, k));
			post_send(ep,
				  {Api::tagged,
				   outbox.data() + k * large,
				   large,
				   outbox.desc(),
				   peers[kSurvivor],
				   kFromVictimTag,
				   0,
				   {}},
				  sends[k]);
		}
		ep.wait_done(recvs[0], "victim's first receive");
		boot.signal_set(kVictimReceivedSignal, 1);
		// Stop driving progress: the remaining transfers stay in flight
		// until the survivor kills this process.
		for (;;)
			pause();
	}

	std::string survivor_defect;
	if (me == kThird) {
		boot.signal_wait_at_least(
			kSurvivorReadySignal, 1, [&] { ep.progress(); }, kFailureBound * 2);
	} else {
		RegisteredBuffer outbox(ep, kInFlight * large);
		RegisteredBuffer inbox(ep, kInFlight * large);
		std::vector<OpContext> sends(kInFlight), recvs(kInFlight);
		for (size_t k = 0; k < kInFlight; ++k)
			post_recv(ep,
				  {Api::tagged,
				   inbox.data() + k * large,
				   large,
				   inbox.desc(),
				   FI_ADDR_UNSPEC,
				   kFromVictimTag,
				   0,
				   {}},
				  recvs[k]);
		for (size_t k = 0; k < kInFlight; ++k) {
			fill_pattern(outbox.bytes(k * large, large), make_seed(0x5E, k));
			post_send(ep,
				  {Api::tagged,
				   outbox.data() + k * large,
				   large,
				   outbox.desc(),
				   peers[kVictim],
				   kToVictimTag,
				   0,
				   {}},
				  sends[k]);
		}
		boot.signal_wait_at_least(kVictimReceivedSignal, 1, [&] { ep.progress(); });
		boot.kill_rank(kVictim);
		const auto killed_at = Clock::now();

		auto count = [](const std::vector<OpContext>& ops, bool errors) {
			size_t n = 0;
			for (const auto& op : ops)
				n += op.done && ((op.error != 0) == errors);
			return n;
		};
		auto all_done = [](const std::vector<OpContext>& ops) {
			for (const auto& op : ops)
				if (!op.done)
					return false;
			return true;
		};
		std::string defect_note;
		try {
			ep.progress_until([&] { return all_done(sends); },
					  "sends to the killed peer to end", kFailureBound);
		} catch (const CheckFailure&) {
			const std::string state =
				strfmt("%lld s after the kill, %zu of %zu sends to the killed peer "
				       "have ended (%zu of them in "
				       "error); receives from it: %zu ended (%zu in error)",
				       static_cast<long long>(kFailureBound.count()),
				       count(sends, false) + count(sends, true), kInFlight,
				       count(sends, true), count(recvs, false) + count(recvs, true),
				       count(recvs, true));
			const char* defect = known_defect(options.provider, "killed-peer-sends");
			if (!defect)
				throw CheckFailure(state);
			defect_note = strfmt("KNOWN DEFECT of %s reproduced (%s): %s",
					     options.provider.c_str(), defect, state.c_str());
		}
		const auto sends_ended = std::chrono::duration_cast<std::chrono::milliseconds>(
			Clock::now() - killed_at);
		const size_t send_errors = count(sends, true);
		if (defect_note.empty()) {
			expect(send_errors > 0,
			       "all %zu sends of %s to the killed peer reported success", kInFlight,
			       format_size(large).c_str());
		}
		// Receives still waiting for the dead peer can never match: cancel.
		for (auto& r : recvs)
			if (!r.done) {
				const int rc = fi_cancel(&ep.ep()->fid, &r);
				expect(rc == 0 || rc == -FI_ENOENT,
				       "fi_cancel of a receive from the dead peer returned %d (%s)",
				       rc, fi_strerror(-rc));
			}
		ep.progress_until([&] { return all_done(recvs); },
				  "receives from the killed peer to end after fi_cancel",
				  kFailureBound);
		const size_t recv_errors = count(recvs, true);
		for (size_t k = 0; k < kInFlight; ++k)
			if (recvs[k].done && recvs[k].error == 0)
				expect_pattern(
					inbox.bytes(k * large, large), make_seed(0xDD, k),
					strfmt("message %zu that arrived before the kill", k));
		boot.signal_set(kSurvivorReadySignal, 1);
		survivor_defect = defect_note;
		boot.note(strfmt("victim SIGKILLed with %s transfers in flight: %zu of %zu sends "
				 "ended in error "
				 "within %lld ms, %zu receives in error/cancelled",
				 format_size(large).c_str(), send_errors, kInFlight,
				 static_cast<long long>(sends_ended.count()), recv_errors));
	}

	// Survivor and third rank: both directions, small and large, verified.
	const fi_addr_t other = peers[me == kSurvivor ? kThird : kSurvivor];
	const size_t sizes[] = {100, 1u << 20};
	RegisteredBuffer outbox(ep, sizes[1]);
	RegisteredBuffer inbox(ep, sizes[1] + kGuardBytes);
	for (size_t size : sizes) {
		OpContext send, recv;
		fill_guard(inbox.bytes(size, kGuardBytes));
		post_recv(ep,
			  {Api::tagged,
			   inbox.data(),
			   size,
			   inbox.desc(),
			   FI_ADDR_UNSPEC,
			   kThirdTag,
			   0,
			   {}},
			  recv);
		fill_pattern(outbox.bytes(0, size), make_seed(0x3D, me, size));
		post_send(
			ep,
			{Api::tagged, outbox.data(), size, outbox.desc(), other, kThirdTag, 0, {}},
			send);
		const std::string what =
			strfmt("%s exchange between survivor and third rank after the kill",
			       format_size(size).c_str());
		ep.wait_done(send, what, kFailureBound);
		expect_send(send, what);
		ep.wait_done(recv, what, kFailureBound);
		expect_recv(recv,
			    {Api::tagged, size, kThirdTag, std::nullopt,
			     make_seed(0x3D, me == kSurvivor ? kThird : kSurvivor, size)},
			    inbox.bytes(0, size + kGuardBytes), kGuardBytes, what);
	}
	boot.barrier();
	if (!survivor_defect.empty())
		throw NotApplicable(
			survivor_defect +
			"; afterwards survivor and third rank exchanged 100 B and 1 MiB "
			"both ways, verified");
	if (me == kThird)
		boot.note("then survivor and third rank exchanged 100 B and 1 MiB both ways, "
			  "verified");
}

} // namespace fabtests
