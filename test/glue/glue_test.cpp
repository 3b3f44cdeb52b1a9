// Glue tests: rcoll's libfabric glue (prov/rcoll/src) with every endpoint in
// this process over the scripted core of fake_core.hpp, which reorders
// completions, refuses posts, holds transfers and kills peers on command.
// Each case names a behaviour the multi-process suites can only hope to hit.
#include "fake_core.hpp"

#include <criterion/criterion.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

void check(long rc, const char* call)
{
	cr_assert(rc == 0, "%s: %s (%ld)", call, fi_strerror(int(-rc)), rc);
}
#define CHECK(call) check((call), #call)

struct Completion {
	uint64_t flags = 0;
	size_t len = 0;
	uint64_t tag = 0;
	int err = 0;
};

struct Node {
	fid_ep* ep = nullptr;
	fid_cq* cq = nullptr;
	fid_av* av = nullptr;
	fid_eq* eq = nullptr;                          // with collectives: join completions
	std::vector<fi_addr_t> addr;                   // of every node, by index
	std::map<void*, int> joined;                   // join context: its error
	std::map<void*, std::vector<Completion>> done; // by context
	bool alive = true;
};

// Endpoints of one rcoll domain over the fake core; node i is owner i there.
class World {
public:
	explicit World(int count, bool collective = false)
	{
		setenv("FI_PROVIDER_PATH", RCOLL_PROVIDER_DIR ":" FAKE_CORE_DIR, 1);
		setenv("FI_RCOLL_CORE", "fake", 1);
		setenv("FI_RCOLL_COLL_LOCAL", "0", 1);
		setenv("FI_RCOLL_RMA_CHUNK", "4096", 1); // rendezvous in many chunks
		fi_info* hints = fi_allocinfo();
		hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_DIRECTED_RECV |
			      (collective ? FI_COLLECTIVE : 0);
		hints->ep_attr->type = FI_EP_RDM;
		hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
		hints->fabric_attr->prov_name = strdup("rcoll");
		CHECK(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_));
		fi_freeinfo(hints);
		CHECK(fi_fabric(info_->fabric_attr, &fabric_, nullptr));
		CHECK(fi_domain(fabric_, info_, &domain_, nullptr));
		nodes.resize(count);
		std::vector<std::vector<uint8_t>> names;
		for (Node& n : nodes) {
			CHECK(fi_endpoint(domain_, info_, &n.ep, nullptr));
			fi_cq_attr cq_attr{};
			cq_attr.format = FI_CQ_FORMAT_TAGGED;
			CHECK(fi_cq_open(domain_, &cq_attr, &n.cq, nullptr));
			fi_av_attr av_attr{};
			av_attr.type = FI_AV_TABLE;
			CHECK(fi_av_open(domain_, &av_attr, &n.av, nullptr));
			CHECK(fi_ep_bind(n.ep, &n.cq->fid, FI_TRANSMIT | FI_RECV));
			CHECK(fi_ep_bind(n.ep, &n.av->fid, 0));
			if (collective) {
				fi_eq_attr eq_attr{};
				CHECK(fi_eq_open(fabric_, &eq_attr, &n.eq, nullptr));
				CHECK(fi_ep_bind(n.ep, &n.eq->fid, 0));
			}
			CHECK(fi_enable(n.ep));
			std::vector<uint8_t> name(256);
			size_t len = name.size();
			CHECK(fi_getname(&n.ep->fid, name.data(), &len));
			name.resize(len);
			names.push_back(name);
		}
		for (Node& n : nodes) {
			n.addr.resize(count);
			for (int i = 0; i < count; i++)
				cr_assert_eq(fi_av_insert(n.av, names[i].data(), 1, &n.addr[i], 0,
							  nullptr),
					     1);
		}
	}

	~World()
	{
		for (Node& n : nodes) {
			fi_close(&n.ep->fid);
			fi_close(&n.av->fid);
			fi_close(&n.cq->fid);
			if (n.eq)
				fi_close(&n.eq->fid);
		}
		fi_close(&domain_->fid);
		fi_close(&fabric_->fid);
		fi_freeinfo(info_);
	}

	// One progress round on every live node: its completions are recorded.
	void progress()
	{
		for (Node& n : nodes) {
			if (!n.alive)
				continue;
			fi_cq_tagged_entry batch[16];
			ssize_t got;
			while ((got = fi_cq_read(n.cq, batch, 16)) > 0)
				for (ssize_t i = 0; i < got; i++)
					n.done[batch[i].op_context].push_back(
						{batch[i].flags, batch[i].len, batch[i].tag, 0});
			if (got == -FI_EAVAIL) {
				fi_cq_err_entry err{};
				if (fi_cq_readerr(n.cq, &err, 0) == 1)
					n.done[err.op_context].push_back(
						{err.flags, err.len, err.tag, err.err});
			}
		}
		for (Node& n : nodes) {
			if (!n.alive || !n.eq)
				continue;
			uint32_t event;
			fi_eq_entry entry{};
			ssize_t got = fi_eq_read(n.eq, &event, &entry, sizeof(entry), 0);
			if (got > 0 && event == FI_JOIN_COMPLETE) {
				n.joined[entry.context] = 0;
			} else if (got == -FI_EAVAIL) {
				fi_eq_err_entry err{};
				if (fi_eq_readerr(n.eq, &err, 0) > 0)
					n.joined[err.context] = err.err ? err.err : FI_EOTHER;
			}
		}
		if (after_progress)
			after_progress();
	}

	// Progress until `ready` holds; false when the budget runs out.
	bool run_until(const std::function<bool()>& ready, std::chrono::milliseconds budget = 10s)
	{
		const auto end = std::chrono::steady_clock::now() + budget;
		while (!ready()) {
			if (std::chrono::steady_clock::now() > end)
				return false;
			progress();
		}
		return true;
	}

	size_t completions(int node, void* context) { return nodes[node].done[context].size(); }

	std::vector<Node> nodes;
	std::function<void()> after_progress; // runs after every progress round
	fid_domain* domain() const { return domain_; }

