#include "proto/rendezvous.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>

namespace rcoll::proto {

const char* describe(Outcome outcome) noexcept
{
	switch (outcome) {
	case Outcome::Success: return "success";
	case Outcome::Truncated: return "truncated";
	case Outcome::PeerFailed: return "peer failed";
	case Outcome::TransferFailed: return "RDMA transfer failed";
	case Outcome::ProtocolError: return "protocol error";
	}
	return "unknown outcome";
}

void Actions::push(const Action& action) noexcept
{
	// Every transition emits at most kCapacity actions (see the class comment).
	assert(count_ < kCapacity);
	if (count_ < kCapacity)
		items_[count_++] = action;
}

std::uint8_t SlotRandom::next_byte() noexcept
{
	std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return static_cast<std::uint8_t>(z >> 56); // the best-mixed bits
}

// ---------------------------------------------------------------------------
// Sender

RendezvousSender::RendezvousSender(std::uint64_t cookie, std::span<const std::byte> payload,
				   RemoteBuffer exposed) noexcept
	: cookie_(cookie), payload_(payload), exposed_(exposed)
{}

Actions RendezvousSender::finish(Outcome outcome) noexcept
{
	Actions out;
	state_ = State::Done;
	out.push(action::Complete{outcome, payload_.size(), payload_.size()});
	return out;
}

Actions RendezvousSender::unexpected(const char* what) noexcept
{
	Actions out;
	out.push(action::Violation{what});
	if (state_ == State::Writing) {
		if (!failure_)
			failure_ = Outcome::ProtocolError;
	} else if (state_ != State::Done) {
		state_ = State::Done;
		out.push(
			action::Complete{Outcome::ProtocolError, payload_.size(), payload_.size()});
	}
	return out;
}

Actions RendezvousSender::start() noexcept
{
	if (state_ != State::Idle)
		return unexpected("rendezvous send started twice");
	if (payload_.empty())
		return unexpected("empty messages are sent eagerly, not by rendezvous");
	Actions out;
	state_ = State::AwaitingReply;
	out.push(action::SendRts{RtsBody{cookie_, exposed_.addr, exposed_.key}, payload_.size()});
	return out;
}

Actions RendezvousSender::on_cts(const CtsBody& cts) noexcept
{
	if (state_ != State::AwaitingReply)
		return unexpected("CTS while not awaiting a reply");
	if (cts.sender_cookie != cookie_)
		return unexpected("CTS for another send");
	if (cts.transfer_length == 0 || cts.transfer_length > payload_.size())
		return unexpected("CTS transfer length outside the message");

	action::Write write{cts.transfer_length, RemoteBuffer{cts.addr, cts.key}, std::nullopt};
	switch (cts.mode) {
	case CompletionMode::Fin:
		write.fin = FinBody{cts.receiver_op_id, FinReason::Written, payload_.size()};
		break;
	case CompletionMode::PollLastByte:
		// Takagi et al. 2013, PS2: the receiver cannot see a write that leaves its
		// slot byte unchanged, so say so explicitly.
		if (std::to_integer<std::uint8_t>(payload_[cts.transfer_length - 1]) ==
		    cts.slot_value)
			write.fin =
				FinBody{cts.receiver_op_id, FinReason::Collision, payload_.size()};
		break;
	default: return unexpected("CTS with an unknown completion mode");
	}

	Actions out;
	state_ = State::Writing;
	out.push(write);
	return out;
}

Actions RendezvousSender::on_read_done(const ReadDoneBody& done) noexcept
{
	if (state_ != State::AwaitingReply)
		return unexpected("READ_DONE while not awaiting a reply");
	if (done.sender_cookie != cookie_)
		return unexpected("READ_DONE for another send");
	return finish(Outcome::Success);
}

Actions RendezvousSender::on_write_complete() noexcept
{
	if (state_ != State::Writing)
		return unexpected("write completion without a write");
	return finish(failure_.value_or(Outcome::Success));
}

Actions RendezvousSender::on_write_failed() noexcept
{
	if (state_ != State::Writing)
		return unexpected("write failure without a write");
	return finish(failure_.value_or(Outcome::TransferFailed));
}

Actions RendezvousSender::on_peer_failed() noexcept
{
	switch (state_) {
	case State::Idle:
	case State::AwaitingReply: return finish(Outcome::PeerFailed);
	case State::Writing:
		// The NIC still reads the payload: complete when the write returns.
		if (!failure_)
			failure_ = Outcome::PeerFailed;
		return {};
	case State::Done: break;
	}
	return {};
}

// ---------------------------------------------------------------------------
// Receiver

RendezvousReceiver::RendezvousReceiver(std::uint32_t op_id, std::span<std::byte> buffer,
				       RemoteBuffer exposed) noexcept
	: op_id_(op_id), buffer_(buffer), exposed_(exposed)
{}

action::Complete RendezvousReceiver::complete(Outcome outcome) noexcept
{
	state_ = State::Done;
	const bool landed = outcome == Outcome::Success || outcome == Outcome::Truncated;
	return action::Complete{outcome, landed ? transfer_length_ : 0, message_length_};
}

Outcome RendezvousReceiver::transfer_outcome() const noexcept
{
	return transfer_length_ < message_length_ ? Outcome::Truncated : Outcome::Success;
}

Actions RendezvousReceiver::finish(Outcome outcome) noexcept
{
	Actions out;
	out.push(complete(outcome));
	return out;
}

Actions RendezvousReceiver::unexpected(const char* what) noexcept
{
	Actions out;
	out.push(action::Violation{what});
	if (state_ == State::Reading) {
		if (!failure_)
			failure_ = Outcome::ProtocolError;
	} else if (state_ != State::Done) {
		out.push(complete(Outcome::ProtocolError));
	}
	return out;
}

std::uint8_t RendezvousReceiver::load_slot() const noexcept
{
	// The NIC writes this byte behind the compiler's back.
	auto& slot = reinterpret_cast<unsigned char&>(buffer_[transfer_length_ - 1]);
	return std::atomic_ref<unsigned char>(slot).load(std::memory_order_acquire);
}

Actions RendezvousReceiver::on_rts(const RtsBody& rts, std::uint64_t message_length, Path path,
				   CompletionMode mode, SlotRandom& random) noexcept
{
	if (state_ != State::Idle)
		return unexpected("RTS for a receive already in rendezvous");
	message_length_ = message_length;
	if (message_length == 0)
		return unexpected("RTS for an empty message");
	sender_cookie_ = rts.sender_cookie;
	transfer_length_ = std::min<std::uint64_t>(message_length, buffer_.size());

	if (transfer_length_ == 0) {
		// Nothing to move; release the sender's buffer right away.
		Actions out;
		out.push(action::SendReadDone{ReadDoneBody{sender_cookie_}});
		out.push(complete(transfer_outcome()));
		return out;
	}

	if (path == Path::Get) {
		Actions out;
		state_ = State::Reading;
		out.push(action::Read{transfer_length_, RemoteBuffer{rts.addr, rts.key}});
		return out;
	}

	mode_ = mode;
	CtsBody cts{sender_cookie_, op_id_, 0, mode, exposed_.addr, exposed_.key, transfer_length_};
	switch (mode) {
	case CompletionMode::Fin: break;
	case CompletionMode::PollLastByte: {
		// Takagi et al. 2013, PR1': a random slot value, at the last byte the
		// sender will actually write (not the end of a longer buffer).
		slot_value_ = random.next_byte();
		auto& slot = reinterpret_cast<unsigned char&>(buffer_[transfer_length_ - 1]);
		std::atomic_ref<unsigned char>(slot).store(slot_value_, std::memory_order_release);
		cts.slot_value = slot_value_;
		break;
	}
	default: return unexpected("unknown completion mode");
	}
	Actions out;
	state_ = State::AwaitingPut;
	out.push(action::SendCts{cts});
	return out;
}

Actions RendezvousReceiver::poll() noexcept
{
	if (state_ != State::AwaitingPut || mode_ != CompletionMode::PollLastByte)
		return {};
	if (load_slot() == slot_value_)
		return {};
	return finish(transfer_outcome());
}

Actions RendezvousReceiver::on_fin(const FinBody& fin) noexcept
{
	if (state_ != State::AwaitingPut)
		return unexpected("FIN while not awaiting a write");
	if (fin.receiver_op_id != op_id_)
		return unexpected("FIN for another receive");
	if (fin.sender_length != message_length_)
		return unexpected("FIN length differs from the RTS");
	if (mode_ == CompletionMode::Fin) {
		if (fin.reason != FinReason::Written)
			return unexpected("FIN with a reason its mode does not have");
		return finish(transfer_outcome());
	}
	if (fin.reason != FinReason::Collision)
		return unexpected("FIN with a reason its mode does not have");
	// A collision leaves the slot as it was; anything else means the FIN
	// does not describe the data that landed.
	if (load_slot() != slot_value_)
		return unexpected("FIN for a collision but the slot byte changed");
	return finish(transfer_outcome());
}

Actions RendezvousReceiver::on_read_complete() noexcept
{
	if (state_ != State::Reading)
		return unexpected("read completion without a read");
	if (failure_)
		return finish(*failure_);
	Actions out;
	out.push(action::SendReadDone{ReadDoneBody{sender_cookie_}});
	out.push(complete(transfer_outcome()));
	return out;
}

Actions RendezvousReceiver::on_read_failed() noexcept
{
	if (state_ != State::Reading)
		return unexpected("read failure without a read");
	return finish(failure_.value_or(Outcome::TransferFailed));
}

Actions RendezvousReceiver::on_peer_failed() noexcept
{
	switch (state_) {
	case State::Idle:
	case State::AwaitingPut: return finish(Outcome::PeerFailed);
	case State::Reading:
		// The NIC still writes into the buffer: complete when the read returns.
		if (!failure_)
			failure_ = Outcome::PeerFailed;
		return {};
	case State::Done: break;
	}
	return {};
}

} // namespace rcoll::proto
