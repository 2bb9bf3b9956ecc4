// Lock on one instance: the std mutex vocabulary, re-entrancy, expiry, fencing, bad input,
// mutual exclusion across threads and processes, faults mid-hold.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "support/clock.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::key;
using redlock::test::monotonic_us;
using redlock::test::RedisServer;
using Clock = std::chrono::steady_clock;

namespace {

redlock::LockOptions fast(std::chrono::milliseconds ttl = 10s) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.retry_delay = 5ms;
  return o;
}

std::string holder_of(const RedisServer& server, const std::string& k) {
  const auto r = server.raw({"GET", k});
  return r.is_nil() ? std::string() : r.str();
}

}  // namespace

TEST_CASE("Lock acquires with a 160-bit token and a PX ttl, and releases", "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("basic");
  redlock::Lock lock(client, k, fast(5s));
  CHECK(lock.key() == k);
  CHECK(lock.size() == 1);
  CHECK(lock.quorum() == 1);
  REQUIRE(lock.try_lock());
  CHECK(lock.owns_lock());
  const std::string token = holder_of(server, k);
  CHECK(token.size() == 40);
  const auto pttl = server.raw({"PTTL", k}).integer();
  CHECK(pttl > 4000);
  CHECK(pttl <= 5000);
  CHECK(lock.validity() > 4800ms);
  CHECK(lock.validity() <= 5000ms);
  CHECK(lock.release());
  CHECK_FALSE(lock.owns_lock());
  CHECK(lock.validity() == 0ms);
  CHECK(server.raw({"EXISTS", k}).integer() == 0);
  // A new hold gets a new token.
  REQUIRE(lock.try_lock());
  CHECK(holder_of(server, k) != token);
  lock.unlock();
}

TEST_CASE("A second Lock on the same key sees contention as false, not an exception",
          "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("contend");
  redlock::Lock a(client, k, fast());
  redlock::Lock b(client, k, fast());
  REQUIRE(a.try_lock());
  CHECK_FALSE(b.try_lock());
  const auto start = Clock::now();
  CHECK_FALSE(b.try_lock_for(300ms));
  const auto waited = Clock::now() - start;
  CHECK(waited >= 290ms);
  CHECK(waited < 1500ms);
  CHECK_FALSE(b.try_lock_for(-5s));  // negative: one attempt
  CHECK_FALSE(b.try_lock_until(std::chrono::system_clock::now() + 50ms));
  a.unlock();
  CHECK(b.try_lock_for(1s));
  b.unlock();
}

TEST_CASE("Lock works with lock_guard, unique_lock, scoped_lock, condition_variable_any",
          "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  redlock::Lock lock(client, key("guards"), fast());
  {
    std::lock_guard<redlock::Lock> guard(lock);
    CHECK(lock.owns_lock());
  }
  CHECK_FALSE(lock.owns_lock());
  {
    std::unique_lock<redlock::Lock> held(lock, std::try_to_lock);
    CHECK(held.owns_lock());
    held.unlock();
    CHECK(held.try_lock_for(100ms));
  }
  {
    std::unique_lock<redlock::Lock> held(lock, 100ms);
    CHECK(held.owns_lock());
  }
  redlock::Lock other(client, key("guards-2"), fast());
  {
    std::scoped_lock both(lock, other);
    CHECK(lock.owns_lock());
    CHECK(other.owns_lock());
  }
  CHECK(server.raw({"EXISTS", key("guards"), key("guards-2")}).integer() == 0);
  // condition_variable_any waits by unlocking and re-locking the Lock.
  std::condition_variable_any cv;
  bool ready = false;
  std::thread producer([&] {
    std::this_thread::sleep_for(50ms);
    std::lock_guard<redlock::Lock> guard(lock);
    ready = true;
    cv.notify_one();
  });
  {
    std::unique_lock<redlock::Lock> held(lock);
    CHECK(cv.wait_for(held, 5s, [&] { return ready; }));
    CHECK(lock.owns_lock());
  }
  producer.join();
}

