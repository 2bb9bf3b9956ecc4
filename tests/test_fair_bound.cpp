// A bound on every fair wait (#41): whatever dies or stops (the holder, the watchers, a whole
// process, a process paused with queued threads), a live waiter of a free key is served within
// the lease end + one stall guard + a claim window per unclaimed grant (docs/locks-and-waiting.md).
// Every process is a real forked one on a real redis-server; holders renew (auto_renew) until
// they are killed, so a lease ends only after its holder died. The survivors wait with a long
// deadline: served by the deadline alone would take far longer than the bound checked.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/fair_queue.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of the queue's keys

using namespace std::chrono_literals;
using namespace redlock::test::bound;
using redlock::test::exit_by;
using redlock::test::fair_lock_options;
using redlock::test::key;
using redlock::test::key_held;
using redlock::test::kill_all;
using redlock::test::RedisServer;
using redlock::test::wait_for_queue;
using Clock = std::chrono::steady_clock;

namespace {

// retry_delay far longer than the bound: polling alone could not pass.
redlock::LockOptions options() { return fair_lock_options(10s, kTtl); }

// A process with `holds` (0 or 1) thread that takes `k` and keeps it (renewed), then `queued`
// threads that each wait for `k` with a Lock of their own and keep it. Runs until killed.
pid_t fork_holders(const RedisServer& server, const std::string& k, int holds, int queued) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  try {
    redlock::Client client(server.endpoint());
    std::vector<std::unique_ptr<redlock::Lock>> locks;
    std::vector<std::thread> threads;
    for (int i = 0; i < holds + queued; ++i) {
      locks.push_back(std::make_unique<redlock::Lock>(client, k, options()));
      redlock::Lock& lock = *locks.back();
      if (i < holds) {
        lock.lock();
        continue;
      }
      threads.emplace_back([&lock] { (void)lock.try_lock_for(60s); });
      std::this_thread::sleep_for(100ms);  // queued in this order
    }
    for (;;) std::this_thread::sleep_for(1s);
  } catch (...) {
  }
  ::_exit(2);
}

// A process that waits for `k` (deadline `wait`), releases it at once and exits 0; 1 if it
// was not served by its deadline.
pid_t fork_survivor(const RedisServer& server, const std::string& k,
                    const redlock::LockOptions& o = options(),
                    std::chrono::milliseconds wait = kDeadline) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int rc = 1;
  try {
    redlock::Client client(server.endpoint());
    redlock::Lock lock(client, k, o);
    if (lock.try_lock_for(wait)) {
      lock.unlock();
      rc = 0;
    }
  } catch (...) {
    rc = 2;
  }
  ::_exit(rc);
}

}  // namespace

TEST_CASE("Fair bound: the holder and the first two waiters killed -9 together",
          "[redis][fair][liveness][fault]") {
  RedisServer server;
  const std::string k = key("fair-bound-three");
  std::vector<pid_t> dead{fork_holders(server, k, 1, 0)};
  REQUIRE(key_held(server, k));
  for (long long w = 1; w <= 2; ++w) {
    dead.push_back(fork_holders(server, k, 0, 1));
    REQUIRE(wait_for_queue(server, k, w));
  }
  const pid_t survivor = fork_survivor(server, k);
  REQUIRE(wait_for_queue(server, k, 3));
  std::this_thread::sleep_for(200ms);  // every join answered
  kill_all(dead);
  const auto killed = Clock::now();
  // The lease ends within a ttl; the survivor's stall guard finds the key free.
  CHECK(exit_by(survivor, killed + kTtl + kGuard + kSlack) == 0);
}

TEST_CASE("Fair bound: one process with the holder and two queued threads killed -9",
          "[redis][fair][liveness][fault]") {
  RedisServer server;
  const std::string k = key("fair-bound-process");
  const pid_t gone = fork_holders(server, k, 1, 2);
  REQUIRE(key_held(server, k));
  REQUIRE(wait_for_queue(server, k, 2));
  const pid_t survivor = fork_survivor(server, k);
  REQUIRE(wait_for_queue(server, k, 3));
  std::this_thread::sleep_for(200ms);
  kill_all({gone});
  const auto killed = Clock::now();
  CHECK(exit_by(survivor, killed + kTtl + kGuard + kSlack) == 0);
}

