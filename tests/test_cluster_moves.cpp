// tests/test_cluster_moves.cpp: a Redis Cluster that changes under a lock: slot migration
// (MOVED), ASK in the middle of one, CLUSTER FAILOVER, kill -9 of a master, migrations under
// renewal, waiting and contention; and WAIT behind a NOSCRIPT fallback.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "cluster_fixture.hpp"
#include "util/key_slot.hpp"  // key_slot, helper_key: what the library computes

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::detail::key_slot;
using redlock::test::cluster_options;
using redlock::test::key;
using redlock::test::on_node;
using redlock::test::pttl;
using redlock::test::RedisCluster;
using redlock::test::shared_cluster;
using Clock = std::chrono::steady_clock;

namespace {

// A lock held on a key that masters()[0] owns, through a Client of the whole cluster.
struct Held {
  explicit Held(const std::string& base, const redlock::LockOptions& options = cluster_options())
      : k(cluster.key_on(masters.at(0), base)), slot(key_slot(k)), lock(client, k, options) {
    REQUIRE(lock.try_lock());
    fence = lock.fence();
  }
  RedisCluster& cluster = shared_cluster();
  redlock::Client client{cluster.uri()};
  const std::vector<std::size_t> masters = cluster.masters();
  const std::string k;
  const std::uint16_t slot;
  redlock::Lock lock;
  std::uint64_t fence{0};
};

}  // namespace

