// tests/torture/self_test.hpp: proof that the checker can fail.
//
// A checker that never reports anything proves nothing, so `redlock-torture --self-test` feeds
// the checker synthetic histories, each with one known defect (overlapping windows, a lost
// update, fences out of order, a hold without an end record, a fence inversion, a malformed
// log line) and a clean one, and checks that exactly the expected verdicts come out. It also runs
// the fenced read/write scripts against a real redis-server in the interleaving that defeats
// write-only fencing (A reads, B reads, A writes, B writes) and checks that A's write is rejected.
#ifndef REDLOCK_TESTS_TORTURE_SELF_TEST_HPP
#define REDLOCK_TESTS_TORTURE_SELF_TEST_HPP

namespace redlock::torture {

// Returns 0 if every case behaved, 1 otherwise (printing what did not).
int run_self_test();

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_SELF_TEST_HPP
