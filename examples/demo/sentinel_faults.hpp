// examples/demo/sentinel_faults.hpp: the faults of `redlock-demo --topology sentinel`: a
// SENTINEL FAILOVER at 30% of the run, and a kill -9 of the master at 60% (restarted 2 s
// later, empty; the sentinels make it a replica of the new master). Driven from the
// coordinator's main thread, like the Redlock topology's FaultInjector.
#ifndef REDLOCK_EXAMPLES_DEMO_SENTINEL_FAULTS_HPP
#define REDLOCK_EXAMPLES_DEMO_SENTINEL_FAULTS_HPP

#include <chrono>      // std::chrono::milliseconds
#include <cstdint>     // std::int64_t
#include <functional>  // std::function
#include <string>      // std::string

#include "demo.hpp"
#include "support/throwaway_sentinel.hpp"
#include "topology_faults.hpp"

namespace demo {

class SentinelFaults final : public TopologyFaults {
 public:
  // `print` shows one event line; the events and fault windows go into `run`.
  SentinelFaults(example::ThrowawaySentinel& set, std::chrono::milliseconds duration,
                 RunRecord& run, std::function<void(const std::string&)> print);
  void step(std::int64_t t) override;
  void finish() override;
  std::string status() const override;
  std::string describe() const override;

 private:
  void close_window(std::int64_t since, const char* label);

  example::ThrowawaySentinel& set_;
  std::int64_t failover_at_;
  std::int64_t kill_at_;
  std::int64_t restart_at_;
  std::int64_t failing_over_since_{0};
  std::size_t old_master_{0};
  std::int64_t killed_since_{0};
  std::size_t killed_{0};
  bool failover_done_{false};
  bool restarted_{false};
};

}  // namespace demo

#endif  // REDLOCK_EXAMPLES_DEMO_SENTINEL_FAULTS_HPP
