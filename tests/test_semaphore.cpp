// Semaphore on one instance: at most `limit` holders across objects, threads and processes,
// contention as false, expiry of a crashed holder, release of a lost permit, fencing, renewal,
// loss, cancellation, the std mutex vocabulary, bad input, binary keys.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <hiredis/hiredis.h>

#include <redlock/redlock.hpp>

#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of a lock's helper keys

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::key;
using redlock::test::RedisServer;
using Clock = std::chrono::steady_clock;

namespace {

redlock::LockOptions fast(std::chrono::milliseconds ttl = 10s) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.retry_delay = 5ms;
  return o;
}

std::string permit_key(const redlock::Semaphore& s, std::size_t slot) {
  return helper_key(s.key(), ":permit:") + std::to_string(slot);
}

std::string value_of(const RedisServer& server, const std::string& k) {
  const auto r = server.raw({"GET", k});
  return r.is_nil() ? std::string() : r.str();
}

// Counts holders: INCR `now`, raise `max` to it. Returns the count including the caller.
const char kEnterLua[] = R"(local v = redis.call('incr', KEYS[1])
if v > tonumber(redis.call('get', KEYS[2]) or '0') then redis.call('set', KEYS[2], v) end
redis.call('incr', KEYS[3])
return v)";

// One worker: `rounds` times acquire a permit, count itself in, hold briefly, count itself out.
// Counting goes through the harness's own connection (the library's user may lack DECR).
bool work(const RedisServer& server, const std::string& k, int rounds) {
  redlock::Client client(server.endpoint());
  redlock::Semaphore sem(client, k, 3, fast());
  for (int i = 0; i < rounds; ++i) {
    std::lock_guard<redlock::Semaphore> guard(sem);
    if (server.raw({"EVAL", kEnterLua, "3", k + ":now", k + ":max", k + ":total"}).integer() < 1) {
      return false;
    }
    std::this_thread::sleep_for(8ms);
    server.raw({"DECR", k + ":now"});
  }
  return true;
}

// A server, a Client to it, and a key under the run's prefix.
struct Setup {
  explicit Setup(const std::string& name) : client(server.endpoint()), k(key(name)) {}
  RedisServer server;
  redlock::Client client;
  std::string k;
};

}  // namespace

