// rcoll_hostile_test: a peer that breaks rcoll's protocol on purpose, from
// its own process, against an rcoll endpoint that at the same time serves
// an honest peer. Each case passes when the victim rejects what it must,
// keeps working with the honest peer, and attributes nothing the hostile
// peer sent to anybody else.
//
//   rcoll_hostile_test [--prov NAME] CASE... | all
//   rcoll_hostile_test --list
//
// Ranks: 0 the victim, 1 the honest peer (both plain rcoll endpoints),
// 2 the hostile peer (raw_peer.hpp).
#include "coll_common.hpp"
#include "raw_peer.hpp"
#include "transport/local.hpp"

#include <rdma/fi_collective.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <functional>
#include <thread>
#include <vector>

namespace {

using namespace fabtests;
using hostile::RawPeer;
namespace proto = rcoll::proto;
using std::chrono::seconds;

constexpr int kVictim = 0, kHonest = 1, kHostile = 2;
constexpr uint64_t kTag = 7;
constexpr size_t kSlot = 64;
constexpr int kHonestMessages = 4;

// Signals between the ranks.
enum Signal {
	first_sent = 0,
	hostile_done = 1,
	honest_done = 2,
	victim_done = 3,
	hostile_connected = 4,
	victim_joining = 5,
	pair_barrier = 6,
	victim_ready = 7,
	victim_stuck = 8,
	target_address = 9,
	victim_pid = 10
};

struct Options {
	std::string provider = "rcoll";
};

uint64_t random_u64()
{
	uint64_t v = 0;
	while (v == 0)
		expect(getrandom(&v, sizeof(v), 0) == ssize_t(sizeof(v)), "getrandom");
	return v;
}

proto::Handshake request(uint64_t key, uint64_t prior_token = 0)
{
	proto::Handshake h;
	h.kind = proto::HandshakeKind::Request;
	h.endpoint_key = key;
	h.conn_id = 0;
	h.eager_limit = 4096;
	h.token = random_u64();
	h.prior_token = prior_token;
	return h;
}

std::span<const std::byte> text(const std::string& s)
{
	return std::as_bytes(std::span(s.data(), s.size()));
}

proto::MsgHeader eager_header(uint32_t src_conn, uint64_t token, size_t size)
{
	proto::MsgHeader h;
	h.opcode = proto::Opcode::Eager;
	h.flags = proto::kFlagTagged;
	h.tag = kTag;
	h.src_conn = src_conn;
	h.token = token;
	h.size = size;
	return h;
}

// The addresses of the victim and the honest peer; the hostile peer has
// none of its own (it is not an rcoll endpoint).
struct World {
	std::vector<std::vector<uint8_t>> names;
};

World exchange(Bootstrap& boot, std::vector<uint8_t> mine) { return {boot.allgather(mine)}; }

// An rcoll address naming the hostile peer by the key it will claim. Nothing
// listens at its core address: the victim reaches it over the connection
// the hostile peer opened.
std::vector<uint8_t> hostile_address(uint64_t key)
{
	rcoll::EpAddress a;
	a.key = key;
	sockaddr_in sin{};
	sin.sin_family = AF_INET;
	sin.sin_port = htons(1);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.core_len = sizeof(sin);
	std::memcpy(a.core, &sin, sizeof(sin));
	std::vector<uint8_t> bytes(sizeof(a));
	std::memcpy(bytes.data(), &a, sizeof(a));
	return bytes;
}

// The honest peer: one message before the attack, the rest after it; every
// send must complete without error. `attack` bounds the wait for the attack.
void run_honest(Bootstrap& boot, Endpoint& ep, const World& world,
		std::chrono::milliseconds attack = kDefaultWait)
{
	const fi_addr_t victim = ep.insert_address(world.names[kVictim]);
	RegisteredBuffer buffer(ep, kSlot);
	auto send = [&](int i) {
		const std::string s = strfmt("honest #%d", i);
		std::memcpy(buffer.data(), s.data(), s.size());
		OpContext ctx;
		FT_POST(ep, fi_tsend(ep.ep(), buffer.data(), s.size(), buffer.desc(), victim, kTag,
				     &ctx));
		ep.wait_ok(ctx, strfmt("honest send #%d", i));
	};
	send(0);
	boot.signal_set(first_sent, 1);
	boot.signal_wait_at_least(
		hostile_done, 1, [&] { ep.progress(); }, attack);
	for (int i = 1; i < kHonestMessages; i++)
		send(i);
	boot.signal_set(honest_done, 1);
	boot.signal_wait_at_least(victim_done, 1, [&] { ep.progress(); });
}

// The victim: receives tag kTag from anyone until the honest peer's
// messages are in, then a little longer for stragglers. Every message
// reported as the honest peer's must be one of the honest peer's.
std::string run_victim(Bootstrap& boot, Endpoint& ep, const World& world, size_t expect_other)
{
	const fi_addr_t honest = ep.insert_address(world.names[kHonest]);
	constexpr int kPosted = 32;
	RegisteredBuffer buffer(ep, kPosted * kSlot);
	std::vector<OpContext> ctx(kPosted);
	auto post = [&](int i) {
		std::memset(buffer.data() + i * kSlot, 0, kSlot);
		ctx[i].reset();
		FT_POST(ep, fi_trecv(ep.ep(), buffer.data() + i * kSlot, kSlot, buffer.desc(),
				     FI_ADDR_UNSPEC, kTag, 0, &ctx[i]));
	};
	for (int i = 0; i < kPosted; i++)
		post(i);
	int from_honest = 0;
	size_t from_others = 0;
	auto drain = [&] {
		ep.progress();
		for (int i = 0; i < kPosted; i++) {
			if (!ctx[i].done)
				continue;
			expect(ctx[i].error == 0, "victim receive failed: %s",
			       describe_error(ctx[i]).c_str());
			const std::string got(reinterpret_cast<char*>(buffer.data() + i * kSlot),
					      ctx[i].entry.len);
			if (ctx[i].source == honest) {
				expect(got.rfind("honest #", 0) == 0,
				       "a message attributed to the honest peer is not its own: "
				       "\"%s\"",
				       got.c_str());
				from_honest++;
			} else {
				expect(got.rfind("honest", 0) != 0,
				       "the honest peer's message \"%s\" was attributed to fi_addr "
				       "%llu",
				       got.c_str(), (unsigned long long)ctx[i].source);
				from_others++;
			}
			post(i);
		}
	};
	const Deadline deadline(seconds(30));
	while (from_honest < kHonestMessages || boot.signal_get(honest_done) == 0) {
		expect(!deadline.expired(), "victim: %d of %d honest messages arrived", from_honest,
		       kHonestMessages);
		drain();
	}
	const Deadline linger(std::chrono::milliseconds(300));
	while (!linger.expired())
		drain();
	expect(from_honest == kHonestMessages, "victim: %d honest messages, sent %d", from_honest,
	       kHonestMessages);
	expect(from_others == expect_other,
	       "victim: %zu messages from the hostile peer's own connection, expected %zu",
	       from_others, expect_other);
	boot.signal_set(victim_done, 1);
	return strfmt("%d honest messages, each attributed to the honest peer; %zu from the "
		      "hostile peer's own connection",
		      from_honest, from_others);
}

// One case: the victim and the honest peer as in run_victim/run_honest,
// the hostile peer running `attack` once the honest peer's first message
// is in. `attack` returns the hostile side's note; `hostile_messages` is how
// many of its messages the victim must accept (on its own connection).
struct NoVictimAction {
	void operator()(Bootstrap&, Endpoint&, const World&) const {}
};

template <class Attack, class VictimAction = NoVictimAction>
// `attack_budget` bounds the honest peer's wait for the attack to end.
void run_case(Bootstrap& boot, const Options& options, size_t hostile_messages, Attack attack,
	      VictimAction victim_action = {}, uint64_t extra_caps = 0,
	      std::chrono::milliseconds attack_budget = kDefaultWait)
{
	if (boot.rank() == kHostile) {
		const uint64_t key = random_u64();
		const World world = exchange(boot, hostile_address(key));
		boot.signal_wait_at_least(first_sent, 1, [] {});
		const std::string note = attack(boot, world, key);
		boot.signal_set(hostile_done, 1);
		boot.signal_wait_at_least(victim_done, 1, [] {});
		boot.note(note);
		return;
	}
	EndpointConfig config{options.provider};
	config.caps = FI_MSG | FI_TAGGED | FI_SOURCE | extra_caps;
	config.bind_eq = (extra_caps & FI_COLLECTIVE) != 0;
	Endpoint ep(config);
	const World world = exchange(boot, ep.local_address());
	if (boot.rank() == kHonest)
		return run_honest(boot, ep, world, attack_budget);
	victim_action(boot, ep, world);
	boot.note(run_victim(boot, ep, world, hostile_messages));
}

// The rendezvous request the victim sends the hostile peer first.
proto::RtsBody receive_rts(RawPeer& raw)
{
	const std::vector<std::byte> m = raw.receive();
	proto::Limits limits;
	limits.eager_limit = 4096;
	limits.connection_count = raw.accept().conn_id + 1;
	limits.max_message_size = uint64_t(1) << 40;
	proto::ParsedMessage parsed;
	expect(proto::validate_message(m.data(), m.size(), limits, parsed) ==
			       proto::WireStatus::Ok &&
		       parsed.header.opcode == proto::Opcode::Rts,
	       "expected a rendezvous request from the victim");
	return std::get<proto::RtsBody>(parsed.body);
}

// Ends a rendezvous the victim sent, as the receiver that read it.
void send_read_done(RawPeer& raw, const proto::RtsBody& rts)
{
	proto::MsgHeader h;
	h.opcode = proto::Opcode::ReadDone;
	h.src_conn = raw.accept().conn_id;
	h.token = raw.accept().token;
	std::byte body[proto::ReadDoneBody::kWireSize];
	proto::encode_body(proto::ReadDoneBody{rts.sender_cookie}, body);
	raw.send_message(h, body);
}

// A message naming another peer's connection (every small connection id)
// with a token the sender does not have: its own connection's, or none.
void case_forged_source(Bootstrap& boot, const Options& options)
{
	run_case(boot, options, 1, [](Bootstrap&, const World& world, uint64_t key) {
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		const uint32_t own = raw.accept().conn_id;
		int forged = 0;
		for (uint32_t id = 0; id < 8; id++) {
			if (id == own)
				continue;
			for (uint64_t token : {raw.accept().token, uint64_t(0), random_u64()}) {
				const std::string s = strfmt("forged as connection %u", id);
				raw.send_message(eager_header(id, token, s.size()), text(s));
				forged++;
			}
		}
		const std::string s = "hostile, on its own connection";
		raw.send_message(eager_header(own, raw.accept().token, s.size()), text(s));
		return strfmt("sent %d messages naming other connections", forged);
	});
}

// A connection request that claims the honest peer's key while its
// connection is live, without the token of that connection.
void case_claim_live_key(Bootstrap& boot, const Options& options)
{
	run_case(boot, options, 0, [](Bootstrap&, const World& world, uint64_t) {
		const uint64_t honest_key = hostile::parse_address(world.names[kHonest]).key;
		int accepted = 0;
		for (uint64_t prior : {uint64_t(0), random_u64()}) {
			RawPeer raw(world.names[kVictim], request(honest_key, prior));
			if (!raw.accepted())
				continue;
			accepted++;
			const std::string s = "forged by a peer that claimed the honest key";
			raw.send_message(
				eager_header(raw.accept().conn_id, raw.accept().token, s.size()),
				text(s));
		}
		expect(accepted == 0,
		       "the victim accepted %d of 2 requests claiming a live peer's key", accepted);
		return std::string("both requests claiming the honest peer's key were refused");
	});
}

// Messages no rcoll endpoint sends: cut short, another version, unknown
// opcodes and flags, lengths that lie, control messages for operations that
// do not exist. The victim drops them all and keeps serving the honest peer.
void case_malformed(Bootstrap& boot, const Options& options)
{
	run_case(boot, options, 0, [](Bootstrap&, const World& world, uint64_t key) {
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		const uint32_t id = raw.accept().conn_id;
		const uint64_t token = raw.accept().token;
		std::vector<std::byte> m;
		int sent = 0;
		auto send = [&](proto::MsgHeader h, size_t len, auto&& patch) {
			m.assign(std::max(len, proto::kHeaderSize), std::byte{0x5a});
			proto::encode_header(h, m.data());
			patch(m);
			m.resize(len);
			raw.send_bytes(m);
			sent++;
		};
		auto none = [](std::vector<std::byte>&) {};
		auto set = [](size_t at, uint8_t value) {
			return [at, value](std::vector<std::byte>& b) { b[at] = std::byte{value}; };
		};
		const size_t full = proto::kHeaderSize + 16;
		const proto::MsgHeader good = eager_header(id, token, 16);
		send(good, 10, none);                     // shorter than a header
		send(good, proto::kHeaderSize + 8, none); // payload shorter than size
		send(good, full, set(0, 99));             // version
		send(good, full, set(1, 99));             // opcode
		send(good, full, set(2, 0x80));           // unknown flag
		send(good, full, set(3, 1));              // reserved byte
		proto::MsgHeader huge = good;
		huge.size = uint64_t(1) << 62;
		send(huge, full, none);
		proto::MsgHeader unknown_conn = good;
		unknown_conn.src_conn = 0xfffffff0;
		send(unknown_conn, full, none);
		for (proto::Opcode op :
		     {proto::Opcode::Cts, proto::Opcode::Fin, proto::Opcode::ReadDone}) {
			proto::MsgHeader h;
			h.opcode = op;
			h.src_conn = id;
			h.token = token;
			// A well-formed body for an operation that does not exist.
			const size_t body = op == proto::Opcode::Cts ? proto::CtsBody::kWireSize
					    : op == proto::Opcode::Fin
						    ? proto::FinBody::kWireSize
						    : proto::ReadDoneBody::kWireSize;
			send(h, proto::kHeaderSize + body, [](std::vector<std::byte>& b) {
				std::fill(b.begin() + proto::kHeaderSize, b.end(), std::byte{0});
				b[proto::kHeaderSize] = std::byte{0x33};
			});
		}
		// An eager message far above the victim's eager limit (and its
		// bounce buffers): the core may end the connection over it.
		proto::MsgHeader big = good;
		big.size = 1 << 20;
		std::string big_outcome = "delivered to the core";
		try {
			send(big, proto::kHeaderSize + (1 << 20), none);
		} catch (const CheckFailure& e) {
			big_outcome = e.what();
		}
		return strfmt("sent %d malformed messages; a 1 MiB eager message: %s", sent,
			      big_outcome.c_str());
	});
}

// The victim sends the hostile peer a message above the eager limit from
// the middle of a larger registered buffer. The key in its rendezvous
// request must reach exactly that message, for reading only.
void case_rendezvous_scope(Bootstrap& boot, const Options& options)
{
	constexpr size_t kBuffer = 1 << 20, kOffset = 256 * 1024, kMessage = 64 * 1024;
	auto attack = [](Bootstrap& boot, const World& world, uint64_t key) {
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		boot.signal_set(hostile_connected, 1);
		const proto::RtsBody rts = receive_rts(raw);
		std::vector<std::string> wrong;
		if (int err = raw.read(kMessage, rts.addr, rts.key))
			wrong.push_back(strfmt("reading the message failed: %s", fi_strerror(err)));
		else if (std::to_integer<uint8_t>(raw.local()[kMessage - 1]) != 0xa5)
			wrong.push_back("the message read back differs");
		if (raw.read(4096, rts.addr - 4096, rts.key) == 0)
			wrong.push_back("read 4 KiB before the message");
		if (raw.read(4096, rts.addr + kMessage, rts.key) == 0)
			wrong.push_back("read 4 KiB after the message");
		if (raw.write(16, rts.addr, rts.key) == 0)
			wrong.push_back("wrote into the message");
		try {
			send_read_done(raw, rts);
		} catch (const CheckFailure&) {
			// The core may have ended the connection over a refused access.
		}
		std::string joined;
		for (const std::string& w : wrong)
			joined += (joined.empty() ? "" : "; ") + w;
		expect(wrong.empty(), "the rendezvous key reached too far: %s", joined.c_str());
		return std::string("the key read the message and nothing around it, and could not "
				   "write");
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World& world) {
		const fi_addr_t hostile = ep.insert_address(world.names[kHostile]);
		RegisteredBuffer buffer(ep, kBuffer);
		std::memset(buffer.data(), 0x3c, kBuffer);
		std::memset(buffer.data() + kOffset, 0xa5, kMessage);
		boot.signal_wait_at_least(hostile_connected, 1, [&] { ep.progress(); });
		OpContext ctx;
		FT_POST(ep, fi_tsend(ep.ep(), buffer.data() + kOffset, kMessage, buffer.desc(),
				     hostile, kTag, &ctx));
		// Completes, well or not (the hostile peer's connection may end).
		ep.wait_done(ctx, "the send to the hostile peer");
	};
	run_case(boot, options, 0, attack, victim_action);
}

// A core checks a write's key against every registration of its domain, not
// the connection's. The hostile peer sees one key of the victim's (the
// rendezvous key of a message sent to it) and guesses the keys of the
// registrations made after it, writing at the address of one (addresses are
// no secret: it is told it). Counted-up keys (the tcp core's own) would open
// the victim's buffer with the first guesses; each wrong guess costs the
// guesser its connection, so it reconnects with a new key each time.
void case_guessed_keys(Bootstrap& boot, const Options& options)
{
	constexpr size_t kMessage = 64 * 1024, kTarget = 4096;
	constexpr int kGuesses = 16;
	auto attack = [](Bootstrap& boot, const World& world, uint64_t key) {
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		boot.signal_set(hostile_connected, 1);
		const proto::RtsBody rts = receive_rts(raw);
		boot.signal_wait_at_least(target_address, 1, [] {});
		const uint64_t target = boot.signal_get(target_address);
		int landed = 0;
		for (int i = 1; i <= kGuesses; i++) {
			RawPeer guesser(world.names[kVictim], request(random_u64()));
			expect(guesser.accepted(), "the victim refused a guesser: %s",
			       guesser.refusal().c_str());
			if (guesser.write(16, target, rts.key + uint64_t(i)) == 0)
				landed++;
		}
		// End the rendezvous as the receiver it is.
		expect(raw.read(kMessage, rts.addr, rts.key) == 0, "reading the message failed");
		send_read_done(raw, rts);
		expect(landed == 0,
		       "%d of %d writes with keys counted on from a rendezvous key "
		       "landed in a registration never offered",
		       landed, kGuesses);
		return strfmt("%d writes with the %d keys after a rendezvous key (%#llx) were "
			      "refused",
			      kGuesses, kGuesses, (unsigned long long)rts.key);
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World& world) {
		const fi_addr_t hostile = ep.insert_address(world.names[kHostile]);
		RegisteredBuffer message(ep, kMessage);
		std::memset(message.data(), 0xa5, kMessage);
		boot.signal_wait_at_least(hostile_connected, 1, [&] { ep.progress(); });
		OpContext ctx;
		FT_POST(ep, fi_tsend(ep.ep(), message.data(), kMessage, message.desc(), hostile,
				     kTag, &ctx));
		// Registered after the rendezvous key: the one a counter gives next.
		RegisteredBuffer target(ep, kTarget);
		std::memset(target.data(), 0x3c, kTarget);
		boot.signal_set(target_address, reinterpret_cast<uint64_t>(target.data()));
		ep.wait_done(ctx, "the send to the hostile peer");
		for (size_t i = 0; i < kTarget; i++)
			expect(target.data()[i] == 0x3c,
			       "byte %zu of a buffer whose key nobody was given is %#x", i,
			       target.data()[i]);
	};
	run_case(boot, options, 0, attack, victim_action);
}

// Eager messages nobody receives, until the victim fails the sender: its
// memory must not grow past FI_RCOLL_UNEXPECTED_MAX (default 256 MiB) per
// peer, and the honest peer is served as before.
void case_unexpected_limit(Bootstrap& boot, const Options& options)
{
	constexpr uint64_t kLimit = uint64_t(256) << 20; // the default
	constexpr uint64_t kUnreceivedTag = 99;
	auto attack = [](Bootstrap&, const World& world, uint64_t key) {
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		const size_t size = raw.accept().eager_limit;
		std::vector<std::byte> payload(size, std::byte{0x77});
		proto::MsgHeader h = eager_header(raw.accept().conn_id, raw.accept().token, size);
		h.tag = kUnreceivedTag;
		uint64_t sent = 0;
		try {
			while (sent < 2 * kLimit) {
				raw.send_message(h, payload);
				sent += size;
			}
		} catch (const CheckFailure&) {
			// The victim closed the connection: what it should do.
		}
		expect(sent < 2 * kLimit, "the victim took %llu MiB of unreceived messages",
		       (unsigned long long)(sent >> 20));
		expect(sent >= kLimit / 2, "the victim failed the peer after only %llu MiB",
		       (unsigned long long)(sent >> 20));
		return strfmt("its connection ended after %llu MiB of unreceived %zu-byte messages",
			      (unsigned long long)(sent >> 20), size);
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World&) {
		const size_t before = resident_bytes();
		boot.signal_wait_at_least(hostile_done, 1, [&] { ep.progress(); });
		const size_t grown = resident_bytes() - std::min(before, resident_bytes());
#if defined(__SANITIZE_ADDRESS__)
		const size_t slack = kLimit; // redzones and quarantine around each allocation
#else
		const size_t slack = 64u << 20;
#endif
		expect(grown < kLimit + slack,
		       "the victim grew by %zu MiB holding one peer's unreceived messages",
		       grown >> 20);
	};
	run_case(boot, options, 0, attack, victim_action);
}

// Join records for joins the victim never makes: kept up to
// FI_RCOLL_COLL_EARLY_MAX (default 1024) per peer, then the sender fails.
void case_early_join_limit(Bootstrap& boot, const Options& options)
{
	constexpr int kLimit = 1024; // the default
	auto attack = [](Bootstrap&, const World& world, uint64_t key) {
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		// Well-formed records (garbage is dropped before it is kept).
		proto::JoinRecord join;
		join.rank = 1;
		join.size = 2;
		std::vector<std::byte> record(proto::JoinRecord::kWireSize);
		proto::encode_join_record(join, record.data());
		proto::MsgHeader h =
			eager_header(raw.accept().conn_id, raw.accept().token, record.size());
		h.flags = proto::kFlagTagged | proto::kFlagCollective;
		int sent = 0;
		try {
			for (; sent < 8 * kLimit; sent++) {
				h.tag = random_u64(); // a join id nobody will use
				raw.send_message(h, record);
			}
		} catch (const CheckFailure&) {
			// The victim closed the connection.
		}
		expect(sent < 8 * kLimit, "the victim kept %d join records from one peer", sent);
		expect(sent >= kLimit, "the victim failed the peer after %d join records", sent);
		return strfmt("its connection ended after %d join records for unknown joins", sent);
	};
	run_case(boot, options, 0, attack, NoVictimAction{}, FI_COLLECTIVE);
}

// ---------------------------------------------------------------- send backlogs

constexpr size_t kBacklogMessage = 4096; // above any core's inject size
constexpr uint64_t kBacklogTag = 0x0b;

uint64_t backlog_seed(size_t i) { return make_seed(0xb1, i); }

// The victim's eager sends to one peer, each with its own pattern.
struct Flood {
	Endpoint& ep;
	fi_addr_t to;
	RegisteredBuffer buffer;
	std::vector<OpContext> ctx;
	size_t posted = 0;

