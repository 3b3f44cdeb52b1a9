// Rendezvous state machines. A small simulated fabric executes the actions:
// control messages go through encode_message/validate_message, RDMA reads
// and writes are memcpy checked against the exposed address and key, and
// events are delivered in order (data before a FIN that follows it).
#include <criterion/criterion.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <vector>

#include "proto/rendezvous.hpp"

using namespace rcoll::proto;
using Path = RendezvousReceiver::Path;

namespace {

constexpr std::uint64_t kSendKey = 0x5e5e5e5e00000001;
constexpr std::uint64_t kRecvKey = 0x7e7e7e7e00000002;
constexpr std::uint32_t kOpId = 0x0123456;
constexpr std::uint64_t kCookie = 0xc00c1e;
constexpr std::size_t kGuard = 64;
constexpr auto kGuardByte = std::byte{0xee};
constexpr Limits kLimits{
	.eager_limit = 1024, .connection_count = 1, .max_message_size = 1ull << 30};

std::uint64_t addr_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

struct Transfer {
	std::size_t send_len = 0;
	std::size_t recv_len = 0;
	Path path = Path::Put;
	CompletionMode mode = CompletionMode::Fin;
	std::uint64_t seed = 1;
	// Payload byte i; default: a pattern with no zero bytes.
	std::function<std::byte(std::size_t)> payload = [](std::size_t i) {
		return static_cast<std::byte>(i % 251 + 1);
	};
};

class Fabric {
public:
	explicit Fabric(const Transfer& t)
		: t_(t), send_(t.send_len), recv_(t.recv_len + kGuard, std::byte{0xcc}),
		  random_(t.seed),
		  sender_(kCookie, send_, RemoteBuffer{addr_of(send_.data()), kSendKey}),
		  receiver_(kOpId, std::span<std::byte>(recv_.data(), t.recv_len),
			    RemoteBuffer{addr_of(recv_.data()), kRecvKey})
	{
		for (std::size_t i = 0; i < t.send_len; ++i)
			send_[i] = t.payload(i);
		std::fill(recv_.begin() + static_cast<std::ptrdiff_t>(t.recv_len), recv_.end(),
			  kGuardByte);
	}

	// Runs the exchange to quiescence, polling like a progress loop.
	void run()
	{
		on_sender(sender_.start());
		while (!events_.empty()) {
			auto event = std::move(events_.front());
			events_.pop_front();
			event();
			on_receiver(receiver_.poll());
		}
	}

	bool data_intact() const
	{
		const std::size_t n = std::min(t_.send_len, t_.recv_len);
		for (std::size_t i = 0; i < n; ++i)
			if (recv_[i] != send_[i])
				return false;
		for (std::size_t i = t_.recv_len; i < recv_.size(); ++i)
			if (recv_[i] != kGuardByte)
				return false;
		return true;
	}

	std::optional<action::Complete> sent, received;
	std::vector<Opcode> control; // every control message, in sending order
	int violations = 0;
	std::optional<std::uint8_t> slot_seen_in_cts;

	std::vector<std::byte>& send_buffer() { return send_; }
	std::vector<std::byte>& recv_buffer() { return recv_; }
	RendezvousReceiver& receiver() { return receiver_; }

private:
	// Encodes, validates and decodes a control message like the glue does.
	template <WireBody Body>
	Body transmit(const Body& body, std::uint64_t size = 0)
	{
		MsgHeader h;
		h.opcode = Body::kOpcode;
		h.size = size;
		std::array<std::byte, kMaxControlMessageSize> wire{};
		const std::size_t len = encode_message(wire.data(), wire.size(), h, body);
		cr_assert_gt(len, 0u);
		ParsedMessage parsed;
		const WireStatus s = validate_message(wire.data(), len, kLimits, parsed);
		cr_assert_eq(s, WireStatus::Ok, "control message rejected: %s", describe(s));
		control.push_back(Body::kOpcode);
		return std::get<Body>(parsed.body);
	}