TEST_CASE("Semaphore rejects bad arguments, naming them", "[semaphore][unit]") {
  redlock::Endpoint ep;
  ep.host = "127.0.0.1";
  ep.port = 1;  // never contacted: construction connects nothing
  redlock::Client client(ep);
  auto message = [&](std::size_t limit, const std::string& k, redlock::LockOptions o) {
    try {
      redlock::Semaphore s(client, k, limit, o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(message(0, "k", {}), Catch::Contains("limit"));
  CHECK_THAT(message(redlock::Semaphore::kMaxLimit + 1, "k", {}), Catch::Contains("limit"));
  CHECK_THAT(message(2, "", {}), Catch::Contains("key"));
  CHECK_THAT(message(1000, std::string(8 * 1024, 'k'), {}), Catch::Contains("key"));
  redlock::LockOptions fair;
  fair.fair = true;
  CHECK(message(2, "k", fair) == "accepted");  // the default: the wake-one queue
  redlock::LockOptions zero;
  zero.ttl = 0ms;
  CHECK_THAT(message(2, "k", zero), Catch::Contains("options.ttl"));
  redlock::LockOptions slow;
  slow.retry_delay = 0ms;
  CHECK_THAT(message(2, "k", slow), Catch::Contains("options.retry_delay"));
  CHECK(message(redlock::Semaphore::kMaxLimit, "k", {}) == "accepted");
  redlock::Semaphore s(client, "k", 7);
  CHECK(s.limit() == 7);
  CHECK(s.key() == "k");
  CHECK_FALSE(s.owns_permit());
  CHECK(s.slot() == 0);
  CHECK(s.fence() == 0);
  CHECK(s.validity() == 0ms);
  CHECK(s.lease().lost());
  CHECK_FALSE(s.release());  // holds nothing: false, no server contacted
}

TEST_CASE("Semaphore grants at most limit permits, contention is false", "[redis][semaphore]") {
  Setup setup("sem-basic");
  auto& [server, client, k] = setup;
  std::vector<std::unique_ptr<redlock::Semaphore>> sems;
  for (int i = 0; i < 4; ++i) {
    sems.push_back(std::make_unique<redlock::Semaphore>(client, k, 3, fast(5s)));
  }
  std::set<std::size_t> slots;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(sems[i]->try_acquire());
    CHECK(sems[i]->owns_permit());
    slots.insert(sems[i]->slot());
    const auto pttl = server.raw({"PTTL", permit_key(*sems[i], sems[i]->slot())}).integer();
    CHECK(pttl > 4000);
    CHECK(pttl <= 5000);
    CHECK(sems[i]->validity() > 4800ms);
    CHECK(value_of(server, permit_key(*sems[i], sems[i]->slot())).size() == 40);
  }
  CHECK(slots == std::set<std::size_t>{1, 2, 3});
  redlock::Semaphore& fourth = *sems[3];
  CHECK_FALSE(fourth.try_acquire());
  CHECK_FALSE(fourth.owns_permit());
  const auto start = Clock::now();
  CHECK_FALSE(fourth.try_acquire_for(300ms));
  const auto waited = Clock::now() - start;
  CHECK(waited >= 290ms);
  CHECK(waited < 2s);
  CHECK_FALSE(fourth.try_acquire_until(std::chrono::system_clock::now() + 50ms));
  CHECK_FALSE(fourth.try_acquire_for(-1s));
  CHECK(server.raw({"EXISTS", helper_key(k, ":permit:4")}).integer() == 0);
  // A released slot is the one the next holder takes.
  const std::size_t freed = sems[1]->slot();
  CHECK(sems[1]->release());
  CHECK(server.raw({"EXISTS", permit_key(*sems[1], freed)}).integer() == 0);
  CHECK_FALSE(sems[1]->owns_permit());
  CHECK(sems[1]->slot() == 0);
  REQUIRE(fourth.try_acquire_for(1s));
  CHECK(fourth.slot() == freed);
}

TEST_CASE("Semaphore works with lock_guard and unique_lock, and is re-entrant",
          "[redis][semaphore]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  redlock::Semaphore sem(client, key("sem-guards"), 1, fast());
  redlock::Semaphore other(client, key("sem-guards"), 1, fast());
  {
    std::lock_guard<redlock::Semaphore> guard(sem);
    CHECK(sem.owns_permit());
    CHECK_FALSE(other.try_lock());
  }
  CHECK_FALSE(sem.owns_permit());
  {
    std::unique_lock<redlock::Semaphore> held(other, 200ms);
    CHECK(held.owns_lock());
    CHECK_FALSE(sem.try_lock_for(50ms));
  }
  REQUIRE(sem.try_acquire());
  const std::size_t slot = sem.slot();
  REQUIRE(sem.try_acquire());  // the owning thread again: one more level, same permit
  CHECK(sem.slot() == slot);
  CHECK(sem.release());
  CHECK(sem.owns_permit());
  CHECK(server.raw({"EXISTS", permit_key(sem, slot)}).integer() == 1);
  sem.unlock();
  CHECK_FALSE(sem.owns_permit());
  CHECK(server.raw({"EXISTS", permit_key(sem, slot)}).integer() == 0);
  // Another thread of the process does not own it and cannot release it.
  REQUIRE(sem.try_acquire());
  std::thread([&] {
    CHECK_FALSE(sem.owns_permit());
    CHECK_FALSE(sem.release());
    CHECK_FALSE(sem.try_acquire());  // queued behind the owner: one attempt gives up
  }).join();
  CHECK(sem.owns_permit());
  CHECK(sem.release());
}

TEST_CASE("Semaphore limit holds across Clients, threads and processes, and is reached",
          "[redis][semaphore][slow]") {
  RedisServer server;
  const auto k = key("sem-many");
  constexpr int kRounds = 12;
  constexpr int kChildren = 2;
  constexpr int kThreads = 2;  // per process, each with its own Client
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = fork();
    if (pid == 0) {
      std::atomic<bool> ok{true};
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&] {
          try {
            if (!work(server, k, kRounds)) ok = false;
          } catch (...) {
            ok = false;
          }
        });
      }
      for (auto& t : threads) t.join();
      _exit(ok ? 0 : 1);
    }
    REQUIRE(pid > 0);
    children.push_back(pid);
  }
  std::vector<std::future<bool>> mine;
  for (int t = 0; t < kThreads; ++t) {
    mine.push_back(std::async(std::launch::async, [&] { return work(server, k, kRounds); }));
  }
  for (auto& f : mine) CHECK(f.get());
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const long long workers = (kChildren + 1) * kThreads;
  CHECK(std::stoll(value_of(server, k + ":total")) == workers * kRounds);
  CHECK(std::stoll(value_of(server, k + ":max")) == 3);  // never more, and reached
  CHECK(std::stoll(value_of(server, k + ":now")) == 0);
  CHECK(server
            .raw({"EXISTS", helper_key(k, ":permit:1"), helper_key(k, ":permit:2"),
                  helper_key(k, ":permit:3")})
            .integer() == 0);
}

