// tests/torture/zookeeper_nemesis.hpp: faults for --mode zookeeper, on one ZooKeeper server
// (standalone, tick 200 ms; the workers' session timeout is 2 s). Every 1-3 s, one of:
//   pause         SIGSTOP of the server for 0.3-3.5 s: often longer than the session timeout,
//                 so holders must stop believing before the server expires their sessions
//   kill_restart  kill -9 of the server, restarted (same port, same data dir) 0.1-1 s later;
//                 sessions and their ephemeral znodes survive if the clients reconnect in time
// Driven by the controller's main thread, like Nemesis.
#ifndef REDLOCK_TESTS_TORTURE_ZOOKEEPER_NEMESIS_HPP
#define REDLOCK_TESTS_TORTURE_ZOOKEEPER_NEMESIS_HPP

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "nemesis.hpp"
#include "support/zookeeper_server.hpp"

namespace redlock::torture {

class ZooKeeperNemesis : public Faults {
 public:
  // `server` must outlive the nemesis. `log` (may be null) gets one line per injection and heal.
  ZooKeeperNemesis(test::ZooKeeperServer& server, std::uint64_t seed, std::FILE* log);
  std::int64_t step(std::int64_t now) override;
  void heal_all() override;
  const std::map<std::string, std::int64_t>& injected() const override { return injected_; }
  const std::vector<std::string>& problems() const override { return problems_; }

 private:
  enum class Kind { none, pause, kill_restart };
  void inject(std::int64_t now);
  void heal(std::int64_t now);
  std::int64_t uniform_ms(int lo, int hi);

  test::ZooKeeperServer& server_;
  std::mt19937_64 rng_;  // reproducible with --seed
  std::FILE* log_;
  Kind active_{Kind::none};
  std::int64_t heal_at_{0};
  std::int64_t next_inject_{0};
  std::map<std::string, std::int64_t> injected_;
  std::vector<std::string> problems_;
};

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_ZOOKEEPER_NEMESIS_HPP
