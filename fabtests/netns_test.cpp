// rcoll_netns_test: cases that need ranks on different "hosts", i.e. in
// different network namespaces (RCOLL_TEST_NETNS, see common.hpp), created
// by test/mp/netns-hosts.sh:
//
//   placement             every rank is in its namespace, bound to that
//                         namespace's NIC, and the bytes really cross it
//   silent-rndv-receiver  a rendezvous receiver's host goes silent (its link
//                         goes down: no FIN, no reset) mid-transfer
//   silent-rndv-sender    the same with the rendezvous sender's host
//   busy-peer             a rendezvous receiver computes for several probe
//                         intervals without calling into libfabric: it is
//                         probed, not declared dead, and the transfer ends well
//   slow-connect          the receiver's host drops connection requests for
//                         longer than the former connect timeout when the
//                         first message opens the connection: the connection
//                         is slow, not dead
//   connect-timeout       the same with FI_RCOLL_CONNECT_TIMEOUT_MS below the
//                         silence: the send fails within it, and a later one
//                         reconnects
//   silent-allreduce      a member's host goes silent inside a 16 MiB allreduce
//   silent-barrier        a member's host goes silent before it enters a barrier
//
//   rcoll_netns_test [--prov NAME] [--window S] [--coll-timeout-ms MS] [--probe-interval-ms MS]
//                    CASE... | all
//   rcoll_netns_test --list
//
// A silent host is the failure loopback cannot show: a killed process's
// kernel resets its connections at once, a host that lost its link sends
// nothing, and TCP notices only when it has unacknowledged data of its own,
// after tcp_retries2 retransmissions (about 15 minutes by default). A side
// that only waits has nothing unacknowledged until rcoll probes the silent
// peer (FI_RCOLL_PROBE_INTERVAL_MS). The collective cases hold rcoll to
// FI_RCOLL_COLL_TIMEOUT_MS; the point-to-point ones to TCP's give-up time
// (plus the probe interval on the waiting side) when it fits
// kLongestAssertedWait, and otherwise measure what the survivor sees and
// assert what must hold regardless.
//
// The victim pulls its own cable (clears IFF_UP on its interface); the
// survivor kills it once the case is decided and plugs the cable back in, so
// the namespaces can serve the next case.
#include "common.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <net/if.h>
#include <rdma/fi_collective.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace {

using namespace fabtests;
using std::chrono::milliseconds;
using std::chrono::seconds;

struct Options {
	std::string provider = "rcoll";
	seconds window{10};              // how long the point-to-point cases watch a silent peer
	milliseconds coll_timeout{2000}; // FI_RCOLL_COLL_TIMEOUT_MS for the collective cases
	milliseconds probe_interval{
		1000}; // FI_RCOLL_PROBE_INTERVAL_MS for the rendezvous cases (0: no probes)
};

struct NetnsCase {
	std::string_view name;
	std::string_view checks;
	int ranks; // 0: one per namespace
	void (*run)(Bootstrap& boot, const Options& options);
};

// ---------------------------------------------------------------- hosts

// Close-on-exit file descriptor.
class Fd {
public:
	explicit Fd(int fd) : fd_(fd) {}
	Fd(const Fd&) = delete;
	Fd& operator=(const Fd&) = delete;
	~Fd()
	{
		if (fd_ >= 0)
			close(fd_);
	}
	int get() const { return fd_; }

private:
	int fd_;
};

// Pulls (up = false) or plugs back (up = true) the cable of `interface` in
// network namespace `netns`. A helper thread does it: setns(CLONE_NEWNET)
// moves only the calling thread, so the rank's own namespace is untouched.
void set_link(const std::string& netns, const std::string& interface, bool up)
{
	std::string failure;
	std::thread worker([&] {
		Fd ns(open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC));
		if (ns.get() < 0 || setns(ns.get(), CLONE_NEWNET) != 0) {
			failure = strfmt("cannot enter network namespace %s: %s", netns.c_str(),
					 std::strerror(errno));
			return;
		}
		Fd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
		ifreq request{};
		std::snprintf(request.ifr_name, sizeof request.ifr_name, "%s", interface.c_str());
		if (sock.get() < 0 || ioctl(sock.get(), SIOCGIFFLAGS, &request) != 0) {
			failure = strfmt("SIOCGIFFLAGS on %s in %s: %s", interface.c_str(),
					 netns.c_str(), std::strerror(errno));
			return;
		}
		request.ifr_flags = static_cast<short>(up ? (request.ifr_flags | IFF_UP)
							  : (request.ifr_flags & ~IFF_UP));
		if (ioctl(sock.get(), SIOCSIFFLAGS, &request) != 0)
			failure = strfmt("SIOCSIFFLAGS %s %s in %s: %s", interface.c_str(),
					 up ? "up" : "down", netns.c_str(), std::strerror(errno));
	});
	worker.join();
	if (!failure.empty())
		throw CheckFailure(failure);
}

// The cases compare times taken in different processes: steady_clock is
// CLOCK_MONOTONIC, one clock for the whole machine.
uint64_t now_ns()
{
	return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
					     Clock::now().time_since_epoch())
					     .count());
}

double seconds_since(uint64_t then_ns) { return static_cast<double>(now_ns() - then_ns) / 1e9; }

// Linux abandons a connection whose data stays unacknowledged after
// tcp_retries2 retransmissions, counted as the time those take with the RTO
// doubling from TCP_RTO_MIN (200 ms) up to TCP_RTO_MAX (120 s):
// tcp_model_timeout() in net/ipv4/tcp_timer.c. The sysctl belongs to the
// network namespace, read here from this rank's.
struct TcpGiveUp {
	int retries2 = 15;
	double seconds = 0;
};

TcpGiveUp tcp_give_up()
{
	TcpGiveUp give_up;
	std::ifstream("/proc/sys/net/ipv4/tcp_retries2") >> give_up.retries2;
	constexpr double kRtoMin = 0.2;
	constexpr double kRtoMax = 120.0;
	const int doublings = static_cast<int>(std::log2(kRtoMax / kRtoMin)); // 9
	give_up.seconds = give_up.retries2 <= doublings
				  ? ((2 << give_up.retries2) - 1) * kRtoMin
				  : ((2 << doublings) - 1) * kRtoMin +
					    (give_up.retries2 - doublings) * kRtoMax;
	return give_up;
}

