// Shared by the engine unit tests: runs collectives on the simulated fabric
// and checks every result against a closed form.
//
// Input values are chosen so that every bracketing of the reduction gives
// the same exact result (small integers in floating point), and so that
// the result is known without reducing anything:
//   SUM   x = (r + 1) + i % 7            -> p (p + 1) / 2 + p (i % 7)
//   PROD  x = 2 at r = i mod p, 3 at r = i + 1 mod p, else 1  -> 6 (2 if p = 1)
//   MIN   x = 3 ((r + i) mod m) + 5, m = min(p, 40)  -> 5
//   MAX   same                                      -> 3 (m - 1) + 5
//   LOR   x = [r = i mod p and i mod 5 != 0]        -> [i mod 5 != 0]
//   LAND  x = 0 at r = i mod p if i mod 5 = 0, else 1 -> [i mod 5 != 0]
//   LXOR  x = [(r + i) mod 3 = 0]   -> parity of #{r < p : r = -i mod 3}
//   BOR   x = 1 << ((r + i) mod bits) -> the p cyclic bits from i mod bits
//   BAND  x = ~(1 << ((r + i) mod bits)) -> complement of BOR's
//   BXOR  x = 1 << ((r + i) mod bits) -> bit b iff #{r : r + i = b mod bits} odd
// Complex values put the rule on the real part (PROD: i times (1 + i)).
#pragma once

#include <complex>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "engine/group.hpp"
#include "fabtests/store_value.hpp"
#include "engine/reduce.hpp"
#include "transport/sim.hpp"

