#include "proto/match.hpp"

namespace rcoll::proto {

UnexpectedMessage* MatchQueue::post(PostedReceive& receive) noexcept
{
	if (receive.linked())
		return nullptr;
	UnexpectedMessage* message = peek(receive.source, receive.tag, receive.ignore);
	if (message != nullptr) {
		unexpected_.erase(*message);
		return message;
	}
	posted_.push_back(receive);
	return nullptr;
}

PostedReceive* MatchQueue::deliver(UnexpectedMessage& message) noexcept
{
	if (message.linked())
		return nullptr;
	PostedReceive* receive = posted_.find_first([&message](const PostedReceive& r) {
		return receive_accepts(r.source, r.tag, r.ignore, message.source, message.tag);
	});
	if (receive != nullptr) {
		if (!receive->keep_posted)
			posted_.erase(*receive);
		return receive;
	}
	unexpected_.push_back(message);
	return nullptr;
}

UnexpectedMessage* MatchQueue::peek(std::uint64_t source, std::uint64_t tag,
				    std::uint64_t ignore) const noexcept
{
	return unexpected_.find_first([=](const UnexpectedMessage& m) {
		return receive_accepts(source, tag, ignore, m.source, m.tag);
	});
}

bool MatchQueue::claim(UnexpectedMessage& message) noexcept { return unexpected_.erase(message); }

PostedReceive* MatchQueue::cancel(const void* context) noexcept
{
	PostedReceive* receive = posted_.find_first(
		[context](const PostedReceive& r) { return r.context == context; });
	if (receive != nullptr)
		posted_.erase(*receive);
	return receive;
}

bool MatchQueue::remove(PostedReceive& receive) noexcept { return posted_.erase(receive); }

} // namespace rcoll::proto
