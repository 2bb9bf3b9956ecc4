// examples/demo/sentinel_faults.cpp: see sentinel_faults.hpp.
#include "sentinel_faults.hpp"

#include <exception>  // std::exception
#include <utility>    // std::move

namespace demo {

namespace {
constexpr std::int64_t kNsPerMs = 1'000'000;
constexpr std::int64_t kRestartAfter = 2'000 * kNsPerMs;
}  // namespace

SentinelFaults::SentinelFaults(example::ThrowawaySentinel& set, std::chrono::milliseconds duration,
                               RunRecord& run, std::function<void(const std::string&)> print)
    : TopologyFaults(run, std::move(print)), set_(set) {
  const std::int64_t d = static_cast<std::int64_t>(duration.count()) * kNsPerMs;
  failover_at_ = d * 30 / 100;
  kill_at_ = d * 60 / 100;
  restart_at_ = kill_at_ + kRestartAfter;
}

std::string SentinelFaults::describe() const {
  return "SENTINEL FAILOVER at " + at_seconds(failover_at_) + "; kill -9 of the master at " +
         at_seconds(kill_at_) + ", restarted (empty) " + at_seconds(kRestartAfter) + " later";
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