TEST_CASE("Lock is re-entrant for the owning thread, other threads cannot unlock it",
          "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("reentrant");
  redlock::Lock lock(client, k, fast());
  lock.lock();
  lock.lock();
  CHECK(lock.try_lock());  // depth 3
  lock.unlock();
  lock.unlock();
  CHECK(lock.owns_lock());
  CHECK(server.raw({"EXISTS", k}).integer() == 1);
  // Another thread: unlock does nothing, release says false, owns_lock is false there.
  std::thread other([&] {
    CHECK_FALSE(lock.owns_lock());
    lock.unlock();
    CHECK_FALSE(lock.release());
    CHECK_FALSE(lock.try_lock());  // the holder is this process's other thread
  });
  other.join();
  CHECK(lock.owns_lock());
  CHECK(server.raw({"EXISTS", k}).integer() == 1);
  lock.unlock();
  CHECK(server.raw({"EXISTS", k}).integer() == 0);
  lock.unlock();  // not held: logged, harmless
}

TEST_CASE("Threads of one process queue locally on a shared Lock", "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("local-queue");
  redlock::Lock lock(client, k, fast());
  lock.lock();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    lock.lock();
    got = true;
    lock.unlock();
  });
  std::this_thread::sleep_for(200ms);
  // The waiting thread queues on the object instead of polling Redis.
  const auto calls_before = server.raw({"INFO", "commandstats"}).str();
  std::this_thread::sleep_for(200ms);
  const auto calls_after = server.raw({"INFO", "commandstats"}).str();
  const auto sets = [](const std::string& info) {
    const auto at = info.find("cmdstat_set:calls=");
    return at == std::string::npos ? 0L : std::stol(info.substr(at + 18));
  };
  CHECK(sets(calls_after) == sets(calls_before));
  CHECK_FALSE(got.load());
  lock.unlock();
  waiter.join();
  CHECK(got.load());
}

TEST_CASE("Threads queueing on one Lock object are served first come, first served",
          "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  redlock::Lock lock(client, key("local-fifo"), fast());
  lock.lock();
  constexpr int kThreads = 6;
  std::mutex order_mutex;
  std::vector<int> order;
  std::vector<std::thread> threads;
  std::atomic<bool> timed_out_waiter_held{true};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      lock.lock();
      {
        std::lock_guard<std::mutex> guard(order_mutex);
        order.push_back(i);
      }
      lock.unlock();
    });
    // Generous: each thread is in the local queue long before the next one arrives.
    std::this_thread::sleep_for(150ms);
    if (i == 2) {
      // A waiter that leaves the queue at its deadline does not disturb the others' order.
      std::thread leaver([&] { timed_out_waiter_held = lock.try_lock_for(100ms); });
      leaver.join();
    }
  }
  lock.unlock();
  for (auto& t : threads) t.join();
  CHECK_FALSE(timed_out_waiter_held.load());
  REQUIRE(order.size() == kThreads);
  for (int i = 0; i < kThreads; ++i) CHECK(order[i] == i);
}

TEST_CASE("A thread that unlocks and locks again at once does not overtake a queued thread",
          "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  redlock::Lock lock(client, key("local-no-barging"), fast());
  std::mutex order_mutex;
  std::vector<std::string> order;
  const auto record = [&](const char* who) {
    std::lock_guard<std::mutex> guard(order_mutex);
    order.emplace_back(who);
  };
  lock.lock();
  std::thread waiter([&] {
    lock.lock();
    record("waiter");
    lock.unlock();
  });
  std::this_thread::sleep_for(200ms);  // generous: the waiter is in the local queue
  lock.unlock();
  lock.lock();  // queues behind the waiter
  record("releaser");
  lock.unlock();
  waiter.join();
  REQUIRE(order.size() == 2);
  CHECK(order[0] == "waiter");
}

