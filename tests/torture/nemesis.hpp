// tests/torture/nemesis.hpp: random faults on the lock nodes, each healed after a short while.
//
// The nemesis is driven by the controller's main thread (Nemesis::step), which also owns the
// RedisServer and FaultProxy objects; RedisServer's pause/resume/kill9/restart must not race,
// and a restarted server's PR_SET_PDEATHSIG is tied to the thread that restarted it, which must
// outlive it: the main thread does both.
//
// Fault model (the default): every 0.5-2 s one fault on one healthy node, at most
// `max_faulty` nodes faulty at once (2 of 5: a minority; 1 of 1 in lock mode, where the single
// node may be unavailable: attempts then fail, exclusion must still hold):
//   pause              SIGSTOP for 0.1-1.5 s, then SIGCONT
//   kill_restart       kill -9, down 0.1-1 s, restart on the same port (AOF, appendfsync always,
//                      so every acknowledged grant survives)
//   client_kill        CLIENT KILL TYPE normal (every client connection dropped at once)
//   debug_sleep        DEBUG SLEEP 0.3 (the server hangs 300 ms)
//   latency            the proxy delays each chunk by 50-300 ms for 0.3-2 s (the command timeout
//                      is 200 ms: some replies arrive, some requests land after the client gave up)
//   blackhole          the proxy forwards nothing for 0.2-1.5 s
//   drop_after_request the proxy lets requests through and cuts the connection before the reply
//                      (the server executes it, the client sees EOF), for 0.2-1.5 s
//   reset_all          every proxied connection of the node is reset (RST)
// Outside the fault model:
//   --unsafe restart   majority_restart: kill -9 three of five nodes at once (no persistence in
//                      this mode) and restart them empty, about every third injection
//   --unsafe clock     no extra fault kind (the clocks of three nodes run 2x, see controller), but
//                      kill_restart spares those nodes: a restart would reset their fake clock
#ifndef REDLOCK_TESTS_TORTURE_NEMESIS_HPP
#define REDLOCK_TESTS_TORTURE_NEMESIS_HPP

#include <cstdint>  // std::int64_t, std::uint64_t
#include <cstdio>   // std::FILE
#include <map>      // std::map
#include <memory>   // std::unique_ptr
#include <random>   // std::mt19937_64
#include <string>   // std::string
#include <vector>   // std::vector

#include "common.hpp"  // Unsafe
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

namespace redlock::torture {

// One lock node: its server and the proxy the workers reach it through.
struct Node {
  std::unique_ptr<test::RedisServer> server;
  std::unique_ptr<test::FaultProxy> proxy;
  bool fake_clock{false};  // runs under faketime
};

// What the controller drives: a source of faults, stepped from its main thread.
class Faults {
 public:
  virtual ~Faults() = default;
  // Heals what is due, injects what is due. Returns when it next wants to run (mono ns).
  // Never throws.
  virtual std::int64_t step(std::int64_t now) = 0;
  // Heals every active fault at once.
  virtual void heal_all() = 0;
  virtual const std::map<std::string, std::int64_t>& injected() const = 0;
  virtual const std::vector<std::string>& problems() const = 0;
};

// What the nemeses of a topology (SentinelNemesis, ClusterNemesis) share: their randomness, the
// log, and the counts and problems they report.
class TopologyNemesis : public Faults {
 public:
  const std::map<std::string, std::int64_t>& injected() const override { return injected_; }
  const std::vector<std::string>& problems() const override { return problems_; }

 protected:
  // `salt` keeps each nemesis's choices apart for one --seed. `log` may be null.
  TopologyNemesis(std::uint64_t seed, std::uint64_t salt, std::FILE* log)
      : rng_(seed ^ salt), log_(log) {}
  // A whole number of milliseconds in [lo, hi], as nanoseconds.
  std::int64_t uniform_ms(int lo, int hi);
  // One line in the nemesis log.
  void note(const std::string& what);

  std::mt19937_64 rng_;  // reproducible with --seed
  std::map<std::string, std::int64_t> injected_;
  std::vector<std::string> problems_;

 private:
  std::FILE* log_;
};

class Nemesis : public Faults {
 public:
  // `nodes` must outlive the nemesis. `log` (may be null) gets one line per injection and heal.
  Nemesis(std::vector<Node>& nodes, Unsafe unsafe, std::uint64_t seed, std::FILE* log);

  // Heals what is due, injects what is due. Returns when it next wants to run (mono ns).
  // Never throws: a failure to inject or heal is counted and retried.
  std::int64_t step(std::int64_t now) override;
  // Heals every active fault at once (end of run, or before a majority restart).
  void heal_all() override;

  // Faults injected so far, by kind.
  const std::map<std::string, std::int64_t>& injected() const override { return injected_; }
  // Problems met (a restart that failed, ...), for the report.
  const std::vector<std::string>& problems() const override { return problems_; }

 private:
  enum class Kind {
    pause,
    kill_restart,
    client_kill,
    debug_sleep,
    latency,
    blackhole,
    drop_after_request,
    reset_all,
    majority_restart
  };
  struct Active {
    Kind kind;
    std::vector<std::size_t> nodes;
    std::int64_t heal_at;
  };

  static const char* name(Kind k);
  void inject(std::int64_t now);
  // Returns false if the heal must be retried later.
  bool heal(const Active& fault);
  bool busy(std::size_t node) const;
  std::int64_t uniform_ms(int lo, int hi);
  void note(const std::string& what);

  std::vector<Node>& nodes_;
  Unsafe unsafe_;
  std::size_t max_faulty_;
  std::mt19937_64 rng_;  // reproducible with --seed; nothing secret here
  std::FILE* log_;
  std::vector<Active> active_;
  std::int64_t next_inject_{0};
  std::map<std::string, std::int64_t> injected_;
  std::vector<std::string> problems_;
};

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_NEMESIS_HPP
