// Several application threads use one endpoint at once (FI_THREAD_SAFE, the
// provider's default threading), with or without rcoll's own progress
// thread: every message arrives intact, each thread's in order.
#include "p2p_cases.hpp"

#include <atomic>
#include <thread>
#include <vector>

namespace fabtests {

namespace {

constexpr int kThreads = 4;
constexpr int kMessages = 150;

// One operation's context: any thread that reads its completion marks it.
struct Op {
	fi_context2 space{};
	std::atomic<int> state{0}; // 0 pending, 1 done, 2 failed
};

size_t size_of(int thread, int i)
{
	// Eager and rendezvous sizes, different per thread.
	static constexpr size_t kSizes[] = {8, 100, 4096, 20000, 70000};
	return kSizes[(thread + i) % std::size(kSizes)];
}

uint64_t tag_of(int thread, int i) { return uint64_t(thread) << 32 | uint64_t(i); }

// Reads completions until `op` finished; completions of other threads'
// operations are marked for them.
void wait(fid_cq* cq, Op& op, const Deadline& deadline)
{
	while (op.state.load(std::memory_order_acquire) == 0) {
		fi_cq_tagged_entry e[8];
		ssize_t n = fi_cq_read(cq, e, 8);
		for (ssize_t k = 0; k < n; k++)
			static_cast<Op*>(e[k].op_context)
				->state.store(1, std::memory_order_release);
		if (n == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			if (fi_cq_readerr(cq, &err, 0) == 1)
				static_cast<Op*>(err.op_context)
					->state.store(2, std::memory_order_release);
		}
		if (deadline.expired())
			throw CheckFailure("a threaded operation did not complete");
	}
	if (op.state.load() == 2)
		throw CheckFailure("a threaded operation completed with an error");
}

} // namespace

void case_threads(Bootstrap& boot, const TestOptions& options)
{
	EndpointConfig config{options.provider};
	config.caps |= FI_DIRECTED_RECV;
	Endpoint ep(config);
	const auto peers = ep.exchange_addresses(boot);
	const fi_addr_t peer = peers[1 - boot.rank()];
	std::vector<RegisteredBuffer> buffers;
	for (int t = 0; t < kThreads; t++)
		buffers.emplace_back(ep, 2 * 70000);
	boot.barrier();
	std::atomic<int> failures{0};
	std::vector<std::string> why(kThreads);
	const Deadline deadline(std::chrono::seconds(60));
	auto work = [&](int t) {
		try {
			RegisteredBuffer& b = buffers[size_t(t)];
			uint8_t* out = b.data();
			uint8_t* in = b.data() + 70000;
			for (int i = 0; i < kMessages; i++) {
				const size_t n = size_of(t, i);
				Op recv, send;
				FT_POST(ep, fi_trecv(ep.ep(), in, n, b.desc(), peer, tag_of(t, i),
						     0, &recv.space));
				fill_pattern({out, n}, make_seed(boot.rank(), t, i));
				FT_POST(ep, fi_tsend(ep.ep(), out, n, b.desc(), peer, tag_of(t, i),
						     &send.space));
				wait(ep.cq(), send, deadline);
				wait(ep.cq(), recv, deadline);
				std::vector<uint8_t> want(n);
				fill_pattern(want, make_seed(1 - boot.rank(), t, i));
				expect(std::equal(want.begin(), want.end(), in),
				       "thread %d message %d: payload differs", t, i);
			}
		} catch (const std::exception& e) {
			why[size_t(t)] = e.what();
			failures++;
		}
	};
	std::vector<std::thread> threads;
	for (int t = 0; t < kThreads; t++)
		threads.emplace_back(work, t);
	for (auto& th : threads)
		th.join();
	for (const std::string& w : why)
		expect(w.empty(), "%s", w.c_str());
	boot.barrier();
	if (boot.rank() == 0)
		boot.note(strfmt(
			"%d threads x %d tagged messages (8 B..70 KB) each way on one endpoint, "
			"verified",
			kThreads, kMessages));
}

} // namespace fabtests
