// tests/test_cluster_redlock.cpp: a Redlock over three independent Redis Clusters (3 masters,
// no replicas each): acquire, extend, release, fencing across the quorum, a waiter woken through
// sharded pub/sub, and one cluster's owner of the key's slot stopped (SIGSTOP).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "cluster_fixture.hpp"

using namespace std::chrono_literals;
using redlock::test::cluster_options;
using redlock::test::key;
using redlock::test::RedisCluster;
using Clock = std::chrono::steady_clock;

namespace {

struct Clusters {
  Clusters() {
    // cluster-node-timeout 5 s: a master stopped for a moment is not failed by its peers.
    for (int i = 0; i < 3; ++i) all.push_back(std::make_unique<RedisCluster>(5000, 0));
  }
  std::vector<redlock::Client> clients() const {
    std::vector<redlock::Client> out;
    for (const auto& c : all) {
      out.emplace_back(c->uri() + "?connect_timeout=300&command_timeout=300");
    }
    return out;
  }
  // The master of cluster `i` that owns `k`'s slot.
  redlock::test::RedisServer& owner(std::size_t i, const std::string& k) const {
    return all.at(i)->node(all.at(i)->owner(all.at(i)->keyslot(k)));
  }
  // Clusters whose owner of `k` has it with `token`.
  std::size_t holding(const std::string& k, const std::string& token) const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      const auto v = owner(i, k).raw({"GET", k});
      n += !v.is_nil() && v.str() == token ? 1 : 0;
    }
    return n;
  }
  std::vector<std::unique_ptr<RedisCluster>> all;
};

std::string token_on(const redlock::test::RedisServer& node, const std::string& k) {
  const auto v = node.raw({"GET", k});
  return v.is_nil() ? std::string() : v.str();
}

}  // namespace

TEST_CASE("Redlock over three clusters: acquire, extend, release, fences, a wake, a stopped owner",
          "[cluster][redis][redlock]") {
  Clusters clusters;  // 6 to 10 s on a busy 2-core machine
  const auto k = key("multi-cluster");
  redlock::LockOptions o = cluster_options(30s);
  o.retry_delay = 30s;  // a waiter wakes in time only through a release message
  redlock::Redlock lock(clusters.clients(), k, o);
  redlock::Redlock other(clusters.clients(), k, o);
  REQUIRE(lock.quorum() == 2);

  // Acquire, extend, release: every cluster's owner of the slot has our token.
  REQUIRE(lock.try_lock());
  const std::uint64_t first = lock.fence();
  const std::string token = token_on(clusters.owner(0, k), k);
  REQUIRE_FALSE(token.empty());
  CHECK(clusters.holding(k, token) == 3);
  CHECK_FALSE(other.try_lock());
  REQUIRE(lock.extend(30s));
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(clusters.owner(i, k).raw({"PTTL", k}).integer() > 20000);

  // A waiter over the same clusters wakes on the release (sharded pub/sub on each owner).
  std::atomic<bool> got{false};
  std::uint64_t second = 0;
  Clock::time_point woke;
  std::thread waiter([&] {
    got = other.try_lock_for(25s);
    woke = Clock::now();
    second = other.fence();
  });
  std::this_thread::sleep_for(300ms);  // its first attempt is refused
  const auto released = Clock::now();
  REQUIRE(lock.release());
  waiter.join();
  REQUIRE(got.load());
  CHECK(woke - released < 5s);  // its timer would have taken 30 s
  CHECK(second > first);        // fences grow across the quorum
  other.unlock();
  CHECK(clusters.holding(k, token) == 0);

  // One cluster's owner of the slot stopped: the other two are a quorum.
  redlock::test::RedisServer& stopped = clusters.owner(0, k);
  stopped.pause();
  REQUIRE(lock.try_lock());
  CHECK(lock.fence() > second);
  CHECK(lock.extend(30s));
  CHECK_FALSE(other.try_lock());  // no double grant with one cluster silent
  CHECK(lock.release());
  stopped.resume();
  // The stopped owner runs what was queued for it, then the rollback: nothing stays there.
  const auto deadline = Clock::now() + 10s;
  while (!stopped.raw({"GET", k}).is_nil() && Clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  CHECK(stopped.raw({"GET", k}).is_nil());
  // The stopped owner is skipped for a back-off (at most 1 s) after its timeout, then probed:
  // soon every cluster grants again.
  std::size_t holding = 0;
  for (int i = 0; i < 20 && holding < 3; ++i) {
    REQUIRE(lock.try_lock());
    holding = clusters.holding(k, token_on(clusters.owner(1, k), k));
    lock.unlock();
    if (holding < 3) std::this_thread::sleep_for(250ms);
  }
  CHECK(holding == 3);
}
