// tests/torture/fault_windows.hpp: when the nemeses had a fault in force, read back from the
// run's nemesis.log, so that a check can tell a broken promise from one the fault excuses.
//
// Writer preference (checker.hpp (5)) is a promise kept by state on the store: the waiting
// writer's marker, with a PX, refreshed by its retries. A fault that keeps the writer from the
// store for longer than that PX (a paused, killed or cut-off server, a paused or partitioned
// writer, killed connections) lets the marker lapse, and readers may enter until the writer's
// next retry; docs/api-guide.md says so. So a reader that passed a waiting writer breaks the
// promise only when no fault was in force between the writer's request and the reader's entry.
#ifndef REDLOCK_TESTS_TORTURE_FAULT_WINDOWS_HPP
#define REDLOCK_TESTS_TORTURE_FAULT_WINDOWS_HPP

#include <cstdint>  // std::int64_t
#include <string>   // std::string
#include <vector>   // std::vector

namespace redlock::torture {

// One fault, in force over [start, end] (CLOCK_MONOTONIC ns). A fault that happens at once
// (a slot migrated, backends terminated) has start == end; one never healed ends at INT64_MAX.
struct FaultWindow {
  std::int64_t start{0};
  std::int64_t end{0};
  std::string what;  // the log line that began it
};

// Parses nemesis.log's lines ("<mono ns> <text>"), whichever nemesis wrote them:
//   "inject <kind> ..."        opens <kind>       "heal <kind> ..."       closes the oldest open
//                                                  (not "healing", nor "(failed, will retry)")
//   "client_pause|client_partition worker=N ..."  opens that kind, closed by "heal <kind> ..."
//   "SIGSTOP of ..."           opens a stop       "SIGCONT of ..."        closes it
//   "kill -9 of ..."           opens a kill       "restarted ..."         closes it
//   anything else              an instant fault
// Returns the windows in the order they began. Lines that do not start with a number are skipped.
std::vector<FaultWindow> parse_fault_windows(const std::string& log_text);

// parse_fault_windows() of the file at path; empty if it cannot be read.
std::vector<FaultWindow> read_fault_windows(const std::string& path);

// True if some window is in force at any instant of [from, to] (ns; from <= to).
bool fault_in(const std::vector<FaultWindow>& windows, std::int64_t from, std::int64_t to);

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_FAULT_WINDOWS_HPP
