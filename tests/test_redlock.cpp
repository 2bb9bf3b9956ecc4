// Redlock over 3 and 5 real servers: the quorum matrix, slow and stopped nodes, rollback,
// fencing across the quorum, duplicate nodes.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/eventually.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::ServerGroup;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<redlock::Client> clients_for(const std::vector<redlock::Endpoint>& endpoints) {
  std::vector<redlock::Client> out;
  for (const auto& ep : endpoints) out.emplace_back(ep);
  return out;
}

// These cases are about the quorum itself: plain wake-on-release, where a grant by any quorum
// holds (the default of a Redlock). With fair = true the node that orders the waiters can also
// veto a grant (test_fair.cpp and test_fleet.cpp).
redlock::LockOptions fast(std::chrono::milliseconds ttl = 10s) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.retry_delay = 5ms;
  o.fair = false;
  return o;
}

int holders(ServerGroup& group, const std::string& k) {
  int n = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (group[i].running()) n += static_cast<int>(group[i].raw({"EXISTS", k}).integer());
  }
  return n;
}

// Every assignment of {up, killed, held by a foreign token} to N nodes.
void quorum_matrix(std::size_t n) {
  ServerGroup live(n);
  ServerGroup dead(n);
  std::vector<redlock::Endpoint> dead_endpoints = dead.endpoints();
  for (std::size_t i = 0; i < n; ++i) dead[i].kill9();
  // Live nodes get a generous timeout: a busy machine must not make one look down.
  std::vector<redlock::Endpoint> live_endpoints = live.endpoints();
  for (auto& ep : live_endpoints) ep.command_timeout = 2s;
  std::vector<redlock::Client> live_clients = clients_for(live_endpoints);
  std::vector<redlock::Client> dead_clients = clients_for(dead_endpoints);

  std::size_t combos = 1;
  for (std::size_t i = 0; i < n; ++i) combos *= 3;
  for (std::size_t combo = 0; combo < combos; ++combo) {
    const std::string k = key("matrix-" + std::to_string(n) + "-" + std::to_string(combo));
    std::vector<redlock::Client> nodes;
    std::size_t up = 0;
    std::size_t down = 0;
    std::size_t c = combo;
    for (std::size_t i = 0; i < n; ++i, c /= 3) {
      switch (c % 3) {
        case 0:
          nodes.push_back(live_clients[i]);
          ++up;
          break;
        case 1:
          nodes.push_back(dead_clients[i]);
          ++down;
          break;
        default:
          live[i].raw({"SET", k, "foreign-token", "PX", "60000"});
          nodes.push_back(live_clients[i]);
          break;
      }
    }
    redlock::Redlock lock(nodes, k, fast());
    INFO("n=" << n << " combo=" << combo << " up=" << up << " down=" << down);
    bool held = false;
    if (n - down < lock.quorum()) {
      // Fewer than a quorum reachable: unavailable, not contention.
      CHECK_THROWS_AS(lock.try_lock(), redlock::QuorumUnavailableError);
    } else {
      held = lock.try_lock();
      CHECK(held == (up >= lock.quorum()));
    }
    // Foreign keys are never touched; ours exist only while held, and only where granted.
    std::size_t ours = 0;
    std::size_t foreign = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = live[i].raw({"GET", k});
      if (v.is_nil()) continue;
      if (v.str() == "foreign-token") {
        ++foreign;
      } else {
        ++ours;
      }
    }
    // Held: at least a quorum holds our token (a straggler past the grace may have been rolled
    // back, never more than the live nodes). Not held: nothing of ours is left anywhere.
    if (held) {
      CHECK(ours >= lock.quorum());
      CHECK(ours <= up);
    } else {
      CHECK(ours == 0);
    }
    CHECK(foreign == n - up - down);
    if (held) {
      CHECK(lock.release());
      for (std::size_t i = 0; i < n; ++i) {
        const auto v = live[i].raw({"GET", k});
        CHECK((v.is_nil() || v.str() == "foreign-token"));
      }
    }
  }
}

}  // namespace

TEST_CASE("Redlock quorum matrix, N=3: held iff a quorum granted, nothing left behind",
          "[redis][redlock][fault]") {
  quorum_matrix(3);
}

