// Point-to-point MPI correctness over whatever transport mpirun selected
// (run-mpi.sh forces pml cm + mtl ofi on one libfabric provider).
#include "mpi_harness.hpp"

#include <algorithm>
#include <map>
#include <set>

using namespace mpitest;

namespace {

const std::vector<size_t> kSizes = {0,    1,     7,     64,    4095,     4096,
				    4097, 16385, 65536, 65537, 1u << 20, 4u << 20};

std::string status_text(const MPI_Status& st)
{
	return strfmt("source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
}

size_t received_bytes(const MPI_Status& st)
{
	int count = -1;
	MPI_Get_count(&st, MPI_BYTE, &count);
	return static_cast<size_t>(count);
}

// Ring shift with MPI_Send/MPI_Recv: even ranks send first, odd ranks
// receive first, so rendezvous-sized blocking sends cannot deadlock.
void blocking_ring(const Suite& s)
{
	const int next = (s.rank() + 1) % s.size();
	const int prev = (s.rank() + s.size() - 1) % s.size();
	for (size_t size : kSizes) {
		std::vector<uint8_t> out(size), in(size + 16, 0xA5);
		fill(out, static_cast<uint64_t>(s.rank()), size);
		MPI_Status st;
		auto send = [&] {
			MPI_CHECK(MPI_Send(out.data(), static_cast<int>(size), MPI_BYTE, next, 3,
					   MPI_COMM_WORLD));
		};
		auto recv = [&] {
			MPI_CHECK(MPI_Recv(in.data(), static_cast<int>(size + 16), MPI_BYTE, prev,
					   3, MPI_COMM_WORLD, &st));
		};
		if (s.rank() % 2 == 0) {
			send();
			recv();
		} else {
			recv();
			send();
		}
		const std::string what = strfmt("blocking %zu B from rank %d", size, prev);
		expect(st.MPI_SOURCE == prev && st.MPI_TAG == 3, "%s: status says %s", what.c_str(),
		       status_text(st).c_str());
		expect(received_bytes(st) == size, "%s: MPI_Get_count %zu", what.c_str(),
		       received_bytes(st));
		expect_filled(in.data(), size, static_cast<uint64_t>(prev), size, what);
		for (size_t i = size; i < in.size(); ++i)
			expect(in[i] == 0xA5, "%s: byte %zu past the message was written",
			       what.c_str(), i);
	}
}

// Every rank posts MPI_Irecv from every other rank and MPI_Isend to every
// other rank at once, for eager- and rendezvous-sized messages.
void nonblocking_all_pairs(const Suite& s)
{
	for (size_t size : {size_t{8}, size_t{70000}, size_t{2} << 20}) {
		const auto n = static_cast<size_t>(s.size());
		std::vector<std::vector<uint8_t>> out(n), in(n);
		std::vector<MPI_Request> requests;
		for (int peer = 0; peer < s.size(); ++peer) {
			if (peer == s.rank())
				continue;
			in[static_cast<size_t>(peer)].assign(size, 0);
			requests.emplace_back();
			MPI_CHECK(MPI_Irecv(in[static_cast<size_t>(peer)].data(),
					    static_cast<int>(size), MPI_BYTE, peer, peer,
					    MPI_COMM_WORLD, &requests.back()));
		}
		for (int peer = 0; peer < s.size(); ++peer) {
			if (peer == s.rank())
				continue;
			auto& buf = out[static_cast<size_t>(peer)];
			buf.resize(size);
			fill(buf, static_cast<uint64_t>(s.rank()),
			     static_cast<uint64_t>(peer) * 1000 + size);
			requests.emplace_back();
			MPI_CHECK(MPI_Isend(buf.data(), static_cast<int>(size), MPI_BYTE, peer,
					    s.rank(), MPI_COMM_WORLD, &requests.back()));
		}
		std::vector<MPI_Status> statuses(requests.size());
		MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
				      statuses.data()));
		for (int peer = 0; peer < s.size(); ++peer) {
			if (peer == s.rank())
				continue;
			expect_filled(in[static_cast<size_t>(peer)].data(), size,
				      static_cast<uint64_t>(peer),
				      static_cast<uint64_t>(s.rank()) * 1000 + size,
				      strfmt("nonblocking %zu B from rank %d", size, peer));
		}
	}
}

