// tests/torture/checker.hpp: what the logs and the checker store prove about a run.
//
// Pure: no I/O, no clocks. The controller collects the inputs after every worker has exited;
// the self-test (self_test.cpp) feeds it synthetic histories to show that each check fires.
//
// The checks:
//  (1) mutual exclusion: no two holds' windows [t_acq, min(validity deadline, release start)]
//      overlap. Both ends are conservative (t_acq is taken after try_lock_for() returned, the
//      deadline is t_acq + validity(), which is at or before the library's own deadline), so an
//      overlap is a real one: two holders were told "valid" at the same instant.
//  (2) no lost update: the fenced counter equals the number of applied writes, every applied
//      write appears in the store's list with value = its position (1, 2, 3, ...), and
//      applied + rejected = holds that reached the write (no write ended in an unknown state).
//  (3) fence order: the store's list of applied fences is strictly increasing.
//  (4) every hold has an "end" record (released / lost / error), and every worker its "stats".
//  (5) rwlock: writers overlap nobody, readers overlap only readers (the overlap check (1) with
//      that conflict rule), and no reader that asked kPreferenceSlackNs after a writer started
//      waiting entered before that writer, unless a fault was in force in between
//      (fault_windows.hpp: the store then may have lost the writer's marker; counted apart).
//      A writer's first hold is left out (its call connected first: its request's arrival at
//      the store is unknown).
//  (6) multilock: two holds overlap only if they share no key (check (1) per key), and no
//      observer read showed 2 of a MultiLock's 3 keys under one token (a partial set).
//  (7) election: terms are holds (fence = term), checked by (1)-(4); a stop must reach the
//      worker within kStopSlackNs of is_leader() turning false; and no term starts while another
//      term's worker still runs: its run is [t_acq, the stop or its return], not only the
//      window it believed valid. A worker paused (SIGSTOP, RunInfo::paused) during its run could
//      do nothing while stopped, and what it does after SIGCONT lies outside the term it
//      believed in: its run is then its believed window (checked by (1)), and the fence must
//      reject its late write wherever the next leader has already used the store ((2), (3)).
//  (8) liveness (--liveness): no waiter waits longer than the documented bound while the lock
//      is free or held by a lease that is no longer renewed (liveness_check.hpp).
//  Also, in the fault model: every hold carries a fence, and fences grow in hold order (holds
//  with non-empty windows, sorted by start). An inversion there means either an overlap the
//  conservative windows could not see, or a fence counter that went backwards.
#ifndef REDLOCK_TESTS_TORTURE_CHECKER_HPP
#define REDLOCK_TESTS_TORTURE_CHECKER_HPP

#include <cstdint>  // std::int64_t, std::uint64_t
#include <cstdio>   // std::FILE
#include <map>      // std::map
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "common.hpp"          // Mode, Unsafe
#include "fault_windows.hpp"   // FaultWindow
#include "hold_log.hpp"        // LogContents, Hold
#include "liveness_check.hpp"  // LivenessSetup, LivenessReport

namespace redlock::torture {

// The checker store after the run.
struct StoreState {
  bool read{false};  // false: could not be read (the report fails)
  std::string error;
  std::int64_t counter{0};
  std::int64_t shadow{0};
  std::vector<std::pair<std::uint64_t, std::int64_t>> applied;  // (fence, value), list order
};

// How the run was set up and what happened outside the logs.
struct RunInfo {
  Mode mode{Mode::redlock};
  Primitive primitive{Primitive::lock};
  // False where the holds carry no fence to check (a ReadWriteLock on a quorum, MultiLock).
  bool fenced{true};
  // rwlock: whether a reader passing a waiting writer fails the run (one store: the writer's
  // marker is on it) or is only reported (a quorum: best effort where nodes disagree).
  bool writer_preference_enforced{true};
  Unsafe unsafe{Unsafe::none};
  std::int64_t duration_ms{0};
  int processes{0};
  int threads{0};
  std::uint64_t seed{0};
  int ttl_ms{0};
  int nodes{0};
  // False where overlaps are an expected consequence of the setup (Sentinel: a failover can
  // lose an unreplicated grant): they are reported, and only fencing is required to hold.
  bool exclusion_enforced{true};
  std::map<std::string, std::int64_t> faults;  // injected, by kind
  std::vector<FaultWindow> fault_windows;      // when each was in force (nemesis.log)
  std::vector<std::string> worker_failures;    // "worker 1: exit code 3", ...
  // Worker processes the controller killed (-9) on purpose (--kill-clients), and when each was
  // dead for sure (CLOCK_MONOTONIC ns): their open holds end then; no stats line is expected.
  std::map<int, std::int64_t> killed;
  // Worker processes paused on purpose (--client-faults): index -> [SIGSTOP, SIGCONT] (mono ns).
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> paused;
  std::vector<std::string> notes;  // anything else worth printing
  LivenessSetup liveness;          // check (8), with --liveness
};

// Two holds whose windows overlap (or whose fences are out of order).
struct HoldPair {
  Hold first;   // started first
  Hold second;  // started inside first's window
  std::int64_t overlap_ns{0};
};

struct Report {
  RunInfo info;

