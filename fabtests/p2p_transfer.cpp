// Data-integrity cases over two ranks: pingpong, windowed streaming and
// inject, for fi_send/fi_recv and fi_tsend/fi_trecv, with and without
// remote CQ data.
#include "p2p_cases.hpp"

#include <algorithm>
#include <cstring>

namespace fabtests {

namespace {

constexpr size_t kMaxSize = size_t{64} << 20;
constexpr size_t kQuickMaxSize = size_t{4} << 20;
// Bytes moved per size and direction: enough iterations for small
// messages, at least two for the largest, and a suite that stays short.
constexpr size_t kBytesPerSize = size_t{128} << 20;
constexpr uint64_t kDataTag = 0x5EED'0000ULL;

size_t iterations_for(size_t size, size_t max_iterations)
{
	return std::clamp<size_t>(kBytesPerSize / std::max<size_t>(size, 1), 2, max_iterations);
}

struct Mode {
	Api api;
	bool cq_data;
	// FI_THREAD_DOMAIN: this one thread serialises the domain's calls (a
	// provider may then skip locks; one with a thread of its own must not).
	fi_threading threading = FI_THREAD_UNSPEC;
};

std::string mode_name(Mode mode)
{
	return strfmt("%s%s%s", api_name(mode.api), mode.cq_data ? "+cqdata" : "",
		      mode.threading == FI_THREAD_DOMAIN ? " (FI_THREAD_DOMAIN)" : "");
}

// CQ data carries (iteration, size) so a completion reporting another
// message's data is caught; masked to the provider's cq_data_size.
uint64_t cq_data_for(const Endpoint& ep, size_t iteration, size_t size, int sender)
{
	return (uint64_t{0xDA7A} << 48 | uint64_t(sender) << 40 | uint64_t(iteration) << 32 |
		uint64_t(size & 0xffffffff)) &
	       ep.cq_data_mask();
}

void require_cq_data(const Endpoint& ep)
{
	if (ep.info().domain_attr->cq_data_size == 0)
		throw NotApplicable(strfmt("provider %s reports cq_data_size 0 (no remote CQ data)",
					   ep.provider_name().c_str()));
}

void run_pingpong(Bootstrap& boot, const TestOptions& options, Mode mode)
{
	EndpointConfig config{options.provider};
	config.threading = mode.threading;
	Endpoint ep(config);
	// rcoll keeps what is asked for; others may give more safety
	// (tcp;ofi_rxm answers FI_THREAD_SAFE).
	const fi_threading given = ep.info().domain_attr->threading;
	if (mode.threading != FI_THREAD_UNSPEC)
		expect(given == mode.threading ||
			       (given == FI_THREAD_SAFE && ep.provider_name() != "rcoll"),
		       "the domain was opened with threading %d, not the %d asked for", int(given),
		       int(mode.threading));
	if (mode.cq_data)
		require_cq_data(ep);
	const auto peers = ep.exchange_addresses(boot);
	const int rank = boot.rank();
	const fi_addr_t peer = peers[static_cast<size_t>(1 - rank)];
	const size_t max_size = options.quick ? kQuickMaxSize : kMaxSize;
	const auto sizes = transfer_sizes(max_size);

	RegisteredBuffer send_buffer(ep, max_size);
	RegisteredBuffer recv_buffer(ep, max_size + kGuardBytes);
	size_t messages = 0;

	for (size_t size : sizes) {
		const size_t iterations = iterations_for(size, options.quick ? 4 : 20);
		for (size_t i = 0; i < iterations; ++i) {
			// Rank 0 sends first; each side checks what it receives.
			for (int turn = 0; turn < 2; ++turn) {
				const int sender = turn;
				const uint64_t seed = make_seed(0xB1, size_t(sender), size, i);
				const uint64_t tag = kDataTag | (i & 0xffff);
				const auto data =
					mode.cq_data
						? std::optional(cq_data_for(ep, i, size, sender))
						: std::nullopt;
				const std::string what =
					strfmt("%s pingpong %s iteration %zu from rank %d",
					       mode_name(mode).c_str(), format_size(size).c_str(),
					       i, sender);
				if (rank == sender) {
					fill_pattern(send_buffer.bytes(0, size), seed);
					OpContext send_ctx;
					post_send(ep,
						  {mode.api, send_buffer.data(), size,
						   send_buffer.desc(), peer, tag, 0, data},
						  send_ctx);
					ep.wait_ok(send_ctx, what + " (send)");
					expect_send(send_ctx, what);
				} else {
					fill_guard(recv_buffer.bytes(size, kGuardBytes));
					OpContext recv_ctx;
					post_recv(ep,
						  {mode.api,
						   recv_buffer.data(),
						   size + kGuardBytes,
						   recv_buffer.desc(),
						   peer,
						   tag,
						   0,
						   {}},
						  recv_ctx);
					ep.wait_done(recv_ctx, what);
					expect_recv(recv_ctx, {mode.api, size, tag, data, seed},
						    recv_buffer.bytes(0, size + kGuardBytes),
						    kGuardBytes, what);
					++messages;
				}
			}
		}
	}
	boot.barrier();
	if (rank == 0)
		boot.note(strfmt("%s pingpong: %zu sizes 0 B..%s, %zu messages verified per rank "
				 "(payload, len, %sflags%s, guard)",
				 mode_name(mode).c_str(), sizes.size(),
				 format_size(max_size).c_str(), messages,
				 mode.api == Api::tagged ? "tag, " : "",
				 mode.cq_data ? ", cq data" : ""));
}

void run_stream(Bootstrap& boot, const TestOptions& options, Mode mode)
{
	Endpoint ep({options.provider});
	if (mode.cq_data)
		require_cq_data(ep);
	const auto peers = ep.exchange_addresses(boot);
	const bool sender = boot.rank() == 0;
	const fi_addr_t peer = peers[static_cast<size_t>(1 - boot.rank())];
	const size_t max_size = options.quick ? kQuickMaxSize : kMaxSize;
	const auto sizes = transfer_sizes(max_size);
	constexpr size_t kMaxWindow = 64;
	// At most ~2x the largest message is in flight, whatever the size.
	const size_t window_bytes = 2 * max_size;
	auto window_for = [&](size_t size) {
		return std::clamp<size_t>(window_bytes / std::max<size_t>(size, 1), 2, kMaxWindow);
	};
	auto stride_for = [](size_t size) { return (size + kGuardBytes + 63) / 64 * 64; };
	size_t region = 0;
	for (size_t size : sizes)
		region = std::max(region, window_for(size) * stride_for(size));

	RegisteredBuffer buffer(ep, region);
	OpContext ack_ctx;
	RegisteredBuffer ack_buffer(ep, 64);
	std::vector<OpContext> contexts(kMaxWindow);
	size_t messages = 0;

	for (size_t size : sizes) {
		const size_t window = window_for(size);
		const size_t stride = stride_for(size);
		const size_t iterations =
			std::clamp<size_t>(kBytesPerSize / std::max<size_t>(window * size, 1), 2,
					   options.quick ? 3 : 10);
		for (size_t i = 0; i < iterations; ++i) {
			const std::string round =
				strfmt("%s stream %s iteration %zu", mode_name(mode).c_str(),
				       format_size(size).c_str(), i);
			if (sender) {
				// Wait until the receiver has posted this window, then send
				// it back to back.
				post_recv(ep,
					  {Api::msg,
					   ack_buffer.data(),
					   64,
					   ack_buffer.desc(),
					   peer,
					   0,
					   0,
					   {}},
					  ack_ctx);
				ep.wait_ok(ack_ctx, round + " (receiver ready)");
				for (size_t k = 0; k < window; ++k) {
					uint8_t* slot = buffer.data() + k * stride;
					fill_pattern({slot, size}, make_seed(0x57, size, i, k));
					const auto data =
						mode.cq_data
							? std::optional(cq_data_for(
								  ep, i * kMaxWindow + k, size, 0))
							: std::nullopt;
					post_send(ep,
						  {mode.api, slot, size, buffer.desc(), peer,
						   kDataTag, 0, data},
						  contexts[k]);
				}
				for (size_t k = 0; k < window; ++k) {
					ep.wait_done(contexts[k], round);
					expect_send(contexts[k],
						    strfmt("%s send %zu", round.c_str(), k));
				}
			} else {
				for (size_t k = 0; k < window; ++k) {
					uint8_t* slot = buffer.data() + k * stride;
					fill_guard({slot + size, kGuardBytes});
					post_recv(ep,
						  {mode.api,
						   slot,
						   size + kGuardBytes,
						   buffer.desc(),
						   peer,
						   kDataTag,
						   0,
						   {}},
						  contexts[k]);
				}
				OpContext ready;
				post_send(ep,
					  {Api::msg,
					   ack_buffer.data(),
					   0,
					   ack_buffer.desc(),
					   peer,
					   0,
					   0,
					   {}},
					  ready);
				ep.wait_ok(ready, round + " (ready message)");
				// Same source, same tag: receives must complete with the
				// messages in the order they were sent (FI_ORDER_SAS).
				for (size_t k = 0; k < window; ++k) {
					const std::string what = strfmt("%s message %zu of %zu",
									round.c_str(), k, window);
					ep.wait_done(contexts[k], what);
					const auto data =
						mode.cq_data
							? std::optional(cq_data_for(
								  ep, i * kMaxWindow + k, size, 0))
							: std::nullopt;
					expect_recv(
						contexts[k],
						{mode.api, size, kDataTag, data,
						 make_seed(0x57, size, i, k)},
						{buffer.data() + k * stride, size + kGuardBytes},
						kGuardBytes, what);
					++messages;
				}
			}
		}
	}
	boot.barrier();
	if (!sender)
		boot.note(strfmt(
			"%s streaming: %zu sizes 0 B..%s, windows up to %zu, %zu messages verified "
			"in send order (payload, len, %sflags%s, guard)",
			mode_name(mode).c_str(), sizes.size(), format_size(max_size).c_str(),
			kMaxWindow, messages, mode.api == Api::tagged ? "tag, " : "",
			mode.cq_data ? ", cq data" : ""));
}

} // namespace

void case_pingpong_msg(Bootstrap& boot, const TestOptions& options)
{
	run_pingpong(boot, options, {Api::msg, false});
}
void case_pingpong_tagged(Bootstrap& boot, const TestOptions& options)
{
	run_pingpong(boot, options, {Api::tagged, false});
}
void case_pingpong_thread_domain(Bootstrap& boot, const TestOptions& options)
{
	run_pingpong(boot, options, {Api::tagged, false, FI_THREAD_DOMAIN});
}
void case_pingpong_msg_cqdata(Bootstrap& boot, const TestOptions& options)
{
	run_pingpong(boot, options, {Api::msg, true});
}
void case_pingpong_tagged_cqdata(Bootstrap& boot, const TestOptions& options)
{
	run_pingpong(boot, options, {Api::tagged, true});
}
void case_stream_msg(Bootstrap& boot, const TestOptions& options)
{
	run_stream(boot, options, {Api::msg, false});
}
void case_stream_tagged(Bootstrap& boot, const TestOptions& options)
{
	run_stream(boot, options, {Api::tagged, false});
}
void case_stream_msg_cqdata(Bootstrap& boot, const TestOptions& options)
{
	run_stream(boot, options, {Api::msg, true});
}
void case_stream_tagged_cqdata(Bootstrap& boot, const TestOptions& options)
{
	run_stream(boot, options, {Api::tagged, true});
}

// fi_inject, fi_injectdata, fi_tinject and fi_tinjectdata for every size up
// to inject_size. The source buffer is overwritten right after the call
// returns: inject promises the data was already copied.
void case_inject(Bootstrap& boot, const TestOptions& options)
{
	Endpoint ep({options.provider});
	const size_t limit = ep.inject_size();
	if (limit == 0)
		throw NotApplicable(
			strfmt("provider %s reports inject_size 0", ep.provider_name().c_str()));
	const bool has_cq_data = ep.info().domain_attr->cq_data_size > 0;
	const auto peers = ep.exchange_addresses(boot);
	const bool sender = boot.rank() == 0;
	const fi_addr_t peer = peers[static_cast<size_t>(1 - boot.rank())];

	std::vector<size_t> sizes{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, limit - 1, limit};
	std::erase_if(sizes, [&](size_t s) { return s > limit; });
	std::sort(sizes.begin(), sizes.end());
	sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());