// MPI_ANY_SOURCE: rank 0 hears from every other rank exactly once per round
// (each round has its own tag), and the status names the rank whose data
// arrived.
void any_source(const Suite& s)
{
	constexpr size_t kSize = 3000;
	for (int round = 0; round < 3; ++round) {
		if (s.rank() == 0) {
			std::set<int> seen;
			for (int k = 1; k < s.size(); ++k) {
				std::vector<uint8_t> in(kSize);
				MPI_Status st;
				MPI_CHECK(MPI_Recv(in.data(), kSize, MPI_BYTE, MPI_ANY_SOURCE,
						   70 + round, MPI_COMM_WORLD, &st));
				expect(st.MPI_SOURCE > 0 && st.MPI_SOURCE < s.size(),
				       "MPI_ANY_SOURCE: status source %d", st.MPI_SOURCE);
				expect(seen.insert(st.MPI_SOURCE).second,
				       "MPI_ANY_SOURCE: rank %d matched twice", st.MPI_SOURCE);
				expect_filled(
					in.data(), kSize, static_cast<uint64_t>(st.MPI_SOURCE),
					static_cast<uint64_t>(round),
					strfmt("MPI_ANY_SOURCE message said to be from rank %d",
					       st.MPI_SOURCE));
			}
		} else {
			std::vector<uint8_t> out(kSize);
			fill(out, static_cast<uint64_t>(s.rank()), static_cast<uint64_t>(round));
			MPI_CHECK(MPI_Send(out.data(), kSize, MPI_BYTE, 0, 70 + round,
					   MPI_COMM_WORLD));
		}
	}
}

// MPI_ANY_TAG from one source: messages arrive in send order (MPI's
// non-overtaking rule) and the status carries each tag.
void any_tag(const Suite& s)
{
	const int tags[] = {11, 22, 33, 44};
	const size_t sizes[] = {10, 100000, 20, 3u << 20}; // eager and rendezvous interleaved
	if (s.rank() == 1) {
		std::vector<MPI_Request> requests(4);
		std::vector<std::vector<uint8_t>> out(4);
		for (size_t k = 0; k < 4; ++k) {
			out[k].resize(sizes[k]);
			fill(out[k], 1, static_cast<uint64_t>(tags[k]));
			MPI_CHECK(MPI_Isend(out[k].data(), static_cast<int>(sizes[k]), MPI_BYTE, 0,
					    tags[k], MPI_COMM_WORLD, &requests[k]));
		}
		MPI_CHECK(MPI_Waitall(4, requests.data(), MPI_STATUSES_IGNORE));
	} else if (s.rank() == 0) {
		std::vector<uint8_t> in(3u << 20);
		for (size_t k = 0; k < 4; ++k) {
			MPI_Status st;
			MPI_CHECK(MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_BYTE, 1,
					   MPI_ANY_TAG, MPI_COMM_WORLD, &st));
			expect(st.MPI_TAG == tags[k],
			       "MPI_ANY_TAG receive %zu got tag %d, expected %d (order broken)", k,
			       st.MPI_TAG, tags[k]);
			expect(received_bytes(st) == sizes[k],
			       "MPI_ANY_TAG receive %zu: %zu bytes, sent %zu", k,
			       received_bytes(st), sizes[k]);
			expect_filled(in.data(), sizes[k], 1, static_cast<uint64_t>(tags[k]),
				      strfmt("MPI_ANY_TAG receive %zu", k));
		}
	}
}

