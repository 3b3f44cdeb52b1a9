// Runtime parameters: one table, defined with fi_param_define at load time
// (so `fi_info -e` lists them with their defaults) and read once into an
// immutable Config.
#pragma once

#include <cstddef>
#include <string>

namespace rcoll {

struct Config {
	std::string core = "auto";   // auto | verbs | tcp | net
	size_t eager_size = 0;       // largest payload sent eagerly (0: the core's default)
	size_t rx_posted = 32;       // bounce buffers kept posted to the shared receive context
	size_t rx_low_watermark = 8; // refill when fewer are posted
	size_t rx_pool_max = 4096;   // hard limit of the receive pool
	size_t tx_pool_size = 1024;  // sends in flight per endpoint before -FI_EAGAIN
	std::string rndv_completion = "fin"; // fin (a FIN behind the write) | poll (last byte)
	size_t rma_chunk = size_t(1) << 30;  // largest single core RMA operation
	bool progress_thread = false;        // a progress thread even without FI_PROGRESS_AUTO
	size_t spin_us = 50;                 // busy-poll this long before blocking
	bool yield_when_idle = false;        // wait as on a crowded host, detected or not
	size_t connect_timeout_ms = 60000;   // a connection not up by then fails its sends
	size_t linger_ms = 1000;             // closing: let sends drain at most this long
	size_t coll_timeout_ms = 60000;      // a collective group stuck this long fails (0: never)
	size_t probe_interval_ms = 1000; // probe a silent peer that operations wait on (0: never)
	bool coll_local = true;      // collective writes to members on this host bypass the core
	bool coll_cma = true;        // ... and into their call buffers by cross-memory attach
	bool coll_prefault = true;   // scratch faulted in ahead (FI_RCOLL_COLL_PREFAULT)
	bool coll_placement = false; // the cost model prices edges on a host apart
	size_t unexpected_max = size_t(256) << 20; // bytes per peer waiting for a receive
	// Join records per peer ahead of our fi_join.
	size_t coll_early_max = 1024;
	// Messages to one peer holding transmit buffers (its backlog) before
	// sends to it return -FI_EAGAIN, and how long that backlog may stand
	// still before the peer fails.
	size_t backlog_max = 256;
	size_t backlog_timeout_ms = 300000;
	// Peers made for connection requests from keys not in the AV (also at
	// most half of RLIMIT_NOFILE: each holds a socket).
	size_t unknown_peers_max = 1024;
	// Collectives straight through shared memory, and the largest
	// broadcast and reduction that take that path.
	bool coll_shm = true;
	size_t coll_shm_bcast_max = size_t(1) << 30;
	size_t coll_shm_reduce_max = size_t(128) << 10;
	size_t coll_shm_split_min = size_t(16) << 10;
	size_t coll_shm_single_copy_min = size_t(32) << 10;
	size_t coll_shm_single_copy_allreduce_min = size_t(256) << 10;
	// The core is read at least this often while only collectives among
	// members on this host are waited for.
	size_t core_poll_us = 1000;
	// Collectives: the cost model's constants (decimal numbers) and the
	// tuning string that overrides its choices (see fi_rcoll(7)).
	std::string coll_alpha_us;         // empty: the core's (coll_group.cpp)
	std::string coll_beta_us_per_byte; // empty: the core's
	std::string coll_gamma_us_per_byte = "0.0002";
	std::string coll_overhead_us = "0";
	std::string coll_local_alpha_us = "0.5";
	std::string coll_local_beta_us_per_byte = "0.0001";
	std::string coll_local_gamma_us_per_byte; // empty: coll_gamma_us_per_byte
	std::string coll_local_overhead_us = "0";
	std::string coll_tune = "";

	bool rndv_poll_last_byte() const { return rndv_completion == "poll"; }
};

// Defines every parameter with libfabric; called from fi_prov_ini.
void define_params();
// Reads the parameters (config() calls it once).
Config read_config();
// The parameters, read at the first call; later calls return the same
// object. Inline: progress asks on every poll, and a call costs more than
// the guard's check.
inline const Config& config()
{
	static const Config instance = read_config();
	return instance;
}

} // namespace rcoll
