// tests/torture/sentinel_nemesis.hpp: faults for --mode sentinel, on a SentinelSet (1 master,
// 2 replicas, 3 sentinels). Every 2-4 s (longer after a failover, which takes the sentinels a
// few seconds to finish), one of:
//   failover       SENTINEL FAILOVER (a replica is promoted, the master demoted)
//   kill_master    kill -9 of the current master, restarted 1-2 s later (AOF, appendfsync
//                  always); the sentinels fail over meanwhile (down-after-milliseconds 500)
//   pause_replica  SIGSTOP of a replica for 0.3-1.5 s (with wait_replicas, grants then wait)
// Driven by the controller's main thread, like Nemesis (the same rules about RedisServer).
#ifndef REDLOCK_TESTS_TORTURE_SENTINEL_NEMESIS_HPP
#define REDLOCK_TESTS_TORTURE_SENTINEL_NEMESIS_HPP

#include <cstdint>
#include <cstdio>
#include <string>

#include "nemesis.hpp"
#include "support/sentinel_set.hpp"

namespace redlock::torture {

class SentinelNemesis : public TopologyNemesis {
 public:
  // `set` must outlive the nemesis. `log` (may be null) gets one line per injection and heal.
  SentinelNemesis(test::SentinelSet& set, std::uint64_t seed, std::FILE* log);
  std::int64_t step(std::int64_t now) override;
  void heal_all() override;

 private:
  enum class Kind { none, kill_master, pause_replica };
  void inject(std::int64_t now);
  void heal(std::int64_t now);

  test::SentinelSet& set_;
  Kind active_{Kind::none};
  std::size_t node_{0};
  std::int64_t heal_at_{0};
  std::int64_t next_inject_{0};
};

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_SENTINEL_NEMESIS_HPP