	Flood(Endpoint& e, fi_addr_t dest, size_t most)
		: ep(e), to(dest), buffer(e, most * kBacklogMessage), ctx(most)
	{}
	// One more send; false on -FI_EAGAIN.
	bool post()
	{
		expect(posted < ctx.size(), "the victim took %zu sends to one peer", posted);
		const auto bytes = buffer.bytes(posted * kBacklogMessage, kBacklogMessage);
		fill_pattern(bytes, backlog_seed(posted));
		const ssize_t ret = fi_tsend(ep.ep(), bytes.data(), kBacklogMessage, buffer.desc(),
					     to, kBacklogTag, &ctx[posted]);
		if (ret == -FI_EAGAIN)
			return false;
		expect(ret == 0, "fi_tsend #%zu: %s", posted, fi_strerror(int(-ret)));
		posted++;
		return true;
	}
	// Sends until every send has returned -FI_EAGAIN for `quiet`.
	void until_stuck(std::chrono::milliseconds quiet)
	{
		const Deadline limit(seconds(30));
		auto last = Clock::now();
		while (Clock::now() - last < quiet) {
			expect(!limit.expired(), "the victim's sends never stopped");
			if (post())
				last = Clock::now();
			else
				ep.progress();
		}
	}
	// Sends `count` in all, retrying on -FI_EAGAIN.
	void send_all(size_t count, seconds budget = seconds(60))
	{
		const Deadline limit(budget);
		while (posted < count) {
			expect(!limit.expired(), "%zu of %zu sends posted", posted, count);
			if (!post())
				ep.progress();
		}
	}
	size_t completed() const
	{
		return size_t(std::count_if(ctx.begin(), ctx.begin() + posted,
					    [](const OpContext& c) { return c.done; }));
	}
	size_t failed() const
	{
		return size_t(std::count_if(ctx.begin(), ctx.begin() + posted,
					    [](const OpContext& c) { return c.done && c.error; }));
	}
	void wait_all(seconds budget)
	{
		ep.progress_until([&] { return completed() == posted; },
				  strfmt("%zu sends to complete", posted), budget);
	}
};

// The hostile side: reads `count` messages, checking each one's pattern and
// order; pauses `pause` after every `burst`.
size_t read_flood(RawPeer& raw, size_t count, size_t burst, std::chrono::milliseconds pause)
{
	for (size_t i = 0; i < count; i++) {
		const std::vector<std::byte> m = raw.receive();
		expect(m.size() == proto::kHeaderSize + kBacklogMessage,
		       "message #%zu has %zu bytes", i, m.size());
		const std::span<const uint8_t> payload(reinterpret_cast<const uint8_t*>(m.data()) +
							       proto::kHeaderSize,
						       kBacklogMessage);
		expect_pattern(payload, backlog_seed(i), strfmt("message #%zu", i));
		if (burst && i % burst == burst - 1)
			std::this_thread::sleep_for(pause);
	}
	return count;
}

// The hostile side of the backlog cases: connected, it tells the victim.
std::unique_ptr<RawPeer> connect_reader(Bootstrap& boot, const World& world, uint64_t key)
{
	auto raw = std::make_unique<RawPeer>(world.names[kVictim], request(key));
	expect(raw->accepted(), "the victim refused a new peer: %s", raw->refusal().c_str());
	boot.signal_set(hostile_connected, 1);
	return raw;
}

// The victim's side: the hostile peer's address, once it is connected.
fi_addr_t await_reader(Bootstrap& boot, Endpoint& ep, const World& world)
{
	const fi_addr_t hostile = ep.insert_address(world.names[kHostile]);
	boot.signal_wait_at_least(hostile_connected, 1, [&] { ep.progress(); });
	return hostile;
}

// The hostile peer stops reading; the victim sends until its sends to it
// return -FI_EAGAIN, and must hold at most FI_RCOLL_BACKLOG_MAX (default
// 256) of them: the rest of its transmit buffers stay for other peers.
// Then the peer reads again: every message arrives, in order.
void case_backlog_limit(Bootstrap& boot, const Options& options)
{
	constexpr size_t kLimit = 256; // the default
	constexpr size_t kToHonest = 512;
	auto attack = [](Bootstrap& boot, const World& world, uint64_t key) {
		const auto raw = connect_reader(boot, world, key);
		boot.signal_wait_at_least(
			victim_stuck, 1, [] {}, seconds(60));
		const size_t count = boot.signal_get(victim_stuck) - 1;
		read_flood(*raw, count, 0, {});
		return strfmt("read nothing until the victim's sends stalled, then all %zu, "
			      "verified in order",
			      count);
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World& world) {
		const fi_addr_t hostile = await_reader(boot, ep, world);
		const fi_addr_t honest = ep.insert_address(world.names[kHonest]);
		Flood flood(ep, hostile, 1 << 16);
		flood.until_stuck(std::chrono::milliseconds(500));
		const size_t held = flood.posted - flood.completed();
		// Sends to another peer go on meanwhile.
		Flood other(ep, honest, kToHonest);
		other.send_all(kToHonest);
		other.wait_all(seconds(20));
		expect(other.failed() == 0, "%zu sends to the honest peer failed", other.failed());
		boot.signal_set(victim_stuck, flood.posted + 1);
		flood.wait_all(seconds(30));
		expect(flood.failed() == 0, "%zu sends to the slow peer failed", flood.failed());
		expect(held <= kLimit,
		       "%zu sends to a peer that stopped reading were held (FI_RCOLL_BACKLOG_MAX "
		       "%zu)",
		       held, kLimit);
		boot.note(
			strfmt("%zu sends held when the peer stopped reading (cap %zu); %zu to the "
			       "honest peer meanwhile",
			       held, kLimit, kToHonest));
	};
	run_case(boot, options, 0, attack, victim_action);
}

// The hostile peer stops reading for good: once its backlog has stood still
// for FI_RCOLL_BACKLOG_TIMEOUT_MS (1 s here), it fails and the sends it held
// complete with an error.
void case_backlog_timeout(Bootstrap& boot, const Options& options)
{
	constexpr int kTimeoutMs = 1000;
	if (boot.rank() == kVictim)
		setenv("FI_RCOLL_BACKLOG_TIMEOUT_MS", std::to_string(kTimeoutMs).c_str(), 1);
	auto attack = [](Bootstrap& boot, const World& world, uint64_t key) {
		const auto raw = connect_reader(boot, world, key);
		boot.signal_wait_at_least(
			victim_stuck, 1, [] {}, seconds(60));
		return std::string("read nothing");
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World& world) {
		const fi_addr_t hostile = await_reader(boot, ep, world);
		Flood flood(ep, hostile, 1 << 16);
		flood.until_stuck(std::chrono::milliseconds(300));
		const auto stuck = Clock::now();
		const size_t held = flood.posted - flood.completed();
		try {
			flood.wait_all(seconds(10));
		} catch (const CheckFailure&) {
			boot.signal_set(victim_stuck, 1);
			throw;
		}
		boot.signal_set(victim_stuck, 1);
		const auto waited =
			std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stuck);
		expect(flood.failed() == held, "%zu of %zu held sends failed", flood.failed(),
		       held);
		expect(waited.count() >= kTimeoutMs / 2,
		       "the peer failed %lld ms after its backlog stopped",
		       (long long)waited.count());
		boot.note(strfmt("%zu held sends failed %lld ms after the peer stopped reading",
				 held, (long long)waited.count()));
	};
	run_case(boot, options, 0, attack, victim_action);
}

