// Fuzz target: the node-local doorbell (transport/local), whose indices live
// in a file other processes can write. Pushes and pops interleaved with
// arbitrary rewrites of the head and of cell sequence numbers: every push
// ends (rung, full or corrupt), and nothing reads or writes outside the ring.
#include "fuzz_check.hpp"
#include "transport/local.hpp"

#include <cstdlib>
#include <memory>
#include <new>

using rcoll::local::Doorbell;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	static Doorbell* doorbell = new (std::align_val_t(64)) Doorbell;
	doorbell->init();
	uint64_t tail = 0;
	size_t at = 0;
	auto byte = [&] { return at < size ? data[at++] : uint8_t(0); };
	auto u64 = [&] {
		uint64_t v = 0;
		for (int i = 0; i < 8; i++)
			v = v << 8 | byte();
		return v;
	};
	while (at < size) {
		switch (byte() % 5) {
		case 0:
		case 1: (void)doorbell->push(uint32_t(u64())); break;
		case 2: {
			uint32_t value;
			(void)doorbell->pop(tail, value);
			break;
		}
		case 3: doorbell->head.store(u64(), std::memory_order_relaxed); break;
		case 4:
			doorbell->cells[u64() % Doorbell::kCells].seq.store(
				u64(), std::memory_order_relaxed);
			break;
		}
	}
	return 0;
}
