// Bounce-buffer pools: chunked growth and registration counts, the hard
// bound of the transmit pool, and the posted/consumed accounting that drives
// the shared receive queue refill.
#include <criterion/criterion.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "proto/pool.hpp"

using namespace rcoll::proto;

namespace {

// Records every registration; can be told to fail.
class FakeRegistrar final : public Registrar {
public:
	int register_region(void* addr, std::size_t length, RegisteredRegion& out) noexcept override
	{
		++attempts;
		if (fail_next != 0) {
			const int rc = fail_next;
			fail_next = 0;
			return rc;
		}
		++registrations;
		auto* p = static_cast<std::byte*>(addr);
		out.handle = p;
		out.desc = &descs[registrations % 64]; // a distinct, recognisable value
		live[p] = {length, out.desc};
		return 0;
	}

	void deregister_region(const RegisteredRegion& region) noexcept override
	{
		++deregistrations;
		if (live.erase(static_cast<std::byte*>(region.handle)) != 1)
			++unknown_deregistrations;
	}

	// The registered region containing [p, p + len), if any.
	const std::pair<std::byte* const, std::pair<std::size_t, void*>>*
	region_of(const std::byte* p, std::size_t len) const
	{
		for (const auto& entry : live)
			if (p >= entry.first && p + len <= entry.first + entry.second.first)
				return &entry;
		return nullptr;
	}

	int fail_next = 0;
	int attempts = 0;
	int registrations = 0;
	int deregistrations = 0;
	int unknown_deregistrations = 0;
	std::map<std::byte*, std::pair<std::size_t, void*>> live;
	int descs[64] = {};
};

// Checks one buffer against the registrar: inside a registered region, with
// that region's desc, aligned, and writable over its whole size.
void assert_usable(const FakeRegistrar& reg, const BounceBuffer& b, std::size_t size)
{
	cr_assert_eq(b.size(), size);
	cr_assert_eq(reinterpret_cast<std::uintptr_t>(b.data()) % BufferPool::kBufferAlignment, 0u);
	const auto* region = reg.region_of(b.data(), b.size());
	cr_assert_not_null(region, "buffer outside every registered region");
	cr_assert_eq(b.desc(), region->second.second, "desc of another region");
	std::memset(b.data(), 0xa5, b.size());
}

} // namespace

Test(pool, grows_by_chunks_up_to_the_bound)
{
	FakeRegistrar reg;
	{
		BufferPool pool(reg,
				{.buffer_size = 1000, .buffers_per_chunk = 4, .max_buffers = 10});
		cr_assert_eq(pool.capacity(), 0u, "nothing allocated up front");
		cr_assert_eq(reg.registrations, 0);

		std::vector<BounceBuffer*> taken;
		const int chunks_after[] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3};
		for (int i = 0; i < 10; ++i) {
			BounceBuffer* b = pool.acquire();
			cr_assert_not_null(b);
			cr_assert_eq(b->state(), BounceBuffer::State::Held);
			assert_usable(reg, *b, 1000);
			cr_assert_eq(reg.registrations, chunks_after[i],
				     "one registration per chunk");
			taken.push_back(b);
		}
		cr_assert_eq(pool.capacity(), 10u, "the last chunk is cut to the bound");
		cr_assert_eq(pool.chunk_count(), 3u);
		cr_assert_null(pool.acquire());
		cr_assert_eq(pool.last_error(), -ENOSPC);

		std::set<std::size_t> indices;
		std::set<std::byte*> starts;
		for (BounceBuffer* b : taken) {
			indices.insert(b->index());
			starts.insert(b->data());
		}
		cr_assert_eq(indices.size(), 10u);
		cr_assert_eq(*indices.rbegin(), 9u, "indices are dense");
		cr_assert_eq(starts.size(), 10u);
		for (auto it = starts.begin(); std::next(it) != starts.end(); ++it)
			if (reg.region_of(*it, 1) == reg.region_of(*std::next(it), 1))
				cr_assert_geq(*std::next(it) - *it, 1000, "buffers overlap");

		cr_assert_eq(pool.release(*taken[3]), 0);
		cr_assert_eq(pool.free_count(), 1u);
		cr_assert_eq(pool.acquire(), taken[3]);
		cr_assert_eq(reg.registrations, 3, "reuse needs no registration");
	}
	cr_assert_eq(reg.deregistrations, 3, "every chunk deregistered with the pool");
	cr_assert(reg.live.empty());
	cr_assert_eq(reg.unknown_deregistrations, 0);
}

