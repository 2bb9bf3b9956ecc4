// bench/zookeeper.cpp: section 10, ZooKeeper. One ZooKeeper 3.8 (standalone, tick 200 ms) and
// five redis-servers, all on 127.0.0.1:
//   a. uncontended try_lock()+unlock() cycles, one thread: zookeeper::Lock against a raw floor
//      (the C client creating and deleting an ephemeral sequential znode synchronously: the
//      fewest round trips a lock over ZooKeeper can make, with the client settings the library
//      uses), next to the same floor with the client's default settings (it resolves its host
//      list at every poll), a Redis Lock and a Redlock(5); interleaved rounds, median shown.
//      Goal: >= 0.9x the floor.
//   b. 8 contenders on one lock (each its own session or Lock object), hold 0: hand-off p50
//      (from a holder's unlock() call to the next acquisition by another worker) and fairness
//      (acquisitions per worker, min/max), for ZooKeeper, a Redis Lock and a fair Redis Lock.
#include <zookeeper/zookeeper.h>

#include <algorithm>   // std::min_element
#include <atomic>      // std::atomic
#include <chrono>      // std::chrono
#include <functional>  // std::function
#include <iostream>    // std::cout
#include <memory>      // std::unique_ptr
#include <mutex>       // std::mutex
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string
#include <thread>      // std::thread
#include <vector>      // std::vector

#include <redlock/redlock.hpp>
#include <redlock/zookeeper.hpp>

#include "backends/zookeeper/zk_session.hpp"  // kZkResolveDelayMs, the library's setting
#include "bench.hpp"
#include "common.hpp"
#include "support/redis_server.hpp"
#include "support/zookeeper_server.hpp"

