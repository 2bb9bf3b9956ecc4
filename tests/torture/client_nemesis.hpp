// tests/torture/client_nemesis.hpp: faults on one client process at a time (--client-faults).
//
// With --client-faults every worker process reaches the lock's store through FaultProxies of its
// own: one in front of each endpoint it uses (in front of the node's own proxy in modes lock and
// redlock, so the node faults still apply; in front of the server in modes postgres and
// zookeeper). That lets the nemesis cut off one client while the others go on. Every 0.3-1 s
// after the last client fault healed, until the run's last seconds, one fault on one worker (3
// times in 4 one that holds: whose hold log ends in an open hold; else any):
//   client_partition  every proxy of the worker black-holed (the server hears nothing from it:
//                     its lease, session or row expires and the next holder starts), healed
//                     after the lease + 200-1000 ms
//   client_pause      SIGSTOP of the worker process, SIGCONT after the lease + 200-1000 ms
// "The lease" is the ttl (ZooKeeper: the session timeout). At most one client fault at a time.
// The store's own nemesis runs beside it: ClientNemesis wraps it, and the controller steps the
// pair from its main thread. The pauses are handed to the checker (RunInfo::paused): a worker
// cannot act while stopped, and what it does after SIGCONT is outside the lease it believed in,
// so only fencing protects the store from it (checker.hpp, check (7)).
#ifndef REDLOCK_TESTS_TORTURE_CLIENT_NEMESIS_HPP
#define REDLOCK_TESTS_TORTURE_CLIENT_NEMESIS_HPP

#include <sys/types.h>  // pid_t

#include <cstdint>  // std::int64_t, std::uint64_t
#include <cstdio>   // std::FILE
#include <map>      // std::map
#include <memory>   // std::unique_ptr
#include <random>   // std::mt19937_64
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "nemesis.hpp"  // Faults
#include "support/fault_proxy.hpp"
#include "worker.hpp"  // WorkerConfig

namespace redlock::torture {

// One worker process's own proxies, its hold log and its pid while it runs (-1 once reaped: the
// controller resets it, so that no signal goes to a pid reused by another process).
struct ClientSeat {
  pid_t pid{-1};
  std::string log_path;
  std::vector<std::unique_ptr<test::FaultProxy>> proxies;
};

// The complete lines among the last `bytes` bytes of the file at `path` (none if unreadable).
std::vector<std::string> log_tail(const std::string& path, std::size_t bytes);
// Whether the hold log's last hold record (acq, write, end) opens or continues a hold: its
// process holds (or, with an election, leads) now. Reads the last 4 KiB.
bool log_shows_a_hold(const std::string& path);

// The worker's configuration routed through a new seat's proxies: one FaultProxy (on loopback)
// in front of each of base's node ports, or of the port of its PostgreSQL or ZooKeeper URI.
// Returns the config; `seat` gets the proxies. Throws std::invalid_argument for a mode without
// a fixed set of endpoints (sentinel, cluster: the client discovers its servers), what
// FaultProxy's constructor throws otherwise.
WorkerConfig route_through_own_proxies(const WorkerConfig& base, ClientSeat& seat);

class ClientNemesis final : public Faults {
 public:
  // `store` is the store's nemesis, stepped and healed with this one. `seats` (their pids set)
  // must outlive this. Client faults start at `first` and none is injected after `last` (mono
  // ns); each lasts lease_ms + 200-1000 ms. `log` (may be null) gets a line per injection/heal.
  ClientNemesis(std::unique_ptr<Faults> store, std::vector<ClientSeat>& seats,
                std::int64_t lease_ms, std::int64_t first, std::int64_t last, std::uint64_t seed,
                std::FILE* log);
  ~ClientNemesis() override;

  std::int64_t step(std::int64_t now) override;
  void heal_all() override;
  const std::map<std::string, std::int64_t>& injected() const override { return injected_; }
  const std::vector<std::string>& problems() const override { return problems_; }
  // The pauses so far: worker index -> [SIGSTOP sent, SIGCONT sent] (mono ns).
  const std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>>& paused() const {
    return paused_;
  }
  // The partitions so far: worker index -> [black-holed, healed] (mono ns; 0: not yet healed).
  const std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>>& partitioned() const {
    return partitioned_;
  }
  // The worker under a client fault now, or -1.
  int active() const noexcept { return active_; }

 private:
  void inject(std::int64_t now);
  int pick();
  void heal(std::int64_t now);
  void note(const std::string& what);
  void merge_counts();

  std::unique_ptr<Faults> store_;
  std::vector<ClientSeat>& seats_;
  const std::int64_t lease_ms_;
  const std::int64_t last_;
  std::mt19937_64 rng_;
  std::FILE* log_;
  std::int64_t next_inject_;
  int active_{-1};  // the worker under a fault, or -1
  bool active_pause_{false};
  std::int64_t heal_at_{0};
  std::map<std::string, std::int64_t> own_;
  std::map<std::string, std::int64_t> injected_;  // the store's and ours
  std::vector<std::string> own_problems_;
  std::vector<std::string> problems_;  // the store's and ours
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> paused_;
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> partitioned_;
};

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_CLIENT_NEMESIS_HPP