Test(pool, misuse_is_refused_without_change)
{
	FakeRegistrar reg;
	BufferPool pool(reg, {.buffer_size = 64, .buffers_per_chunk = 2, .max_buffers = 2});
	BufferPool other(reg, {.buffer_size = 64, .buffers_per_chunk = 2, .max_buffers = 2});
	BounceBuffer* b = pool.acquire();
	BounceBuffer* foreign = other.acquire();
	cr_assert_eq(pool.release(*b), 0);
	cr_assert_eq(pool.release(*b), -EINVAL, "double release");
	cr_assert_eq(pool.release(*foreign), -EINVAL, "buffer of another pool");
	cr_assert_eq(pool.free_count(), 2u);
	cr_assert_eq(foreign->state(), BounceBuffer::State::Held);

	BufferPool broken(reg, {.buffer_size = 0, .buffers_per_chunk = 2, .max_buffers = 2});
	cr_assert(!broken.config_valid());
	cr_assert_eq(broken.grow(), -EINVAL);
	cr_assert_null(broken.acquire());
	BufferPool overflowing(
		reg, {.buffer_size = SIZE_MAX / 2, .buffers_per_chunk = 4, .max_buffers = 4});
	cr_assert_eq(overflowing.grow(), -EINVAL);
}

Test(pool, registration_failure_leaves_the_pool_consistent)
{
	FakeRegistrar reg;
	BufferPool pool(reg, {.buffer_size = 256, .buffers_per_chunk = 4, .max_buffers = 8});
	reg.fail_next = -EFAULT;
	cr_assert_null(pool.acquire());
	cr_assert_eq(pool.last_error(), -EFAULT);
	cr_assert_eq(pool.capacity(), 0u);
	cr_assert_eq(reg.attempts, 1);
	cr_assert_not_null(pool.acquire(), "works again once registration does");
	cr_assert_eq(pool.capacity(), 4u);
	cr_assert_eq(pool.last_error(), 0);
}

Test(pool, transmit_pool_bound_means_eagain)
{
	FakeRegistrar reg;
	TransmitPool tx(reg, {.buffer_size = 8192, .buffers_per_chunk = 8, .max_buffers = 8});
	std::vector<BounceBuffer*> out;
	while (BounceBuffer* b = tx.acquire())
		out.push_back(b);
	cr_assert_eq(out.size(), 8u);
	cr_assert_eq(tx.last_error(), -ENOSPC, "the caller maps this to -FI_EAGAIN");
	cr_assert_eq(reg.registrations, 1);
	cr_assert_eq(tx.release(*out.back()), 0);
	cr_assert_eq(tx.acquire(), out.back());
	cr_assert_null(tx.acquire());
}

