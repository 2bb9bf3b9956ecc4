// examples/demo/sentinel_faults.cpp: see sentinel_faults.hpp.
#include "sentinel_faults.hpp"

#include <cstdio>     // std::snprintf
#include <exception>  // std::exception
#include <utility>    // std::move

namespace demo {

namespace {
constexpr std::int64_t kNsPerMs = 1'000'000;
constexpr std::int64_t kRestartAfter = 2'000 * kNsPerMs;

std::string at_seconds(std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ns) / 1e9);
  return text;
}

// When the failover and the kill happen in a run of `duration`.
std::int64_t failover_at(std::chrono::milliseconds duration) {
  return static_cast<std::int64_t>(duration.count()) * kNsPerMs * 30 / 100;
}
std::int64_t kill_at(std::chrono::milliseconds duration) {
  return static_cast<std::int64_t>(duration.count()) * kNsPerMs * 60 / 100;
}
}  // namespace

std::string describe_sentinel_faults(std::chrono::milliseconds duration) {
  return "SENTINEL FAILOVER at " + at_seconds(failover_at(duration)) +
         "; kill -9 of the master at " + at_seconds(kill_at(duration)) + ", restarted (empty) " +
         at_seconds(kRestartAfter) + " later";
}

SentinelFaults::SentinelFaults(example::ThrowawaySentinel& set, std::chrono::milliseconds duration,
                               RunRecord& run, std::function<void(const std::string&)> print)
    : set_(set),
      run_(run),
      print_(std::move(print)),
      failover_at_(failover_at(duration)),
      kill_at_(kill_at(duration)),
      restart_at_(kill_at_ + kRestartAfter) {}

void SentinelFaults::event(const std::string& what) {
  const std::int64_t at = monotonic_ns() - run_.start_ns;
  run_.faults.push_back(FaultEvent{static_cast<double>(at) / 1e9, what});
  print_("  t=" + at_seconds(at) + "  " + what);
}

void SentinelFaults::close_window(std::int64_t since, const char* label) {
  run_.windows.push_back(FaultWindow{since, monotonic_ns(), label});
}

void SentinelFaults::step(std::int64_t t) {
  try {
    if (failing_over_since_ == 0 && !failover_done_ && t >= failover_at_) {
      old_master_ = set_.master_index();
      std::string why;
      failing_over_since_ = monotonic_ns();
      if (!set_.failover(why)) {
        failover_done_ = true;
        event("SENTINEL FAILOVER refused: " + why);
        return;
      }
      event("SENTINEL FAILOVER (master is data node " + std::to_string(old_master_ + 1) + ")");
    }
    if (failing_over_since_ != 0 && !failover_done_ && set_.master_index() != old_master_) {
      failover_done_ = true;
      close_window(failing_over_since_, "failover");
      event("data node " + std::to_string(set_.master_index() + 1) + " is the master now");
    }
    if (killed_since_ == 0 && t >= kill_at_) {
      killed_ = set_.master_index();
      set_.data(killed_).kill9();
      killed_since_ = monotonic_ns();
      event("master (data node " + std::to_string(killed_ + 1) + ") killed (kill -9)");
    }
    if (killed_since_ != 0 && !restarted_ && t >= restart_at_) {
      restarted_ = true;
      set_.data(killed_).restart();
      close_window(killed_since_, "master killed");
      event("data node " + std::to_string(killed_ + 1) +
            " restarted, empty; the sentinels make it a replica");
    }
  } catch (const std::exception& e) {
    event(std::string("fault step failed: ") + e.what());
    failover_done_ = true;
    restarted_ = true;
    killed_since_ = killed_since_ == 0 ? 1 : killed_since_;
  }
}

void SentinelFaults::finish() {
  if (failing_over_since_ != 0 && !failover_done_) close_window(failing_over_since_, "failover");
  if (killed_since_ > 1 && !restarted_) close_window(killed_since_, "master killed");
}

std::string SentinelFaults::status() const {
  if (killed_since_ > 1 && !restarted_) return " (master killed)";
  if (failing_over_since_ != 0 && !failover_done_) return " (failover)";
  return "";
}

}  // namespace demo
