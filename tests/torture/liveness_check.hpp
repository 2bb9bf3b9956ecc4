// tests/torture/liveness_check.hpp: check (8), liveness (--liveness): no waiter waits longer than
// the documented bound while the lock is free, or held by a lease that is no longer renewed.
//
// The measure, from the hold logs and what the controller did (pure: no I/O, no clocks):
//  * A *live hold* is a hold's window [t_acq, window end] (checker.hpp, check (1)) cut at the
//    first moment its process was stopped (SIGSTOP), cut off (its own proxies black-holed: a
//    half-open partition) or killed: from then on its lease is not renewed and its release never
//    comes, so the lock counts as held by a dead lease. An old-style client's SET NX ... DEL
//    (LivenessSetup::outside) is a live hold from before its SET to after its DEL's reply.
//  * The lock is *stalled* wherever no live hold covers the time: free, held by a dead lease, or
//    granted to a waiter that has not claimed it (a paused or partitioned one, or the hand-over in
//    flight).
//  * Each acquire call (a "wait" record, hold_log.hpp) of a process that was neither stopped, cut
//    off nor killed during it is measured: its longest continuous stretch inside a stall, and the
//    stalled time it saw in all. The longest stretch must not pass LivenessSetup::bound_ns, which
//    the controller sets from docs/locks-and-waiting.md ("a live waiter of a key that is free, or
//    held by a lease that is no longer renewed, is served within the lease end + 1.375 ttl + one
//    claim window per paused or vanished entry ahead of it") plus a stated slack.
//  * Also: no library hold's window overlaps an old-style client's hold ([its SET's reply, its
//    DEL's send]): a grant over a foreign key without expiry would break mutual exclusion.
#ifndef REDLOCK_TESTS_TORTURE_LIVENESS_CHECK_HPP
#define REDLOCK_TESTS_TORTURE_LIVENESS_CHECK_HPP

#include <cstdint>  // std::int64_t
#include <cstdio>   // std::FILE
#include <map>      // std::map
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "hold_log.hpp"  // LogContents, Wait

namespace redlock::torture {

struct RunInfo;
struct Report;

// Intervals [from, to] in CLOCK_MONOTONIC ns, by worker process index.
using ProcessIntervals = std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>>;

// One hold of the old-style client (SET key value NX without PX, later a compare-and-DEL).
struct OutsideHold {
  std::int64_t from{0};       // before the SET was sent
  std::int64_t to{0};         // after the DEL's reply
  std::int64_t held_from{0};  // the SET's OK received (0: its outcome unknown)
  std::int64_t held_to{0};    // before the DEL was sent
};

// What the controller tells the liveness check (RunInfo::liveness).
struct LivenessSetup {
  bool on{false};
  std::int64_t bound_ns{0};
  std::string bound_text;            // how bound_ns is made up, for the report
  ProcessIntervals partitioned;      // half-open partitions of a worker (its proxies black-holed)
  std::vector<OutsideHold> outside;  // the old-style client's holds
};

struct LivenessReport {
  std::int64_t waits{0};             // acquire calls measured
  std::int64_t waits_skipped{0};     // ... not: their process was stopped, cut off or killed
  std::int64_t dead_holds{0};        // holds whose holder was stopped, cut off or killed mid-window
  std::int64_t outside_holds{0};     // the old-style client's holds
  std::int64_t longest_ns{0};        // the longest continuous stall inside one wait
  Wait longest_wait;                 // ... that wait
  std::int64_t longest_from{0};      // ... the stretch
  std::int64_t longest_total_ns{0};  // the most stalled time one wait saw in all
  std::int64_t longest_wait_ns{0};   // the longest measured wait (stalled or not)
  std::int64_t over_bound{0};        // waits whose longest stretch passed the bound
  std::int64_t outside_overlaps{0};  // library holds overlapping an old-style client's hold
};

// Fills report.liveness from the logs and info (info.liveness.on must be true) and appends to
// report.failures what failed: a wait over the bound, an overlap with the old-style client, no
// wait measured at all. Pure; never throws but std::bad_alloc.
void check_liveness(const LogContents& logs, const RunInfo& info, Report& report);
// The liveness section of the report, and its JSON members (",\"liveness\":{...}"); nothing
// when the check was off.
void print_liveness(const Report& report, std::FILE* out);
std::string liveness_json(const Report& report);

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_LIVENESS_CHECK_HPP