	void complete(std::optional<action::Complete>& slot, const action::Complete& c)
	{
		cr_assert(!slot.has_value(), "an operation completed twice");
		slot = c;
	}

	void on_sender(const Actions& actions)
	{
		for (const Action& a : actions) {
			if (const auto* rts = std::get_if<action::SendRts>(&a)) {
				const RtsBody body = transmit(rts->body, rts->message_length);
				events_.push_back([this, body, len = rts->message_length] {
					on_receiver(receiver_.on_rts(body, len, t_.path, t_.mode,
								     random_));
				});
			} else if (const auto* w = std::get_if<action::Write>(&a)) {
				cr_assert_eq(w->target.key, kRecvKey, "write with a wrong key");
				cr_assert_geq(w->target.addr, addr_of(recv_.data()));
				cr_assert_leq(w->target.addr + w->length,
					      addr_of(recv_.data()) + t_.recv_len,
					      "write beyond the receive buffer");
				cr_assert_leq(w->length, send_.size());
				const action::Write write = *w;
				events_.push_back([this, write] {
					std::memcpy(reinterpret_cast<void*>(write.target.addr),
						    send_.data(), write.length);
				});
				// The FIN goes behind the data on the connection.
				if (write.fin) {
					const FinBody body = transmit(*write.fin);
					events_.push_back([this, body] {
						on_receiver(receiver_.on_fin(body));
					});
				}
				events_.push_back(
					[this] { on_sender(sender_.on_write_complete()); });
			} else if (const auto* c = std::get_if<action::Complete>(&a)) {
				complete(sent, *c);
			} else if (std::holds_alternative<action::Violation>(a)) {
				++violations;
			} else {
				cr_assert_fail("the sender emitted a receiver action");
			}
		}
	}

	void on_receiver(const Actions& actions)
	{
		for (const Action& a : actions) {
			if (const auto* cts = std::get_if<action::SendCts>(&a)) {
				const CtsBody body = transmit(cts->body);
				if (body.mode == CompletionMode::PollLastByte)
					slot_seen_in_cts = body.slot_value;
				events_.push_back(
					[this, body] { on_sender(sender_.on_cts(body)); });
			} else if (const auto* r = std::get_if<action::Read>(&a)) {
				cr_assert_eq(r->source.key, kSendKey, "read with a wrong key");
				cr_assert_eq(r->source.addr, addr_of(send_.data()));
				cr_assert_leq(r->length, send_.size());
				cr_assert_leq(r->length, t_.recv_len);
				const action::Read read = *r;
				events_.push_back([this, read] {
					std::memcpy(recv_.data(),
						    reinterpret_cast<const void*>(read.source.addr),
						    read.length);
					on_receiver(receiver_.on_read_complete());
				});
			} else if (const auto* done = std::get_if<action::SendReadDone>(&a)) {
				const ReadDoneBody body = transmit(done->body);
				events_.push_back(
					[this, body] { on_sender(sender_.on_read_done(body)); });
			} else if (const auto* c = std::get_if<action::Complete>(&a)) {
				complete(received, *c);
			} else if (std::holds_alternative<action::Violation>(a)) {
				++violations;
			} else {
				cr_assert_fail("the receiver emitted a sender action");
			}
		}
	}

	Transfer t_;
	std::vector<std::byte> send_;
	std::vector<std::byte> recv_;
	SlotRandom random_;
	RendezvousSender sender_;
	RendezvousReceiver receiver_;
	std::deque<std::function<void()>> events_;
};

void assert_completed(const Fabric& f, Outcome receiver_outcome, std::uint64_t transferred,
		      std::uint64_t message_length)
{
	cr_assert(f.sent.has_value(), "the sender never completed");
	cr_assert(f.received.has_value(), "the receiver never completed");
	cr_assert_eq(f.sent->outcome, Outcome::Success);
	cr_assert_eq(f.sent->message_length, message_length);
	cr_assert_eq(f.received->outcome, receiver_outcome, "receiver: %s",
		     describe(f.received->outcome));
	cr_assert_eq(f.received->transferred, transferred);
	cr_assert_eq(f.received->message_length, message_length);
	cr_assert_eq(f.violations, 0);
	cr_assert(f.data_intact(), "data differs or the guard was overwritten");
}

// The next slot value a receiver seeded with `seed` will draw.
std::uint8_t predicted_slot(std::uint64_t seed)
{
	SlotRandom copy(seed);
	return copy.next_byte();
}

std::size_t count(const std::vector<Opcode>& v, Opcode op)
{
	return static_cast<std::size_t>(std::count(v.begin(), v.end(), op));
}

} // namespace