TEST_CASE("A permit of a holder killed with SIGKILL frees its slot when its ttl runs out",
          "[redis][semaphore][fault]") {
  RedisServer server;
  const auto k = key("sem-crash");
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    try {
      redlock::Client client(server.endpoint());
      auto o = fast(1500ms);
      o.auto_renew = true;  // alive, it keeps the permit far past its ttl
      // Its own watchdog: a Watchdog::shared() the parent already started has no threads here.
      o.watchdog = std::make_shared<redlock::Watchdog>();
      redlock::Semaphore sem(client, k, 1, o);
      sem.acquire();
      const char ready = 'y';
      if (write(fds[1], &ready, 1) != 1) _exit(2);
      for (;;) pause();
    } catch (...) {
    }
    _exit(1);
  }
  REQUIRE(child > 0);
  close(fds[1]);
  char ready = 0;
  REQUIRE(read(fds[0], &ready, 1) == 1);
  close(fds[0]);
  redlock::Client client(server.endpoint());
  redlock::Semaphore sem(client, k, 1, fast());
  // Renewed by the child's watchdog: still taken after more than its ttl.
  CHECK_FALSE(sem.try_acquire_for(2500ms));
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  const auto start = Clock::now();
  REQUIRE(sem.try_acquire_for(10s));
  CHECK(Clock::now() - start < 5s);  // within about one ttl, not the 10 s allowed
  CHECK(sem.slot() == 1);
  CHECK(sem.release());
}

TEST_CASE("Semaphore permit expires without renewal, its release is false and harmless",
          "[redis][semaphore]") {
  Setup setup("sem-lost");
  auto& [server, client, k] = setup;
  redlock::Semaphore a(client, k, 2, fast(400ms));
  redlock::Semaphore b(client, k, 2, fast());
  redlock::Semaphore c(client, k, 2, fast());
  REQUIRE(a.try_acquire());
  REQUIRE(b.try_acquire());
  const std::size_t slot_a = a.slot();
  const std::string b_token = value_of(server, permit_key(b, b.slot()));
  std::this_thread::sleep_for(600ms);
  CHECK_FALSE(a.owns_permit());
  CHECK(a.validity() == 0ms);
  CHECK(a.lease().lost());
  REQUIRE(c.try_acquire());  // takes the expired slot
  CHECK(c.slot() == slot_a);
  const std::string c_token = value_of(server, permit_key(c, slot_a));
  CHECK_FALSE(a.release());
  // Neither the new holder of that slot nor the other permit was touched.
  CHECK(value_of(server, permit_key(c, slot_a)) == c_token);
  CHECK(value_of(server, permit_key(b, b.slot())) == b_token);
  CHECK(c.owns_permit());
  CHECK(b.owns_permit());
}

