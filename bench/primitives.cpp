// bench/primitives.cpp: section 14, the primitives against etcd and Kazoo. One redis-server (and,
// when the component is built, one ZooKeeper 3.8) on 127.0.0.1:
//   a. Election (primitives_election.cpp): hand-over against `etcdctl elect` and
//      `redlock-run --elect`, crash failover, leader() against a raw GET.
//   b. ReadWriteLock on ZooKeeper against Kazoo's ReadLock / WriteLock (python3-kazoo 2.8, run by
//      bench/kazoo_rwlock.py on the same server): uncontended cycles of each side, median of
//      rounds that alternate ours and Kazoo's (goal: >= 2x Kazoo's, each side).
//   c. ReadWriteLock on Redis: a reader cycle and a writer cycle against a Lock cycle, interleaved
//      rounds (goal: >= 0.9x each); then 8 reader threads (hold 1 ms) and 1 writer (hold 0, 1 ms
//      between attempts) looping on one key: the writer's wait p50 / p99, each side's count.
//   d. MultiLock of 4 keys against a Lock cycle, interleaved rounds (goal: >= 0.8x).
// A row whose program is missing (etcd, etcdctl, python3-kazoo, ZooKeeper) prints "skipped: ..."
// and is not an error.
#include <sys/wait.h>  // WIFEXITED, WEXITSTATUS

#include <atomic>      // std::atomic
#include <chrono>      // std::chrono
#include <functional>  // std::function
#include <iostream>    // std::cout
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string, std::stod
#include <thread>      // std::thread
#include <vector>      // std::vector

#include <redlock/multilock.hpp>
#include <redlock/redlock.hpp>
#include <redlock/rwlock.hpp>

#include "etcd.hpp"  // Child
#include "primitives.hpp"
#include "support/redis_server.hpp"
#if defined(REDLOCK_BENCH_ZOOKEEPER)
#include <redlock/zookeeper.hpp>

#include "support/zookeeper_server.hpp"
#endif

#ifndef REDLOCK_BENCH_SOURCE_DIR
#define REDLOCK_BENCH_SOURCE_DIR "bench"
#endif

