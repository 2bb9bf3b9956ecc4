// [async]: the asio completion tokens on the other topologies and backends: TLS, a Sentinel
// failover in the middle of an async wait, a Cluster slot migration (MOVED) in the middle of
// one and before an acquire, and the PostgreSQL and ZooKeeper locks.
#include <catch2/catch.hpp>

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <redlock/asio.hpp>
#include <redlock/redlock.hpp>

#include "async_fixture.hpp"
#include "cluster_fixture.hpp"
#include "support/eventually.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_set.hpp"
#include "util/key_slot.hpp"  // key_slot, helper_key

#if defined(REDLOCK_TESTS_WITH_POSTGRES)
#include <redlock/postgres.hpp>

#include "support/postgres_server.hpp"
#endif
#if defined(REDLOCK_TESTS_WITH_ZOOKEEPER)
#include <unistd.h>

#include <redlock/zookeeper.hpp>

#include "backends/zookeeper/zk_names.hpp"
#include "backends/zookeeper/zk_session.hpp"
#include "support/zookeeper_server.hpp"
#endif

using namespace std::chrono_literals;
using asio::use_awaitable;
using redlock::detail::helper_key;
using redlock::detail::key_slot;
using redlock::test::eventually;
using redlock::test::IoThreads;
using redlock::test::key;
using Clock = std::chrono::steady_clock;

namespace {

// Two lock objects on one name, in turn, asynchronously: `a` holds; `b` gives up after 200 ms,
// then waits and is served by `a`'s release, with a larger fence (when the backend fences).
void in_turn(IoThreads& io, redlock::LockBase& a, redlock::LockBase& b) {
  redlock::Hold first = io.await(redlock::async_acquire(a, use_awaitable));
  REQUIRE(first.holds());
  CHECK(first.validity() > 0ms);
  CHECK(io.await(redlock::async_extend(first, 20s, use_awaitable)));
  CHECK_FALSE(io.await(redlock::async_try_acquire_for(b, 200ms, use_awaitable)));
  auto second = io.spawn(redlock::async_try_acquire_for(b, 60s, use_awaitable));
  std::this_thread::sleep_for(100ms);
  CHECK(second.wait_for(0s) == std::future_status::timeout);
  const std::uint64_t fence = first.fence();
  CHECK(io.await(redlock::async_release(first, use_awaitable)));
  std::optional<redlock::Hold> got = IoThreads::await(std::move(second));
  REQUIRE(got);
  CHECK(got->holds());
  if (fence != 0) CHECK(got->fence() > fence);
  CHECK(io.await(redlock::async_release(*got, use_awaitable)));
}

}  // namespace

TEST_CASE("Async over TLS: acquire, extend, a waiter served by the release",
          "[async][redis][tls]") {
  redlock::test::ServerOptions o;
  o.tls.enabled = true;
  redlock::test::RedisServer server(o);
  redlock::Client client(server.endpoint());
  REQUIRE(client.endpoint().tls.enabled);
  IoThreads io;
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    const auto k = key(fair ? "async-tls-fair" : "async-tls");
    redlock::LockOptions options = redlock::test::parked(fair);
    options.fencing = true;
    redlock::Lock a(client, k, options);
    redlock::Lock b(redlock::Client(server.endpoint()), k, options);
    in_turn(io, a, b);
    CHECK(redlock::test::leftovers(server, k) == 0);
  }
}

namespace {

redlock::LockOptions through_failover() {
  redlock::LockOptions o;
  o.ttl = 30s;
  o.fencing = true;
  o.max_unavailable = 60s;  // the waiter waits through the failover
  o.fair = false;           // the release channel; the fair queue is not kept in order across it
  return o;
}

}  // namespace

TEST_CASE("Async Sentinel: SENTINEL FAILOVER in the middle of an async wait", "[async][sentinel]") {
  redlock::test::SentinelSet set;
  const auto k = key("async-sentinel-failover");
  IoThreads io;
  redlock::Lock holder(redlock::Client(set.uri()), k, through_failover());
  REQUIRE(holder.try_lock());
  const std::uint64_t first_fence = holder.fence();
  // The hold reaches the replicas before the failover (replication is asynchronous).
  for (std::size_t i = 1; i < set.data_count(); ++i)
    REQUIRE(eventually([&] { return set.data(i).raw({"EXISTS", k}).integer() == 1; }));
  redlock::Lock lock(redlock::Client(set.uri()), k, through_failover());
  auto waiter = io.spawn(redlock::async_acquire(lock, use_awaitable));
  std::this_thread::sleep_for(300ms);
  const std::size_t promoted = set.failover();
  CHECK(promoted != 0);
  set.await_role(0, "slave", 20s);
  CHECK(waiter.wait_for(0s) == std::future_status::timeout);  // the hold survived
  CHECK(set.data(promoted).raw({"EXISTS", k}).integer() == 1);
  holder.unlock();  // on the new master: wakes the waiter (or its next attempt finds it free)
  redlock::Hold hold = IoThreads::await(std::move(waiter), 90s);
  REQUIRE(hold.holds());
  CHECK(hold.fence() > first_fence);
  CHECK(set.data(promoted).raw({"EXISTS", k}).integer() == 1);
  CHECK(io.await(redlock::async_release(hold, use_awaitable)));
  CHECK(set.data(promoted).raw({"EXISTS", k}).integer() == 0);
}