// A peer that reads slowly but steadily, with FI_RCOLL_BACKLOG_TIMEOUT_MS
// (1 s here) far below the time it takes: it is not failed, and every
// message arrives, verified in order.
void case_slow_reader(Bootstrap& boot, const Options& options)
{
	constexpr size_t kMessages = 3000; // 12 MB: more than socket buffers hold
	if (boot.rank() == kVictim)
		setenv("FI_RCOLL_BACKLOG_TIMEOUT_MS", "1000", 1);
	auto attack = [](Bootstrap& boot, const World& world, uint64_t key) {
		const auto raw = connect_reader(boot, world, key);
		const auto start = Clock::now();
		read_flood(*raw, kMessages, 16, std::chrono::milliseconds(20));
		return strfmt("read %zu messages in %.1f s, 16 every 20 ms, verified in order",
			      kMessages,
			      std::chrono::duration<double>(Clock::now() - start).count());
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World& world) {
		const fi_addr_t hostile = await_reader(boot, ep, world);
		Flood flood(ep, hostile, kMessages);
		flood.send_all(kMessages);
		flood.wait_all(seconds(60));
		expect(flood.failed() == 0, "%zu sends to the slow reader failed", flood.failed());
	};
	run_case(boot, options, 0, attack, victim_action);
}

// A peer's DELIVERY_QUERY messages each ask for an answer. This one sends
// answers nobody asked for, then floods queries while it reads nothing, so
// the victim's answers pile up behind a full socket. One answer covers
// every query before it: the victim holds at most one transmit buffer for
// them (meanwhile it sends the honest peer more messages than its pool has
// buffers) and queues at most one more, so when the peer finally reads,
// fewer answers than queries arrive (those the sockets held, about 67,000
// here; a host whose socket buffers hold 500,000 would need more queries),
// the last for the last query.
void case_delivery_query_flood(Bootstrap& boot, const Options& options)
{
	constexpr size_t kQueries = 500000;
	constexpr size_t kToHonest = 1536; // more than the 1,024 transmit buffers
	auto attack = [](Bootstrap& boot, const World& world, uint64_t key) {
		const auto raw = connect_reader(boot, world, key);
		proto::MsgHeader h;
		h.src_conn = raw->accept().conn_id;
		h.token = raw->accept().token;
		std::byte body[proto::DeliveredBody::kWireSize];
		h.opcode = proto::Opcode::Delivered;
		for (uint64_t sequence : {uint64_t(1), uint64_t(1) << 40}) {
			proto::encode_body(proto::DeliveredBody{sequence}, body);
			raw->send_message(h, body);
		}
		h.opcode = proto::Opcode::DeliveryQuery;
		proto::encode_body(proto::DeliveryQueryBody{1}, body);
		const size_t sent = raw->inject_messages(h, body, kQueries);
		expect(sent == kQueries + 1, "the victim ended the connection after %zu queries",
		       sent);
		proto::encode_body(proto::DeliveryQueryBody{2}, body);
		raw->send_message(h, body);
		// inject_messages sends one more behind the injected ones.
		const size_t queries = kQueries + 2;
		boot.signal_set(victim_stuck, 1);
		boot.signal_wait_at_least(
			pair_barrier, 1, [] {}, seconds(60));
		proto::Limits limits;
		limits.eager_limit = 4096;
		limits.connection_count = raw->accept().conn_id + 1;
		limits.max_message_size = uint64_t(1) << 40;
		size_t answers = 0;
		uint64_t last = 0;
		while (last != 2) {
			const std::vector<std::byte> m = raw->receive();
			proto::ParsedMessage parsed;
			expect(proto::validate_message(m.data(), m.size(), limits, parsed) ==
					       proto::WireStatus::Ok &&
				       parsed.header.opcode == proto::Opcode::Delivered,
			       "expected a delivery answer from the victim");
			last = std::get<proto::DeliveredBody>(parsed.body).sequence;
			expect(last == 1 || last == 2, "an answer for query %llu, never sent",
			       (unsigned long long)last);
			answers++;
		}
		expect(answers < queries,
		       "%zu answers to %zu queries: answers waiting for a reader were queued one "
		       "per query",
		       answers, queries);
		return strfmt("2 answers nobody asked for, then %zu queries while reading "
			      "nothing: %zu answers came once it read, the last for the last query",
			      queries, answers);
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World& world) {
		await_reader(boot, ep, world);
		const fi_addr_t honest = ep.insert_address(world.names[kHonest]);
		boot.signal_wait_at_least(
			victim_stuck, 1, [&] { ep.progress(); }, seconds(60));
		// The queries have all arrived; their answers wait for a reader.
		Flood other(ep, honest, kToHonest);
		try {
			// Within the honest peer's patience (30 s in all).
			other.send_all(kToHonest, seconds(10));
			other.wait_all(seconds(10));
		} catch (const CheckFailure&) {
			boot.signal_set(pair_barrier, 1);
			throw;
		}
		boot.signal_set(pair_barrier, 1);
		expect(other.failed() == 0, "%zu sends to the honest peer failed", other.failed());
		boot.note(
			strfmt("%zu sends to the honest peer while the answers waited", kToHonest));
	};
	run_case(boot, options, 0, attack, victim_action);
}

// ---------------------------------------------------------------- unknown peers

