// A first-in, first-out queue that allocates nothing until something is
// queued. Every connection has two of them (sends waiting for the
// connection or for core queue space, control messages waiting for a
// transmit buffer), almost always empty: std::deque allocates a block per
// queue on construction, which a full mesh pays for every peer.
// Storage is a ring that doubles when full: its capacity is a power of two,
// so positions wrap with a mask (a division would cost more than the rest
// of a push on the completion path).
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace rcoll::proto {

template <class T>
class Fifo {
public:
	bool empty() const noexcept { return count_ == 0; }
	std::size_t size() const noexcept { return count_; }
	std::size_t capacity() const noexcept { return slots_.size(); }

	T& front() noexcept { return slots_[head_]; }
	const T& front() const noexcept { return slots_[head_]; }

	void push_back(const T& value) { store(value); }
	void push_back(T&& value) { store(std::move(value)); }

	// Stores an entry that `fill` writes in place, every field of it (the
	// slot holds a stale one), then counts it: no copy built first, which
	// the completion path would pay for in stalled loads. `fill` must not
	// touch this queue; if it throws, nothing is counted (what it wrote
	// stays in the unused slot until the slot is reused).
	template <class Fill>
	void push_back_with(Fill&& fill)
	{
		reserve_one();
		fill(slots_[(head_ + count_) & mask()]);
		++count_;
	}

	// Room for one more: the next push_back allocates nothing.
	void reserve_one()
	{
		if (count_ == slots_.size())
			grow();
	}

	void pop_front() noexcept
	{
		// Release what the entry owns now; a plain value owns nothing, and
		// clearing it would cost the completion path a copy.
		if constexpr (!std::is_trivially_destructible_v<T>)
			slots_[head_] = T{};
		head_ = (head_ + 1) & mask();
		--count_;
	}

	void clear() noexcept
	{
		while (!empty())
			pop_front();
	}

	// Visits the entries oldest first.
	template <class F>
	void for_each(F&& visit)
	{
		for (std::size_t i = 0; i < count_; ++i)
			visit(slots_[(head_ + i) & mask()]);
	}

private:
	// Counted once stored: a copy that throws leaves the queue as it was.
	// `value` may be an entry of this queue (requeued): it is taken before
	// growing moves the entries.
	template <class U>
	void store(U&& value)
	{
		if (count_ == slots_.size()) {
			T taken(std::forward<U>(value));
			grow();
			slots_[(head_ + count_) & mask()] = std::move(taken);
		} else {
			slots_[(head_ + count_) & mask()] = std::forward<U>(value);
		}
		++count_;
	}

	std::size_t mask() const noexcept { return slots_.size() - 1; }

	void grow()
	{
		std::vector<T> bigger(std::max<std::size_t>(4, 2 * slots_.size()));
		for (std::size_t i = 0; i < count_; ++i)
			bigger[i] = std::move(slots_[(head_ + i) & mask()]);
		slots_.swap(bigger);
		head_ = 0;
	}

	std::vector<T> slots_;
	std::size_t head_ = 0;
	std::size_t count_ = 0;
};

} // namespace rcoll::proto
