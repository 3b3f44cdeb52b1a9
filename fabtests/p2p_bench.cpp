// rcoll_p2p_bench: point-to-point latency, bandwidth and receive-side
// memory of several libfabric providers, side by side in one run, over
// ranks forked on this host.
//
// Methods follow the OSU micro-benchmarks (osu_latency, osu_bw): warm-up
// iterations first; latency is half the round trip of a blocking pingpong;
// bandwidth streams a window of back-to-back sends that the receiver has
// pre-posted, then waits for a short acknowledgement. Every figure is the
// MEDIAN of several repetitions, so one scheduler hiccup on a shared
// machine does not move it, and the providers take turns within each
// repetition (both endpoints open in the same two ranks), so a change of
// machine load during the run affects them alike.
#include "common.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace {

using namespace fabtests;

struct BenchOptions {
	std::vector<std::string> providers{"rcoll", "tcp;ofi_rxm"};
	size_t latency_min = 8, latency_max = 64 << 10;
	size_t bandwidth_min = 64 << 10, bandwidth_max = 64 << 20;
	std::vector<int> peer_counts{1, 8, 64};
	size_t latency_iterations = 2000;
	size_t warmup = 200;
	int repetitions = 5;
	size_t bandwidth_window = 64;
	size_t bandwidth_bytes = 512u << 20; // moved per repetition and size
	bool run_latency = true, run_bandwidth = true, run_memory = true;
};

constexpr uint64_t kDataTag = 0xBE7C;
constexpr uint64_t kAckTag = 0xBE7D;
constexpr size_t kMaxResults = 64;

constexpr size_t kMaxProviders = 4;
constexpr size_t kErrorBytes = 512;

// What rank 0 of a measurement leaves in the launcher's scratch area, per
// provider ("lane").
struct Results {
	uint32_t rows_done[kMaxProviders];
	uint32_t unavailable[kMaxProviders];
	char error[kMaxProviders][kErrorBytes];
	double values[kMaxProviders][kMaxResults];
	double extra[kMaxProviders][kMaxResults];
};
static_assert(sizeof(Results) <= kScratchBytes);

Results& results_of(Bootstrap& boot) { return *reinterpret_cast<Results*>(boot.scratch().data()); }

std::vector<size_t> powers_of_two(size_t from, size_t to)
{
	std::vector<size_t> sizes;
	for (size_t s = from; s <= to; s *= 2)
		sizes.push_back(s);
	return sizes;
}

