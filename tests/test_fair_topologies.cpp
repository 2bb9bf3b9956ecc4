// A wait always ends on every topology (#41): a Redlock node stopped (SIGSTOP) and resumed (the
// queue's orderer or another), a Sentinel failover, a Cluster failover. A few forked processes loop
// lock()/unlock() with 1 ms holds on one key; each records when it was served in shared memory
// (steady_clock is one clock for every process of the machine), and the case checks that every
// process was served in each window: during the stop, and within the bound after SIGCONT
// (docs/locks-and-waiting.md). Counts, not latencies: a process served once in a window passes,
// whatever the machine's load.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <redlock/redlock.hpp>

#include "cluster_fixture.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_set.hpp"
#include "util/key_slot.hpp"  // key_slot: which node orders a fair Redlock's queue

using namespace std::chrono_literals;
using redlock::test::key;
using redlock::test::RedisCluster;
using redlock::test::SentinelSet;
using redlock::test::ServerGroup;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kProcs = 4;
constexpr auto kTtl = 3s;        // a process stranded for a ttl after SIGCONT shows
constexpr auto kBucket = 50ms;   // the resolution of the record
constexpr int kBuckets = 400;    // 20 s
constexpr auto kStopAt = 500ms;  // after the fleet runs
constexpr auto kStopFor = 6s;    // longer than a stall guard
constexpr auto kAfter = 2500ms;  // observed after SIGCONT
// A waiter queued on the orderer before it stopped hears nothing until its stall guard (at most
// 1.375 ttl after its last attempt, made before the stop); that attempt skips the silent
// orderer, and from then on it polls. So the window "during the stop" opens then.
constexpr auto kGuard = kTtl * 11 / 8;
constexpr auto kBoundAfter = 2000ms;  // the bound after SIGCONT, with a margin: less than a ttl

// Shared between the forked processes and the test (MAP_SHARED, before the fork).
struct Record {
  std::atomic<long long> start_ns{0};  // steady_clock of bucket 0
  std::atomic<bool> stop{false};
  std::atomic<int> served[kProcs][kBuckets];
  std::atomic<int> errors[kProcs];
};