TEST_CASE("An expired hold cannot release or extend the next holder's lock",
          "[redis][lock][slow]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("expiry");
  redlock::Lock first(client, k, fast(200ms));
  redlock::Lock second(client, k, fast(5s));
  REQUIRE(first.try_lock());
  std::this_thread::sleep_for(400ms);
  CHECK_FALSE(first.owns_lock());
  CHECK(first.validity() == 0ms);
  CHECK(first.lease().lost());
  REQUIRE(second.try_lock());
  const std::string token = holder_of(server, k);
  CHECK_FALSE(first.extend());
  CHECK_FALSE(first.release());
  CHECK(holder_of(server, k) == token);
  CHECK(second.owns_lock());
  second.unlock();
}

// Review 3, item 1, for every backend: a release that finds the lease taken is false and a loss.
TEST_CASE("A release after the key was taken over is false and reports the loss", "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("taken-over");
  std::atomic<int> losses{0};
  redlock::LockOptions o = fast(30s);
  o.on_lost = [&](const redlock::LostEvent&) { ++losses; };
  redlock::Lock first(client, k, o);
  redlock::Lock second(client, k, fast(30s));
  REQUIRE(first.try_lock());
  server.raw({"DEL", k});  // an operator, or a failover that lost the write
  REQUIRE(second.try_lock());
  CHECK_FALSE(first.release());
  CHECK(redlock::test::eventually([&] { return losses.load() == 1; }));
  CHECK(second.owns_lock());
  second.unlock();
}

TEST_CASE("extend resets the lease on the server and locally", "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("extend");
  redlock::Lock lock(client, k, fast(1s));
  REQUIRE(lock.try_lock());
  std::this_thread::sleep_for(300ms);
  CHECK(lock.validity() < 750ms);
  REQUIRE(lock.extend(5s));
  CHECK(lock.validity() > 4500ms);
  CHECK(server.raw({"PTTL", k}).integer() > 4500);
  CHECK(lock.extend());  // back to the configured ttl
  CHECK(server.raw({"PTTL", k}).integer() <= 1000);
  CHECK_THROWS_AS(lock.extend(0ms), std::invalid_argument);
  lock.unlock();
  CHECK_FALSE(lock.extend());  // not held
}

TEST_CASE("Fencing tokens strictly increase across holders", "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("fenced");
  auto options = fast();
  options.fencing = true;
  redlock::Lock a(client, k, options);
  redlock::Lock b(client, k, options);
  std::uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    redlock::Lock& l = i % 2 == 0 ? a : b;
    REQUIRE(l.try_lock());
    CHECK(l.fence() > last);
    last = l.fence();
    l.unlock();
    CHECK(l.fence() == 0);
  }
  // Contended attempts do not consume tokens visibly out of order.
  REQUIRE(a.try_lock());
  CHECK_FALSE(b.try_lock());
  const auto held = a.fence();
  a.unlock();
  REQUIRE(b.try_lock());
  CHECK(b.fence() > held);
  b.unlock();
  redlock::Lock plain(client, k, fast());
  REQUIRE(plain.try_lock());
  CHECK(plain.fence() == 0);
  plain.unlock();
}

TEST_CASE("An acquire sent twice (a retried stale connection) is one grant, in every mode",
          "[redis][lock]") {
  // The client retries a request once when a pooled connection turns out dead before any reply;
  // if the server had run it anyway, the repeat must read as the grant it was.
  RedisServer server;
  redlock::Client client(server.endpoint());
  for (const bool fencing : {false, true}) {
    for (const bool fair : {false, true}) {
      redlock::LockOptions options;
      options.fencing = fencing;
      options.fair = fair;
      const auto k = key("repeat") + (fencing ? ":f" : "") + (fair ? ":q" : "");
      redlock::detail::LeaseEngine engine({redlock::detail::Access::client(client)}, k, options);
      const std::string token = "0123456789abcdef0123456789abcdef01234567";
      const std::string another = "another-token";
      redlock::detail::AcquireRequest request;
      request.token = &token;
      const auto first = engine.acquire(request);
      REQUIRE(first.held);
      const auto repeat = engine.acquire(request);
      INFO("fencing " << fencing << ", fair " << fair);
      CHECK(repeat.held);
      CHECK(repeat.fence == first.fence);
      request.token = &another;
      CHECK_FALSE(engine.acquire(request).held);
      CHECK(engine.release(token, redlock::detail::Announce::waiters).released == 1);
    }
  }
}

