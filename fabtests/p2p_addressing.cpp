// Addressing cases: clients that find their server by node and service
// alone, as libfabric's own fabtests and most applications do.
#include "p2p_cases.hpp"

#include <algorithm>
#include <cstring>

namespace fabtests {

namespace {

constexpr uint64_t kLargeTag = 0x5e'0000;
constexpr size_t kLargeBytes = size_t{1} << 20; // past any eager limit

uint16_t shared_port(Bootstrap& boot)
{
	uint16_t port = boot.rank() == 0 ? unused_tcp_port() : 0;
	const auto ports = boot.allgather({reinterpret_cast<const uint8_t*>(&port), sizeof(port)});
	std::memcpy(&port, ports[0].data(), sizeof(port));
	return port;
}

fi_addr_t insert_resolved_destination(Endpoint& ep, const std::string& where)
{
	const fi_info& info = ep.info();
	expect(info.dest_addr != nullptr && info.dest_addrlen > 0,
	       "fi_getinfo(%s) gave no dest_addr (dest_addrlen %zu)", where.c_str(),
	       info.dest_addrlen);
	return ep.insert_address({static_cast<const uint8_t*>(info.dest_addr), info.dest_addrlen});
}

// A client: tells the server its name (fabtests' ft_init_av does the same),
// takes the answer, sends a rendezvous-sized message, and checks that the
// server's own name and fi_av_insertsvc now map to the entry node:service
// made.
void node_service_client(Bootstrap& boot, Endpoint& ep, const std::string& node,
			 const std::string& service, const std::vector<std::vector<uint8_t>>& names)
{
	const std::string where = node + ":" + service;
	const fi_addr_t server = insert_resolved_destination(ep, where);
	RegisteredBuffer buffer(ep, kLargeBytes);
	const auto name = ep.local_address();
	std::memcpy(buffer.data(), name.data(), name.size());
	OpContext send_ctx, reply_ctx, large_ctx;
	post_send(ep, {Api::msg, buffer.data(), name.size(), buffer.desc(), server, 0, 0, {}},
		  send_ctx);
	ep.wait_ok(send_ctx, "send of our name to " + where);

	uint64_t reply = 0;
	post_recv(ep, {Api::msg, buffer.data(), sizeof(reply), buffer.desc(), server, 0, 0, {}},
		  reply_ctx);
	ep.wait_ok(reply_ctx, "the server's reply");
	std::memcpy(&reply, buffer.data(), sizeof(reply));
	expect(reply_ctx.entry.len == sizeof(reply) && reply == static_cast<uint64_t>(boot.rank()),
	       "the server's reply is %zu bytes, value %llu; rank %d expected", reply_ctx.entry.len,
	       static_cast<unsigned long long>(reply), boot.rank());

	auto large = buffer.bytes(0, kLargeBytes);
	fill_pattern(large, make_seed(static_cast<uint64_t>(boot.rank()), kLargeTag));
	post_send(ep,
		  {Api::tagged,
		   large.data(),
		   kLargeBytes,
		   buffer.desc(),
		   server,
		   kLargeTag + static_cast<uint64_t>(boot.rank()),
		   0,
		   {}},
		  large_ctx);
	ep.wait_ok(large_ctx,
		   strfmt("%s send to %s", format_size(kLargeBytes).c_str(), where.c_str()));

	const fi_addr_t by_name = ep.insert_address(names[0]);
	expect(by_name == server,
	       "the server's fi_getname address went to fi_addr %llu, its node:service one to %llu",
	       static_cast<unsigned long long>(by_name), static_cast<unsigned long long>(server));
	fi_addr_t by_service = FI_ADDR_NOTAVAIL;
	const int inserted =
		fi_av_insertsvc(ep.av(), node.c_str(), service.c_str(), &by_service, 0, nullptr);
	expect(inserted == 1 && by_service == server,
	       "fi_av_insertsvc(%s) returned %d, fi_addr %llu; %llu expected", where.c_str(),
	       inserted, static_cast<unsigned long long>(by_service),
	       static_cast<unsigned long long>(server));
}

void node_service_server(Bootstrap& boot, Endpoint& ep,
			 const std::vector<std::vector<uint8_t>>& names)
{
	RegisteredBuffer buffer(ep, kLargeBytes);
	for (int k = 1; k < boot.size(); ++k) {
		OpContext name_ctx, reply_ctx;
		post_recv(ep,
			  {Api::msg,
			   buffer.data(),
			   kAddressSlotBytes,
			   buffer.desc(),
			   FI_ADDR_UNSPEC,
			   0,
			   0,
			   {}},
			  name_ctx);
		ep.wait_ok(name_ctx, strfmt("client name %d", k));
		const std::vector<uint8_t> name(buffer.data(), buffer.data() + name_ctx.entry.len);
		const auto found = std::find(names.begin() + 1, names.end(), name);
		expect(found != names.end(),
		       "message %d is not a client's fi_getname address (%zu bytes)", k,
		       name.size());
		const auto client_rank = static_cast<uint64_t>(found - names.begin());
		const fi_addr_t client = ep.insert_address(name);
		std::memcpy(buffer.data(), &client_rank, sizeof(client_rank));
		post_send(ep,
			  {Api::msg,
			   buffer.data(),
			   sizeof(client_rank),
			   buffer.desc(),
			   client,
			   0,
			   0,
			   {}},
			  reply_ctx);
		ep.wait_ok(reply_ctx, strfmt("reply to rank %llu",
					     static_cast<unsigned long long>(client_rank)));
	}
	for (int r = 1; r < boot.size(); ++r) {
		OpContext ctx;
		auto large = buffer.bytes(0, kLargeBytes);
		post_recv(ep,
			  {Api::tagged,
			   large.data(),
			   kLargeBytes,
			   buffer.desc(),
			   FI_ADDR_UNSPEC,
			   kLargeTag + static_cast<uint64_t>(r),
			   0,
			   {}},
			  ctx);
		ep.wait_ok(ctx, strfmt("%s from rank %d", format_size(kLargeBytes).c_str(), r));
		expect(ctx.entry.len == kLargeBytes, "%zu bytes from rank %d", ctx.entry.len, r);
		expect_pattern(large, make_seed(static_cast<uint64_t>(r), kLargeTag),
			       strfmt("payload from rank %d", r));
	}
}

} // namespace

void case_node_service(Bootstrap& boot, const TestOptions& options)
{
	const std::string service = std::to_string(shared_port(boot));
	const std::string where = source_node() + ":" + service;
	EndpointConfig config{options.provider};
	if (boot.rank() == 0) {
		config.service = service;
	} else {
		config.dest_node = source_node();
		config.dest_service = service;
	}
	Endpoint ep(config);
	const auto names = boot.allgather(ep.local_address());
	if (boot.rank() == 0)
		node_service_server(boot, ep, names);
	else
		node_service_client(boot, ep, source_node(), service, names);
	boot.barrier();
	if (boot.rank() == 0)
		boot.note(strfmt(
			"%d clients reached the server at %s by node and service: name, reply and "
			"%s each; "
			"its fi_getname address and fi_av_insertsvc map to the same AV entry",
			boot.size() - 1, where.c_str(), format_size(kLargeBytes).c_str()));
}

void case_node_service_refused(Bootstrap& boot, const TestOptions& options)
{
	const std::string service = std::to_string(unused_tcp_port());
	const std::string where = source_node() + ":" + service;
	EndpointConfig config{options.provider};
	config.dest_node = source_node();
	config.dest_service = service;
	Endpoint ep(config);
	const fi_addr_t nobody = insert_resolved_destination(ep, where);
	RegisteredBuffer buffer(ep, 64);
	OpContext ctx;
	constexpr auto kBound = std::chrono::seconds(20);
	try {
		ep.post(
			"fi_send",
			[&] {
				return fi_send(ep.ep(), buffer.data(), 64, buffer.desc(), nobody,
					       &ctx);
			},
			std::source_location::current(), kBound);
		ep.wait_done(ctx, "send to " + where + ", where nothing listens", kBound);
	} catch (const CheckFailure& failure) {
		const char* defect = known_defect(options.provider, "refused-sends");
		if (!defect)
			throw;
		boot.note(strfmt("KNOWN DEFECT of %s reproduced (%s): %s", options.provider.c_str(),
				 defect, failure.what()));
		return;
	}
	expect(ctx.error != 0, "a send to %s, where nothing listens, completed without an error",
	       where.c_str());
	// An inject has no completion to report the failure: the call must.
	ssize_t rc = -FI_EAGAIN;
	const auto deadline = std::chrono::steady_clock::now() + kBound;
	while (rc == -FI_EAGAIN && std::chrono::steady_clock::now() < deadline) {
		rc = fi_inject(ep.ep(), buffer.data(), 8, nobody);
		ep.progress();
	}
	expect(rc != 0 && rc != -FI_EAGAIN, "fi_inject to %s, where nothing listens, returned %zd",
	       where.c_str(), rc);
	boot.note(strfmt(
		"a send to %s, where nothing listens, failed: %s; fi_inject returned %zd (%s)",
		where.c_str(), ctx.err_text.c_str(), rc, fi_strerror(static_cast<int>(-rc))));
}

} // namespace fabtests
