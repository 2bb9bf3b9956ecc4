// examples/demo/cluster_faults.cpp: see cluster_faults.hpp.
#include "cluster_faults.hpp"

#include <exception>  // std::exception
#include <utility>    // std::move

namespace demo {

namespace {
constexpr std::int64_t kNsPerMs = 1'000'000;
}  // namespace

ClusterFaults::ClusterFaults(example::ThrowawayCluster& cluster, const std::string& key,
                             std::chrono::milliseconds duration, RunRecord& run,
                             std::function<void(const std::string&)> print)
    : TopologyFaults(run, std::move(print)), cluster_(cluster), slot_(cluster.keyslot(key)) {
  const std::int64_t d = static_cast<std::int64_t>(duration.count()) * kNsPerMs;
  migrate_at_ = d * 30 / 100;
  failover_at_ = d * 60 / 100;
}

std::string ClusterFaults::describe() const {
  return "the lock's slot " + std::to_string(slot_) + " migrated to another master at " +
         at_seconds(migrate_at_) + "; CLUSTER FAILOVER of its master at " +
         at_seconds(failover_at_);
}

void ClusterFaults::step(std::int64_t t) {
  try {
    if (!migrated_ && t >= migrate_at_) {
      migrated_ = true;
      const std::size_t from = cluster_.owner(slot_);
      std::size_t to = from;
      for (std::size_t m : cluster_.masters()) to = m != from ? m : to;
      const std::int64_t since = monotonic_ns();
      cluster_.migrate_slot(slot_, to);
      run_.windows.push_back(FaultWindow{since, monotonic_ns(), "slot migration"});
      event("slot " + std::to_string(slot_) + " migrated from node " + std::to_string(from + 1) +
            " to node " + std::to_string(to + 1) + " (keys moved, MOVED for the clients)");
    }
    if (failing_over_since_ == 0 && !failover_done_ && t >= failover_at_) {
      old_owner_ = cluster_.owner(slot_);
      const std::size_t replica = cluster_.replica_of(old_owner_);
      std::string why;
      failing_over_since_ = monotonic_ns();
      if (!cluster_.failover(replica, why)) {
        failover_done_ = true;
        event("CLUSTER FAILOVER refused: " + why);
        return;
      }
      event("CLUSTER FAILOVER on node " + std::to_string(replica + 1) + " (the replica of node " +
            std::to_string(old_owner_ + 1) + ")");
    }
    if (failing_over_since_ != 0 && !failover_done_ && cluster_.owner(slot_) != old_owner_) {
      failover_done_ = true;
      run_.windows.push_back(FaultWindow{failing_over_since_, monotonic_ns(), "failover"});
      event("node " + std::to_string(cluster_.owner(slot_) + 1) + " owns the slot now");
    }
  } catch (const std::exception& e) {
    event(std::string("fault step failed: ") + e.what());
    migrated_ = true;
    failover_done_ = true;
  }
}

void ClusterFaults::finish() {
  if (failing_over_since_ != 0 && !failover_done_) {
    run_.windows.push_back(FaultWindow{failing_over_since_, monotonic_ns(), "failover"});
  }
}

std::string ClusterFaults::status() const {
  return failing_over_since_ != 0 && !failover_done_ ? " (failover)" : "";
}

}  // namespace demo