// Connections from keys the victim's AV does not hold: FI_RCOLL_UNKNOWN_PEERS_MAX
// (default 1024) are accepted, the rest refused; once they close, as many
// new ones are accepted on the same records (conn ids), not new ones.
void case_unknown_peers_limit(Bootstrap& boot, const Options& options)
{
	constexpr size_t kLimit = 1024; // the default
	constexpr size_t kExtra = 32;
	// Each connection is a descriptor on both sides; the cap is also at
	// most half of RLIMIT_NOFILE.
	rlimit files{};
	expect(getrlimit(RLIMIT_NOFILE, &files) == 0, "getrlimit");
	if (files.rlim_cur < 4 * kLimit && files.rlim_max > files.rlim_cur) {
		files.rlim_cur = std::min<rlim_t>(files.rlim_max, 4 * kLimit);
		setrlimit(RLIMIT_NOFILE, &files);
	}
	if (files.rlim_cur < 4 * kLimit)
		throw NotApplicable(
			strfmt("RLIMIT_NOFILE is %llu", (unsigned long long)files.rlim_cur));
	auto attack = [](Bootstrap& boot, const World& world, uint64_t) {
		boot.signal_wait_at_least(victim_ready, 1, [] {});
		hostile::RawCrowd crowd(world.names[kVictim]);
		const std::vector<uint32_t> first = crowd.connect(kLimit + kExtra);
		expect(first.size() == kLimit && crowd.refused() == kExtra,
		       "the victim accepted %zu of %zu connections from unknown keys (cap %zu)",
		       first.size(), kLimit + kExtra, kLimit);
		const uint32_t top = *std::max_element(first.begin(), first.end());
		crowd.close_all();
		// The victim sees them close in its own time: retry the refused.
		std::vector<uint32_t> second;
		const Deadline limit(seconds(30));
		while (second.size() < kLimit) {
			expect(!limit.expired(), "after they closed, %zu of %zu reconnected",
			       second.size(), kLimit);
			const auto more = crowd.connect(kLimit - second.size());
			second.insert(second.end(), more.begin(), more.end());
			if (second.size() < kLimit)
				std::this_thread::sleep_for(std::chrono::milliseconds(100));
		}
		const uint32_t top2 = *std::max_element(second.begin(), second.end());
		expect(top2 <= top,
		       "new connection ids up to %u after the first %zu closed (up to %u)", top2,
		       kLimit, top);
		const size_t refused = crowd.refused();
		expect(crowd.connect(1).empty(), "a connection beyond the cap was accepted");
		crowd.close_all();
		return strfmt(
			"%zu of %zu accepted, the rest refused; after they closed %zu more on "
			"the same records (%zu refusals while they closed)",
			first.size(), kLimit + kExtra, second.size(), refused - kExtra);
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World& world) {
		ep.insert_address(world.names[kHonest]);
		boot.signal_set(victim_ready, 1);
		boot.signal_wait_at_least(
			hostile_done, 1, [&] { ep.progress(); }, seconds(120));
	};
	run_case(boot, options, 0, attack, victim_action);
}

// Memory files of rcoll collective scratch regions this process maps.
int mapped_scratch_files()
{
	FILE* maps = std::fopen("/proc/self/maps", "re");
	expect(maps != nullptr, "cannot read /proc/self/maps");
	char line[512];
	int n = 0;
	while (std::fgets(line, sizeof(line), maps))
		n += std::strstr(line, "memfd:rcoll-coll") != nullptr;
	std::fclose(maps);
	return n;
}

// The hostile side of a join with the victim: the victim's join record (and
// the header it came with, for our reply), once the victim joined.
std::vector<std::byte> victim_join_record(Bootstrap& boot, RawPeer& raw, proto::MsgHeader& h)
{
	boot.signal_wait_at_least(victim_joining, 1, [] {});
	std::vector<std::byte> m;
	do {
		m = raw.receive();
		expect(m.size() >= proto::kHeaderSize, "a short message from the victim");
		proto::ParsedMessage parsed;
		proto::Limits limits{4096, raw.accept().conn_id + 1, uint64_t(1) << 40};
		expect(proto::validate_message(m.data(), m.size(), limits, parsed) ==
			       proto::WireStatus::Ok,
		       "an invalid message from the victim");
		h = parsed.header;
	} while (!(h.flags & proto::kFlagCollective));
	std::vector<std::byte> record(m.begin() + proto::kHeaderSize, m.end());
	expect(record.size() == proto::JoinRecord::kWireSize, "a join record of %zu bytes",
	       record.size());
	h.src_conn = raw.accept().conn_id;
	h.token = raw.accept().token;
	return record;
}

// The victim side: a group of the victim and the hostile peer, joined once
// the hostile peer connected. Whether the join completed (a refused member
// ends it with an error).
struct PairGroup {
	FidPtr<fid_av_set> set;
	FidPtr<fid_mc> mc;
	fi_addr_t coll_addr = 0; // of the AV set
	bool joined = false;
};

PairGroup start_join_with_hostile(Bootstrap& boot, Endpoint& ep, const World& world)
{
	boot.signal_wait_at_least(hostile_connected, 1, [&] { ep.progress(); });
	const fi_addr_t self = ep.insert_address(ep.local_address());
	const fi_addr_t hostile = ep.insert_address(world.names[kHostile]);
	fi_av_set_attr attr{};
	attr.count = 2;
	attr.start_addr = FI_ADDR_NOTAVAIL;
	attr.end_addr = FI_ADDR_NOTAVAIL;
	PairGroup g;
	fid_av_set* set = nullptr;
	FT_CHECK(fi_av_set(ep.av(), &attr, &set, nullptr));
	g.set.reset(set);
	FT_CHECK(fi_av_set_insert(set, self));
	FT_CHECK(fi_av_set_insert(set, hostile));
	FT_CHECK(fi_av_set_addr(set, &g.coll_addr));
	fid_mc* mc = nullptr;
	FT_CHECK(fi_join_collective(ep.ep(), g.coll_addr, set, 0, &mc, nullptr));
	g.mc.reset(mc);
	boot.signal_set(victim_joining, 1);
	return g;
}

void wait_joined(Endpoint& ep, PairGroup& g)
{
	uint32_t event = 0;
	alignas(fi_eq_err_entry) std::byte entry[sizeof(fi_eq_err_entry)];
	const Deadline deadline(seconds(20));
	for (;;) {
		ep.progress();
		ssize_t n = fi_eq_read(ep.eq(), &event, entry, sizeof(entry), 0);
		if (n == -FI_EAVAIL) {
			fi_eq_err_entry err{};
			fi_eq_readerr(ep.eq(), &err, 0);
			return;
		}
		if (n > 0 && event == FI_JOIN_COMPLETE) {
			g.joined = true;
			return;
		}
		expect(!deadline.expired(), "the join with the hostile member did not end");
	}
}

// A remote member copies the victim's own join record (host, process, memory
// file and nonce) into its own: the victim must not map its own file as
// that member's scratch (its writes "to the member" would then land in its
// own memory, where the member's RDMA writes aim them).
void case_join_record_names_victim(Bootstrap& boot, const Options& options)
{
	auto attack = [](Bootstrap& boot, const World& world, uint64_t key) {
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		boot.signal_set(hostile_connected, 1);
		proto::MsgHeader h;
		// The victim's record, as ours: rank 1 of 2, everything else its own.
		std::vector<std::byte> record = victim_join_record(boot, raw, h);
		const uint32_t rank = 1;
		std::memcpy(record.data() + 4, &rank, sizeof(rank));
		raw.send_message(h, record);
		return std::string("sent the victim's own join record as its own");
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World& world) {
		PairGroup group = start_join_with_hostile(boot, ep, world);
		const int before = mapped_scratch_files();
		wait_joined(ep, group);
		const int after = mapped_scratch_files();
		expect(after == before,
		       "the victim mapped %d more scratch file(s) for a member on another host "
		       "that named the victim's own",
		       after - before);
	};
	run_case(boot, options, 0, attack, victim_action, FI_COLLECTIVE);
}

// A member of the victim's group (the hostile peer, joined as rank 1 from
// another host) sends ARRIVAL messages no member sends: bytes beyond the
// group's scratch region, a counter the group does not have, or more
// arrivals on one counter than can wait (2^20) while the victim has no
// operation going. The victim fails the group, so that its
// next barrier ends with an error instead of writing outside its memory or
// growing without bound, and keeps serving the honest peer.
enum class MemberAttack { outside_scratch, unknown_counter, flood };

void member_arrivals(Bootstrap& boot, const Options& options, MemberAttack kind)
{
	constexpr size_t kCap = size_t(1) << 20; // arrivals that may wait, the default
	auto attack = [kind](Bootstrap& boot, const World& world, uint64_t key) {
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		boot.signal_set(hostile_connected, 1);
		proto::MsgHeader h;
		std::vector<std::byte> record = victim_join_record(boot, raw, h);
		proto::JoinRecord victim;
		proto::StopNotice unused;
		expect(proto::decode_coll_record(record, victim, unused) == proto::CollRecord::join,
		       "the victim's join record does not decode");
		proto::JoinRecord mine = victim; // its configuration and scratch layout
		mine.rank = 1;
		mine.slot = 0;
		mine.host = 0; // another host: no node-local path
		mine.nonce = 0;
		mine.pid = 0;
		mine.fd = -1;
		proto::encode_join_record(mine, record.data());
		raw.send_message(h, record);
		boot.signal_wait_at_least(pair_barrier, 1, [] {}); // the victim joined
		proto::MsgHeader a;
		a.opcode = proto::Opcode::Arrival;
		a.src_conn = raw.accept().conn_id;
		a.token = raw.accept().token;
		std::vector<std::byte> body(proto::ArrivalBody::kWireSize + 4096, std::byte{0x5a});
		if (kind == MemberAttack::outside_scratch) {
			int sent = 0;
			try {
				for (uint64_t offset :
				     {uint64_t(1) << 40, uint64_t(64) << 20, ~uint64_t(0) - 8}) {
					a.size = 4096;
					proto::encode_body(
						proto::ArrivalBody{victim.slot, 0, 1, offset},
						body.data());
					raw.send_message(a, body);
					sent++;
				}
			} catch (const CheckFailure&) {
				// The victim failed the member: its connection ended.
			}
			return strfmt("sent %d arrivals with 4 KiB for offsets beyond the scratch",
				      sent);
		}
		a.size = 0;
		if (kind == MemberAttack::unknown_counter) {
			// The largest counter an ARRIVAL can name; a pair has far fewer.
			proto::encode_body(proto::ArrivalBody{victim.slot,
							      proto::kMaxArrivalCounters - 1, 1, 0},
					   body.data());
			raw.send_message(a, std::span(body).first(proto::ArrivalBody::kWireSize));
			return std::string("sent an arrival for a counter the group lacks");
		}
		proto::encode_body(proto::ArrivalBody{victim.slot, 0, 1, 0}, body.data());
		const auto one = std::span(body).first(proto::ArrivalBody::kWireSize);
		// Four times the cap: without it the victim would keep them all.
		const size_t sent = raw.inject_messages(a, one, 4 * kCap);
		return strfmt("sent %zu arrivals while the victim had no operation", sent);
	};
	auto victim_action = [kind](Bootstrap& boot, Endpoint& ep, const World& world) {
		PairGroup group = start_join_with_hostile(boot, ep, world);
		wait_joined(ep, group);
		expect(group.joined, "the victim did not complete the join with the member");
		const size_t before = resident_bytes();
		boot.signal_set(pair_barrier, 1);
		boot.signal_wait_at_least(hostile_done, 1, [&] { ep.progress(); });
		const Deadline drain(std::chrono::milliseconds(500)); // what is still in flight
		while (!drain.expired())
			ep.progress();
		// Waiting arrivals are counted per counter: queued one by one (24
		// bytes each) they took 24 MiB up to the cap, 96 MiB without one.
		const size_t grown = resident_bytes() - std::min(before, resident_bytes());
		expect(grown < (size_t(8) << 20),
		       "the victim grew by %zu MiB holding one member's arrivals", grown >> 20);
		OpContext ctx;
		FT_POST(ep, fi_barrier(ep.ep(), fi_mc_addr(group.mc.get()), &ctx));
		const Deadline deadline(seconds(20));
		while (!ctx.done) {
			expect(!deadline.expired(),
			       "the barrier of the attacked group did not end");
			ep.progress();
		}
		expect(ctx.error != 0, "the barrier of a group whose member sent %s succeeded",
		       kind == MemberAttack::flood             ? "2^20 arrivals"
		       : kind == MemberAttack::unknown_counter ? "an unknown counter"
							       : "bytes outside its scratch");
	};
	run_case(boot, options, 0, attack, victim_action, FI_COLLECTIVE);
}

void case_member_arrival_outside_scratch(Bootstrap& boot, const Options& options)
{
	member_arrivals(boot, options, MemberAttack::outside_scratch);
}

void case_member_arrival_unknown_counter(Bootstrap& boot, const Options& options)
{
	member_arrivals(boot, options, MemberAttack::unknown_counter);
}

