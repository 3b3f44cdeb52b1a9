// The endpoint's bounce buffers, one set per direction, each buffer with
// the record rcoll keeps while the core holds it (BufferRecord, found by
// the buffer's index, at a stable address).
#pragma once

#include "ops.hpp"
#include "proto/pool.hpp"

#include <cstddef>
#include <deque>
#include <memory>

namespace rcoll {

// Messages are built in these: a record is taken reset, handed to the core,
// and released when its completion (or its peer's failure) ends it.
class TransmitBuffers {
public:
	explicit TransmitBuffers(std::unique_ptr<proto::TransmitPool> pool) : pool_(std::move(pool))
	{}
	// A free buffer's record, reset; nullptr when the pool is at its limit.
	BufferRecord* take();
	void release(BufferRecord& r);
	// A take would succeed.
	bool available() const
	{
		return pool_->free_count() > 0 || pool_->capacity() < pool_->max_buffers();
	}
	// Takes that may still succeed (fi_tx_size_left).
	size_t room() const
	{
		return pool_->max_buffers() - pool_->capacity() + pool_->free_count();
	}
	bool all_free() const { return pool_->free_count() == pool_->capacity(); }
	size_t in_use() const { return pool_->capacity() - pool_->free_count(); }
	template <class F>
	void for_each(F&& f)
	{
		for (BufferRecord& r : records_)
			f(r);
	}

private:
	std::unique_ptr<proto::TransmitPool> pool_;
	std::deque<BufferRecord> records_;
};

// Kept posted to the one shared receive context (Sur et al. 2005): the pool
// counts posted minus consumed buffers, since verbs gives no SRQ limit event.
class ReceiveBuffers {
public:
	explicit ReceiveBuffers(std::unique_ptr<proto::ReceivePool> pool) : pool_(std::move(pool))
	{}
	int init() { return pool_->init(); }
	// How many to post now.
	size_t refill_count() const { return pool_->refill_count(); }
	// The record of the next buffer to post; nullptr when none is free.
	BufferRecord* next_to_post();
	void post_failed(BufferRecord& r) { pool_->post_failed(*r.buffer); }
	// The core gave it back (a message, a flush, or an immediate consumed it).
	void consumed(BufferRecord& r) { pool_->consumed(*r.buffer); }
	void release(BufferRecord& r) { pool_->release(*r.buffer); }

private:
	std::unique_ptr<proto::ReceivePool> pool_;
	std::deque<BufferRecord> records_;
};

} // namespace rcoll
