// tests/test_cluster.cpp: locks on a real Redis Cluster (3 masters, 3 replicas on loopback):
// routing by slot, helper keys in the lock key's slot, MOVED after a slot migration, ASK in the
// middle of one, seeds that are down.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <redlock/redlock.hpp>

#include "support/redis_cluster.hpp"
#include "util/key_slot.hpp"  // key_slot, helper_key: what the library computes

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::detail::key_slot;
using redlock::test::key;
using redlock::test::RedisCluster;
using Clock = std::chrono::steady_clock;

namespace {

// One cluster for the cases that leave its shape as they found it (creating one takes seconds).
RedisCluster& shared_cluster() {
  static RedisCluster cluster;
  return cluster;
}

redlock::LockOptions options(std::chrono::milliseconds ttl = 10s) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.fencing = true;
  return o;
}

// The keys a lock on `k` leaves on the server must all be on `node`.
bool on_node(RedisCluster& cluster, std::size_t node, const std::string& k) {
  return cluster.node(node).raw({"EXISTS", k}).integer() == 1;
}

}  // namespace

TEST_CASE("Cluster URIs: seeds, default port, address, round trip; no database",
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
    for (const char* suffix : {":fence", ":released", ":queue", ":queue:info", ":permit:3"}) {
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
    redlock::Lock lock(client, k, options());
    REQUIRE(lock.try_lock());
    CHECK(lock.fence() == 1);
    CHECK(on_node(cluster, owner, k));
    CHECK(on_node(cluster, owner, helper_key(k, ":fence")));
    redlock::Lock other(client, k, options());
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