private:
	fi_info* info_ = nullptr;
	fid_fabric* fabric_ = nullptr;
	fid_domain* domain_ = nullptr;
};

uint8_t pattern(uint64_t seed, size_t i)
{
	return uint8_t((seed * 0x9E3779B97F4A7C15ULL + i * 131 + (i >> 8)) >> 3);
}

std::vector<uint8_t> payload(uint64_t seed, size_t len)
{
	std::vector<uint8_t> v(len);
	for (size_t i = 0; i < len; i++)
		v[i] = pattern(seed, i);
	return v;
}

// Messages both ways between pairs of nodes: eager and rendezvous sizes,
// some receives posted before their message arrives and some after, every
// other one from any source (a rendezvous then reads instead of being
// written). A send buffer is overwritten as soon as its send completes, as
// an application may: a send that completes before the core took its data
// delivers the overwritten bytes. Every message must arrive once, intact,
// in order; every send must complete once, without error.
class Exchange {
public:
	// `registered`: send buffers registered (FI_SEND) and their descriptors
	// passed, so that eager sends from 2 KiB leave straight from them.
	Exchange(World& w, std::vector<std::pair<int, int>> pairs, int rounds, uint64_t seed,
		 bool registered = false)
		: w_(w)
	{
		w_.after_progress = [this] { scribble(); };
		const size_t sizes[] = {8, 3000, 70000, 100, 200000, 64, 16384, 1 << 20};
		for (int r = 0; r < rounds; r++)
			for (size_t s = 0; s < std::size(sizes); s++)
				for (auto [a, b] : pairs)
					for (int dir = 0; dir < 2; dir++) {
						const size_t len =
							sizes[(s + r) % std::size(sizes)];
						Message m;
						m.from = dir ? b : a;
						m.to = dir ? a : b;
						m.expect = payload(seed + t_.size(), len);
						m.out = m.expect;
						m.in.assign(len + 16, 0xA5);
						t_.push_back(std::move(m));
					}
		// Receives for the first half now, the rest once everything is sent.
		for (size_t i = 0; i < t_.size() / 2; i++)
			post_recv(i);
		for (Message& m : t_) {
			Node& n = w_.nodes[m.from];
			if (registered)
				CHECK(fi_mr_reg(w_.domain(), m.out.data(), m.out.size(), FI_SEND, 0,
						0, 0, &m.mr, nullptr));
			ssize_t ret;
			while ((ret = fi_tsend(n.ep, m.out.data(), m.out.size(),
					       m.mr ? fi_mr_desc(m.mr) : nullptr, n.addr[m.to],
					       uint64_t(m.from), &m.send_ctx)) == -FI_EAGAIN)
				progress();
			cr_assert_eq(ret, 0, "fi_tsend: %s", fi_strerror(int(-ret)));
		}
		for (size_t i = t_.size() / 2; i < t_.size(); i++)
			post_recv(i);
	}

	void progress() { w_.progress(); }

	~Exchange()
	{
		w_.after_progress = nullptr;
		for (Message& m : t_)
			if (m.mr)
				fi_close(&m.mr->fid);
	}

	bool sent_from_to(int from, int to)
	{
		for (Message& m : t_)
			if (m.from == from && m.to == to && !w_.completions(m.from, &m.send_ctx))
				return false;
		return true;
	}

	bool finished()
	{
		for (Message& m : t_)
			if (!w_.completions(m.from, &m.send_ctx) ||
			    !w_.completions(m.to, &m.recv_ctx))
				return false;
		return true;
	}

	bool run_until(const std::function<bool()>& ready, std::chrono::milliseconds budget = 10s)
	{
		return w_.run_until(ready, budget);
	}