namespace rcoll::test {

using namespace rcoll::engine;

class AlignedBytes {
public:
	AlignedBytes() = default;
	explicit AlignedBytes(size_t n) : size_(n)
	{
		if (n)
			data_.reset(
				static_cast<std::byte*>(::operator new (n, std::align_val_t{64})));
	}
	std::byte* data() noexcept { return data_.get(); }
	const std::byte* data() const noexcept { return data_.get(); }
	size_t size() const noexcept { return size_; }

private:
	struct Free {
		void operator()(std::byte* p) const noexcept
		{
			::operator delete (p, std::align_val_t{64});
		}
	};
	std::unique_ptr<std::byte, Free> data_;
	size_t size_ = 0;
};

// Byte pattern of rank r's data at byte k, for collectives that only move data.
inline uint8_t pattern_byte(uint32_t r, uint64_t k) noexcept
{
	uint64_t x = (uint64_t(r) + 1) * 0x9E3779B97F4A7C15ull ^ (k + 0x5A) * 0xC2B2AE3D27D4EB4Full;
	x ^= x >> 29;
	return static_cast<uint8_t>(x);
}

template <class T>
struct is_cplx : std::false_type {};
template <class T>
struct is_cplx<std::complex<T>> : std::true_type {};

template <class T>
struct real_of {
	using type = T;
};
template <class T>
struct real_of<std::complex<T>> {
	using type = T;
};

template <class T>
T from_u64(uint64_t v)
{
	if constexpr (is_cplx<T>::value)
		return T(typename real_of<T>::type(v), 0);
	else
		return static_cast<T>(v);
}

template <class T>
constexpr unsigned int_bits() noexcept
{
	if constexpr (std::is_integral_v<T>)
		return 8 * sizeof(T);
	else
		return 0;
}

// Input element i of rank r for a reduction `op` over p ranks.
template <class T>
T input_value(ReduceOp op, uint32_t r, uint64_t i, uint32_t p)
{
	const uint64_t m = std::min<uint32_t>(p, 40);
	switch (op) {
	case ReduceOp::sum:
		if constexpr (is_cplx<T>::value)
			return T(typename real_of<T>::type(r + 1 + i % 7),
				 typename real_of<T>::type(double(i % 3) - double(r)));
		else
			return from_u64<T>(r + 1 + i % 7);
	case ReduceOp::prod:
		if constexpr (is_cplx<T>::value) {
			if (r == i % p)
				return T(0, 1);
			if (p > 1 && r == (i + 1) % p)
				return T(1, 1);
			return T(1, 0);
		} else {
			if (r == i % p)
				return from_u64<T>(2);
			if (p > 1 && r == (i + 1) % p)
				return from_u64<T>(3);
			return from_u64<T>(1);
		}
	case ReduceOp::min:
	case ReduceOp::max: return from_u64<T>(3 * ((r + i) % m) + 5);
	case ReduceOp::lor: return from_u64<T>(r == i % p && i % 5 != 0);
	case ReduceOp::land: return from_u64<T>(!(r == i % p && i % 5 == 0));
	case ReduceOp::lxor: return from_u64<T>((r + i) % 3 == 0);
	case ReduceOp::bor:
	case ReduceOp::bxor:
		if constexpr (std::is_integral_v<T>)
			return static_cast<T>(uint64_t(1) << ((r + i) % int_bits<T>()));
		else
			return T{};
	case ReduceOp::band:
		if constexpr (std::is_integral_v<T>)
			return static_cast<T>(~(uint64_t(1) << ((r + i) % int_bits<T>())));
		else
			return T{};
	}
	return T{};
}

// The closed form of the reduction of element i over p ranks.
template <class T>
T expected_value(ReduceOp op, uint64_t i, uint32_t p)
{
	const uint64_t m = std::min<uint32_t>(p, 40);
	switch (op) {
	case ReduceOp::sum:
		if constexpr (is_cplx<T>::value)
			return T(typename real_of<T>::type(double(p) * (p + 1) / 2 +
							   double(p) * (i % 7)),
				 typename real_of<T>::type(double(p) * double(i % 3) -
							   double(p) * (p - 1) / 2));
		else
			return from_u64<T>(uint64_t(p) * (p + 1) / 2 + uint64_t(p) * (i % 7));
	case ReduceOp::prod:
		if constexpr (is_cplx<T>::value)
			return p == 1 ? T(0, 1) : T(-1, 1);
		else
			return from_u64<T>(p == 1 ? 2 : 6);
	case ReduceOp::min: return from_u64<T>(5);
	case ReduceOp::max: return from_u64<T>(3 * (m - 1) + 5);
	case ReduceOp::lor:
	case ReduceOp::land: return from_u64<T>(i % 5 != 0);
	case ReduceOp::lxor: {
		const uint64_t t = (3 - i % 3) % 3; // r = -i mod 3
		const uint64_t c = p > t ? (p - 1 - t) / 3 + 1 : 0;
		return from_u64<T>(c % 2);
	}
	case ReduceOp::bor:
	case ReduceOp::band:
	case ReduceOp::bxor:
		if constexpr (std::is_integral_v<T>) {
			const unsigned bits = int_bits<T>();
			uint64_t ones = 0, odd = 0;
			for (unsigned b = 0; b < bits; ++b) {
				const uint64_t offset =
					(b + bits - i % bits) % bits; // r = b - i mod bits
				const uint64_t count = p / bits + (offset < p % bits ? 1 : 0);
				if (count)
					ones |= uint64_t(1) << b;
				if (count % 2)
					odd |= uint64_t(1) << b;
			}
			if (op == ReduceOp::bor)
				return static_cast<T>(ones);
			if (op == ReduceOp::band)
				return static_cast<T>(~ones);
			return static_cast<T>(odd);
		} else {
			return T{};
		}
	}
	return T{};
}

template <class F>
decltype(auto) with_type(Datatype d, F&& f)
{
	switch (d) {
	case Datatype::int8: return f(int8_t{});
	case Datatype::uint8: return f(uint8_t{});
	case Datatype::int16: return f(int16_t{});
	case Datatype::uint16: return f(uint16_t{});
	case Datatype::int32: return f(int32_t{});
	case Datatype::uint32: return f(uint32_t{});
	case Datatype::int64: return f(int64_t{});
	case Datatype::uint64: return f(uint64_t{});
	case Datatype::float32: return f(float{});
	case Datatype::float64: return f(double{});
	case Datatype::float_complex: return f(std::complex<float>{});
	case Datatype::double_complex: return f(std::complex<double>{});
	case Datatype::long_double: return f((long double){});
	case Datatype::long_double_complex: return f(std::complex<long double>{});
	}
	return f(uint8_t{});
}

// Fills `count` elements of rank r's input, where element i is global
// element first + i of the reduced vector.
inline void fill_reduction_input(Datatype d, ReduceOp op, std::byte* out, uint64_t first,
				 uint64_t count, uint32_t r, uint32_t p)
{
	with_type(d, [&](auto zero) {
		using T = decltype(zero);
		for (uint64_t i = 0; i < count; ++i)
			fabtests::store_without_padding(out + i * sizeof(T),
							input_value<T>(op, r, first + i, p));
	});
}

// Index of the first element that differs from the closed form, or -1.
inline int64_t check_reduction(Datatype d, ReduceOp op, const std::byte* data, uint64_t first,
			       uint64_t count, uint32_t p)
{
	return with_type(d, [&](auto zero) -> int64_t {
		using T = decltype(zero);
		for (uint64_t i = 0; i < count; ++i) {
			T want = expected_value<T>(op, first + i, p);
			T got;
			std::memcpy(&got, data + i * sizeof(T), sizeof(T));
			if (!(got == want))
				return static_cast<int64_t>(i);
		}
		return -1;
	});
}

struct OpSpec {
	Collective coll = Collective::allreduce;
	Algorithm algorithm = Algorithm::automatic;
	AlgorithmParams params;
	uint64_t count = 0;
	Datatype dtype = Datatype::int32;
	ReduceOp op = ReduceOp::sum;
	uint32_t root = 0;
	bool in_place = false; // allreduce: input and output are the same buffer
};

struct ClusterOptions {
	sim::Options sim;
	GroupConfig config;
};

// A simulated group that runs OpSpecs and checks their results.
class Cluster {
public:
	Cluster(uint32_t p, const ClusterOptions& o) : sim_(p, o.config, o.sim), p_(p) {}
	Errc status() const noexcept { return sim_.status(); }
	uint32_t size() const noexcept { return p_; }
	Group& group(uint32_t r) noexcept { return sim_.group(r); }
	sim::Fabric& fabric() noexcept { return sim_.fabric(); }

