// The glue's random source (prov/rcoll/src/secret.cpp): connection tokens
// and registration keys are drawn in batches, so a value must never be
// handed out twice, and a forked child must not hand out what its parent
// will.
#include "src/secret.hpp"

#include <criterion/criterion.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <vector>

using rcoll::unguessable_u64;

Test(secret, values_are_nonzero_and_distinct)
{
	std::set<uint64_t> seen;
	for (int i = 0; i < 10000; i++) {
		const uint64_t v = unguessable_u64();
		cr_assert_neq(v, 0u, "draw %d is 0", i);
		cr_assert(seen.insert(v).second, "draw %d repeats an earlier value", i);
	}
}

Test(secret, forked_child_draws_its_own)
{
	(void)unguessable_u64(); // this thread's batch is drawn
	int pipe_fds[2];
	cr_assert_eq(pipe(pipe_fds), 0);
	const pid_t child = fork();
	cr_assert_geq(child, 0, "fork failed");
	if (child == 0) {
		const uint64_t v = unguessable_u64();
		_exit(write(pipe_fds[1], &v, sizeof v) == ssize_t(sizeof v) ? 0 : 1);
	}
	uint64_t from_child = 0;
	cr_assert_eq(read(pipe_fds[0], &from_child, sizeof from_child), ssize_t(sizeof from_child));
	int status = 0;
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(pipe_fds[0]);
	close(pipe_fds[1]);
	// Without a fresh batch the child's value is the parent's next one.
	std::vector<uint64_t> parent_next;
	for (int i = 0; i < 64; i++)
		parent_next.push_back(unguessable_u64());
	cr_assert(std::find(parent_next.begin(), parent_next.end(), from_child) ==
			  parent_next.end(),
		  "the child handed out a value its parent also hands out");
}