	void complete_and_check()
	{
		run_until([this] { return finished(); });
		for (size_t i = 0; i < t_.size(); i++) {
			Message& m = t_[i];
			const size_t len = m.expect.size();
			cr_assert(w_.completions(m.from, &m.send_ctx) &&
					  w_.completions(m.to, &m.recv_ctx),
				  "message %zu (%zu B, %d to %d) never completed (send %zu, "
				  "receive %zu)",
				  i, len, m.from, m.to, w_.completions(m.from, &m.send_ctx),
				  w_.completions(m.to, &m.recv_ctx));
			cr_assert(w_.completions(m.from, &m.send_ctx) == 1,
				  "message %zu (%zu B, %d to %d): %zu send completions", i, len,
				  m.from, m.to, w_.completions(m.from, &m.send_ctx));
			cr_assert_eq(w_.completions(m.to, &m.recv_ctx), 1,
				     "message %zu: %zu receive completions", i,
				     w_.completions(m.to, &m.recv_ctx));
			const Completion& s = w_.nodes[m.from].done[&m.send_ctx][0];
			const Completion& r = w_.nodes[m.to].done[&m.recv_ctx][0];
			cr_assert_eq(s.err, 0, "message %zu: send failed: %s", i,
				     fi_strerror(s.err));
			cr_assert_eq(r.err, 0, "message %zu: receive failed: %s", i,
				     fi_strerror(r.err));
			cr_assert_eq(r.len, len, "message %zu: %zu bytes received of %zu", i, r.len,
				     len);
			cr_assert(memcmp(m.in.data(), m.expect.data(), len) == 0,
				  "message %zu (%zu B, %d to %d): wrong data", i, len, m.from,
				  m.to);
			for (size_t g = len; g < m.in.size(); g++)
				cr_assert_eq(m.in[g], 0xA5, "message %zu: written past its end", i);
		}
	}

private:
	void scribble()
	{
		for (Message& m : t_)
			if (!m.scribbled && w_.completions(m.from, &m.send_ctx)) {
				std::fill(m.out.begin(), m.out.end(), 0xEE);
				m.scribbled = true;
			}
	}

	struct Message {
		int from = 0, to = 0;
		std::vector<uint8_t> expect, out, in;
		int send_ctx = 0, recv_ctx = 0;
		bool scribbled = false;
		fid_mr* mr = nullptr;
	};

	void post_recv(size_t i)
	{
		Message& m = t_[i];
		Node& n = w_.nodes[m.to];
		const fi_addr_t src = i % 2 ? FI_ADDR_UNSPEC : n.addr[m.from];
		ssize_t ret;
		while ((ret = fi_trecv(n.ep, m.in.data(), m.expect.size(), nullptr, src,
				       uint64_t(m.from), 0, &m.recv_ctx)) == -FI_EAGAIN)
			progress();
		cr_assert_eq(ret, 0, "fi_trecv: %s", fi_strerror(int(-ret)));
	}

	World& w_;
	std::vector<Message> t_;
};

void exchange(World& w, int a, int b, int rounds, uint64_t seed)
{
	Exchange(w, {{a, b}}, rounds, seed).complete_and_check();
}

// One join of the set of every node, made (or refused) by each node in turn.
class Joins {
public:
	explicit Joins(World& w) : w_(w), n_(w.nodes.size())
	{
		for (size_t i = 0; i < n_; i++) {
			Node& n = w.nodes[i];
			n.joined.erase(&ctx_[i]); // the same address served an earlier join
			fi_av_set_attr attr{};
			attr.count = n_;
			attr.start_addr = FI_ADDR_NOTAVAIL;
			attr.end_addr = FI_ADDR_NOTAVAIL;
			CHECK(fi_av_set(n.av, &attr, &sets_[i], nullptr));
			for (fi_addr_t a : n.addr)
				CHECK(fi_av_set_insert(sets_[i], a));
		}
	}
	~Joins()
	{
		for (size_t i = 0; i < n_; i++) {
			if (groups[i])
				fi_close(&groups[i]->fid);
			fi_close(&sets_[i]->fid);
		}
	}