TEST_CASE("Cluster: a held lock's slot moves to another master, extend and release follow MOVED",
          "[cluster][redis]") {
  Held held("migrate-");
  auto& [cluster, client, masters, k, slot, lock, fence] = held;
  cluster.migrate_slot(slot, masters[1]);
  CHECK(on_node(cluster, masters[1], k));
  CHECK(on_node(cluster, masters[1], helper_key(k, ":fence")));
  CHECK(lock.extend(20s));  // MOVED, then on the new owner
  CHECK(pttl(cluster, masters[1], k) > 10'000);
  redlock::Lock other(redlock::Client(cluster.endpoint()), k, cluster_options());
  CHECK_FALSE(other.try_lock());  // no double grant on the new owner
  lock.unlock();
  CHECK_FALSE(on_node(cluster, masters[1], k));
  REQUIRE(other.try_lock());
  CHECK(other.fence() == fence + 1);  // the counter moved with the slot
  other.unlock();
  cluster.migrate_slot(slot, masters[0]);
}

TEST_CASE(
    "Cluster: in the middle of a migration, ASK sends extend, acquire and release to the "
    "importing master",
    "[cluster][redis]") {
  // The plain (wake-on-release) scripts, on the lock key and the fence only: the fair queue's
  // scripts also name the queue's keys, which do not exist, and Redis answers TRYAGAIN to a
  // script whose keys are not all on one side of a migrating slot (docs/topologies.md).
  redlock::LockOptions plain = cluster_options();
  plain.fair = false;
  Held held("ask-", plain);
  auto& [cluster, client, masters, k, slot, lock, fence] = held;
  cluster.begin_migration(slot, masters[0], masters[1]);
  CHECK(lock.extend(20s));  // the keys are still on the migrating master: served there
  cluster.move_keys(slot, masters[0], masters[1]);
  CHECK(on_node(cluster, masters[1], k));
  CHECK(lock.extend(25s));  // ASK: ASKING + the extend on the importing master
  CHECK(pttl(cluster, masters[1], k) > 20'000);
  redlock::Lock other(client, k, plain);
  CHECK_FALSE(other.try_lock());
  lock.unlock();
  CHECK_FALSE(on_node(cluster, masters[1], k));
  // Now the fence counter is on the importing master and the lock key on neither: a script on
  // both keys gets TRYAGAIN until the migration ends, and never a grant.
  CHECK_THROWS_AS(other.try_lock(), redlock::ConnectionError);
  CHECK_FALSE(on_node(cluster, masters[0], k));
  CHECK_FALSE(on_node(cluster, masters[1], k));
  // Nothing was learnt from ASK: the slot still belongs to the source until SETSLOT NODE.
  CHECK(cluster.owner(slot) == masters[0]);
  cluster.finish_migration(slot, masters[1]);
  cluster.await_ok();
  REQUIRE(other.try_lock());
  CHECK(other.fence() == fence + 1);
  CHECK(on_node(cluster, masters[1], k));
  other.unlock();
  cluster.migrate_slot(slot, masters[0]);
}

TEST_CASE("Cluster: CLUSTER FAILOVER keeps a hold, extend and release reach the promoted master",
          "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  redlock::Client client(cluster.uri() + "?wait_replicas=1&wait_timeout=500&command_timeout=2000");
  const auto masters = cluster.masters();
  const auto k = cluster.key_on(masters[0], "failover-");
  redlock::Lock lock(client, k, cluster_options());
  REQUIRE(lock.try_lock_for(10s));  // acknowledged by the replica (WAIT 1; retried if slow)
  const std::size_t replica = cluster.replica_of(masters[0]);
  cluster.failover(replica);  // a manual failover: the replica catches up first
  CHECK(lock.extend(20s));    // MOVED from the demoted master
  CHECK(pttl(cluster, replica, k) > 10'000);
  redlock::Lock other(client, k, cluster_options());
  CHECK_FALSE(other.try_lock());
  CHECK(lock.release());
  CHECK_FALSE(on_node(cluster, replica, k));
  // The cluster keeps its new shape (failing back at once is refused by Redis for a while);
  // every case asks masters() and replica_of() afresh.
}

TEST_CASE(
    "Cluster: kill -9 of a master, with wait_replicas the hold survives on the promoted "
    "replica",
    "[cluster][redis][slow]") {
  RedisCluster cluster;  // its own: this one loses a master
  redlock::Client client(cluster.uri() + "?wait_replicas=1&wait_timeout=500&command_timeout=2000");
  const auto masters = cluster.masters();
  const auto k = cluster.key_on(masters[0], "kill-");
  redlock::Lock lock(client, k, cluster_options(30s));
  REQUIRE(lock.try_lock_for(10s));  // a replica slow to acknowledge is retried
  const auto fence = lock.fence();
  const std::size_t replica = cluster.replica_of(masters[0]);
  cluster.node(masters[0]).kill9();
  // (command_timeout 1 s: every extend on a master without a replica waits wait_timeout for
  // WAIT, twice after a NOSCRIPT, and the machine is busy.)
  // Until the replica is promoted (cluster-node-timeout 1 s, then an election) an extend fails
  // with a ConnectionError or TimeoutError (the lease is unaffected). The promoted replica has no
  // replica of its own, so then the extend reaches it and fails with ReplicationError: WAIT 1 can
  // no longer be met, and the lease keeps its ttl. It never says the lease is gone.
  const auto deadline = Clock::now() + 20s;
  bool reached = false;
  std::size_t failures = 0;
  std::string last_error;
  while (!reached && Clock::now() < deadline) {
    try {
      lock.extend(30s);
      FAIL("an extend was confirmed without a replica");
    } catch (const redlock::ReplicationError&) {
      reached = true;
    } catch (const redlock::Error& e) {
      ++failures;
      last_error = e.what();
      std::this_thread::sleep_for(100ms);
    }
  }
  INFO("after " << failures << " failed extends, the last said: " << last_error);
  REQUIRE(reached);
  CHECK(failures > 0);
  CHECK(cluster.node(replica).raw({"ROLE"}).elements().at(0).str() == "master");
  CHECK(pttl(cluster, replica, k) > 0);  // the hold survived, acknowledged by WAIT before
  redlock::Client plain(cluster.uri({replica}));
  redlock::Lock other(plain, k, cluster_options());
  CHECK_FALSE(other.try_lock());  // no double grant after the failover
  CHECK(lock.release());
  REQUIRE(other.try_lock());
  CHECK(other.fence() == fence + 1);
  other.unlock();
}

// An EVALSHA answered NOSCRIPT is re-sent as EVAL, and the WAIT pipelined behind it is re-sent
// behind the EVAL (else it counted the replicas before the write): with the replica stopped, the
// re-sent grant is never confirmed. (Whether the first WAIT would have said 1 depends on the
// server's acknowledgement bookkeeping, so this checks the outcome, not the old mistake.)
TEST_CASE("wait_replicas: after NOSCRIPT the WAIT is sent again behind the EVAL", "[redis][wait]") {
  redlock::test::RedisServer master;
  redlock::test::ServerOptions ro;
  ro.extra_args = {"--replicaof", "127.0.0.1", std::to_string(master.port())};
  redlock::test::RedisServer replica(ro);
  const auto deadline = Clock::now() + 10s;
  while (master.raw({"INFO", "replication"}).str().find("state=online") == std::string::npos) {
    REQUIRE(Clock::now() < deadline);
    std::this_thread::sleep_for(20ms);
  }
  redlock::Endpoint e = master.endpoint();
  e.wait_replicas = 1;
  e.wait_timeout = 100ms;
  e.command_timeout = 1s;  // two WAITs may run: the one behind NOSCRIPT, and the one re-sent
  redlock::Client client(e);
  redlock::Lock warm(client, key("noscript-warm"), cluster_options());
  // A pooled connection, the scripts loaded. Its grant needs the replica's acknowledgement within
  // 100 ms, which a busy machine once missed (ReplicationError): try again; what this case checks
  // comes after.
  bool warmed = false;
  for (int i = 0; i < 10 && !warmed; ++i) {
    try {
      warmed = warm.try_lock();
    } catch (const redlock::ReplicationError&) {
    }
  }
  REQUIRE(warmed);
  warm.unlock();
  master.raw({"SCRIPT", "FLUSH"});
  // The replica has acknowledged everything so far; then it stops.
  REQUIRE(
      master.raw_pipeline({{"SET", key("sync"), "1"}, {"WAIT", "1", "5000"}}, 6s).at(1).integer() ==
      1);
  replica.pause();
  redlock::Lock lock(client, key("noscript"), cluster_options());
  CHECK_THROWS_AS(lock.try_lock(), redlock::ReplicationError);
  replica.resume();
  CHECK(master.raw({"EXISTS", key("noscript")}).integer() == 0);  // rolled back
}

TEST_CASE(
    "Cluster: a slot migrates under a renewed hold and a waiting waiter, the hold survives "
    "and the waiter wakes on the new owner",
    "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  redlock::Client client(cluster.uri());
  const auto masters = cluster.masters();
  const auto k = cluster.key_on(masters[1], "under-load-");
  const std::uint16_t slot = key_slot(k);
  redlock::LockOptions renewed = cluster_options(1s);
  renewed.auto_renew = true;
  redlock::Lock holder(client, k, renewed);
  REQUIRE(holder.try_lock());
  const auto fence = holder.fence();
  redlock::LockOptions patient = cluster_options();
  patient.retry_delay = 10s;  // only the release message wakes it in time
  redlock::Lock waiter(redlock::Client(cluster.uri()), k, patient);
  std::atomic<bool> got{false};
  std::atomic<bool> early{false};
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> released{false};
  std::thread t([&] {
    got = waiter.try_lock_for(20s);
    early = !released.load();
    next = waiter.fence();
    if (got) waiter.unlock();
  });
  std::this_thread::sleep_for(300ms);
  cluster.migrate_slot(slot, masters[2]);
  std::this_thread::sleep_for(2s);  // two ttls: renewals must have reached the new owner
  CHECK(holder.validity() > 0ms);
  CHECK(pttl(cluster, masters[2], k) > 0);
  released = true;
  CHECK(holder.release());
  t.join();
  CHECK(got.load());
  CHECK_FALSE(early.load());  // never granted while held
  CHECK(next.load() == fence + 1);
  cluster.migrate_slot(slot, masters[1]);
}

TEST_CASE("Cluster: contention while the slots migrate back and forth: no overlap, fences grow",
          "[cluster][redis][slow]") {
  RedisCluster& cluster = shared_cluster();
  const auto masters = cluster.masters();
  const std::string keys[] = {
      cluster.key_on(masters[0], "churn-"),
      key("churn{" + std::to_string(Clock::now().time_since_epoch().count()) + "}")};
  std::atomic<bool> in_use[2] = {{false}, {false}};
  std::atomic<std::uint64_t> last_fence[2] = {{0}, {0}};
  std::atomic<int> overlaps{0}, inversions{0}, holds{0}, errors{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      redlock::Client client(cluster.uri());
      redlock::LockOptions o = cluster_options(5s);
      o.retry_delay = 5ms;
      redlock::Lock lock(client, keys[w % 2], o);
      while (!stop) {
        try {
          if (!lock.try_lock_for(2s)) continue;
        } catch (const redlock::Error&) {
          ++errors;  // mid-migration: the slot's keys split between two masters (TRYAGAIN)
          continue;
        }
        const int j = w % 2;
        if (in_use[j].exchange(true)) ++overlaps;
        const std::uint64_t f = lock.fence();
        if (f <= last_fence[j].exchange(f)) ++inversions;
        ++holds;
        std::this_thread::sleep_for(1ms);
        in_use[j] = false;
        try {
          lock.unlock();
        } catch (const redlock::Error&) {
          ++errors;  // the lease then expires on its own
        }
      }
    });
  }
  for (int round = 0; round < 3; ++round) {
    for (const auto& k : keys) {
      const std::uint16_t slot = key_slot(k);
      const std::size_t owner = cluster.owner(slot);
      cluster.migrate_slot(slot, owner == masters[0] ? masters[2] : masters[0]);
    }
    std::this_thread::sleep_for(200ms);
  }
  stop = true;
  for (auto& t : workers) t.join();
  INFO("holds " << holds << ", errors " << errors);
  CHECK(overlaps == 0);
  CHECK(inversions == 0);
  CHECK(holds > 20);
}

// The demo's cluster run saw two holders at its CLUSTER FAILOVER with the fair queue (a grant
// heard through a replica: test_cluster_wake.cpp). Waiters of several processes (one Client
// each) queue for one key while its master fails over twice, there and back.
TEST_CASE("Cluster: fair contention through CLUSTER FAILOVERs: no overlap, fences grow",
          "[cluster][redis][fair][slow]") {
  RedisCluster& cluster = shared_cluster();
  const std::size_t master = cluster.masters()[1];
  const auto k = cluster.key_on(master, "fair-failover-");
  std::atomic<bool> in_use{false};
  std::atomic<std::uint64_t> last_fence{0};
  std::atomic<int> overlaps{0}, inversions{0}, holds{0}, errors{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 6; ++w) {
    workers.emplace_back([&] {
      redlock::Client client(cluster.uri());
      redlock::LockOptions o = cluster_options(5s);
      o.fair = true;
      redlock::Lock lock(client, k, o);
      while (!stop) {
        try {
          if (!lock.try_lock_for(2s)) continue;
        } catch (const redlock::Error&) {
          ++errors;  // the master is being replaced
          continue;
        }
        if (in_use.exchange(true)) ++overlaps;
        const std::uint64_t f = lock.fence();
        if (f <= last_fence.exchange(f)) ++inversions;
        ++holds;
        std::this_thread::sleep_for(1ms);
        in_use = false;
        try {
          lock.unlock();
        } catch (const redlock::Error&) {
          ++errors;  // the lease then expires on its own
        }
      }
    });
  }
  std::this_thread::sleep_for(500ms);
  std::size_t owner = master;
  for (int round = 0; round < 2; ++round) {
    const std::size_t replica = cluster.replica_of(owner);
    cluster.failover(replica);
    owner = replica;
    std::this_thread::sleep_for(1s);
  }
  stop = true;
  for (auto& t : workers) t.join();
  INFO("holds " << holds << ", errors " << errors);
  CHECK(overlaps == 0);
  CHECK(inversions == 0);
  CHECK(holds > 20);
}