Record* make_record() {
  void* at =
      ::mmap(nullptr, sizeof(Record), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(at != MAP_FAILED);
  return new (at) Record{};
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

int bucket_of(const Record& r, long long ns) {
  return static_cast<int>((ns - r.start_ns.load()) / std::chrono::nanoseconds(kBucket).count());
}

// The node that orders a fair Redlock's queue: the servers sorted by run_id, rotated by the
// key's slot (src/core/engine_setup.cpp, choose_orderer).
std::size_t orderer_of(const ServerGroup& group, const std::string& k) {
  std::vector<std::pair<std::string, std::size_t>> ids;
  for (std::size_t i = 0; i < group.size(); ++i) {
    const std::string info = group[i].raw({"INFO", "server"}).str();
    const auto at = info.find("run_id:") + 7;
    ids.emplace_back(info.substr(at, 40), i);
  }
  std::sort(ids.begin(), ids.end());
  return ids[redlock::detail::key_slot(k) % ids.size()].second;
}

// One grant recorded for process `index` now.
void record_grant(Record* r, int index) {
  const int b = bucket_of(*r, now_ns());
  if (b >= 0 && b < kBuckets) ++r->served[index][b];
}

// Loops lock() (no deadline, as a service would) / 1 ms hold / unlock() on `lock` until the
// record's stop or its last bucket, counting grants and errors (a failover may throw).
template <class L>
void loop(L& lock, Record* r, int index) {
  const long long end = r->start_ns.load() + std::chrono::nanoseconds(kBuckets * kBucket).count();
  while (!r->stop.load() && now_ns() < end) {
    try {
      lock.lock();
      record_grant(r, index);
      std::this_thread::sleep_for(1ms);
      lock.unlock();
    } catch (const redlock::Error&) {
      ++r->errors[index];
    }
  }
}

// Forks a process that runs `body(r, index)` and exits 0 (2 if it threw).
template <class F>
pid_t fork_looper(Record* r, int index, F body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  try {
    body(r, index);
  } catch (...) {
    ::_exit(2);
  }
  ::_exit(0);
}

// Ends the fleet: a process may be waiting in lock().
void stop_fleet(Record* r, const std::vector<pid_t>& pids) {
  r->stop = true;
  for (const pid_t pid : pids) ::kill(pid, SIGKILL);
  for (const pid_t pid : pids) ::waitpid(pid, nullptr, 0);
}

// Grants of process `p` in [from, to) after the start.
int served_in(const Record& r, int p, Clock::duration from, Clock::duration to) {
  int n = 0;
  for (int b = static_cast<int>(from / kBucket); b < std::min<long long>(kBuckets, to / kBucket);
       ++b) {
    n += r.served[p][b].load();
  }
  return n;
}

// How long after `from` process `p` was first served (bucket resolution); -1 if never.
long long first_served_ms(const Record& r, int p, Clock::duration from) {
  for (int b = static_cast<int>(from / kBucket); b < kBuckets; ++b) {
    if (r.served[p][b].load() > 0) {
      const auto after = std::max<Clock::duration>(b * kBucket - from, Clock::duration(0));
      return std::chrono::duration_cast<std::chrono::milliseconds>(after).count();
    }
  }
  return -1;
}

// The longest time process `p` went unserved in [from, to) (bucket resolution).
long long longest_gap_ms(const Record& r, int p, Clock::duration from, Clock::duration to) {
  long long longest = 0;
  int last = static_cast<int>(from / kBucket);
  const int end = static_cast<int>(std::min<long long>(kBuckets, to / kBucket));
  for (int b = last; b < end; ++b) {
    if (r.served[p][b].load() == 0) continue;
    longest = std::max<long long>(longest, b - last);
    last = b;
  }
  longest = std::max<long long>(longest, end - last);
  return longest * std::chrono::milliseconds(kBucket).count();
}

// Runs the fleet, stops node `stop` from kStopAt for kStopFor, and checks every process was
// served in the stop (once a stall guard has passed) and within kBoundAfter of SIGCONT.
void stop_and_resume(bool orderer, std::optional<bool> fair) {
  ServerGroup group(3);
  const auto endpoints = group.endpoints();
  const std::string k = key("topology-stop");
  const std::size_t o_node = orderer_of(group, k);
  const std::size_t stop = orderer ? o_node : (o_node + 1) % group.size();
  redlock::LockOptions o;
  o.ttl = kTtl;
  o.fair = fair;
  Record* r = make_record();
  r->start_ns = now_ns() + std::chrono::nanoseconds(300ms).count();  // the fleet starts
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pids.push_back(fork_looper(r, p, [&](Record* rec, int index) {
      const std::vector<redlock::Client> clients(endpoints.begin(), endpoints.end());
      redlock::Redlock lock(clients, k, o);
      loop(lock, rec, index);
    }));
  }
  const auto start = Clock::time_point(std::chrono::nanoseconds(r->start_ns.load()));
  std::this_thread::sleep_until(start + kStopAt);
  group[stop].pause();
  std::this_thread::sleep_until(start + kStopAt + kStopFor);
  group[stop].resume();
  const auto resumed = kStopAt + kStopFor;
  std::this_thread::sleep_until(start + resumed + kAfter);
  stop_fleet(r, pids);
  INFO("stopped node " << stop << (orderer ? " (the orderer)" : " (not the orderer)") << ", fair "
                       << (fair ? (*fair ? "true" : "false") : "unset"));
  for (int p = 0; p < kProcs; ++p) {
    const int before = served_in(*r, p, 0ms, kStopAt);
    const int during = served_in(*r, p, kStopAt + kGuard, resumed);
    const int after = served_in(*r, p, resumed, resumed + kBoundAfter);
    const int late = served_in(*r, p, resumed + kBoundAfter, resumed + kAfter);
    INFO("process " << p << ": before " << before << ", during the stop " << during
                    << ", within the bound after SIGCONT " << after << ", later " << late
                    << ", errors " << r->errors[p].load());
    if (std::getenv("REDLOCK_TEST_REPORT") != nullptr) {
      std::fprintf(stderr,
                   "node %zu%s fair=%d p%d: before %d during %d after %d (first %lld ms) "
                   "late %d errors %d, longest gap %lld ms\n",
                   stop, orderer ? " (orderer)" : "", fair ? int(*fair) : -1, p, before, during,
                   after, first_served_ms(*r, p, resumed), late, r->errors[p].load(),
                   longest_gap_ms(*r, p, kStopAt, resumed + kAfter));
    }
    CHECK(during >= 1);
    CHECK(after >= 1);
  }
  ::munmap(r, sizeof(Record));
}

// Checks that every process was served within `bound` of `up` (since the start), and reports.
void check_served_after(const Record& r, Clock::duration up, Clock::duration bound,
                        const char* what) {
  for (int p = 0; p < kProcs; ++p) {
    const int after = served_in(r, p, up, up + bound);
    INFO(what << ": process " << p << " served " << after << " times within the bound, first "
              << first_served_ms(r, p, up) << " ms after, errors " << r.errors[p].load());
    if (std::getenv("REDLOCK_TEST_REPORT") != nullptr) {
      std::fprintf(stderr, "%s p%d: within the bound %d, first %lld ms after, errors %d\n", what, p,
                   after, first_served_ms(r, p, up), r.errors[p].load());
    }
    CHECK(after >= 1);
  }
}

Clock::duration since(const Record& r) {
  return Clock::now() - Clock::time_point(std::chrono::nanoseconds(r.start_ns.load()));
}

// Starts kProcs processes that loop on `k` through `uri` with `o` (a Lock), from 300 ms on.
std::vector<pid_t> start_lock_fleet(Record* r, const std::string& uri, const std::string& k,
                                    const redlock::LockOptions& o) {
  r->start_ns = now_ns() + std::chrono::nanoseconds(300ms).count();
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pids.push_back(fork_looper(r, p, [&](Record* rec, int index) {
      redlock::Client client(uri);
      redlock::Lock lock(client, k, o);
      loop(lock, rec, index);
    }));
  }
  std::this_thread::sleep_until(Clock::time_point(std::chrono::nanoseconds(r->start_ns.load())) +
                                500ms);
  return pids;
}

}  // namespace