TEST_CASE("Redlock quorum matrix, N=5: held iff a quorum granted, nothing left behind",
          "[redis][redlock][fault][slow]") {
  quorum_matrix(5);
}

TEST_CASE("Redlock basics: quorum, validity below ttl minus drift, release everywhere",
          "[redis][redlock]") {
  ServerGroup group(5);
  const auto k = key("basics");
  redlock::Redlock lock(clients_for(group.endpoints()), k, fast(10s));
  CHECK(lock.size() == 5);
  CHECK(lock.quorum() == 3);
  REQUIRE(lock.try_lock());
  CHECK(holders(group, k) == 5);
  CHECK(lock.validity() <= 10000ms - 102ms);
  CHECK(lock.validity() > 9000ms);
  CHECK(lock.extend());
  {
    std::scoped_lock nested(lock);  // re-entrant through the std vocabulary too
    CHECK(lock.owns_lock());
  }
  CHECK(lock.owns_lock());
  lock.unlock();
  CHECK(holders(group, k) == 0);
}

// Review 3, item 1, for every backend: a release that finds the lease gone on a majority.
TEST_CASE("Redlock release after a majority lost the key is false and reports the loss",
          "[redis][redlock]") {
  ServerGroup group(3);
  const auto k = key("majority-lost");
  std::atomic<int> losses{0};
  redlock::LockOptions o = fast(30s);
  o.on_lost = [&](const redlock::LostEvent&) { ++losses; };
  redlock::Redlock lock(clients_for(group.endpoints()), k, o);
  REQUIRE(lock.try_lock());
  REQUIRE(holders(group, k) == 3);
  group[0].raw({"DEL", k});
  group[1].raw({"DEL", k});
  CHECK_FALSE(lock.release());
  CHECK(redlock::test::eventually([&] { return losses.load() == 1; }));
  CHECK(holders(group, k) == 0);  // the node that still had it was released
}

TEST_CASE("scoped_lock over a Lock and a Redlock", "[redis][redlock]") {
  ServerGroup group(3);
  redlock::Redlock quorum(clients_for(group.endpoints()), key("scoped-q"), fast());
  redlock::Lock single(redlock::Client(group[0].endpoint()), key("scoped-s"), fast());
  {
    std::scoped_lock both(single, quorum);
    CHECK(single.owns_lock());
    CHECK(quorum.owns_lock());
  }
  CHECK_FALSE(single.owns_lock());
  CHECK(holders(group, key("scoped-q")) == 0);
}

TEST_CASE("Redlock with stopped nodes does not wait for them once a quorum answered",
          "[redis][redlock][fault]") {
  ServerGroup group(5);
  const auto k = key("stopped");
  auto endpoints = group.endpoints();
  for (auto& ep : endpoints) ep.command_timeout = 2s;
  auto clients = clients_for(endpoints);
  for (auto& c : clients) c.ping();  // pooled connections exist
  redlock::Redlock lock(clients, k, fast());

  group[0].pause();
  group[1].pause();
  const auto all_rounds = Clock::now();
  for (int round = 0; round < 20; ++round) {
    auto start = Clock::now();
    REQUIRE(lock.try_lock());
    // Three nodes answer within a millisecond or so; the two stopped ones get a short grace,
    // never their 2 s timeout (let alone 4 s if they were waited for one after another). The
    // bound is loose for a busy machine; it still fails if a timeout is waited out.
    CHECK(Clock::now() - start < 1s);
    start = Clock::now();
    lock.unlock();
    CHECK(Clock::now() - start < 1s);
  }
  // After the first timeout the stopped nodes are skipped (circuit breaker) instead of costing a
  // connect timeout each time once their accept queues fill: 20 rounds, far below 20 timeouts.
  CHECK(Clock::now() - all_rounds < 8s);
  group[0].resume();
  group[1].resume();
  std::this_thread::sleep_for(200ms);  // the resumed nodes run the queued SETs, then the undo
  CHECK(redlock::test::eventually([&] { return holders(group, k) == 0; }));
}

