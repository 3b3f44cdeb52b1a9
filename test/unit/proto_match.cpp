// Tag matching: posted and unexpected queues, wildcards, ordering, peek and
// claim, cancel, drain by source, and a randomized comparison against a
// straightforward reference model.
#include <criterion/criterion.h>

#include <algorithm>
#include <deque>
#include <random>
#include <vector>

#include "proto/match.hpp"

using namespace rcoll::proto;

namespace {

constexpr std::uint64_t kPeerA = 10, kPeerB = 11, kPeerC = 12;

// Entries need stable addresses: keep them in deques.
struct Entries {
	std::deque<PostedReceive> receives;
	std::deque<UnexpectedMessage> messages;
	int contexts[256] = {};

	PostedReceive& receive(std::uint64_t source, std::uint64_t tag, std::uint64_t ignore = 0)
	{
		PostedReceive& r = receives.emplace_back();
		r.source = source;
		r.tag = tag;
		r.ignore = ignore;
		r.context = &contexts[receives.size() % 256];
		return r;
	}
	UnexpectedMessage& message(std::uint64_t source, std::uint64_t tag)
	{
		UnexpectedMessage& m = messages.emplace_back();
		m.source = source;
		m.tag = tag;
		m.context = &contexts[messages.size() % 256];
		return m;
	}
};

} // namespace

Test(match, posted_receive_takes_a_later_message)
{
	MatchQueue q;
	Entries e;
	PostedReceive& r = e.receive(kPeerA, 5);
	cr_assert_null(q.post(r));
	cr_assert_eq(q.posted_count(), 1u);
	cr_assert(q.is_posted(r));

	cr_assert_null(q.deliver(e.message(kPeerA, 6)), "wrong tag must not match");
	cr_assert_null(q.deliver(e.message(kPeerB, 5)), "wrong source must not match");
	UnexpectedMessage& m = e.message(kPeerA, 5);
	cr_assert_eq(q.deliver(m), &r);
	cr_assert(!q.is_posted(r));
	cr_assert(!q.is_unexpected(m), "a matched message is not queued");
	cr_assert_eq(q.posted_count(), 0u);
	cr_assert_eq(q.unexpected_count(), 2u);
}

Test(match, unexpected_message_waits_for_its_receive)
{
	MatchQueue q;
	Entries e;
	UnexpectedMessage& m = e.message(kPeerB, 0x77);
	cr_assert_null(q.deliver(m));
	cr_assert(q.is_unexpected(m));
	cr_assert_null(q.post(e.receive(kPeerA, 0x77)));
	PostedReceive& r = e.receive(kPeerB, 0x77);
	cr_assert_eq(q.post(r), &m);
	cr_assert(!q.is_posted(r), "a satisfied receive is not queued");
	cr_assert_eq(q.unexpected_count(), 0u);
	cr_assert_eq(q.posted_count(), 1u);
}

Test(match, any_source_and_ignore_bits)
{
	cr_assert(receive_accepts(kAnySource, 1, 0, kPeerA, 1));
	cr_assert(receive_accepts(kAnySource, 1, 0, kPeerC, 1));
	cr_assert(!receive_accepts(kPeerA, 1, 0, kPeerC, 1));
	cr_assert(receive_accepts(kPeerA, 0x1234, 0xff, kPeerA, 0x12ff));
	cr_assert(!receive_accepts(kPeerA, 0x1234, 0xff, kPeerA, 0x1334));
	cr_assert(receive_accepts(kPeerA, 0, ~0ull, kPeerA, 0xdeadbeef), "ignore all: any tag");

	MatchQueue q;
	Entries e;
	PostedReceive& wide = e.receive(kAnySource, 0xab00, 0x00ff);
	cr_assert_null(q.post(wide));
	cr_assert_null(q.deliver(e.message(kPeerA, 0xac00)));
	cr_assert_eq(q.deliver(e.message(kPeerC, 0xab42)), &wide);
}

Test(match, messages_from_one_source_match_in_order)
{
	MatchQueue q;
	Entries e;
	UnexpectedMessage& a1 = e.message(kPeerA, 1);
	UnexpectedMessage& b1 = e.message(kPeerB, 1);
	UnexpectedMessage& a2 = e.message(kPeerA, 1);
	UnexpectedMessage& a3 = e.message(kPeerA, 2);
	for (UnexpectedMessage* m : {&a1, &b1, &a2, &a3})
		cr_assert_null(q.deliver(*m));

	cr_assert_eq(q.post(e.receive(kPeerA, 1)), &a1);
	cr_assert_eq(q.post(e.receive(kPeerA, 0, ~0ull)), &a2, "oldest from A that fits");
	cr_assert_eq(q.post(e.receive(kAnySource, 0, ~0ull)), &b1, "oldest overall");
	cr_assert_eq(q.post(e.receive(kAnySource, 0, ~0ull)), &a3);
	cr_assert_eq(q.unexpected_count(), 0u);
}