TEST_CASE("Releasing a permit whose key was deleted returns false and marks it lost",
          "[redis][semaphore]") {
  Setup setup("sem-deleted");
  auto& [server, client, k] = setup;
  redlock::Semaphore a(client, k, 2, fast());
  redlock::Semaphore b(client, k, 2, fast());
  REQUIRE(a.try_acquire());
  REQUIRE(b.try_acquire());
  const std::string b_token = value_of(server, permit_key(b, b.slot()));
  auto lease = a.lease();
  server.raw({"DEL", permit_key(a, a.slot())});
  CHECK_FALSE(a.release());
  CHECK(lease.lost());
  CHECK(lease.reason() == redlock::LostReason::refused);
  CHECK(value_of(server, permit_key(b, b.slot())) == b_token);
  CHECK(b.release());
}

TEST_CASE("Semaphore fences grow across all permits of a key", "[redis][semaphore]") {
  Setup setup("sem-fence");
  auto& [server, client, k] = setup;
  auto o = fast();
  o.fencing = true;
  redlock::Semaphore a(client, k, 2, o);
  redlock::Semaphore b(client, k, 2, o);
  REQUIRE(a.try_acquire());
  REQUIRE(b.try_acquire());
  const auto fa = a.fence();
  const auto fb = b.fence();
  CHECK(fa > 0);
  CHECK(fb > fa);
  CHECK(a.release());
  REQUIRE(a.try_acquire());
  CHECK(a.fence() > fb);
  CHECK(std::stoull(value_of(server, helper_key(k, ":permit:fence"))) == a.fence());
  // Without fencing: no counter involved.
  redlock::Semaphore plain(client, key("sem-nofence"), 2, fast());
  REQUIRE(plain.try_acquire());
  CHECK(plain.fence() == 0);
  CHECK(server.raw({"EXISTS", helper_key(key("sem-nofence"), ":permit:fence")}).integer() == 0);
}

TEST_CASE("Semaphore auto-renew keeps a permit past its ttl", "[redis][semaphore][watchdog]") {
  Setup setup("sem-renew");
  auto& [server, client, k] = setup;
  auto o = fast(600ms);
  o.auto_renew = true;
  o.watchdog = std::make_shared<redlock::Watchdog>();
  redlock::Semaphore sem(client, k, 1, o);
  redlock::Semaphore rival(client, k, 1, fast());
  REQUIRE(sem.try_acquire());
  const std::string token = value_of(server, permit_key(sem, 1));
  std::this_thread::sleep_for(1800ms);  // three ttls
  CHECK(sem.owns_permit());
  CHECK(sem.validity() > 0ms);
  CHECK_FALSE(sem.lease().lost());
  CHECK(value_of(server, permit_key(sem, 1)) == token);
  CHECK_FALSE(rival.try_acquire());
  CHECK(o.watchdog->stats().renewals >= 2);
  CHECK(sem.release());
  CHECK(rival.try_acquire());
}

TEST_CASE("Semaphore on_lost fires when the permit's key is deleted",
          "[redis][semaphore][watchdog]") {
  Setup setup("sem-onlost");
  auto& [server, client, k] = setup;
  std::promise<redlock::LostEvent> lost;
  auto o = fast(900ms);
  o.auto_renew = true;
  o.fencing = true;
  o.on_lost = [&lost](const redlock::LostEvent& e) { lost.set_value(e); };
  redlock::Semaphore sem(client, k, 2, o);
  REQUIRE(sem.try_acquire());
  std::promise<void> token_lost;
  sem.lease().on_lost([&token_lost] { token_lost.set_value(); });
  const auto fence = sem.fence();
  server.raw({"DEL", permit_key(sem, sem.slot())});
  auto event = lost.get_future();
  REQUIRE(event.wait_for(5s) == std::future_status::ready);
  const redlock::LostEvent e = event.get();
  CHECK(e.key == k);
  CHECK(e.reason == redlock::LostReason::refused);
  CHECK(e.fence == fence);
  CHECK(token_lost.get_future().wait_for(5s) == std::future_status::ready);
  CHECK_FALSE(sem.owns_permit());
  CHECK_FALSE(sem.release());
}