TEST_CASE(
    "Fair bound: the two watchers killed first, a newcomer joins behind them, the holder dies "
    "later",
    "[redis][fair][liveness][fault]") {
  RedisServer server;
  const std::string k = key("fair-bound-watchers");
  const pid_t holder = fork_holders(server, k, 1, 0);
  REQUIRE(key_held(server, k));
  std::vector<pid_t> watchers;
  for (long long w = 1; w <= 2; ++w) {
    watchers.push_back(fork_holders(server, k, 0, 1));
    REQUIRE(wait_for_queue(server, k, w));
  }
  const pid_t early = fork_survivor(server, k);
  REQUIRE(wait_for_queue(server, k, 3));
  std::this_thread::sleep_for(200ms);
  kill_all(watchers);
  // A newcomer after the watchers died, while the holder lives: it joins behind dead entries.
  const pid_t newcomer = fork_survivor(server, k);
  REQUIRE(wait_for_queue(server, k, 4));
  std::this_thread::sleep_for(kTtl);  // the holder renews through it
  kill_all({holder});
  const auto killed = Clock::now();
  // The first served releases at once and hands the lock to the other.
  const auto bound = killed + kTtl + kGuard + kSlack;
  CHECK(exit_by(early, bound) == 0);
  CHECK(exit_by(newcomer, bound) == 0);
}

TEST_CASE("Fair bound: a process with five queued threads paused, then the holder releases",
          "[redis][fair][liveness][fault]") {
  RedisServer server;
  const std::string k = key("fair-bound-paused");
  redlock::Client client(server.endpoint());
  redlock::Lock holder(client, k, options());
  holder.lock();
  const pid_t paused = fork_holders(server, k, 0, 5);
  REQUIRE(wait_for_queue(server, k, 5));
  const pid_t survivor = fork_survivor(server, k);
  REQUIRE(wait_for_queue(server, k, 6));
  std::this_thread::sleep_for(200ms);
  // Stopped, its subscription open: every grant to it is heard by nobody who can take it.
  ::kill(paused, SIGSTOP);
  holder.unlock();
  const auto released = Clock::now();
  // The release's grant (a whole ttl), then the guard, then a claim window for each of the
  // four other paused threads.
  CHECK(exit_by(survivor, released + kTtl + kGuard + 4 * kClaim + kSlack) == 0);
  kill_all({paused});
}

TEST_CASE("Fair bound: a holder with no expiry (an old client's SET NX, then DEL)",
          "[redis][fair][liveness]") {
  RedisServer server;
  const std::string k = key("fair-bound-no-expiry");
  server.raw({"SET", k, "old-client", "NX"});  // no PX: PTTL -1
  std::vector<pid_t> waiters;
  for (long long w = 1; w <= 3; ++w) {
    waiters.push_back(fork_survivor(server, k));
    REQUIRE(wait_for_queue(server, k, w));
  }
  std::this_thread::sleep_for(200ms);
  server.raw({"DEL", k});  // announced to nobody
  const auto deleted = Clock::now();
  // The watchers poll (retry_delay, at most the stall guard), the others guard; each served
  // waiter releases at once and hands the lock to the next.
  for (const pid_t w : waiters) CHECK(exit_by(w, deleted + kGuard + kClaim + kSlack) == 0);
}

// A process that takes `k` and gives it back every 20 ms (fair, woken by hand-overs) until `end`.
pid_t fork_busy(const RedisServer& server, const std::string& k, Clock::time_point end) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  try {
    redlock::Client client(server.endpoint());
    redlock::Lock lock(client, k, options());
    while (Clock::now() < end) {
      if (!lock.try_lock_for(10s)) continue;
      std::this_thread::sleep_for(20ms);
      lock.unlock();
    }
  } catch (...) {
    ::_exit(2);
  }
  ::_exit(0);
}

