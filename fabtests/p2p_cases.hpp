// Cases of rcoll_p2p_test and the small messaging vocabulary they share.
#pragma once

#include "common.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fabtests {

struct TestOptions {
	std::string provider = "rcoll";
	int many_peers_ranks = 17;
	bool quick = false; // fewer sizes and iterations, for a smoke run
};

struct P2pCase {
	std::string_view name;
	std::string_view checks; // what a PASS means, printed by --list
	int ranks;               // 0: TestOptions::many_peers_ranks
	std::chrono::seconds timeout;
	void (*run)(Bootstrap& boot, const TestOptions& options);
};

// Defined by the case files; listed in the order `all` runs them.
void case_pingpong_msg(Bootstrap&, const TestOptions&);
void case_pingpong_tagged(Bootstrap&, const TestOptions&);
void case_pingpong_thread_domain(Bootstrap&, const TestOptions&);
void case_pingpong_msg_cqdata(Bootstrap&, const TestOptions&);
void case_pingpong_tagged_cqdata(Bootstrap&, const TestOptions&);
void case_stream_msg(Bootstrap&, const TestOptions&);
void case_stream_tagged(Bootstrap&, const TestOptions&);
void case_stream_msg_cqdata(Bootstrap&, const TestOptions&);
void case_stream_tagged_cqdata(Bootstrap&, const TestOptions&);
void case_inject(Bootstrap&, const TestOptions&);
void case_unexpected_flood(Bootstrap&, const TestOptions&);
void case_many_peers(Bootstrap&, const TestOptions&);
void case_wildcard_tag(Bootstrap&, const TestOptions&);
void case_wildcard_source(Bootstrap&, const TestOptions&);
void case_peek_claim(Bootstrap&, const TestOptions&);
void case_directed_recv(Bootstrap&, const TestOptions&);
void case_truncation(Bootstrap&, const TestOptions&);
void case_truncation_recovery(Bootstrap&, const TestOptions&);
void case_cancel_recv(Bootstrap&, const TestOptions&);
void case_multi_recv(Bootstrap&, const TestOptions&);
void case_rma_write(Bootstrap&, const TestOptions&);
void case_rma_writedata(Bootstrap&, const TestOptions&);
void case_rma_read(Bootstrap&, const TestOptions&);
void case_rma_delivery(Bootstrap&, const TestOptions&);
void case_peer_killed(Bootstrap&, const TestOptions&);
void case_peer_closed(Bootstrap&, const TestOptions&);
void case_inject_then_close(Bootstrap&, const TestOptions&);
void case_node_service(Bootstrap&, const TestOptions&);
void case_node_service_refused(Bootstrap&, const TestOptions&);
void case_close_bound_eq(Bootstrap&, const TestOptions&);
void case_eq_read_while_closing(Bootstrap&, const TestOptions&);
void case_threads(Bootstrap&, const TestOptions&);
void case_tx_context_size(Bootstrap&, const TestOptions&);

// ---------------------------------------------------------------- messaging vocabulary

enum class Api { msg, tagged };

const char* api_name(Api api);

// One send or receive, described completely so both APIs share one path.
struct Transfer {
	Api api = Api::msg;
	void* buf = nullptr;
	size_t len = 0;
	void* desc = nullptr;
	fi_addr_t peer = FI_ADDR_UNSPEC;
	uint64_t tag = 0;
	uint64_t ignore = 0;             // receives only
	std::optional<uint64_t> cq_data; // sends only: fi_senddata / fi_tsenddata
};

// fi_send/fi_senddata/fi_tsend/fi_tsenddata, retrying on -FI_EAGAIN.
void post_send(Endpoint& ep, const Transfer& t, OpContext& ctx);
// fi_recv/fi_trecv, retrying on -FI_EAGAIN.
void post_recv(Endpoint& ep, const Transfer& t, OpContext& ctx);

// What a good receive completion must show.
struct ExpectedRecv {
	Api api = Api::msg;
	size_t len = 0;
	uint64_t tag = 0;
	std::optional<uint64_t> cq_data; // already masked to cq_data_size
	uint64_t seed = 0;               // payload pattern
};

// Checks status, flags (FI_RECV and FI_MSG/FI_TAGGED, FI_REMOTE_CQ_DATA iff
// expected), length, tag, CQ data, payload and the guard bytes after it.
void expect_recv(const OpContext& ctx, const ExpectedRecv& want, std::span<const uint8_t> buffer,
		 size_t guard_bytes, const std::string& what);
// Checks a send completion: no error, FI_SEND set.
void expect_send(const OpContext& ctx, const std::string& what);

// Control messages ride on their own tag so they never match data receives.
inline constexpr uint64_t kControlTag = 0x00C0'FFEE'0000'0000ULL;

// Small blocking helpers for control traffic (addresses, keys, acks).
class ControlChannel {
public:
	explicit ControlChannel(Endpoint& ep);
	void send(fi_addr_t peer, const void* data, size_t len, uint64_t tag_low = 0);
	// Receives exactly len bytes from any peer on kControlTag|tag_low.
	void recv(void* data, size_t len, uint64_t tag_low = 0);

private:
	Endpoint& ep_;
	RegisteredBuffer buffer_;
};

inline constexpr size_t kGuardBytes = 64;

// Message sizes of the transfer cases: 0, powers of two up to max and the
// odd sizes around common eager/rendezvous thresholds.
std::vector<size_t> transfer_sizes(size_t max_size);

std::string format_size(size_t bytes);

// Defects of the comparison stack that a case may tolerate, each named and
// explained (nullptr: hold the provider to the specification). The cases
// print the explanation, so a tolerated defect never reads as a plain PASS.
const char* known_defect(std::string_view provider, std::string_view aspect);

} // namespace fabtests
