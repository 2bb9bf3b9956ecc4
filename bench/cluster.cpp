// bench/cluster.cpp: section 11, Redis Cluster. On a cluster of 3 masters and 3 replicas and a
// standalone server on the same machine: the Lock cycle on the cluster (keys spread over all
// masters) against the standalone server, 1 and 4 threads, with the client commands per
// uncontended cycle in steady state (INFO commandstats on every master: no routing round
// trips); the time a held lock's slot migration adds to its holder's next extend; 4 threads
// with keys on 3 masters against keys all on 1.
#include <atomic>      // std::atomic
#include <chrono>      // std::chrono
#include <cstdint>     // std::uint64_t
#include <functional>  // std::function
#include <iostream>    // std::cout
#include <memory>      // std::unique_ptr
#include <string>      // std::string
#include <thread>      // std::thread
#include <vector>      // std::vector

#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "support/redis_cluster.hpp"
#include "util/key_slot.hpp"  // key_slot: which slot to migrate

namespace bench {
namespace {

using redlock::test::RedisCluster;

// Locks on `keys` (one per key), cycled in turn by one caller.
struct Cycler {
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  std::size_t next{0};
  Cycler(redlock::Client& client, const std::vector<std::string>& keys) {
    for (const auto& k : keys) locks.push_back(std::make_unique<redlock::Lock>(client, k));
  }
  bool cycle() {
    redlock::Lock& lock = *locks[next++ % locks.size()];
    if (!lock.try_lock()) return false;
    lock.unlock();
    return true;
  }
};

// Cycles per second of `threads` threads, each with its own Cycler over its own keys.
double threaded(redlock::Client& client, const std::vector<std::vector<std::string>>& keys,
                double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> total{0};
  std::vector<std::thread> pool;
  for (const auto& mine : keys) {
    pool.emplace_back([&, mine] {
      Cycler c(client, mine);
      std::uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) n += c.cycle() ? 1 : 0;
      total += n;
    });
  }
  const std::int64_t start = now_ns();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : pool) t.join();
  return static_cast<double>(total.load()) / (static_cast<double>(now_ns() - start) / 1e9);
}

// Commands a client sent to the masters: commandstats counts the commands scripts run too, so
// only those a client may send in this workload are summed (SET NX GET, the scripts, and any
// routing: CLUSTER SLOTS, ASKING; INFO and PING).
std::uint64_t commands_run(RedisCluster& cluster) {
  std::uint64_t sum = 0;
  for (std::size_t m : cluster.masters()) {
    const std::string info = cluster.node(m).raw({"INFO", "commandstats"}).str();
    for (const char* name : {"set", "evalsha", "eval", "cluster|slots", "asking", "info", "ping"}) {
      const std::string field = std::string("cmdstat_") + name + ":calls=";
      const auto at = info.find(field);
      if (at != std::string::npos) sum += std::stoull(info.substr(at + field.size()));
    }
  }
  return sum;
}

double commands_per_cycle(RedisCluster& cluster, Cycler& c) {
  for (int i = 0; i < 50; ++i) c.cycle();  // warm: pools and the slot map exist
  const std::uint64_t before = commands_run(cluster);
  constexpr int kCycles = 300;
  for (int i = 0; i < kCycles; ++i) c.cycle();
  const std::uint64_t after = commands_run(cluster);
  const std::uint64_t infos = cluster.masters().size();  // the first snapshot's INFO commands
  return static_cast<double>(after - before - infos) / kCycles;
}

// Extend time (ms) before and right after the held lock's slot moves to another master.
std::pair<double, double> migration_extend(RedisCluster& cluster, redlock::Client& client) {
  const auto masters = cluster.masters();
  const std::string k = cluster.key_on(masters[0], "s11:migrate-");
  redlock::Lock lock(client, k);
  if (!lock.try_lock()) throw std::runtime_error("section 11: the migration lock was refused");
  std::int64_t t0 = now_ns();
  lock.extend();
  const double before = static_cast<double>(now_ns() - t0) / 1e6;
  const auto slot = redlock::detail::key_slot(k);
  cluster.migrate_slot(slot, masters[1]);
  t0 = now_ns();
  lock.extend();
  const double after = static_cast<double>(now_ns() - t0) / 1e6;
  lock.unlock();
  cluster.migrate_slot(slot, masters[0]);
  return {before, after};
}

}  // namespace