Test(match, receives_are_satisfied_in_posting_order)
{
	MatchQueue q;
	Entries e;
	PostedReceive& any = e.receive(kAnySource, 9);
	PostedReceive& directed = e.receive(kPeerA, 9);
	PostedReceive& any2 = e.receive(kAnySource, 0, ~0ull);
	for (PostedReceive* r : {&any, &directed, &any2})
		cr_assert_null(q.post(*r));
	cr_assert_eq(q.deliver(e.message(kPeerA, 9)), &any, "posted first wins");
	cr_assert_eq(q.deliver(e.message(kPeerA, 9)), &directed);
	cr_assert_eq(q.deliver(e.message(kPeerA, 9)), &any2);
	cr_assert_null(q.deliver(e.message(kPeerA, 9)));
}

Test(match, keep_posted_buffer_takes_messages_in_its_place)
{
	MatchQueue q;
	Entries e;
	PostedReceive& directed = e.receive(kPeerA, 0);
	PostedReceive& buffer = e.receive(kAnySource, 0);
	buffer.keep_posted = true;
	PostedReceive& later = e.receive(kAnySource, 0);
	for (PostedReceive* r : {&directed, &buffer, &later})
		cr_assert_null(q.post(*r));
	cr_assert_eq(q.deliver(e.message(kPeerB, 0)), &buffer);
	cr_assert(q.is_posted(buffer), "a keep_posted receive stays posted");
	cr_assert_eq(q.deliver(e.message(kPeerC, 0)), &buffer, "and takes the next message");
	cr_assert_eq(q.deliver(e.message(kPeerA, 0)), &directed,
		     "an older receive still comes first");
	cr_assert_eq(q.deliver(e.message(kPeerA, 0)), &buffer, "the buffer keeps its place");
	cr_assert(q.remove(buffer));
	cr_assert_eq(q.deliver(e.message(kPeerB, 0)), &later, "removed: the next one takes over");
	cr_assert_eq(q.posted_count(), 0u);
	cr_assert_eq(q.unexpected_count(), 0u);
}

Test(match, peek_leaves_and_claim_reserves)
{
	MatchQueue q;
	Entries e;
	UnexpectedMessage& m1 = e.message(kPeerA, 3);
	UnexpectedMessage& m2 = e.message(kPeerA, 3);
	q.deliver(m1);
	q.deliver(m2);

	cr_assert_null(q.peek(kPeerB, 3, 0));
	cr_assert_eq(q.peek(kAnySource, 3, 0), &m1);
	cr_assert_eq(q.peek(kAnySource, 3, 0), &m1, "peek is idempotent");
	cr_assert_eq(q.unexpected_count(), 2u);

	UnexpectedMessage* claimed = q.peek(kPeerA, 3, 0);
	cr_assert(q.claim(*claimed));
	cr_assert(!q.is_unexpected(m1));
	cr_assert(!q.claim(m1), "claiming twice must fail");
	cr_assert_eq(q.post(e.receive(kPeerA, 3)), &m2, "a claimed message is out of matching");
	cr_assert_null(q.peek(kAnySource, 3, 0));

	MatchQueue other;
	UnexpectedMessage& foreign = e.message(kPeerA, 3);
	other.deliver(foreign);
	cr_assert(!q.claim(foreign), "an entry of another queue is refused");
	cr_assert(other.is_unexpected(foreign));
}

Test(match, cancel_by_context)
{
	MatchQueue q;
	Entries e;
	PostedReceive& r1 = e.receive(kPeerA, 1);
	PostedReceive& r2 = e.receive(kPeerA, 1);
	q.post(r1);
	q.post(r2);
	cr_assert_null(q.cancel(&q), "unknown context");
	cr_assert_eq(q.cancel(r1.context), &r1);
	cr_assert_null(q.cancel(r1.context), "already cancelled");
	cr_assert_eq(q.deliver(e.message(kPeerA, 1)), &r2, "a cancelled receive never matches");
	cr_assert_eq(q.posted_count(), 0u);

	PostedReceive& r3 = e.receive(kPeerB, 1);
	q.post(r3);
	cr_assert(q.remove(r3));
	cr_assert(!q.remove(r3));
}

Test(match, drain_directed_keeps_delivered_messages)
{
	MatchQueue q;
	Entries e;
	PostedReceive& to_a1 = e.receive(kPeerA, 1);
	PostedReceive& any = e.receive(kAnySource, 99);
	PostedReceive& to_b = e.receive(kPeerB, 2);
	PostedReceive& to_a2 = e.receive(kPeerA, 3);
	for (PostedReceive* r : {&to_a1, &any, &to_b, &to_a2})
		q.post(*r);
	UnexpectedMessage& from_a1 = e.message(kPeerA, 50);
	UnexpectedMessage& from_c = e.message(kPeerC, 50);
	UnexpectedMessage& from_a2 = e.message(kPeerA, 51);
	for (UnexpectedMessage* m : {&from_a1, &from_c, &from_a2})
		q.deliver(*m);

	std::vector<PostedReceive*> receives;
	const std::size_t removed =
		q.drain_directed(kPeerA, [&](PostedReceive& r) { receives.push_back(&r); });
	cr_assert_eq(removed, 2u);
	cr_assert(receives == (std::vector<PostedReceive*>{&to_a1, &to_a2}), "oldest first");
	cr_assert(q.is_posted(any), "receives for any source survive");
	cr_assert(q.is_posted(to_b));
	for (UnexpectedMessage* m : {&from_a1, &from_c, &from_a2})
		cr_assert(q.is_unexpected(*m), "what the gone peer delivered stays receivable");
	cr_assert_eq(q.posted_count(), 2u);
	cr_assert_eq(q.unexpected_count(), 3u);
	cr_assert_eq(q.drain_directed(kPeerA, [](PostedReceive&) {}), 0u);
	PostedReceive& late = e.receive(kPeerA, 50);
	cr_assert_eq(q.post(late), &from_a1, "a later receive still gets the gone peer's message");
}