namespace {

// A waiter parked by its wake-up alone: the holder's ttl and its retry delay are 30 s.
redlock::LockOptions cluster_waiter(bool fair) {
  redlock::LockOptions o = redlock::test::cluster_options(30s);
  o.retry_delay = 30s;
  o.fair = fair;
  return o;
}

}  // namespace

TEST_CASE("Async Cluster: the slot migrates (MOVED) in the middle of an async wait",
          "[async][cluster][redis]") {
  redlock::test::RedisCluster& cluster = redlock::test::shared_cluster();
  const auto masters = cluster.masters();
  IoThreads io;
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    const auto k = cluster.key_on(masters[0], fair ? "async-moved-fair-" : "async-moved-");
    const std::uint16_t slot = key_slot(k);
    redlock::Lock holder(redlock::Client(cluster.uri()), k, cluster_waiter(fair));
    REQUIRE(holder.try_lock());
    redlock::Lock lock(redlock::Client(cluster.uri()), k, cluster_waiter(fair));
    auto waiter = io.spawn(redlock::async_acquire(lock, use_awaitable));
    // Parked on the first master: subscribed to the sharded release channel there.
    REQUIRE(eventually(
        [&] {
          return cluster.node(masters[0])
                     .raw({"PUBSUB", "SHARDNUMSUB", helper_key(k, ":released")})
                     .elements()
                     .at(1)
                     .integer() == 1;
        },
        10s));
    cluster.migrate_slot(slot, masters[1]);
    const std::uint64_t fence = holder.fence();
    const auto released = Clock::now();
    REQUIRE(holder.release());  // follows MOVED to the new owner
    redlock::Hold hold = IoThreads::await(std::move(waiter), 60s);
    REQUIRE(hold.holds());
    CHECK(Clock::now() - released < 20s);  // its timer was 30 s away: it woke on the new owner
    CHECK(hold.fence() == fence + 1);
    CHECK(redlock::test::on_node(cluster, masters[1], k));
    CHECK(io.await(redlock::async_release(hold, use_awaitable)));
    CHECK_FALSE(redlock::test::on_node(cluster, masters[1], k));
    cluster.migrate_slot(slot, masters[0]);
  }
}

TEST_CASE("Async Cluster: an acquire whose first SET meets MOVED acquires on the new owner",
          "[async][cluster][redis]") {
  redlock::test::RedisCluster& cluster = redlock::test::shared_cluster();
  const auto masters = cluster.masters();
  IoThreads io;
  const auto k = cluster.key_on(masters[0], "async-moved-first-");
  const std::uint16_t slot = key_slot(k);
  redlock::Client client(cluster.uri());
  redlock::Lock lock(client, k, redlock::test::cluster_options());
  redlock::Hold warm = io.await(redlock::async_acquire(lock, use_awaitable));  // learns the map
  CHECK(io.await(redlock::async_release(warm, use_awaitable)));
  cluster.migrate_slot(slot, masters[1]);  // the client's map is stale now
  redlock::Hold hold = io.await(redlock::async_acquire(lock, use_awaitable));
  REQUIRE(hold.holds());
  CHECK(redlock::test::on_node(cluster, masters[1], k));
  CHECK(io.await(redlock::async_extend(hold, 20s, use_awaitable)));
  CHECK(redlock::test::pttl(cluster, masters[1], k) > 10'000);
  CHECK(io.await(redlock::async_release(hold, use_awaitable)));
  CHECK_FALSE(redlock::test::on_node(cluster, masters[1], k));
  cluster.migrate_slot(slot, masters[0]);
}

#if defined(REDLOCK_TESTS_WITH_POSTGRES)
TEST_CASE("Async postgres::Lock: two holders in turn", "[async][postgres]") {
  REQUIRE_POSTGRES();
  redlock::test::PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::LockOptions options;
  options.ttl = 30s;
  options.retry_delay = 20ms;
  redlock::postgres::Lock a(db, "async-job", options);
  redlock::postgres::Lock b(db, "async-job", options);
  IoThreads io;
  in_turn(io, a, b);
  CHECK(server.psql("SELECT count(*) FROM redlock_leases WHERE expires_at > now()") == "0");
}
#endif

#if defined(REDLOCK_TESTS_WITH_ZOOKEEPER)
TEST_CASE("Async zookeeper::Lock: two holders in turn, no znode left", "[async][zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string chroot = "/redlock-async-test-" + std::to_string(::getpid());
  const std::string uri = server.uri(chroot + "?session_timeout=4000");
  redlock::zookeeper::Session s1(uri), s2(uri);
  redlock::zookeeper::Lock a(s1, "res"), b(s2, "res");
  IoThreads io;
  in_turn(io, a, b);
  redlock::detail::ZkSession session(uri);
  std::vector<std::string> children;
  redlock::detail::zk_children(*session.conn(), chroot + "/res", &children);
  CHECK(redlock::detail::zk_queue_of(children).empty());
}
#endif
