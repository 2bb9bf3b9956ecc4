// tests/test_cluster.cpp: locks on a real Redis Cluster (3 masters, 3 replicas on loopback):
// URIs, slots and helper keys, routing to every master, wake-on-release, fair mode, the
// watchdog, a Semaphore, seeds that are down. Moves and failures: test_cluster_moves.cpp.
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

TEST_CASE("Cluster URIs: seeds, default port, address, round trip, no database",
          "[unit][cluster]") {
  const auto e =
      redlock::Endpoint::parse("redis-cluster://app:pw@10.0.0.1:7000,10.0.0.2?command_timeout=300");
  REQUIRE(e.cluster.seeds.size() == 2);
  CHECK(e.cluster.seeds[0].host == "10.0.0.1");
  CHECK(e.cluster.seeds[0].port == 7000);
  CHECK(e.cluster.seeds[1].port == 6379);
  CHECK(e.username == "app");
  CHECK(e.password == "pw");
  CHECK(e.command_timeout == 300ms);
  CHECK(e.address() == "cluster:10.0.0.1:7000,10.0.0.2:6379");
  CHECK(e.to_string() == "redis-cluster://app:***@10.0.0.1:7000,10.0.0.2:6379?command_timeout=300");
  CHECK_THROWS_AS(redlock::Endpoint::parse("redis-cluster://h:7000/2"), std::invalid_argument);
  CHECK_THROWS_AS(redlock::Endpoint::parse("redis-cluster://h:7000?db=1"), std::invalid_argument);
#if defined(REDLOCK_WITH_TLS)
  CHECK(redlock::Endpoint::parse("rediss-cluster://h:7000").tls.enabled);
#endif
}

TEST_CASE("Cluster: CLUSTER KEYSLOT agrees with the library's slots and helper names",
          "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  const std::string keys[] = {key("plain"), key("orders{42}:lock"), "{x}y"};
  for (const std::string& k : keys) {
    INFO(k);
    CHECK(cluster.keyslot(k) == key_slot(k));
    for (const char* suffix : {":fence", ":released", ":waiters", ":waiters:info", ":permit:3"}) {
      CHECK(cluster.keyslot(helper_key(k, suffix)) == cluster.keyslot(k));
    }
  }
}

TEST_CASE("Cluster: lock, fence, extend and release on each master and on a tagged key",
          "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  redlock::Client client(cluster.uri());
  const auto masters = cluster.masters();
  REQUIRE(masters.size() == 3);
  std::vector<std::pair<std::string, std::size_t>> keys;
  for (std::size_t m : masters) keys.emplace_back(cluster.key_on(m, "each-master-"), m);
  const std::string tagged =
      key("orders{" + std::to_string(Clock::now().time_since_epoch().count()) + "}:lock");
  keys.emplace_back(tagged, cluster.owner(cluster.keyslot(tagged)));
  for (const auto& [k, owner] : keys) {
    INFO(k);
    redlock::Lock lock(client, k, cluster_options());
    REQUIRE(lock.try_lock());
    CHECK(lock.fence() == 1);
    CHECK(on_node(cluster, owner, k));
    CHECK(on_node(cluster, owner, helper_key(k, ":fence")));
    redlock::Lock other(client, k, cluster_options());
    CHECK_FALSE(other.try_lock());
    CHECK(lock.extend(20s));
    CHECK(cluster.node(owner).raw({"PTTL", k}).integer() > 10'000);
    lock.unlock();
    CHECK_FALSE(on_node(cluster, owner, k));
    REQUIRE(other.try_lock());
    CHECK(other.fence() == 2);
    other.unlock();
  }
}

TEST_CASE("Cluster: wake-on-release and fair hand-over on every master", "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  redlock::Client client(cluster.uri());
  for (std::size_t m : cluster.masters()) {
    for (const bool fair : {false, true}) {
      const auto k = cluster.key_on(m, fair ? "fair-" : "wake-");
      INFO(k);
      redlock::LockOptions o = cluster_options();
      o.fair = fair;
      o.retry_delay = 10s;  // only a release message can wake the waiter in time
      redlock::Lock holder(client, k, o);
      REQUIRE(holder.try_lock());
      const auto fence = holder.fence();
      redlock::Lock waiter(redlock::Client(cluster.uri()), k, o);
      std::atomic<bool> got{false};
      std::atomic<std::uint64_t> next{0};
      std::thread t([&] {
        got = waiter.try_lock_for(8s);
        next = waiter.fence();
        if (got) waiter.unlock();
      });
      std::this_thread::sleep_for(300ms);  // the waiter's first attempt is refused
      const auto released = Clock::now();
      holder.unlock();
      t.join();
      REQUIRE(got.load());
      CHECK(Clock::now() - released < 5s);
      CHECK(next.load() == fence + 1);
    }
  }
}

TEST_CASE("Cluster: the watchdog renews holds on all three masters", "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  redlock::Client client(cluster.uri());
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  for (std::size_t m : cluster.masters()) {
    redlock::LockOptions o = cluster_options(1s);
    o.auto_renew = true;
    locks.push_back(std::make_unique<redlock::Lock>(client, cluster.key_on(m, "renew-"), o));
    REQUIRE(locks.back()->try_lock());
  }
  std::this_thread::sleep_for(2500ms);  // 2.5 ttls
  for (auto& lock : locks) {
    CHECK(lock->validity() > 0ms);
    CHECK(lock->release());
  }
}

TEST_CASE("Cluster: a seed that is down at start is skipped, all seeds down is a clear error",
          "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  const auto masters = cluster.masters();
  const std::size_t replica = cluster.replica_of(masters[2]);
  cluster.node(replica).kill9();
  {
    redlock::Client client(cluster.uri({replica, masters[1]}));
    redlock::Lock lock(client, cluster.key_on(masters[2], "seed-down-"), cluster_options());
    CHECK(lock.try_lock());
    lock.unlock();
  }
  {
    redlock::test::RedisServer gone;
    const int port = gone.port();
    gone.kill9();
    redlock::Client client("redis-cluster://127.0.0.1:" + std::to_string(port) +
                           ",127.0.0.1:" + std::to_string(cluster.node(replica).port()));
    redlock::LockOptions o = cluster_options();
    o.max_unavailable = 1s;
    redlock::Lock lock(client, key("all-seeds-down"), o);
    const auto start = Clock::now();
    CHECK_THROWS_AS(lock.try_lock(), redlock::ConnectionError);
    CHECK_THROWS_AS(lock.lock(), redlock::Error);  // gives up after max_unavailable
    CHECK(Clock::now() - start < 10s);
    try {
      lock.try_lock();
    } catch (const redlock::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("CLUSTER SLOTS"));
    }
  }
  cluster.node(replica).restart();
  cluster.await_ok();
}