	// fi_join_collective on node i: its result (no group when it fails).
	int start(int i)
	{
		fi_addr_t set_addr;
		CHECK(fi_av_set_addr(sets_[i], &set_addr));
		refused_[i] = fi_join_collective(w_.nodes[i].ep, set_addr, sets_[i], 0, &groups[i],
						 &ctx_[i]);
		if (refused_[i])
			groups[i] = nullptr;
		return refused_[i];
	}
	void start_all()
	{
		for (size_t i = 0; i < n_; i++)
			CHECK(start(int(i)));
	}
	// Closes node i's group now.
	int close(int i)
	{
		fid_mc* g = groups[i];
		groups[i] = nullptr;
		return fi_close(&g->fid);
	}
	// Node i's join event arrived; its error (0: joined).
	bool reported(int i) { return w_.nodes[i].joined.count(&ctx_[i]); }
	int error(int i) { return w_.nodes[i].joined.at(&ctx_[i]); }
	// Progress until each of `nodes` has its join event.
	bool run_until_reported(std::vector<int> nodes, std::chrono::milliseconds budget = 10s)
	{
		return w_.run_until(
			[&] {
				for (int i : nodes)
					if (!reported(i))
						return false;
				return true;
			},
			budget);
	}
	// The joins of nodes a and b must fail, within five seconds (by a stop
	// notice: FI_RCOLL_COLL_TIMEOUT_MS is a minute), because of `cause`.
	// Node `quiet` (whose join was refused or whose group was closed) must
	// get no event.
	void expect_failed(int a, int b, int quiet, const char* cause)
	{
		cr_assert(run_until_reported({a, b}, 5s),
			  "nodes %d and %d still wait for the join, although %s (%d: %s, %d: %s)",
			  a, b, cause, a, reported(a) ? "over" : "waiting", b,
			  reported(b) ? "over" : "waiting");
		cr_assert(error(a) && error(b), "a join completed although %s (%d: %s, %d: %s)",
			  cause, a, fi_strerror(error(a)), b, fi_strerror(error(b)));
		w_.run_until([] { return false; }, 50ms);
		cr_assert(!reported(quiet), "an event for node %d's join, although %s", quiet,
			  cause);
	}
	// Every node joins; each must succeed.
	void join_all()
	{
		start_all();
		std::vector<int> all;
		for (size_t i = 0; i < n_; i++)
			all.push_back(int(i));
		cr_assert(run_until_reported(all), "the join did not complete");
		for (size_t i = 0; i < n_; i++)
			cr_assert_eq(error(int(i)), 0, "node %zu's join failed: %s", i,
				     fi_strerror(error(int(i))));
	}

	std::array<fid_mc*, 8> groups{};

private:
	World& w_;
	size_t n_;
	std::array<fid_av_set*, 8> sets_{};
	std::array<int, 8> ctx_{};
	std::array<int, 8> refused_{};
};

// Allreduces of `counts` elements on the groups, one per node: every result
// must be exact.
void check_allreduces(World& w, const std::array<fid_mc*, 8>& groups,
		      std::initializer_list<size_t> counts)
{
	const int members = int(w.nodes.size());
	for (size_t count : counts) {
		std::vector<std::vector<uint64_t>> in(members), out(members);
		std::array<int, 8> ctx{};
		for (int i = 0; i < members; i++) {
			w.nodes[i].done.erase(&ctx[i]); // the same address served the last round
			in[i].resize(count);
			out[i].assign(count, 0);
			for (size_t k = 0; k < count; k++)
				in[i][k] = uint64_t(i + 1) * 1000003 + k;
			ssize_t ret;
			while ((ret = fi_allreduce(w.nodes[i].ep, in[i].data(), count, nullptr,
						   out[i].data(), nullptr, fi_mc_addr(groups[i]),
						   FI_UINT64, FI_SUM, 0, &ctx[i])) == -FI_EAGAIN)
				w.progress();
			cr_assert_eq(ret, 0, "fi_allreduce: %s", fi_strerror(int(-ret)));
		}
		cr_assert(w.run_until([&] {
			for (int i = 0; i < members; i++)
				if (!w.completions(i, &ctx[i]))
					return false;
			return true;
		}),
			  "allreduce of %zu elements never completed", count);
		const uint64_t ranks_sum = uint64_t(members) * (members + 1) / 2;
		for (int i = 0; i < members; i++) {
			cr_assert_eq(w.completions(i, &ctx[i]), 1);
			cr_assert_eq(w.nodes[i].done[&ctx[i]][0].err, 0, "member %d: %s", i,
				     fi_strerror(w.nodes[i].done[&ctx[i]][0].err));
			for (size_t k = 0; k < count; k++) {
				const uint64_t want = ranks_sum * 1000003 + members * k;
				cr_assert_eq(out[i][k], want,
					     "allreduce of %zu: member %d element %zu is %llu, "
					     "want %llu",
					     count, i, k, (unsigned long long)out[i][k],
					     (unsigned long long)want);
			}
		}
	}
}

// After a half-failed join: all nodes join the same list again, which must
// succeed, and run verified allreduces on the group.
void join_again(World& w)
{
	Joins again(w);
	again.join_all();
	check_allreduces(w, again.groups, {1, 3000});
}

} // namespace

TestSuite(glue, .timeout = 60);

// Completions come back in another order than their operations were
// posted: node 0's traffic to node 1 waits on the wire while its traffic to
// node 2 completes, and each delivery round reports its completions in
// reverse. Each operation must still finish once, after all of its parts,
// and no buffer may be reused while the core still has to take its data.
Test(glue, completions_out_of_order)
{
	World w(3);
	bool hold = false;
	fake_core::plan().reverse_completions = true;
	fake_core::plan().deliver = [&](const fake_core::Transfer& t) {
		return hold && t.from == 0 && t.to == 1 ? fake_core::Verdict::Hold
							: fake_core::Verdict::Deliver;
	};
	// Connected first: node 0's sends to node 1 then go into the core (and
	// wait there) rather than into its backlog while it connects.
	exchange(w, 0, 1, 1, 5);
	exchange(w, 0, 2, 1, 6);
	hold = true;
	Exchange x(w, {{0, 1}, {0, 2}}, 2, 11, true);
	cr_assert(x.run_until([&] { return x.sent_from_to(0, 2) && x.sent_from_to(2, 0); }),
		  "traffic between nodes 0 and 2 waited for node 1's");
	cr_assert(!x.sent_from_to(0, 1), "every send from node 0 to node 1 completed while held");
	hold = false;
	x.complete_and_check();
	cr_assert_gt(fake_core::stats().delivered, 100u);
}