Test(rendezvous, put_fin)
{
	Fabric f({.send_len = 100000, .recv_len = 100000});
	f.run();
	assert_completed(f, Outcome::Success, 100000, 100000);
	cr_assert(f.control == (std::vector<Opcode>{Opcode::Rts, Opcode::Cts, Opcode::Fin}),
		  "PUT in FIN mode needs exactly RTS, CTS and FIN");
}

Test(rendezvous, put_poll_without_collision)
{
	const std::uint64_t seed = 99;
	Fabric f({.send_len = 5000,
		  .recv_len = 5000,
		  .mode = CompletionMode::PollLastByte,
		  .seed = seed,
		  .payload = [slot = predicted_slot(seed)](std::size_t) {
			  return static_cast<std::byte>(slot ^ 0x01);
		  }});
	f.run();
	assert_completed(f, Outcome::Success, 5000, 5000);
	cr_assert(f.slot_seen_in_cts.has_value());
	cr_assert_eq(*f.slot_seen_in_cts, predicted_slot(seed));
	cr_assert_eq(count(f.control, Opcode::Fin), 0u, "no FIN without a collision");
}

Test(rendezvous, put_poll_slot_is_written_at_the_last_transferred_byte)
{
	const std::uint64_t seed = 5;
	Transfer t{.send_len = 300,
		   .recv_len = 1000,
		   .mode = CompletionMode::PollLastByte,
		   .seed = seed};
	Fabric f(t);
	SlotRandom random(seed);
	const Actions a = f.receiver().on_rts(RtsBody{kCookie, 1, kSendKey}, t.send_len, Path::Put,
					      t.mode, random);
	const auto* cts = a.find<action::SendCts>();
	cr_assert_not_null(cts);
	cr_assert_eq(cts->body.transfer_length, 300u);
	cr_assert_eq(std::to_integer<std::uint8_t>(f.recv_buffer()[299]), cts->body.slot_value,
		     "the slot belongs at the last byte the sender writes");
	cr_assert_eq(f.recv_buffer()[999], std::byte{0xcc}, "not at the end of the longer buffer");
	cr_assert(f.receiver().poll().empty(), "nothing written yet");
	f.recv_buffer()[299] = static_cast<std::byte>(cts->body.slot_value ^ 0xff);
	const Actions done = f.receiver().poll();
	cr_assert_not_null(done.find<action::Complete>());
	cr_assert_eq(done.find<action::Complete>()->transferred, 300u);
}

Test(rendezvous, put_poll_collision_sends_fin)
{
	const std::uint64_t seed = 1234;
	const std::uint8_t slot = predicted_slot(seed);
	// Force the collision: the sender's last byte equals the slot drawn.
	Fabric f({.send_len = 4096,
		  .recv_len = 4096,
		  .mode = CompletionMode::PollLastByte,
		  .seed = seed,
		  .payload = [slot](std::size_t i) {
			  return i == 4095 ? static_cast<std::byte>(slot)
					   : static_cast<std::byte>(i);
		  }});
	f.run();
	assert_completed(f, Outcome::Success, 4096, 4096);
	cr_assert(f.control == (std::vector<Opcode>{Opcode::Rts, Opcode::Cts, Opcode::Fin}));
}

Test(rendezvous, truncation_reports_both_lengths_on_every_path)
{
	const std::pair<Path, CompletionMode> variants[] = {
		{Path::Put, CompletionMode::Fin},
		{Path::Put, CompletionMode::PollLastByte},
		{Path::Get, CompletionMode::Fin},
	};
	for (const auto& [path, mode] : variants) {
		Fabric f({.send_len = 3000, .recv_len = 1000, .path = path, .mode = mode});
		f.run();
		assert_completed(f, Outcome::Truncated, 1000, 3000);
	}
}