TEST_CASE("Cluster: a Semaphore's permits share its key's slot, keys that cannot are refused",
          "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  redlock::Client client(cluster.uri());
  const auto masters = cluster.masters();
  const auto k = cluster.key_on(masters[2], "sem-");
  redlock::Semaphore a(client, k, 2, cluster_options()), b(client, k, 2, cluster_options()),
      c(client, k, 2, cluster_options());
  REQUIRE(a.try_acquire());
  REQUIRE(b.try_acquire());
  CHECK_FALSE(c.try_acquire());
  CHECK(on_node(cluster, masters[2], helper_key(k, ":permit:1")));
  CHECK(a.release());
  REQUIRE(c.try_acquire());
  CHECK(c.fence() > b.fence());
  CHECK(b.release());
  CHECK(c.release());
  CHECK_THROWS_AS(redlock::Lock(client, key("no}tag"), cluster_options()), std::invalid_argument);
  CHECK_THROWS_AS(redlock::Semaphore(client, key("no}tag"), 2, cluster_options()),
                  std::invalid_argument);
  CHECK_NOTHROW(redlock::Lock(client, key("a{tag}b}"), cluster_options()));
}

TEST_CASE("Cluster: a slot with no owner (the cluster is down for it) is a clear error, in time",
          "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  const auto masters = cluster.masters();
  const auto k = cluster.key_on(masters[2], "orphan-");
  const std::string slot = std::to_string(key_slot(k));
  redlock::Client client(cluster.uri());
  redlock::LockOptions o = cluster_options();
  o.max_unavailable = 1s;
  redlock::Lock lock(client, k, o);
  REQUIRE(lock.try_lock());  // the slot map is known
  lock.unlock();
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    cluster.node(i).raw({"CLUSTER", "DELSLOTS", slot});  // nobody serves it now
  }
  const auto start = Clock::now();
  try {
    lock.try_lock();
    FAIL("granted on a slot nobody serves");
  } catch (const redlock::ConnectionError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK((what.find("down") != std::string::npos || what.find("owns slot") != std::string::npos));
  }
  CHECK_THROWS_AS(lock.lock(), redlock::Error);  // gives up after max_unavailable
  CHECK(Clock::now() - start < 10s);
  cluster.node(masters[2]).raw({"CLUSTER", "ADDSLOTS", slot});
  cluster.await_ok();
  CHECK(lock.try_lock());
  lock.unlock();
}