// The core refuses two posts in three with -FI_EAGAIN (sends, rendezvous
// writes and reads alike): every message still arrives once, in order.
Test(glue, core_refuses_posts)
{
	World w(2);
	fake_core::plan().refuse = [](const fake_core::Transfer& t) { return t.ordinal % 3 != 0; };
	exchange(w, 0, 1, 2, 22);
	// Now one message at a time, on idle connections: a send, or a control
	// message of a rendezvous, then meets a refusal itself (two posts in
	// three) instead of queueing behind others.
	for (int i = 0; i < 24; i++) {
		const int from = i % 2, to = 1 - from;
		const size_t len = std::array<size_t, 3>{8, 3000, 70000}[i % 3];
		std::vector<uint8_t> out = payload(200 + i, len), in(len);
		int send_ctx = 0, recv_ctx = 0;
		Node &src = w.nodes[from], &dst = w.nodes[to];
		src.done.erase(&send_ctx); // the same addresses served the last message
		dst.done.erase(&recv_ctx);
		CHECK(fi_trecv(dst.ep, in.data(), len, nullptr,
			       i % 4 < 2 ? dst.addr[from] : FI_ADDR_UNSPEC, 7, 0, &recv_ctx));
		ssize_t ret;
		while ((ret = fi_tsend(src.ep, out.data(), len, nullptr, src.addr[to], 7,
				       &send_ctx)) == -FI_EAGAIN)
			w.progress();
		cr_assert_eq(ret, 0, "fi_tsend: %s", fi_strerror(int(-ret)));
		cr_assert(w.run_until([&] {
			return w.completions(from, &send_ctx) && w.completions(to, &recv_ctx);
		}),
			  "message %d (%zu B, %d to %d) never completed (send %zu, receive %zu)", i,
			  len, from, to, w.completions(from, &send_ctx),
			  w.completions(to, &recv_ctx));
		w.run_until([] { return false; }, 20ms); // a second completion would show now
		cr_assert_eq(w.completions(from, &send_ctx), 1, "message %d: send completed twice",
			     i);
		cr_assert_eq(w.completions(to, &recv_ctx), 1, "message %d: receive completed twice",
			     i);
		const Completion& sc = src.done[&send_ctx][0];
		const Completion& rc = dst.done[&recv_ctx][0];
		cr_assert(sc.err == 0 && rc.err == 0, "message %d: send %s, receive %s", i,
			  fi_strerror(sc.err), fi_strerror(rc.err));
		cr_assert_eq(rc.len, len, "message %d: %zu bytes received of %zu", i, rc.len, len);
		cr_assert(memcmp(in.data(), out.data(), len) == 0, "message %d (%zu B): wrong data",
			  i, len);
	}
	cr_assert_gt(fake_core::stats().refused, 50u);
}

// Node 1 dies while rendezvous transfers run both ways with node 0: node 0's
// receive from it and its send to it fail (no hang, no completion twice),
// and node 0 keeps working with node 2.
Test(glue, peer_fails_mid_rendezvous)
{
	World w(3);
	std::map<std::pair<int, int>, int> chunks;
	fake_core::plan().deliver = [&](const fake_core::Transfer& t) {
		const bool with_1 = (t.from == 1) != (t.to == 1);
		if (t.kind == fake_core::Kind::Send || !with_1)
			return fake_core::Verdict::Deliver;
		// The first two chunks land (written by the sender: the receives
		// name their source), the rest wait on the wire.
		return ++chunks[{t.from, t.to}] <= 2 ? fake_core::Verdict::Deliver
						     : fake_core::Verdict::Hold;
	};
	const size_t len = 1 << 20;
	std::vector<uint8_t> out = payload(5, len), in(len, 0);
	int send_ctx = 0, recv_ctx = 0, peer_send_ctx = 0, peer_recv_ctx = 0;
	std::vector<uint8_t> peer_in(len), peer_out = payload(6, len);
	Node &n0 = w.nodes[0], &n1 = w.nodes[1];
	CHECK(fi_trecv(n0.ep, in.data(), len, nullptr, n0.addr[1], 1, 0, &recv_ctx));
	CHECK(fi_tsend(n0.ep, out.data(), len, nullptr, n0.addr[1], 0, &send_ctx));
	CHECK(fi_trecv(n1.ep, peer_in.data(), len, nullptr, n1.addr[0], 0, 0, &peer_recv_ctx));
	CHECK(fi_tsend(n1.ep, peer_out.data(), len, nullptr, n1.addr[0], 1, &peer_send_ctx));
	cr_assert(w.run_until([&] {
		return chunks[{0, 1}] > 2 && chunks[{1, 0}] > 2;
	}),
		  "the rendezvous transfers did not start (chunks 0->1: %d, 1->0: %d)",
		  chunks[{0, 1}], chunks[{1, 0}]);

	fake_core::kill(1);
	w.nodes[1].alive = false;
	cr_assert(w.run_until([&] {
		return w.completions(0, &send_ctx) && w.completions(0, &recv_ctx);
	}),
		  "node 0's operations with the dead node never completed (send %zu, receive %zu)",
		  w.completions(0, &send_ctx), w.completions(0, &recv_ctx));
	w.run_until([] { return false; }, 200ms); // nothing more may come
	cr_assert_eq(w.completions(0, &send_ctx), 1);
	cr_assert_eq(w.completions(0, &recv_ctx), 1);
	cr_assert_neq(n0.done[&send_ctx][0].err, 0, "the send to the dead node succeeded");
	cr_assert_neq(n0.done[&recv_ctx][0].err, 0, "the receive from the dead node succeeded");

	fake_core::plan().deliver = nullptr;
	exchange(w, 0, 2, 1, 33);
}