	// Runs `ops` on every rank, all posted before any progress (so they are
	// in flight together), and checks the results. Returns "" on success,
	// else what went wrong.
	std::string run(const std::vector<OpSpec>& ops);

private:
	struct Buffers {
		AlignedBytes input, output;
	};
	std::string verify(const OpSpec& op, std::vector<Buffers>& bufs);

	sim::Cluster sim_;
	uint32_t p_;
};

// Collectives whose count is per rank block: their data grows with p.
inline bool per_block(Collective c) noexcept
{
	return c == Collective::allgather || c == Collective::alltoall ||
	       c == Collective::scatter || c == Collective::gather ||
	       c == Collective::reduce_scatter;
}

inline std::string describe(const OpSpec& op, uint32_t p)
{
	return std::string(to_string(op.coll)) + "/" + std::string(to_string(op.algorithm)) +
	       " p=" + std::to_string(p) + " count=" + std::to_string(op.count) + " " +
	       std::string(to_string(op.dtype)) + " " + std::string(to_string(op.op)) +
	       " root=" + std::to_string(op.root) + (op.in_place ? " in-place" : "");
}

inline std::string Cluster::run(const std::vector<OpSpec>& ops)
{
	if (status() != Errc::ok)
		return "group creation failed: " + std::string(to_string(status()));
	std::vector<std::vector<Buffers>> bufs(ops.size());
	for (size_t k = 0; k < ops.size(); ++k) {
		bufs[k].resize(p_);
		const OpSpec& op = ops[k];
		OpDescriptor d;
		d.coll = op.coll;
		d.size = p_;
		d.root = op.root;
		d.count = op.count;
		d.dtype = op.dtype;
		d.op = op.op;
		const size_t esz = datatype_size(op.dtype);
		for (uint32_t r = 0; r < p_; ++r) {
			BufferSizes sz = buffer_sizes(d, r);
			Buffers& b = bufs[k][r];
			b.input = AlignedBytes(sz.input);
			b.output = AlignedBytes(std::max(sz.output, op.in_place ? sz.input : 0));
			if (b.output.size())
				std::memset(b.output.data(), 0xA5, b.output.size());
			if (op.coll == Collective::broadcast) {
				if (r == op.root)
					for (uint64_t i = 0; i < sz.output; ++i)
						b.output.data()[i] =
							std::byte{pattern_byte(op.root, i)};
			} else if (is_reduction(op.coll)) {
				std::byte* in = op.in_place ? b.output.data() : b.input.data();
				fill_reduction_input(op.dtype, op.op, in, 0, sz.input / esz, r, p_);
			} else {
				for (uint64_t i = 0; i < sz.input; ++i)
					b.input.data()[i] = std::byte{pattern_byte(r, i)};
			}
			Request req;
			req.coll = op.coll;
			req.input = op.in_place ? b.output.data() : b.input.data();
			req.output = b.output.data();
			req.count = op.count;
			req.dtype = op.dtype;
			req.op = op.op;
			req.root = op.root;
			req.algorithm = op.algorithm;
			req.params = op.params;
			req.context = reinterpret_cast<void*>(uintptr_t(k + 1));
			if (Errc e = sim_.group(r).post(req); e != Errc::ok)
				return describe(op, p_) + ": post failed on rank " +
				       std::to_string(r) + ": " + std::string(to_string(e));
		}
	}
	sim_.fabric().run();
	for (uint32_t r = 0; r < p_; ++r) {
		std::vector<bool> seen(ops.size(), false);
		Completion c;
		while (sim_.group(r).next_completion(c)) {
			size_t k = reinterpret_cast<uintptr_t>(c.context) - 1;
			if (k >= ops.size() || seen[k])
				return "rank " + std::to_string(r) + ": unexpected completion";
			if (c.status != Errc::ok)
				return describe(ops[k], p_) + ": rank " + std::to_string(r) +
				       " failed: " + std::string(to_string(c.status));
			seen[k] = true;
		}
		for (size_t k = 0; k < ops.size(); ++k)
			if (!seen[k])
				return describe(ops[k], p_) + ": rank " + std::to_string(r) +
				       " did not complete";
	}
	if (!sim_.fabric().violations().empty())
		return "memory discipline: " + sim_.fabric().violations().front();
	for (size_t k = 0; k < ops.size(); ++k)
		if (std::string e = verify(ops[k], bufs[k]); !e.empty())
			return describe(ops[k], p_) + ": " + e;
	return "";
}

inline std::string Cluster::verify(const OpSpec& op, std::vector<Buffers>& bufs)
{
	const uint32_t p = p_;
	const size_t esz = datatype_size(op.dtype);
	const uint64_t blk = op.count * esz;
	auto bytes_differ = [](const std::byte* got, uint32_t src_rank, uint64_t src_off,
			       uint64_t n) {
		for (uint64_t i = 0; i < n; ++i)
			if (got[i] != std::byte{pattern_byte(src_rank, src_off + i)})
				return true;
		return false;
	};
	for (uint32_t r = 0; r < p; ++r) {
		const std::byte* out = bufs[r].output.data();
		const std::string where = "rank " + std::to_string(r);
		switch (op.coll) {
		case Collective::barrier: break;
		case Collective::broadcast:
			if (bytes_differ(out, op.root, 0, blk))
				return where + ": wrong broadcast data";
			break;
		case Collective::allreduce:
		case Collective::reduce: {
			if (op.coll == Collective::reduce && r != op.root)
				break;
			int64_t bad = check_reduction(op.dtype, op.op, out, 0, op.count, p);
			if (bad >= 0)
				return where + ": wrong element " + std::to_string(bad);
			break;
		}
		case Collective::reduce_scatter: {
			int64_t bad = check_reduction(op.dtype, op.op, out, uint64_t(r) * op.count,
						      op.count, p);
			if (bad >= 0)
				return where + ": wrong element " + std::to_string(bad);
			break;
		}
		case Collective::allgather:
			for (uint32_t j = 0; j < p; ++j)
				if (bytes_differ(out + j * blk, j, 0, blk))
					return where + ": wrong block " + std::to_string(j);
			break;
		case Collective::scatter:
			if (bytes_differ(out, op.root, r * blk, blk))
				return where + ": wrong scattered block";
			break;
		case Collective::gather:
			if (r == op.root)
				for (uint32_t j = 0; j < p; ++j)
					if (bytes_differ(out + j * blk, j, 0, blk))
						return where + ": wrong gathered block " +
						       std::to_string(j);
			break;
		case Collective::alltoall:
			for (uint32_t j = 0; j < p; ++j)
				if (bytes_differ(out + j * blk, j, uint64_t(r) * blk, blk))
					return where + ": wrong block from " + std::to_string(j);
			break;
		}
	}
	return "";
}

// $RCOLL_TEST_QUICK=1 (the sanitizer builds, which run several times
// slower): the largest sampled sizes are thinned out.
inline bool quick_tests() noexcept
{
	const char* v = std::getenv("RCOLL_TEST_QUICK");
	return v && std::strcmp(v, "1") == 0;
}

// Small scratch so that the recycling of scratch halves is exercised often
// (still room for a key per peer, which alltoall needs in rendezvous mode).
inline ClusterOptions small_cluster(uint32_t p, uint64_t seed = 1,
				    sim::Timing timing = sim::Timing::random)
{
	ClusterOptions o;
	o.sim.timing = timing;
	o.sim.seed = seed;
	o.config.scratch_half_bytes = std::max<uint64_t>(16 * 1024, (uint64_t(p) + 2) * 24 + 4096);
	o.config.eager_bytes = 2048;
	o.config.broadcast_eager_bytes = 2048;
	o.config.chunk_bytes = 256;
	o.config.bcast_blocks = 3;
	return o;
}

} // namespace rcoll::test
