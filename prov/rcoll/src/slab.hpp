// Records that a peer names by id (rendezvous cookies, receive ids in CTS and
// FIN): an id is a slot index plus a generation, so a stale id from the wire
// never reaches a recycled record (and the glue accepts an id only from the
// peer whose operation it names).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace rcoll {

template <class T>
class Slab {
public:
	static constexpr unsigned kIndexBits = 20;
	static constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;
	static constexpr uint32_t kGenerationMask = 0xff;

	// A new record and its id; nullptr when every slot is taken.
	T* create(uint32_t& id)
	{
		uint32_t index;
		if (!free_.empty()) {
			index = free_.back();
			free_.pop_back();
		} else {
			if (slots_.size() > kIndexMask)
				return nullptr;
			index = uint32_t(slots_.size());
			slots_.emplace_back();
		}
		Slot& s = slots_[index];
		s.generation = (s.generation + 1) & kGenerationMask;
		s.object = std::make_unique<T>();
		id = (s.generation << kIndexBits) | index;
		live_++;
		return s.object.get();
	}

	T* find(uint64_t id) const
	{
		uint32_t index = uint32_t(id) & kIndexMask;
		if (id >> (kIndexBits + 8) || index >= slots_.size())
			return nullptr;
		const Slot& s = slots_[index];
		return s.object && s.generation == (uint32_t(id) >> kIndexBits) ? s.object.get()
										: nullptr;
	}

	void destroy(uint32_t id)
	{
		uint32_t index = id & kIndexMask;
		if (index < slots_.size() && slots_[index].object) {
			slots_[index].object.reset();
			free_.push_back(index);
			live_--;
		}
	}

	template <class F>
	void for_each(F&& f)
	{
		for (size_t i = 0; i < slots_.size(); i++)
			if (slots_[i].object)
				f(*slots_[i].object);
	}

	size_t live() const { return live_; }

private:
	struct Slot {
		std::unique_ptr<T> object;
		uint32_t generation = 0;
	};
	std::vector<Slot> slots_;
	std::vector<uint32_t> free_;
	size_t live_ = 0;
};

} // namespace rcoll
