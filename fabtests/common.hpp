// Shared helpers for the rcoll fabtests: a launcher that forks N ranks on
// this host (optionally spread over network namespaces standing in for
// hosts), a shared-memory bootstrap for address exchange, RAII wrappers
// around the plain libfabric C API, completion dispatch and data patterns.
//
// These clients use nothing of rcoll but its libfabric interface (one
// exception: rcoll_coll_test's algorithm cases read the engine's table of
// algorithms to force each in turn): they are ordinary OFI applications that follow the strictest rules a provider may impose
// (FI_CONTEXT, FI_MR_LOCAL descriptors, provider keys, virtual addresses),
// so every provider they pass is exercised the way a demanding MPI would.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace fabtests {

// ---------------------------------------------------------------- errors

// printf-style formatting into a std::string (GCC 12 has no <format>).
[[gnu::format(printf, 1, 2)]] std::string strfmt(const char* fmt, ...);

// A libfabric call returned an error code.
class FabricError : public std::runtime_error {
public:
	FabricError(std::string_view call, long rc, std::source_location where);
	long rc() const noexcept { return rc_; }

private:
	long rc_;
};

// A test assertion failed: the provider delivered something wrong.
class CheckFailure : public std::runtime_error {
public:
	using std::runtime_error::runtime_error;
};

// The provider legitimately lacks what a case needs (a secondary
// capability, an optional flag); the case reports "N/A", never "PASS".
class NotApplicable : public std::runtime_error {
public:
	using std::runtime_error::runtime_error;
};

// Throws FabricError naming the call when rc != 0.
void check_rc(long rc, std::string_view call,
	      std::source_location where = std::source_location::current());

// Throws CheckFailure with the formatted message when cond is false.
[[gnu::format(printf, 2, 3)]] void expect(bool cond, const char* fmt, ...);

#define FT_CHECK(call) ::fabtests::check_rc((call), #call)

// ---------------------------------------------------------------- time

using Clock = std::chrono::steady_clock;

// A point in time after which a wait is a failure, not a hang.
class Deadline {
public:
	explicit Deadline(std::chrono::milliseconds budget) : end_(Clock::now() + budget) {}
	bool expired() const { return Clock::now() >= end_; }
	std::chrono::milliseconds remaining() const;

private:
	Clock::time_point end_;
};

// Within a rank: a wait that lasts over a second tells the rank's slot what
// it waits for, so that a barrier timing out elsewhere can name it. Cheap
// enough for benchmark loops: nothing is written for a short wait.
class LongWait {
public:
	explicit LongWait(const std::string& what);
	~LongWait();
	LongWait(const LongWait&) = delete;
	LongWait& operator=(const LongWait&) = delete;
	void check(); // now and then while waiting

private:
	const std::string& what_;
	Clock::time_point since_;
	bool recorded_ = false;
};

// Default budget for a single wait inside a case.
inline constexpr std::chrono::seconds kDefaultWait{30};

// ---------------------------------------------------------------- data patterns

// Payload bytes are a function of (seed, absolute offset): a message that is
// truncated, shifted, reordered, duplicated or delivered from the wrong
// peer/iteration fails verification at the first wrong byte.
uint64_t make_seed(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0);
void fill_pattern(std::span<uint8_t> buf, uint64_t seed, size_t base_offset = 0);
// Offset (relative to buf) of the first byte that differs, or nullopt.
std::optional<size_t> find_pattern_mismatch(std::span<const uint8_t> buf, uint64_t seed,
					    size_t base_offset = 0);
// Throws CheckFailure describing the first mismatch.
void expect_pattern(std::span<const uint8_t> buf, uint64_t seed, const std::string& what,
		    size_t base_offset = 0);

// Guard bytes around receive buffers catch writes past the posted length.
inline constexpr uint8_t kGuardByte = 0xA5;
void fill_guard(std::span<uint8_t> buf);
void expect_guard(std::span<const uint8_t> buf, const std::string& what);

// ---------------------------------------------------------------- launcher

inline constexpr int kMaxRanks = 128;
inline constexpr size_t kAddressSlotBytes = 1024;
inline constexpr size_t kNoteBytes = 512;
inline constexpr int kSignalCount = 64;
inline constexpr size_t kScratchBytes = 64 * 1024;

struct SharedState; // lives in a MAP_SHARED mapping created before fork

