#include "config.hpp"

#include "common.hpp"

#include <string>
#include <variant>

namespace rcoll {
namespace {

struct Param {
	const char* name;
	std::variant<std::string Config::*, size_t Config::*, bool Config::*> field;
	const char* help;
};

// The one table of runtime parameters (FI_RCOLL_<NAME> in the environment).
// Defaults come from Config's member initialisers.
const Param params[] = {
	{"core", &Config::core,
	 "Core provider under rcoll: auto (verbs when a device exists, else net where libfabric "
	 "has it, else tcp), or a core provider's name (verbs, tcp, net, ...) offering MSG "
	 "endpoints with RMA and a shared receive context"},
	{"eager_size", &Config::eager_size,
	 "Largest message payload sent eagerly through bounce buffers; larger ones use rendezvous "
	 "(0: 65536 over the kernel's TCP, 16384 on RDMA cores)"},
	{"rx_posted", &Config::rx_posted,
	 "Bounce buffers kept posted to the endpoint's one shared receive context"},
	{"rx_low_watermark", &Config::rx_low_watermark,
	 "Refill the shared receive context when fewer than this many buffers are posted"},
	{"rx_pool_max", &Config::rx_pool_max, "Most bounce buffers the receive pool may hold"},
	{"tx_pool_size", &Config::tx_pool_size,
	 "Most sends in flight per endpoint before -FI_EAGAIN"},
	{"rndv_completion", &Config::rndv_completion,
	 "How a rendezvous PUT is detected at the receiver: fin (a FIN message behind the write) "
	 "or "
	 "poll (last-byte polling)"},
	{"unexpected_max", &Config::unexpected_max,
	 "Bytes of one peer's messages that may wait for a receive (eager payloads plus a fixed "
	 "cost per message; peers not in the address vector share one budget); a peer that "
	 "sends more fails (0: no limit)"},
	{"backlog_max", &Config::backlog_max,
	 "Messages to one peer that may wait in its send backlog (queued, or held by the core "
	 "because the peer reads no faster); beyond it sends to that peer return -FI_EAGAIN"},
	{"backlog_timeout_ms", &Config::backlog_timeout_ms,
	 "Milliseconds a peer's send backlog may stand still (the peer stopped reading) before "
	 "the peer fails and its operations complete with an error (0: never)"},
	{"unknown_peers_max", &Config::unknown_peers_max,
	 "Peers made for connection requests from endpoints not in the address vector (at most "
	 "half of RLIMIT_NOFILE); further requests are refused, and records of failed ones reused"},
	{"rma_chunk", &Config::rma_chunk,
	 "Largest single core RMA transfer; larger ones are split"},
	{"progress_thread", &Config::progress_thread,
	 "Drive progress from a thread in every domain, not only under FI_PROGRESS_AUTO"},
	{"spin_us", &Config::spin_us,
	 "Microseconds to busy-poll before blocking waits sleep (none while the host is crowded "
	 "with this process's own work, when empty CQ and counter polls yield)"},
	{"yield_when_idle", &Config::yield_when_idle,
	 "Wait as on a host crowded with this process's own work whether or not it is detected "
	 "(empty CQ and counter polls yield, blocking waits do not spin): for ranks that "
	 "outnumber the CPUs they share in ways rcoll cannot see, such as containers or network "
	 "namespaces on one machine"},
	{"core_poll_us", &Config::core_poll_us,
	 "Microseconds between reads of the core while an endpoint waits only for collectives "
	 "among members on its host (each read is a system call on tcp); anything else in flight "
	 "reads the core on every progress call"},
	{"connect_timeout_ms", &Config::connect_timeout_ms,
	 "Milliseconds a connection may take before its pending sends fail (TCP resends what "
	 "is lost at growing intervals: on a lossy network a handshake that lost a few packets "
	 "is slow, not dead)"},
	{"linger_ms", &Config::linger_ms,
	 "Milliseconds fi_close of an endpoint keeps progressing so that what it sent reaches its "
	 "peers (0: close at once)"},
	{"coll_timeout_ms", &Config::coll_timeout_ms,
	 "Milliseconds a collective group with work pending may see no progress before its "
	 "operations fail with FI_ETIMEDOUT (0: never)"},
	{"probe_interval_ms", &Config::probe_interval_ms,
	 "Milliseconds a peer that operations wait on may send nothing before it gets a probe, "
	 "which its kernel or NIC acknowledges; a dead host leaves it unacknowledged and the "
	 "connection fails (0: never probe)"},
	{"coll_local", &Config::coll_local,
	 "Collective writes to group members on the same host go straight into their memory "
	 "(shared scratch, cross-memory attach) instead of through the core provider (0: always "
	 "through the core)"},
	{"coll_placement", &Config::coll_placement,
	 "In a group across hosts with several members on one, the cost model charges the "
	 "rounds that stay on a host the local constants (FI_RCOLL_COLL_LOCAL_ALPHA_US, "
	 "FI_RCOLL_COLL_LOCAL_BETA_US_PER_BYTE): for ranks with CPUs of their own; where they "
	 "yield them, a hop waits for its receiver to be scheduled wherever it runs (members "
	 "must agree)"},
	{"coll_cma", &Config::coll_cma,
	 "On the node-local path, writes into the call buffers of members on this host use "
	 "cross-memory attach (process_vm_writev), and so do the one-copy reads of large "
	 "broadcasts and allgathers (process_vm_readv); under Yama ptrace_scope 1 a process that "
	 "finds a member on its host then lets every process of its user ptrace it (0: those "
	 "writes go through the core, those reads through the shared slots, and ptrace "
	 "permissions stay as they are)"},
	{"coll_prefault", &Config::coll_prefault,
	 "A group's scratch region (1 MiB by default) is faulted in when the join completes, "
	 "unless the group takes the shared-memory path, and this member's mapping of a local "
	 "member's scratch at the first write into it, rather than a page at a time as the "
	 "first few hundred operations reach them (0: as they reach them, which commits less "
	 "memory for groups that run few operations)"},
	{"coll_shm", &Config::coll_shm,
	 "Groups whose members all run on one host (and map each other's scratch) run barrier, "
	 "broadcast, allreduce, reduce and allgather straight through shared memory: each member "
	 "publishes its part beside a flag the others poll (0: through the engine)"},
	{"coll_shm_bcast_max", &Config::coll_shm_bcast_max,
	 "Largest broadcast, and largest allgather block copied once, in bytes, that takes the "
	 "shared-memory path; where the members keep a CPU each, also the largest reduction and "
	 "allgather block through its slots (or coll_shm_reduce_max, if larger)"},
	{"coll_shm_single_copy_min", &Config::coll_shm_single_copy_min,
	 "Smallest broadcast, and smallest allgather block, in bytes, that the shared-memory path "
	 "copies once, straight out of the root's buffer (each member's block) by cross-memory "
	 "attach (where every member may), rather than through the shared slots"},
	{"coll_shm_single_copy_allreduce_min", &Config::coll_shm_single_copy_allreduce_min,
	 "Smallest allreduce, in bytes, that the shared-memory path moves in one copy by "
	 "cross-memory attach (where every member may): each member reads its share of every "
	 "other member's input and reduces it, then reads every other member's reduced share, "
	 "rather than both going through the shared slots"},
	{"coll_shm_reduce_max", &Config::coll_shm_reduce_max,
	 "Largest allreduce or reduce, and largest allgather block, in bytes, that takes the "
	 "shared-memory path through its slots where the members crowd their CPUs (others: up to "
	 "the larger of this and coll_shm_bcast_max)"},
	{"coll_shm_split_min", &Config::coll_shm_split_min,
	 "Smallest allreduce or reduce, in bytes, that the shared-memory path reduces in shares: "
	 "each member reduces its share of every member's part, then the shares are copied out "
	 "(below it every member reduces everything)"},
	{"coll_early_max", &Config::coll_early_max,
	 "Join records and stop notices one peer may send for groups this endpoint has not "
	 "joined yet; a peer that sends more fails"},
	{"coll_alpha_us", &Config::coll_alpha_us,
	 "Collective cost model: latency of one message, in microseconds (unset: 20 on the tcp, "
	 "net and sockets cores, 2 on others)"},
	{"coll_beta_us_per_byte", &Config::coll_beta_us_per_byte,
	 "Collective cost model: transfer time per byte, in microseconds (unset: 0.00033 on the "
	 "tcp, net and sockets cores, 0.0001 on others)"},
	{"coll_gamma_us_per_byte", &Config::coll_gamma_us_per_byte,
	 "Collective cost model: reduction time per byte, in microseconds"},
	{"coll_overhead_us", &Config::coll_overhead_us,
	 "Collective cost model: CPU time a member spends on each message it sends or receives "
	 "beyond one per round, LogP's o, in microseconds"},
	{"coll_local_alpha_us", &Config::coll_local_alpha_us,
	 "Collective cost model for groups whose members all run on this host and reach each "
	 "other through its memory: latency of one message, in microseconds"},
	{"coll_local_beta_us_per_byte", &Config::coll_local_beta_us_per_byte,
	 "Collective cost model for groups on this host: transfer time per byte, in "
	 "microseconds"},
	{"coll_local_gamma_us_per_byte", &Config::coll_local_gamma_us_per_byte,
	 "Collective cost model for groups on this host: reduction time per byte, in "
	 "microseconds (unset: FI_RCOLL_COLL_GAMMA_US_PER_BYTE)"},
	{"coll_local_overhead_us", &Config::coll_local_overhead_us,
	 "Collective cost model for groups on this host: CPU time per message beyond one per "
	 "round, in microseconds"},
	{"coll_tune", &Config::coll_tune,
	 "Collective algorithm overrides, e.g. "
	 "allreduce:0-4k:@recursive_doubling#allreduce:4k-inf:@ring (see fi_rcoll(7))"},
};

struct Definer {
	const Config& defaults;
	const Param& p;
	void operator()(std::string Config::*f) const
	{
		fi_param_define(&rcoll_prov, p.name, FI_PARAM_STRING, "%s (default: %s)", p.help,
				(defaults.*f).c_str());
	}
	void operator()(size_t Config::*f) const
	{
		fi_param_define(&rcoll_prov, p.name, FI_PARAM_SIZE_T, "%s (default: %zu)", p.help,
				defaults.*f);
	}
	void operator()(bool Config::*f) const
	{
		fi_param_define(&rcoll_prov, p.name, FI_PARAM_BOOL, "%s (default: %d)", p.help,
				int(defaults.*f));
	}
};

struct Reader {
	Config& c;
	const Param& p;
	void operator()(std::string Config::*f) const
	{
		char* value = nullptr;
		if (fi_param_get_str(&rcoll_prov, p.name, &value) == FI_SUCCESS && value)
			c.*f = value;
	}
	void operator()(size_t Config::*f) const
	{
		size_t value;
		if (fi_param_get_size_t(&rcoll_prov, p.name, &value) == FI_SUCCESS)
			c.*f = value;
	}
	void operator()(bool Config::*f) const
	{
		int value;
		if (fi_param_get_bool(&rcoll_prov, p.name, &value) == FI_SUCCESS)
			c.*f = value != 0;
	}
};

} // namespace

Config read_config()
{
	Config c;
	for (const Param& p : params)
		std::visit(Reader{c, p}, p.field);

	// Keep the limits coherent rather than failing the load; say so.
	auto clamp = [](const char* name, size_t& v, size_t lo, size_t hi) {
		if (v < lo || v > hi) {
			size_t fixed = v < lo ? lo : hi;
			RCOLL_WARN(FI_LOG_CORE, "FI_RCOLL_%s=%zu out of [%zu, %zu]; using %zu\n",
				   name, v, lo, hi, fixed);
			v = fixed;
		}
	};
	if (c.eager_size)
		clamp("EAGER_SIZE", c.eager_size, 64, size_t(1) << 20);
	clamp("RX_POSTED", c.rx_posted, 8, size_t(1) << 16);
	clamp("RX_LOW_WATERMARK", c.rx_low_watermark, 1, c.rx_posted - 1);
	clamp("RX_POOL_MAX", c.rx_pool_max, c.rx_posted, size_t(1) << 20);
	clamp("TX_POOL_SIZE", c.tx_pool_size, 8, size_t(1) << 20);
	clamp("RMA_CHUNK", c.rma_chunk, 4096, size_t(1) << 31);
	clamp("BACKLOG_MAX", c.backlog_max, 1, size_t(1) << 20);
	clamp("UNKNOWN_PEERS_MAX", c.unknown_peers_max, 1, size_t(1) << 20);
	if (c.core.empty() || c.core == "rcoll") {
		RCOLL_WARN(FI_LOG_CORE, "FI_RCOLL_CORE=%s cannot be a core; using auto\n",
			   c.core.c_str());
		c.core = "auto";
	}
	if (c.rndv_completion != "fin" && c.rndv_completion != "poll") {
		RCOLL_WARN(FI_LOG_CORE, "FI_RCOLL_RNDV_COMPLETION=%s unknown; using fin\n",
			   c.rndv_completion.c_str());
		c.rndv_completion = "fin";
	}
	return c;
}

void define_params()
{
	const Config defaults;
	for (const Param& p : params)
		std::visit(Definer{defaults, p}, p.field);
}

} // namespace rcoll
