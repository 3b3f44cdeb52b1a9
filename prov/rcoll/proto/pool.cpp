#include "proto/pool.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <new>

namespace rcoll::proto {

namespace {

struct AlignedDelete {
	void operator()(std::byte* p) const noexcept
	{
		::operator delete (p, std::align_val_t{BufferPool::kChunkAlignment});
	}
};
using ChunkMemory = std::unique_ptr<std::byte, AlignedDelete>;

std::size_t buffer_stride(std::size_t buffer_size) noexcept
{
	const std::size_t a = BufferPool::kBufferAlignment;
	return (buffer_size + a - 1) / a * a;
}

} // namespace

// One allocation, one registration, `count` buffer descriptors. Destroying
// it deregisters before freeing, so no registration outlives its memory.
class BufferPool::Chunk {
public:
	Chunk(Registrar& registrar, ChunkMemory memory, std::unique_ptr<BounceBuffer[]> buffers,
	      const RegisteredRegion& region) noexcept
		: registrar_(registrar), memory_(std::move(memory)), buffers_(std::move(buffers)),
		  region_(region)
	{}
	Chunk(const Chunk&) = delete;
	Chunk& operator=(const Chunk&) = delete;
	~Chunk() { registrar_.deregister_region(region_); }

	BounceBuffer* buffers() const noexcept { return buffers_.get(); }
	std::byte* memory() const noexcept { return memory_.get(); }
	void* desc() const noexcept { return region_.desc; }