TEST_CASE("Redlock whose majority is stopped costs about one command timeout",
          "[redis][redlock][fault]") {
  ServerGroup group(5);
  auto endpoints = group.endpoints();
  for (auto& ep : endpoints) ep.command_timeout = 300ms;
  auto clients = clients_for(endpoints);
  redlock::Redlock lock(clients, key("slow-majority"), fast());
  for (std::size_t i = 0; i < 3; ++i) group[i].pause();
  const auto start = Clock::now();
  CHECK_THROWS_AS(lock.try_lock(), redlock::QuorumUnavailableError);
  const auto elapsed = Clock::now() - start;
  CHECK(elapsed >= 250ms);
  CHECK(elapsed < 800ms);  // one timeout in parallel, not three in a row (900 ms)
  for (std::size_t i = 0; i < 3; ++i) group[i].resume();
}

TEST_CASE("Redlock with a majority stopped fails within its deadline and leaves nothing",
          "[redis][redlock][fault]") {
  ServerGroup group(5);
  const auto k = key("majority-stopped");
  auto endpoints = group.endpoints();
  for (auto& ep : endpoints) ep.command_timeout = 200ms;
  auto clients = clients_for(endpoints);
  for (auto& c : clients) c.ping();
  redlock::Redlock lock(clients, k, fast());
  for (std::size_t i = 0; i < 3; ++i) group[i].pause();
  const auto start = Clock::now();
  // Unavailable (3 of 5 silent) until the deadline: that error, not contention.
  CHECK_THROWS_AS(lock.try_lock_for(500ms), redlock::QuorumUnavailableError);
  const auto elapsed = Clock::now() - start;
  CHECK(elapsed >= 450ms);
  CHECK(elapsed < 3000ms);
  CHECK_FALSE(lock.owns_lock());
  for (std::size_t i = 0; i < 3; ++i) group[i].resume();
  std::this_thread::sleep_for(200ms);  // the resumed nodes run the queued SETs, then the undo
  CHECK(redlock::test::eventually([&] { return holders(group, k) == 0; }));
}

TEST_CASE("Redlock refuses the same server twice", "[unit][redlock]") {
  redlock::Endpoint a;
  a.port = 7001;
  redlock::Endpoint b;
  b.port = 7002;
  redlock::Client ca(a);
  redlock::Client cb(b);
  CHECK_THROWS_WITH(redlock::Redlock({ca, cb, ca}, "k"), Catch::Contains("instances[2]"));
  redlock::Endpoint a_again = a;
  a_again.host = "localhost";
  CHECK_THROWS_AS(redlock::Redlock({ca, cb, redlock::Client(a_again)}, "k"), std::invalid_argument);
  redlock::Endpoint other_db = a;
  other_db.database = 1;  // another database of the same server fails with it: not a node
  CHECK_THROWS_AS(redlock::Redlock({ca, cb, redlock::Client(other_db)}, "k"),
                  std::invalid_argument);
  CHECK_THROWS_WITH(redlock::Redlock(std::vector<redlock::Client>{}, "k"),
                    Catch::Contains("instances"));
}

TEST_CASE("Redlock fencing tokens increase across holders even when nodes change",
          "[redis][redlock]") {
  ServerGroup group(5);
  const auto k = key("fence");
  auto options = fast();
  options.fencing = true;
  auto clients = clients_for(group.endpoints());
  std::uint64_t last = 0;
  for (int round = 0; round < 10; ++round) {
    // Each round takes the lock through a different majority of the nodes.
    std::vector<redlock::Client> subset;
    for (std::size_t i = 0; i < 5; ++i) {
      if ((i + round) % 5 < 3) subset.push_back(clients[i]);
    }
    redlock::Redlock lock(subset, k, options);
    REQUIRE(lock.try_lock());
    INFO("round " << round);
    CHECK(lock.fence() > last);
    last = lock.fence();
    lock.unlock();
  }
}

TEST_CASE("Redlock lock() waits for a holder's release", "[redis][redlock]") {
  ServerGroup group(3);
  const auto k = key("wait");
  auto clients = clients_for(group.endpoints());
  redlock::Redlock a(clients, k, fast());
  redlock::Redlock b(clients, k, fast());
  std::atomic<bool> held{false};
  std::thread holder([&] {
    a.lock();
    held = true;
    std::this_thread::sleep_for(100ms);
    a.unlock();
  });
  while (!held) std::this_thread::sleep_for(1ms);
  const auto start = Clock::now();
  b.lock();
  const auto waited = Clock::now() - start;
  CHECK(waited >= 50ms);
  CHECK(waited < 2s);  // released, not expired (ttl is 10 s)
  CHECK(b.owns_lock());
  b.unlock();
  holder.join();
}