Test(rendezvous, shorter_message_than_receive_on_every_path)
{
	const std::pair<Path, CompletionMode> variants[] = {
		{Path::Put, CompletionMode::Fin},
		{Path::Put, CompletionMode::PollLastByte},
		{Path::Get, CompletionMode::Fin},
	};
	for (const auto& [path, mode] : variants) {
		Fabric f({.send_len = 3000, .recv_len = 5000, .path = path, .mode = mode});
		f.run();
		assert_completed(f, Outcome::Success, 3000, 3000);
		cr_assert_eq(f.recv_buffer()[3000], std::byte{0xcc},
			     "bytes past the message untouched");
	}
}

Test(rendezvous, get_reads_then_reports_read_done)
{
	Fabric f({.send_len = 70000, .recv_len = 70000, .path = Path::Get});
	f.run();
	assert_completed(f, Outcome::Success, 70000, 70000);
	cr_assert(f.control == (std::vector<Opcode>{Opcode::Rts, Opcode::ReadDone}));
	cr_assert(RendezvousReceiver::path_for(kAnySource) == Path::Get);
	cr_assert(RendezvousReceiver::path_for(42) == Path::Put);
}

Test(rendezvous, zero_length_receive_moves_nothing)
{
	for (Path path : {Path::Put, Path::Get}) {
		Fabric f({.send_len = 100, .recv_len = 0, .path = path});
		f.run();
		assert_completed(f, Outcome::Truncated, 0, 100);
		cr_assert(f.control == (std::vector<Opcode>{Opcode::Rts, Opcode::ReadDone}));
	}
}

Test(rendezvous, empty_messages_never_use_rendezvous)
{
	RendezvousSender sender(1, {}, RemoteBuffer{});
	const Actions a = sender.start();
	cr_assert_not_null(a.find<action::Violation>());
	cr_assert_eq(a.find<action::Complete>()->outcome, Outcome::ProtocolError);
	cr_assert_null(a.find<action::SendRts>());

	std::byte buf[16];
	RendezvousReceiver receiver(1, buf, RemoteBuffer{});
	SlotRandom random(1);
	const Actions r = receiver.on_rts(RtsBody{}, 0, Path::Put, CompletionMode::Fin, random);
	cr_assert_not_null(r.find<action::Violation>());
	cr_assert_eq(r.find<action::Complete>()->outcome, Outcome::ProtocolError);
	cr_assert(receiver.done());
}

// A fresh sender driven to `state`.
RendezvousSender sender_in(RendezvousSender::State state, std::span<const std::byte> payload,
			   CompletionMode mode = CompletionMode::Fin)
{
	RendezvousSender s(kCookie, payload, RemoteBuffer{1, kSendKey});
	if (state >= RendezvousSender::State::AwaitingReply)
		s.start();
	if (state >= RendezvousSender::State::Writing)
		s.on_cts(CtsBody{kCookie, kOpId, 0, mode, 2, kRecvKey, payload.size()});
	if (state == RendezvousSender::State::Done)
		s.on_write_complete();
	cr_assert(s.state() == state);
	return s;
}