// A rank's view of the job: rank numbers, barriers, allgather and signals
// through memory shared by all ranks of this host (no sockets, no MPI).
class Bootstrap {
public:
	Bootstrap(SharedState& shared, int rank, int size)
		: shared_(shared), rank_(rank), size_(size)
	{}

	int rank() const { return rank_; }
	int size() const { return size_; }

	// Waits for every rank that has not been killed. Throws when another
	// rank failed or the deadline passes, so a lost rank is a failure.
	void barrier(std::chrono::milliseconds budget = kDefaultWait);

	// Every rank contributes a blob (at most kAddressSlotBytes); returns all
	// of them indexed by rank.
	std::vector<std::vector<uint8_t>> allgather(std::span<const uint8_t> mine);

	// Word-sized signals for coordination inside a case ("all sends posted").
	void signal_set(int index, uint64_t value);
	void signal_add(int index, uint64_t value);
	uint64_t signal_get(int index) const;
	// Spins (calling idle between polls) until signal >= value.
	void signal_wait_at_least(int index, uint64_t value, const std::function<void()>& idle,
				  std::chrono::milliseconds budget = kDefaultWait);

	// SIGKILLs another rank and tells the launcher its death is intended.
	// The victim must not be inside a barrier.
	void kill_rank(int victim);
	bool rank_alive(int r) const;

	// One line of detail printed with the case's result (the last call wins).
	void note(const std::string& text);

	// Raw shared bytes for results gathered by the parent (benchmarks).
	std::span<std::byte> scratch();

	// Throws if the launcher or another rank declared the job failed.
	void check_abort() const;

private:
	std::string absent_from_barrier(uint32_t generation) const;

	SharedState& shared_;
	int rank_;
	int size_;
};

enum class Outcome { passed, failed, not_applicable };

struct LaunchResult {
	Outcome outcome = Outcome::failed;
	std::string detail; // failure reason, N/A reason or the ranks' notes
};

using RankBody = std::function<void(Bootstrap&)>;

// Forks `ranks` processes running body(bootstrap). Each rank has an alarm()
// watchdog of `timeout`; the parent kills every rank still alive shortly
// after. A rank passes by returning, is N/A by throwing NotApplicable and
// fails by throwing anything else, dying or timing out. `scratch_out`, if
// given, receives the shared scratch bytes after all ranks ended.
// With RCOLL_TEST_COLL_LOCAL=even, each rank sets FI_RCOLL_COLL_LOCAL to 1
// on even ranks and 0 on odd ones before its first libfabric call.
LaunchResult launch_ranks(int ranks, std::chrono::seconds timeout, const RankBody& body,
			  std::vector<std::byte>* scratch_out = nullptr);

// CPUs this process may run on (its affinity mask).
int usable_cpus();
// Binds the calling process to the `index`-th CPU it may run on, as
// `mpirun --bind-to core --map-by core` binds rank `index`; false when that
// failed (the process stays as it was).
bool bind_to_cpu(int index);

// Makes libfabric's socket providers use loopback unless the user chose an
// interface (FI_TCP_IFACE, or RCOLL_TEST_IFACE, which wins): must run before
// the first fi_getinfo.
void prefer_loopback_interfaces();

// ---------------------------------------------------------------- hosts
//
// Ranks on several "hosts" without several machines: with
//   RCOLL_TEST_NETNS="h0,h1,h2"
// rank i joins the network namespace /run/netns/<name i % 3> right after
// fork, before any libfabric call (the shared-memory bootstrap does not
// care). The endpoints then bind to
//   RCOLL_TEST_IFACE  (the interface of that name in the rank's namespace),
// or, when it is unset, to the namespace's only interface other than
// loopback that is up and has an IPv4 address. Without either variable
// everything stays on loopback, as before.

// Where this process's endpoints live.
struct HostPlacement {
	std::string netns;     // namespace joined by the launcher; "" for its own
	std::string interface; // "lo" unless a namespace or RCOLL_TEST_IFACE says otherwise
	std::string address;   // IPv4 address of `interface`, dotted ("127.0.0.1" on loopback)
};

// RCOLL_TEST_NETNS split at commas (empty when unset).
std::vector<std::string> host_namespaces();
// The namespace launch_ranks puts `rank` in ("" without RCOLL_TEST_NETNS).
std::string namespace_of_rank(int rank);
// This process's placement: resolved on first use, and again by each rank
// after it joined its namespace. Throws CheckFailure when the interface
// named by RCOLL_TEST_IFACE does not exist or has no IPv4 address.
const HostPlacement& host_placement();
// The node that endpoints pass to fi_getinfo with FI_SOURCE: the address of
// host_placement() ("127.0.0.1" unless told otherwise).
std::string source_node();