void section_cluster(const Config& config, Report& report) {
  std::cout << "\n[11] Redis Cluster (3 masters + 3 replicas) vs a standalone server, same "
               "machine: Lock try_lock+unlock, keys spread over every master\n";
  RedisCluster cluster;
  redlock::test::RedisServer standalone;
  redlock::test::ServerOptions replica_options;
  replica_options.extra_args = {"--replicaof", "127.0.0.1", std::to_string(standalone.port())};
  // A replica of the standalone server: each cluster master feeds one too.
  redlock::test::RedisServer replica(replica_options);
  redlock::Client on_cluster(cluster.uri());
  redlock::Client alone(standalone.endpoint());
  const auto masters = cluster.masters();
  std::vector<std::string> spread;
  for (std::size_t m : masters) spread.push_back(cluster.key_on(m, "s11:k-"));
  // The same master's keys, through the cluster router and straight to the master (a plain
  // Client of its address): what routing itself costs.
  const std::vector<std::string> own = {cluster.key_on(masters[0], "s11:own-")};
  redlock::Client straight(cluster.node(masters[0]).plain_endpoint());
  Cycler a(alone, spread), b(on_cluster, spread), c(straight, own), d(on_cluster, own);
  const auto t = interleaved(config.rounds, config.seconds,
                             {[&] { return a.cycle(); }, [&] { return b.cycle(); },
                              [&] { return c.cycle(); }, [&] { return d.cycle(); }});
  replica.kill9();  // the 4-thread rows below compare with the standalone server alone
  const double rate1 = ratio(t[1].cycles_per_s, t[0].cycles_per_s);
  const double routed = ratio(t[3].cycles_per_s, t[2].cycles_per_s);
  const double per_cycle = commands_per_cycle(cluster, b);
  std::vector<std::vector<std::string>> four_spread, four_one;
  for (int i = 0; i < 4; ++i) {
    four_spread.push_back({cluster.key_on(masters[static_cast<std::size_t>(i) % 3],
                                          "s11:t" + std::to_string(i) + "-")});
    four_one.push_back({cluster.key_on(masters[0], "s11:o" + std::to_string(i) + "-")});
  }
  const double alone4 = threaded(alone, four_spread, config.seconds);
  const double spread4 = threaded(on_cluster, four_spread, config.seconds);
  const double one4 = threaded(on_cluster, four_one, config.seconds);
  const auto [extend_before, extend_after] = migration_extend(cluster, on_cluster);
  Table table({"Lock cycle", "cycles/s", "p50 us", "cpu us/cyc", "vs standalone"});
  const auto row = [&](const char* name, const Timed& x, const std::string& versus) {
    table.row({name, num(x.cycles_per_s), num(x.p50_ns / 1e3), num(x.cpu_ns / 1e3), versus});
  };
  row("standalone + 1 replica, 1 thread", t[0], "1.00x");
  row("cluster, 1 thread", t[1],
      times(rate1) + (rate1 >= 0.95 ? " (goal >=0.95x met)" : " (goal >=0.95x MISSED)"));
  row("one master, straight (plain Client)", t[2], "-");
  row("one master, through the router", t[3],
      times(routed) + " of straight; cpu " + times(ratio(t[3].cpu_ns, t[2].cpu_ns)));
  table.row({"standalone, 4 threads", num(alone4), "-", "-", "1.00x"});
  table.row({"cluster, 4 threads, keys on 3 masters", num(spread4), "-", "-",
             times(ratio(spread4, alone4))});
  table.row({"cluster, 4 threads, keys on 1 master", num(one4), "-", "-",
             times(ratio(one4, alone4)) + "; 3 masters / 1: " + times(ratio(spread4, one4))});
  table.print(std::cout);
  std::cout << "  client commands per uncontended cycle on the cluster: " << num(per_cycle)
            << " (goal: exactly 2)\n  extend of a held lock: " << num(extend_before)
            << " ms before, " << num(extend_after)
            << " ms right after its slot migrated (MOVED + one CLUSTER SLOTS + the extend)\n"
            << "  the 1-thread rows' standalone server has a replica, as each cluster master "
               "does; 'through the router' vs 'straight' isolates routing\n"
            << "  on 2 cores, 3 masters cannot beat 1: the client threads and all six servers "
               "share the same two CPUs, so the figure measures scheduling, not scaling\n";
  Json j = Json::object();
  j.set("standalone_1t_cycles_per_s", t[0].cycles_per_s);
  j.set("cluster_1t_cycles_per_s", t[1].cycles_per_s);
  j.set("cluster_vs_standalone_1t", rate1);
  j.set("goal_met", rate1 >= 0.95);
  j.set("one_master_straight_cycles_per_s", t[2].cycles_per_s);
  j.set("one_master_routed_cycles_per_s", t[3].cycles_per_s);
  j.set("routed_vs_straight", routed);
  j.set("routed_cpu_vs_straight", ratio(t[3].cpu_ns, t[2].cpu_ns));
  j.set("commands_per_cycle", per_cycle);
  j.set("standalone_4t_cycles_per_s", alone4);
  j.set("cluster_4t_3_masters_cycles_per_s", spread4);
  j.set("cluster_4t_1_master_cycles_per_s", one4);
  j.set("extend_ms_before_migration", extend_before);
  j.set("extend_ms_after_migration", extend_after);
  report.sections.set("11_cluster", std::move(j));
}

}  // namespace bench