TEST_CASE("Redlock(3), default options: the orderer node stopped and resumed, every process served",
          "[redis][redlock][fault][liveness][slow]") {
  stop_and_resume(true, std::nullopt);
}

TEST_CASE("Redlock(3), default options: another node stopped and resumed, every process served",
          "[redis][redlock][fault][liveness][slow]") {
  stop_and_resume(false, std::nullopt);
}

TEST_CASE("Redlock(3), fair: the orderer node stopped and resumed, every process served",
          "[redis][redlock][fault][liveness][slow]") {
  stop_and_resume(true, true);
}

TEST_CASE("Redlock(3), fair: another node stopped and resumed, every process served",
          "[redis][redlock][fault][liveness][slow]") {
  stop_and_resume(false, true);
}

// A planned failover pauses the old master's writes, then demotes it and kills its clients: a
// release (or a waiter's leave) caught there does not reach the new master, and the key (or a
// departed waiter's queue place, which the next hand-over would go to) stayed for a whole ttl:
// no process was served in the 3 s after the new master was up, 3 of 3 runs. The background
// retry (src/watch/release_retry.hpp) sends it again once the new master takes writes.
TEST_CASE("Sentinel: a planned SENTINEL FAILOVER, every process served soon after the new master",
          "[redis][sentinel][fault][liveness][slow]") {
  SentinelSet set;
  const std::string k = key("topology-sentinel");
  redlock::LockOptions o;
  o.ttl = 6s;               // a key left on the new master would stall the fleet for 6 s
  o.max_unavailable = 30s;  // the waits ride the failover out
  Record* r = make_record();
  const auto pids = start_lock_fleet(r, set.uri(), k, o);
  set.failover();
  const auto up = since(*r);
  std::this_thread::sleep_for(3s);
  stop_fleet(r, pids);
  check_served_after(*r, up, 2500ms, "sentinel failover");
  ::munmap(r, sizeof(Record));
}

// It passed 2 of 2 on an idle machine, and failed in a CI run on a loaded one, with no process
// served in the 3 s after the failover (ttl 6 s): the same release lost in the failover's window.
TEST_CASE("Cluster: CLUSTER FAILOVER on the key's replica, every process served soon after",
          "[redis][cluster][fault][liveness][slow]") {
  RedisCluster& cluster = redlock::test::shared_cluster();
  const std::size_t master = cluster.masters()[2];
  const std::string k = cluster.key_on(master, "topology-failover-");
  redlock::LockOptions o = redlock::test::cluster_options(6s);
  o.fair = true;
  o.max_unavailable = 30s;
  Record* r = make_record();
  const auto pids = start_lock_fleet(r, cluster.uri(), k, o);
  cluster.failover(cluster.replica_of(master));
  const auto up = since(*r);
  std::this_thread::sleep_for(3s);
  stop_fleet(r, pids);
  check_served_after(*r, up, 2500ms, "cluster failover");
  ::munmap(r, sizeof(Record));
}