// A TCP port on source_node() that nothing listens at right now (bound
// and released again), for endpoints that listen at a given service.
uint16_t unused_tcp_port();

// Received and transmitted bytes of an interface of this process's network
// namespace (/proc/self/net/dev), for checks that traffic really crossed it.
struct InterfaceCounters {
	uint64_t rx_bytes = 0;
	uint64_t tx_bytes = 0;
};
InterfaceCounters interface_counters(const std::string& interface);

// ---------------------------------------------------------------- libfabric RAII

struct InfoDeleter {
	void operator()(fi_info* info) const noexcept { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// fi_close, reporting a failure (with the fid's class) on stderr:
// destructors must not throw.
void close_fid(fid_t fid) noexcept;

// Closes any fid-carrying libfabric object.
template <typename T>
struct FidCloser {
	void operator()(T* object) const noexcept { close_fid(&object->fid); }
};
template <typename T>
using FidPtr = std::unique_ptr<T, FidCloser<T>>;

// Per-operation context. The provider owns provider_context while the
// operation is pending (FI_CONTEXT / FI_CONTEXT2 mode), so it must be the
// first member and the object must outlive the operation.
struct OpContext {
	fi_context2 provider_context{};
	bool done = false;
	int error = 0;                       // fi_cq_err_entry::err when the op failed
	fi_cq_tagged_entry entry{};          // successful completion
	fi_cq_err_entry err{};               // failed completion (op_context, len, olen, ...)
	fi_addr_t source = FI_ADDR_NOTAVAIL; // from fi_cq_readfrom when FI_SOURCE is on
	std::string err_text;                // fi_cq_strerror for failed completions
	// A multi-receive buffer (FI_MULTI_RECV) completes once per message it
	// takes: each completion, good or failed, is kept in `pieces`, and `done`
	// waits for the one that carries FI_MULTI_RECV (the buffer's release).
	struct Piece {
		fi_cq_tagged_entry entry{};
		int error = 0;
		size_t olen = 0;
	};
	bool multi = false;
	std::vector<Piece> pieces;

	void reset();
	// Clears the outcome but keeps provider_context: FI_CLAIM receives must
	// pass the context that the FI_PEEK|FI_CLAIM found the message with.
	void rearm();
};
static_assert(std::is_standard_layout_v<OpContext>);

// What the client asks for.
struct EndpointConfig {
	std::string provider; // hints->fabric_attr->prov_name
	uint64_t caps = FI_MSG | FI_TAGGED | FI_RMA;
	fi_av_type av_type = FI_AV_TABLE;
	size_t cq_size = 0;                     // 0: provider default
	bool bind_eq = false;                   // an EQ for fi_join and connection events
	fi_wait_obj eq_wait_obj = FI_WAIT_NONE; // FI_WAIT_UNSPEC: fi_eq_sread works
	// Only contexts passed to Endpoint::track are dereferenced on completion.
	bool track_contexts = false;
	// The verbs rules, so that tcp runs exercise what verbs demands.
	uint64_t mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	// Per-peer send-after-send ordering: MPI needs it, the tests check it.
	uint64_t msg_order = FI_ORDER_SAS;
	// Default transmit operation flags (tx_attr->op_flags), as MPICH asks
	// for FI_DELIVERY_COMPLETE on every transfer.
	uint64_t tx_op_flags = 0;
	fi_threading threading = FI_THREAD_UNSPEC; // domain_attr->threading
	// A counter of completed fi_write/fi_inject_write (FI_WRITE), for
	// transfers that report no CQ entry.
	bool bind_write_counter = false;
	// Capabilities whose absence makes a case not applicable (N/A) rather
	// than failed, when the provider offers the rest.
	uint64_t secondary_caps = FI_SOURCE | FI_DIRECTED_RECV | FI_SOURCE_ERR;
	// Where it is found. By default the provider picks a port on
	// source_node(); `service` makes it listen at source_node():service.
	std::string service{};
	// A client in libfabric's own style: fi_getinfo(dest_node, dest_service,
	// 0) resolves a server, whose address is then info().dest_addr.
	std::string dest_node{};
	std::string dest_service{};
};

// A completion that matched no posted operation: remote CQ data from
// fi_writedata, or an error entry without a context.
struct UnsolicitedEvent {
	fi_cq_tagged_entry entry{};
	fi_addr_t source = FI_ADDR_NOTAVAIL;
	int error = 0;
};

// fabric, domain, one CQ for both directions, AV and an enabled RDM
// endpoint, with completion dispatch to OpContext objects.
class Endpoint {
public:
	// Throws NotApplicable when the provider exists but lacks one of the
	// secondary capabilities asked for (FI_SOURCE, FI_DIRECTED_RECV), and
	// CheckFailure when fi_getinfo finds no such provider at all.
	explicit Endpoint(const EndpointConfig& config);
	Endpoint(const Endpoint&) = delete;
	Endpoint& operator=(const Endpoint&) = delete;
	~Endpoint();

	fid_ep* ep() const { return ep_.get(); }
	fid_domain* domain() const { return domain_.get(); }
	fid_cq* cq() const { return cq_.get(); }
	fid_av* av() const { return av_.get(); }
	fid_eq* eq() const { return eq_.get(); } // null unless EndpointConfig::bind_eq
	// null unless EndpointConfig::bind_write_counter
	fid_cntr* write_counter() const { return write_counter_.get(); }
	// Closes the endpoint now, before the objects it is bound to (the
	// destructor would); returns fi_close's result.
	int close_endpoint()
	{
		fid_ep* ep = ep_.release();
		return ep ? fi_close(&ep->fid) : 0;
	}
	const fi_info& info() const { return *info_; }
	std::string provider_name() const;

	bool has_source() const { return (info_->caps & FI_SOURCE) != 0; }
	size_t inject_size() const { return info_->tx_attr->inject_size; }
	// Remote CQ data is cq_data_size bytes wide (4 on verbs, 8 on tcp).
	uint64_t cq_data_mask() const;
	// The largest message sent without a rendezvous (FI_OPT_BUFFERED_LIMIT),
	// or `otherwise` where the provider does not say.
	size_t buffered_limit(size_t otherwise) const;
	bool mr_virtual_addresses() const
	{
		return (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
	}

	std::vector<uint8_t> local_address() const;
	fi_addr_t insert_address(std::span<const uint8_t> address);
	// allgather of endpoint names through the bootstrap; returns each
	// rank's fi_addr_t (own rank included, in rank order).
	std::vector<fi_addr_t> exchange_addresses(Bootstrap& boot);

	// Reads up to a batch of completions and marks their OpContexts done.
	// Returns how many entries (good or bad) were consumed.
	size_t progress();
	// Polls until pred() holds; throws CheckFailure naming `what` on timeout.
	void progress_until(const std::function<bool()>& pred, const std::string& what,
			    std::chrono::milliseconds budget = kDefaultWait);
	// Waits for the operation and throws if it completed with an error.
	void wait_ok(OpContext& ctx, const std::string& what,
		     std::chrono::milliseconds budget = kDefaultWait);
	// Waits for completion, good or bad.
	void wait_done(OpContext& ctx, const std::string& what,
		       std::chrono::milliseconds budget = kDefaultWait);

	// Retries an operation that returns -FI_EAGAIN, driving progress
	// between attempts (manual progress: the queue only drains if we poll).
	void post(std::string_view call, const std::function<ssize_t()>& op,
		  std::source_location where = std::source_location::current(),
		  std::chrono::milliseconds budget = kDefaultWait);

	std::deque<UnsolicitedEvent>& unsolicited() { return unsolicited_; }

	// With EndpointConfig::track_contexts: records an operation just posted
	// with `ctx` as its context. Only recorded contexts are dereferenced on
	// completion: a completion that names anything else (an operation the
	// provider made up, or one that completes twice) fails the check
	// instead of corrupting memory.
	void track(OpContext& ctx) { pending_.push_back(&ctx); }

	// Keys requested for registrations (used when the provider does not
	// pick keys itself, i.e. without FI_MR_PROV_KEY).
	uint64_t next_requested_key() { return next_key_++; }

private:
	void dispatch(const fi_cq_tagged_entry& entry, fi_addr_t source);
	void dispatch_error();
	OpContext& context_of(void* op_context, uint64_t flags);
	bool forget_pending(const OpContext* ctx); // false: it was not pending
	void keep_multi_pending(OpContext& ctx, uint64_t flags);

	InfoPtr info_;
	FidPtr<fid_fabric> fabric_;
	FidPtr<fid_domain> domain_;
	FidPtr<fid_cq> cq_;
	FidPtr<fid_av> av_;
	FidPtr<fid_eq> eq_;
	FidPtr<fid_cntr> write_counter_;
	FidPtr<fid_ep> ep_; // closed first: declared last
	std::deque<UnsolicitedEvent> unsolicited_;
	bool track_contexts_ = false;
	// A flat list, searched from the newest: no allocation per operation,
	// which a benchmark of sub-microsecond calls would notice.
	std::vector<const OpContext*> pending_;
	uint64_t next_key_ = 1;
};

#define FT_POST(endpoint, call) (endpoint).post(#call, [&]() -> ssize_t { return (call); })

// Page-aligned memory registered with the endpoint's domain. Every
// transfer passes desc() (FI_MR_LOCAL); remote peers get key() and
// remote_address() (virtual address under FI_MR_VIRT_ADDR, else offset).
class RegisteredBuffer {
public:
	RegisteredBuffer(Endpoint& endpoint, size_t bytes,
			 uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
					   FI_REMOTE_WRITE);
	RegisteredBuffer(const RegisteredBuffer&) = delete;
	RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;
	RegisteredBuffer(RegisteredBuffer&&) noexcept = default;
	RegisteredBuffer& operator=(RegisteredBuffer&&) noexcept = default;
	~RegisteredBuffer();

	uint8_t* data() const { return memory_.get(); }
	size_t size() const { return size_; }
	std::span<uint8_t> bytes(size_t offset = 0, size_t length = SIZE_MAX) const;
	void* desc() const { return fi_mr_desc(mr_.get()); }
	uint64_t key() const { return key_; }
	uint64_t remote_address(size_t offset = 0) const;

private:
	struct MemoryFree {
		void operator()(uint8_t* p) const noexcept { std::free(p); }
	};
	std::unique_ptr<uint8_t, MemoryFree> memory_;
	size_t size_ = 0;
	FidPtr<fid_mr> mr_; // closed before memory_ is freed (declared after)
	uint64_t key_ = 0;
	bool virtual_addresses_ = false;
};

// A peer's registered region, as exchanged in a message.
struct RemoteRegion {
	uint64_t address = 0;
	uint64_t key = 0;
	uint64_t size = 0;
};

// Progress for a while without expecting anything: lets messages that are
// in flight arrive (and lets a wrongly matching provider show itself).
void progress_for(Endpoint& ep, std::chrono::milliseconds duration);

// Formats an fi_cq_err_entry for a failure message.
std::string describe_error(const OpContext& ctx);
// Prints libfabric flag bits (FI_RECV|FI_TAGGED|...) for messages.
std::string describe_flags(uint64_t flags);

// Resident set size of this process in bytes (/proc/self/statm).
size_t resident_bytes();

// ---------------------------------------------------------------- command lines

// The value of the option at argv[i], which moves past it; a missing value
// ends the process with status 2.
const char* option_value(int& i, int argc, char** argv);

// Adds the case named `arg` to `selected`, or every case for "all"; false
// when no case has that name.
template <class Cases, class Case>
bool select_case(const Cases& cases, std::string_view arg, std::vector<const Case*>& selected)
{
	bool found = false;
	for (const Case& c : cases) {
		if (arg == "all" || std::string_view(c.name) == arg) {
			selected.push_back(&c);
			found = true;
		}
	}
	return found;
}

// Prints "name  what it checks", a line per case (--list).
template <class Cases>
void list_cases(const Cases& cases, int name_width)
{
	for (const auto& c : cases) {
		const std::string_view name = c.name, checks = c.checks;
		std::printf("%-*.*s %.*s\n", name_width, static_cast<int>(name.size()), name.data(),
			    static_cast<int>(checks.size()), checks.data());
	}
}

// Prints one line per case run ("PASS name [where, time]: detail") and
// the closing count.
class CaseReport {
public:
	// `where`: provider and placement, e.g. "rcoll, 2 ranks".
	void add(const LaunchResult& result, std::string_view name, const std::string& where,
		 double seconds);
	// The closing line (when more than one case ran); the exit status.
	int finish() const;

private:
	int passed_ = 0, failed_ = 0, not_applicable_ = 0;
};

} // namespace fabtests