Test(rendezvous, sender_peer_failure_in_every_state)
{
	std::vector<std::byte> payload(64, std::byte{1});
	using S = RendezvousSender::State;
	for (S state : {S::Idle, S::AwaitingReply}) {
		RendezvousSender s = sender_in(state, payload);
		const Actions a = s.on_peer_failed();
		cr_assert_eq(a.size(), 1u);
		cr_assert_eq(a.find<action::Complete>()->outcome, Outcome::PeerFailed);
		cr_assert(s.done());
		cr_assert(s.on_peer_failed().empty(), "completes once");
	}
	{
		// The write still reads the user buffer: wait for it.
		RendezvousSender s = sender_in(S::Writing, payload);
		cr_assert(s.on_peer_failed().empty());
		cr_assert(!s.done());
		const Actions a = s.on_write_complete();
		cr_assert_eq(a.find<action::Complete>()->outcome, Outcome::PeerFailed);
	}
	{
		RendezvousSender s = sender_in(S::Writing, payload);
		s.on_peer_failed();
		cr_assert_eq(s.on_write_failed().find<action::Complete>()->outcome,
			     Outcome::PeerFailed);
	}
	{
		RendezvousSender s = sender_in(S::Writing, payload);
		cr_assert_eq(s.on_write_failed().find<action::Complete>()->outcome,
			     Outcome::TransferFailed);
	}
	RendezvousSender s = sender_in(S::Done, payload);
	cr_assert(s.on_peer_failed().empty(), "nothing left to fail");
}

Test(rendezvous, sender_unexpected_events)
{
	std::vector<std::byte> payload(64, std::byte{1});
	using S = RendezvousSender::State;
	const CtsBody good{kCookie, kOpId, 0, CompletionMode::Fin, 2, kRecvKey, 64};
	const std::function<Actions(RendezvousSender&)> events[] = {
		[](RendezvousSender& s) { return s.start(); },
		[good](RendezvousSender& s) { return s.on_cts(good); },
		[](RendezvousSender& s) { return s.on_read_done(ReadDoneBody{kCookie}); },
		[](RendezvousSender& s) { return s.on_write_complete(); },
		[](RendezvousSender& s) { return s.on_write_failed(); },
	};
	// valid[state][event]
	const bool valid[4][5] = {
		{true, false, false, false, false},  // Idle
		{false, true, true, false, false},   // AwaitingReply
		{false, false, false, true, true},   // Writing
		{false, false, false, false, false}, // Done
	};
	for (int state = 0; state < 4; ++state)
		for (int event = 0; event < 5; ++event) {
			if (valid[state][event])
				continue;
			RendezvousSender s = sender_in(static_cast<S>(state), payload);
			const Actions a = events[event](s);
			cr_assert_not_null(a.find<action::Violation>(), "state %d event %d", state,
					   event);
			const auto* c = a.find<action::Complete>();
			if (state == static_cast<int>(S::Done)) {
				cr_assert_null(c, "a done operation completes only once");
			} else if (state == static_cast<int>(S::Writing)) {
				cr_assert_null(c, "completion waits for the write");
				cr_assert_eq(
					s.on_write_complete().find<action::Complete>()->outcome,
					Outcome::ProtocolError);
			} else {
				cr_assert_eq(c->outcome, Outcome::ProtocolError);
				cr_assert(s.done());
			}
		}
}

Test(rendezvous, sender_rejects_bad_replies)
{
	std::vector<std::byte> payload(64, std::byte{1});
	using S = RendezvousSender::State;
	const CtsBody bad[] = {
		{kCookie + 1, kOpId, 0, CompletionMode::Fin, 2, kRecvKey, 64}, // another send
		{kCookie, kOpId, 0, CompletionMode::Fin, 2, kRecvKey,
		 65},                                                     // longer than the message
		{kCookie, kOpId, 0, CompletionMode::Fin, 2, kRecvKey, 0}, // nothing to write
		{kCookie, kOpId, 0, static_cast<CompletionMode>(7), 2, kRecvKey, 64},
	};
	for (const CtsBody& cts : bad) {
		RendezvousSender s = sender_in(S::AwaitingReply, payload);
		const Actions a = s.on_cts(cts);
		cr_assert_not_null(a.find<action::Violation>());
		cr_assert_null(a.find<action::Write>(), "no write on a bad CTS");
		cr_assert_eq(a.find<action::Complete>()->outcome, Outcome::ProtocolError);
	}
	RendezvousSender s = sender_in(S::AwaitingReply, payload);
	cr_assert_not_null(s.on_read_done(ReadDoneBody{kCookie + 1}).find<action::Violation>());
}