// MPI_Probe, MPI_Iprobe and MPI_Mprobe/MPI_Mrecv size a receive from the
// probed status, for eager- and rendezvous-sized messages.
void probe(const Suite& s)
{
	const size_t sizes[] = {12345, 300000};
	if (s.rank() == 1) {
		for (size_t size : sizes)
			for (int tag : {5, 6, 8}) {
				std::vector<uint8_t> out(size);
				fill(out, 1, size + static_cast<size_t>(tag));
				MPI_CHECK(MPI_Send(out.data(), static_cast<int>(size), MPI_BYTE, 0,
						   tag, MPI_COMM_WORLD));
			}
	} else if (s.rank() == 0) {
		for (size_t size : sizes) {
			MPI_Status st;
			MPI_CHECK(MPI_Probe(1, 5, MPI_COMM_WORLD, &st));
			expect(received_bytes(st) == size && st.MPI_SOURCE == 1 && st.MPI_TAG == 5,
			       "MPI_Probe: %zu bytes from %s, sent %zu", received_bytes(st),
			       status_text(st).c_str(), size);
			std::vector<uint8_t> in(received_bytes(st));
			MPI_CHECK(MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_BYTE, 1, 5,
					   MPI_COMM_WORLD, &st));
			expect_filled(in.data(), size, 1, size + 5, "receive after MPI_Probe");

			int found = 0;
			while (!found)
				MPI_CHECK(
					MPI_Iprobe(MPI_ANY_SOURCE, 6, MPI_COMM_WORLD, &found, &st));
			expect(received_bytes(st) == size && st.MPI_SOURCE == 1,
			       "MPI_Iprobe: %zu bytes from %s", received_bytes(st),
			       status_text(st).c_str());
			in.assign(size, 0);
			MPI_CHECK(MPI_Recv(in.data(), static_cast<int>(size), MPI_BYTE,
					   st.MPI_SOURCE, 6, MPI_COMM_WORLD, &st));
			expect_filled(in.data(), size, 1, size + 6, "receive after MPI_Iprobe");

			MPI_Message message;
			MPI_CHECK(MPI_Mprobe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &message, &st));
			expect(st.MPI_TAG == 8 && received_bytes(st) == size,
			       "MPI_Mprobe: %zu bytes, tag %d", received_bytes(st), st.MPI_TAG);
			in.assign(size, 0);
			MPI_CHECK(MPI_Mrecv(in.data(), static_cast<int>(size), MPI_BYTE, &message,
					    &st));
			expect_filled(in.data(), size, 1, size + 8, "MPI_Mrecv");
		}
	}
}

// MPI_Ssend and many same-tag messages of mixed sizes: non-overtaking.
void ordering(const Suite& s)
{
	constexpr int kMessages = 200;
	auto size_of = [](int k) {
		return static_cast<size_t>(k % 10 == 9 ? 200000 : 8 + (k * 97) % 5000);
	};
	if (s.rank() == 0) {
		for (int k = 0; k < kMessages; ++k) {
			std::vector<uint8_t> out(size_of(k));
			fill(out, 0, static_cast<uint64_t>(k));
			if (k % 50 == 0)
				MPI_CHECK(MPI_Ssend(out.data(), static_cast<int>(out.size()),
						    MPI_BYTE, 1, 9, MPI_COMM_WORLD));
			else
				MPI_CHECK(MPI_Send(out.data(), static_cast<int>(out.size()),
						   MPI_BYTE, 1, 9, MPI_COMM_WORLD));
		}
	} else if (s.rank() == 1) {
		std::vector<uint8_t> in(200000);
		for (int k = 0; k < kMessages; ++k) {
			MPI_Status st;
			MPI_CHECK(MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_BYTE, 0, 9,
					   MPI_COMM_WORLD, &st));
			expect(received_bytes(st) == size_of(k),
			       "message %d: %zu bytes, sent %zu (out of order?)", k,
			       received_bytes(st), size_of(k));
			expect_filled(in.data(), size_of(k), 0, static_cast<uint64_t>(k),
				      strfmt("message %d", k));
		}
	}
}

} // namespace

int main(int argc, char** argv)
{
	Suite suite("mpi_p2p", &argc, &argv);
	suite.run("blocking", "MPI_Send/MPI_Recv ring, 0 B..4 MiB: data, status, count, no overrun",
		  [&] { blocking_ring(suite); });
	suite.run("nonblocking", "MPI_Isend/MPI_Irecv between all pairs at once, 8 B/70 kB/2 MiB",
		  [&] { nonblocking_all_pairs(suite); });
	suite.run("any-source", "MPI_ANY_SOURCE: each sender once, status source matches the data",
		  [&] { any_source(suite); });
	suite.run("any-tag",
		  "MPI_ANY_TAG: send order kept across eager/rendezvous sizes, tags reported",
		  [&] { any_tag(suite); });
	suite.run("probe", "MPI_Probe, MPI_Iprobe, MPI_Mprobe/MPI_Mrecv size receives correctly",
		  [&] { probe(suite); });
	suite.run("ordering",
		  "200 same-tag messages of mixed sizes incl. MPI_Ssend arrive in order",
		  [&] { ordering(suite); });
	return suite.exit_code();
}
