// Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/): one
// valid input per kind of message, handshake and tuning rule, so fuzzing
// starts from what rcoll really exchanges. Run from the repository root:
//   g++ -std=c++20 -Iprov/rcoll -I. fuzz/make_seeds.cpp prov/rcoll/proto/wire.cpp -o /tmp/seeds
//   /tmp/seeds
#include "proto/wire.hpp"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

using namespace rcoll::proto;

namespace {

void write(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes)
{
	std::ofstream out("fuzz/corpus/" + target + "/" + name, std::ios::binary);
	out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// The wire target's four leading bytes: eager limit 16 KiB, 8 connections.
std::vector<uint8_t> limits() { return {0xc0, 0x3f, 7, 20}; }

template <class Body>
std::vector<uint8_t> control(const Body& body, uint64_t token)
{
	MsgHeader h;
	h.opcode = Body::kOpcode;
	h.src_conn = 3;
	h.token = token;
	std::vector<uint8_t> m = limits();
	m.resize(4 + kHeaderSize + Body::kWireSize);
	encode_header(h, m.data() + 4);
	encode_body(body, m.data() + 4 + kHeaderSize);
	return m;
}

} // namespace

int main()
{
	{
		MsgHeader h;
		h.opcode = Opcode::Eager;
		h.flags = kFlagTagged | kFlagRemoteCqData;
		h.src_conn = 1;
		h.tag = 0x1234;
		h.cq_data = 7;
		h.size = 16;
		h.token = 0x5555aaaa5555aaaa;
		std::vector<uint8_t> m = limits();
		m.resize(4 + kHeaderSize + 16, 0x42);
		encode_header(h, m.data() + 4);
		write("wire", "eager", m);
		h.opcode = Opcode::Rts;
		h.size = 1 << 20;
		m = limits();
		m.resize(4 + kHeaderSize + RtsBody::kWireSize);
		encode_header(h, m.data() + 4);
		encode_body(RtsBody{9, 0x7f0000001000, 77}, m.data() + 4 + kHeaderSize);
		write("wire", "rts", m);
		MsgHeader probe;
		probe.opcode = Opcode::Probe;
		m = limits();
		m.resize(4 + kHeaderSize);
		encode_header(probe, m.data() + 4);
		write("wire", "probe", m);
	}
	CtsBody cts;
	cts.sender_cookie = 9;
	cts.receiver_op_id = 5;
	cts.addr = 0x7f0000002000;
	cts.key = 12;
	cts.transfer_length = 4096;
	write("wire", "cts", control(cts, 1));
	write("wire", "fin", control(FinBody{5, FinReason::Collision, 4096}, 1));
	write("wire", "read_done", control(ReadDoneBody{9}, 1));
	write("wire", "delivery_query", control(DeliveryQueryBody{3}, 1));
	write("wire", "delivered", control(DeliveredBody{3}, 1));
	write("wire", "arrival", control(ArrivalBody{2, 17, 1, 256}, 1));
	for (HandshakeKind kind : {HandshakeKind::Request, HandshakeKind::Accept}) {
		Handshake hs{
			kind,  0x1122334455667788, 4,
			16384, 0xdeadbeefcafe,     kind == HandshakeKind::Request ? 0x77u : 0u};
		std::vector<uint8_t> b(1 + kMaxHandshakeSize);
		b[0] = kind == HandshakeKind::Accept;
		encode_handshake(hs, b.data() + 1);
		write("handshake", kind == HandshakeKind::Request ? "request" : "accept", b);
	}
	{
		JoinRecord join;
		join.rank = 1;
		join.size = 4;
		join.slot = 2;
		join.config = 0xcbf29ce484222325;
		join.host = 0x1234;
		join.nonce = 99;
		join.pid = 4321;
		join.fd = 7;
		std::vector<uint8_t> b(JoinRecord::kWireSize);
		encode_join_record(join, b.data());
		write("records", "join", b);
		b.assign(StopNotice::kWireSize, 0);
		encode_stop_notice({3}, b.data());
		write("records", "stop", b);
		encode_retire_notice({2}, b.data());
		write("records", "retire", b);
	}
	int n = 0;
	for (const char* tune :
	     {"allreduce:0-64k:@recursive_doubling",
	      "bcast:@binomial#allreduce:1m-inf:@ring:chunk=128k",
	      "allgather:0-4k:p=2-8:@ring#reduce:@ktree:k=4",
	      "barrier:hosts=shared:@ktree:k=1#broadcast:hosts=apart:0-8:@auto"}) {
		const std::string s = tune;
		write("tuning", "rule" + std::to_string(n++), {s.begin(), s.end()});
	}
	// Rendezvous: sizes, ids, then events: start, CTS, write done; RTS,
	// FIN; RTS (get), read done.
	write("rendezvous", "put",
	      {40, 40, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0,
	       0,  0,  0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0,
	       0,  0,  0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 3, 6, 7});
	write("rendezvous", "get", {20, 20, 1, 2, 3, 4, 5, 6, 7, 8, 6, 0, 0, 0, 9, 1, 0, 1, 10});
	write("doorbell", "pushes", {0, 1, 0, 0, 0, 0, 0, 0, 2, 2, 1, 5, 0, 0, 0, 0, 0, 0, 0, 2});
	std::puts("seeds written to fuzz/corpus/");
	return 0;
}