Test(pool, receive_pool_refills_below_the_low_watermark)
{
	FakeRegistrar reg;
	ReceivePool rx(reg, {.buffer_size = 4096,
			     .buffers_per_chunk = 8,
			     .target_posted = 16,
			     .low_watermark = 4,
			     .max_buffers = 32});
	cr_assert_eq(rx.init(), 0);
	cr_assert_eq(rx.capacity(), 16u, "init covers the target");
	cr_assert_eq(reg.registrations, 2);
	cr_assert_eq(rx.refill_count(), 16u, "first fill");

	std::vector<BounceBuffer*> posted;
	for (std::size_t n = rx.refill_count(); n > 0; --n) {
		BounceBuffer* b = rx.acquire_for_post();
		cr_assert_not_null(b);
		cr_assert_eq(b->state(), BounceBuffer::State::Posted);
		assert_usable(reg, *b, 4096);
		posted.push_back(b);
	}
	cr_assert_eq(rx.posted(), 16u);
	cr_assert_eq(rx.refill_count(), 0u);

	// Messages arrive; the caller keeps them (e.g. unexpected messages).
	std::vector<BounceBuffer*> held;
	for (int i = 0; i < 12; ++i) {
		BounceBuffer* b = posted.back();
		posted.pop_back();
		cr_assert_eq(rx.consumed(*b), 0);
		held.push_back(b);
		cr_assert_eq(rx.refill_count(), 0u, "no refill while at or above the watermark");
	}
	cr_assert_eq(rx.posted(), 4u);
	BounceBuffer* b = posted.back();
	posted.pop_back();
	cr_assert_eq(rx.consumed(*b), 0);
	held.push_back(b);
	cr_assert_eq(rx.posted(), 3u);
	cr_assert_eq(rx.held(), 13u);
	cr_assert_eq(rx.refill_count(), 13u, "back to the target in one batch");

	// Everything free is posted or held: refilling grows by chunks.
	for (std::size_t n = rx.refill_count(); n > 0; --n)
		cr_assert_not_null(rx.acquire_for_post());
	cr_assert_eq(rx.posted(), 16u);
	cr_assert_eq(rx.capacity(), 32u);
	cr_assert_eq(reg.registrations, 4);
	cr_assert_eq(rx.total_consumed(), 13u);

	for (BounceBuffer* h : held)
		cr_assert_eq(rx.release(*h), 0);
	cr_assert_eq(rx.held(), 0u);
	cr_assert_eq(rx.capacity(), 32u, "memory stays for the next burst");
}

Test(pool, receive_pool_stops_at_max_and_resumes_after_release)
{
	FakeRegistrar reg;
	ReceivePool rx(reg, {.buffer_size = 128,
			     .buffers_per_chunk = 4,
			     .target_posted = 4,
			     .low_watermark = 2,
			     .max_buffers = 8});
	cr_assert_eq(rx.init(), 0);
	std::vector<BounceBuffer*> held;
	for (int round = 0; round < 2; ++round) {
		for (std::size_t n = rx.refill_count(); n > 0; --n) {
			BounceBuffer* b = rx.acquire_for_post();
			cr_assert_not_null(b);
			cr_assert_eq(rx.consumed(*b), 0); // consumed as soon as posted
			held.push_back(b);
		}
	}
	cr_assert_eq(rx.held(), 8u);
	cr_assert_eq(rx.capacity(), 8u);
	cr_assert_gt(rx.refill_count(), 0u);
	cr_assert_null(rx.acquire_for_post(), "bounded: everything is held");
	cr_assert_eq(rx.last_error(), -ENOSPC);
	cr_assert_eq(rx.release(*held.back()), 0);
	cr_assert_not_null(rx.acquire_for_post());
	cr_assert_eq(rx.posted(), 1u);
}

Test(pool, receive_pool_state_misuse_is_refused)
{
	FakeRegistrar reg;
	ReceivePool rx(reg, {.buffer_size = 128,
			     .buffers_per_chunk = 4,
			     .target_posted = 4,
			     .low_watermark = 1,
			     .max_buffers = 4});
	cr_assert_eq(rx.init(), 0);
	BounceBuffer* b = rx.acquire_for_post();
	cr_assert_eq(rx.release(*b), -EINVAL, "a posted buffer is not the caller's");
	cr_assert_eq(rx.post_failed(*b), 0);
	cr_assert_eq(rx.posted(), 0u);
	cr_assert_eq(b->state(), BounceBuffer::State::Free);
	cr_assert_eq(rx.consumed(*b), -EINVAL, "a free buffer cannot complete");
	cr_assert_eq(rx.post_failed(*b), -EINVAL);
	b = rx.acquire_for_post();
	cr_assert_eq(rx.consumed(*b), 0);
	cr_assert_eq(rx.consumed(*b), -EINVAL, "completed twice");
	cr_assert_eq(rx.post_failed(*b), -EINVAL);
	cr_assert_eq(rx.held(), 1u);
	cr_assert_eq(rx.posted(), 0u);
	cr_assert_eq(rx.total_consumed(), 1u);
}