TEST_CASE("A plain SET NX that ran before its connection died is undone, not left to expire",
          "[redis][lock][fault]") {
  // Redis < 7 has no SET ... GET, so a resent SET NX cannot tell our own first grant from
  // someone else's: the engine must delete it (compare-and-delete) rather than leave it held.
  RedisServer server;
  redlock::test::FaultProxy proxy("127.0.0.1", server.endpoint().port);
  redlock::Endpoint endpoint = server.endpoint();
  endpoint.port = proxy.port();
  redlock::Client client(endpoint);
  redlock::detail::Access::client(client)->set_nx_get = false;  // as against Redis 6
  const auto k = key("resent-set");
  redlock::LockOptions options;
  options.ttl = 60s;
  redlock::Lock lock(client, k, options);
  client.ping();                 // leaves a pooled connection, which the next request reuses
  proxy.drop_next_request();     // the server runs it; the connection dies before the reply
  CHECK_FALSE(lock.try_lock());  // the retry on a fresh connection was refused: our own key
  CHECK(server.raw({"EXISTS", k}).integer() == 0);  // ... which was undone at once
  CHECK(lock.try_lock());
  lock.unlock();
}

TEST_CASE("Lock rejects bad arguments naming them", "[unit][lock]") {
  redlock::Client client(redlock::Endpoint{});
  CHECK_THROWS_WITH(redlock::Lock(client, ""), Catch::Contains("key"));
  CHECK_THROWS_WITH(redlock::Lock(client, std::string(4 * 1024 * 1024 + 1, 'k')),
                    Catch::Contains("key"));
  auto o = fast();
  o.ttl = 0ms;
  CHECK_THROWS_WITH(redlock::Lock(client, "k", o), Catch::Contains("ttl"));
  o = fast();
  o.ttl = -5ms;
  CHECK_THROWS_WITH(redlock::Lock(client, "k", o), Catch::Contains("ttl"));
  o = fast();
  o.ttl = std::chrono::milliseconds(std::numeric_limits<std::int64_t>::max());
  CHECK_THROWS_WITH(redlock::Lock(client, "k", o), Catch::Contains("ttl"));
  o = fast();
  o.ttl = 2ms;  // drift (2 ms + 1%) eats it
  CHECK_THROWS_WITH(redlock::Lock(client, "k", o), Catch::Contains("drift"));
  o = fast();
  o.clock_drift_factor = -0.1;
  CHECK_THROWS_WITH(redlock::Lock(client, "k", o), Catch::Contains("clock_drift_factor"));
  o.clock_drift_factor = 1.0;
  CHECK_THROWS_WITH(redlock::Lock(client, "k", o), Catch::Contains("clock_drift_factor"));
  o = fast();
  o.retry_delay = 0ms;
  CHECK_THROWS_WITH(redlock::Lock(client, "k", o), Catch::Contains("retry_delay"));
}

TEST_CASE("Lock takes a 1 MB key", "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const std::string big = key(std::string(1024 * 1024, 'x'));
  redlock::Lock lock(client, big, fast());
  REQUIRE(lock.try_lock());
  CHECK(server.raw({"EXISTS", big}).integer() == 1);
  lock.unlock();
  CHECK(server.raw({"EXISTS", big}).integer() == 0);
}