// TCP segments this rank's network namespace has received (InSegs in
// /proc/self/net/snmp, which follows the calling thread's namespace).
uint64_t tcp_segments_received()
{
	std::ifstream snmp("/proc/self/net/snmp");
	std::string names, values;
	while (std::getline(snmp, names) && std::getline(snmp, values)) {
		if (names.rfind("Tcp:", 0) != 0)
			continue;
		std::istringstream name_fields(names), value_fields(values);
		std::string name, value;
		while (name_fields >> name && value_fields >> value)
			if (name == "InSegs")
				return std::stoull(value);
	}
	throw CheckFailure("no Tcp InSegs in /proc/self/net/snmp");
}

// Every rank's placement, in rank order.
std::vector<HostPlacement> gather_placements(Bootstrap& boot)
{
	const HostPlacement& mine = host_placement();
	const std::string text = mine.netns + '\n' + mine.interface + '\n' + mine.address;
	const auto blobs =
		boot.allgather({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
	std::vector<HostPlacement> all;
	for (const auto& blob : blobs) {
		const std::string line(blob.begin(), blob.end());
		const size_t first = line.find('\n');
		const size_t second = line.find('\n', first + 1);
		all.push_back({line.substr(0, first), line.substr(first + 1, second - first - 1),
			       line.substr(second + 1)});
	}
	return all;
}

// Throws unless every rank named in `ranks` sits in a namespace of its own.
void expect_separate_hosts(const std::vector<HostPlacement>& placements,
			   std::initializer_list<int> ranks)
{
	for (int a : ranks)
		for (int b : ranks)
			if (a < b)
				expect(!placements[a].netns.empty() &&
					       placements[a].netns != placements[b].netns,
				       "ranks %d and %d share network namespace \"%s\": this case "
				       "needs them on different hosts",
				       a, b, placements[a].netns.c_str());
}

// Waits for `ranks` ranks (counted on `signal`) while driving progress: a
// rank whose own operations completed may still owe its peers progress.
void progressing_barrier(Bootstrap& boot, Endpoint& ep, int ranks, int signal)
{
	const auto count = static_cast<uint64_t>(ranks);
	const uint64_t before = boot.signal_get(signal);
	boot.signal_add(signal, 1);
	boot.signal_wait_at_least(signal, (before / count + 1) * count, [&] { ep.progress(); });
}

// ---------------------------------------------------------------- placement

constexpr size_t kPlacementBytes = 1 << 20;
constexpr int kPlacementBarrierSignal = 0;

// Every rank is in network namespace rank % hosts, bound to an address of
// that namespace's NIC (never loopback), and exchanges 1 MiB with every rank
// on another host; its NIC's counters must have grown by at least that much.
void case_placement(Bootstrap& boot, const Options& options)
{
	const int me = boot.rank();
	const HostPlacement& here = host_placement();
	struct stat joined {
	}, expected{};
	expect(stat("/proc/self/ns/net", &joined) == 0, "stat /proc/self/ns/net: %s",
	       std::strerror(errno));
	const std::string path = "/run/netns/" + namespace_of_rank(me);
	expect(stat(path.c_str(), &expected) == 0, "stat %s: %s", path.c_str(),
	       std::strerror(errno));
	expect(joined.st_ino == expected.st_ino && joined.st_dev == expected.st_dev,
	       "rank %d runs in network namespace inode %lu, not in %s (inode %lu)", me,
	       static_cast<unsigned long>(joined.st_ino), path.c_str(),
	       static_cast<unsigned long>(expected.st_ino));
	expect(here.address.rfind("127.", 0) != 0 && here.interface != "lo",
	       "rank %d is bound to loopback (%s on %s)", me, here.address.c_str(),
	       here.interface.c_str());
	const char* tcp_iface = std::getenv("FI_TCP_IFACE");
	expect(tcp_iface && here.interface == tcp_iface,
	       "FI_TCP_IFACE is %s, the rank's interface %s", tcp_iface ? tcp_iface : "(unset)",
	       here.interface.c_str());

	Endpoint ep({options.provider, FI_MSG | FI_TAGGED});
	const auto peers = ep.exchange_addresses(boot);
	const auto placements = gather_placements(boot);
	std::vector<int> remote;
	for (int r = 0; r < boot.size(); ++r) {
		const bool same_host = placements[r].netns == here.netns;
		expect(same_host == (placements[r].address == here.address),
		       "rank %d (%s, %s) and rank %d (%s, %s): one address per host, a different "
		       "one per host",
		       me, here.netns.c_str(), here.address.c_str(), r, placements[r].netns.c_str(),
		       placements[r].address.c_str());
		if (!same_host)
			remote.push_back(r);
	}
	expect(!remote.empty(), "rank %d has no peer on another host", me);

	// Everyone samples before anyone sends, so each delta covers all of it.
	const InterfaceCounters before = interface_counters(here.interface);
	progressing_barrier(boot, ep, boot.size(), kPlacementBarrierSignal);
	RegisteredBuffer outbox(ep, kPlacementBytes);
	RegisteredBuffer inbox(ep, remote.size() * kPlacementBytes);
	fill_pattern(outbox.bytes(), make_seed(0x9E7, me));
	std::vector<OpContext> recvs(remote.size()), sends(remote.size());
	for (size_t i = 0; i < remote.size(); ++i) {
		void* into = inbox.data() + i * kPlacementBytes;
		FT_POST(ep, fi_trecv(ep.ep(), into, kPlacementBytes, inbox.desc(), peers[remote[i]],
				     static_cast<uint64_t>(remote[i]), 0, &recvs[i]));
	}
	for (size_t i = 0; i < remote.size(); ++i)
		FT_POST(ep, fi_tsend(ep.ep(), outbox.data(), kPlacementBytes, outbox.desc(),
				     peers[remote[i]], static_cast<uint64_t>(me), &sends[i]));
	for (size_t i = 0; i < remote.size(); ++i) {
		const std::string what = strfmt("1 MiB between rank %d and rank %d on %s", me,
						remote[i], placements[remote[i]].netns.c_str());
		ep.wait_ok(sends[i], "send of " + what);
		ep.wait_ok(recvs[i], "receive of " + what);
		expect_pattern(inbox.bytes(i * kPlacementBytes, kPlacementBytes),
			       make_seed(0x9E7, remote[i]), what);
	}
	const InterfaceCounters after = interface_counters(here.interface);
	const uint64_t crossed = remote.size() * kPlacementBytes;
	expect(after.tx_bytes - before.tx_bytes >= crossed &&
		       after.rx_bytes - before.rx_bytes >= crossed,
	       "rank %d exchanged %llu bytes each way with other hosts, but %s counted only %llu "
	       "out and %llu in",
	       me, static_cast<unsigned long long>(crossed), here.interface.c_str(),
	       static_cast<unsigned long long>(after.tx_bytes - before.tx_bytes),
	       static_cast<unsigned long long>(after.rx_bytes - before.rx_bytes));
	progressing_barrier(boot, ep, boot.size(), kPlacementBarrierSignal);
	if (me == 0)
		boot.note(strfmt("%d ranks on %zu hosts, each bound to its namespace's %s; 1 MiB "
				 "each way per pair of hosts, "
				 "verified, and seen on the interface counters",
				 boot.size(), host_namespaces().size(), here.interface.c_str()));
}

// ---------------------------------------------------------------- silent rendezvous

constexpr int kSurvivor = 0;
constexpr int kVictim = 1;
constexpr int kThird = 2;
constexpr size_t kRendezvousBytes = 64u << 20; // far above any eager limit
constexpr uint64_t kRendezvousTag = 0x51E47;
constexpr uint64_t kAfterTag = 0xAF7E4;
constexpr int kFirstBytesSignal = 0;  // the receiver saw the payload start to land
constexpr int kCablePulledSignal = 1; // now_ns() when the victim's link went down
constexpr int kSurvivorDoneSignal = 2;
constexpr int kRendezvousBarrierSignal = 3;
// Longer waits than this are measured (with --window), not asserted.
constexpr seconds kLongestAssertedWait{60};

bool first_bytes_landed(const RegisteredBuffer& inbox, uint64_t seed)
{
	constexpr size_t kProbe = 64;
	return !find_pattern_mismatch(inbox.bytes(0, kProbe), seed).has_value();
}

void pull_own_cable(Bootstrap& boot, const HostPlacement& here)
{
	set_link(here.netns, here.interface, false);
	boot.signal_set(kCablePulledSignal, now_ns());
}

// What the survivor's pending operation did after the victim's host went
// silent. An error completion within TCP's give-up time (plus the probe
// interval when the survivor only waits, plus slack) passes. No completion
// at all passes only as a measurement (N/A) when the survivor had nothing
// for TCP to retransmit (probes disabled) or TCP would give up after the
// window; a successful completion of a transfer that cannot have finished
// fails.
struct SilentOutcome {
	bool ended = false;
	int error = 0;
	double after_seconds = 0;
	std::string text;
};

// Waits for `op` until `watch` after the cable was pulled.
SilentOutcome watch_silent_peer(Endpoint& ep, OpContext& op, seconds watch, uint64_t pulled_at)
{
	SilentOutcome outcome;
	const auto already = std::chrono::nanoseconds(now_ns() - pulled_at);
	const auto budget = watch - std::chrono::duration_cast<milliseconds>(already);
	try {
		ep.wait_done(op, "the transfer with the silent host",
			     std::max(budget, milliseconds(0)));
	} catch (const CheckFailure&) {
		outcome.after_seconds = seconds_since(pulled_at);
		return outcome;
	}
	outcome.ended = true;
	outcome.error = op.error;
	outcome.after_seconds = seconds_since(pulled_at);
	outcome.text = op.error ? describe_error(op) : "success";
	return outcome;
}

// After the silent host is dealt with, the survivor and the third rank (on
// a third host) exchange a verified message both ways: one dead peer must
// not wedge the endpoint.
void exchange_with_third(Bootstrap& boot, Endpoint& ep, const std::vector<fi_addr_t>& peers)
{
	const int me = boot.rank();
	const int other = me == kSurvivor ? kThird : kSurvivor;
	constexpr size_t kBytes = 256 << 10;
	RegisteredBuffer outbox(ep, kBytes), inbox(ep, kBytes);
	fill_pattern(outbox.bytes(), make_seed(0x7E1D, me));
	OpContext send, recv;
	FT_POST(ep, fi_trecv(ep.ep(), inbox.data(), kBytes, inbox.desc(), peers[other], kAfterTag,
			     0, &recv));
	FT_POST(ep, fi_tsend(ep.ep(), outbox.data(), kBytes, outbox.desc(), peers[other], kAfterTag,
			     &send));
	const std::string what = "256 KiB between survivor and third rank after the silent failure";
	ep.wait_ok(send, what);
	ep.wait_ok(recv, what);
	expect_pattern(inbox.bytes(), make_seed(0x7E1D, other), what);
}

// One byte each way between every pair of ranks, so that later waits do not
// include connection set-up.
void connect_every_pair(Bootstrap& boot, Endpoint& ep, const std::vector<fi_addr_t>& peers)
{
	const int me = boot.rank();
	RegisteredBuffer hello(ep, 2 * static_cast<size_t>(boot.size()));
	std::vector<OpContext> recvs(static_cast<size_t>(boot.size())), sends(recvs.size());
	for (int r = 0; r < boot.size(); ++r)
		if (r != me) {
			FT_POST(ep, fi_trecv(ep.ep(), hello.data() + r, 1, hello.desc(), peers[r],
					     kAfterTag, 0, &recvs[r]));
			FT_POST(ep, fi_tsend(ep.ep(), hello.data() + boot.size() + r, 1,
					     hello.desc(), peers[r], kAfterTag, &sends[r]));
		}
	for (int r = 0; r < boot.size(); ++r)
		if (r != me) {
			ep.wait_ok(sends[r], "connection set-up send");
			ep.wait_ok(recvs[r], "connection set-up receive");
		}
}

// Shared by both rendezvous cases: `victim_sends` picks which side of the
// rendezvous goes silent.
void silent_rendezvous(Bootstrap& boot, const Options& options, bool victim_sends)
{
	// Set before the provider reads its configuration (first fi_getinfo).
	setenv("FI_RCOLL_PROBE_INTERVAL_MS", std::to_string(options.probe_interval.count()).c_str(),
	       1);
	const int me = boot.rank();
	Endpoint ep({options.provider, FI_MSG | FI_TAGGED});
	const auto peers = ep.exchange_addresses(boot);
	const auto placements = gather_placements(boot);
	expect_separate_hosts(placements, {kSurvivor, kVictim, kThird});

	// Connect every pair that will talk before anyone goes silent.
	connect_every_pair(boot, ep, peers);
	progressing_barrier(boot, ep, boot.size(), kRendezvousBarrierSignal);

	const bool sender = (me == kVictim) == victim_sends;
	const int partner = me == kVictim ? kSurvivor : kVictim;
	const uint64_t seed = make_seed(0x5E1, victim_sends);
	if (me == kVictim || me == kSurvivor) {
		RegisteredBuffer buffer(ep, kRendezvousBytes);
		OpContext op;
		if (sender) {
			fill_pattern(buffer.bytes(), seed);
			FT_POST(ep, fi_tsend(ep.ep(), buffer.data(), kRendezvousBytes,
					     buffer.desc(), peers[partner], kRendezvousTag, &op));
		} else {
			FT_POST(ep,
				fi_trecv(ep.ep(), buffer.data(), kRendezvousBytes, buffer.desc(),
					 peers[partner], kRendezvousTag, 0, &op));
		}
		// The receiver watches its buffer: the first bytes of the payload
		// mean the rendezvous handshake is over and the data is moving.
		if (!sender) {
			ep.progress_until(
				[&] { return op.done || first_bytes_landed(buffer, seed); },
				"the first bytes of the 64 MiB payload");
			expect(!op.done,
			       "the 64 MiB transfer ended (%s) before its first bytes were seen",
			       op.error ? describe_error(op).c_str() : "success");
			boot.signal_set(kFirstBytesSignal, 1);
		} else {
			boot.signal_wait_at_least(kFirstBytesSignal, 1, [&] { ep.progress(); });
		}

		if (me == kVictim) {
			const bool done_before = op.done;
			pull_own_cable(boot, placements[me]);
			expect(!done_before,
			       "the victim's %s completed before its cable was pulled: nothing was "
			       "in flight",
			       sender ? "send" : "receive");
			// A host without a link: nothing more leaves it, nothing arrives.
			for (;;)
				pause();
		}

		boot.signal_wait_at_least(kCablePulledSignal, 1, [&] { ep.progress(); });
		const uint64_t pulled_at = boot.signal_get(kCablePulledSignal);
		// The rendezvous sender has unacknowledged data of its own, so a
		// retransmission timer runs at once. The receiver only waits: its
		// timer starts with its first probe, at most 1.25 probe intervals
		// after the last bytes arrived. The give-up time is asserted when it
		// fits kLongestAssertedWait, else the window measures what happens.
		const TcpGiveUp tcp = tcp_give_up();
		const double probe_seconds =
			static_cast<double>(options.probe_interval.count()) / 1000.0;
		const bool tcp_will_notice = sender || probe_seconds > 0;
		const double bound = tcp.seconds * 1.5 + 5.0 + (sender ? 0.0 : 2.0 * probe_seconds);
		const bool asserted = tcp_will_notice &&
				      bound <= static_cast<double>(kLongestAssertedWait.count());
		const seconds watch = asserted ? seconds(static_cast<long long>(std::ceil(bound)))
					       : options.window;
		const SilentOutcome outcome = watch_silent_peer(ep, op, watch, pulled_at);
		std::string note = strfmt("survivor = rendezvous %s, victim's link down with the "
					  "64 MiB payload in flight: ",
					  sender ? "sender" : "receiver");
		std::string measured;
		if (outcome.ended && outcome.error == 0) {
			if (!sender)
				expect_pattern(buffer.bytes(), seed,
					       "64 MiB receive that completed from a silent host");
			throw CheckFailure(note + strfmt("the %s completed successfully %.2f s "
							 "after the victim's link went down",
							 sender ? "send" : "receive",
							 outcome.after_seconds));
		}
		if (outcome.ended) {
			expect(!asserted || outcome.after_seconds <= bound,
			       "%serror only after %.2f s, beyond %.1f s (tcp_retries2=%d gives up "
			       "after ~%.1f s, probe "
			       "interval %lld ms)",
			       note.c_str(), outcome.after_seconds, bound, tcp.retries2,
			       tcp.seconds, static_cast<long long>(options.probe_interval.count()));
			note += strfmt("error completion after %.2f s (%s; tcp_retries2=%d: TCP "
				       "gives up after ~%.1f s; "
				       "FI_RCOLL_PROBE_INTERVAL_MS=%lld)",
				       outcome.after_seconds, outcome.text.c_str(), tcp.retries2,
				       tcp.seconds,
				       static_cast<long long>(options.probe_interval.count()));
		} else {
			expect(!asserted,
			       "%sno completion %.1f s after the victim's link went down, though "
			       "tcp_retries2=%d gives up "
			       "after ~%.1f s (probe interval %lld ms)",
			       note.c_str(), outcome.after_seconds, tcp.retries2, tcp.seconds,
			       static_cast<long long>(options.probe_interval.count()));
			measured =
				note +
				strfmt("MEASURED: no completion within %.1f s (%s)",
				       outcome.after_seconds,
				       tcp_will_notice
					       ? strfmt("tcp_retries2=%d: TCP gives up only after "
							"~%.0f s",
							tcp.retries2, tcp.seconds)
							 .c_str()
					       : "this side has nothing unacknowledged, so no TCP "
						 "timer runs, and "
						 "FI_RCOLL_PROBE_INTERVAL_MS=0 sends it no probe");
			// The application's way out would be fi_cancel. A provider may
			// refuse (-FI_ENOENT) to cancel an operation whose data is
			// already moving; one it accepts must complete.
			const int rc = fi_cancel(&ep.ep()->fid, &op);
			expect(rc == 0 || rc == -FI_ENOENT,
			       "fi_cancel of the stuck %s returned %d (%s)",
			       sender ? "send" : "receive", rc, fi_strerror(-rc));
			if (rc == 0) {
				ep.wait_done(op, "the cancelled transfer", seconds(5));
				measured += strfmt("; fi_cancel accepted it, it then ended with %s",
						   op.error ? fi_strerror(op.error) : "success");
			} else {
				measured += "; fi_cancel refused it (-FI_ENOENT): the application "
					    "cannot get it back";
			}
		}
		boot.kill_rank(kVictim);
		set_link(placements[kVictim].netns, placements[kVictim].interface, true);
		boot.signal_set(kSurvivorDoneSignal, 1);
		exchange_with_third(boot, ep, peers);
		if (!measured.empty())
			throw NotApplicable(measured + "; afterwards survivor and third rank "
						       "exchanged 256 KiB both ways, verified");
		boot.note(note + "; afterwards survivor and third rank exchanged 256 KiB both "
				 "ways, verified");
		return;
	}

	// The third rank, on a host of its own, waits for the survivor.
	boot.signal_wait_at_least(
		kSurvivorDoneSignal, 1, [&] { ep.progress(); },
		kLongestAssertedWait + options.window + seconds(30));
	exchange_with_third(boot, ep, peers);
}

void case_silent_rndv_receiver(Bootstrap& boot, const Options& options)
{
	silent_rendezvous(boot, options, false);
}

void case_silent_rndv_sender(Bootstrap& boot, const Options& options)
{
	silent_rendezvous(boot, options, true);
}

// ---------------------------------------------------------------- busy peer

constexpr int kBusySender = 0;
constexpr int kBusyReceiver = 1;
constexpr int kBusyIntervals = 6;
constexpr size_t kBusyBytes = 1 << 20; // rendezvous: the sender waits until the receiver takes it
constexpr int kBusyStartSignal = 0;
constexpr int kBusyOverSignal = 1;
constexpr int kBusyBarrierSignal = 2;

// The receiver stops calling into libfabric for kBusyIntervals probe
// intervals while the sender's rendezvous send waits on it. The sender
// probes it; the receiver's kernel acknowledges the probes (its namespace
// counts their TCP segments: rcoll is the only TCP user there, the ranks'
// bootstrap is shared memory), so the connection stays up and the transfer
// completes once the receiver progresses again. A ping/pong timeout would
// have failed it.
void case_busy_peer(Bootstrap& boot, const Options& options)
{
	if (options.probe_interval.count() == 0)
		throw NotApplicable("--probe-interval-ms 0: nothing probes the busy peer");
	setenv("FI_RCOLL_PROBE_INTERVAL_MS", std::to_string(options.probe_interval.count()).c_str(),
	       1);
	const int me = boot.rank();
	Endpoint ep({options.provider, FI_MSG | FI_TAGGED});
	const auto peers = ep.exchange_addresses(boot);
	const auto placements = gather_placements(boot);
	expect_separate_hosts(placements, {kBusySender, kBusyReceiver});
	connect_every_pair(boot, ep, peers);
	progressing_barrier(boot, ep, boot.size(), kBusyBarrierSignal);

	const milliseconds busy = options.probe_interval * kBusyIntervals;
	const uint64_t seed = make_seed(0xB05, 0);
	RegisteredBuffer buffer(ep, kBusyBytes);
	OpContext op;
	if (me == kBusyReceiver) {
		const uint64_t segments_before = tcp_segments_received();
		boot.signal_set(kBusyStartSignal, 1);
		std::this_thread::sleep_for(busy); // computing: no libfabric call at all
		const uint64_t segments = tcp_segments_received() - segments_before;
		boot.signal_set(kBusyOverSignal, 1);
		FT_POST(ep, fi_trecv(ep.ep(), buffer.data(), kBusyBytes, buffer.desc(),
				     peers[kBusySender], kRendezvousTag, 0, &op));
		ep.wait_ok(op, "the 1 MiB receive after computing");
		expect_pattern(buffer.bytes(), seed, "1 MiB received after computing");
		// Probes start 1 to 1.25 intervals after the send began waiting and
		// follow every 1 to 1.25 intervals: at least 4 in 6 intervals, each in
		// a segment of its own, after the one of the rendezvous request.
		constexpr uint64_t kLeastProbes = 3;
		expect(segments >= 1 + kLeastProbes,
		       "the busy receiver's host received %llu TCP segments in %lld ms: the "
		       "request and fewer than %llu "
		       "probes of the waiting sender",
		       static_cast<unsigned long long>(segments),
		       static_cast<long long>(busy.count()),
		       static_cast<unsigned long long>(kLeastProbes));
		boot.note(strfmt("receiver computed %lld ms (%d probe intervals) with the sender's "
				 "1 MiB send waiting on it: "
				 "its host received %llu TCP segments meanwhile (the request, then "
				 "the sender's probes), "
				 "then the transfer completed, verified",
				 static_cast<long long>(busy.count()), kBusyIntervals,
				 static_cast<unsigned long long>(segments)));
	} else {
		fill_pattern(buffer.bytes(), seed);
		boot.signal_wait_at_least(kBusyStartSignal, 1, [&] { ep.progress(); });
		FT_POST(ep, fi_tsend(ep.ep(), buffer.data(), kBusyBytes, buffer.desc(),
				     peers[kBusyReceiver], kRendezvousTag, &op));
		boot.signal_wait_at_least(
			kBusyOverSignal, 1, [&] { ep.progress(); }, busy + seconds(30));
		expect(!op.done,
		       "the 1 MiB send to a receiver that was computing ended (%s) before it "
		       "received anything",
		       op.error ? describe_error(op).c_str() : "success");
		ep.wait_ok(op, "the 1 MiB send to the receiver that computed");
	}
	progressing_barrier(boot, ep, boot.size(), kBusyBarrierSignal);
}

// ---------------------------------------------------------------- unanswered connects

constexpr int kConnectSender = 0;
constexpr int kConnectReceiver = 1;
constexpr size_t kConnectBytes = 1000;
constexpr uint64_t kConnectTag = 0xC0E;
constexpr int kConnectRefusingSignal = 0;
constexpr int kConnectAnsweringSignal = 1;
constexpr int kConnectBarrierSignal = 2;
// Linux resends an unanswered SYN at growing intervals: by default 1, 3, 7,
// 15 and 31 s after the first; from 6.5, 1, 2, 3, 4, 5, 7, 11, 19 and 35 s.
constexpr seconds kSlowConnectSilence{12}; // past the former 10 s default
constexpr milliseconds kShortConnectTimeout{4000};
constexpr seconds kUnansweredSilence{9}; // well past kShortConnectTimeout

// While alive, this rank's host (its network namespace) drops every TCP
// connection request it receives: connects to it go unanswered, as when
// their SYNs are lost, while ARP and established connections still work.
// nftables, as for the loss the netns script injects.
class DroppedConnectionRequests {
public:
	DroppedConnectionRequests()
	{
		if (std::system("command -v nft >/dev/null 2>&1") != 0)
			throw NotApplicable(
				"no nft command (nftables) to drop connection requests");
		if (std::system("nft add table inet rcoll_syn && "
				"nft add chain inet rcoll_syn in "
				"'{ type filter hook input priority 0; }' && "
				"nft add rule inet rcoll_syn in 'tcp flags & (syn | ack) == syn' "
				"drop") != 0)
			throw CheckFailure("cannot add an nftables rule dropping TCP SYNs");
	}
	DroppedConnectionRequests(const DroppedConnectionRequests&) = delete;
	DroppedConnectionRequests& operator=(const DroppedConnectionRequests&) = delete;
	~DroppedConnectionRequests() { lift(); }
	void lift()
	{
		if (active_ && std::system("nft delete table inet rcoll_syn") != 0)
			std::fprintf(stderr, "cannot delete the nftables table rcoll_syn\n");
		active_ = false;
	}

private:
	bool active_ = true;
};

// The receiver's host answers no connection request when the sender's
// first message to it opens the connection, and answers again after
// `silence`. With `timeout` 0 (the provider's default), the connection is
// slow, not dead: it comes up at one of TCP's later SYNs, and the message
// arrives. With a timeout shorter than `silence`, the send ends in error
// within that timeout (plus slack), and a second message, sent once the
// host answers, arrives. On a lossy network a handshake whose SYNs are lost
// several times looks just like this.
void unanswered_connect(Bootstrap& boot, const Options& options, seconds silence,
			milliseconds timeout)
{
	if (timeout.count() > 0)
		setenv("FI_RCOLL_CONNECT_TIMEOUT_MS", std::to_string(timeout.count()).c_str(), 1);
	const int me = boot.rank();
	Endpoint ep({options.provider, FI_MSG | FI_TAGGED});
	const auto peers = ep.exchange_addresses(boot);
	const auto placements = gather_placements(boot);
	expect_separate_hosts(placements, {kConnectSender, kConnectReceiver});
	const bool retry = timeout.count() > 0;
	RegisteredBuffer buffer(ep, kConnectBytes);
	if (me == kConnectReceiver) {
		DroppedConnectionRequests refusing;
		boot.signal_set(kConnectRefusingSignal, 1);
		// Progressing all along: a request that did arrive would be taken.
		progress_for(ep, silence);
		refusing.lift();
		boot.signal_set(kConnectAnsweringSignal, 1);
		// A failed first send must not arrive: the message expected is the
		// last one sent.
		OpContext op;
		FT_POST(ep, fi_trecv(ep.ep(), buffer.data(), kConnectBytes, buffer.desc(),
				     peers[kConnectSender], kConnectTag, 0, &op));
		ep.wait_ok(op, "the message sent while this host answered no connection request",
			   seconds(60));
		expect_pattern(buffer.bytes(), make_seed(kConnectTag, retry ? 1 : 0),
			       "the message received once the host answered");
	} else {
		boot.signal_wait_at_least(kConnectRefusingSignal, 1, [&] { ep.progress(); });
		fill_pattern(buffer.bytes(), make_seed(kConnectTag, 0));
		OpContext op;
		const uint64_t posted = now_ns();
		FT_POST(ep, fi_tsend(ep.ep(), buffer.data(), kConnectBytes, buffer.desc(),
				     peers[kConnectReceiver], kConnectTag, &op));
		ep.wait_done(op, "the send to the silent host", silence + seconds(60));
		const double took = seconds_since(posted);
		const auto silent_s = static_cast<long long>(silence.count());
		if (!retry) {
			expect(op.error == 0,
			       "the send to a host silent to connection requests for %lld s failed "
			       "after %.1f s (%s): a connection TCP was still setting up was given "
			       "up",
			       silent_s, took, describe_error(op).c_str());
			expect(took >= static_cast<double>(silent_s) - 1,
			       "the send completed %.1f s after it was posted, while the "
			       "receiver's host answered no connection request for %lld s",
			       took, silent_s);
			boot.note(
				strfmt("receiver's host silent to connection requests for %lld s "
				       "when the first message opened the connection: it came up "
				       "and the send completed after %.1f s, the message verified",
				       silent_s, took));
		} else {
			const double limit = std::chrono::duration<double>(timeout).count();
			const auto timeout_ms = static_cast<long long>(timeout.count());
			expect(op.error != 0,
			       "the send to a host silent to connection requests for %lld s "
			       "succeeded after %.1f s with FI_RCOLL_CONNECT_TIMEOUT_MS=%lld",
			       silent_s, took, timeout_ms);
			expect(took >= limit - 0.5 && took <= limit + 2,
			       "the send to the silent host ended in error after %.1f s, not "
			       "within FI_RCOLL_CONNECT_TIMEOUT_MS=%lld (+2 s)",
			       took, timeout_ms);
			const std::string failed = describe_error(op);
			boot.signal_wait_at_least(
				kConnectAnsweringSignal, 1, [&] { ep.progress(); },
				silence + seconds(30));
			fill_pattern(buffer.bytes(), make_seed(kConnectTag, 1));
			OpContext again;
			FT_POST(ep, fi_tsend(ep.ep(), buffer.data(), kConnectBytes, buffer.desc(),
					     peers[kConnectReceiver], kConnectTag, &again));
			ep.wait_ok(again, "the send once the host answered", seconds(60));
			boot.note(strfmt("FI_RCOLL_CONNECT_TIMEOUT_MS=%lld, receiver's host silent "
					 "to connection requests for %lld s: the send ended after "
					 "%.1f s (%s); once the host answered, a new connection "
					 "carried the next message, verified",
					 timeout_ms, silent_s, took, failed.c_str()));
		}
	}
	progressing_barrier(boot, ep, boot.size(), kConnectBarrierSignal);
}

void case_slow_connect(Bootstrap& boot, const Options& options)
{
	unanswered_connect(boot, options, kSlowConnectSilence, milliseconds(0));
}

void case_connect_timeout(Bootstrap& boot, const Options& options)
{
	unanswered_connect(boot, options, kUnansweredSilence, kShortConnectTimeout);
}

// ---------------------------------------------------------------- silent collectives

constexpr int kCollRanks = 4;
constexpr int kCollVictim = 3;
constexpr int kCollKiller = 0;
constexpr int kCollBarrierSignal = 0;
constexpr int kCollPulledSignal = 1;
constexpr int kCollErrorsSignal = 2;
constexpr int kCollSurvivorBarrierSignal = 3;

// A joined collective group over some of the world's ranks (fi_join on the
// endpoint's EQ); closes the multicast fid, then the AV set.
class CollGroup {
public:
	CollGroup(Endpoint& ep, const std::vector<fi_addr_t>& members, const std::string& label)
	{
		fi_av_set_attr attr{};
		attr.count = members.size();
		attr.start_addr = FI_ADDR_NOTAVAIL;
		attr.end_addr = FI_ADDR_NOTAVAIL;
		fid_av_set* set = nullptr;
		FT_CHECK(fi_av_set(ep.av(), &attr, &set, nullptr));
		set_.reset(set);
		for (fi_addr_t member : members)
			FT_CHECK(fi_av_set_insert(set_.get(), member));
		fi_addr_t set_addr = FI_ADDR_NOTAVAIL;
		FT_CHECK(fi_av_set_addr(set_.get(), &set_addr));
		fid_mc* mc = nullptr;
		FT_CHECK(fi_join_collective(ep.ep(), set_addr, set_.get(), 0, &mc, this));
		mc_.reset(mc);

		const Deadline deadline(kDefaultWait);
		for (;;) {
			uint32_t event = 0;
			fi_eq_entry entry{};
			const ssize_t rc = fi_eq_read(ep.eq(), &event, &entry, sizeof entry, 0);
			if (rc == -FI_EAVAIL) {
				fi_eq_err_entry err{};
				fi_eq_readerr(ep.eq(), &err, 0);
				throw CheckFailure(strfmt("joining %s failed: %s", label.c_str(),
							  fi_strerror(err.err)));
			}
			if (rc > 0) {
				expect(event == FI_JOIN_COMPLETE && entry.fid == &mc->fid,
				       "joining %s: unexpected EQ event %u for fid %p",
				       label.c_str(), event, static_cast<void*>(entry.fid));
				break;
			}
			if (rc != -FI_EAGAIN)
				throw FabricError("fi_eq_read", rc,
						  std::source_location::current());
			if (ep.progress() == 0)
				sched_yield();
			expect(!deadline.expired(), "joining %s timed out", label.c_str());
		}
		address_ = fi_mc_addr(mc_.get());
	}

	fi_addr_t address() const { return address_; }

private:
	FidPtr<fid_av_set> set_;
	FidPtr<fid_mc> mc_; // closed before the AV set: declared after it
	fi_addr_t address_ = FI_ADDR_NOTAVAIL;
};

// Rank r contributes (r + 1) * (i % 1000 + 1) at element i; the sum over
// n ranks is n (n + 1) / 2 * (i % 1000 + 1).
int32_t contribution(int rank, size_t i) { return (rank + 1) * static_cast<int32_t>(i % 1000 + 1); }

class Allreduce {
public:
	Allreduce(Endpoint& ep, size_t count)
		: count_(count), in_(ep, count * 4), out_(ep, count * 4)
	{}

	void post(Endpoint& ep, fi_addr_t group, int rank)
	{
		auto* in = reinterpret_cast<int32_t*>(in_.data());
		for (size_t i = 0; i < count_; ++i)
			in[i] = contribution(rank, i);
		ctx_.reset();
		FT_POST(ep, fi_allreduce(ep.ep(), in_.data(), count_, in_.desc(), out_.data(),
					 out_.desc(), group, FI_INT32, FI_SUM, 0, &ctx_));
	}

	void verify(const std::vector<int>& members) const
	{
		int32_t ranks_weight = 0;
		for (int r : members)
			ranks_weight += r + 1;
		const auto* out = reinterpret_cast<const int32_t*>(out_.data());
		for (size_t i = 0; i < count_; ++i)
			expect(out[i] == ranks_weight * static_cast<int32_t>(i % 1000 + 1),
			       "allreduce of %zu int32 over %zu ranks: element %zu is %d, want %d",
			       count_, members.size(), i, out[i],
			       ranks_weight * static_cast<int32_t>(i % 1000 + 1));
	}

	OpContext& context() { return ctx_; }

private:
	size_t count_;
	RegisteredBuffer in_, out_;
	OpContext ctx_;
};

// Where the victim goes silent.
enum class Silence { inside_allreduce, before_barrier };

void silent_collective(Bootstrap& boot, const Options& options, Silence silence)
{
	// Set before the provider reads its configuration (first fi_getinfo).
	setenv("FI_RCOLL_COLL_TIMEOUT_MS", std::to_string(options.coll_timeout.count()).c_str(), 1);
	const int me = boot.rank();
	Endpoint ep({options.provider, FI_MSG | FI_TAGGED | FI_COLLECTIVE, FI_AV_TABLE, 0, true});
	const auto world = ep.exchange_addresses(boot);
	const auto placements = gather_placements(boot);
	expect_separate_hosts(placements, {0, 1, 2, 3});
	const std::vector<int> everyone{0, 1, 2, 3};
	const std::vector<int> survivors{0, 1, 2};

	auto full = std::make_unique<CollGroup>(ep, world, "the group of all 4 hosts");
	{
		Allreduce warm(ep, 1000);
		warm.post(ep, full->address(), me);
		ep.wait_ok(warm.context(), "allreduce before the failure");
		warm.verify(everyone);
	}
	progressing_barrier(boot, ep, kCollRanks, kCollBarrierSignal);

	const double bound = 3.0 * static_cast<double>(options.coll_timeout.count()) / 1000.0;
	std::optional<Allreduce> doomed;
	OpContext barrier;
	OpContext* pending = &barrier;
	if (silence == Silence::inside_allreduce) {
		doomed.emplace(ep, 4u << 20);
		doomed->post(ep, full->address(), me);
		pending = &doomed->context();
		if (me == kCollVictim) {
			// Take part for a moment, so the others' transfers with this
			// host are under way when it goes silent.
			const Deadline briefly(milliseconds(20));
			while (!briefly.expired())
				ep.progress();
		}
	}
	if (me == kCollVictim) {
		set_link(placements[me].netns, placements[me].interface, false);
		boot.signal_set(kCollPulledSignal, now_ns());
		for (;;)
			pause();
	}
	if (silence == Silence::before_barrier)
		FT_POST(ep, fi_barrier(ep.ep(), full->address(), &barrier));

	boot.signal_wait_at_least(kCollPulledSignal, 1, [&] { ep.progress(); });
	const uint64_t pulled_at = boot.signal_get(kCollPulledSignal);
	const char* what =
		silence == Silence::inside_allreduce ? "the 16 MiB allreduce" : "the barrier";
	ep.wait_done(*pending, strfmt("%s the silent host was part of", what),
		     milliseconds(static_cast<long long>(bound * 1000.0) + 1000));
	const double ended_after = seconds_since(pulled_at);
	expect(ended_after <= bound,
	       "%s ended %.2f s after the victim's link went down, beyond 3 x %lld ms", what,
	       ended_after, static_cast<long long>(options.coll_timeout.count()));
	const bool failed = pending->error != 0;
	// A survivor whose part did not need the victim's later steps may
	// complete; then its result must be right. Somebody must see the error.
	if (!failed && doomed)
		doomed->verify(everyone);
	expect(failed || silence == Silence::inside_allreduce,
	       "a barrier completed successfully although one member never entered it");
	boot.signal_add(kCollErrorsSignal, failed ? 1 : 0);

	// A further call on the broken group fails too, and does not hang.
	OpContext after;
	const ssize_t rc = fi_barrier(ep.ep(), full->address(), &after);
	if (rc == 0) {
		ep.wait_done(after, "a barrier posted on the broken group",
			     milliseconds(static_cast<long long>(bound * 1000.0) + 1000));
		expect(after.error != 0,
		       "a barrier on a group with a silent member completed successfully");
	} else {
		expect(rc != -FI_EAGAIN,
		       "a barrier on the broken group keeps returning -FI_EAGAIN");
	}
	full.reset();

	progressing_barrier(boot, ep, kCollRanks - 1, kCollSurvivorBarrierSignal);
	expect(boot.signal_get(kCollErrorsSignal) > 0, "no survivor got an error completion for %s",
	       what);
	// The survivors go on without the silent host.
	CollGroup rest(ep, {world[0], world[1], world[2]}, "the group of the 3 surviving hosts");
	Allreduce again(ep, 100000);
	again.post(ep, rest.address(), me);
	ep.wait_ok(again.context(), "allreduce among the survivors");
	again.verify(survivors);
	progressing_barrier(boot, ep, kCollRanks - 1, kCollSurvivorBarrierSignal);
	if (me == kCollKiller) {
		boot.kill_rank(kCollVictim);
		set_link(placements[kCollVictim].netns, placements[kCollVictim].interface, true);
	}
	boot.note(strfmt("rank %d: %s after %.2f s (FI_RCOLL_COLL_TIMEOUT_MS=%lld)", me,
			 failed ? fi_strerror(pending->error) : "completed correctly", ended_after,
			 static_cast<long long>(options.coll_timeout.count())));
}

void case_silent_allreduce(Bootstrap& boot, const Options& options)
{
	silent_collective(boot, options, Silence::inside_allreduce);
}

void case_silent_barrier(Bootstrap& boot, const Options& options)
{
	silent_collective(boot, options, Silence::before_barrier);
}

// ---------------------------------------------------------------- driver

const NetnsCase kCases[] = {
	{"placement",
	 "one rank per namespace: joined it, bound to its NIC (not loopback), 1 MiB per pair of "
	 "hosts "
	 "verified and counted on the NIC",
	 0, case_placement},
	{"silent-rndv-receiver",
	 "3 hosts: the receiver's link goes down mid-rendezvous; the sender's send ends in error "
	 "within TCP's give-up time (else measured), then a third host still works",
	 3, case_silent_rndv_receiver},
	{"silent-rndv-sender",
	 "3 hosts: the sender's link goes down mid-rendezvous; the receiver probes it and its "
	 "receive ends in error within TCP's give-up time + 2 probe intervals (else measured), "
	 "then a third host still works",
	 3, case_silent_rndv_sender},
	{"busy-peer",
	 "2 hosts: a rendezvous receiver computes for 6 probe intervals without calling into "
	 "libfabric; "
	 "the waiting sender probes it (the receiver's host counts them), does not fail it, and "
	 "the 1 MiB "
	 "transfer completes, verified",
	 2, case_busy_peer},
	{"slow-connect",
	 "2 hosts: the receiver's host drops connection requests for 12 s when the first message "
	 "opens the connection; a later SYN of TCP's sets it up and the message arrives, verified",
	 2, case_slow_connect},
	{"connect-timeout",
	 "2 hosts: as slow-connect, 9 s, with FI_RCOLL_CONNECT_TIMEOUT_MS=4000: the send ends in "
	 "error within 3.5-6 s, and once the host answers the next message arrives, verified",
	 2, case_connect_timeout},
	{"silent-allreduce",
	 "4 hosts: one goes silent inside a 16 MiB allreduce; the others get errors within 3 x "
	 "FI_RCOLL_COLL_TIMEOUT_MS, the broken group fails further calls, the survivors regroup",
	 kCollRanks, case_silent_allreduce},
	{"silent-barrier",
	 "4 hosts: one goes silent before entering a barrier; the others get errors within 3 x "
	 "FI_RCOLL_COLL_TIMEOUT_MS and regroup",
	 kCollRanks, case_silent_barrier},
};

void usage(FILE* out)
{
	std::fprintf(
		out,
		"usage: rcoll_netns_test [--prov NAME] [--window S] [--coll-timeout-ms MS]\n"
		"                        [--probe-interval-ms MS] CASE... | all\n"
		"       rcoll_netns_test --list\n"
		"  --prov NAME           libfabric provider, default \"rcoll\"\n"
		"  --window S            seconds the point-to-point cases watch a silent peer "
		"(default 10)\n"
		"  --coll-timeout-ms MS  FI_RCOLL_COLL_TIMEOUT_MS of the collective cases (default "
		"2000)\n"
		"  --probe-interval-ms MS\n"
		"                        FI_RCOLL_PROBE_INTERVAL_MS of the rendezvous cases "
		"(default 1000;\n"
		"                        0 turns the silent sender's case into a measurement)\n"
		"Needs RCOLL_TEST_NETNS naming one namespace per host (3 for the rendezvous cases, "
		"4 for the\n"
		"collective ones); test/mp/netns-hosts.sh creates them. Runs as root: the victim "
		"sets its\n"
		"link down and the survivor sets it up again.\n");
}

} // namespace

int main(int argc, char** argv)
{
	Options options;
	std::vector<const NetnsCase*> selected;
	for (int i = 1; i < argc; ++i) {
		const std::string_view arg = argv[i];
		if (arg == "--prov") {
			options.provider = option_value(i, argc, argv);
		} else if (arg == "--window") {
			options.window = seconds(std::atoi(option_value(i, argc, argv)));
		} else if (arg == "--coll-timeout-ms") {
			options.coll_timeout = milliseconds(std::atoi(option_value(i, argc, argv)));
		} else if (arg == "--probe-interval-ms") {
			options.probe_interval =
				milliseconds(std::atoi(option_value(i, argc, argv)));
		} else if (arg == "--list") {
			list_cases(kCases, 22);
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
	if (selected.empty() || options.window.count() <= 0 || options.coll_timeout.count() <= 0 ||
	    options.probe_interval.count() < 0) {
		usage(stderr);
		return 2;
	}

	prefer_loopback_interfaces();
	const int hosts = static_cast<int>(host_namespaces().size());
	CaseReport report;
	for (const NetnsCase* c : selected) {
		const int ranks = c->ranks > 0 ? c->ranks : hosts;
		const auto started = Clock::now();
		LaunchResult result;
		if (hosts < std::max(ranks, 2)) {
			result = {Outcome::not_applicable,
				  strfmt("needs RCOLL_TEST_NETNS naming at least %d network "
					 "namespaces (has %d)",
					 std::max(ranks, 2), hosts)};
		} else {
			// Collective cases wait up to 3 x the timeout twice; rendezvous
			// cases the window plus a cancel; all of them set up and regroup.
			const auto budget =
				seconds(60) + kLongestAssertedWait + options.window +
				std::chrono::duration_cast<seconds>(options.coll_timeout * 6);
			result = launch_ranks(ranks, budget,
					      [&](Bootstrap& boot) { c->run(boot, options); });
		}
		report.add(result, c->name,
			   strfmt("%s, %d ranks on %d hosts", options.provider.c_str(), ranks,
				  std::min(ranks, hosts)),
			   std::chrono::duration<double>(Clock::now() - started).count());
	}
	return report.finish();
}
