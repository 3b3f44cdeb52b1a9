// The simulated fabric: N ranks in one process, driven by one thread.
//
// Every rank gets a Transport whose writes really copy bytes: the source is
// read when the simulated NIC reads it (local completion follows) and the
// bytes are placed in the target's memory later, followed by the arrival of
// the immediate. Between the two, and between different writes, the
// fabric reorders and delays at will (seeded), so results are checked on
// real data under adversarial timing. A timed mode replaces the random
// delays with the alpha-beta-gamma model and reports simulated time.
//
// With memory checking on, the fabric verifies the engine's discipline:
// targets within registered bounds and keys alive; no data overwritten
// (remotely or locally) before the owner read it; no source modified
// before its write was read.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <queue>
#include <span>
#include <string>
#include <vector>

#include "engine/cost_model.hpp"
#include "engine/group.hpp"
#include "engine/transport.hpp"

namespace rcoll::sim {

enum class Timing : uint8_t {
	ordered, // every write placed in posting order, no delay
	random,  // seeded random delays: reordering everywhere
	modelled // alpha-beta-gamma: simulated microseconds
};

struct Options {
	Timing timing = Timing::random;
	uint64_t seed = 1;
	double max_delay = 8.0;  // random: each of read and placement delayed by U[0, max_delay)
	engine::CostParams cost; // modelled
	bool check_memory = true;
	uint32_t max_inflight = 0; // writes per rank not yet read before would_block; 0: no limit
	bool refuse_registration = false; // register_memory fails (resource exhaustion)
};

struct RankStats {
	uint64_t writes = 0;
	uint64_t bytes = 0;
	uint64_t registrations = 0; // register_memory() calls that succeeded
	uint64_t open_to_peers = 0; // of those, buffers peers may write into
	double finish_time = 0;     // modelled time of the rank's last completion
};

class Fabric;

class SimTransport final : public engine::Transport {
public:
	SimTransport(Fabric& fabric, uint32_t rank, uint64_t scratch_bytes);
	std::span<std::byte> scratch() noexcept override;
	engine::Errc register_memory(std::span<std::byte> buffer, engine::Access access,
				     engine::Registration& out) noexcept override;
	void deregister_memory(const engine::Registration&) noexcept override;
	engine::Errc write(const engine::WriteRequest&) noexcept override;
	size_t poll(std::span<engine::TransportEvent> out) noexcept override;

private:
	friend class Fabric;
	Fabric& fabric_;
	uint32_t rank_;
	std::vector<std::byte> scratch_;
	std::vector<engine::TransportEvent> inbox_;
	size_t inbox_head_ = 0;
};

class Fabric {
public:
	Fabric(uint32_t ranks, uint64_t scratch_bytes, Options options);
	~Fabric();
	Fabric(const Fabric&) = delete;
	Fabric& operator=(const Fabric&) = delete;

	uint32_t ranks() const noexcept { return static_cast<uint32_t>(transports_.size()); }
	SimTransport& transport(uint32_t rank) noexcept { return *transports_[rank]; }
	// Attaches a rank's group (for progress and memory checks).
	void attach(uint32_t rank, engine::Group* group);

	// Progresses every rank once, then delivers events until none is left.
	// Returns the number of events processed.
	uint64_t run();

	// Problems found by the memory checks, in order; empty when clean.
	const std::vector<std::string>& violations() const noexcept { return violations_; }
	const RankStats& stats(uint32_t rank) const noexcept { return stats_[rank]; }
	// Latest finish time over all ranks (modelled timing).
	double makespan() const noexcept;

private:
	friend class SimTransport;
	struct Region;
	struct Flight;
	struct Event {
		double time;
		uint64_t order; // tie-break, seeded in random mode
		uint64_t flight;
		bool placement; // else: the read of the source
		bool operator>(const Event& o) const noexcept
		{
			return time != o.time ? time > o.time : order > o.order;
		}
	};
	class Checker;

	void push_event(const Event&);
	bool pop_event(Event&);
	engine::Errc post(uint32_t rank, const engine::WriteRequest&) noexcept;
	void read_source(Flight&);
	void place(Flight&);
	void progress(uint32_t rank);
	double rank_time(uint32_t rank) const noexcept;
	uint64_t random_bits() noexcept;
	double random_delay() noexcept;
	Region* find_region(uint32_t rank, uint32_t id) noexcept;
	void violation(std::string what);

	Options options_;
	std::vector<std::unique_ptr<SimTransport>> transports_;
	std::vector<engine::Group*> groups_;
	std::vector<std::unique_ptr<Checker>> checkers_;
	std::vector<std::vector<Region>> regions_;
	std::vector<uint32_t> next_region_id_;
	std::vector<std::unique_ptr<Flight>> flights_;
	std::vector<uint64_t> free_flights_;
	// Ordered timing only ever appends events at the current time: a FIFO
	// does; the other modes need the heap.
	std::priority_queue<Event, std::vector<Event>, std::greater<Event>> timed_events_;
	std::deque<Event> fifo_events_;
	std::vector<uint32_t> inflight_;
	std::vector<RankStats> stats_;
	std::vector<double> clock_;      // modelled: rank's local time
	std::vector<double> nic_free_;   // modelled: when the rank's outgoing link is idle
	std::vector<double> cpu_free_;   // modelled: when the rank may post its next message
	std::vector<double> rx_free_;    // modelled: when the rank's incoming link is idle
	std::vector<double> call_start_; // modelled: time the current progress call began
	std::vector<uint64_t> reduced_at_call_;
	double now_ = 0;
	uint64_t order_ = 0;
	uint64_t rng_;
	std::vector<std::string> violations_;
};

// A group of p simulated ranks: one fabric and one engine Group per rank,
// what the tests and the rcoll_sim tool run collectives on.
class Cluster {
public:
	Cluster(uint32_t p, const engine::GroupConfig& config, const Options& options);
	Cluster(const Cluster&) = delete;
	Cluster& operator=(const Cluster&) = delete;

	// ok unless a group could not be created.
	engine::Errc status() const noexcept { return status_; }
	uint32_t size() const noexcept { return static_cast<uint32_t>(groups_.size()); }
	engine::Group& group(uint32_t rank) noexcept { return *groups_[rank]; }
	Fabric& fabric() noexcept { return fabric_; }
	const engine::GroupConfig& config() const noexcept { return config_; }

private:
	engine::GroupConfig config_;
	Fabric fabric_;
	std::vector<std::unique_ptr<engine::Group>> groups_;
	engine::Errc status_ = engine::Errc::ok;
};

} // namespace rcoll::sim
