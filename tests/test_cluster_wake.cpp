// tests/test_cluster_wake.cpp: wake-on-release on a Redis Cluster through sharded pub/sub
// (SSUBSCRIBE on the slot's owner, SPUBLISH in the release scripts): on every master, while the
// slot migrates, after the subscriber's master is killed; and a Redlock over three clusters.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <hiredis/hiredis.h>

#include <redlock/redlock.hpp>

#include "cluster_fixture.hpp"
#include "protocol/scripts.hpp"  // the fair queue's script, to join the queue as a waiter does
#include "util/key_slot.hpp"     // key_slot, helper_key: what the library computes

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::detail::key_slot;
using redlock::test::cluster_options;
using redlock::test::RedisCluster;
using redlock::test::shared_cluster;
using Clock = std::chrono::steady_clock;

namespace {

// The release channel's sharded subscribers on `node` (PUBSUB SHARDNUMSUB).
long long shard_subscribers(const RedisCluster& cluster, std::size_t node,
                            const std::string& channel) {
  return cluster.node(node).raw({"PUBSUB", "SHARDNUMSUB", channel}).elements().at(1).integer();
}

// Its classic subscribers (PUBSUB NUMSUB), summed over every running node.
long long classic_subscribers(const RedisCluster& cluster, const std::string& channel) {
  long long sum = 0;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    if (!cluster.node(i).running()) continue;
    sum += cluster.node(i).raw({"PUBSUB", "NUMSUB", channel}).elements().at(1).integer();
  }
  return sum;
}

// Waits (at most `limit`) until `node` counts `count` sharded subscribers of `channel`.
bool await_shard_subscribers(const RedisCluster& cluster, std::size_t node,
                             const std::string& channel, long long count,
                             std::chrono::milliseconds limit = 10s) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (shard_subscribers(cluster, node, channel) == count) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// A waiter that would wake by its timer only after 30 s (the holder's ttl and its retry_delay):
