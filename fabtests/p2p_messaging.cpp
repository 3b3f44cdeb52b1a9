// The messaging vocabulary shared by the rcoll_p2p_test cases.
#include "p2p_cases.hpp"

#include <algorithm>
#include <cstring>

namespace fabtests {

const char* api_name(Api api) { return api == Api::msg ? "msg" : "tagged"; }

void post_send(Endpoint& ep, const Transfer& t, OpContext& ctx)
{
	ctx.reset();
	if (t.api == Api::msg) {
		if (t.cq_data)
			FT_POST(ep, fi_senddata(ep.ep(), t.buf, t.len, t.desc, *t.cq_data, t.peer,
						&ctx));
		else
			FT_POST(ep, fi_send(ep.ep(), t.buf, t.len, t.desc, t.peer, &ctx));
	} else {
		if (t.cq_data)
			FT_POST(ep, fi_tsenddata(ep.ep(), t.buf, t.len, t.desc, *t.cq_data, t.peer,
						 t.tag, &ctx));
		else
			FT_POST(ep, fi_tsend(ep.ep(), t.buf, t.len, t.desc, t.peer, t.tag, &ctx));
	}
}

void post_recv(Endpoint& ep, const Transfer& t, OpContext& ctx)
{
	ctx.reset();
	if (t.api == Api::msg)
		FT_POST(ep, fi_recv(ep.ep(), t.buf, t.len, t.desc, t.peer, &ctx));
	else
		FT_POST(ep, fi_trecv(ep.ep(), t.buf, t.len, t.desc, t.peer, t.tag, t.ignore, &ctx));
}

void expect_recv(const OpContext& ctx, const ExpectedRecv& want, std::span<const uint8_t> buffer,
		 size_t guard_bytes, const std::string& what)
{
	expect(ctx.done, "%s: not completed", what.c_str());
	expect(ctx.error == 0, "%s: error completion: %s", what.c_str(),
	       describe_error(ctx).c_str());
	const auto& e = ctx.entry;
	const uint64_t kind = want.api == Api::msg ? FI_MSG : FI_TAGGED;
	expect((e.flags & FI_RECV) && (e.flags & kind), "%s: completion flags %s lack FI_RECV|%s",
	       what.c_str(), describe_flags(e.flags).c_str(),
	       want.api == Api::msg ? "FI_MSG" : "FI_TAGGED");
	expect(e.len == want.len, "%s: completion len %zu, sent %zu", what.c_str(), e.len,
	       want.len);
	if (want.api == Api::tagged)
		expect(e.tag == want.tag, "%s: completion tag 0x%llx, sent 0x%llx", what.c_str(),
		       static_cast<unsigned long long>(e.tag),
		       static_cast<unsigned long long>(want.tag));
	if (want.cq_data) {
		expect(e.flags & FI_REMOTE_CQ_DATA, "%s: FI_REMOTE_CQ_DATA missing from flags %s",
		       what.c_str(), describe_flags(e.flags).c_str());
		expect(e.data == *want.cq_data, "%s: cq data 0x%llx, sent 0x%llx", what.c_str(),
		       static_cast<unsigned long long>(e.data),
		       static_cast<unsigned long long>(*want.cq_data));
	} else {
		expect(!(e.flags & FI_REMOTE_CQ_DATA),
		       "%s: FI_REMOTE_CQ_DATA set but no data was sent", what.c_str());
	}
	expect(buffer.size() >= want.len + guard_bytes, "%s: buffer too small for the check",
	       what.c_str());
	expect_pattern(buffer.first(want.len), want.seed, what);
	expect_guard(buffer.subspan(want.len, guard_bytes), what + " (bytes past the message)");
}

void expect_send(const OpContext& ctx, const std::string& what)
{
	expect(ctx.done, "%s: not completed", what.c_str());
	expect(ctx.error == 0, "%s: error completion: %s", what.c_str(),
	       describe_error(ctx).c_str());
	expect(ctx.entry.flags & FI_SEND, "%s: send completion flags %s lack FI_SEND", what.c_str(),
	       describe_flags(ctx.entry.flags).c_str());
}

namespace {
constexpr size_t kControlBytes = 4096;
}

ControlChannel::ControlChannel(Endpoint& ep) : ep_(ep), buffer_(ep, 2 * kControlBytes) {}

void ControlChannel::send(fi_addr_t peer, const void* data, size_t len, uint64_t tag_low)
{
	expect(len <= kControlBytes, "control message of %zu bytes", len);
	std::memcpy(buffer_.data(), data, len);
	OpContext ctx;
	post_send(ep_,
		  {Api::tagged,
		   buffer_.data(),
		   len,
		   buffer_.desc(),
		   peer,
		   kControlTag | tag_low,
		   0,
		   {}},
		  ctx);
	ep_.wait_ok(ctx, "control send");
}

void ControlChannel::recv(void* data, size_t len, uint64_t tag_low)
{
	expect(len <= kControlBytes, "control message of %zu bytes", len);
	uint8_t* landing = buffer_.data() + kControlBytes;
	OpContext ctx;
	post_recv(ep_,
		  {Api::tagged,
		   landing,
		   kControlBytes,
		   buffer_.desc(),
		   FI_ADDR_UNSPEC,
		   kControlTag | tag_low,
		   0,
		   {}},
		  ctx);
	ep_.wait_ok(ctx, "control receive");
	expect(ctx.entry.len == len, "control message of %zu bytes, expected %zu", ctx.entry.len,
	       len);
	std::memcpy(data, landing, len);
}

std::vector<size_t> transfer_sizes(size_t max_size)
{
	std::vector<size_t> sizes{0};
	for (size_t s = 1; s <= max_size; s *= 2)
		sizes.push_back(s);
	// Around the usual eager / segment / rendezvous switch points.
	for (size_t s : {4095, 4097, 8191, 8193, 16383, 16385, 65535, 65537})
		if (s <= max_size)
			sizes.push_back(s);
	std::sort(sizes.begin(), sizes.end());
	sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
	return sizes;
}

std::string format_size(size_t bytes)
{
	if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
		return strfmt("%zu MiB", bytes >> 20);
	if (bytes >= 1024 && bytes % 1024 == 0)
		return strfmt("%zu KiB", bytes >> 10);
	return strfmt("%zu B", bytes);
}

const char* known_defect(std::string_view provider, std::string_view aspect)
{
	struct Defect {
		std::string_view provider_part;
		std::string_view aspect;
		const char* explanation;
	};
	static constexpr Defect kDefects[] = {
		{"ofi_rxm", "truncation-lengths",
		 "libfabric 1.17 ofi_rxm fills FI_ETRUNC entries with len 0 and olen 0 when tcp "
		 "places data "
		 "directly, and len = message size with FI_OFI_RXM_ENABLE_DYN_RBUF=0"},
		{"ofi_rxm", "truncation-recovery",
		 "libfabric 1.17 tcp tears the connection down on a truncated receive, so "
		 "ofi_rxm's next send "
		 "to that peer may fail with FI_ENOTCONN"},
		{"ofi_rxm", "discard-rendezvous",
		 "libfabric 1.17 ofi_rxm mishandles FI_CLAIM|FI_DISCARD of a rendezvous message: "
		 "the sender's "
		 "send never completes, and the next receive of that tag may complete with the "
		 "discarded "
		 "message's length and no data"},
		{"ofi_rxm", "multi-recv-cancel",
		 "libfabric 1.17 ofi_rxm cancels a multi-receive buffer with an FI_ECANCELED entry "
		 "but never reports its release (FI_MULTI_RECV)"},
		{"ofi_rxm", "multi-recv-truncation",
		 "libfabric 1.17 ofi_rxm reports a message truncated into a multi-receive buffer "
		 "without FI_MULTI_RECV, so that buffer's release is never reported"},
		{"ofi_rxm", "multi-recv-large",
		 "libfabric 1.17 ofi_rxm crashes closing an endpoint whose multi-receive buffers "
		 "took messages above its eager limit"},
		{"ofi_rxm", "killed-peer-sends",
		 "libfabric 1.17 ofi_rxm never completes rendezvous sends whose peer died"},
		{"ofi_rxm", "close-with-pending-send",
		 "libfabric 1.17 ofi_rxm fails to close (-FI_EBUSY) and then crashes when an "
		 "endpoint closes with a "
		 "rendezvous send pending"},
		{"ofi_rxm", "closed-peer-directed-recv",
		 "libfabric 1.17 ofi_rxm never completes a receive directed at a peer that has "
		 "closed"},
		{"ofi_rxm", "inject-write-delivery",
		 "libfabric 1.17 ofi_rxm's fi_inject_write with a write counter drops the "
		 "endpoint's FI_DELIVERY_COMPLETE: the counter counts the write once it has left"},
		{"ofi_rxm", "refused-sends",
		 "libfabric 1.17 ofi_rxm answers -FI_EAGAIN for ever to sends to an address where "
		 "nothing listens"},
	};
	for (const auto& defect : kDefects)
		if (defect.aspect == aspect &&
		    provider.find(defect.provider_part) != std::string_view::npos)
			return defect.explanation;
	return nullptr;
}

} // namespace fabtests