double median(std::vector<double> values)
{
	std::sort(values.begin(), values.end());
	const size_t n = values.size();
	return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double seconds_since(Clock::time_point start)
{
	return std::chrono::duration<double>(Clock::now() - start).count();
}

// Blocking tagged send/receive helpers: what an MPI would do per message.
void send_blocking(Endpoint& ep, const RegisteredBuffer& buf, size_t len, fi_addr_t peer,
		   uint64_t tag)
{
	OpContext ctx;
	FT_POST(ep, fi_tsend(ep.ep(), buf.data(), len, buf.desc(), peer, tag, &ctx));
	ep.wait_ok(ctx, "send");
}

void post_trecv(Endpoint& ep, const RegisteredBuffer& buf, size_t len, fi_addr_t peer, uint64_t tag,
		OpContext& ctx)
{
	ctx.reset();
	FT_POST(ep, fi_trecv(ep.ep(), buf.data(), len, buf.desc(), peer, tag, 0, &ctx));
}

// One provider's endpoint and buffers inside a measuring rank.
struct Lane {
	size_t index = 0; // position in the provider list (column)
	std::unique_ptr<Endpoint> ep;
	fi_addr_t peer = FI_ADDR_UNSPEC;
	std::unique_ptr<RegisteredBuffer> send; // OSU style: one buffer for every send
	std::unique_ptr<RegisteredBuffer> recv; // ... and one for every receive
	std::unique_ptr<RegisteredBuffer> ack;
};

// Opens every provider in both ranks. Providers that fail to open on any
// rank are reported unavailable (with the reason) and left out.
std::vector<Lane> open_lanes(Bootstrap& boot, const std::vector<std::string>& providers,
			     const std::vector<size_t>& indices, size_t buffer_bytes)
{
	Results& results = results_of(boot);
	std::vector<std::unique_ptr<Endpoint>> endpoints(indices.size());
	std::vector<uint8_t> opened(indices.size(), 0);
	for (size_t i = 0; i < indices.size(); ++i) {
		try {
			endpoints[i] = std::make_unique<Endpoint>(
				EndpointConfig{providers[indices[i]], FI_MSG | FI_TAGGED});
			opened[i] = 1;
		} catch (const std::exception& e) {
			if (boot.rank() == 0)
				std::snprintf(results.error[indices[i]], kErrorBytes, "%s",
					      e.what());
		}
	}
	const auto everyone = boot.allgather(opened);
	std::vector<Lane> lanes;
	for (size_t i = 0; i < indices.size(); ++i) {
		bool everywhere = true;
		for (const auto& theirs : everyone)
			everywhere = everywhere && theirs[i] != 0;
		if (!everywhere) {
			if (boot.rank() == 0) {
				results.unavailable[indices[i]] = 1;
				if (results.error[indices[i]][0] == '\0')
					std::snprintf(results.error[indices[i]], kErrorBytes,
						      "could not be opened on every rank");
			}
			continue;
		}
		Lane lane;
		lane.index = indices[i];
		lane.ep = std::move(endpoints[i]);
		lane.peer = lane.ep->exchange_addresses(boot)[static_cast<size_t>(1 - boot.rank())];
		lane.send = std::make_unique<RegisteredBuffer>(*lane.ep, buffer_bytes);
		lane.recv = std::make_unique<RegisteredBuffer>(*lane.ep, buffer_bytes);
		lane.ack = std::make_unique<RegisteredBuffer>(*lane.ep, 64);
		fill_pattern(lane.send->bytes(), make_seed(boot.rank()));
		lanes.push_back(std::move(lane));
	}
	return lanes;
}

// Runs `repetition(lane)` for every repetition and provider, alternating
// providers within each repetition: on a machine whose load changes over
// time every provider sees the same conditions.
void interleave(Bootstrap& boot, std::vector<Lane>& lanes, int repetitions,
		const std::function<double(Lane&)>& repetition,
		std::vector<std::vector<double>>& samples)
{
	samples.assign(lanes.size(), {});
	for (int rep = 0; rep < repetitions; ++rep)
		for (size_t l = 0; l < lanes.size(); ++l) {
			boot.barrier();
			samples[l].push_back(repetition(lanes[l]));
		}
}

// ---------------------------------------------------------------- latency

void measure_latency(Bootstrap& boot, const std::vector<std::string>& providers,
		     const std::vector<size_t>& indices, const BenchOptions& options,
		     const std::vector<size_t>& sizes)
{
	auto lanes = open_lanes(boot, providers, indices, sizes.back());
	const bool initiator = boot.rank() == 0;
	Results& results = results_of(boot);

	for (size_t i = 0; i < sizes.size(); ++i) {
		const size_t size = sizes[i];
		// Large messages need fewer iterations for a stable figure.
		const size_t iterations =
			size > 8192 ? options.latency_iterations / 4 : options.latency_iterations;
		auto round_trips = [&](Lane& lane, size_t count) {
			Endpoint& ep = *lane.ep;
			OpContext recv;
			for (size_t k = 0; k < count; ++k) {
				post_trecv(ep, *lane.recv, size, lane.peer, kDataTag, recv);
				if (initiator) {
					send_blocking(ep, *lane.send, size, lane.peer, kDataTag);
					ep.wait_ok(recv, "pong");
				} else {
					ep.wait_ok(recv, "ping");
					send_blocking(ep, *lane.send, size, lane.peer, kDataTag);
				}
			}
		};
		for (auto& lane : lanes)
			round_trips(lane, options.warmup);
		std::vector<std::vector<double>> samples;
		interleave(
			boot, lanes, options.repetitions,
			[&](Lane& lane) {
				const auto start = Clock::now();
				round_trips(lane, iterations);
				return seconds_since(start) * 1e6 /
				       (2.0 * static_cast<double>(iterations));
			},
			samples);
		if (initiator)
			for (size_t l = 0; l < lanes.size(); ++l) {
				results.values[lanes[l].index][i] = median(samples[l]);
				results.rows_done[lanes[l].index] = static_cast<uint32_t>(i + 1);
			}
	}
	boot.barrier();
}

// ---------------------------------------------------------------- bandwidth

void measure_bandwidth(Bootstrap& boot, const std::vector<std::string>& providers,
		       const std::vector<size_t>& indices, const BenchOptions& options,
		       const std::vector<size_t>& sizes)
{
	// As in osu_bw, every message of a window uses the same buffer: the
	// benchmark measures the transport, not the cache footprint.
	auto lanes = open_lanes(boot, providers, indices, sizes.back());
	const bool sender = boot.rank() == 0;
	std::vector<OpContext> window_ctx(options.bandwidth_window);
	Results& results = results_of(boot);

	for (size_t i = 0; i < sizes.size(); ++i) {
		const size_t size = sizes[i];
		const size_t window = std::clamp<size_t>(options.bandwidth_bytes / 4 / size, 2,
							 options.bandwidth_window);
		const size_t windows_per_rep =
			std::max<size_t>(1, options.bandwidth_bytes / (window * size));
		auto stream = [&](Lane& lane, size_t windows) {
			Endpoint& ep = *lane.ep;
			OpContext ack_ctx;
			for (size_t w = 0; w < windows; ++w) {
				if (sender) {
					post_trecv(ep, *lane.ack, 8, lane.peer, kAckTag, ack_ctx);
					for (size_t k = 0; k < window; ++k) {
						window_ctx[k].reset();
						FT_POST(ep,
							fi_tsend(ep.ep(), lane.send->data(), size,
								 lane.send->desc(), lane.peer,
								 kDataTag, &window_ctx[k]));
					}
					for (size_t k = 0; k < window; ++k)
						ep.wait_ok(window_ctx[k], "streamed send");
					ep.wait_ok(ack_ctx, "window acknowledgement");
				} else {
					for (size_t k = 0; k < window; ++k)
						post_trecv(ep, *lane.recv, size, lane.peer,
							   kDataTag, window_ctx[k]);
					for (size_t k = 0; k < window; ++k)
						ep.wait_ok(window_ctx[k], "streamed receive");
					send_blocking(ep, *lane.ack, 4, lane.peer, kAckTag);
				}
			}
		};
		for (auto& lane : lanes)
			stream(lane, 1); // warm-up: connection, registration caches, page faults
		std::vector<std::vector<double>> samples;
		interleave(
			boot, lanes, options.repetitions,
			[&](Lane& lane) {
				const auto start = Clock::now();
				stream(lane, windows_per_rep);
				return static_cast<double>(windows_per_rep * window * size) /
				       seconds_since(start) / 1e6;
			},
			samples);
		if (sender)
			for (size_t l = 0; l < lanes.size(); ++l) {
				results.values[lanes[l].index][i] = median(samples[l]);
				results.extra[lanes[l].index][i] = static_cast<double>(window);
				results.rows_done[lanes[l].index] = static_cast<uint32_t>(i + 1);
			}
	}
	boot.barrier();
}

// ---------------------------------------------------------------- memory

// Rank 0 is the hub. Its resident set is read once its endpoint is up, all
// k peers are in its AV and as many messages as the test will take have
// gone through a connection to itself (so its per-endpoint pools are in
// use), then again after it has exchanged one message with each peer
// (connections and receive resources now exist) and driven progress a
// little longer. The difference is what k peers cost.
void measure_memory(Bootstrap& boot, const std::string& provider)
{
	Endpoint ep({provider, FI_MSG | FI_TAGGED});
	const auto peers = ep.exchange_addresses(boot);
	const int k = boot.size() - 1;
	RegisteredBuffer buffer(ep, 4096);
	std::vector<OpContext> contexts(static_cast<size_t>(k));
	Results& results = results_of(boot);
	constexpr size_t kMessage = 64;

	if (boot.rank() != 0) {
		boot.barrier(); // hub took its baseline
		OpContext reply;
		post_trecv(ep, buffer, kMessage, peers[0], kAckTag, reply);
		send_blocking(ep, buffer, kMessage, peers[0], kDataTag);
		ep.wait_ok(reply, "hub's reply");
		boot.barrier();
		return;
	}
	// Let the endpoint settle (threads, lazily created pools) before the
	// baseline. The pools an endpoint keeps whoever its peers are (bounce
	// buffers, the core's buffers) fill as messages flow: as many messages
	// as the test will take run first through a connection to ourselves,
	// so that the growth is what the peers themselves cost.
	constexpr uint64_t kSelfTag = 0x5E1F;
	std::vector<OpContext> self_recvs(static_cast<size_t>(std::max(k, 64)));
	std::vector<OpContext> self_sends(self_recvs.size());
	for (int round = 0; round < 2; ++round) {
		for (auto& ctx : self_recvs)
			post_trecv(ep, buffer, kMessage, peers[0], kSelfTag, ctx);
		for (auto& ctx : self_sends) {
			ctx.reset();
			FT_POST(ep, fi_tsend(ep.ep(), buffer.data(), kMessage, buffer.desc(),
					     peers[0], kSelfTag, &ctx));
		}
		for (auto& ctx : self_sends)
			ep.wait_ok(ctx, "send to ourselves");
		for (auto& ctx : self_recvs)
			ep.wait_ok(ctx, "receive from ourselves");
	}
	for (int i = 0; i < 100; ++i)
		ep.progress();
	const size_t before = resident_bytes();
	boot.barrier();
	for (int p = 0; p < k; ++p)
		post_trecv(ep, buffer, kMessage, FI_ADDR_UNSPEC, kDataTag,
			   contexts[static_cast<size_t>(p)]);
	for (auto& ctx : contexts)
		ep.wait_ok(ctx, "peer's message", std::chrono::seconds(60));
	for (int p = 1; p <= k; ++p)
		send_blocking(ep, buffer, kMessage, peers[static_cast<size_t>(p)], kAckTag);
	const auto settle = Clock::now();
	while (seconds_since(settle) < 0.2)
		ep.progress();
	const size_t after = resident_bytes();
	results.values[0][0] = static_cast<double>(after) - static_cast<double>(before);
	results.extra[0][0] = static_cast<double>(before);
	results.rows_done[0] = 1;
	boot.barrier();
}

// ---------------------------------------------------------------- table

struct Column {
	std::string provider;
	bool available = true;
	std::string error;
	std::vector<double> values; // NaN where no figure was produced
	std::vector<double> extras; // per-row side figures (window, baseline)
};

std::string format_size(size_t bytes)
{
	if (bytes >= (1u << 20))
		return strfmt("%zu MiB", bytes >> 20);
	if (bytes >= 1024)
		return strfmt("%zu KiB", bytes >> 10);
	return strfmt("%zu B", bytes);
}

using LaneBody = std::function<void(Bootstrap&, const std::vector<size_t>& provider_indices)>;

Column column_from(const Results& results, size_t lane, const std::string& provider, size_t rows)
{
	Column column;
	column.provider = provider;
	column.values.assign(rows, std::numeric_limits<double>::quiet_NaN());
	column.extras.assign(rows, std::numeric_limits<double>::quiet_NaN());
	for (size_t i = 0; i < std::min<size_t>(results.rows_done[lane], rows); ++i) {
		column.values[i] = results.values[lane][i];
		column.extras[i] = results.extra[lane][i];
	}
	column.available = results.unavailable[lane] == 0;
	if (!column.available)
		column.error = results.error[lane];
	return column;
}

Results read_results(const std::vector<std::byte>& scratch)
{
	Results results{};
	std::memcpy(&results, scratch.data(), sizeof results);
	return results;
}

// All providers in the same two ranks, repetitions interleaved. If that
// run dies (a provider crashing takes the process with it), each provider
// still missing figures is measured again on its own, so one broken
// provider never costs the others their columns.
std::vector<Column> run_side_by_side(const std::vector<std::string>& providers, size_t rows,
				     std::chrono::seconds timeout, const LaneBody& body)
{
	std::vector<size_t> all(providers.size());
	for (size_t i = 0; i < all.size(); ++i)
		all[i] = i;
	std::vector<std::byte> scratch;
	const LaunchResult joint = launch_ranks(
		2, timeout, [&](Bootstrap& boot) { body(boot, all); }, &scratch);
	const Results results = read_results(scratch);
	std::vector<Column> columns;
	for (size_t p = 0; p < providers.size(); ++p) {
		Column column = column_from(results, p, providers[p], rows);
		if (joint.outcome != Outcome::passed && column.available &&
		    results.rows_done[p] < rows) {
			std::vector<std::byte> alone_scratch;
			const LaunchResult alone = launch_ranks(
				2, timeout, [&](Bootstrap& boot) { body(boot, {p}); },
				&alone_scratch);
			column = column_from(read_results(alone_scratch), p, providers[p], rows);
			if (alone.outcome != Outcome::passed && column.error.empty())
				column.error = alone.detail;
			else if (column.error.empty())
				column.error = "measured on its own after the joint run failed: " +
					       joint.detail;
		}
		columns.push_back(std::move(column));
	}
	return columns;
}

void print_table(const std::string& title, const std::string& method,
		 const std::string& first_header, const std::vector<std::string>& row_labels,
		 const std::vector<Column>& columns, const char* unit, int decimals)
{
	std::printf("\n%s\n", title.c_str());
	std::printf("  method: %s\n", method.c_str());
	const int label_width = 9;
	int width = 12;
	for (const auto& c : columns)
		width = std::max(width,
				 static_cast<int>(c.provider.size() + std::strlen(unit) + 3));
	std::printf("  %*s", label_width, first_header.c_str());
	for (const auto& c : columns)
		std::printf(" | %*s", width, strfmt("%s (%s)", c.provider.c_str(), unit).c_str());
	const bool ratio = columns.size() >= 2;
	if (ratio)
		std::printf(" | %*s", width, "ratio");
	std::printf("\n  %s", std::string(static_cast<size_t>(label_width), '-').c_str());
	for (size_t i = 0; i < columns.size() + (ratio ? 1 : 0); ++i)
		std::printf("-+-%s", std::string(static_cast<size_t>(width), '-').c_str());
	std::printf("\n");
	for (size_t row = 0; row < row_labels.size(); ++row) {
		std::printf("  %*s", label_width, row_labels[row].c_str());
		for (const auto& c : columns) {
			const double v = c.values[row];
			if (std::isnan(v))
				std::printf(" | %*s", width, c.available ? "failed" : "n/a");
			else
				std::printf(" | %*.*f", width, decimals, v);
		}
		if (ratio) {
			const double a = columns[0].values[row], b = columns[1].values[row];
			if (std::isnan(a) || std::isnan(b) || b == 0)
				std::printf(" | %*s", width, "-");
			else
				std::printf(" | %*.2f", width, a / b);
		}
		std::printf("\n");
	}
	for (const auto& c : columns)
		if (!c.error.empty())
			std::printf("  note: %s%s: %s\n", c.provider.c_str(),
				    c.available ? "" : " unavailable", c.error.c_str());
	std::fflush(stdout);
}

std::vector<std::string> split(const std::string& text, char separator)
{
	std::vector<std::string> parts;
	std::stringstream stream(text);
	std::string part;
	while (std::getline(stream, part, separator))
		if (!part.empty())
			parts.push_back(part);
	return parts;
}

size_t parse_size(const std::string& text)
{
	char* end = nullptr;
	const double value = std::strtod(text.c_str(), &end);
	size_t scale = 1;
	if (end && (*end == 'k' || *end == 'K'))
		scale = 1 << 10;
	else if (end && (*end == 'm' || *end == 'M'))
		scale = 1 << 20;
	if (value <= 0)
		throw std::invalid_argument("bad size: " + text);
	return static_cast<size_t>(value * static_cast<double>(scale));
}

void usage(FILE* out)
{
	std::fprintf(
		out,
		"usage: rcoll_p2p_bench [options]\n"
		"  --providers LIST   comma-separated providers (default \"rcoll,tcp;ofi_rxm\");\n"
		"                     the ratio column is first / second\n"
		"  --latency MIN:MAX  pingpong sizes, powers of two (default 8:64K)\n"
		"  --bandwidth MIN:MAX streaming sizes (default 64K:64M)\n"
		"  --peers LIST       peer counts of the memory test (default 1,8,64)\n"
		"  --iterations N     pingpong round trips per repetition (default 2000)\n"
		"  --reps N           repetitions; figures are medians (default 5)\n"
		"  --only LIST        subset of latency,bandwidth,memory\n"
		"  --quick            fewer sizes, iterations and repetitions\n"
		"rcoll is loaded from FI_PROVIDER_PATH (e.g. the build tree's .libs).\n");
}

} // namespace