// if it gets the lock within a few seconds of the release, a release message woke it.
struct Waiter {
  Waiter(const std::string& uri, const std::string& k, const redlock::LockOptions& o)
      : lock(redlock::Client(uri), k, o) {
    thread = std::thread([this] {
      try {
        got = lock.try_lock_for(25s);
        woke_at = Clock::now();
        fence = lock.fence();
        if (got) lock.unlock();
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
  }
  ~Waiter() {
    if (thread.joinable()) thread.join();
  }
  static redlock::LockOptions options(bool fair = false) {
    redlock::LockOptions o = cluster_options(30s);
    o.retry_delay = 30s;
    o.fair = fair;
    return o;
  }
  redlock::Lock lock;
  std::atomic<bool> got{false};
  Clock::time_point woke_at;
  std::uint64_t fence{0};
  std::string error;  // what try_lock_for threw, if it did
  std::thread thread;
};

// Releases `holder` and checks that the waiter got the lock soon after (a wake, not its timer),
// with the next fence.
void release_and_check_wake(redlock::Lock& holder, Waiter& waiter) {
  const auto fence = holder.fence();
  const auto released = Clock::now();
  REQUIRE(holder.release());
  waiter.thread.join();
  INFO(waiter.error);
  REQUIRE(waiter.got.load());
  CHECK(waiter.woke_at - released < 5s);  // the timer would have taken 30 s
  CHECK(waiter.fence == fence + 1);
}

// A lock held for 30 s on a key that `master` owns, and a Waiter on it (another Client) whose
// sharded subscription is live on that master.
struct Waiting {
  Waiting(RedisCluster& cluster, std::size_t master, const std::string& base, bool fair = false)
      : k(cluster.key_on(master, base)),
        channel(helper_key(k, ":released")),
        client(cluster.uri()),
        holder(client, k, Waiter::options(fair)) {
    REQUIRE(holder.try_lock());
    waiter = std::make_unique<Waiter>(cluster.uri(), k, Waiter::options(fair));
    REQUIRE(await_shard_subscribers(cluster, master, channel, 1));
  }
  void release_and_check_wake() { ::release_and_check_wake(holder, *waiter); }
  const std::string k;
  const std::string channel;
  redlock::Client client;
  redlock::Lock holder;
  std::unique_ptr<Waiter> waiter;
};

}  // namespace

TEST_CASE(
    "Cluster: wake-on-release goes through sharded pub/sub on the slot's owner, on each "
    "master, fair or not",
    "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  for (std::size_t m : cluster.masters()) {
    for (const bool fair : {false, true}) {
      Waiting w(cluster, m, fair ? "sfair-" : "swake-", fair);
      INFO(w.k);
      // The waiter's subscription is a sharded one on the owner, and no classic one anywhere.
      CHECK(classic_subscribers(cluster, w.channel) == 0);
      w.release_and_check_wake();
    }
  }
}

TEST_CASE(
    "Cluster: a waiter whose slot migrates to another master resubscribes there and wakes, fair "
    "(queued) or not",
    "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  const auto masters = cluster.masters();
  for (const bool fair : {false, true}) {
    Waiting w(cluster, masters[0], fair ? "smigrate-fair-" : "smigrate-", fair);
    INFO(w.k);
    const std::uint16_t slot = key_slot(w.k);
    cluster.migrate_slot(slot, masters[1]);  // the queue moves with the slot's keys
    // The old owner dropped the subscription (sunsubscribe); the waiter made it on the new one.
    CHECK(await_shard_subscribers(cluster, masters[1], w.channel, 1));
    CHECK(shard_subscribers(cluster, masters[0], w.channel) == 0);
    w.release_and_check_wake();
    cluster.migrate_slot(slot, masters[0]);
  }
}

TEST_CASE(
    "Cluster: a waiter whose master is killed resubscribes on the promoted replica and "
    "wakes",
    "[cluster][redis][slow]") {
  RedisCluster cluster;  // its own: this one loses a master
  const auto masters = cluster.masters();
  const std::size_t replica = cluster.replica_of(masters[0]);
  // The holder's Client has the waiter's settings: one slot map, which the waiter's
  // resubscription refreshes, so the release finds the promoted replica.
  Waiting w(cluster, masters[0], "skill-");
  // The hold reaches the replica before the kill, so it survives the failover.
  const auto synced = Clock::now() + 10s;
  while (cluster.node(replica).raw_pipeline({{"READONLY"}, {"EXISTS", w.k}}).at(1).integer() != 1) {
    REQUIRE(Clock::now() < synced);
    std::this_thread::sleep_for(20ms);
  }
  cluster.node(masters[0]).kill9();
  // Promotion takes the node timeout (1 s) and an election; then the waiter subscribes there.
  REQUIRE(await_shard_subscribers(cluster, replica, w.channel, 1, 20s));
  // The holder's token is released on the new master (the key came over with the replication).
  w.release_and_check_wake();
  CHECK(classic_subscribers(cluster, w.channel) == 0);
}

// The demoted master unsubscribes the waiter at once, while the node the waiter asks for the
// slot map may not have heard of the failover yet and name the demoted master again (which, a
// replica of the shard now, would accept SSUBSCRIBE): on a busy machine this failed 3 runs of 6
// before the watch learned to skip the node that dropped it.
TEST_CASE(
    "Cluster: a waiter whose master is demoted by CLUSTER FAILOVER resubscribes on the "
    "promoted replica and wakes",
    "[cluster][redis]") {
  RedisCluster& cluster = shared_cluster();
  const auto masters = cluster.masters();
  const std::size_t replica = cluster.replica_of(masters[2]);
  Waiting w(cluster, masters[2], "sdemote-");
  cluster.failover(replica);  // a manual failover: the replica catches up first
  // The demoted master no longer serves the slot's channels; the waiter subscribed again.
  CHECK(await_shard_subscribers(cluster, replica, w.channel, 1));
  CHECK(shard_subscribers(cluster, masters[2], w.channel) == 0);
  w.release_and_check_wake();
}

namespace {

// A sharded subscription of `channel` on `node` (hiredis, not the library), and the messages
// that reach it.
struct ShardListener {
  ShardListener(const RedisCluster& cluster, std::size_t node, const std::string& channel) {
    const timeval tv{5, 0};
    ctx = redisConnectWithTimeout("127.0.0.1", cluster.node(node).port(), tv);
    REQUIRE(ctx != nullptr);
    REQUIRE(ctx->err == 0);
    const char* argv[] = {"SSUBSCRIBE", channel.c_str()};
    const std::size_t lens[] = {10, channel.size()};
    void* reply = redisCommandArgv(ctx, 2, argv, lens);
    REQUIRE(reply != nullptr);
    freeReplyObject(reply);
  }
  ~ShardListener() { redisFree(ctx); }
  ShardListener(const ShardListener&) = delete;
  ShardListener& operator=(const ShardListener&) = delete;
  // The payload of the next message, or "" if none comes within `wait`.
  std::string next(std::chrono::milliseconds wait) {
    const timeval tv{static_cast<time_t>(wait.count() / 1000),
                     static_cast<suseconds_t>(wait.count() % 1000 * 1000)};
    redisSetTimeout(ctx, tv);
    void* raw = nullptr;
    if (redisGetReply(ctx, &raw) != REDIS_OK || raw == nullptr) return "";
    auto* message = static_cast<redisReply*>(raw);
    std::string payload;
    if (message->type == REDIS_REPLY_ARRAY && message->elements == 3) {
      payload.assign(message->element[2]->str, message->element[2]->len);
    }
    freeReplyObject(raw);
    return payload;
  }
  redisContext* ctx{nullptr};
};

}  // namespace

// A node counts only its own subscribers in SPUBLISH's answer, yet sends the message on to the
// other nodes of its shard, where a replica delivers it to its subscribers too. A waiter whose
// sharded subscription lives on a replica (a demoted master that a stale map named again after
// a CLUSTER FAILOVER, which accepts SSUBSCRIBE as a replica) heard grants that the master took
// for unheard: the master dropped the entry and gave the key to the next waiter (or freed it),
// while the waiter held by the grant it heard (two holders; the demo's cluster run saw it at
// its CLUSTER FAILOVER). The waiter here joins the queue as the library does, with its channel
// subscribed on the replica only.
TEST_CASE(
    "Cluster: a fair grant is never heard through a replica while the master re-grants the key",
    "[cluster][redis][fair]") {
  RedisCluster& cluster = shared_cluster();
  const std::size_t master = cluster.masters()[1];
  const std::size_t replica = cluster.replica_of(master);
  redlock::LockOptions o = cluster_options(30s);
  o.fair = true;
  redlock::Client client(cluster.uri());
  const auto k = cluster.key_on(master, "replica-grant-");
  redlock::Lock holder(client, k, o);
  REQUIRE(holder.try_lock());

  const std::string token = "waiter-on-a-replica";
  const std::string channel = helper_key(k, ":released:") + "0123456789abcdef";
  ShardListener listener(cluster, replica, channel);
  REQUIRE(shard_subscribers(cluster, master, channel) == 0);
  const auto& join = redlock::detail::Scripts::get().fair_acquire;
  const auto joined = cluster.node(master).raw(
      {"EVAL", join.body(), "4", k, helper_key(k, ":waiters"), helper_key(k, ":waiters:info"),
       helper_key(k, ":fence"), token, "30000", "1", "1", "1", "1", channel});
  REQUIRE(joined.elements().at(0).integer() == 0);  // queued behind the holder

  REQUIRE(holder.release());
  const std::string heard = listener.next(2s);
  INFO("heard on the replica: " << heard);
  redlock::Lock other(client, k, o);
  const bool other_holds = other.try_lock();
  if (heard.rfind("grant:", 0) == 0) {
    // A grant that reaches the waiter must be a lease the server gives it alone.
    const auto now = cluster.node(master).raw({"GET", k});
    CHECK((now.is_nil() ? std::string("(free)") : now.str()) == token);
    CHECK_FALSE(other_holds);
  } else {
    // Unheard on the master: the entry was dropped and the lock is free for the others.
    CHECK(other_holds);
  }
  if (other_holds) other.unlock();
  cluster.node(master).raw({"DEL", k, helper_key(k, ":waiters"), helper_key(k, ":waiters:info")});
}