void case_member_arrival_flood(Bootstrap& boot, const Options& options)
{
	member_arrivals(boot, options, MemberAttack::flood);
}

// Collective arrivals count only from the member they name. A process that
// is connected but in no group sends write immediates (which reach the
// victim's completion queue with no key check and no sender) in the layout
// collective arrivals and rendezvous completions once had, and ARRIVAL
// messages, on its own connection, naming either member of the victim's
// group, with and without bytes for the group's scratch. Meanwhile the
// victim and the honest peer run allreduces in a group of their own over
// the core, every result checked.
void case_forged_arrivals(Bootstrap& boot, const Options& options)
{
	if (boot.rank() == kHostile) {
		const uint64_t key = random_u64();
		const World world = exchange(boot, hostile_address(key));
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		boot.signal_set(hostile_connected, 1);
		boot.signal_wait_at_least(victim_joining, 1, [] {});
		int immediates = 0, arrivals = 0;
		std::vector<std::byte> body(proto::ArrivalBody::kWireSize + 64, std::byte{0x5a});
		for (uint32_t slot = 0; slot < 4; slot++) {
			for (uint32_t counter = 0; counter < 512; counter++) {
				// Kind 2 (collective), slot, counter; kind 1 (rendezvous), an id.
				for (uint32_t data : {2u << 28 | slot << 18 | counter,
						      1u << 28 | (slot << 9 | counter)}) {
					expect(raw.write_immediate(data) == 0,
					       "the victim's core refused a write immediate");
					immediates++;
				}
				for (uint32_t rank : {0u, 1u}) {
					const size_t payload = counter % 2 ? 64 : 0;
					proto::MsgHeader h;
					h.opcode = proto::Opcode::Arrival;
					h.src_conn = raw.accept().conn_id;
					h.token = raw.accept().token;
					h.size = payload;
					proto::encode_body(
						proto::ArrivalBody{slot, counter, rank,
								   payload ? counter * 64 : 0},
						body.data());
					raw.send_message(h, std::span(body).first(
								    proto::ArrivalBody::kWireSize +
								    payload));
					arrivals++;
				}
			}
		}
		boot.signal_set(hostile_done, 1);
		boot.signal_wait_at_least(victim_done, 1, [] {});
		boot.note(strfmt("sent %d write immediates and %d ARRIVAL messages", immediates,
				 arrivals));
		return;
	}
	// The core path, as between hosts (on one host members would write
	// through shared memory).
	setenv("FI_RCOLL_COLL_LOCAL", "0", 1);
	coll::EndpointOptions eo;
	eo.provider = options.provider;
	coll::CollEndpoint ep(eo);
	const std::vector<fi_addr_t> world = ep.exchange_addresses(boot);
	if (boot.rank() == kVictim)
		boot.signal_wait_at_least(hostile_connected, 1, [&] { ep.progress(); });
	const std::vector<fi_addr_t> pair{world[kVictim], world[kHonest]};
	coll::Group group(ep, coll::av_set_inserted(ep, pair), {kVictim, kHonest}, world,
			  boot.rank(), "victim and honest peer");
	if (boot.rank() == kVictim)
		boot.signal_set(victim_joining, 1);
	// Element 0 says whether the victim still sees the attack going on, so
	// both members agree when to stop; the rest is checked.
	const size_t counts[] = {2, 8, 64, 1024, 8192};
	coll::GuardedBuffer in, out;
	int calls = 0;
	const Deadline deadline(seconds(60));
	for (bool more = true; more; calls++) {
		expect(!deadline.expired(), "%d allreduces in 60 s", calls);
		const size_t count = counts[calls % std::size(counts)];
		in.prepare(count * sizeof(uint64_t));
		out.prepare(count * sizeof(uint64_t));
		auto* v = reinterpret_cast<uint64_t*>(in.data());
		v[0] = boot.rank() == kVictim && (boot.signal_get(hostile_done) == 0 || calls < 20);
		for (size_t j = 1; j < count; j++)
			v[j] = uint64_t(boot.rank() + 1) * uint64_t(calls + 1) + j;
		coll::CallSpec call{FI_ALLREDUCE, count, FI_UINT64, FI_SUM};
		OpContext ctx;
		coll::post(ep, group, call, &in, &out, ctx);
		ep.wait_done(ctx, call.describe());
		coll::expect_collective_completion(ctx, call.describe());
		const auto* r = reinterpret_cast<const uint64_t*>(out.data());
		for (size_t j = 1; j < count; j++)
			expect(r[j] == 3 * uint64_t(calls + 1) + 2 * j,
			       "allreduce #%d (%zu elements): element %zu is %llu, want %llu",
			       calls, count, j, (unsigned long long)r[j],
			       (unsigned long long)(3 * uint64_t(calls + 1) + 2 * j));
		out.expect_guards(call.describe());
		more = r[0] != 0;
	}
	coll::ProgressingBarrier(ep, boot, 2, pair_barrier).wait();
	if (boot.rank() == kVictim) {
		boot.signal_set(victim_done, 1);
		boot.note(strfmt("%d allreduces verified during the attack", calls));
	}
}

using rcoll::local::ScratchFileHeader;

// Maps the scratch file of a collective group that process `pid` holds,
// through /proc as a member does (it needs only what any process of the
// same user has); null if it holds none.
ScratchFileHeader* map_scratch_file_of(pid_t pid)
{
	for (int fd = 0; fd < 1024; fd++) {
		const std::string path = strfmt("/proc/%d/fd/%d", int(pid), fd);
		char link[256] = {};
		if (readlink(path.c_str(), link, sizeof(link) - 1) <= 0 ||
		    !std::strstr(link, "rcoll-coll"))
			continue;
		const int f = open(path.c_str(), O_RDWR | O_CLOEXEC);
		struct stat st {};
		if (f < 0 || fstat(f, &st) != 0 || size_t(st.st_size) < sizeof(ScratchFileHeader)) {
			if (f >= 0)
				close(f);
			continue;
		}
		void* p =
			mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
		close(f);
		if (p != MAP_FAILED)
			return static_cast<ScratchFileHeader*>(p);
	}
	return nullptr;
}

// The victim and an honest member form a group; the hostile process, which
// can ring the victim's doorbell (as a member can, or a process of the same
// user that opens the file through /proc), maps the victim's file and
// `ring`s it while the honest member, alive and asleep, stays out of a
// barrier. The victim's progress calls must stay short and its barrier must
// still end with FI_ETIMEDOUT after its 1 s timeout.
void ring_while_a_member_hangs(Bootstrap& boot, const Options& options,
			       const std::function<void(ScratchFileHeader&)>& ring)
{
	if (options.provider != "rcoll")
		throw NotApplicable("FI_RCOLL_COLL_TIMEOUT_MS is an rcoll parameter");
	if (const char* local = std::getenv("FI_RCOLL_COLL_LOCAL");
	    local && std::string(local) == "0")
		throw NotApplicable("FI_RCOLL_COLL_LOCAL=0: no scratch file to ring");
	// The engine's calls (not the flags of the shared-memory calls) read
	// the doorbell while they wait.
	setenv("FI_RCOLL_COLL_SHM", "0", 1);
	setenv("FI_RCOLL_COLL_TIMEOUT_MS", "1000", 1);
	coll::EndpointOptions eo;
	eo.provider = options.provider;
	coll::CollEndpoint ep(eo);
	const std::vector<fi_addr_t> world = ep.exchange_addresses(boot);
	if (boot.rank() == kHostile) {
		boot.signal_wait_at_least(victim_joining, 1, [&] { ep.progress(); });
		ScratchFileHeader* head = map_scratch_file_of(pid_t(boot.signal_get(victim_pid)));
		expect(head != nullptr, "no collective scratch file found in the victim");
		expect(head->magic == ScratchFileHeader::kMagic,
		       "the victim's scratch file has another layout (magic %#llx)",
		       (unsigned long long)head->magic);
		ring(*head);
		return;
	}
	const std::vector<fi_addr_t> pair{world[kVictim], world[kHonest]};
	coll::Group group(ep, coll::av_set_inserted(ep, pair), {kVictim, kHonest}, world,
			  boot.rank(), "victim and honest peer");
	if (boot.rank() == kHonest) {
		// A member that hangs: alive, it enters no collective, and leaves
		// the CPUs to the victim and the hostile process.
		boot.signal_wait_at_least(
			victim_done, 1,
			[] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); },
			seconds(60));
		return;
	}
	boot.signal_set(victim_pid, uint64_t(getpid()));
	boot.signal_set(victim_joining, 1);
	// Long enough for the hostile process to ring throughout.
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
	OpContext barrier;
	const auto posted = Clock::now();
	coll::post(ep, group, coll::CallSpec{FI_BARRIER}, nullptr, nullptr, barrier);
	// Measured in this thread's CPU time: on a loaded host the scheduler may
	// take the CPU away from a short call for longer than the limit.
	auto cpu_seconds = [] {
		timespec t{};
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
		return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
	};
	double longest = 0;
	while (!barrier.done && Clock::now() - posted < seconds(10)) {
		const double before = cpu_seconds();
		ep.progress();
		longest = std::max(longest, cpu_seconds() - before);
	}
	const double after = std::chrono::duration<double>(Clock::now() - posted).count();
	boot.signal_set(victim_done, 1);
	// Held by the ringing, a call would last the barrier's whole second;
	// an honest one takes well under a millisecond, up to 0.021 s seen
	// once under AddressSanitizer on a loaded host.
#if defined(__SANITIZE_ADDRESS__)
	constexpr double kHeld = 0.1;
#else
	constexpr double kHeld = 0.02;
#endif
	expect(longest < kHeld, "one progress call took %.3f s of CPU: the ringing held it",
	       longest);
	expect(barrier.done,
	       "the barrier was still pending %.1f s after posting, with a 1 s "
	       "timeout: the ringing held it off",
	       after);
	expect(barrier.error == FI_ETIMEDOUT, "the barrier ended with %s, not a timeout",
	       fi_strerror(barrier.error));
	boot.note(strfmt("the barrier timed out %.2f s after posting; longest progress call %.4f s",
			 after, longest));
}

constexpr uint32_t kMark = 1u << 31, kMappedMark = kMark | 1u << 30;
constexpr uint32_t kNoMember = (1u << 30) - 1;

// Besides arrivals, a member's doorbell carries marks: each member says once
// that it maps the file, and once that it stopped writing. A mark rung again,
// or one naming no member, says nothing new. Counted as the group moving, it
// would let whatever can ring the doorbell keep a stuck group from ever
// timing out.
void case_repeated_marks(Bootstrap& boot, const Options& options)
{
	ring_while_a_member_hangs(boot, options, [&](ScratchFileHeader& head) {
		size_t rung = 0;
		while (boot.signal_get(victim_done) == 0) {
			for (uint32_t value :
			     {kMappedMark | kHonest, kMark | kNoMember, kMappedMark | kNoMember})
				rung += head.doorbell.push(value) ==
					rcoll::local::Doorbell::Push::rung;
			std::this_thread::sleep_for(std::chrono::milliseconds(20));
		}
		expect(rung > 0, "no mark went into the victim's doorbell");
		boot.note(strfmt("rang %zu marks that say nothing new", rung));
	});
}

// The same marks rung into each cell the moment the victim frees it, so the
// ring never runs empty: one poll must not drain it for ever (it takes at
// most about a ring's worth of values).
void case_doorbell_flood(Bootstrap& boot, const Options& options)
{
	ring_while_a_member_hangs(boot, options, [&](ScratchFileHeader& head) {
		using rcoll::local::Doorbell;
		// The producer position of the free cell the victim will reach
		// last: from there on, each cell in ring order as soon as it is
		// freed (its sequence number then names the next lap's producer).
		uint64_t next = UINT64_MAX;
		for (uint64_t i = 0; i < Doorbell::kCells; i++) {
			const uint64_t seq = head.doorbell.cells[i].seq.load();
			if (seq % Doorbell::kCells == i)
				next = std::min(next, seq);
		}
		expect(next != UINT64_MAX, "the victim's doorbell has no free cell");
		size_t rung = 0, polls = 0;
		const auto began = Clock::now();
		for (;;) {
			Doorbell::Cell& c = head.doorbell.cells[next % Doorbell::kCells];
			if (c.seq.load(std::memory_order_acquire) == next) {
				c.value = kMark | kNoMember;
				c.seq.store(next + 1, std::memory_order_release);
				next++;
				rung++;
			} else if (++polls % 4096 == 0 && (boot.signal_get(victim_done) ||
							   Clock::now() - began > seconds(15))) {
				break; // at most 15 s: a victim held that long gets out and says so
			}
		}
		boot.note(strfmt("rang %zu marks naming no member", rung));
	});
}