	RegisteredBuffer buffer(ep, limit + kGuardBytes);
	RegisteredBuffer ack(ep, 64);
	size_t verified = 0;
	// The fi_inject family reports no completion; FI_INJECT on fi_sendmsg
	// and fi_tsendmsg only frees the buffer at once: those still complete.
	enum class Call {
		inject,
		injectdata,
		tinject,
		tinjectdata,
		sendmsg_inject,
		tsendmsg_inject
	};
	for (Call call : {Call::inject, Call::injectdata, Call::tinject, Call::tinjectdata,
			  Call::sendmsg_inject, Call::tsendmsg_inject}) {
		const bool with_data = call == Call::injectdata || call == Call::tinjectdata;
		if (with_data && !has_cq_data)
			continue;
		const bool completes =
			call == Call::sendmsg_inject || call == Call::tsendmsg_inject;
		const Api api = (call == Call::inject || call == Call::injectdata ||
				 call == Call::sendmsg_inject)
					? Api::msg
					: Api::tagged;
		static constexpr const char* kNames[] = {
			"fi_inject",      "fi_injectdata",         "fi_tinject",
			"fi_tinjectdata", "fi_sendmsg(FI_INJECT)", "fi_tsendmsg(FI_INJECT)"};
		const char* name = kNames[static_cast<int>(call)];
		for (size_t size : sizes) {
			const uint64_t seed = make_seed(0x1E, static_cast<uint64_t>(call), size);
			const uint64_t tag = kDataTag | size;
			const auto data = with_data ? std::optional((0x1EC7ULL << 32 | size) &
								    ep.cq_data_mask())
						    : std::nullopt;
			const std::string what = strfmt("%s of %zu B", name, size);
			if (sender) {
				fill_pattern(buffer.bytes(0, size), seed);
				OpContext send_ctx;
				iovec iov{buffer.data(), size};
				void* desc = buffer.desc();
				switch (call) {
				case Call::inject:
					FT_POST(ep, fi_inject(ep.ep(), buffer.data(), size, peer));
					break;
				case Call::injectdata:
					FT_POST(ep, fi_injectdata(ep.ep(), buffer.data(), size,
								  *data, peer));
					break;
				case Call::tinject:
					FT_POST(ep, fi_tinject(ep.ep(), buffer.data(), size, peer,
							       tag));
					break;
				case Call::tinjectdata:
					FT_POST(ep, fi_tinjectdata(ep.ep(), buffer.data(), size,
								   *data, peer, tag));
					break;
				case Call::sendmsg_inject: {
					const fi_msg msg{&iov, &desc, 1, peer, &send_ctx, 0};
					FT_POST(ep, fi_sendmsg(ep.ep(), &msg,
							       FI_INJECT | FI_COMPLETION));
					break;
				}
				case Call::tsendmsg_inject: {
					const fi_msg_tagged msg{&iov, &desc, 1,         peer,
								tag,  0,     &send_ctx, 0};
					FT_POST(ep, fi_tsendmsg(ep.ep(), &msg,
								FI_INJECT | FI_COMPLETION));
					break;
				}
				}
				std::memset(buffer.data(), 0xEE,
					    size); // inject must have copied already
				if (completes)
					ep.wait_ok(send_ctx, what + " completion");
				OpContext ack_ctx;
				post_recv(ep,
					  {Api::msg, ack.data(), 64, ack.desc(), peer, 0, 0, {}},
					  ack_ctx);
				ep.wait_ok(ack_ctx, what + " (receiver's ack)");
			} else {
				fill_guard(buffer.bytes(size, kGuardBytes));
				OpContext recv_ctx;
				post_recv(ep,
					  {api,
					   buffer.data(),
					   size + kGuardBytes,
					   buffer.desc(),
					   peer,
					   tag,
					   0,
					   {}},
					  recv_ctx);
				ep.wait_done(recv_ctx, what);
				expect_recv(recv_ctx, {api, size, tag, data, seed},
					    buffer.bytes(0, size + kGuardBytes), kGuardBytes, what);
				++verified;
				OpContext ack_ctx;
				post_send(ep, {Api::msg, ack.data(), 0, ack.desc(), peer, 0, 0, {}},
					  ack_ctx);
				ep.wait_ok(ack_ctx, what + " (ack)");
			}
		}
	}
	// inject generates no send completion: nothing may be left on the CQ.
	ep.progress();
	expect(ep.unsolicited().empty(),
	       "%zu unexpected completions without a context after inject",
	       ep.unsolicited().size());
	boot.barrier();
	if (!sender)
		boot.note(strfmt("fi_inject/fi_tinject%s and fi_(t)sendmsg(FI_INJECT): %zu "
				 "messages of 0..%zu B "
				 "(inject_size) verified, "
				 "source overwritten right after each call",
				 has_cq_data ? "/fi_injectdata/fi_tinjectdata"
					     : " (no cq data: *data variants "
					       "not applicable)",
				 verified, limit));
}

} // namespace fabtests