int main(int argc, char** argv)
{
	BenchOptions options;
	try {
		for (int i = 1; i < argc; ++i) {
			const std::string arg = argv[i];
			auto value = [&]() -> std::string {
				if (i + 1 >= argc)
					throw std::invalid_argument(arg + " needs a value");
				return argv[++i];
			};
			auto range = [&](size_t& lo, size_t& hi) {
				const auto parts = split(value(), ':');
				if (parts.size() != 2)
					throw std::invalid_argument(arg + " takes MIN:MAX");
				lo = parse_size(parts[0]);
				hi = parse_size(parts[1]);
				if (lo > hi)
					throw std::invalid_argument(arg + ": MIN > MAX");
			};
			if (arg == "--providers") {
				options.providers = split(value(), ',');
			} else if (arg == "--latency") {
				range(options.latency_min, options.latency_max);
			} else if (arg == "--bandwidth") {
				range(options.bandwidth_min, options.bandwidth_max);
			} else if (arg == "--peers") {
				options.peer_counts.clear();
				for (const auto& p : split(value(), ','))
					options.peer_counts.push_back(std::stoi(p));
			} else if (arg == "--iterations") {
				options.latency_iterations = std::stoul(value());
			} else if (arg == "--reps") {
				options.repetitions = std::stoi(value());
			} else if (arg == "--only") {
				const auto parts = split(value(), ',');
				auto has = [&](const char* name) {
					return std::find(parts.begin(), parts.end(), name) !=
					       parts.end();
				};
				options.run_latency = has("latency");
				options.run_bandwidth = has("bandwidth");
				options.run_memory = has("memory");
			} else if (arg == "--quick") {
				options.latency_iterations = 500;
				options.warmup = 50;
				options.repetitions = 3;
				options.bandwidth_max =
					std::min<size_t>(options.bandwidth_max, 16 << 20);
				options.bandwidth_bytes = 64 << 20;
			} else if (arg == "--help" || arg == "-h") {
				usage(stdout);
				return 0;
			} else {
				throw std::invalid_argument("unknown option " + arg);
			}
		}
		for (int k : options.peer_counts)
			if (k < 1 || k >= kMaxRanks)
				throw std::invalid_argument(
					strfmt("--peers: %d is outside 1..%d", k, kMaxRanks - 1));
		if (options.providers.empty() || options.repetitions < 1 ||
		    options.latency_iterations < 1)
			throw std::invalid_argument(
				"need at least one provider, repetition and iteration");
	} catch (const std::exception& e) {
		std::fprintf(stderr, "rcoll_p2p_bench: %s\n", e.what());
		usage(stderr);
		return 2;
	}

	prefer_loopback_interfaces();
	std::printf("rcoll_p2p_bench: ranks forked on this host, loopback only; tagged messages "
		    "(fi_tsend/fi_trecv); FI_PROVIDER_PATH=%s\n",
		    std::getenv("FI_PROVIDER_PATH") ? std::getenv("FI_PROVIDER_PATH") : "(unset)");
	const std::string ratio = options.providers.size() >= 2
					  ? strfmt("= %s / %s", options.providers[0].c_str(),
						   options.providers[1].c_str())
					  : "(needs two providers)";

	if (options.run_latency) {
		const auto sizes = powers_of_two(options.latency_min, options.latency_max);
		const auto columns = run_side_by_side(
			options.providers, sizes.size(), std::chrono::seconds(600),
			[&](Bootstrap& boot, const std::vector<size_t>& lanes) {
				measure_latency(boot, options.providers, lanes, options, sizes);
			});
		std::vector<std::string> labels;
		for (size_t s : sizes)
			labels.push_back(format_size(s));
		print_table("Latency, one-way (half round trip), lower is better",
			    strfmt("blocking pingpong between 2 ranks, %zu warm-up round trips, "
				   "then %d repetitions of %zu "
				   "round trips (a quarter of that above 8 KiB), providers taking "
				   "turns within each "
				   "repetition; median of the repetitions; ratio %s",
				   options.warmup, options.repetitions, options.latency_iterations,
				   ratio.c_str()),
			    "size", labels, columns, "us", 2);
	}

	if (options.run_bandwidth) {
		const auto sizes = powers_of_two(options.bandwidth_min, options.bandwidth_max);
		const auto columns = run_side_by_side(
			options.providers, sizes.size(), std::chrono::seconds(900),
			[&](Bootstrap& boot, const std::vector<size_t>& lanes) {
				measure_bandwidth(boot, options.providers, lanes, options, sizes);
			});
		std::vector<std::string> labels;
		for (size_t s : sizes)
			labels.push_back(format_size(s));
		print_table("Streaming bandwidth, higher is better",
			    strfmt("sender posts a window of up to %zu back-to-back sends (fewer "
				   "for large sizes, at "
				   "most %s in flight) into receives posted beforehand, then waits "
				   "for a 4-byte ack; "
				   "~%s per repetition after one warm-up window, providers taking "
				   "turns within each "
				   "repetition; median of %d repetitions; "
				   "MB/s = 10^6 bytes/s; ratio %s",
				   options.bandwidth_window,
				   format_size(options.bandwidth_bytes / 4).c_str(),
				   format_size(options.bandwidth_bytes).c_str(),
				   options.repetitions, ratio.c_str()),
			    "size", labels, columns, "MB/s", 0);
	}

	if (options.run_memory) {
		std::vector<Column> columns;
		for (const auto& provider : options.providers) {
			Column column;
			column.provider = provider;
			for (int k : options.peer_counts) {
				std::vector<std::byte> scratch;
				const LaunchResult run = launch_ranks(
					k + 1, std::chrono::seconds(180),
					[&](Bootstrap& boot) { measure_memory(boot, provider); },
					&scratch);
				Column one = column_from(read_results(scratch), 0, provider, 1);
				if (run.outcome != Outcome::passed) {
					one.available = false;
					one.error = run.detail;
				}
				column.values.push_back(one.values[0] / 1024.0);
				column.extras.push_back(one.extras[0] / 1024.0);
				if (!one.error.empty() && column.error.empty()) {
					column.error = strfmt("%d peers: %s", k, one.error.c_str());
					column.available = one.available;
				}
			}
			columns.push_back(column);
		}
		std::vector<std::string> labels;
		for (int k : options.peer_counts)
			labels.push_back(strfmt("%d", k));
		print_table("Receive-side memory of one process, lower is better",
			    "growth of the hub rank's resident set (/proc/self/statm) from "
			    "'endpoint enabled, all peers in "
			    "the AV, 2x max(k,64) messages to itself' to 'one 64-byte message "
			    "received from and sent to each of k peers, then 0.2 s of "
			    "progress': connections, receive buffers and bookkeeping the provider "
			    "allocates per peer; "
			    "page-granular (4 KiB); ratio " +
				    ratio,
			    "peers", labels, columns, "KiB", 0);
		std::printf("  baseline: the hub's resident set with its endpoint open, before any "
			    "peer traffic (%d peers):",
			    options.peer_counts.front());
		for (const auto& c : columns)
			if (!c.extras.empty() && !std::isnan(c.extras.front()))
				std::printf(" %s %.0f KiB;", c.provider.c_str(), c.extras.front());
		std::printf("\n");
	}
	return 0;
}