namespace bench {
namespace {

constexpr int kSessionMs = 4000;
constexpr int kContenders = 8;

// The floor: one synchronous C client handle, create + delete per cycle. `resolve_delay_ms` is
// passed to zoo_set_servers_resolution_delay (0: the client's default, resolve at every poll).
class RawZooKeeper {
 public:
  RawZooKeeper(const redlock::test::ZooKeeperServer& server, std::string parent,
               int resolve_delay_ms)
      : parent_(std::move(parent)) {
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    const std::string hosts = "127.0.0.1:" + std::to_string(server.port());
    // Its log (an error line when the server stops at the end) is not the benchmark's output.
    zh_ = zookeeper_init2(hosts.c_str(), nullptr, kSessionMs, nullptr, nullptr, 0,
                          [](const char*) {});
    if (zh_ == nullptr) throw std::runtime_error("section 10: zookeeper_init failed");
    zoo_set_servers_resolution_delay(zh_, resolve_delay_ms);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (zoo_state(zh_) != ZOO_CONNECTED_STATE) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("section 10: the floor's client did not connect");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    zoo_create(zh_, parent_.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
    prefix_ = parent_ + "/_c_0123456789abcdef0123456789abcdef01234567-lock-";
  }
  ~RawZooKeeper() { zookeeper_close(zh_); }
  RawZooKeeper(const RawZooKeeper&) = delete;
  RawZooKeeper& operator=(const RawZooKeeper&) = delete;

  bool cycle() {
    char created[512];
    struct Stat stat {};
    if (zoo_create2(zh_, prefix_.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                    ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof created, &stat) != ZOK) {
      return false;
    }
    return zoo_delete(zh_, created, -1) == ZOK;
  }

 private:
  zhandle_t* zh_{nullptr};
  std::string parent_;
  std::string prefix_;
};

Json report_uncontended(const Config& config, const redlock::test::ZooKeeperServer& zk,
                        redlock::test::ServerGroup& redis) {
  RawZooKeeper raw(zk, "/bench-raw", redlock::detail::kZkResolveDelayMs);
  RawZooKeeper raw_default(zk, "/bench-raw-default", 0);
  redlock::zookeeper::Session session(zk.uri("/bench?session_timeout=4000"));
  redlock::zookeeper::Lock zk_lock(session, "s10");
  std::vector<redlock::Client> clients;
  for (std::size_t i = 0; i < redis.size(); ++i) {
    clients.emplace_back(endpoint_of(redis[i], config.timeout));
  }
  const std::string key = redlock::test::key("s10");
  redlock::Lock lock(clients.front(), key + ":lock");
  redlock::Redlock quorum(clients, key + ":redlock");
  const std::vector<Timed> t = interleaved(
      config.rounds, config.seconds,
      {[&raw] { return raw.cycle(); }, cycle_of(zk_lock),
       [&raw_default] { return raw_default.cycle(); }, cycle_of(lock), cycle_of(quorum)});
  const double rate = ratio(t[1].cycles_per_s, t[0].cycles_per_s);
  const bool met = rate >= 0.9;
  Table table({"try_lock+unlock, 1 thread", "cycles/s", "p50 us", "cpu us/cyc", "vs floor"});
  const char* names[] = {"floor: C client create+delete", "zookeeper::Lock",
                         "C client, default settings", "Redis Lock", "Redlock(5)"};
  Json j = Json::object();
  const char* keys[] = {"zookeeper_floor", "zookeeper", "zookeeper_floor_default_client",
                        "redis_lock", "redlock_5"};
  for (int i = 0; i < 5; ++i) {
    std::string versus = i == 0 ? "1.00x" : "";
    if (i == 1) versus = times(rate) + (met ? " (goal >=0.9x met)" : " (goal >=0.9x MISSED)");
    if (i == 2) versus = times(ratio(t[2].cycles_per_s, t[0].cycles_per_s));
    table.row(
        {names[i], num(t[i].cycles_per_s), num(t[i].p50_ns / 1e3), num(t[i].cpu_ns / 1e3), versus});
    j.set(keys[i], timed_json(t[i]));
  }
  table.print(std::cout);
  j.set("zookeeper_vs_floor", rate);
  j.set("zookeeper_vs_default_client", ratio(t[1].cycles_per_s, t[2].cycles_per_s));
  j.set("goal_met", met);
  return j;
}

// Hand-offs between `locks.size()` workers on one lock for `seconds`, hold 0.
struct Contended {
  Summary handoff;
  std::vector<long> per_worker;
};

template <class L>
Contended contend(std::vector<std::unique_ptr<L>>& locks, double seconds) {
  std::atomic<std::int64_t> last_unlock{0};
  std::atomic<int> last_worker{-1};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  Contended out;
  out.per_worker.assign(locks.size(), 0);
  std::vector<std::int64_t> handoffs;
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < locks.size(); ++w) {
    threads.emplace_back([&, w] {
      while (!stop) {
        if (!locks[w]->try_lock_for(std::chrono::seconds(5))) continue;
        const std::int64_t got = now_ns();
        {
          std::lock_guard<std::mutex> guard(mutex);
          if (last_worker != static_cast<int>(w) && last_unlock > 0) {
            handoffs.push_back(got - last_unlock);
          }
          ++out.per_worker[w];
        }
        last_worker = static_cast<int>(w);
        last_unlock = now_ns();
        locks[w]->unlock();
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  out.handoff = summarize(handoffs);
  return out;
}

void contended_row(Table& table, Json& j, const char* name, const char* key, const Contended& c) {
  const long min = *std::min_element(c.per_worker.begin(), c.per_worker.end());
  const long max = *std::max_element(c.per_worker.begin(), c.per_worker.end());
  table.row({name, num(c.handoff.p50_ns / 1e3), num(c.handoff.p99_ns / 1e3),
             std::to_string(c.handoff.count), std::to_string(min) + " / " + std::to_string(max)});
  Json row = Json::object();
  row.set("handoff_p50_us", c.handoff.p50_ns / 1e3);
  row.set("handoff_p99_us", c.handoff.p99_ns / 1e3);
  row.set("handoffs", static_cast<unsigned long long>(c.handoff.count));
  row.set("per_worker_min", min);
  row.set("per_worker_max", max);
  j.set(key, std::move(row));
}

Json report_contended(const Config& config, const redlock::test::ZooKeeperServer& zk,
                      redlock::test::ServerGroup& redis) {
  std::vector<std::unique_ptr<redlock::zookeeper::Session>> sessions;
  std::vector<std::unique_ptr<redlock::zookeeper::Lock>> zk_locks;
  for (int w = 0; w < kContenders; ++w) {
    sessions.push_back(std::make_unique<redlock::zookeeper::Session>(
        zk.uri("/bench?session_timeout=" + std::to_string(kSessionMs))));
    zk_locks.push_back(std::make_unique<redlock::zookeeper::Lock>(*sessions.back(), "s10c"));
  }
  redlock::Client client(endpoint_of(redis[0], config.timeout));
  const std::string key = redlock::test::key("s10c");
  redlock::LockOptions fair;
  fair.fair = true;
  std::vector<std::unique_ptr<redlock::Lock>> plain, fair_locks;
  for (int w = 0; w < kContenders; ++w) {
    plain.push_back(std::make_unique<redlock::Lock>(client, key + ":plain"));
    fair_locks.push_back(std::make_unique<redlock::Lock>(client, key + ":fair", fair));
  }
  const double seconds = config.seconds * 2;
  Table table(
      {"8 contenders, hold 0", "hand-off p50 us", "p99 us", "hand-offs", "per worker min / max"});
  Json j = Json::object();
  contended_row(table, j, "zookeeper::Lock (8 sessions)", "zookeeper", contend(zk_locks, seconds));
  contended_row(table, j, "Redis Lock", "redis_lock", contend(plain, seconds));
  contended_row(table, j, "Redis Lock, fair", "redis_lock_fair", contend(fair_locks, seconds));
  table.print(std::cout);
  return j;
}

}  // namespace

void section_zookeeper(const Config& config, Report& report) {
  std::cout << "\n[10] ZooKeeper (3.8 standalone, tick 200 ms, forceSync=no, session timeout "
            << kSessionMs
            << " ms) next to Redis: uncontended cycles against the C client's create+delete; "
               "hand-off and fairness with 8 contenders\n";
  redlock::test::ZooKeeperServer zk;
  redlock::test::ServerGroup redis(5);
  Json j = Json::object();
  j.set("uncontended", report_uncontended(config, zk, redis));
  j.set("contended", report_contended(config, zk, redis));
  report.sections.set("10_zookeeper", std::move(j));
  std::cout << "  a: median of " << config.rounds << " interleaved rounds of " << config.seconds
            << " s; b: " << config.seconds * 2 << " s per row\n";
}

}  // namespace bench