// Nodes 0 and 1 send to each other before either has progressed: both
// connect at once. One connection must survive (the other request is
// refused), and it must carry every message both ways.
Test(glue, simultaneous_connect)
{
	World w(2);
	std::vector<uint8_t> a = payload(1, 64), b = payload(2, 64), a_in(64), b_in(64);
	int ctx[4] = {};
	Node &n0 = w.nodes[0], &n1 = w.nodes[1];
	CHECK(fi_trecv(n0.ep, a_in.data(), 64, nullptr, n0.addr[1], 1, 0, &ctx[0]));
	CHECK(fi_trecv(n1.ep, b_in.data(), 64, nullptr, n1.addr[0], 0, 0, &ctx[1]));
	CHECK(fi_tsend(n0.ep, a.data(), 64, nullptr, n0.addr[1], 0, &ctx[2]));
	CHECK(fi_tsend(n1.ep, b.data(), 64, nullptr, n1.addr[0], 1, &ctx[3]));
	cr_assert_eq(fake_core::stats().connects, 2u, "both sides must have connected at once");
	cr_assert(w.run_until([&] {
		return w.completions(0, &ctx[0]) && w.completions(1, &ctx[1]) &&
		       w.completions(0, &ctx[2]) && w.completions(1, &ctx[3]);
	}),
		  "the first messages never completed");
	cr_assert(memcmp(a_in.data(), b.data(), 64) == 0 && memcmp(b_in.data(), a.data(), 64) == 0,
		  "wrong data");
	cr_assert_eq(fake_core::stats().rejects, 1u, "one of the two requests must be refused");
	cr_assert_eq(fake_core::connections_between(0, 1), 1u);
	cr_assert_eq(fake_core::connections_between(1, 0), 1u);
	exchange(w, 0, 1, 1, 44);
	cr_assert_eq(fake_core::stats().connects, 2u, "a later message connected again");
	cr_assert_eq(fake_core::connections_between(0, 1), 1u);
}

// A collective over the same core: the members join and run allreduces of
// 8 B to 1 MiB (RDMA writes into each other's group buffers, each followed by
// its ARRIVAL message) while the core refuses every other post and reports each
// round's completions in reverse. Every result must be exact.
Test(glue, collective_over_refusing_reordering_core)
{
	const int members = 3;
	World w(members, true);
	fake_core::plan().reverse_completions = true;
	fake_core::plan().refuse = [](const fake_core::Transfer& t) { return t.ordinal % 2 == 0; };
	Joins join(w);
	join.join_all();
	check_allreduces(w, join.groups, {1, 512, 20000, size_t(1) << 17});
	cr_assert_gt(fake_core::stats().refused, 10u);
}