TEST_CASE("A waiter wakes when a permit is released, not at its retry delay",
          "[redis][semaphore][wake]") {
  Setup setup("sem-wake");
  auto& [server, client, k] = setup;
  auto slow = fast(30s);
  slow.retry_delay = 10s;  // only a wake-up can explain a quick grant
  // Fair (the default): the release hands the permit to the waiter; without: it is announced.
  slow.fair = GENERATE(true, false);
  redlock::Semaphore holder(client, k, 1, slow);
  redlock::Semaphore waiter(client, k, 1, slow);
  REQUIRE(holder.try_acquire());
  auto got = std::async(std::launch::async, [&] {
    const bool held = waiter.try_acquire_for(20s);
    const auto when = Clock::now();
    if (held) waiter.release();
    return std::make_pair(held, when);
  });
  std::this_thread::sleep_for(300ms);
  const auto released = Clock::now();
  CHECK(holder.release());
  const auto [held, when] = got.get();
  CHECK(held);
  CHECK(when - released < 3s);
  // Only the fair waiter queued, and its place is gone once served.
  CHECK(
      server
          .raw({"EXISTS", helper_key(k, ":permit:waiters"), helper_key(k, ":permit:waiters:info")})
          .integer() == 0);
}

// Review 3, item 3: the Semaphore's wait is the Lock's wait (lock/acquire_loop), so it applies
// the same unavailability rule: a server that cannot answer for a while is not contention, and
// a wait rides it out for up to max_unavailable (10 s by default).
TEST_CASE("A Semaphore wait rides out a paused server as a Lock wait does",
          "[redis][semaphore][fault]") {
  Setup setup("sem-paused");
  auto& [server, client, k] = setup;
  redlock::Semaphore holder(client, k, 1, fast(1s));
  redlock::Semaphore waiter(client, k, 1, fast(10s));
  redlock::Lock lock_holder(client, k + ":lock", fast(1s));
  redlock::Lock lock_waiter(client, k + ":lock", fast(10s));
  REQUIRE(holder.try_acquire());
  REQUIRE(lock_holder.try_lock());
  auto permit = std::async(std::launch::async, [&] { return waiter.try_acquire_for(15s); });
  auto lock = std::async(std::launch::async, [&] { return lock_waiter.try_lock_for(15s); });
  std::this_thread::sleep_for(200ms);              // both wait
  server.raw({"CLIENT", "PAUSE", "1500", "ALL"});  // attempts time out (command_timeout 200 ms)
  CHECK(lock.get());
  CHECK(permit.get());  // threw TimeoutError at the first timed-out attempt
  lock_waiter.unlock();
  waiter.release();
}

TEST_CASE("cancel_waits ends waits in progress and later ones, a held permit stays",
          "[redis][semaphore]") {
  Setup setup("sem-cancel");
  auto& [server, client, k] = setup;
  auto slow = fast(30s);
  slow.retry_delay = 10s;
  redlock::Semaphore holder(client, k, 1, slow);
  redlock::Semaphore waiter(client, k, 1, slow);
  REQUIRE(holder.try_acquire());
  // One thread waits on the server, the other queues behind it inside the process.
  auto forever = std::async(std::launch::async, [&] {
    try {
      waiter.acquire();
      return std::string("acquired");
    } catch (const redlock::Error& e) {
      return std::string(e.what());
    }
  });
  std::this_thread::sleep_for(100ms);
  auto timed = std::async(std::launch::async, [&] { return waiter.try_acquire_for(30s); });
  std::this_thread::sleep_for(300ms);
  const auto cancelled = Clock::now();
  waiter.cancel_waits();
  CHECK_THAT(forever.get(), Catch::Contains("cancel"));
  CHECK_FALSE(timed.get());
  CHECK(Clock::now() - cancelled < 3s);
  // Sticky: with a free permit, nothing is taken any more.
  CHECK(holder.release());
  CHECK_FALSE(waiter.try_acquire());
  CHECK_FALSE(waiter.try_acquire_for(100ms));
  CHECK_THROWS_AS(waiter.acquire(), redlock::Error);
  CHECK(server.raw({"EXISTS", helper_key(k, ":permit:1")}).integer() == 0);
  // Cancelling the waits of an object that holds a permit leaves the permit alone.
  REQUIRE(holder.try_acquire());
  holder.cancel_waits();
  CHECK(holder.owns_permit());
  CHECK(holder.release());
}

