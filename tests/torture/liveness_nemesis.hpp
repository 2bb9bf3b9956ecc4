// tests/torture/liveness_nemesis.hpp: the liveness nemesis (--liveness, issue 41).
//
// It breaks the processes around a fair lock, never its server: a stopped or dead server stalls
// every waiter by definition, so the lock node is left alone (its faults are torture_lock's and
// torture_lock_async's business). Every worker reaches node 0 through a FaultProxy of its own
// (client_nemesis.hpp's seats), and three fault sources run side by side:
//   client_pause, client_partition  ClientNemesis: one worker at a time SIGSTOPped, or its own
//                  proxies black-holed (a half-open partition: both ends keep their sockets),
//                  for the ttl + 200-1000 ms; 3 times in 4 the holder's process
//   kill_group     every 3-5 s: kill -9 of the holder's process plus the two processes whose
//                  acquire calls have waited longest (the queue's head, nearly: it is first come,
//                  first served), all at once; each is replaced by a new worker with the next
//                  index (and a seat of its own). The process under a client fault is spared.
//   old_client     1-3 s after its last hold, an old-style client on node 0 itself tries SET key
//                  value NX without PX (a key with no expiry) every step (10-20 ms) until it gets
//                  the key (in fair mode mostly once a dead holder's lease ended), holds it
//                  100-400 ms, then a compare-and-DEL
// What it did goes to the checker: the pauses (RunInfo::paused), the partitions and the old
// client's holds (RunInfo::liveness) and the kills (RunInfo::killed), whose open holds end at
// their death. Check (8) (liveness_check.hpp) then proves that no waiter stalled past the bound.
#ifndef REDLOCK_TESTS_TORTURE_LIVENESS_NEMESIS_HPP
#define REDLOCK_TESTS_TORTURE_LIVENESS_NEMESIS_HPP

#include <cstdint>  // std::int64_t, std::uint64_t
#include <cstdio>   // std::FILE
#include <map>      // std::map
#include <memory>   // std::unique_ptr
#include <random>   // std::mt19937_64
#include <string>   // std::string
#include <vector>   // std::vector

#include "client_nemesis.hpp"  // ClientNemesis, ClientSeat
#include "liveness_check.hpp"  // OutsideHold, ProcessIntervals
#include "processes.hpp"       // Worker
#include "support/redis_server.hpp"

namespace redlock::torture {

// The worker processes the nemesis kills and replaces, and how to start new ones. Every member
// must outlive the nemesis; seats[i] is worker i's seat (seats.size() == workers.size()).
struct Fleet {
  std::vector<Worker>& workers;
  std::vector<ClientSeat>& seats;
  const WorkerConfig& base;  // a replacement's configuration, routed through a new seat
  const std::string& exe;
  const std::string& run_dir;
  std::vector<std::string>& log_paths;
};

// The bound check (8) holds a wait to, from docs/locks-and-waiting.md: the lease (ttl) + the
// longest stall guard (11/8 ttl) + a claim window (ttl / 5, within 100 ms..1 s, at most the ttl)
// for each queued thread of the one process stopped or cut off at a time + `slack_ms`. Sets
// setup.bound_ns and setup.bound_text.
void set_liveness_bound(LivenessSetup& setup, int ttl_ms, int threads, int slack_ms);

class LivenessNemesis final : public Faults {
 public:
  // `node` is the lock's server (the old client talks to it directly); `fleet` as above. Faults
  // start at `first` and none is injected after `last` (mono ns). `log` (may be null) gets a line
  // per injection and heal.
  LivenessNemesis(test::RedisServer& node, Fleet fleet, std::int64_t ttl_ms, std::int64_t first,
                  std::int64_t last, std::uint64_t seed, std::FILE* log);
  ~LivenessNemesis() override;

  std::int64_t step(std::int64_t now) override;
  void heal_all() override;
  const std::map<std::string, std::int64_t>& injected() const override { return injected_; }
  const std::vector<std::string>& problems() const override { return problems_; }

  const ProcessIntervals& paused() const { return clients_->paused(); }
  const ProcessIntervals& partitioned() const { return clients_->partitioned(); }
  const std::vector<OutsideHold>& outside() const { return outside_; }
  // Worker index -> dead by (mono ns), of every worker it killed.
  const std::map<int, std::int64_t>& killed() const { return killed_; }

 private:
  void kill_group(std::int64_t now);
  std::vector<std::size_t> pick_group();
  void old_client(std::int64_t now);
  bool old_client_release();
  void note(const std::string& what);
  void merge_counts();

  test::RedisServer& node_;
  Fleet fleet_;
  std::unique_ptr<ClientNemesis> clients_;
  const std::int64_t last_;
  std::mt19937_64 rng_;
  std::FILE* log_;
  std::int64_t next_kill_;
  std::int64_t next_old_;
  // The old client: 0 idle, 1 holding (release at old_release_at_), 2 releasing (retrying).
  int old_state_{0};
  std::int64_t old_release_at_{0};
  std::int64_t old_count_{0};
  OutsideHold old_hold_;
  std::vector<OutsideHold> outside_;
  std::map<int, std::int64_t> killed_;
  std::map<std::string, std::int64_t> own_;
  std::vector<std::string> own_problems_;
  std::map<std::string, std::int64_t> injected_;
  std::vector<std::string> problems_;
};

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_LIVENESS_NEMESIS_HPP