  // Holds.
  std::int64_t holds{0};  // holds with an "acq" record
  std::int64_t released{0};
  std::int64_t lost{0};
  std::int64_t release_errors{0};
  std::int64_t empty_windows{0};  // validity already zero when measured

  // Acquisition (from the workers' stats).
  std::int64_t attempts{0};
  std::int64_t contended{0};
  std::int64_t acquisition_errors{0};
  std::map<std::string, std::int64_t> errors_by_kind;
  std::map<std::string, std::int64_t> error_samples;  // message -> count (a few per worker)

  // Writes.
  std::int64_t reached_write{0};  // holds that sent the fenced write
  std::int64_t applied{0};        // per the logs
  std::int64_t rejected{0};
  std::int64_t write_errors{0};
  std::int64_t read_errors{0};
  std::int64_t rejected_in_window{0};  // rejected although read and write were inside the window
  std::int64_t late_writes{0};         // write finished after the hold's window had ended
  std::int64_t late_writes_applied{0};

  // Store.
  bool store_read{false};
  std::int64_t counter{0};
  std::int64_t applied_in_store{0};
  std::int64_t shadow{0};
  std::int64_t shadow_lost{0};  // unfenced counter: updates lost (informational)

  // Verdicts.
  std::int64_t violations{0};  // (1) holds whose window overlaps an earlier-starting one
  std::vector<HoldPair> violation_examples;  // the first pair of each incident
  std::int64_t overlap_incidents{0};         // distinct holders whose window others entered
  std::int64_t overlaps_caught{0};           // ... of which a write was rejected by fencing
  std::int64_t lost_updates{0};              // (2) applied writes - counter (never negative)
  std::int64_t value_breaks{0};              // (2) applied values not 1, 2, 3, ... in list order
  std::int64_t accounting_errors{0};         // (2) logs vs store, write errors
  std::vector<std::string> accounting_notes;
  std::int64_t fence_order_violations{0};  // (3)
  std::int64_t missing_end{0};             // (4) acq without end
  std::int64_t killed_holds{0};            // holds whose process was killed mid-hold
  std::int64_t orphan_records{0};          // (4) write/end without acq
  std::int64_t missing_stats{0};           // (4) workers without a stats line
  std::int64_t malformed_lines{0};
  std::int64_t zero_fences{0};
  std::int64_t fence_inversions{0};
  std::vector<HoldPair> inversion_examples;
  // The primitives (checks (5)-(7) in checker.cpp).
  std::int64_t writer_passes{0};  // rwlock: readers that entered ahead of a waiting writer ...
  std::int64_t writer_passes_in_faults{0};  // ... and those with a fault in force in between
  std::int64_t writer_waits_clear{0};       // writers that waited with no fault in force
  std::vector<HoldPair> pass_examples;      // (writer, reader)
  std::int64_t observer_reads{0};           // multilock
  std::int64_t partial_sets{0};             // multilock: reads that showed a set partly held
  std::int64_t stops{0};                    // election: terms whose worker the library stopped
  std::int64_t late_stops{0};  // ... more than kStopSlack after is_leader() turned false
  std::int64_t max_stop_late_ns{0};
  std::int64_t run_overlaps{0};  // election: terms started while another's worker still ran
  std::int64_t max_run_overlap_ns{0};
  std::vector<HoldPair> run_examples;
  std::int64_t paused_runs{0};  // election: terms whose process was paused during the run
  LivenessReport liveness;      // (8)

  bool pass{false};
  std::vector<std::string> failures;  // why it did not pass
};

// An election's stop may come this long after is_leader() was seen false (the sampling of
// is_leader() and the callback thread's scheduling); later, the loss was noticed late.
inline constexpr std::int64_t kStopSlackNs = 50'000'000;
// rwlock: a reader that asked this long after a writer started waiting was told of it (the
// writer's first attempt sets its marker within a round trip).
inline constexpr std::int64_t kPreferenceSlackNs = 50'000'000;

// Runs every check. info.processes says whose stats to expect (workers 0 .. processes-1, but
// those in info.killed).
Report check(const LogContents& logs, const StoreState& store, const RunInfo& info);

// The report as a table for people, and as one JSON line for machines.
void print_report(const Report& report, std::FILE* out);
std::string to_json(const Report& report);

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_CHECKER_HPP
