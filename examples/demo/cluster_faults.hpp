// examples/demo/cluster_faults.hpp: the faults of `redlock-demo --topology cluster`: the lock
// key's slot migrated to another master at 30% of the run, and a CLUSTER FAILOVER of the master
// that then owns it at 60%. Driven from the coordinator's main thread, like SentinelFaults.
#ifndef REDLOCK_EXAMPLES_DEMO_CLUSTER_FAULTS_HPP
#define REDLOCK_EXAMPLES_DEMO_CLUSTER_FAULTS_HPP

#include <chrono>      // std::chrono::milliseconds
#include <cstdint>     // std::int64_t, std::uint16_t
#include <functional>  // std::function
#include <string>      // std::string

#include "demo.hpp"
#include "support/throwaway_cluster.hpp"
#include "topology_faults.hpp"

namespace demo {

class ClusterFaults final : public TopologyFaults {
 public:
  // `key` is the lock's key (its slot is the one moved). `print` shows one event line; the
  // events and fault windows go into `run`.
  ClusterFaults(example::ThrowawayCluster& cluster, const std::string& key,
                std::chrono::milliseconds duration, RunRecord& run,
                std::function<void(const std::string&)> print);
  void step(std::int64_t t) override;
  void finish() override;
  std::string status() const override;
  std::string describe() const override;

 private:
  example::ThrowawayCluster& cluster_;
  std::uint16_t slot_{0};
  std::int64_t migrate_at_;
  std::int64_t failover_at_;
  bool migrated_{false};
  std::int64_t failing_over_since_{0};
  std::size_t old_owner_{0};
  bool failover_done_{false};
};

}  // namespace demo

#endif  // REDLOCK_EXAMPLES_DEMO_CLUSTER_FAULTS_HPP
