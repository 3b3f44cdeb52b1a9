// rcoll_p2p_test: point-to-point conformance cases for any FI_EP_RDM
// provider, each run in freshly forked ranks on this host.
//
//   rcoll_p2p_test [--prov NAME] [--ranks N] [--quick] CASE... | all
//   rcoll_p2p_test --list
//
// Prints one line per case: "PASS <case>: <what was checked>",
// "FAIL <case>: <what went wrong>" or "N/A <case>: <why it does not apply>".
// Exits 0 when no case failed.
#include "p2p_cases.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace fabtests;
using std::chrono::seconds;

const P2pCase kCases[] = {
	{"pingpong-msg",
	 "fi_send/fi_recv pingpong, 0 B..64 MiB incl. odd sizes: payload, len, flags, guard", 2,
	 seconds(180), case_pingpong_msg},
	{"pingpong-tagged",
	 "fi_tsend/fi_trecv pingpong, 0 B..64 MiB: payload, len, tag, flags, guard", 2,
	 seconds(180), case_pingpong_tagged},
	{"pingpong-thread-domain",
	 "as pingpong-tagged, the domain opened with FI_THREAD_DOMAIN (one thread serialises its "
	 "calls; with rcoll's progress thread beside it under TSan): the provider keeps that "
	 "threading",
	 2, seconds(180), case_pingpong_thread_domain},
	{"pingpong-msg-cqdata",
	 "fi_senddata pingpong: as pingpong-msg plus FI_REMOTE_CQ_DATA flag and data", 2,
	 seconds(180), case_pingpong_msg_cqdata},
	{"pingpong-tagged-cqdata",
	 "fi_tsenddata pingpong: as pingpong-tagged plus FI_REMOTE_CQ_DATA flag and data", 2,
	 seconds(180), case_pingpong_tagged_cqdata},
	{"stream-msg",
	 "windows of back-to-back fi_send, 0 B..64 MiB: every message intact and in send order", 2,
	 seconds(180), case_stream_msg},
	{"stream-tagged",
	 "windows of back-to-back fi_tsend: every message intact and in send order", 2,
	 seconds(180), case_stream_tagged},
	{"stream-msg-cqdata", "windows of fi_senddata: order, payload and per-message CQ data", 2,
	 seconds(180), case_stream_msg_cqdata},
	{"stream-tagged-cqdata", "windows of fi_tsenddata: order, payload and per-message CQ data",
	 2, seconds(180), case_stream_tagged_cqdata},
	{"inject",
	 "fi_inject/fi_injectdata/fi_tinject/fi_tinjectdata and fi_(t)sendmsg(FI_INJECT, which "
	 "completes) "
	 "up to inject_size, source reused at once",
	 2, seconds(60), case_inject},
	{"unexpected-flood",
	 "20,000 small + 16 large messages sent before any receive is posted: none lost, order "
	 "per source and tag",
	 3, seconds(180), case_unexpected_flood},
	{"many-peers",
	 "all-to-all among 17+ ranks (tagged small/large, untagged): every peer's data verified", 0,
	 seconds(240), case_many_peers},
	{"wildcard-tag",
	 "FI_ADDR_UNSPEC receives with tag ignore bits: right family, per-source order, decoys "
	 "untouched",
	 4, seconds(60), case_wildcard_tag},
	{"wildcard-source",
	 "fi_cq_readfrom names the sender of FI_ADDR_UNSPEC receives (needs FI_SOURCE)", 4,
	 seconds(60), case_wildcard_source},
	{"peek-claim",
	 "FI_PEEK (ENOMSG, non-consuming), FI_PEEK|FI_CLAIM + FI_CLAIM receive, "
	 "FI_CLAIM|FI_DISCARD, "
	 "FI_PEEK|FI_DISCARD",
	 2, seconds(60), case_peek_claim},
	{"directed-recv",
	 "FI_DIRECTED_RECV: a receive bound to one source ignores another source's message", 3,
	 seconds(60), case_directed_recv},
	{"truncation",
	 "oversized messages give FI_ETRUNC with fi_cq(3) len/olen, nothing written past the "
	 "buffer",
	 2, seconds(90), case_truncation},
	{"truncation-recovery",
	 "after each truncated receive the next message on that connection arrives intact", 2,
	 seconds(90), case_truncation_recovery},
	{"cancel-recv",
	 "fi_cancel of a posted receive gives FI_ECANCELED; the next message is unaffected", 2,
	 seconds(60), case_cancel_recv},
	{"multi-recv",
	 "FI_MULTI_RECV: eager, rendezvous and empty messages from 2 senders fill buffers end to "
	 "end in send order; release below FI_OPT_MIN_MULTI_RECV, repost, cancel, truncation",
	 3, seconds(120), case_multi_recv},
	{"rma-write",
	 "fi_write 1 B..16 MiB both ways, keys/addresses exchanged by message, guards checked", 2,
	 seconds(120), case_rma_write},
	{"rma-writedata",
	 "fi_writedata: target sees FI_REMOTE_WRITE|FI_REMOTE_CQ_DATA with the data in place", 2,
	 seconds(120), case_rma_writedata},
	{"rma-read", "fi_read 1 B..16 MiB both ways from registered remote buffers", 2,
	 seconds(120), case_rma_read},
	{"rma-delivery",
	 "FI_DELIVERY_COMPLETE writes (flag, op_flags, counted inject): "
	 "the data is in place when the initiator's completion is reported",
	 2, seconds(120), case_rma_delivery},
	{"peer-killed",
	 "SIGKILL a rank mid-transfer: survivor gets errors within 10 s, cancels, talks to a third "
	 "rank",
	 3, seconds(90), case_peer_killed},
	{"peer-closed",
	 "ranks send and close before any receive is posted: their eager messages arrive intact, "
	 "pending rendezvous and directed receives end in bounded time",
	 3, seconds(60), case_peer_closed},
	{"inject-then-close",
	 "a rank injects to a peer that is not accepting connections yet, then closes at once: "
	 "every message arrives",
	 2, seconds(60), case_inject_then_close},
	{"node-service",
	 "clients given only the server's node and service (fi_getinfo dest_addr) exchange "
	 "messages "
	 "with it; its fi_getname address and fi_av_insertsvc map to the same AV entry",
	 3, seconds(60), case_node_service},
	{"node-service-refused",
	 "a send to a node and service where nothing listens completes with an error, and an "
	 "inject returns one",
	 1, seconds(60), case_node_service_refused},
	{"close-bound-eq", "fi_close of an EQ still bound to an endpoint returns -FI_EBUSY", 1,
	 seconds(30), case_close_bound_eq},
	{"eq-read-while-closing",
	 "one thread waits in fi_eq_sread (which drives the endpoint bound to the EQ) while "
	 "another closes that endpoint, repeatedly: the close waits for the reader to leave "
	 "the endpoint, the reader goes on waiting on the EQ alone",
	 2, seconds(60), case_eq_read_while_closing},
	{"threads",
	 "4 application threads per rank send and receive 150 tagged messages each (8 B..70 KB) "
	 "on one endpoint at once: every payload verified",
	 2, seconds(120), case_threads},
	{"tx-context-size",
	 "sends beyond tx_attr->size outstanding return -FI_EAGAIN; every accepted one arrives "
	 "verified once the receiver posts its receives",
	 2, seconds(60), case_tx_context_size},
};

