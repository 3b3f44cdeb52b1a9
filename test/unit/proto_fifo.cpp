// The per-connection queue: nothing allocated until used, order kept across
// growth and wrap-around, entries filled in place, entries released as
// they leave.
#include <criterion/criterion.h>

#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "proto/fifo.hpp"

using rcoll::proto::Fifo;

Test(fifo, allocates_nothing_until_used)
{
	Fifo<int> q;
	cr_assert(q.empty());
	cr_assert_eq(q.capacity(), 0u);
	q.clear();
	cr_assert_eq(q.capacity(), 0u);
	q.push_back(7);
	cr_assert_gt(q.capacity(), 0u);
	cr_assert_eq(q.front(), 7);
}

Test(fifo, keeps_order_across_growth_and_wraparound)
{
	Fifo<int> q;
	std::deque<int> model;
	std::mt19937 rng(12345);
	int next = 0;
	for (int step = 0; step < 100000; ++step) {
		if (model.empty() || rng() % 3 != 0) {
			q.push_back(next);
			model.push_back(next++);
		} else {
			cr_assert_eq(q.front(), model.front(), "front differs at step %d", step);
			q.pop_front();
			model.pop_front();
		}
		cr_assert_eq(q.size(), model.size(), "size differs at step %d", step);
	}
	std::vector<int> seen;
	q.for_each([&](int v) { seen.push_back(v); });
	cr_assert(seen == std::vector<int>(model.begin(), model.end()),
		  "for_each visits oldest first");
}

Test(fifo, releases_entries_as_they_leave)
{
	auto owned = std::make_shared<int>(1);
	Fifo<std::shared_ptr<int>> q;
	q.push_back(owned);
	q.push_back(owned);
	cr_assert_eq(owned.use_count(), 3);
	q.pop_front();
	cr_assert_eq(owned.use_count(), 2, "a popped entry is released at once");
	q.clear();
	cr_assert_eq(owned.use_count(), 1);
	cr_assert(q.empty());
}

Test(fifo, fills_entries_in_place_in_order)
{
	struct Pair {
		int a;
		long b;
	};
	Fifo<Pair> q;
	// Past three growths and a wrap-around: what each fill wrote comes out,
	// in order, whatever stale entry its slot held.
	for (int i = 0; i < 3; ++i) {
		q.push_back_with([&](Pair& p) { p = {i, -i}; });
		q.pop_front();
	}
	for (int i = 0; i < 20; ++i)
		q.push_back_with([&](Pair& p) {
			p.a = i;
			p.b = 10L * i;
		});
	cr_assert_eq(q.size(), 20u);
	for (int i = 0; i < 20; ++i) {
		cr_assert_eq(q.front().a, i);
		cr_assert_eq(q.front().b, 10L * i);
		q.pop_front();
	}
	cr_assert(q.empty());
}

Test(fifo, requeues_its_own_front_across_growth)
{
	// A reference into the queue survives the growth the push causes.
	Fifo<std::shared_ptr<int>> q;
	for (int i = 0; i < 4; ++i)
		q.push_back(std::make_shared<int>(i));
	cr_assert_eq(q.size(), q.capacity(), "full: the next push grows the ring");
	q.push_back(q.front());
	cr_assert_eq(q.size(), 5u);
	std::vector<int> seen;
	q.for_each([&](const std::shared_ptr<int>& v) { seen.push_back(v ? *v : -1); });
	cr_assert(seen == std::vector<int>({0, 1, 2, 3, 0}), "the requeued front came out whole");
}
