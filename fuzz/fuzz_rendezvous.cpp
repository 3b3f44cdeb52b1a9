// Fuzz target: the rendezvous state machines (proto/rendezvous) driven by
// events in any order, with bodies a peer chose. Whatever arrives, a
// machine never transfers more than its buffer holds, completes at most
// once, and asks for nothing after it completed.
#include "fuzz_check.hpp"
#include "proto/rendezvous.hpp"

#include <cstring>
#include <vector>

using namespace rcoll::proto;

namespace {

class Input {
public:
	Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
	bool empty() const { return at_ >= size_; }
	uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
	uint64_t u64()
	{
		uint64_t v = 0;
		for (int i = 0; i < 8; i++)
			v = v << 8 | byte();
		return v;
	}
	// Small values most of the time, so lengths meet the buffers.
	uint64_t length() { return byte() & 1 ? u64() : byte() * 37u; }

private:
	const uint8_t* data_;
	size_t size_;
	size_t at_ = 0;
};

struct Watch {
	size_t buffer = 0;
	bool completed = false;

	void check(const Actions& actions)
	{
		for (const Action& a : actions) {
			if (std::holds_alternative<action::Violation>(a))
				continue;
			FUZZ_CHECK(!completed); // nothing after the completion but violations
			if (auto* w = std::get_if<action::Write>(&a))
				FUZZ_CHECK(w->length <= buffer);
			if (auto* r = std::get_if<action::Read>(&a))
				FUZZ_CHECK(r->length <= buffer);
			if (auto* cts = std::get_if<action::SendCts>(&a))
				FUZZ_CHECK(cts->body.transfer_length <= buffer);
			if (auto* c = std::get_if<action::Complete>(&a)) {
				FUZZ_CHECK(c->transferred <= c->message_length ||
					   c->outcome != Outcome::Success);
				completed = true;
			}
		}
	}
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	Input in(data, size);
	std::vector<std::byte> payload(in.byte() * 97u), buffer(in.byte() * 89u);
	RendezvousSender sender(in.u64(), payload, RemoteBuffer{in.u64(), in.u64()});
	RendezvousReceiver receiver(uint32_t(in.u64()), buffer,
				    RemoteBuffer{in.u64(), in.u64()});
	SlotRandom random(in.u64());
	Watch send{payload.size()}, recv{buffer.size()};
	while (!in.empty()) {
		switch (in.byte() % 13) {
		case 0: send.check(sender.start()); break;
		case 1: {
			CtsBody cts;
			cts.sender_cookie = in.byte() & 1 ? sender.cookie() : in.u64();
			cts.receiver_op_id = uint32_t(in.u64());
			cts.slot_value = in.byte();
			cts.mode = in.byte() & 1 ? CompletionMode::PollLastByte : CompletionMode::Fin;
			cts.addr = in.u64();
			cts.key = in.u64();
			cts.transfer_length = in.length();
			send.check(sender.on_cts(cts));
			break;
		}
		case 2: {
			ReadDoneBody done{in.byte() & 1 ? sender.cookie() : in.u64()};
			send.check(sender.on_read_done(done));
			break;
		}
		case 3: send.check(sender.on_write_complete()); break;
		case 4: send.check(sender.on_write_failed()); break;
		case 5: send.check(sender.on_peer_failed()); break;
		case 6: {
			RtsBody rts{in.u64(), in.u64(), in.u64()};
			const uint64_t message_length = in.length();
			const auto path = in.byte() & 1 ? RendezvousReceiver::Path::Put
							: RendezvousReceiver::Path::Get;
			const auto mode =
				in.byte() & 1 ? CompletionMode::PollLastByte : CompletionMode::Fin;
			recv.check(receiver.on_rts(rts, message_length, path, mode, random));
			break;
		}
		case 7:
			// The FIN behind a write (FIN mode).
			recv.check(receiver.on_fin(
				FinBody{receiver.op_id(), FinReason::Written, in.length()}));
			break;
		case 8:
			// The peer's write landing: any byte anywhere in the buffer.
			if (!buffer.empty())
				buffer[in.u64() % buffer.size()] = std::byte{in.byte()};
			recv.check(receiver.poll());
			break;
		case 9: {
			FinBody fin;
			fin.receiver_op_id = in.byte() & 1 ? receiver.op_id() : uint32_t(in.u64());
			fin.reason = in.byte() & 1 ? FinReason::Collision : FinReason::Written;
			fin.sender_length = in.length();
			recv.check(receiver.on_fin(fin));
			break;
		}
		case 10: recv.check(receiver.on_read_complete()); break;
		case 11: recv.check(receiver.on_read_failed()); break;
		case 12: recv.check(receiver.on_peer_failed()); break;
		}
	}
	return 0;
}