// WRITE_DATA from a peer to an endpoint opened without FI_RMA (here
// FI_MSG | FI_TAGGED, as librcoll-mpi opens FI_COLLECTIVE | FI_MSG): no
// write can target it, so no remote-write completion may appear in its CQ
// (it carries no op_context; an application that only posted receives takes
// every entry for one of its own).
void case_write_data_unasked(Bootstrap& boot, const Options& options)
{
	auto attack = [](Bootstrap&, const World& world, uint64_t key) {
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		proto::MsgHeader h;
		h.opcode = proto::Opcode::WriteData;
		h.flags = proto::kFlagRemoteCqData;
		h.cq_data = 0x5eed;
		h.src_conn = raw.accept().conn_id;
		h.token = raw.accept().token;
		int sent = 0;
		try {
			for (; sent < 4; sent++)
				raw.send_message(h, {});
		} catch (const CheckFailure&) {
			// The victim may end the connection over it.
		}
		return strfmt("sent %d WRITE_DATA messages with no write", sent);
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World&) {
		boot.signal_wait_at_least(hostile_done, 1, [&] { ep.progress(); });
		const Deadline linger(std::chrono::milliseconds(300));
		while (!linger.expired())
			ep.progress();
		expect(ep.unsolicited().empty(),
		       "an endpoint without FI_RMA reported %zu completions with no op_context "
		       "(flags %#llx) for a stranger's WRITE_DATA",
		       ep.unsolicited().size(),
		       ep.unsolicited().empty()
			       ? 0ull
			       : (unsigned long long)ep.unsolicited().front().entry.flags);
	};
	run_case(boot, options, 0, attack, victim_action);
}

uint64_t fnv1a(uint64_t h, const void* data, size_t len)
{
	auto* p = static_cast<const unsigned char*>(data);
	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

// The join id of a group joined from `keys` (in the set's order, no
// comm_key), the `ordinal`-th join of that list: as coll_group.cpp makes it.
uint64_t join_id_of(const std::vector<uint64_t>& keys, uint32_t ordinal)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (uint64_t k : keys)
		h = fnv1a(h, &k, sizeof(k));
	return fnv1a(h, &ordinal, sizeof(ordinal));
}

// A connected process that is no member of a group sends a join record for
// it (join ids are hashes of the member keys and a count, nothing secret).
// Members drop records from non-members; the victim and the honest peer
// join their pair and run a barrier.
void case_join_record_from_stranger(Bootstrap& boot, const Options& options)
{
	if (boot.rank() == kHostile) {
		const uint64_t key = random_u64();
		const World world = exchange(boot, hostile_address(key));
		RawPeer raw(world.names[kVictim], request(key));
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		const std::vector<uint64_t> keys{hostile::parse_address(world.names[kVictim]).key,
						 hostile::parse_address(world.names[kHonest]).key};
		proto::JoinRecord rec;
		rec.rank = 0; // the victim's rank: the stranger is not it
		rec.size = 2;
		std::vector<std::byte> record(proto::JoinRecord::kWireSize);
		proto::encode_join_record(rec, record.data());
		proto::MsgHeader h =
			eager_header(raw.accept().conn_id, raw.accept().token, record.size());
		h.flags = proto::kFlagTagged | proto::kFlagCollective;
		for (uint32_t ordinal = 0; ordinal < 4; ordinal++) {
			h.tag = join_id_of(keys, ordinal);
			raw.send_message(h, record);
		}
		boot.signal_set(hostile_connected, 1);
		boot.signal_wait_at_least(victim_done, 1, [] {});
		boot.note("sent join records for the victim's next 4 joins with the honest peer");
		return;
	}
	coll::EndpointOptions eo;
	eo.provider = options.provider;
	coll::CollEndpoint ep(eo);
	const std::vector<fi_addr_t> world = ep.exchange_addresses(boot);
	if (boot.rank() == kVictim) {
		boot.signal_wait_at_least(hostile_connected, 1, [&] { ep.progress(); });
		const Deadline settle(std::chrono::milliseconds(300));
		while (!settle.expired())
			ep.progress();
	}
	const std::vector<fi_addr_t> pair{world[kVictim], world[kHonest]};
	{
		coll::Group group(ep, coll::av_set_inserted(ep, pair), {kVictim, kHonest}, world,
				  boot.rank(), "victim and honest peer");
		OpContext ctx;
		coll::post(ep, group, coll::CallSpec{FI_BARRIER}, nullptr, nullptr, ctx);
		ep.wait_done(ctx, "barrier");
		coll::expect_collective_completion(ctx, "barrier");
		coll::ProgressingBarrier(ep, boot, 2, pair_barrier).wait();
	}
	if (boot.rank() == kVictim) {
		boot.signal_set(victim_done, 1);
		boot.note("joined with the honest peer and ran a barrier");
	}
}

#if defined(__SANITIZE_ADDRESS__)
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

// What this process holds of what it allocated: its resident set or, under
// AddressSanitizer (whose quarantine keeps freed memory resident), the bytes
// its allocator handed out and did not get back.
size_t allocated_bytes()
{
#if defined(__SANITIZE_ADDRESS__)
	return __sanitizer_get_current_allocated_bytes();
#else
	return resident_bytes();
#endif
}

// Join records kept for joins not made yet are capped per peer key: a
// stranger that reconnects under a new key after each batch (below the cap,
// so it never fails) must not make the victim keep them all.
void case_early_records_across_reconnects(Bootstrap& boot, const Options& options)
{
	constexpr int kConnections = 400;
	constexpr size_t kPerConnection = 1000; // below FI_RCOLL_COLL_EARLY_MAX (1024)
	auto attack = [](Bootstrap&, const World& world, uint64_t) {
		proto::JoinRecord join;
		join.rank = 1;
		join.size = 2;
		std::vector<std::byte> record(proto::JoinRecord::kWireSize);
		proto::encode_join_record(join, record.data());
		size_t sent = 0, refused = 0;
		for (int c = 0; c < kConnections; c++) {
			std::unique_ptr<RawPeer> raw;
			for (;;) {
				raw = std::make_unique<RawPeer>(world.names[kVictim],
								request(random_u64()));
				if (raw->accepted())
					break;
				refused++;
				expect(refused < 200, "the victim refused %zu reconnects", refused);
				std::this_thread::sleep_for(std::chrono::milliseconds(50));
			}
			proto::MsgHeader h = eager_header(raw->accept().conn_id,
							  raw->accept().token, record.size());
			h.flags = proto::kFlagTagged | proto::kFlagCollective;
			h.tag = random_u64();
			for (size_t i = 0; i < kPerConnection; i++)
				raw->send_message(h, record);
			sent += kPerConnection;
		}
		return strfmt("%zu join records over %d connections under new keys (%zu refused)",
			      sent, kConnections, refused);
	};
	// 400,000 records take 9 s here, over 30 s under AddressSanitizer on a
	// loaded host: the waits for them get most of the case's 180 s.
	constexpr auto kAttackBudget = seconds(150);
	auto victim_action = [&](Bootstrap& boot, Endpoint& ep, const World&) {
		const size_t before = allocated_bytes();
		boot.signal_wait_at_least(
			hostile_done, 1, [&] { ep.progress(); }, kAttackBudget);
		const Deadline drain(std::chrono::milliseconds(500));
		while (!drain.expired())
			ep.progress();
		const size_t after = allocated_bytes();
		const size_t grown = after - std::min(before, after);
		expect(grown < (size_t(16) << 20),
		       "the victim grew by %zu MiB keeping join records of peers that are gone",
		       grown >> 20);
		boot.note(strfmt("grew by %zu KiB", grown >> 10));
	};
	run_case(boot, options, 0, attack, victim_action, FI_COLLECTIVE, kAttackBudget);
}

// Another process claims the victim's OWN endpoint key. The victim talks to
// itself (its own address in its AV). The claimer must not learn the token
// of the victim's connection to itself: with it, a message from any
// connection passes for one the victim sent itself. Nor may the claim tear
// down the victim's own connection.
void case_claim_own_key(Bootstrap& boot, const Options& options)
{
	constexpr uint64_t kSelfTag = 0x5e1f, kForgedTag = 0xf0;
	auto attack = [](Bootstrap& boot, const World& world, uint64_t) {
		boot.signal_wait_at_least(victim_ready, 1, [] {});
		const uint64_t victim_key = hostile::parse_address(world.names[kVictim]).key;
		RawPeer claim(world.names[kVictim], request(victim_key));
		boot.signal_set(hostile_connected, 1);
		if (!claim.accepted())
			return strfmt("a request claiming the victim's own key was refused: %s",
				      claim.refusal().c_str());
		const uint32_t self_id = claim.accept().conn_id;
		const uint64_t self_token = claim.accept().token;
		boot.signal_wait_at_least(pair_barrier, 1, [] {});
		RawPeer other(world.names[kVictim], request(random_u64()));
		expect(other.accepted(), "the victim refused a new peer: %s",
		       other.refusal().c_str());
		const std::string s = "forged as the victim itself";
		proto::MsgHeader h = eager_header(self_id, self_token, s.size());
		h.tag = kForgedTag;
		other.send_message(h, text(s));
		return strfmt("claimed the victim's key (accepted: conn %u), then sent a message "
			      "with that connection's token from another connection",
			      self_id);
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World& world) {
		const fi_addr_t self = ep.insert_address(world.names[kVictim]);
		RegisteredBuffer buffer(ep, 2 * kSlot);
		auto roundtrip = [&](int i) {
			OpContext rx, tx;
			FT_POST(ep, fi_trecv(ep.ep(), buffer.data(), kSlot, buffer.desc(),
					     FI_ADDR_UNSPEC, kSelfTag, 0, &rx));
			const std::string s = strfmt("self #%d", i);
			std::memcpy(buffer.data() + kSlot, s.data(), s.size());
			FT_POST(ep, fi_tsend(ep.ep(), buffer.data() + kSlot, s.size(),
					     buffer.desc(), self, kSelfTag, &tx));
			const Deadline limit(seconds(3));
			while (!(rx.done && tx.done) && !limit.expired())
				ep.progress();
			if (!rx.done) {
				fi_cancel(&ep.ep()->fid, &rx);
				const Deadline cancel(seconds(1));
				while (!rx.done && !cancel.expired())
					ep.progress();
			}
			while (!tx.done)
				ep.progress();
			return rx.done && !rx.error && tx.done && !tx.error;
		};
		expect(roundtrip(0), "a message to itself failed before any attack");
		boot.signal_set(victim_ready, 1);
		boot.signal_wait_at_least(hostile_connected, 1, [&] { ep.progress(); });
		const Deadline settle(std::chrono::milliseconds(300));
		while (!settle.expired())
			ep.progress();
		int failed = 0;
		for (int i = 1; !roundtrip(i); i++)
			expect(++failed < 5, "5 messages to itself failed after the claim");
		boot.signal_set(pair_barrier, 1);
		boot.signal_wait_at_least(hostile_done, 1, [&] { ep.progress(); });
		OpContext forged;
		FT_POST(ep, fi_trecv(ep.ep(), buffer.data(), kSlot, buffer.desc(), FI_ADDR_UNSPEC,
				     kForgedTag, 0, &forged));
		const Deadline wait(std::chrono::milliseconds(500));
		while (!forged.done && !wait.expired())
			ep.progress();
		expect(!forged.done || forged.source != self,
		       "another process's message was reported as the victim's own (fi_addr %llu)",
		       (unsigned long long)forged.source);
		expect(failed == 0,
		       "%d of the victim's messages to itself failed after another process "
		       "claimed its key",
		       failed);
		if (!forged.done)
			fi_cancel(&ep.ep()->fid, &forged);
		while (!forged.done)
			ep.progress();
	};
	run_case(boot, options, 0, attack, victim_action);
}