TEST_CASE("Lock on a key of another type throws ServerError and leaves it alone", "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("wrongtype");
  server.raw({"HSET", k, "field", "value"});
  redlock::Lock lock(client, k, fast());
  try {
    lock.try_lock();
    FAIL("expected ServerError");
  } catch (const redlock::ServerError& e) {
    CHECK(e.server_message().rfind("WRONGTYPE", 0) == 0);
  }
  CHECK_FALSE(lock.owns_lock());
  CHECK(server.raw({"HGET", k, "field"}).str() == "value");
  auto fenced = fast();
  fenced.fencing = true;
  redlock::Lock lock2(client, k, fenced);
  CHECK_THROWS_AS(lock2.try_lock(), redlock::ServerError);
}

TEST_CASE("Destroying a held Lock releases it", "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("dtor");
  {
    redlock::Lock lock(client, k, fast());
    lock.lock();
    CHECK(server.raw({"EXISTS", k}).integer() == 1);
  }
  CHECK(server.raw({"EXISTS", k}).integer() == 0);
  {
    // The server is gone when the destructor runs: no exception escapes.
    RedisServer doomed;
    redlock::Client c2(doomed.endpoint());
    redlock::Lock lock(c2, k, fast());
    lock.lock();
    doomed.kill9();
  }
}

TEST_CASE("Release and extend stay correct across restart, SCRIPT FLUSH and CLIENT KILL",
          "[redis][lock][fault]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("faults");
  redlock::Lock lock(client, k, fast());

  SECTION("SCRIPT FLUSH mid-hold") {
    REQUIRE(lock.try_lock());
    server.raw({"SCRIPT", "FLUSH"});
    CHECK(lock.extend());
    server.raw({"SCRIPT", "FLUSH"});
    CHECK(lock.release());
    CHECK(server.raw({"EXISTS", k}).integer() == 0);
  }
  SECTION("CLIENT KILL mid-hold") {
    REQUIRE(lock.try_lock());
    server.raw({"CLIENT", "KILL", "TYPE", "normal"});
    CHECK(lock.extend());
    server.raw({"CLIENT", "KILL", "TYPE", "normal"});
    CHECK(lock.release());
    CHECK(server.raw({"EXISTS", k}).integer() == 0);
  }
  SECTION("node restarted empty mid-hold") {
    REQUIRE(lock.try_lock());
    server.kill9();
    server.restart();
    CHECK_FALSE(lock.extend());  // the key is gone: lost, not silently re-created
    CHECK_FALSE(lock.owns_lock());
    CHECK(lock.lease().lost());
    CHECK(lock.lease().reason() == redlock::LostReason::refused);
    CHECK(server.raw({"EXISTS", k}).integer() == 0);
    CHECK_FALSE(lock.release());
    REQUIRE(lock.try_lock());  // and it can be taken again
    lock.unlock();
  }
  SECTION("re-entrant lock() on a lost hold throws instead of entering without the lock") {
    REQUIRE(lock.try_lock());
    server.raw({"DEL", k});
    CHECK_FALSE(lock.extend());  // lost, and now known to be
    CHECK_THROWS_AS(lock.lock(), redlock::Error);
    CHECK_FALSE(lock.try_lock());
    bool told = false;
    lock.lease().on_lost([&] { told = true; });  // already lost: runs at once
    CHECK(told);
    lock.unlock();
    REQUIRE(lock.try_lock());
    lock.unlock();
  }
  SECTION("release() that finds the lease gone tells LeaseToken listeners") {
    REQUIRE(lock.try_lock());
    bool told = false;
    lock.lease().on_lost([&] { told = true; });
    server.raw({"DEL", k});
    CHECK_FALSE(lock.release());
    CHECK(told);
  }
}

namespace {

// One process's share of the mutual exclusion test: `threads` threads share one Lock object and
// do read-sleep-write on a counter; an "inside" counter catches overlapping holds.
int hammer(const redlock::Endpoint& ep, const std::string& k, int threads, int rounds) {
  redlock::Client client(ep);
  redlock::LockOptions o;
  o.ttl = 5s;
  o.retry_delay = 20ms;
  redlock::Lock lock(client, k, o);
  std::atomic<int> errors{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard<redlock::Lock> guard(lock);
        if (client.command({"INCR", k + ":inside"}).integer() != 1) ++errors;
        const long long start = monotonic_us();
        const auto value = std::stoll(client.command({"GET", k + ":counter"}).str());
        std::this_thread::sleep_for(500us);
        client.command({"SET", k + ":counter", std::to_string(value + 1)});
        client.command(
            {"RPUSH", k + ":holds", std::to_string(start), std::to_string(monotonic_us())});
        client.command({"DECR", k + ":inside"});
      }
    });
  }
  for (auto& t : pool) t.join();
  return errors.load();
}

}  // namespace