// Under manual progress an application may stop calling rcoll once its
// collective completed: an MPI goes on into calls of its own. So a member's
// call completes only once everything it sent for it left the process. The
// core holds the root's traffic (its connection full): the root's broadcast
// stays incomplete however often it progresses, and completes, with the
// member's, once the core lets the traffic go. (Before, an 8 B broadcast's
// root completed at once, its message still held: the member then waited
// for a progress call of the root's that an MPI never makes.)
Test(glue, collective_completes_once_its_messages_left)
{
	World w(2, true);
	Joins join(w);
	join.join_all();
	bool hold = false;
	fake_core::plan().deliver = [&](const fake_core::Transfer& t) {
		return hold && t.from == 0 ? fake_core::Verdict::Hold : fake_core::Verdict::Deliver;
	};
	std::array<std::array<int, 2>, 3> contexts{}; // one pair per round: done[] keys on them
	int round = 0;
	for (size_t bytes : {size_t(8), size_t(4096), size_t(1) << 17}) {
		std::array<int, 2>& ctx = contexts[round++];
		std::vector<uint8_t> data = payload(round, bytes), into(bytes, 0);
		hold = true;
		for (int node : {1, 0}) {
			void* buf = node == 0 ? data.data() : into.data();
			ssize_t ret;
			while ((ret = fi_broadcast(w.nodes[node].ep, buf, bytes, nullptr,
						   fi_mc_addr(join.groups[node]),
						   w.nodes[node].addr[0], FI_UINT8, 0,
						   &ctx[node])) == -FI_EAGAIN)
				w.progress();
			cr_assert_eq(ret, 0, "fi_broadcast on node %d: %s", node,
				     fi_strerror(int(-ret)));
		}
		w.run_until([&] { return w.completions(0, &ctx[0]) > 0; }, 200ms);
		cr_assert_eq(w.completions(0, &ctx[0]), 0u,
			     "the root's %zu B broadcast completed while the core still held what "
			     "it sent",
			     bytes);
		hold = false;
		cr_assert(w.run_until([&] {
			return w.completions(0, &ctx[0]) && w.completions(1, &ctx[1]);
		}),
			  "the %zu B broadcast did not complete once the core let its traffic go",
			  bytes);
		for (int node = 0; node < 2; node++)
			cr_assert_eq(w.nodes[node].done[&ctx[node]][0].err, 0,
				     "node %d's %zu B broadcast failed", node, bytes);
		cr_assert(into == data, "the %zu B broadcast delivered other bytes", bytes);
	}
}

// So too for a join: a member whose join completed may stop calling in, so
// its join completes only once its records left. Node 1's record reaches
// node 0, then the core holds node 0's traffic: node 0 heard every record,
// but its own is still in the core, and its join must wait for it. Both
// joins complete once the core lets the record go. (Before, node 0's join
// completed as soon as its record was handed to the core.)
Test(glue, join_completes_once_its_records_left)
{
	World w(2, true);
	{
		Joins warmup(w); // connects the pair: the records go at once
		warmup.join_all();
	}
	bool hold = false;
	int from_1 = 0; // node 1's messages that reached node 0
	fake_core::plan().deliver = [&](const fake_core::Transfer& t) {
		if (hold && t.from == 0)
			return fake_core::Verdict::Hold;
		from_1 += t.from == 1 && t.to == 0 && t.kind == fake_core::Kind::Send;
		return fake_core::Verdict::Deliver;
	};
	Joins held(w);
	CHECK(held.start(1));
	cr_assert(w.run_until([&] { return from_1 > 0; }), "node 1's record did not reach node 0");
	hold = true;
	CHECK(held.start(0));
	w.run_until([&] { return held.reported(0); }, 200ms);
	cr_assert(!held.reported(0),
		  "node 0's join completed while the core still held its record");
	hold = false;
	cr_assert(held.run_until_reported({0, 1}),
		  "the joins did not complete once the core let node 0's record go");
	cr_assert_eq(held.error(0), 0, "node 0's join failed: %s", fi_strerror(held.error(0)));
	cr_assert_eq(held.error(1), 0, "node 1's join failed: %s", fi_strerror(held.error(1)));
	fake_core::plan().deliver = nullptr; // before `hold` goes
}

// And a join whose record could not go fails, although this member heard
// every record: the member it was for would wait for it until its join
// timed out. Node 1's record reaches node 0; node 0's record to node 1 is
// refused (-FI_EAGAIN, so it waits in the backlog), and the retry fails as
// on a broken connection. (Before, node 0's join completed in the progress
// call whose retry failed, ahead of the peer's failure.)
Test(glue, join_fails_when_its_record_could_not_go)
{
	World w(2, true);
	{
		Joins warmup(w);
		warmup.join_all();
	}
	int from_1 = 0;
	fake_core::plan().deliver = [&](const fake_core::Transfer& t) {
		from_1 += t.from == 1 && t.to == 0 && t.kind == fake_core::Kind::Send;
		return fake_core::Verdict::Deliver;
	};
	Joins broken(w);
	CHECK(broken.start(1));
	cr_assert(w.run_until([&] { return from_1 > 0; }), "node 1's record did not reach node 0");
	auto node_0_sends = [](const fake_core::Transfer& t) {
		return t.from == 0 && t.kind == fake_core::Kind::Send;
	};
	fake_core::plan().refuse = node_0_sends;
	const uint64_t refused = fake_core::stats().refused;
	CHECK(broken.start(0));
	cr_assert_gt(fake_core::stats().refused, refused, "node 0's record was not refused");
	fake_core::plan().refuse = nullptr;
	fake_core::plan().fail = [&](const fake_core::Transfer& t) {
		return node_0_sends(t) ? -FI_EIO : 0;
	};
	cr_assert(broken.run_until_reported({0}), "node 0's join never ended");
	cr_assert_neq(broken.error(0), 0,
		      "node 0's join completed although its record to node 1 never left");
	cr_assert(broken.run_until_reported({1}, 5s), "node 1 still waits for node 0's record");
	cr_assert_neq(broken.error(1), 0, "node 1's join completed without node 0's record");
	fake_core::reset();
}

