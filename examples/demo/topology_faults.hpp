// examples/demo/topology_faults.hpp: the faults of a topology the demo started itself
// (SentinelFaults, ClusterFaults): steps taken from the coordinator's main thread at set points
// of the run, events and fault windows recorded in the RunRecord.
#ifndef REDLOCK_EXAMPLES_DEMO_TOPOLOGY_FAULTS_HPP
#define REDLOCK_EXAMPLES_DEMO_TOPOLOGY_FAULTS_HPP

#include <cstdint>     // std::int64_t
#include <functional>  // std::function
#include <string>      // std::string
#include <utility>     // std::move

#include "demo.hpp"

namespace demo {

class TopologyFaults {
 public:
  virtual ~TopologyFaults() = default;
  // Takes every step due at `t` (nanoseconds since the start of the run). Never throws.
  virtual void step(std::int64_t t) = 0;
  // Ends a fault the run stopped in. Never throws.
  virtual void finish() = 0;
  // For the progress line: " (failover)" and the like, or "".
  virtual std::string status() const = 0;
  // The plan, for the banner.
  virtual std::string describe() const = 0;

 protected:
  // `print` shows one event line (none if empty); events and fault windows go into `run`.
  TopologyFaults(RunRecord& run, std::function<void(const std::string&)> print)
      : run_(run), print_(std::move(print)) {}
  // Records an event at the current time and prints it.
  void event(const std::string& what);
  // "2.4 s".
  static std::string at_seconds(std::int64_t ns);

  RunRecord& run_;

 private:
  std::function<void(const std::string&)> print_;
};

}  // namespace demo

#endif  // REDLOCK_EXAMPLES_DEMO_TOPOLOGY_FAULTS_HPP