TEST_CASE("Redlock release() reports a valid lease as kept when a granting node is silent",
          "[redis][redlock][fault]") {
  ServerGroup group(5);
  const auto k = key("silent-release");
  redlock::Redlock lock(clients_for(group.endpoints()), k, fast());
  group[3].raw({"SET", k, "someone-else", "PX", "10000"});  // only nodes 0-2 grant
  group[4].raw({"SET", k, "someone-else", "PX", "10000"});
  REQUIRE(lock.try_lock());
  bool told = false;
  lock.lease().on_lost([&] { told = true; });
  group[1].pause();       // one of the three granting nodes stops answering
  CHECK(lock.release());  // silence is not "not ours": the lease was never lost
  CHECK_FALSE(told);
  group[1].resume();
  CHECK(group[0].raw({"EXISTS", k}).integer() == 0);
  // Node 1 runs the queued release (its key would live 10 s).
  CHECK(redlock::test::eventually([&] { return group[1].raw({"EXISTS", k}).integer() == 0; }));
  CHECK(group[3].raw({"GET", k}).str() == "someone-else");
}

TEST_CASE("A split vote is rolled back quietly: no release is announced",
          "[redis][redlock][wake]") {
  ServerGroup group(3);
  const auto k = key("split-vote");
  redlock::Redlock lock(clients_for(group.endpoints()), k, fast());
  group[1].raw({"SET", k, "a", "PX", "10000"});
  group[2].raw({"SET", k, "b", "PX", "10000"});
  const auto publishes = [&] {
    const auto info = group[0].raw({"INFO", "commandstats"}).str();
    const auto at = info.find("cmdstat_publish:calls=");
    return at == std::string::npos ? 0L : std::stol(info.substr(at + 22));
  };
  const long before = publishes();
  CHECK_FALSE(lock.try_lock());  // granted by node 0 only: rolled back there
  CHECK(group[0].raw({"EXISTS", k}).integer() == 0);
  CHECK(publishes() == before);
}

TEST_CASE("Redlock with 2 of 3 servers down is unavailable, not contended",
          "[redis][redlock][fault]") {
  ServerGroup group(3);
  const auto k = key("quorum-down");
  auto clients = clients_for(group.endpoints());
  redlock::Redlock lock(clients, k, fast());
  group[1].kill9();
  group[2].kill9();
  try {
    lock.try_lock();
    FAIL("expected QuorumUnavailableError");
  } catch (const redlock::QuorumUnavailableError& e) {
    const std::string what = e.what();
    CHECK(what.find(std::to_string(group[1].endpoint().port)) != std::string::npos);
    CHECK(what.find(std::to_string(group[2].endpoint().port)) != std::string::npos);
  }
  int warnings = 0;
  redlock::set_log_handler([&](redlock::LogLevel level, std::string_view message) {
    if (level == redlock::LogLevel::warn && message.find(k) != std::string_view::npos) ++warnings;
  });
  const auto start = Clock::now();
  CHECK_THROWS_AS(lock.try_lock_for(300ms), redlock::QuorumUnavailableError);
  const auto elapsed = Clock::now() - start;
  redlock::set_log_handler(nullptr);
  CHECK(elapsed >= 250ms);  // waited for its deadline, not thrown at once
  CHECK(elapsed < 3s);
  CHECK(warnings == 1);
  CHECK_FALSE(lock.owns_lock());
  CHECK(holders(group, k) == 0);
}

TEST_CASE("Redlock with 1 of 3 servers down still acquires", "[redis][redlock][fault]") {
  ServerGroup group(3);
  const auto k = key("one-down");
  auto clients = clients_for(group.endpoints());
  redlock::Redlock lock(clients, k, fast());
  group[2].kill9();
  REQUIRE(lock.try_lock());
  CHECK(lock.owns_lock());
  CHECK(lock.release());
}