Test(pool, receive_pool_config_is_checked)
{
	FakeRegistrar reg;
	const ReceivePoolConfig bad[] = {
		{.buffer_size = 128,
		 .buffers_per_chunk = 4,
		 .target_posted = 4,
		 .low_watermark = 0,
		 .max_buffers = 8},
		{.buffer_size = 128,
		 .buffers_per_chunk = 4,
		 .target_posted = 4,
		 .low_watermark = 5,
		 .max_buffers = 8},
		{.buffer_size = 128,
		 .buffers_per_chunk = 4,
		 .target_posted = 9,
		 .low_watermark = 2,
		 .max_buffers = 8},
		{.buffer_size = 0,
		 .buffers_per_chunk = 4,
		 .target_posted = 4,
		 .low_watermark = 2,
		 .max_buffers = 8},
	};
	for (const auto& config : bad) {
		ReceivePool rx(reg, config);
		cr_assert_eq(rx.init(), -EINVAL);
	}
	cr_assert_eq(reg.registrations, 0);
	ReceivePool rx(reg, {.buffer_size = 128,
			     .buffers_per_chunk = 4,
			     .target_posted = 4,
			     .low_watermark = 2,
			     .max_buffers = 8});
	reg.fail_next = -ENOMEM;
	cr_assert_eq(rx.init(), -ENOMEM, "registration errors are passed on");
}

// The point of Sur et al. 2005: with one shared pool, memory follows the traffic, not
// the peer count. Many peers sending in turn, each message handled at once,
// never grow the pool past the target.
Test(pool, receive_memory_does_not_grow_with_peers)
{
	FakeRegistrar reg;
	ReceivePool rx(reg, {.buffer_size = 8192,
			     .buffers_per_chunk = 64,
			     .target_posted = 256,
			     .low_watermark = 64,
			     .max_buffers = 4096});
	cr_assert_eq(rx.init(), 0);
	std::vector<BounceBuffer*> srq; // FIFO, like the core consuming posted buffers
	std::size_t next = 0;
	auto refill = [&] {
		for (std::size_t n = rx.refill_count(); n > 0; --n)
			srq.push_back(rx.acquire_for_post());
	};
	refill();
	const int peers = 10000;
	for (int message = 0; message < 5 * peers; ++message) {
		BounceBuffer* b = srq[next++];
		cr_assert_eq(rx.consumed(*b), 0);
		b->data()[0] = static_cast<std::byte>(message % peers); // the peer's payload
		cr_assert_eq(rx.release(*b), 0);
		if (message % 16 == 0) // progress runs now and then
			refill();
	}
	cr_assert_eq(rx.capacity(), 256u);
	cr_assert_eq(reg.registrations, 4);
	cr_assert_geq(rx.posted(), 64u, "never ran below the watermark between refills");
	cr_assert_eq(rx.total_consumed(), 50000u);
}

Test(pool, sur2005_low_watermark)
{
	// eq. (5): 100 Gbit/s, 64-byte messages, 10 us between refills:
	// 100e3 / 512 messages per us * 10 us = 1953.125 -> 1954.
	cr_assert_eq(srq_low_watermark(100.0, 64, 10.0), 1954u);
	cr_assert_eq(srq_low_watermark(8.0, 1000, 1.0), 1u);
	cr_assert_eq(srq_low_watermark(0.0, 64, 10.0), 1u);
	cr_assert_eq(srq_low_watermark(100.0, 0, 10.0), 1u);
	cr_assert_eq(srq_low_watermark(100.0, 64, -1.0), 1u);
}