	std::unique_ptr<Chunk> next;

private:
	Registrar& registrar_;
	ChunkMemory memory_;
	std::unique_ptr<BounceBuffer[]> buffers_;
	RegisteredRegion region_;
};

BufferPool::BufferPool(Registrar& registrar, const BufferPoolConfig& config) noexcept
	: registrar_(registrar), config_(config)
{}

BufferPool::~BufferPool()
{
	// Iteratively, so a long chain cannot recurse deeply.
	while (chunks_)
		chunks_ = std::move(chunks_->next);
}

bool BufferPool::config_valid() const noexcept
{
	if (config_.buffer_size == 0 || config_.buffers_per_chunk == 0 || config_.max_buffers == 0)
		return false;
	const std::size_t stride = buffer_stride(config_.buffer_size);
	return stride >= config_.buffer_size &&
	       config_.buffers_per_chunk <= std::numeric_limits<std::size_t>::max() / stride;
}

int BufferPool::grow() noexcept
{
	if (!config_valid())
		return last_error_ = -EINVAL;
	if (capacity_ >= config_.max_buffers)
		return last_error_ = -ENOSPC;

	const std::size_t count =
		std::min(config_.buffers_per_chunk, config_.max_buffers - capacity_);
	const std::size_t stride = buffer_stride(config_.buffer_size);
	const std::size_t bytes = stride * count;

	ChunkMemory memory(static_cast<std::byte*>(
		::operator new (bytes, std::align_val_t{kChunkAlignment}, std::nothrow)));
	std::unique_ptr<BounceBuffer[]> buffers(new (std::nothrow) BounceBuffer[count]);
	if (!memory || !buffers)
		return last_error_ = -ENOMEM;

	RegisteredRegion region;
	if (int rc = registrar_.register_region(memory.get(), bytes, region); rc != 0)
		return last_error_ = (rc < 0 ? rc : -rc);

	std::unique_ptr<Chunk> chunk(new (std::nothrow) Chunk(registrar_, std::move(memory),
							      std::move(buffers), region));
	if (!chunk) {
		registrar_.deregister_region(region);
		return last_error_ = -ENOMEM;
	}

	for (std::size_t i = 0; i < count; ++i) {
		BounceBuffer& b = chunk->buffers()[i];
		b.data_ = chunk->memory() + i * stride;
		b.size_ = config_.buffer_size;
		b.desc_ = chunk->desc();
		b.index_ = capacity_ + i;
		b.owner_ = this;
		push_free(b);
	}
	chunk->next = std::move(chunks_);
	chunks_ = std::move(chunk);
	capacity_ += count;
	++chunk_count_;
	last_error_ = 0;
	return 0;
}

BounceBuffer* BufferPool::pop_free() noexcept
{
	if (free_ == nullptr && grow() != 0)
		return nullptr;
	BounceBuffer* b = free_;
	free_ = b->next_free_;
	b->next_free_ = nullptr;
	--free_count_;
	return b;
}

void BufferPool::push_free(BounceBuffer& buffer) noexcept
{
	buffer.state_ = BounceBuffer::State::Free;
	buffer.next_free_ = free_;
	free_ = &buffer;
	++free_count_;
}

BounceBuffer* BufferPool::acquire() noexcept
{
	BounceBuffer* b = pop_free();
	if (b != nullptr)
		b->state_ = BounceBuffer::State::Held;
	return b;
}

int BufferPool::release(BounceBuffer& buffer) noexcept
{
	if (!owns(buffer) || buffer.state_ != BounceBuffer::State::Held)
		return -EINVAL;
	push_free(buffer);
	return 0;
}

std::size_t srq_low_watermark(double link_gbit_per_s, std::size_t min_message_bytes,
			      double refill_delay_us) noexcept
{
	if (!(link_gbit_per_s > 0) || min_message_bytes == 0 || !(refill_delay_us > 0))
		return 1;
	// eq. (5): BW[Gbit/s] * 10^3 / MinPacketSize[bit] messages per microsecond.
	const double per_us =
		link_gbit_per_s * 1e3 / (8.0 * static_cast<double>(min_message_bytes));
	const double buffers = std::ceil(per_us * refill_delay_us);
	if (!(buffers < static_cast<double>(std::numeric_limits<std::size_t>::max())))
		return std::numeric_limits<std::size_t>::max();
	return buffers < 1 ? 1 : static_cast<std::size_t>(buffers);
}

ReceivePool::ReceivePool(Registrar& registrar, const ReceivePoolConfig& config) noexcept
	: config_(config),
	  pool_(registrar,
		BufferPoolConfig{config.buffer_size, config.buffers_per_chunk, config.max_buffers})
{}

int ReceivePool::init() noexcept
{
	if (!pool_.config_valid() || config_.low_watermark == 0 ||
	    config_.low_watermark > config_.target_posted ||
	    config_.target_posted > config_.max_buffers)
		return -EINVAL;
	while (pool_.capacity() < config_.target_posted)
		if (int rc = pool_.grow(); rc != 0)
			return rc;
	return 0;
}

std::size_t ReceivePool::refill_count() const noexcept
{
	return posted_ < config_.low_watermark ? config_.target_posted - posted_ : 0;
}

BounceBuffer* ReceivePool::acquire_for_post() noexcept
{
	BounceBuffer* b = pool_.pop_free();
	if (b == nullptr)
		return nullptr;
	b->state_ = BounceBuffer::State::Posted;
	++posted_;
	return b;
}

int ReceivePool::move(BounceBuffer& buffer, BounceBuffer::State from,
		      BounceBuffer::State to) noexcept
{
	if (!pool_.owns(buffer) || buffer.state_ != from)
		return -EINVAL;
	if (from == BounceBuffer::State::Posted)
		--posted_;
	if (from == BounceBuffer::State::Held)
		--held_;
	if (to == BounceBuffer::State::Held)
		++held_;
	if (to == BounceBuffer::State::Free)
		pool_.push_free(buffer);
	else
		buffer.state_ = to;
	return 0;
}

int ReceivePool::post_failed(BounceBuffer& buffer) noexcept
{
	return move(buffer, BounceBuffer::State::Posted, BounceBuffer::State::Free);
}

int ReceivePool::consumed(BounceBuffer& buffer) noexcept
{
	const int rc = move(buffer, BounceBuffer::State::Posted, BounceBuffer::State::Held);
	if (rc == 0)
		++total_consumed_;
	return rc;
}

int ReceivePool::release(BounceBuffer& buffer) noexcept
{
	return move(buffer, BounceBuffer::State::Held, BounceBuffer::State::Free);
}

} // namespace rcoll::proto