TEST_CASE("Mutual exclusion: 2 processes x 8 threads, read-sleep-write, no lost update",
          "[redis][lock][slow]") {
  RedisServer server;
  const auto k = key("mutex");
  server.raw({"SET", k + ":counter", "0"});
  constexpr int kThreads = 8;
  constexpr int kRounds = 15;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int errors = 1;
    try {
      errors = hammer(server.endpoint(), k, kThreads, kRounds);
    } catch (...) {
    }
    _exit(errors == 0 ? 0 : 1);
  }
  const int errors = hammer(server.endpoint(), k, kThreads, kRounds);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(errors == 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(server.raw({"GET", k + ":counter"}).str() == std::to_string(2 * kThreads * kRounds));
  // Hold intervals on the shared monotonic clock never overlap.
  const auto flat = server.raw({"LRANGE", k + ":holds", "0", "-1"}).elements();
  REQUIRE(flat.size() == 2u * 2 * kThreads * kRounds);
  std::vector<std::pair<long long, long long>> holds;
  for (std::size_t i = 0; i < flat.size(); i += 2) {
    holds.emplace_back(std::stoll(flat[i].str()), std::stoll(flat[i + 1].str()));
  }
  std::sort(holds.begin(), holds.end());
  int overlaps = 0;
  for (std::size_t i = 1; i < holds.size(); ++i) overlaps += holds[i].first < holds[i - 1].second;
  CHECK(overlaps == 0);
}

TEST_CASE("A thread that exits holding a lock does not pass it to a thread with its id",
          "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("recycled-id");
  redlock::Lock lock(client, k, fast(60s));
  std::thread::id gone;
  std::thread([&] {
    REQUIRE(lock.try_lock());
    gone = std::this_thread::get_id();
  }).join();  // exits holding it
  // The orphaned hold is released (best effort) once its thread is gone.
  CHECK(server.raw({"EXISTS", k}).integer() == 0);
  server.raw({"SET", k, "someone-else", "PX", "60000"});
  bool recycled = false;
  for (int i = 0; i < 500 && !recycled; ++i) {
    std::thread([&] {
      if (std::this_thread::get_id() != gone) return;
      recycled = true;
      CHECK_FALSE(lock.owns_lock());
      CHECK(lock.fence() == 0);
      CHECK_FALSE(lock.try_lock());  // asks Redis, which says someone else holds it
    }).join();
  }
  if (!recycled) WARN("no thread got the exited thread's id; the reuse part did not run");
  CHECK(server.raw({"GET", k}).str() == "someone-else");
}

TEST_CASE("fence() and validity() answer for the calling thread and a live hold only",
          "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("fence-thread");
  auto options = fast(60s);
  options.fencing = true;
  redlock::Lock lock(client, k, options);
  REQUIRE(lock.try_lock());
  CHECK(lock.fence() > 0);
  CHECK(lock.validity() > 0ms);
  std::thread([&] {
    CHECK(lock.fence() == 0);  // another thread does not hold it
    CHECK(lock.validity() == 0ms);
  }).join();
  server.raw({"DEL", k});
  CHECK_FALSE(lock.extend());  // lost
  CHECK(lock.fence() == 0);
  CHECK(lock.validity() == 0ms);
  lock.unlock();
}