TEST_CASE("Fair bound: a waiter that cannot be woken (wake_on_release = false) is served",
          "[redis][fair][liveness]") {
  RedisServer server;
  const std::string k = key("fair-bound-deaf");
  const auto end = Clock::now() + 4s;
  // Two busy processes: the key is always held or handed from one to the other.
  const std::vector<pid_t> busy{fork_busy(server, k, end), fork_busy(server, k, end)};
  std::this_thread::sleep_for(300ms);
  auto deaf = options();
  deaf.wake_on_release = false;
  deaf.retry_delay = 50ms;  // its pace; a hand-over waits 2 x 50 + 100 ms for it
  const pid_t poller = fork_survivor(server, k, deaf, 2500ms);
  CHECK(exit_by(poller, Clock::now() + 5s) == 0);
  for (const pid_t b : busy) CHECK(exit_by(b, end + 5s) == 0);
}

TEST_CASE("Fair bound: the queue's keys expire once every waiter is gone",
          "[redis][fair][liveness][fault]") {
  RedisServer server;
  const std::string k = key("fair-bound-expiry");
  const pid_t gone = fork_holders(server, k, 1, 2);
  REQUIRE(key_held(server, k));
  REQUIRE(wait_for_queue(server, k, 2));
  std::this_thread::sleep_for(200ms);
  const std::string list = redlock::detail::helper_key(k, ":waiters");
  const std::string info = redlock::detail::helper_key(k, ":waiters:info");
  // While waiters are queued, both keys carry an expiry their joins and guards refresh.
  CHECK(server.raw({"PTTL", list}).integer() > 0);
  CHECK(server.raw({"PTTL", info}).integer() > 0);
  kill_all({gone});
  // Nobody is left to clean up: at most 3 ttl after the last join, both are gone.
  const auto end = Clock::now() + 3 * kTtl + kSlack;
  while (server.raw({"EXISTS", list, info}).integer() != 0 && Clock::now() < end) {
    std::this_thread::sleep_for(20ms);
  }
  CHECK(server.raw({"EXISTS", list, info}).integer() == 0);
}

TEST_CASE("Fair bound: a waiter that gives up frees its place in the list",
          "[redis][fair][liveness]") {
  RedisServer server;
  const std::string k = key("fair-bound-give-up");
  redlock::Client client(server.endpoint());
  redlock::Lock holder(client, k, fair_lock_options(10s, 60s));  // held throughout
  holder.lock();
  // Two that stay (the watchers): the quitters queue behind them, at position 3.
  const pid_t stays = fork_holders(server, k, 0, 2);
  REQUIRE(wait_for_queue(server, k, 2));
  redlock::Client other(server.endpoint());
  for (int i = 0; i < 5; ++i) {
    redlock::Lock quitter(other, k, options());
    const long long before = redlock::test::queue_length(server, k);
    auto gave_up =
        std::async(std::launch::async, [&quitter] { return !quitter.try_lock_for(300ms); });
    CHECK(wait_for_queue(server, k, before + 1));  // it took a place
    CHECK(gave_up.get());
  }
  // The two that stay, and nothing of the five that left.
  CHECK(redlock::test::queue_length(server, k) == 2);
  kill_all({stays});
}

TEST_CASE("Fair bound: one release examines a bounded number of dead entries",
          "[redis][fair][liveness]") {
  RedisServer server;
  const std::string k = key("fair-bound-dead");
  auto ep = server.endpoint();
  ep.command_timeout = 10s;  // today's release pops every entry: let it finish
  redlock::Client client(ep);
  redlock::Lock holder(client, k, fair_lock_options(10s, 60s));  // held until the unlock
  holder.lock();
  const std::string list = redlock::detail::helper_key(k, ":waiters");
  const std::string info = redlock::detail::helper_key(k, ":waiters:info");
  // 100,000 entries of processes that are gone (nobody subscribes to their channels).
  const long long dead = 100000;
  server.raw({"EVAL",
              "for i = 1, tonumber(ARGV[1]) do\n"
              "  redis.call('rpush', KEYS[1], 'dead' .. i)\n"
              "  redis.call('hset', KEYS[2], 'dead' .. i, '1000:1:0:gone-channel-' .. i)\n"
              "end",
              "2", list, info, std::to_string(dead)},
             10s);
  REQUIRE(server.raw({"LLEN", list}).integer() == dead);
  holder.unlock();
  // The release examined a bounded share; the rest is left to later calls.
  const long long examined = dead - server.raw({"LLEN", list}).integer();
  INFO("entries the release examined: " << examined);
  CHECK(examined >= 1);
  CHECK(examined <= 100);
}
