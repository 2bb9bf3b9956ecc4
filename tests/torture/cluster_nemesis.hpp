// tests/torture/cluster_nemesis.hpp: faults for --mode cluster, on a RedisCluster (3 masters,
// 3 replicas). Every 2-4 s, one of:
//   migrate_slot   the lock key's slot moved to another master (IMPORTING/MIGRATING, MIGRATE,
//                  SETSLOT NODE), while the workers hold, renew and wait
//   failover       CLUSTER FAILOVER on the replica of the slot's master (a manual failover:
//                  the replica catches up first)
//   kill_master    kill -9 of the slot's master, restarted 3-4 s later (it rejoins as a replica
//                  once its replica has been promoted, after cluster-node-timeout 1 s)
// Driven by the controller's main thread, like Nemesis (the same rules about RedisServer).
#ifndef REDLOCK_TESTS_TORTURE_CLUSTER_NEMESIS_HPP
#define REDLOCK_TESTS_TORTURE_CLUSTER_NEMESIS_HPP

#include <cstdint>
#include <cstdio>
#include <string>

#include "nemesis.hpp"
#include "support/redis_cluster.hpp"

namespace redlock::torture {

class ClusterNemesis : public TopologyNemesis {
 public:
  // `cluster` must outlive the nemesis. `log` (may be null) gets one line per injection and heal.
  ClusterNemesis(test::RedisCluster& cluster, std::uint64_t seed, std::FILE* log);
  std::int64_t step(std::int64_t now) override;
  void heal_all() override;

 private:
  void inject(std::int64_t now);
  void heal(std::int64_t now);
  void migrate(std::size_t owner);

  test::RedisCluster& cluster_;
  std::uint16_t slot_;  // the lock key's
  bool killed_{false};
  std::size_t node_{0};
  std::int64_t heal_at_{0};
  std::int64_t next_inject_{0};
};

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_CLUSTER_NEMESIS_HPP