namespace fabtests {

// More sends than tx_attr->size outstanding: libfabric requires -FI_EAGAIN
// by then (the application's flow control), not a queue without bound.
// Rank 0 posts rendezvous-sized sends that rank 1 does not receive yet,
// until one returns -FI_EAGAIN; then rank 1 receives them all, verified.
void case_tx_context_size(Bootstrap& boot, const TestOptions& options)
{
	constexpr uint64_t kWarmTag = 1, kBase = 0x7C00'0000ULL;
	constexpr int kPosted = 0;
	Endpoint ep({options.provider});
	// Above the eager limit, where the provider tells it (rcoll does).
	const size_t kMessage = ep.buffered_limit(16 * 1024) + 4 * 1024;
	const auto peers = ep.exchange_addresses(boot);
	const fi_addr_t peer = peers[static_cast<size_t>(1 - boot.rank())];
	const size_t tx_size = ep.info().tx_attr->size;
	const size_t tries = tx_size + 64;
	expect(tx_size > 0 && tx_size <= 65536, "tx_attr->size is %zu", tx_size);
	RegisteredBuffer buffer(ep, tries * kMessage);
	std::vector<OpContext> ctx(tries);
	// A first message sets the connection up: nothing waits for it below.
	OpContext warm;
	if (boot.rank() == 0) {
		FT_POST(ep,
			fi_tsend(ep.ep(), buffer.data(), 1, buffer.desc(), peer, kWarmTag, &warm));
		ep.wait_ok(warm, "the first send");
		size_t posted = 0;
		ssize_t ret = 0;
		for (; posted < tries; posted++) {
			fill_pattern(buffer.bytes(posted * kMessage, kMessage),
				     make_seed(0x7C, posted));
			ret = fi_tsend(ep.ep(), buffer.data() + posted * kMessage, kMessage,
				       buffer.desc(), peer, kBase + posted, &ctx[posted]);
			if (ret == -FI_EAGAIN)
				break;
			expect(ret == 0, "fi_tsend #%zu: %s", posted, fi_strerror(int(-ret)));
			ep.progress(); // what can finish does: only tx_attr->size stops the sends
		}
		boot.signal_set(kPosted, posted + 1);
		expect(ret == -FI_EAGAIN && posted <= tx_size,
		       "%zu sends outstanding, tx_attr->size %zu, %s", posted, tx_size,
		       ret == -FI_EAGAIN ? "then -FI_EAGAIN" : "and no -FI_EAGAIN");
		for (size_t i = 0; i < posted; i++)
			ep.wait_ok(ctx[i], strfmt("send #%zu", i));
		// Room again: the next send goes.
		OpContext again;
		FT_POST(ep, fi_tsend(ep.ep(), buffer.data(), kMessage, buffer.desc(), peer,
				     kBase + tries, &again));
		ep.wait_ok(again, "a send after the others completed");
		boot.barrier();
		boot.note(strfmt("-FI_EAGAIN after %zu outstanding sends (tx_attr->size %zu); all "
				 "%zu verified at the receiver",
				 posted, tx_size, posted));
		return;
	}
	FT_POST(ep, fi_trecv(ep.ep(), buffer.data(), 1, buffer.desc(), peer, kWarmTag, 0, &warm));
	ep.wait_ok(warm, "the first receive");
	boot.signal_wait_at_least(kPosted, 1, [&] { ep.progress(); });
	const size_t posted = boot.signal_get(kPosted) - 1;
	for (size_t i = 0; i < posted; i++)
		FT_POST(ep, fi_trecv(ep.ep(), buffer.data() + i * kMessage, kMessage, buffer.desc(),
				     peer, kBase + i, 0, &ctx[i]));
	for (size_t i = 0; i < posted; i++) {
		ep.wait_ok(ctx[i], strfmt("receive #%zu", i));
		expect(ctx[i].entry.len == kMessage, "receive #%zu: %zu bytes", i,
		       size_t(ctx[i].entry.len));
		expect_pattern(buffer.bytes(i * kMessage, kMessage), make_seed(0x7C, i),
			       strfmt("message #%zu", i));
	}
	OpContext last;
	FT_POST(ep, fi_trecv(ep.ep(), buffer.data(), kMessage, buffer.desc(), peer, kBase + tries,
			     0, &last));
	ep.wait_ok(last, "the last receive");
	boot.barrier();
}

} // namespace fabtests