// A fresh receiver driven to `state` over `buffer`.
RendezvousReceiver receiver_in(RendezvousReceiver::State state, std::span<std::byte> buffer,
			       CompletionMode mode = CompletionMode::Fin)
{
	using S = RendezvousReceiver::State;
	RendezvousReceiver r(kOpId, buffer, RemoteBuffer{2, kRecvKey});
	SlotRandom random(3);
	if (state == S::AwaitingPut || state == S::Done)
		r.on_rts(RtsBody{kCookie, 1, kSendKey}, buffer.size(), Path::Put, mode, random);
	if (state == S::Reading)
		r.on_rts(RtsBody{kCookie, 1, kSendKey}, buffer.size(), Path::Get, mode, random);
	if (state == S::Done)
		r.on_fin(FinBody{kOpId,
				 mode == CompletionMode::Fin ? FinReason::Written
							     : FinReason::Collision,
				 buffer.size()});
	cr_assert(r.state() == state);
	return r;
}

Test(rendezvous, receiver_peer_failure_in_every_state)
{
	std::vector<std::byte> buffer(64);
	using S = RendezvousReceiver::State;
	for (S state : {S::Idle, S::AwaitingPut}) {
		RendezvousReceiver r = receiver_in(state, buffer);
		const Actions a = r.on_peer_failed();
		cr_assert_eq(a.find<action::Complete>()->outcome, Outcome::PeerFailed);
		cr_assert_eq(a.find<action::Complete>()->transferred, 0u);
		cr_assert(r.on_peer_failed().empty());
	}
	{
		RendezvousReceiver r = receiver_in(S::Reading, buffer);
		cr_assert(r.on_peer_failed().empty(), "the read still writes the buffer");
		const Actions a = r.on_read_complete();
		cr_assert_eq(a.find<action::Complete>()->outcome, Outcome::PeerFailed);
		cr_assert_null(a.find<action::SendReadDone>(), "no READ_DONE to a failed peer");
	}
	{
		RendezvousReceiver r = receiver_in(S::Reading, buffer);
		cr_assert_eq(r.on_read_failed().find<action::Complete>()->outcome,
			     Outcome::TransferFailed);
	}
	RendezvousReceiver r = receiver_in(S::Done, buffer);
	cr_assert(r.on_peer_failed().empty());
}

Test(rendezvous, receiver_unexpected_events)
{
	std::vector<std::byte> buffer(64);
	using S = RendezvousReceiver::State;
	SlotRandom random(1);
	const FinBody written{kOpId, FinReason::Written, 64};
	const FinBody collision{kOpId, FinReason::Collision, 64};
	const std::function<Actions(RendezvousReceiver&)> events[] = {
		[&random](RendezvousReceiver& r) {
			return r.on_rts(RtsBody{kCookie, 1, kSendKey}, 64, Path::Put,
					CompletionMode::Fin, random);
		},
		[written](RendezvousReceiver& r) { return r.on_fin(written); },
		[collision](RendezvousReceiver& r) { return r.on_fin(collision); },
		[](RendezvousReceiver& r) { return r.on_read_complete(); },
		[](RendezvousReceiver& r) { return r.on_read_failed(); },
	};
	// valid[state][event], FIN mode (a collision FIN is never valid there).
	const bool valid[4][5] = {
		{true, false, false, false, false},  // Idle
		{false, true, false, false, false},  // AwaitingPut
		{false, false, false, true, true},   // Reading
		{false, false, false, false, false}, // Done
	};
	for (int state = 0; state < 4; ++state)
		for (int event = 0; event < 5; ++event) {
			if (valid[state][event])
				continue;
			RendezvousReceiver r = receiver_in(static_cast<S>(state), buffer);
			const Actions a = events[event](r);
			cr_assert_not_null(a.find<action::Violation>(), "state %d event %d", state,
					   event);
			const auto* c = a.find<action::Complete>();
			if (state == static_cast<int>(S::Done)) {
				cr_assert_null(c);
			} else if (state == static_cast<int>(S::Reading)) {
				cr_assert_null(c, "completion waits for the read");
				const Actions end = r.on_read_complete();
				cr_assert_eq(end.find<action::Complete>()->outcome,
					     Outcome::ProtocolError);
				cr_assert_null(end.find<action::SendReadDone>());
			} else {
				cr_assert_eq(c->outcome, Outcome::ProtocolError);
			}
		}
	// POLL mode: a FIN saying Written is a violation, and so is any wrong FIN.
	RendezvousReceiver poll = receiver_in(S::AwaitingPut, buffer, CompletionMode::PollLastByte);
	cr_assert_not_null(poll.on_fin(written).find<action::Violation>());
}