TEST_CASE("Semaphore keys are binary-safe (NUL bytes)", "[redis][semaphore]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const std::string k = key("sem-nul") + std::string("a\0b\0", 4);
  auto o = fast();
  o.fencing = true;
  redlock::Semaphore a(client, k, 2, o);
  redlock::Semaphore b(client, k, 2, o);
  redlock::Semaphore c(client, k, 2, o);
  REQUIRE(a.try_acquire());
  REQUIRE(b.try_acquire());
  CHECK_FALSE(c.try_acquire());
  CHECK(server.raw({"EXISTS", helper_key(k, ":permit:1"), helper_key(k, ":permit:2")}).integer() ==
        2);
  // The prefix before the NUL is a different key: untouched.
  CHECK(server.raw({"EXISTS", key("sem-nul") + "a"}).integer() == 0);
  CHECK(value_of(server, helper_key(k, ":permit:fence")) == "2");
  CHECK(a.release());
  CHECK(c.try_acquire());
  CHECK(c.slot() == 1);
}

TEST_CASE("A slot key holding another type is a ServerError, not contention",
          "[redis][semaphore]") {
  Setup setup("sem-wrongtype");
  auto& [server, client, k] = setup;
  server.raw({"RPUSH", helper_key(k, ":permit:2"), "x"});
  redlock::Semaphore a(client, k, 2, fast());
  redlock::Semaphore b(client, k, 2, fast());
  CHECK_THROWS_AS(b.try_acquire(), redlock::ServerError);
  CHECK_FALSE(a.owns_permit());
}

TEST_CASE("Without wake-on-release a waiter sleeps no longer than the earliest slot expiry",
          "[redis][semaphore]") {
  Setup setup("sem-poll");
  auto& [server, client, k] = setup;
  redlock::Semaphore a(client, k, 2, fast(700ms));
  redlock::Semaphore b(client, k, 2, fast(30s));
  auto o = fast(30s);
  o.retry_delay = 10s;
  o.wake_on_release = false;
  redlock::Semaphore waiter(client, k, 2, o);
  REQUIRE(a.try_acquire());
  REQUIRE(b.try_acquire());
  const std::size_t expiring = a.slot();
  const auto start = Clock::now();
  REQUIRE(waiter.try_acquire_for(8s));
  CHECK(Clock::now() - start < 4s);  // a's 700 ms, not the 10 s retry delay
  CHECK(waiter.slot() == expiring);
  CHECK(b.owns_permit());
}

TEST_CASE("A permit capped by max_renewals is given back and reported", "[redis][semaphore]") {
  Setup setup("sem-cap");
  auto& [server, client, k] = setup;
  std::promise<redlock::LostEvent> lost;
  auto o = fast(3s);  // renewed at ~1 s, capped at ~2 s; the key would live until ~4 s
  o.auto_renew = true;
  o.max_renewals = 1;
  o.on_lost = [&lost](const redlock::LostEvent& e) { lost.set_value(e); };
  redlock::Semaphore sem(client, k, 1, o);
  REQUIRE(sem.try_acquire());
  auto event = lost.get_future();
  REQUIRE(event.wait_for(5s) == std::future_status::ready);
  const redlock::LostEvent e = event.get();
  CHECK(e.key == k);
  CHECK(e.reason == redlock::LostReason::cap_reached);
  CHECK(e.renewals == 1);
  CHECK_FALSE(sem.owns_permit());
  // Released by the watchdog right after telling the holder, not left to expire.
  const auto told = Clock::now();
  while (server.raw({"EXISTS", helper_key(k, ":permit:1")}).integer() == 1 &&
         Clock::now() - told < 1500ms) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(server.raw({"EXISTS", helper_key(k, ":permit:1")}).integer() == 0);
  redlock::Semaphore next(client, k, 1, fast());
  CHECK(next.try_acquire());
  CHECK_FALSE(sem.release());
}