void usage(FILE* out)
{
	std::fprintf(out,
		     "usage: rcoll_p2p_test [--prov NAME] [--ranks N] [--quick] CASE... | all\n"
		     "       rcoll_p2p_test --list\n"
		     "  --prov NAME  libfabric provider (hints->fabric_attr->prov_name), default "
		     "\"rcoll\";\n"
		     "               e.g. \"tcp;ofi_rxm\" to check the tests against libfabric's "
		     "own stack\n"
		     "  --ranks N    ranks of the many-peers case (default 17)\n"
		     "  --quick      smaller sizes and fewer iterations\n"
		     "rcoll is found through FI_PROVIDER_PATH (the build tree's .libs).\n");
}

} // namespace

int main(int argc, char** argv)
{
	TestOptions options;
	std::vector<const P2pCase*> selected;
	for (int i = 1; i < argc; ++i) {
		const std::string_view arg = argv[i];
		if (arg == "--prov") {
			options.provider = option_value(i, argc, argv);
		} else if (arg == "--ranks") {
			options.many_peers_ranks = std::atoi(option_value(i, argc, argv));
			if (options.many_peers_ranks < 2 || options.many_peers_ranks > kMaxRanks) {
				std::fprintf(stderr, "--ranks must be 2..%d\n", kMaxRanks);
				return 2;
			}
		} else if (arg == "--quick") {
			options.quick = true;
		} else if (arg == "--list") {
			list_cases(kCases, 24);
			return 0;
		} else if (arg == "--help" || arg == "-h") {
			usage(stdout);
			return 0;
		} else if (!select_case(kCases, arg, selected)) {
			std::fprintf(stderr, "unknown case or option: %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (selected.empty()) {
		usage(stderr);
		return 2;
	}

	prefer_loopback_interfaces();
	CaseReport report;
	for (const P2pCase* c : selected) {
		const int ranks = c->ranks > 0 ? c->ranks : options.many_peers_ranks;
		const auto started = Clock::now();
		const LaunchResult result = launch_ranks(
			ranks, c->timeout, [&](Bootstrap& boot) { c->run(boot, options); });
		report.add(result, c->name, strfmt("%s, %d ranks", options.provider.c_str(), ranks),
			   std::chrono::duration<double>(Clock::now() - started).count());
	}
	return report.finish();
}