TEST_CASE("A release resent on a fresh connection after its first send ran reports kept",
          "[redis][lock][fault]") {
  RedisServer server;
  redlock::test::FaultProxy proxy("127.0.0.1", server.endpoint().port);
  redlock::Endpoint endpoint = server.endpoint();
  endpoint.port = proxy.port();
  redlock::Client client(endpoint);
  const auto k = key("resent-release");
  std::atomic<int> lost{0};
  auto options = fast(60s);
  options.on_lost = [&](const redlock::LostEvent&) { ++lost; };
  redlock::Lock lock(client, k, options);
  REQUIRE(lock.try_lock());
  lock.unlock();  // once around, so that the release script is cached (no NOSCRIPT below)
  REQUIRE(lock.try_lock());
  proxy.drop_next_request();  // the server runs the release; its connection dies before the reply
  CHECK(lock.release());      // the resend says "not ours": that was our own first send
  CHECK(server.raw({"EXISTS", k}).integer() == 0);
  std::this_thread::sleep_for(100ms);
  CHECK(lost.load() == 0);
}

TEST_CASE("Against Redis before 7 (plain SET NX) a key of another type throws WRONGTYPE",
          "[redis][lock]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  redlock::detail::Access::client(client)->set_nx_get = false;  // as against Redis 6
  const auto k = key("wrongtype-old");
  server.raw({"HSET", k, "field", "value"});
  redlock::Lock lock(client, k, fast());
  CHECK_THROWS_AS(lock.try_lock(), redlock::ServerError);
  CHECK_THROWS_AS(lock.try_lock_for(300ms), redlock::ServerError);
  CHECK(server.raw({"HGET", k, "field"}).str() == "value");
}

namespace {

// Counts the library's log messages that contain `needle`, by level, while it lives.
struct LogCounter {
  explicit LogCounter(std::string needle) : needle_(std::move(needle)) {
    redlock::set_log_handler([this](redlock::LogLevel level, std::string_view message) {
      if (message.find(needle_) == std::string_view::npos) return;
      if (level == redlock::LogLevel::warn) ++warnings;
      if (level == redlock::LogLevel::info) ++infos;
    });
  }
  ~LogCounter() { redlock::set_log_handler(nullptr); }
  std::string needle_;
  std::atomic<int> warnings{0};
  std::atomic<int> infos{0};
};

}  // namespace

TEST_CASE("cancel_waits ends waits in progress and later ones, not try_lock or a hold",
          "[redis][lock][cancel]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("cancel");
  redlock::Lock holder(client, k, fast(60s));
  REQUIRE(holder.try_lock());
  redlock::Lock waiter(client, k, fast(60s));
  std::atomic<int> returned_false{0};
  std::atomic<int> cancelled{0};
  std::thread a([&] { returned_false += waiter.try_lock_for(30s) ? 0 : 1; });
  std::thread b([&] {  // queues locally behind a
    try {
      waiter.lock();
    } catch (const redlock::CancelledError&) {
      ++cancelled;
    }
  });
  std::this_thread::sleep_for(200ms);
  const auto start = Clock::now();
  waiter.cancel_waits();
  a.join();
  b.join();
  CHECK(Clock::now() - start < 2s);
  CHECK(returned_false.load() == 1);
  CHECK(cancelled.load() == 1);
  // Sticky: later waits give up at once; try_lock() still asks.
  const auto later = Clock::now();
  CHECK_FALSE(waiter.try_lock_for(30s));
  CHECK_THROWS_AS(waiter.lock(), redlock::CancelledError);
  CHECK(Clock::now() - later < 1s);
  CHECK_FALSE(waiter.try_lock());
  holder.unlock();
  CHECK(waiter.try_lock());
  // A hold already held is not affected.
  waiter.cancel_waits();
  CHECK(waiter.owns_lock());
  CHECK(waiter.release());
}