TEST_CASE("A permit released by the watchdog at its cap wakes the semaphore's waiters",
          "[redis][semaphore][wake]") {
  Setup setup("sem-cap-wake");
  auto& [server, client, k] = setup;
  // A bystander subscribed where waiters of the semaphore listen.
  timeval tv{8, 0};
  std::unique_ptr<redisContext, void (*)(redisContext*)> owned(
      redisConnectWithTimeout("127.0.0.1", server.port(), tv), redisFree);
  redisContext* spy = owned.get();
  REQUIRE(spy != nullptr);
  REQUIRE(spy->err == 0);
  redisSetTimeout(spy, tv);
  const std::string channel = helper_key(k, ":permit:released");
  void* raw = redisCommand(spy, "SUBSCRIBE %b", channel.data(), channel.size());
  REQUIRE(raw != nullptr);
  freeReplyObject(raw);
  auto o = fast(3s);  // renewed at ~1 s, released at its cap at ~2 s
  o.auto_renew = true;
  o.max_renewals = 1;
  redlock::Semaphore sem(client, k, 1, o);
  REQUIRE(sem.try_acquire());
  void* message = nullptr;
  const int rc = redisGetReply(spy, &message);  // the cap's release, announced (or a timeout)
  REQUIRE(rc == REDIS_OK);
  const std::unique_ptr<void, void (*)(void*)> reply(message, freeReplyObject);
  const auto* r = static_cast<redisReply*>(message);
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  REQUIRE(r->elements == 3);
  CHECK(std::string(r->element[0]->str, r->element[0]->len) == "message");
  CHECK(std::string(r->element[1]->str, r->element[1]->len) == channel);
  CHECK_FALSE(sem.owns_permit());
  CHECK_FALSE(sem.release());
}

// Issue 31: the limit is stored with the permits; a user with another limit is refused while any
// permit is held, and may change it once none is.
TEST_CASE("Semaphore refuses a limit other than the one its held permits were taken under",
          "[redis][semaphore]") {
  Setup setup("sem-limit-mismatch");
  auto& [server, client, k] = setup;
  redlock::Semaphore two(client, k, 2, fast());
  redlock::Semaphore three(client, k, 3, fast());
  redlock::Semaphore one(client, k, 1, fast());
  REQUIRE(two.try_acquire());
  CHECK_THROWS_AS(three.try_acquire(), redlock::ServerError);
  CHECK_THROWS_WITH(three.try_acquire(), Catch::Contains("limit 2") && Catch::Contains("3"));
  try {
    three.try_acquire();
    FAIL("no LimitMismatchError");
  } catch (const redlock::LimitMismatchError& e) {
    CHECK(e.limit() == 3);
    CHECK(e.server_limit() == 2);
  }
  CHECK_THROWS_AS(three.try_acquire_for(2s), redlock::LimitMismatchError);  // not waited out
  CHECK_THROWS_AS(one.try_acquire(), redlock::LimitMismatchError);          // a smaller one too
  CHECK_FALSE(three.owns_permit());
  CHECK(server.raw({"EXISTS", helper_key(k, ":permit:3")}).integer() == 0);
  CHECK(two.release());
  REQUIRE(three.try_acquire());  // no permit held: the limit changes
  CHECK(value_of(server, helper_key(k, ":permit:limit")) == "3");
  CHECK(three.release());
}

TEST_CASE("Semaphore counts a permit an older client took without storing the limit",
          "[redis][semaphore]") {
  Setup setup("sem-limit-older");
  auto& [server, client, k] = setup;
  // What a client before issue 31 leaves: a slot, no limit key.
  REQUIRE(server.raw({"SET", helper_key(k, ":permit:1"), "older-client", "PX", "10000"}).str() ==
          "OK");
  redlock::Semaphore two(client, k, 2, fast());
  REQUIRE(two.try_acquire());
  CHECK(two.slot() == 2);
  CHECK(value_of(server, helper_key(k, ":permit:limit")) == "2");
  redlock::Semaphore other(client, k, 2, fast());
  CHECK_FALSE(other.try_acquire());  // both slots are taken
  CHECK(two.release());
}
