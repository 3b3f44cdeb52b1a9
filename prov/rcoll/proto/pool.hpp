// Registered bounce buffers.
//
// Memory comes in chunks: one allocation and ONE registration per chunk,
// cut into fixed-size buffers. Chunks are added on demand up to a hard
// maximum and live until the pool is destroyed.
//
// ReceivePool implements the shared receive queue accounting of Sur, Chai,
// Jin, Panda, "Shared Receive Queue based Scalable MPI Design for InfiniBand
// Clusters" (OSU-CISRC-10/05-TR66, 2005): every
// connection of an endpoint draws from one pool posted to one shared
// receive context, so receive memory is target_posted .. max_buffers
// buffers whatever the number of peers. The
// paper refills when the HCA's SRQ limit event fires at a low watermark;
// libfabric's verbs does not expose that event, so the pool counts posted
// minus consumed buffers itself and the progress path asks refill_count().
//
// TransmitPool bounds send-side bounce buffers: when it is exhausted the
// caller returns -FI_EAGAIN instead of queueing without limit (the tcp core
// does not enforce its own tx queue size).
//
// Error codes are negative errno values, which libfabric's FI_E* equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace rcoll::proto {

// What one registration returned: `handle` for deregistration (the glue's
// fid_mr), `desc` to pass with every data transfer (fi_mr_desc).
struct RegisteredRegion {
	void* handle = nullptr;
	void* desc = nullptr;
};

// Implemented by the glue over fi_mr_reg; by tests with a fake.
class Registrar {
public:
	// 0 and `out` filled, or a negative errno.
	virtual int register_region(void* addr, std::size_t length,
				    RegisteredRegion& out) noexcept = 0;
	virtual void deregister_region(const RegisteredRegion& region) noexcept = 0;

protected:
	~Registrar() = default;
};

class BufferPool;
class ReceivePool;

class BounceBuffer {
public:
	enum class State : std::uint8_t { Free, Posted, Held };

	std::byte* data() const noexcept { return data_; }
	std::size_t size() const noexcept { return size_; }
	void* desc() const noexcept { return desc_; }
	// Dense 0 .. capacity-1 within its pool: lets the caller keep per-buffer
	// records in a side array.
	std::size_t index() const noexcept { return index_; }
	State state() const noexcept { return state_; }

private:
	friend class BufferPool;
	friend class ReceivePool;
	std::byte* data_ = nullptr;
	std::size_t size_ = 0;
	void* desc_ = nullptr;
	std::size_t index_ = 0;
	const BufferPool* owner_ = nullptr;
	BounceBuffer* next_free_ = nullptr;
	State state_ = State::Free;
};

struct BufferPoolConfig {
	std::size_t buffer_size = 0;       // usable bytes per buffer
	std::size_t buffers_per_chunk = 0; // buffers per allocation + registration
	std::size_t max_buffers = 0;       // hard bound on capacity()
};

// Free buffers out of registered chunks. acquire() adds a chunk when none is
// free and the bound allows; the last chunk is cut short so capacity() never
// exceeds max_buffers. Destroy a pool only once the core holds none of its
// buffers (close the endpoint or shared receive context first): destruction
// deregisters and frees every chunk.
class BufferPool {
public:
	static constexpr std::size_t kBufferAlignment = 64; // each buffer starts on a cache line
	static constexpr std::size_t kChunkAlignment = 4096;

	BufferPool(Registrar& registrar, const BufferPoolConfig& config) noexcept;
	~BufferPool();
	BufferPool(const BufferPool&) = delete;
	BufferPool& operator=(const BufferPool&) = delete;

	// A zero size, a zero chunk or a zero bound is refused by grow().
	bool config_valid() const noexcept;

	// Adds one chunk: 0, -EINVAL (bad config), -ENOSPC (at max_buffers),
	// -ENOMEM, or the registrar's error.
	int grow() noexcept;

	// A free buffer, now Held; nullptr when the pool is at its bound and all
	// buffers are out, or growing failed (last_error() says why).
	BounceBuffer* acquire() noexcept;

	// Returns a Held buffer of this pool; -EINVAL (nothing changes) for a
	// buffer that is not Held or belongs to another pool.
	int release(BounceBuffer& buffer) noexcept;