namespace bench {
namespace {

using std::chrono::milliseconds;
constexpr int kReaders = 8;

std::function<bool()> reader_cycle(redlock::ReadWriteLock& rw) {
  return [&rw] {
    if (!rw.try_lock_shared()) return false;
    rw.unlock_shared();
    return true;
  };
}

// "name: 0.93x (goal >= 0.9x)" as a goal line, and the ratio in `j`.
void versus(Goals& goals, Json& j, const std::string& what, const std::string& key, double value,
            double goal) {
  goals.verdict(what + " >= " + times(goal), value, times(value), value >= goal);
  j.set(key, value);
}

#if defined(REDLOCK_BENCH_ZOOKEEPER)
// One run of bench/kazoo_rwlock.py: {read, write} cycles/s.
std::vector<double> kazoo_run(const redlock::test::ZooKeeperServer& zk, double seconds) {
  Child py({"/usr/bin/python3", std::string(REDLOCK_BENCH_SOURCE_DIR) + "/kazoo_rwlock.py",
            "127.0.0.1:" + std::to_string(zk.port()), "/bench14-kazoo", std::to_string(seconds)});
  const std::string line = py.read_line(now_ns() + 60'000'000'000);
  py.wait(now_ns() + 10'000'000'000);
  auto field = [&](const std::string& name) {
    const std::size_t at = line.find("\"" + name + "\": ");
    if (at == std::string::npos) throw std::runtime_error("kazoo_rwlock.py said: " + line);
    return std::stod(line.substr(at + name.size() + 4));
  };
  return {field("read_cycles_per_s"), field("write_cycles_per_s")};
}

bool kazoo_available() {
  Child probe({"/usr/bin/python3", "-c", "import kazoo"});
  const int status = probe.wait(now_ns() + 30'000'000'000);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

Json rwlock_zookeeper(const Config& config, Goals& goals) {
  if (!redlock::test::ZooKeeperServer::available()) {
    std::cout << "  ReadWriteLock vs Kazoo: " << skipped("zookeeper not installed") << "\n";
    return Json::object().set("skipped", "zookeeper not installed");
  }
  const bool kazoo = kazoo_available();
  redlock::test::ZooKeeperServer zk;
  redlock::zookeeper::Session session(zk.uri("/bench14?session_timeout=4000"));
  redlock::zookeeper::ReadWriteLock rw(session, "rw");
  const int rounds = config.quick ? 1 : 3;
  std::vector<double> read, write, kazoo_read, kazoo_write;
  for (int r = 0; r < rounds; ++r) {
    read.push_back(timed(config.seconds, reader_cycle(rw)).cycles_per_s);
    write.push_back(timed(config.seconds, cycle_of(rw)).cycles_per_s);
    if (!kazoo) continue;
    const std::vector<double> k = kazoo_run(zk, config.seconds);
    kazoo_read.push_back(k[0]);
    kazoo_write.push_back(k[1]);
  }
  const std::string why = "python3-kazoo not installed";
  const double kr = median(kazoo_read), kw = median(kazoo_write);
  Table table({"ZooKeeper, uncontended, 1 client", "read cycles/s", "write cycles/s"});
  table.row({"zookeeper::ReadWriteLock", num(median(read)), num(median(write))});
  table.row(kazoo ? std::vector<std::string>{"Kazoo ReadLock / WriteLock", num(kr), num(kw)}
                  : std::vector<std::string>{"Kazoo ReadLock / WriteLock", skipped(why)});
  table.print(std::cout);
  Json j = Json::object();
  j.set("ours_read_cycles_per_s", median(read)).set("ours_write_cycles_per_s", median(write));
  if (!kazoo) {
    std::cout << "    ReadWriteLock >= 2x Kazoo: " << skipped(why) << "\n";
    return j.set("kazoo", Json::object().set("skipped", why));
  }
  j.set("kazoo_read_cycles_per_s", kr).set("kazoo_write_cycles_per_s", kw);
  versus(goals, j, "ZooKeeper reader cycles vs Kazoo's ReadLock", "read_vs_kazoo",
         ratio(median(read), kr), 2.0);
  versus(goals, j, "ZooKeeper writer cycles vs Kazoo's WriteLock", "write_vs_kazoo",
         ratio(median(write), kw), 2.0);
  return j;
}
#endif

Json rwlock_redis(const Config& config, const redlock::Client& client, Goals& goals) {
  const std::string key = redlock::test::key("s14-rw");
  redlock::Lock lock(client, key + ":lock");
  redlock::ReadWriteLock rw(client, key + ":rw");
  const std::vector<Timed> t =
      interleaved(config.rounds, config.seconds, {cycle_of(lock), reader_cycle(rw), cycle_of(rw)});
  Table table({"Redis, uncontended, 1 thread", "cycles/s", "p50 us", "cpu us/cyc", "vs Lock"});
  const char* names[] = {"Lock", "ReadWriteLock reader", "ReadWriteLock writer"};
  for (int i = 0; i < 3; ++i) {
    table.row({names[i], num(t[i].cycles_per_s), num(t[i].p50_ns / 1e3), num(t[i].cpu_ns / 1e3),
               times(ratio(t[i].cycles_per_s, t[0].cycles_per_s))});
  }
  table.print(std::cout);
  Json j = Json::object();
  j.set("lock", timed_json(t[0])).set("reader", timed_json(t[1])).set("writer", timed_json(t[2]));
  versus(goals, j, "Redis reader cycle vs a Lock cycle", "reader_vs_lock",
         ratio(t[1].cycles_per_s, t[0].cycles_per_s), 0.9);
  versus(goals, j, "Redis writer cycle vs a Lock cycle", "writer_vs_lock",
         ratio(t[2].cycles_per_s, t[0].cycles_per_s), 0.9);
  return j;
}

// 8 readers (hold 1 ms) and 1 writer (hold 0, 1 ms between attempts) on one key for `seconds`.
Json readers_and_writer(const Config& config, const redlock::Client& client) {
  const std::string key = redlock::test::key("s14-rw8");
  const double seconds = config.seconds * 2;
  std::atomic<bool> stop{false};
  std::atomic<long> reads{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      redlock::ReadWriteLock rw(client, key);
      while (!stop) {
        if (!rw.try_lock_shared_for(std::chrono::seconds(5))) continue;
        std::this_thread::sleep_for(milliseconds(1));
        rw.unlock_shared();
        ++reads;
      }
    });
  }
  redlock::ReadWriteLock writer(client, key);
  std::vector<std::int64_t> waits;
  const std::int64_t end = now_ns() + static_cast<std::int64_t>(seconds * 1e9);
  while (now_ns() < end) {
    std::this_thread::sleep_for(milliseconds(1));
    const std::int64_t t0 = now_ns();
    writer.lock();
    waits.push_back(now_ns() - t0);
    writer.unlock();
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  const Summary s = summarize(waits);
  std::cout << "  8 readers (hold 1 ms) + 1 writer, " << num(seconds) << " s: writer wait p50 "
            << num(s.p50_ns / 1e3) << " us, p99 " << num(s.p99_ns / 1e3) << " us, max "
            << num(s.max_ns / 1e3) << " us; " << s.count << " writes, " << reads.load()
            << " reads\n";
  return Json::object()
      .set("writer_wait_p50_us", s.p50_ns / 1e3)
      .set("writer_wait_p99_us", s.p99_ns / 1e3)
      .set("writer_wait_max_us", s.max_ns / 1e3)
      .set("writes", static_cast<unsigned long long>(s.count))
      .set("reads", reads.load());
}

Json multilock(const Config& config, const redlock::Client& client, Goals& goals) {
  const std::string key = redlock::test::key("s14-multi");
  redlock::Lock lock(client, key + ":lock");
  redlock::MultiLock four(client, {key + ":1", key + ":2", key + ":3", key + ":4"});
  const std::vector<Timed> t =
      interleaved(config.rounds, config.seconds, {cycle_of(lock), cycle_of(four)});
  const double rate = ratio(t[1].cycles_per_s, t[0].cycles_per_s);
  Table table({"Redis, uncontended, 1 thread", "cycles/s", "p50 us", "cpu us/cyc", "vs Lock"});
  table.row(
      {"Lock", num(t[0].cycles_per_s), num(t[0].p50_ns / 1e3), num(t[0].cpu_ns / 1e3), "1.00x"});
  table.row({"MultiLock, 4 keys", num(t[1].cycles_per_s), num(t[1].p50_ns / 1e3),
             num(t[1].cpu_ns / 1e3), times(rate)});
  table.print(std::cout);
  Json j = Json::object().set("lock", timed_json(t[0])).set("multilock_4", timed_json(t[1]));
  versus(goals, j, "MultiLock(4 keys) cycle vs a Lock cycle", "multilock_vs_lock", rate, 0.8);
  return j;
}

}  // namespace

void section_primitives(const Config& config, Report& report) {
  std::cout << "\n[14] Primitives against etcd and Kazoo: Election hand-over and failover "
               "(etcd-server 3.4), ReadWriteLock (Kazoo 2.8 on ZooKeeper 3.8; Redis), "
               "MultiLock\n";
  redlock::test::RedisServer server;
  const redlock::Client client(endpoint_of(server, config.timeout));
  Goals goals;
  Json j = Json::object();
  j.set("election", election_part(config, server, goals));
#if defined(REDLOCK_BENCH_ZOOKEEPER)
  j.set("rwlock_zookeeper", rwlock_zookeeper(config, goals));
#else
  std::cout << "  ReadWriteLock vs Kazoo: " << skipped("built without ZooKeeper") << "\n";
#endif
  j.set("rwlock_redis", rwlock_redis(config, client, goals));
  j.set("readers_and_writer", readers_and_writer(config, client));
  j.set("multilock", multilock(config, client, goals));
  j.set("goals", goals.take());
  report.sections.set("14_primitives", std::move(j));
  std::cout << "  interleaved rows: median of " << config.rounds << " rounds of " << config.seconds
            << " s\n";
}

}  // namespace bench
