// rcoll_sim: runs rcoll's collective algorithms on the simulated fabric, or
// evaluates their cost model where a full run is too big, and prints per
// algorithm the rounds on the critical path, the writes and bytes each rank
// sends (from the real schedules) against the collective's lower bound,
// and the time predicted by the alpha-beta-gamma model next to the time
// the simulated fabric measured with the same constants.
#include <getopt.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/cost_model.hpp"
#include "engine/group.hpp"
#include "engine/tuning.hpp"
#include "transport/sim.hpp"

namespace {

using namespace rcoll::engine;

struct Args {
	Collective coll = Collective::allreduce;
	std::vector<Algorithm> algorithms; // empty: all of the collective
	bool automatic = false;
	std::vector<uint32_t> ranks{16384};
	std::vector<uint64_t> bytes{8, 1024, 64 * 1024, 1024 * 1024, 16 * 1024 * 1024};
	Datatype dtype = Datatype::float64;
	ReduceOp op = ReduceOp::sum;
	uint32_t root = 0;
	CostParams cost;
	GroupConfig config;
	std::string tune;
	enum class Mode { model, run, automatic } mode = Mode::automatic;
	uint64_t max_events = 20'000'000;
	uint64_t max_memory = uint64_t(4) << 30;
	uint64_t seed = 1;
	bool csv = false;
};

void usage(FILE* out)
{
	std::fprintf(
		out,
		"usage: rcoll_sim [options]\n"
		"Runs rcoll collective algorithms on the simulated fabric (or their cost\n"
		"model when a full run is too big) and prints rounds, writes and bytes per\n"
		"rank against the lower bound, and model and simulated times.\n\n"
		"  -c, --collective NAME   barrier broadcast alltoall allreduce allgather\n"
		"                          reduce_scatter reduce scatter gather (allreduce)\n"
		"  -a, --algorithm LIST    comma-separated algorithms, or 'auto' for the\n"
		"                          selector's choice (default: every algorithm)\n"
		"  -p, --ranks LIST        group sizes, e.g. 16,1024,16384 (16384)\n"
		"  -n, --bytes LIST        message sizes: count x datatype size, per rank\n"
		"                          block where the collective has blocks; suffixes\n"
		"                          k, m, g (8,1k,64k,1m,16m)\n"
		"  -t, --datatype NAME     int8 .. uint64 float double ... (double)\n"
		"  -o, --op NAME           min max sum prod lor land bor band lxor bxor (sum)\n"
		"  -r, --root N            root of rooted collectives (0)\n"
		"      --alpha US          latency per message (%.3g)\n"
		"      --beta US           time per byte on the wire (%.3g)\n"
		"      --gamma US          time per byte reduced (%.3g)\n"
		"      --overhead US       CPU time per message a rank sends or receives\n"
		"                          beyond one per round, LogP's o (%.3g)\n"
		"      --radix K           degree of the k-ary tree (%u)\n"
		"      --chunk BYTES       pipeline chunk (%lluk)\n"
		"      --eager BYTES       most bytes a schedule copies out of scratch (%lluk)\n"
		"      --scratch BYTES     scratch per half, 0 = auto (0)\n"
		"      --tune STRING       tuning rules, see fi_rcoll(7)\n"
		"      --mode MODE         model, run, or auto: run when within the limits (auto)\n"
		"      --max-events N      largest full run, in simulated events (2e7)\n"
		"      --max-memory BYTES  largest full run, in buffer memory (4g)\n"
		"      --seed N            seed of the simulated fabric (1)\n"
		"      --csv               comma-separated output\n"
		"  -h, --help\n",
		CostParams{}.alpha_us, CostParams{}.beta_us_per_byte,
		CostParams{}.gamma_us_per_byte, CostParams{}.overhead_us, GroupConfig{}.radix,
		(unsigned long long)GroupConfig{}.chunk_bytes / 1024,
		(unsigned long long)GroupConfig{}.eager_bytes / 1024);
}

std::vector<std::string_view> split(std::string_view s)
{
	std::vector<std::string_view> out;
	while (!s.empty()) {
		size_t c = s.find(',');
		out.push_back(s.substr(0, c));
		if (c == std::string_view::npos)
			break;
		s.remove_prefix(c + 1);
	}
	return out;
}

bool parse_double(const char* s, double& out)
{
	char* end = nullptr;
	out = std::strtod(s, &end);
	return end && *end == '\0' && end != s && out >= 0;
}

std::optional<Datatype> parse_datatype(std::string_view s)
{
	if (s == "double")
		return Datatype::float64;
	for (unsigned d = 0; d < datatype_count; ++d)
		if (to_string(static_cast<Datatype>(d)) == s)
			return static_cast<Datatype>(d);
	return std::nullopt;
}

std::optional<ReduceOp> parse_op(std::string_view s)
{
	for (unsigned o = 0; o < reduce_op_count; ++o)
		if (to_string(static_cast<ReduceOp>(o)) == s)
			return static_cast<ReduceOp>(o);
	return std::nullopt;
}

bool fail(const char* what, const char* value)
{
	std::fprintf(stderr, "rcoll_sim: bad %s '%s'\n", what, value);
	return false;
}

bool parse_args(int argc, char** argv, Args& a)
{
	enum {
		opt_alpha = 256,
		opt_beta,
		opt_gamma,
		opt_overhead,
		opt_radix,
		opt_chunk,
		opt_eager,
		opt_scratch,
		opt_tune,
		opt_mode,
		opt_max_events,
		opt_max_memory,
		opt_seed,
		opt_csv
	};
	static const option longopts[] = {
		{"collective", required_argument, nullptr, 'c'},
		{"algorithm", required_argument, nullptr, 'a'},
		{"ranks", required_argument, nullptr, 'p'},
		{"bytes", required_argument, nullptr, 'n'},
		{"datatype", required_argument, nullptr, 't'},
		{"op", required_argument, nullptr, 'o'},
		{"root", required_argument, nullptr, 'r'},
		{"alpha", required_argument, nullptr, opt_alpha},
		{"beta", required_argument, nullptr, opt_beta},
		{"gamma", required_argument, nullptr, opt_gamma},
		{"overhead", required_argument, nullptr, opt_overhead},
		{"radix", required_argument, nullptr, opt_radix},
		{"chunk", required_argument, nullptr, opt_chunk},
		{"eager", required_argument, nullptr, opt_eager},
		{"scratch", required_argument, nullptr, opt_scratch},
		{"tune", required_argument, nullptr, opt_tune},
		{"mode", required_argument, nullptr, opt_mode},
		{"max-events", required_argument, nullptr, opt_max_events},
		{"max-memory", required_argument, nullptr, opt_max_memory},
		{"seed", required_argument, nullptr, opt_seed},
		{"csv", no_argument, nullptr, opt_csv},
		{"help", no_argument, nullptr, 'h'},
		{nullptr, 0, nullptr, 0},
	};
	std::string algorithms;
	int c;
	while ((c = getopt_long(argc, argv, "c:a:p:n:t:o:r:h", longopts, nullptr)) != -1) {
		uint64_t v = 0;
		double d = 0;
		switch (c) {
		case 'c': {
			auto coll = parse_collective(optarg);
			if (!coll)
				return fail("collective", optarg);
			a.coll = *coll;
			break;
		}
		case 'a': algorithms = optarg; break;
		case 'p':
			a.ranks.clear();
			for (auto s : split(optarg)) {
				if (!parse_size(s, v) || v == 0 || v > (1u << 24))
					return fail("group size", optarg);
				a.ranks.push_back(static_cast<uint32_t>(v));
			}
			break;
		case 'n':
			a.bytes.clear();
			for (auto s : split(optarg)) {
				if (!parse_size(s, v))
					return fail("message size", optarg);
				a.bytes.push_back(v);
			}
			break;
		case 't': {
			auto dt = parse_datatype(optarg);
			if (!dt)
				return fail("datatype", optarg);
			a.dtype = *dt;
			break;
		}
		case 'o': {
			auto op = parse_op(optarg);
			if (!op)
				return fail("op", optarg);
			a.op = *op;
			break;
		}
		case 'r':
			if (!parse_size(optarg, v) || v > UINT32_MAX)
				return fail("root", optarg);
			a.root = static_cast<uint32_t>(v);
			break;
		case opt_alpha:
		case opt_beta:
		case opt_gamma:
		case opt_overhead:
			if (!parse_double(optarg, d))
				return fail("model constant", optarg);
			(c == opt_alpha   ? a.cost.alpha_us
			 : c == opt_beta  ? a.cost.beta_us_per_byte
			 : c == opt_gamma ? a.cost.gamma_us_per_byte
					  : a.cost.overhead_us) = d;
			break;
		case opt_radix:
			if (!parse_size(optarg, v) || v == 0 || v > UINT32_MAX)
				return fail("radix", optarg);
			a.config.radix = static_cast<uint32_t>(v);
			break;
		case opt_chunk:
			if (!parse_size(optarg, v) || v == 0)
				return fail("chunk", optarg);
			a.config.chunk_bytes = v;
			break;
		case opt_eager:
			if (!parse_size(optarg, v))
				return fail("eager size", optarg);
			a.config.eager_bytes = a.config.broadcast_eager_bytes = v;
			break;
		case opt_scratch:
			if (!parse_size(optarg, v))
				return fail("scratch size", optarg);
			a.config.scratch_half_bytes = v;
			break;
		case opt_tune: a.tune = optarg; break;
		case opt_mode:
			if (!std::strcmp(optarg, "model"))
				a.mode = Args::Mode::model;
			else if (!std::strcmp(optarg, "run"))
				a.mode = Args::Mode::run;
			else if (!std::strcmp(optarg, "auto"))
				a.mode = Args::Mode::automatic;
			else
				return fail("mode", optarg);
			break;
		case opt_max_events:
		case opt_max_memory:
			if (!parse_size(optarg, v))
				return fail(c == opt_max_events ? "event limit" : "memory limit",
					    optarg);
			(c == opt_max_events ? a.max_events : a.max_memory) = v;
			break;
		case opt_seed:
			if (!parse_size(optarg, v))
				return fail("seed", optarg);
			a.seed = v;
			break;
		case opt_csv: a.csv = true; break;
		case 'h': usage(stdout); std::exit(0);
		default: usage(stderr); return false;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return false;
	}
	for (auto s : split(algorithms)) {
		if (s == "auto") {
			a.automatic = true;
			continue;
		}
		Algorithm alg = parse_algorithm(s);
		if (!algorithm_supports(a.coll, alg))
			return fail("algorithm for this collective", std::string(s).c_str());
		a.algorithms.push_back(alg);
	}
	if (a.algorithms.empty() && !a.automatic)
		a.algorithms = algorithms_for(a.coll);
	std::vector<TuneRule> rules;
	std::string err;
	if (parse_tuning(a.tune, rules, err) != Errc::ok) {
		std::fprintf(stderr, "rcoll_sim: %s\n", err.c_str());
		return false;
	}
	a.config.selector = Selector(a.cost, std::move(rules));
	return true;
}

// The fewest bytes the busiest rank must send, where it is known:
// allreduce 2 (p - 1) / p n (Patarasuk and Yuan); allgather, alltoall,
// reduce_scatter and scatter (p - 1) n per block; broadcast n (the root
// sends every byte once); gather n (someone sends a block). Negative when
// not stated.
double lower_bound(Collective c, uint32_t p, double n)
{
	if (p <= 1)
		return 0;
	switch (c) {
	case Collective::allreduce: return allreduce_bandwidth_lower_bound(p, n);
	case Collective::allgather:
	case Collective::alltoall:
	case Collective::reduce_scatter:
	case Collective::scatter: return (p - 1) * n;
	case Collective::broadcast:
	case Collective::gather: return n;
	case Collective::barrier: return 0;
	case Collective::reduce: return -1;
	}
	return -1;
}

struct Row {
	std::string algorithm;
	double rounds = 0;
	uint64_t writes = 0;  // busiest rank
	uint64_t bytes = 0;   // busiest rank, payload
	bool sampled = false; // from a sample of the ranks
	double bound = -1;
	double predicted = 0;
	double simulated = -1; // < 0: not run
	std::string note;
};

// The ranks whose schedules are built: all for small groups, else a sample
// that contains the busiest rank of every algorithm here (the root and its
// neighbours, the fold's ranks, both ends).
std::vector<uint32_t> ranks_to_build(uint32_t p, uint32_t root, bool& sampled)
{
	std::vector<uint32_t> out;
	sampled = p > 256;
	if (!sampled) {
		for (uint32_t r = 0; r < p; ++r)
			out.push_back(r);
		return out;
	}
	for (uint64_t r : {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(root),
			   uint64_t(root) + 1, uint64_t(p / 2), uint64_t(p) - 2, uint64_t(p) - 1})
		if (r < p && std::find(out.begin(), out.end(), uint32_t(r)) == out.end())
			out.push_back(uint32_t(r));
	return out;
}

struct AlignedFree {
	void operator()(std::byte* p) const noexcept
	{
		::operator delete (p, std::align_val_t{64});
	}
};
using AlignedPtr = std::unique_ptr<std::byte, AlignedFree>;

AlignedPtr aligned_bytes(size_t n)
{
	return AlignedPtr(n ? static_cast<std::byte*>(::operator new (n, std::align_val_t{64}))
			    : nullptr);
}

// A group config that holds exactly one operation with this footprint:
// the schedules built against it are the same (they only change when
// something does not fit), and the simulation of 16,384 ranks does not
// need a provider-sized scratch region and counter array per rank.
GroupConfig config_for(const GroupConfig& base, const ScheduleLayout& footprint)
{
	GroupConfig c = base;
	c.scratch_half_bytes = std::max<uint64_t>(footprint.scratch_bytes(), 64);
	c.counters_per_half = std::max<uint32_t>(footprint.counters, 1);
	return c;
}

// A full run on the modelled fabric; returns the makespan, or a reason.
std::optional<double> simulate(const Args& a, const OpDescriptor& d, const GroupConfig& config,
			       std::string& why)
{
	rcoll::sim::Options so;
	so.timing = rcoll::sim::Timing::modelled;
	so.cost = a.cost;
	so.check_memory = false;
	so.seed = a.seed;
	rcoll::sim::Cluster cluster(d.size, config, so);
	if (cluster.status() != Errc::ok) {
		why = "group: " + std::string(to_string(cluster.status()));
		return std::nullopt;
	}
	std::vector<AlignedPtr> inputs(d.size), outputs(d.size);
	for (uint32_t r = 0; r < d.size; ++r) {
		BufferSizes sz = buffer_sizes(d, r);
		inputs[r] = aligned_bytes(sz.input);
		outputs[r] = aligned_bytes(sz.output);
		if (sz.input)
			std::memset(inputs[r].get(), 0, sz.input);
		if (sz.output)
			std::memset(outputs[r].get(), 0, sz.output);
		Request req;
		req.coll = d.coll;
		req.algorithm = d.algorithm;
		req.params = d.params;
		req.input = inputs[r].get();
		req.output = outputs[r].get();
		req.count = d.count;
		req.dtype = d.dtype;
		req.op = d.op;
		req.root = d.root;
		if (Errc e = cluster.group(r).post(req); e != Errc::ok) {
			why = "post: " + std::string(to_string(e));
			return std::nullopt;
		}
	}
	cluster.fabric().run();
	for (uint32_t r = 0; r < d.size; ++r) {
		Completion c;
		if (!cluster.group(r).next_completion(c) || c.status != Errc::ok) {
			why = "rank " + std::to_string(r) + " did not complete";
			return std::nullopt;
		}
	}
	return cluster.fabric().makespan();
}

Row evaluate(const Args& a, uint32_t p, uint64_t bytes, Algorithm alg)
{
	Row row;
	const size_t esz = datatype_size(a.dtype);
	OpDescriptor d;
	d.coll = a.coll;
	d.size = p;
	d.root = std::min(a.root, p - 1);
	d.count = a.coll == Collective::barrier ? 0 : bytes / esz;
	d.dtype = a.dtype;
	d.op = a.op;
	const Limits limits = Group::limits(p, a.config);
	if (alg == Algorithm::automatic) {
		Choice ch = a.config.selector.choose(d, limits);
		d.algorithm = ch.algorithm;
		d.params = ch.params;
		row.algorithm = "auto:" + std::string(to_string(ch.algorithm));
	} else {
		d.algorithm = alg;
		row.algorithm = std::string(to_string(alg));
	}
	if (d.algorithm == Algorithm::ktree) {
		uint32_t k = d.params.radix ? d.params.radix : limits.radix;
		row.algorithm += "(k=" + std::to_string(std::min(k, std::max(p, 2u) - 1)) + ")";
	}
	if (Errc e = validate(d); e != Errc::ok) {
		row.note = std::string(to_string(e));
		return row;
	}
	Prediction pred = predict(d, limits, a.cost);
	row.rounds = pred.latency_terms;
	row.predicted = pred.time_us;
	row.bound = lower_bound(d.coll, p, double(d.count * esz));

	uint64_t total_writes = 0;
	double temporaries = 0; // rendezvous landing areas, per sampled rank
	ScheduleLayout footprint;
	std::vector<uint32_t> sample = ranks_to_build(p, d.root, row.sampled);
	for (uint32_t r : sample) {
		Schedule s;
		if (Errc e = build_schedule(d, r, limits, s); e != Errc::ok) {
			row.note = "schedule: " + std::string(to_string(e));
			return row;
		}
		row.writes = std::max<uint64_t>(row.writes, s.writes);
		row.bytes = std::max(row.bytes, s.payload_bytes);
		total_writes += s.writes;
		if (!s.layout.landing_in_scratch)
			temporaries += double(s.layout.landing_bytes);
		footprint = s.layout;
	}
	const GroupConfig run_config = config_for(a.config, footprint);
	const double events = 2.0 * double(total_writes) / double(sample.size()) * p;
	const uint64_t counters =
		MonotoneCounters{p}.total() + 2 * uint64_t(run_config.counters_per_half);
	double memory =
		double(p) * double(Group::scratch_bytes(p, run_config) + 8 * counters + 4096) +
		temporaries * p / double(sample.size());
	for (uint32_t r : sample) {
		BufferSizes sz = buffer_sizes(d, r);
		memory += double(sz.input + sz.output) * p / double(sample.size());
	}
	const bool fits = events <= double(a.max_events) && memory <= double(a.max_memory);
	if (a.mode == Args::Mode::model || (a.mode == Args::Mode::automatic && !fits)) {
		row.note = fits ? "" : "model only";
		return row;
	}
	std::string why;
	try {
		if (auto t = simulate(a, d, run_config, why))
			row.simulated = *t;
		else
			row.note = why;
	} catch (const std::bad_alloc&) {
		row.note = "out of memory";
	}
	return row;
}

std::string human_bytes(double b)
{
	char buf[32];
	if (b < 0)
		return "-";
	const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	while (b >= 1024 && u < 4) {
		b /= 1024;
		++u;
	}
	std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
	return buf;
}

std::string human_time(double us)
{
	char buf[32];
	if (us < 0)
		return "-";
	if (us < 1000)
		std::snprintf(buf, sizeof buf, "%.1f us", us);
	else if (us < 1e6)
		std::snprintf(buf, sizeof buf, "%.2f ms", us / 1e3);
	else
		std::snprintf(buf, sizeof buf, "%.2f s", us / 1e6);
	return buf;
}

void print_header(const Args& a)
{
	if (a.csv) {
		std::printf("collective,p,bytes,algorithm,rounds,writes_per_rank,bytes_per_rank,"
			    "lower_bound,predicted_us,simulated_us,note\n");
		return;
	}
	std::printf("# %s, alpha %.3g us, beta %.3g us/B (%.2f GB/s), gamma %.3g us/B, o %.3g us\n",
		    std::string(to_string(a.coll)).c_str(), a.cost.alpha_us,
		    a.cost.beta_us_per_byte,
		    a.cost.beta_us_per_byte > 0 ? 1e-3 / a.cost.beta_us_per_byte : 0.0,
		    a.cost.gamma_us_per_byte, a.cost.overhead_us);
	std::printf("%7s %9s  %-24s %6s %7s %12s %12s %6s %10s %10s  %s\n", "p", "bytes",
		    "algorithm", "rounds", "writes", "bytes/rank", "lower bound", "ratio", "model",
		    "simulated", "");
}

void print_row(const Args& a, uint32_t p, uint64_t bytes, const Row& r)
{
	if (a.csv) {
		std::printf("%s,%u,%" PRIu64 ",%s,%.0f,%" PRIu64 ",%" PRIu64 ",%.0f,%.3f,%.3f,%s\n",
			    std::string(to_string(a.coll)).c_str(), p, bytes, r.algorithm.c_str(),
			    r.rounds, r.writes, r.bytes, r.bound, r.predicted, r.simulated,
			    r.note.c_str());
		return;
	}
	char ratio[16] = "-";
	if (r.bound > 0)
		std::snprintf(ratio, sizeof ratio, "%.2f", double(r.bytes) / r.bound);
	std::string bytes_col = human_bytes(double(r.bytes)) + (r.sampled ? "*" : "");
	std::printf("%7u %9s  %-24s %6.0f %7" PRIu64 " %12s %12s %6s %10s %10s  %s\n", p,
		    human_bytes(double(bytes)).c_str(), r.algorithm.c_str(), r.rounds, r.writes,
		    bytes_col.c_str(), human_bytes(r.bound).c_str(), ratio,
		    human_time(r.predicted).c_str(), human_time(r.simulated).c_str(),
		    r.note.c_str());
}

} // namespace

int main(int argc, char** argv)
{
	Args a;
	if (!parse_args(argc, argv, a))
		return 2;
	print_header(a);
	std::vector<Algorithm> algs = a.algorithms;
	if (a.automatic)
		algs.push_back(Algorithm::automatic);
	for (uint32_t p : a.ranks) {
		const std::vector<uint64_t> sizes =
			a.coll == Collective::barrier ? std::vector<uint64_t>{0} : a.bytes;
		for (uint64_t bytes : sizes)
			for (Algorithm alg : algs)
				print_row(a, p, bytes, evaluate(a, p, bytes, alg));
		if (!a.csv)
			std::printf("\n");
	}
	if (!a.csv)
		std::printf(
			"bytes/rank: payload the busiest rank writes (* from a sample of ranks); "
			"ratio: to the lower bound\n");
	return 0;
}