// A process claims the honest peer's key before the honest peer connects
// (documented: it is taken for that endpoint meanwhile), then goes away.
// Once the honest peer has connected, the token the squatter was handed
// must no longer pass: a message carrying it, from any connection, is not
// the honest peer's.
void case_squatted_token(Bootstrap& boot, const Options& options)
{
	if (boot.rank() == kHostile) {
		const uint64_t key = random_u64();
		const World world = exchange(boot, hostile_address(key));
		const uint64_t honest_key = hostile::parse_address(world.names[kHonest]).key;
		uint32_t id = 0;
		uint64_t token = 0;
		{
			RawPeer squat(world.names[kVictim], request(honest_key));
			expect(squat.accepted(), "the victim refused the squatter: %s",
			       squat.refusal().c_str());
			id = squat.accept().conn_id;
			token = squat.accept().token;
		} // closed
		boot.signal_set(hostile_connected, 1);
		boot.signal_wait_at_least(first_sent, 1, [] {});
		RawPeer other(world.names[kVictim], request(key));
		expect(other.accepted(), "the victim refused a new peer: %s",
		       other.refusal().c_str());
		const std::string s = "squatter, with the honest peer's token";
		other.send_message(eager_header(id, token, s.size()), text(s));
		boot.signal_set(hostile_done, 1);
		boot.signal_wait_at_least(victim_done, 1, [] {});
		boot.note("squatted the honest key, left, and forged with its token once the "
			  "honest peer connected");
		return;
	}
	EndpointConfig config{options.provider};
	config.caps = FI_MSG | FI_TAGGED | FI_SOURCE;
	Endpoint ep(config);
	const World world = exchange(boot, ep.local_address());
	if (boot.rank() == kHonest) {
		boot.signal_wait_at_least(hostile_connected, 1, [&] { ep.progress(); });
		std::this_thread::sleep_for(std::chrono::milliseconds(500));
		return run_honest(boot, ep, world);
	}
	boot.note(run_victim(boot, ep, world, 0));
}

// FI_RCOLL_UNEXPECTED_MAX caps one peer's unreceived messages; strangers
// that each fill their budget under a new key and leave add up to
// FI_RCOLL_UNKNOWN_PEERS_MAX times that (256 GiB by default). Here 8 MiB per
// peer and 16 strangers: the victim must not hold 16 budgets.
void case_unexpected_across_strangers(Bootstrap& boot, const Options& options)
{
	constexpr size_t kBudget = size_t(8) << 20;
	constexpr int kStrangers = 16;
	if (boot.rank() == kVictim)
		setenv("FI_RCOLL_UNEXPECTED_MAX", std::to_string(kBudget).c_str(), 1);
	auto attack = [](Bootstrap&, const World& world, uint64_t) {
		size_t total = 0;
		int cut_off = 0;
		for (int s = 0; s < kStrangers; s++) {
			RawPeer raw(world.names[kVictim], request(random_u64()));
			if (!raw.accepted())
				continue; // refused: the victim may still be ending the last one
			const size_t size = raw.accept().eager_limit;
			std::vector<std::byte> payload(size, std::byte{0x77});
			proto::MsgHeader h =
				eager_header(raw.accept().conn_id, raw.accept().token, size);
			h.tag = 99; // nobody receives it
			try {
				for (size_t sent = 0; sent + size + 4096 < kBudget; sent += size) {
					raw.send_message(h, payload);
					total += size;
				}
			} catch (const CheckFailure&) {
				cut_off++; // the victim ended the connection: over the budget
			}
		}
		return strfmt("%d strangers sent %zu MiB of unreceived messages; %d were cut off",
			      kStrangers, total >> 20, cut_off);
	};
	auto victim_action = [](Bootstrap& boot, Endpoint& ep, const World&) {
		const size_t before = resident_bytes();
		boot.signal_wait_at_least(hostile_done, 1, [&] { ep.progress(); });
		const size_t grown = resident_bytes() - std::min(before, resident_bytes());
		expect(grown < 4 * kBudget,
		       "the victim holds %zu MiB of unreceived messages from peers that left "
		       "(FI_RCOLL_UNEXPECTED_MAX %zu MiB per peer)",
		       grown >> 20, kBudget >> 20);
	};
	run_case(boot, options, 0, attack, victim_action);
}

// A member on another host (the hostile peer, rank 2 of {victim, honest,
// hostile}) writes into the victim's scratch, where the victim reads the
// keys members ship for rendezvous writes, a "key" naming an address in the
// honest member's process (a buffer it never exposed), and signals the key's
// counter. The honest member runs on the victim's host, so the victim's
// write into its call buffer is a process_vm_writev to the key's address:
// it must not land outside what the honest member exposed.
// The member may also write the forged key where the honest member keeps
// its own copy of the keys it ships (the operation's own_keys, in its
// scratch): through an ARRIVAL with bytes, or a plain core RDMA write with
// the scratch key of the honest member's join record. Members on other
// hosts can write every byte of a member's scratch, so no copy there may
// vouch for a key.
enum class OwnCopy { untouched, arrival, rdma };

void member_key_redirects_cma(Bootstrap& boot, const Options& options, OwnCopy own_copy)
{
	constexpr size_t kBytes = size_t(1) << 20; // above broadcast_eager_bytes (256 KiB on tcp)
	constexpr uint32_t kCounterBase = 17;      // MonotoneCounters{3}.total(): the first op's
	constexpr uint64_t kKeySlots = 2 * proto::kScratchKeyBytes; // key_slots_offset
	constexpr uint64_t kOwnOutputKey = proto::kScratchKeyBytes; // own_keys_offset + 24
	if (boot.rank() == kHostile) {
		const uint64_t key = random_u64();
		const World world = exchange(boot, hostile_address(key));
		RawPeer rv(world.names[kVictim], request(key));
		RawPeer rb(world.names[kHonest], request(key));
		expect(rv.accepted() && rb.accepted(), "refused");
		boot.signal_set(hostile_connected, 1);
		proto::MsgHeader hv, hb;
		std::vector<std::byte> record = victim_join_record(boot, rv, hv);
		std::vector<std::byte> honest_record;
		{
			std::vector<std::byte> m;
			do {
				m = rb.receive();
				proto::ParsedMessage parsed;
				proto::Limits limits{4096, rb.accept().conn_id + 1,
						     uint64_t(1) << 40};
				expect(proto::validate_message(m.data(), m.size(), limits,
							       parsed) == proto::WireStatus::Ok,
				       "an invalid message");
				hb = parsed.header;
			} while (!(hb.flags & proto::kFlagCollective));
			honest_record.assign(m.begin() + proto::kHeaderSize, m.end());
			hb.src_conn = rb.accept().conn_id;
			hb.token = rb.accept().token;
		}
		proto::JoinRecord victim, honest;
		proto::StopNotice unused;
		expect(proto::decode_coll_record(record, victim, unused) == proto::CollRecord::join,
		       "the victim's join record does not decode");
		expect(proto::decode_coll_record(honest_record, honest, unused) ==
			       proto::CollRecord::join,
		       "the honest member's join record does not decode");
		proto::JoinRecord mine = victim;
		mine.rank = 2;
		mine.slot = 0;
		mine.host = 0; // another host
		mine.nonce = 0;
		mine.pid = 0;
		mine.fd = -1;
		const uint64_t own[3] = {reinterpret_cast<uint64_t>(rv.local().data()),
					 rv.local_key(), kBytes};
		std::memcpy(mine.scratch.data(), own, sizeof(own));
		proto::encode_join_record(mine, record.data());
		rv.send_message(hv, record);
		rb.send_message(hb, record);
		boot.signal_wait_at_least(victim_stuck, 1, [] {});
		const uint64_t canary = boot.signal_get(target_address);
		const uint64_t forged[6] = {canary,
					    0x1234,
					    ~uint64_t(0) >> 1,
					    reinterpret_cast<uint64_t>(rv.local().data()),
					    rv.local_key(),
					    kBytes};
		// 1. The honest member's own copy of its output key.
		if (own_copy == OwnCopy::rdma) {
			uint64_t scratch[3];
			std::memcpy(scratch, honest.scratch.data(), sizeof(scratch));
			std::memcpy(rb.local().data(), forged, 24);
			const int err = rb.write(24, scratch[0] + kOwnOutputKey, scratch[1]);
			expect(err == 0, "RDMA write into the honest member's scratch: %d", err);
		} else if (own_copy == OwnCopy::arrival) {
			proto::MsgHeader a;
			a.opcode = proto::Opcode::Arrival;
			a.src_conn = rb.accept().conn_id;
			a.token = rb.accept().token;
			a.size = 24;
			std::vector<std::byte> body(proto::ArrivalBody::kWireSize + 24);
			// A counter of a later operation: nothing waits for it.
			proto::encode_body(proto::ArrivalBody{honest.slot, kCounterBase + 40, 2,
							      kOwnOutputKey},
					   body.data());
			std::memcpy(body.data() + proto::ArrivalBody::kWireSize, forged, 24);
			rb.send_message(a, body);
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(300));
		// 2. The victim, root of a 1 MiB broadcast, waits for its
		// children's keys in slots 0 (honest, virtual rank 1) and 1 (us).
		proto::MsgHeader a;
		a.opcode = proto::Opcode::Arrival;
		a.src_conn = rv.accept().conn_id;
		a.token = rv.accept().token;
		a.size = sizeof(forged);
		std::vector<std::byte> body(proto::ArrivalBody::kWireSize + sizeof(forged));
		proto::encode_body(proto::ArrivalBody{victim.slot, kCounterBase, 2, kKeySlots},
				   body.data());
		std::memcpy(body.data() + proto::ArrivalBody::kWireSize, forged, sizeof(forged));
		rv.send_message(a, body);
		a.size = 0;
		proto::encode_body(proto::ArrivalBody{victim.slot, kCounterBase + 1, 2, 0},
				   body.data());
		rv.send_message(a, std::span(body).first(proto::ArrivalBody::kWireSize));
		boot.signal_set(hostile_done, 1);
		boot.signal_wait_at_least(victim_done, 1, [] {});
		boot.note(strfmt("shipped, as the honest member's key, one naming an unexposed "
				 "buffer in its process%s",
				 own_copy == OwnCopy::rdma ? "; wrote it into its own copy by RDMA"
				 : own_copy == OwnCopy::arrival
					 ? "; wrote it into its own copy by ARRIVAL"
					 : ""));
		return;
	}
	coll::EndpointOptions eo;
	eo.provider = options.provider;
	auto* ep = new coll::CollEndpoint(eo); // left open: the group cannot close cleanly
	const std::vector<fi_addr_t> world = ep->exchange_addresses(boot);
	boot.signal_wait_at_least(hostile_connected, 1, [&] { ep->progress(); });
	const std::vector<fi_addr_t> all{world[kVictim], world[kHonest], world[kHostile]};
	auto* group =
		new coll::Group(*ep, coll::av_set_inserted(*ep, all), {kVictim, kHonest, kHostile},
				world, boot.rank(), "trio", coll::Group::Deferred{});
	if (boot.rank() == kVictim)
		boot.signal_set(victim_joining, 1);
	group->wait_joined(*ep);
	if (boot.rank() == kHonest) {
		std::vector<uint8_t> canary(kBytes, 0x3c); // never registered, never exposed
		boot.signal_set(target_address, reinterpret_cast<uint64_t>(canary.data()));
		boot.signal_wait_at_least(victim_done, 1, [&] { ep->progress(); });
		size_t changed = 0;
		for (uint8_t c : canary)
			changed += c != 0x3c;
		expect(changed == 0,
		       "%zu bytes of a buffer the honest member never exposed were written (a "
		       "member on another host chose the address)",
		       changed);
		boot.note("its unexposed buffer is intact");
		return;
	}
	boot.signal_wait_at_least(target_address, 1, [&] { ep->progress(); });
	std::vector<uint8_t> data(kBytes, 0xa5);
	auto* ctx = new OpContext;
	FT_CHECK(int(fi_broadcast(ep->ep(), data.data(), kBytes, nullptr, group->coll_addr(),
				  world[kVictim], FI_UINT8, 0, ctx)));
	ep->track(*ctx);
	for (const Deadline d(std::chrono::milliseconds(200)); !d.expired();)
		ep->progress();
	boot.signal_set(victim_stuck, 1);
	boot.signal_wait_at_least(hostile_done, 1, [&] { ep->progress(); });
	for (const Deadline d(std::chrono::milliseconds(1000)); !d.expired();)
		ep->progress();
	boot.signal_set(victim_done, 1);
	boot.note("ran the broadcast while the member shipped its forged key");
	_exit(0); // the broadcast buffer stays ours; skip the teardown of a wedged group
}