Test(match, relinking_and_destruction_are_safe)
{
	MatchQueue q;
	Entries e;
	PostedReceive& r = e.receive(kPeerA, 1);
	cr_assert_null(q.post(r));
	cr_assert_null(q.post(r), "posting a queued receive again is refused");
	cr_assert_eq(q.posted_count(), 1u);
	{
		PostedReceive temporary;
		temporary.source = kPeerB;
		q.post(temporary);
		cr_assert_eq(q.posted_count(), 2u);
	} // destroying a linked entry unlinks it
	cr_assert_eq(q.posted_count(), 1u);
	cr_assert_null(q.deliver(e.message(kPeerB, 0)));
	{
		MatchQueue short_lived;
		short_lived.deliver(e.message(kPeerC, 0));
	} // destroying the queue leaves its entries unlinked
	cr_assert(!e.messages.back().linked());
}

// The queue against a model that spells the rules out with vectors.
Test(match, randomized_against_reference_model)
{
	struct Model {
		std::vector<PostedReceive*> posted;
		std::vector<UnexpectedMessage*> unexpected;

		UnexpectedMessage* post(PostedReceive& r)
		{
			for (auto it = unexpected.begin(); it != unexpected.end(); ++it)
				if (receive_accepts(r.source, r.tag, r.ignore, (*it)->source,
						    (*it)->tag)) {
					UnexpectedMessage* m = *it;
					unexpected.erase(it);
					return m;
				}
			posted.push_back(&r);
			return nullptr;
		}
		PostedReceive* deliver(UnexpectedMessage& m)
		{
			for (auto it = posted.begin(); it != posted.end(); ++it)
				if (receive_accepts((*it)->source, (*it)->tag, (*it)->ignore,
						    m.source, m.tag)) {
					PostedReceive* r = *it;
					posted.erase(it);
					return r;
				}
			unexpected.push_back(&m);
			return nullptr;
		}
	};

	std::mt19937_64 rng(7);
	const std::uint64_t sources[] = {kPeerA, kPeerB, kPeerC};
	const std::uint64_t ignores[] = {0, 0x1, 0x3, ~0ull};
	MatchQueue q;
	Model model;
	Entries e;
	std::size_t matches = 0;
	for (int step = 0; step < 20000; ++step) {
		const auto op = rng() % 10;
		if (op < 4) {
			const std::uint64_t source =
				rng() % 4 == 0 ? kAnySource : sources[rng() % 3];
			PostedReceive& r = e.receive(source, rng() % 4, ignores[rng() % 4]);
			UnexpectedMessage* got = q.post(r);
			cr_assert_eq(got, model.post(r), "post differs at step %d", step);
			matches += got != nullptr;
		} else if (op < 8) {
			UnexpectedMessage& m = e.message(sources[rng() % 3], rng() % 4);
			PostedReceive* got = q.deliver(m);
			cr_assert_eq(got, model.deliver(m), "deliver differs at step %d", step);
			matches += got != nullptr;
		} else if (op == 8 && !model.unexpected.empty()) {
			// peek + claim of a random message's parameters
			UnexpectedMessage* want = nullptr;
			const std::uint64_t source = sources[rng() % 3];
			const std::uint64_t tag = rng() % 4;
			for (UnexpectedMessage* m : model.unexpected)
				if (receive_accepts(source, tag, 0, m->source, m->tag)) {
					want = m;
					break;
				}
			UnexpectedMessage* got = q.peek(source, tag, 0);
			cr_assert_eq(got, want, "peek differs at step %d", step);
			if (got != nullptr) {
				cr_assert(q.claim(*got));
				std::erase(model.unexpected, got);
			}
		} else if (op == 9 && rng() % 8 == 0) {
			const std::uint64_t source = sources[rng() % 3];
			std::vector<PostedReceive*> receives;
			q.drain_directed(source, [&](PostedReceive& r) { receives.push_back(&r); });
			std::vector<PostedReceive*> want_receives;
			std::erase_if(model.posted, [&](PostedReceive* r) {
				return r->source == source && (want_receives.push_back(r), true);
			});
			cr_assert(receives == want_receives, "drained receives differ at step %d",
				  step);
		}
		cr_assert_eq(q.posted_count(), model.posted.size());
		cr_assert_eq(q.unexpected_count(), model.unexpected.size());
	}
	cr_assert_gt(matches, 1000u, "the random mix must exercise matching");
}
