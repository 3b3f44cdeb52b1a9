// A doubly linked intrusive list: the element embeds its hook (by deriving
// from ListHook), so linking and unlinking never allocate and are O(1).
// A hook knows its list, so destroying a linked element unlinks it and keeps
// the list's count right instead of leaving a dangling node behind.
#pragma once

#include <concepts>
#include <cstddef>

namespace rcoll::proto {

class ListBase;

class ListHook {
public:
	ListHook() noexcept = default;
	ListHook(const ListHook&) = delete;
	ListHook& operator=(const ListHook&) = delete;
	~ListHook();

	bool linked() const noexcept { return owner_ != nullptr; }
	// True when this element is linked into `list`.
	bool linked_to(const ListBase& list) const noexcept { return owner_ == &list; }

private:
	friend class ListBase;
	ListHook* prev_ = nullptr;
	ListHook* next_ = nullptr;
	ListBase* owner_ = nullptr;
};

class ListBase {
public:
	ListBase() noexcept { head_.prev_ = head_.next_ = &head_; }
	ListBase(const ListBase&) = delete;
	ListBase& operator=(const ListBase&) = delete;
	// Leaves every remaining element unlinked (not destroyed).
	~ListBase() { clear(); }

	bool empty() const noexcept { return size_ == 0; }
	std::size_t size() const noexcept { return size_; }

	// Unlinks `node` if it is in this list; returns whether it was.
	bool erase(ListHook& node) noexcept
	{
		if (node.owner_ != this)
			return false;
		node.prev_->next_ = node.next_;
		node.next_->prev_ = node.prev_;
		node.prev_ = node.next_ = nullptr;
		node.owner_ = nullptr;
		--size_;
		return true;
	}

	void clear() noexcept
	{
		while (!empty())
			erase(*head_.next_);
	}

protected:
	// Appends an unlinked node; returns false (nothing changed) otherwise.
	bool link_back(ListHook& node) noexcept
	{
		if (node.linked())
			return false;
		node.prev_ = head_.prev_;
		node.next_ = &head_;
		head_.prev_->next_ = &node;
		head_.prev_ = &node;
		node.owner_ = this;
		++size_;
		return true;
	}

	ListHook* first() const noexcept { return size_ ? head_.next_ : nullptr; }
	ListHook* after(const ListHook& node) const noexcept
	{
		return node.next_ == &head_ ? nullptr : node.next_;
	}

private:
	ListHook head_; // sentinel; its owner_ stays null
	std::size_t size_ = 0;
};

inline ListHook::~ListHook()
{
	if (owner_ != nullptr)
		owner_->erase(*this);
}

// Oldest first. T must derive from ListHook.
template <class T>
requires std::derived_from<T, ListHook>
class IntrusiveList : public ListBase {
public:
	bool push_back(T& element) noexcept { return link_back(element); }

	T* front() const noexcept { return cast(first()); }

	// The oldest element satisfying `pred`, or nullptr.
	template <std::predicate<const T&> Pred>
	T* find_first(Pred pred) const
	{
		for (ListHook* node = first(); node != nullptr; node = after(*node))
			if (pred(*cast(node)))
				return cast(node);
		return nullptr;
	}

	// Unlinks every element satisfying `pred`, oldest first, and hands it
	// to `fn` after unlinking (so `fn` may relink or destroy it).
	template <std::predicate<const T&> Pred, std::invocable<T&> Fn>
	std::size_t remove_if(Pred pred, Fn fn)
	{
		std::size_t removed = 0;
		ListHook* node = first();
		while (node != nullptr) {
			ListHook* next = after(*node);
			if (pred(*cast(node))) {
				erase(*node);
				fn(*cast(node));
				++removed;
			}
			node = next;
		}
		return removed;
	}

private:
	static T* cast(ListHook* node) noexcept { return static_cast<T*>(node); }
};

} // namespace rcoll::proto