	std::size_t buffer_size() const noexcept { return config_.buffer_size; }
	std::size_t max_buffers() const noexcept { return config_.max_buffers; }
	std::size_t capacity() const noexcept { return capacity_; }
	std::size_t free_count() const noexcept { return free_count_; }
	std::size_t chunk_count() const noexcept { return chunk_count_; }
	int last_error() const noexcept { return last_error_; }

private:
	friend class ReceivePool;
	class Chunk;

	bool owns(const BounceBuffer& buffer) const noexcept { return buffer.owner_ == this; }
	BounceBuffer* pop_free() noexcept;
	void push_free(BounceBuffer& buffer) noexcept;

	Registrar& registrar_;
	BufferPoolConfig config_;
	std::unique_ptr<Chunk> chunks_; // newest first
	BounceBuffer* free_ = nullptr;
	std::size_t capacity_ = 0;
	std::size_t free_count_ = 0;
	std::size_t chunk_count_ = 0;
	int last_error_ = 0;
};

// Send bounce buffers: the pool's bound is the endpoint's bound on
// outstanding buffered sends.
using TransmitPool = BufferPool;

struct ReceivePoolConfig {
	std::size_t buffer_size = 0;
	std::size_t buffers_per_chunk = 0;
	std::size_t target_posted = 0; // buffers kept posted in the shared receive context
	std::size_t low_watermark = 0; // refill once posted drops below this
	std::size_t max_buffers = 0;   // posted + held by the caller, at most
};

// The minimum low watermark of Sur et al. 2005, eq. (5): buffers the link can fill
// while the refill is not running. `link_gbit_per_s` is the link bandwidth,
// `min_message_bytes` the smallest message (header only), `refill_delay_us`
// the longest gap between two progress calls (the paper's t_wakeup).
// Rounded up; at least 1.
std::size_t srq_low_watermark(double link_gbit_per_s, std::size_t min_message_bytes,
			      double refill_delay_us) noexcept;

// Buffers move Free -> Posted (acquire_for_post) -> Held (consumed: a
// completion arrived for it) -> Free (release). A failed post goes back
// Posted -> Free.
class ReceivePool {
public:
	ReceivePool(Registrar& registrar, const ReceivePoolConfig& config) noexcept;

	// Checks 0 < low_watermark <= target_posted <= max_buffers and a usable
	// buffer size, then allocates chunks for target_posted buffers.
	// 0 or a negative errno (-EINVAL for the config).
	int init() noexcept;

	// How many buffers the progress path should post now: zero while at
	// least low_watermark are posted, else enough to reach target_posted
	// again. Refilling in batches keeps the post calls off the fast path.
	std::size_t refill_count() const noexcept;

	// A buffer to post, counted as posted (Free -> Posted); grows the pool
	// when nothing is free and max_buffers allows. nullptr when every buffer
	// is posted or held and the pool is at its bound: the caller releases
	// held buffers (e.g. copies unexpected payloads out) to make room.
	BounceBuffer* acquire_for_post() noexcept;

	// The core refused the post: Posted -> Free.
	int post_failed(BounceBuffer& buffer) noexcept;

	// A completion (message, flushed receive, or a verbs write-with-
	// immediate, which also consumes an SRQ entry) arrived for this posted
	// buffer: Posted -> Held.
	int consumed(BounceBuffer& buffer) noexcept;

	// The caller is done with a consumed buffer: Held -> Free.
	int release(BounceBuffer& buffer) noexcept;

	std::size_t posted() const noexcept { return posted_; }
	std::size_t held() const noexcept { return held_; }
	std::size_t capacity() const noexcept { return pool_.capacity(); }
	std::size_t chunk_count() const noexcept { return pool_.chunk_count(); }
	std::size_t total_consumed() const noexcept { return total_consumed_; }
	const ReceivePoolConfig& config() const noexcept { return config_; }
	int last_error() const noexcept { return pool_.last_error(); }

private:
	int move(BounceBuffer& buffer, BounceBuffer::State from, BounceBuffer::State to) noexcept;

	ReceivePoolConfig config_;
	BufferPool pool_;
	std::size_t posted_ = 0;
	std::size_t held_ = 0;
	std::size_t total_consumed_ = 0;
};

} // namespace rcoll::proto
