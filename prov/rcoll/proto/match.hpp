// Receive-side matching for one queue pair: posted receives waiting for a
// message, and unexpected messages waiting for a receive. The endpoint keeps
// two, one for untagged and one for tagged traffic (untagged entries use tag
// 0 and ignore 0, so only the source decides).
//
// Both lists are in arrival order and every search takes the oldest entry
// that fits, which gives MPI's non-overtaking rule and FI_ORDER_SAS: two
// messages from one source are matched in the order they were sent, and two
// receives that both fit are satisfied in the order they were posted.
//
// The caller owns the entries (typically embedded in its own operation and
// bounce-buffer records) and finds its record again through `context`, so no
// operation allocates. Link and unlink are O(1); a search is linear in the
// queue it walks, like the match lists of MPI libraries.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/intrusive_list.hpp"

namespace rcoll::proto {

// Source of a receive that accepts any peer; equal to FI_ADDR_UNSPEC.
inline constexpr std::uint64_t kAnySource = ~std::uint64_t{0};

struct PostedReceive : ListHook {
	std::uint64_t source = kAnySource; // a peer address, or kAnySource
	std::uint64_t tag = 0;
	std::uint64_t ignore = 0; // tag bits that do not take part in the match
	void* context = nullptr;
	// A buffer that takes many messages (FI_MULTI_RECV): deliver() leaves it
	// posted, and its owner removes it once it is full.
	bool keep_posted = false;
};

struct UnexpectedMessage : ListHook {
	std::uint64_t source = 0;
	std::uint64_t tag = 0;
	void* context = nullptr;
};

// fi_tagged(3): a receive (source, tag, ignore) accepts a message from
// `msg_source` with `msg_tag` when the sources agree (or the receive takes
// any) and the tags agree on every bit `ignore` does not mask.
constexpr bool receive_accepts(std::uint64_t source, std::uint64_t tag, std::uint64_t ignore,
			       std::uint64_t msg_source, std::uint64_t msg_tag) noexcept
{
	return (source == kAnySource || source == msg_source) && ((tag ^ msg_tag) & ~ignore) == 0;
}

class MatchQueue {
public:
	MatchQueue() = default;
	MatchQueue(const MatchQueue&) = delete;
	MatchQueue& operator=(const MatchQueue&) = delete;

	// A new receive. Returns the oldest unexpected message it accepts, already
	// unlinked (the receive is then NOT queued); otherwise queues the receive
	// and returns nullptr. A receive that is already linked is refused
	// (returns nullptr, nothing changes; see is_posted()).
	UnexpectedMessage* post(PostedReceive& receive) noexcept;

	// A new message. Returns the oldest posted receive that accepts it,
	// already unlinked unless it is keep_posted (the message is then NOT
	// queued); otherwise queues the message as unexpected and returns nullptr.
	PostedReceive* deliver(UnexpectedMessage& message) noexcept;

	// FI_PEEK: the oldest unexpected message a receive (source, tag, ignore)
	// would accept, left in place; nullptr if none.
	UnexpectedMessage* peek(std::uint64_t source, std::uint64_t tag,
				std::uint64_t ignore) const noexcept;

	// FI_PEEK|FI_CLAIM: takes a peeked message out of matching so no later
	// receive can take it; the caller keeps it until the FI_CLAIM receive.
	// Returns false (nothing changes) if it is not queued here.
	bool claim(UnexpectedMessage& message) noexcept;

	// fi_cancel: unlinks the oldest posted receive whose context is `context`.
	PostedReceive* cancel(const void* context) noexcept;

	// Unlinks a posted receive the caller already holds; false if not queued here.
	bool remove(PostedReceive& receive) noexcept;

	// The peer `source` is gone: unlinks every posted receive directed at it
	// (receives for any source stay), oldest first, handing each to the
	// callback after unlinking. What it delivered stays receivable.
	// The callback must not touch other entries of this queue.
	// Returns the number of receives removed.
	template <class OnPosted>
	std::size_t drain_directed(std::uint64_t source, OnPosted on_posted)
	{
		return posted_.remove_if(
			[source](const PostedReceive& r) { return r.source == source; }, on_posted);
	}

	// Unlinks every unexpected message, oldest first, handing each to the
	// callback after unlinking (the owner frees them at close).
	template <class OnMessage>
	std::size_t drain_unexpected(OnMessage on_message)
	{
		return unexpected_.remove_if([](const UnexpectedMessage&) { return true; },
					     on_message);
	}

	bool is_posted(const PostedReceive& receive) const noexcept
	{
		return receive.linked_to(posted_);
	}
	bool is_unexpected(const UnexpectedMessage& message) const noexcept
	{
		return message.linked_to(unexpected_);
	}
	std::size_t posted_count() const noexcept { return posted_.size(); }
	std::size_t unexpected_count() const noexcept { return unexpected_.size(); }

private:
	IntrusiveList<PostedReceive> posted_;
	IntrusiveList<UnexpectedMessage> unexpected_;
};

} // namespace rcoll::proto