Test(rendezvous, receiver_rejects_wrong_fins)
{
	std::vector<std::byte> buffer(64);
	using S = RendezvousReceiver::State;
	const FinBody bad[] = {
		{kOpId + 1, FinReason::Collision, 64}, // another receive
		{kOpId, FinReason::Collision, 65},     // another length than the RTS
		{kOpId, static_cast<FinReason>(9), 64},
	};
	for (const FinBody& fin : bad) {
		RendezvousReceiver r =
			receiver_in(S::AwaitingPut, buffer, CompletionMode::PollLastByte);
		const Actions a = r.on_fin(fin);
		cr_assert_not_null(a.find<action::Violation>());
		cr_assert_eq(a.find<action::Complete>()->outcome, Outcome::ProtocolError);
	}
	// A FIN claiming a collision while the slot byte changed contradicts the data.
	RendezvousReceiver r = receiver_in(S::AwaitingPut, buffer, CompletionMode::PollLastByte);
	buffer[63] = ~buffer[63];
	const Actions a = r.on_fin(FinBody{kOpId, FinReason::Collision, 64});
	cr_assert_not_null(a.find<action::Violation>());
	// The good FIN completes.
	std::vector<std::byte> other(64);
	RendezvousReceiver ok = receiver_in(S::AwaitingPut, other, CompletionMode::PollLastByte);
	cr_assert_eq(ok.on_fin(FinBody{kOpId, FinReason::Collision, 64})
			     .find<action::Complete>()
			     ->outcome,
		     Outcome::Success);
}

// the argument of Takagi et al. 2013 for a random slot: with a constant slot, data full
// of that constant (zeros are common) collides every time; with a random
// slot about 1 in 256.
Test(rendezvous, random_slot_rarely_collides_on_zero_data)
{
	int fins = 0;
	const int runs = 2048;
	for (int i = 0; i < runs; ++i) {
		Fabric f({.send_len = 256,
			  .recv_len = 256,
			  .mode = CompletionMode::PollLastByte,
			  .seed = static_cast<std::uint64_t>(i) * 7919 + 1,
			  .payload = [](std::size_t) { return std::byte{0}; }});
		f.run();
		assert_completed(f, Outcome::Success, 256, 256);
		fins += static_cast<int>(count(f.control, Opcode::Fin));
	}
	// Expected 8; a constant slot of 0 would give 2048.
	cr_assert_lt(fins, 40, "%d collisions in %d runs", fins, runs);
	cr_assert_gt(fins, 0, "collisions must occur and complete through the FIN");
}

Test(rendezvous, randomized_transfers)
{
	std::mt19937_64 rng(42);
	for (int i = 0; i < 1500; ++i) {
		Transfer t;
		t.send_len = 1 + rng() % 3000;
		t.recv_len = rng() % 3000;
		t.path = rng() % 2 ? Path::Put : Path::Get;
		t.mode = rng() % 2 ? CompletionMode::Fin : CompletionMode::PollLastByte;
		t.seed = rng();
		const std::uint64_t salt = rng();
		t.payload = [salt](std::size_t b) {
			return static_cast<std::byte>((b * 0x9e3779b97f4a7c15ull + salt) >> 56);
		};
		Fabric f(t);
		f.run();
		const std::uint64_t moved = std::min(t.send_len, t.recv_len);
		assert_completed(f, moved < t.send_len ? Outcome::Truncated : Outcome::Success,
				 moved, t.send_len);
	}
}
