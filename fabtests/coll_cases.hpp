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
    bool quick = false;  // fewer counts and iterations, for a smoke run
};

// A case runs once per launch of `ranks` forked processes; `tune` (if not
// empty) is exported as FI_RCOLL_COLL_TUNE in every rank before the
// provider is loaded.
struct CollCase {
    std::string name;
    std::string checks;  // what a PASS means, printed by --list
    int ranks = 2;
    std::chrono::seconds timeout{120};
    std::string tune;
    std::function<void(Bootstrap&, const TestOptions&)> run;
};

// Every case, in the order `all` runs them.
std::vector<CollCase> all_cases();

// Case families, each defined in its own file.
void add_sweep_cases(std::vector<CollCase>& cases);      // coll_sweep.cpp
void add_algorithm_cases(std::vector<CollCase>& cases);  // coll_algorithms.cpp
void add_stress_cases(std::vector<CollCase>& cases);     // coll_stress.cpp
void add_error_cases(std::vector<CollCase>& cases);      // coll_errors.cpp
void add_failure_cases(std::vector<CollCase>& cases);    // coll_failure.cpp

// ---------------------------------------------------------------- verified calls

// One rank's buffers and completion for one call: inputs carry the closed-form
// operands or per-block patterns, outputs start as noise, and verify() checks
// the result, the guards, the untouched input and the completion.
class CheckedCall {
public:
    explicit CheckedCall(CollEndpoint& ep) : input_(ep), output_(ep) {}
    CheckedCall(const CheckedCall&) = delete;
    CheckedCall& operator=(const CheckedCall&) = delete;

    // Fills the buffers for `call` on `group`; `seed` must be the same on
    // every member and differ between calls.
    void prepare(const Group& group, const CallSpec& call, uint64_t seed);
    void post(CollEndpoint& ep);
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

// prepare + post + wait + verify.
void run_checked(CollEndpoint& ep, CheckedCall& checked, const Group& group, const CallSpec& call, uint64_t seed,
                 std::chrono::milliseconds budget = kDefaultWait);

// Barrier semantics: before each fi_barrier a rank bumps a shared-memory
// counter (one late rank per round sleeps first); when its barrier
// completes, every member must have bumped it. `signal` is a bootstrap
// signal index no other group of the launch uses.
void check_barrier_semantics(CollEndpoint& ep, Bootstrap& boot, const Group& group, int signal, int rounds);

// Joins the `shape` group of this rank (full, strided or reversed).
std::unique_ptr<Group> join_shape(CollEndpoint& ep, Bootstrap& boot, std::span<const fi_addr_t> world, Shape shape);

// A bootstrap barrier that keeps driving the endpoint while it waits.
// A rank's collective can complete while writes its peers still wait for
// are queued in its provider or sockets: a rank that stopped progressing
// (the plain bootstrap barrier) or closed its endpoint (the end of a case)
// would stall or reset them. Every rank of a case ends with wait().
class ProgressingBarrier {
public:
    // `ranks`: how many ranks take part; barriers with a different number
    // of ranks (after a kill) need a bootstrap signal of their own.
    ProgressingBarrier(CollEndpoint& ep, Bootstrap& boot, int ranks, int signal = kSignalCount - 1)
        : ep_(ep), boot_(boot), ranks_(ranks), signal_(signal)
    {
    }
    void wait();

private:
    CollEndpoint& ep_;
    Bootstrap& boot_;
    int ranks_;
    int signal_;
};

// The line printed with the case's result: rank 0's text (the other ranks
// clear their progress notes, which only matter when a rank dies).
void summary_note(Bootstrap& boot, const std::string& text);

// A reduction operation valid for `type`, picked by `index` (rotates through
// every valid one).
fi_op valid_op(fi_datatype type, size_t index);

}  // namespace fabtests::coll