TEST_CASE("Unavailability: try_lock throws at once, a wait throws at its deadline, warning once",
          "[redis][lock][fault]") {
  RedisServer server;
  auto ep = server.endpoint();
  server.kill9();
  redlock::Client client(ep);
  const auto k = key("down");
  redlock::Lock lock(client, k, fast());
  CHECK_THROWS_AS(lock.try_lock(), redlock::ConnectionError);
  {
    LogCounter log(k);
    const auto start = Clock::now();
    CHECK_THROWS_AS(lock.try_lock_for(300ms), redlock::ConnectionError);
    CHECK(Clock::now() - start >= 250ms);  // rode it out until the deadline
    CHECK(log.warnings.load() == 1);
  }
  CHECK_FALSE(lock.owns_lock());
  // lock() waits through it; cancel_waits() ends that.
  std::atomic<bool> cancelled{false};
  std::thread t([&] {
    try {
      lock.lock();
    } catch (const redlock::CancelledError&) {
      cancelled = true;
    }
  });
  std::this_thread::sleep_for(300ms);
  CHECK_FALSE(cancelled.load());
  lock.cancel_waits();
  t.join();
  CHECK(cancelled.load());
}

TEST_CASE("A wait rides out a server restart and acquires, with one warning and one info",
          "[redis][lock][fault]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("ride-out");
  redlock::Lock lock(client, k, fast());
  LogCounter log(k);
  server.kill9();
  std::atomic<bool> got{false};
  std::thread t([&] {
    got = lock.try_lock_for(10s);
    if (got) lock.unlock();
  });
  std::this_thread::sleep_for(500ms);
  server.restart();
  t.join();
  CHECK(got.load());
  CHECK(log.warnings.load() == 1);
  CHECK(log.infos.load() >= 1);
}

TEST_CASE("A wait gives up after max_unavailable of an unreachable server, lock() too",
          "[redis][lock][fault]") {
  std::uint16_t port = 0;
  {
    RedisServer gone;
    port = gone.port();
  }  // nothing listens there now
  redlock::Endpoint endpoint;
  endpoint.host = "127.0.0.1";
  endpoint.port = port;
  redlock::Client client(endpoint);
  auto options = fast();
  options.max_unavailable = 300ms;
  redlock::Lock lock(client, key("unavailable-budget"), options);
  LogCounter log(lock.key());
  for (int round = 0; round < 2; ++round) {
    const auto start = Clock::now();
    if (round == 0) {
      CHECK_THROWS_AS(lock.lock(), redlock::ConnectionError);
    } else {
      CHECK_THROWS_AS(lock.try_lock_for(1h), redlock::ConnectionError);
    }
    const auto took = Clock::now() - start;
    CHECK(took >= 280ms);  // it rode the outage out for max_unavailable...
    CHECK(took < 5s);      // ...and then gave up instead of waiting for ever
  }
  CHECK(log.warnings.load() == 2);  // one per wait
  options.max_unavailable = -1ms;
  CHECK_THROWS_AS(redlock::Lock(client, "k", options), std::invalid_argument);
}

TEST_CASE("Against a Redis without SET NX GET, every attempt in flight falls back to plain SET NX",
          "[redis][lock][fault]") {
  // The proxy plays Redis < 7: "GET" after "PX 10000" becomes "GXT", which the server answers
  // with -ERR syntax error, as an old server does for SET ... NX ... GET.
  RedisServer server;
  redlock::test::FaultProxy proxy("127.0.0.1", server.endpoint().port);
  proxy.set_rewrite("10000\r\n$3\r\nGET\r\n", "10000\r\n$3\r\nGXT\r\n");
  proxy.set_delay(150ms);  // all attempts are in flight when the first syntax error comes back
  redlock::Endpoint endpoint = server.endpoint();
  endpoint.port = proxy.port();
  endpoint.command_timeout = 3s;
  endpoint.connect_timeout = 3s;
  redlock::Client client(endpoint);
  constexpr int kThreads = 6;
  std::atomic<int> held{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      redlock::Lock lock(client, key("old-server-" + std::to_string(i)), fast(10s));
      try {
        if (lock.try_lock()) {
          ++held;
          lock.unlock();
        }
      } catch (const redlock::Error&) {
        ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(errors.load() == 0);
  CHECK(held.load() == kThreads);
}
