// Cases of rcoll_coll_test and the verified-call machinery they share.
#pragma once

#include "coll_common.hpp"
#include "coll_values.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fabtests::coll {

struct TestOptions {
	std::string provider = "rcoll";
	bool quick = false; // fewer counts and iterations, for a smoke run
};

// A case runs once per launch of `ranks` forked processes; `tune` (if not
// empty) is exported as FI_RCOLL_COLL_TUNE in every rank before the
// provider is loaded.
struct CollCase {
	std::string name;
	std::string checks; // what a PASS means, printed by --list
	int ranks = 2;
	std::chrono::seconds timeout{120};
	std::string tune;
	std::function<void(Bootstrap&, const TestOptions&)> run;
};

// Every case, in the order `all` runs them.
std::vector<CollCase> all_cases();

// Case families, each defined in its own file.
void add_sweep_cases(std::vector<CollCase>& cases);     // coll_sweep.cpp
void add_algorithm_cases(std::vector<CollCase>& cases); // coll_algorithms.cpp
void add_stress_cases(std::vector<CollCase>& cases);    // coll_stress.cpp
void add_error_cases(std::vector<CollCase>& cases);     // coll_errors.cpp
void add_failure_cases(std::vector<CollCase>& cases);   // coll_failure.cpp
void add_mismatch_cases(std::vector<CollCase>& cases);  // coll_mismatch.cpp
void add_finishing_cases(std::vector<CollCase>& cases); // coll_finishing.cpp

// ---------------------------------------------------------------- verified calls

// One rank's buffers and completion for one call: inputs carry the closed-form
// operands or per-block patterns, outputs start as noise, and verify() checks
// the result, the guards, the untouched input and the completion.
class CheckedCall {
public:
	CheckedCall() = default;
	CheckedCall(const CheckedCall&) = delete;
	CheckedCall& operator=(const CheckedCall&) = delete;

	// Fills the buffers for `call` on `group`; `seed` must be the same on
	// every member and differ between calls.
	void prepare(const Group& group, const CallSpec& call, uint64_t seed);
	void post(CollEndpoint& ep);
	// Drives progress until the call completes (successfully or not).
	void wait(CollEndpoint& ep, std::chrono::milliseconds budget = kDefaultWait);
	OpContext& context() { return ctx_; }
	// Throws CheckFailure describing the first thing that is wrong.
	void verify();
	// The call, the group and this rank, for messages.
	std::string describe() const;

private:
	const Group* group_ = nullptr;
	CallSpec call_;
	uint64_t seed_ = 0;
	bool has_input_ = false;
	bool has_output_ = false;
	GuardedBuffer input_;
	GuardedBuffer output_;
	std::vector<std::byte> input_copy_;
	OpContext ctx_;
};

// Whether fi_query_collective says the provider implements the call's
// collective for its datatype (and operation). rcoll must implement them
// all (the query-collective case holds its answers to fi_atomic(3)); other
// providers' gaps are skipped and counted, not failed.
bool provider_supports(CollEndpoint& ep, const CallSpec& call);

// prepare + post + wait + verify; false (and nothing posted) when the
// provider does not support the call.
bool run_checked(CollEndpoint& ep, CheckedCall& checked, const Group& group, const CallSpec& call,
		 uint64_t seed, std::chrono::milliseconds budget = kDefaultWait);

// Calls verified and calls skipped because the provider does not offer them.
struct Tally {
	size_t verified = 0;
	size_t unsupported = 0;

	void add(bool ran) { ++(ran ? verified : unsupported); }
	// " (N calls the provider does not support skipped)" or "".
	std::string skipped_text() const;
	// A case where nothing could run does not apply to the provider.
	void require_some(const std::string& provider) const;
};

// Barrier semantics: before each fi_barrier a rank bumps a shared-memory
// counter (one late rank per round sleeps first); when its barrier
// completes, every member must have bumped it. `signal` is a bootstrap
// signal index no other group of the launch uses.
void check_barrier_semantics(CollEndpoint& ep, Bootstrap& boot, const Group& group, int signal,
			     int rounds);

// Joins the `shape` group of this rank (full, strided or reversed).
std::unique_ptr<Group> join_shape(CollEndpoint& ep, Bootstrap& boot,
				  std::span<const fi_addr_t> world, Shape shape);

// The line printed with the case's result: rank 0's text (the other ranks
// clear their progress notes, which only matter when a rank dies).
void summary_note(Bootstrap& boot, const std::string& text);

// Every member of rcoll's groups takes the shared-memory path (run-coll.sh's
// default pass: no setting turns it off, no member is made to look remote).
bool shared_memory_path();

// A reduction operation valid for `type`, picked by `index` (rotates through
// every valid one).
fi_op valid_op(fi_datatype type, size_t index);

} // namespace fabtests::coll