// A buffer that a call only reads from is registered at the first write
// that needs it: a broadcast root's, past the eager limit, once its member
// shipped the key to its own buffer. When that registration fails, the group
// must fail on every member, promptly, as when the core refuses a write: the
// member is not left waiting for the group's timeout, and the root does not
// end its call while the member's key is out.
Test(glue, late_registration_failure_fails_the_group)
{
	World w(2, true);
	Joins join(w);
	join.join_all();
	const size_t bytes = size_t(1) << 20;
	std::vector<uint8_t> data = payload(7, bytes), into(bytes, 0);
	std::array<int, 2> ctx{};
	auto post = [&](int node, void* buf) {
		ssize_t ret;
		while ((ret = fi_broadcast(w.nodes[node].ep, buf, bytes, nullptr,
					   fi_mc_addr(join.groups[node]), w.nodes[node].addr[0],
					   FI_UINT8, 0, &ctx[node])) == -FI_EAGAIN)
			w.progress();
		cr_assert_eq(ret, 0, "fi_broadcast on node %d: %s", node, fi_strerror(int(-ret)));
	};
	post(1, into.data()); // registers its buffer and ships the key
	fake_core::plan().refuse_registration = [](size_t) { return true; };
	post(0, data.data());
	const bool ended = w.run_until(
		[&] { return w.completions(0, &ctx[0]) && w.completions(1, &ctx[1]); }, 10s);
	fake_core::plan().refuse_registration = nullptr;
	cr_assert(ended,
		  "a broadcast still waits after the root's registration failed (root: %s, "
		  "member: %s)",
		  w.completions(0, &ctx[0]) ? "over" : "waiting",
		  w.completions(1, &ctx[1]) ? "over" : "waiting");
	cr_assert_gt(fake_core::stats().refused_registrations, 0u);
	for (int node = 0; node < 2; node++)
		cr_assert_neq(w.nodes[node].done[&ctx[node]][0].err, 0,
			      "node %d's broadcast succeeded without the root's data", node);
}

// Half-failed joins. Members recognise a join by its member list and how
// many joins of that list they made before: a join that fails on one
// member must fail on every member, and use up its place in that count
// everywhere, or every later join of the list is out of step.

// Node 1's fi_join fails at once (the core refuses to register its group's
// scratch) while nodes 0 and 2 join the same list: theirs must fail too, by
// node 1's stop notice, and the next join of the list must succeed on all
// three.
Test(glue, join_refused_on_one_member)
{
	World w(3, true);
	{
		Joins first(w);
		CHECK(first.start(0));
		CHECK(first.start(2));
		fake_core::plan().refuse_registration = [](size_t) { return true; };
		const int refused = first.start(1);
		fake_core::plan().refuse_registration = nullptr;
		cr_assert_neq(refused, 0, "node 1's join went on without its scratch registered");
		first.expect_failed(0, 2, 1, "node 1's fi_join failed");
	}
	join_again(w);
}

// The core refuses node 1's join record to node 2 (a connection breaking
// under the post) after its record to node 0 left: node 1's fi_join fails,
// and so must the joins of nodes 0 and 2, although node 0 got every record
// (node 1's scratch is not to be written into). Then all three join again.
Test(glue, join_record_refused_by_core)
{
	World w(3, true);
	{
		Joins warmup(w); // connects every pair: the next records go at once
		warmup.join_all();
	}
	{
		Joins half(w);
		fake_core::plan().fail = [](const fake_core::Transfer& t) {
			return t.kind == fake_core::Kind::Send && t.from == 1 && t.to == 2 ? -FI_EIO
											   : 0;
		};
		const int refused = half.start(1);
		fake_core::plan().fail = nullptr;
		cr_assert_neq(refused, 0, "node 1's join went on without its record to node 2");
		cr_assert_gt(fake_core::stats().failed, 0u);
		CHECK(half.start(0));
		CHECK(half.start(2));
		half.expect_failed(0, 2, 1, "node 1's fi_join failed");
	}
	join_again(w);
}

// Node 0 closes its group while the join is still under way (before the
// others joined): the others' joins must fail rather than complete a group
// node 0 left, node 0 gets no event for the group it closed, and the next
// join of the list succeeds on all three.
Test(glue, group_closed_mid_join)
{
	World w(3, true);
	{
		Joins first(w);
		CHECK(first.start(0));
		w.run_until([] { return false; }, 20ms);
		CHECK(first.close(0));
		CHECK(first.start(1));
		CHECK(first.start(2));
		first.expect_failed(1, 2, 0, "node 0 closed its group");
	}
	join_again(w);
}