void case_member_key_redirects_cma(Bootstrap& boot, const Options& options)
{
	member_key_redirects_cma(boot, options, OwnCopy::untouched);
}

void case_member_key_own_copy_arrival(Bootstrap& boot, const Options& options)
{
	member_key_redirects_cma(boot, options, OwnCopy::arrival);
}

void case_member_key_own_copy_rdma(Bootstrap& boot, const Options& options)
{
	member_key_redirects_cma(boot, options, OwnCopy::rdma);
}

// A peer that connected while the victim's AV did not hold it (a stranger
// then) and that the victim named since (fi_av_insert, as a server
// does with a client's FI_SOURCE address) keeps sharing the strangers' one
// FI_RCOLL_UNEXPECTED_MAX as long as no new stranger connects: a stranger
// that fills it makes the named peer fail at its next unexpected message.
void case_named_peer_shares_strangers_budget(Bootstrap& boot, const Options& options)
{
	constexpr size_t kBudget = size_t(1) << 20;
	constexpr uint64_t kHonestTag = 0x4e, kFillTag = 99;
	if (boot.rank() == kVictim)
		setenv("FI_RCOLL_UNEXPECTED_MAX", std::to_string(kBudget).c_str(), 1);
	if (boot.rank() == kHostile) {
		const uint64_t key = random_u64();
		const World world = exchange(boot, hostile_address(key));
		RawPeer raw(world.names[kVictim], request(key)); // before the honest peer
		expect(raw.accepted(), "the victim refused a new peer: %s", raw.refusal().c_str());
		boot.signal_set(hostile_connected, 1);
		boot.signal_wait_at_least(victim_ready, 1, [] {});
		const std::byte one[1] = {std::byte{0x77}};
		proto::MsgHeader h = eager_header(raw.accept().conn_id, raw.accept().token, 1);
		h.tag = kFillTag;
		size_t sent = 0;
		try {
			for (; sent < kBudget; sent++)
				raw.send_message(h, one);
		} catch (const CheckFailure&) {
			// cut off: the strangers' budget is full
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(300));
		boot.signal_set(hostile_done, 1);
		boot.signal_wait_at_least(victim_done, 1, [] {});
		boot.note(strfmt("sent %zu one-byte messages nobody receives", sent));
		return;
	}
	EndpointConfig config{options.provider};
	config.caps = FI_MSG | FI_TAGGED | FI_SOURCE;
	Endpoint ep(config);
	const World world = exchange(boot, ep.local_address());
	RegisteredBuffer buffer(ep, kSlot);
	if (boot.rank() == kHonest) {
		boot.signal_wait_at_least(hostile_connected, 1, [&] { ep.progress(); });
		const fi_addr_t victim = ep.insert_address(world.names[kVictim]);
		auto send = [&](int i) {
			const std::string s = strfmt("honest #%d", i);
			std::memcpy(buffer.data(), s.data(), s.size());
			OpContext ctx;
			FT_POST(ep, fi_tsend(ep.ep(), buffer.data(), s.size(), buffer.desc(),
					     victim, kHonestTag, &ctx));
			ep.wait_ok(ctx, strfmt("honest send #%d", i));
		};
		send(0);
		boot.signal_set(first_sent, 1);
		boot.signal_wait_at_least(hostile_done, 1, [&] { ep.progress(); });
		send(1); // unexpected at the victim
		boot.signal_set(honest_done, 1);
		boot.signal_wait_at_least(victim_done, 1, [&] { ep.progress(); });
		return;
	}
	OpContext first;
	FT_POST(ep, fi_trecv(ep.ep(), buffer.data(), kSlot, buffer.desc(), FI_ADDR_UNSPEC,
			     kHonestTag, 0, &first));
	boot.signal_wait_at_least(first_sent, 1, [&] { ep.progress(); });
	while (!first.done)
		ep.progress();
	const fi_addr_t honest = ep.insert_address(world.names[kHonest]); // named now
	boot.signal_set(victim_ready, 1);
	boot.signal_wait_at_least(honest_done, 1, [&] { ep.progress(); });
	for (const Deadline d(std::chrono::milliseconds(300)); !d.expired();)
		ep.progress();
	OpContext second;
	FT_POST(ep, fi_trecv(ep.ep(), buffer.data(), kSlot, buffer.desc(), FI_ADDR_UNSPEC,
			     kHonestTag, 0, &second));
	for (const Deadline d(seconds(3)); !second.done && !d.expired();)
		ep.progress();
	const bool got = second.done && !second.error && second.source == honest;
	if (!second.done) {
		fi_cancel(&ep.ep()->fid, &second);
		while (!second.done)
			ep.progress();
	}
	boot.signal_set(victim_done, 1);
	expect(got, "the honest peer (in the AV) lost its message: a stranger filled the budget "
		    "it still shares with strangers");
	boot.note("received the named peer's message");
}

struct HostileCase {
	const char* name;
	const char* checks;
	seconds timeout;
	void (*run)(Bootstrap&, const Options&);
};

const HostileCase kCases[] = {
	{"forged-source",
	 "messages naming other peers' connections (own token, none, a guess) are dropped; the "
	 "honest peer's messages all arrive as its own",
	 seconds(60), case_forged_source},
	{"claim-live-key",
	 "connection requests claiming a live peer's key without its token are refused; the "
	 "honest peer keeps its connection",
	 seconds(60), case_claim_live_key},
	{"malformed",
	 "truncated, wrong-version, unknown-opcode, oversized and lying messages are dropped; the "
	 "honest peer is served",
	 seconds(60), case_malformed},
	{"rendezvous-scope",
	 "the key in a rendezvous request reads exactly the message, not the registered memory "
	 "around it, and cannot write it",
	 seconds(60), case_rendezvous_scope},
	{"guessed-keys",
	 "writes with the keys after a rendezvous key the hostile peer saw reach no "
	 "registration",
	 seconds(60), case_guessed_keys},
	{"unexpected-limit",
	 "a peer that sends more than FI_RCOLL_UNEXPECTED_MAX of messages nobody receives fails; "
	 "the victim's memory stays bounded and the honest peer is served",
	 seconds(120), case_unexpected_limit},
	{"early-join-limit",
	 "a peer that sends more than FI_RCOLL_COLL_EARLY_MAX join records for joins the victim "
	 "never makes fails; the honest peer is served",
	 seconds(60), case_early_join_limit},
	{"forged-arrivals",
	 "write immediates from a connected stranger and ARRIVAL messages naming members it is "
	 "not change no collective result; the group's allreduces all verify",
	 seconds(90), case_forged_arrivals},
	{"member-arrival-outside-scratch",
	 "a member's ARRIVAL with bytes beyond the group's scratch fails the group (its barrier "
	 "ends with an error); nothing is written; the honest peer is served",
	 seconds(60), case_member_arrival_outside_scratch},
	{"member-arrival-unknown-counter",
	 "a member's ARRIVAL for a counter the group does not have fails the group (its barrier "
	 "ends with an error); the honest peer is served",
	 seconds(60), case_member_arrival_unknown_counter},
	{"member-arrival-flood",
	 "a member that sends more arrivals than can wait (2^20, the cap) while nothing runs "
	 "fails the group; the honest peer is served",
	 seconds(120), case_member_arrival_flood},
	{"backlog-limit",
	 "a peer that stops reading holds at most FI_RCOLL_BACKLOG_MAX sends (then -FI_EAGAIN); "
	 "sends to the honest peer go on; once it reads, all arrive verified",
	 seconds(120), case_backlog_limit},
	{"backlog-timeout",
	 "a peer whose backlog stands still for FI_RCOLL_BACKLOG_TIMEOUT_MS fails: its held "
	 "sends complete with an error; the honest peer is served",
	 seconds(90), case_backlog_timeout},
	{"slow-reader",
	 "a peer that reads slowly but steadily is not failed by the backlog timeout; all its "
	 "messages arrive verified",
	 seconds(120), case_slow_reader},
	{"delivery-query-flood",
	 "answers to delivery queries nobody asked for are dropped; a flood of queries from a "
	 "peer that reads nothing keeps one answer waiting, not one per query",
	 seconds(120), case_delivery_query_flood},
	{"unknown-peers-limit",
	 "FI_RCOLL_UNKNOWN_PEERS_MAX connections from keys not in the AV are accepted, more are "
	 "refused; closed ones' records are reused; the honest peer is served",
	 seconds(180), case_unknown_peers_limit},
	{"repeated-marks",
	 "marks rung again into a member's doorbell, or naming no member, do not count as the "
	 "group moving: a barrier a live member stays out of still times out",
	 seconds(60), case_repeated_marks},
	{"doorbell-flood",
	 "a doorbell refilled as fast as the victim drains it does not hold its progress call",
	 seconds(60), case_doorbell_flood},
	{"join-record-names-victim",
	 "a member whose join record copies the victim's own host, process and memory file is "
	 "not mapped: the victim maps no second copy of its own scratch",
	 seconds(60), case_join_record_names_victim},
	{"write-data-unasked",
	 "WRITE_DATA to an endpoint without FI_RMA reports no remote-write completion", seconds(60),
	 case_write_data_unasked},
	{"join-record-from-stranger",
	 "join records from a process that is no member of the group do not fail its join",
	 seconds(60), case_join_record_from_stranger},
	{"early-records-across-reconnects",
	 "join records for unmade joins from peers that reconnect under new keys stay bounded",
	 seconds(180), case_early_records_across_reconnects},
	{"claim-own-key",
	 "a process claiming the victim's own key learns no token that passes for the victim's "
	 "and does not break the victim's connection to itself",
	 seconds(60), case_claim_own_key},
	{"squatted-token",
	 "the token handed to a process that squatted a peer's key does not pass once that peer "
	 "connected",
	 seconds(60), case_squatted_token},
	{"unexpected-across-strangers",
	 "strangers that each leave FI_RCOLL_UNEXPECTED_MAX of unreceived messages under a new "
	 "key do not add up without bound",
	 seconds(120), case_unexpected_across_strangers},
	{"member-key-redirects-cma",
	 "a key a remote member writes into the victim's key slot cannot aim the victim's "
	 "cross-memory write outside what a member on its host exposed",
	 seconds(60), case_member_key_redirects_cma},
	{"member-key-own-copy-arrival",
	 "as member-key-redirects-cma, with the forged key also written by ARRIVAL where the "
	 "honest member keeps its own copy of its keys: still no write outside what it exposed",
	 seconds(60), case_member_key_own_copy_arrival},
	{"member-key-own-copy-rdma",
	 "the same with the forged copy written by a core RDMA write into the honest member's "
	 "scratch",
	 seconds(60), case_member_key_own_copy_rdma},
	{"named-stranger-budget",
	 "a peer that connected as a stranger and that the application named since has an "
	 "unexpected-message budget of its own, which strangers cannot use up",
	 seconds(60), case_named_peer_shares_strangers_budget},
};

} // namespace

int main(int argc, char** argv)
{
	Options options;
	std::vector<const HostileCase*> selected;
	for (int i = 1; i < argc; ++i) {
		const std::string_view arg = argv[i];
		if (arg == "--prov") {
			options.provider = option_value(i, argc, argv);
		} else if (arg == "--quick") {
			// Accepted for the suite runner: every case is quick.
		} else if (arg == "--list") {
			list_cases(kCases, 16);
			return 0;
		} else if (!select_case(kCases, arg, selected)) {
			std::fprintf(stderr,
				     "usage: rcoll_hostile_test [--prov NAME] CASE... | all\n");
			return 2;
		}
	}
	if (selected.empty()) {
		std::fprintf(stderr, "usage: rcoll_hostile_test [--prov NAME] CASE... | all\n");
		return 2;
	}
	prefer_loopback_interfaces();
	CaseReport report;
	for (const HostileCase* c : selected) {
		const auto started = Clock::now();
		const LaunchResult result = launch_ranks(
			3, c->timeout, [&](Bootstrap& boot) { c->run(boot, options); });
		report.add(result, c->name, strfmt("%s, 3 ranks", options.provider.c_str()),
			   std::chrono::duration<double>(Clock::now() - started).count());
	}
	return report.finish();
}
