// Wake-on-release: waiters retry as soon as the holder releases, never miss a release, survive a
// killed subscriber connection, and fall back to the holder's remaining ttl for crashed holders.
#include <catch2/catch.hpp>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "api/access.hpp"
#include "core/engine.hpp"    // make_lease_engine: releases seen at the seam
#include "io/connection.hpp"  // ClientImpl::subscriber()
#include "support/clock.hpp"
#include "support/redis_server.hpp"
#include "support/waiter_thread.hpp"  // pubsub_connections
#include "util/blocked_waits.hpp"     // blocked_waits, futex_hash_requested
#include "util/key_slot.hpp"          // helper_key: the names of a lock's helper keys
#include "util/token.hpp"             // make_token
#include "watch/subscriber.hpp"       // Subscriber stats: the channel map

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::key;
using redlock::test::monotonic_us;
using redlock::test::pubsub_connections;
using redlock::test::RedisServer;
using redlock::test::ServerGroup;
using Clock = std::chrono::steady_clock;

namespace {

redlock::LockOptions slow_polling(std::chrono::milliseconds ttl = 60s) {
  redlock::LockOptions o;
  o.fair = false;  // this suite is wake-on-release's
  o.ttl = ttl;
  o.retry_delay = 10s;  // polling alone could never pass these tests
  return o;
}

long long subscribers(const RedisServer& server, const std::string& channel) {
  const auto r = server.raw({"PUBSUB", "NUMSUB", channel});
  return r.elements().size() == 2 ? r.elements()[1].integer() : -1;
}

// SET commands the server has run (INFO commandstats): one per acquire attempt.
long set_calls(const RedisServer& server) {
  const std::string info = server.raw({"INFO", "commandstats"}).str();
  const auto at = info.find("cmdstat_set:calls=");
  return at == std::string::npos ? 0L : std::stol(info.substr(at + 18));
}

}  // namespace

TEST_CASE("A waiter in another process acquires within a few ms of the release", "[redis][wake]") {
  RedisServer server;
  const auto k = key("handoff");
  int to_parent[2];
  REQUIRE(pipe(to_parent) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(to_parent[0]);
    int rc = 1;
    try {
      redlock::Client client(server.endpoint());
      redlock::Lock lock(client, k, slow_polling());
      lock.lock();
      long long t = 0;
      if (write(to_parent[1], &t, sizeof t) != sizeof t) _exit(2);
      std::this_thread::sleep_for(400ms);  // the parent is waiting by now
      t = monotonic_us();
      lock.unlock();
      rc = write(to_parent[1], &t, sizeof t) == sizeof t ? 0 : 2;
    } catch (...) {
    }
    _exit(rc);
  }
  close(to_parent[1]);
  long long held = 0;
  REQUIRE(read(to_parent[0], &held, sizeof held) == sizeof held);
  redlock::Client client(server.endpoint());
  redlock::Lock lock(client, k, slow_polling());
  lock.lock();
  const long long acquired = monotonic_us();
  long long released = 0;
  REQUIRE(read(to_parent[0], &released, sizeof released) == sizeof released);
  close(to_parent[0]);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WEXITSTATUS(status) == 0);
  const long long handoff_us = acquired - released;
  INFO("handoff " << handoff_us << " us");
  CHECK(handoff_us >= 0);
  CHECK(handoff_us < 50000);
  lock.unlock();
}

// Two threads, each with its own Lock on one key, take turns `cycles` times each; returns the
// longest single lock() wait in microseconds.
static long long worst_ping_pong_wait_us(const redlock::Client& client, const std::string& k,
                                         const redlock::LockOptions& options, int cycles) {
  std::atomic<long long> worst_us{0};
  auto player = [&] {
    redlock::Lock lock(client, k, options);
    for (int i = 0; i < cycles; ++i) {
      const long long start = monotonic_us();
      lock.lock();
      const long long waited = monotonic_us() - start;
      long long prev = worst_us.load();
      while (waited > prev && !worst_us.compare_exchange_weak(prev, waited)) {
      }
      lock.unlock();
    }
  };
  std::thread a(player);
  std::thread b(player);
  a.join();
  b.join();
  return worst_us.load();
}

TEST_CASE("No lost wake-up: 10,000 release/attempt interleavings", "[redis][wake][slow]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("ping-pong");
  const long long worst_us = worst_ping_pong_wait_us(client, k, slow_polling(), 5000);
  INFO("worst wait " << worst_us << " us");
  // A lost wake-up would leave a waiter asleep for its 5-15 s fallback timer.
  CHECK(worst_us < 2000000);
  // The last waiter unsubscribed: no channel left behind.
  const auto end = Clock::now() + 2s;
  while (subscribers(server, helper_key(k, ":released")) != 0 && Clock::now() < end) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(subscribers(server, helper_key(k, ":released")) == 0);
}

TEST_CASE("Fair mode: no lost hand-over in 5,000 release/attempt interleavings",
          "[redis][wake][fair][slow]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("fair-ping-pong");
  auto options = slow_polling();
  options.fair = true;
  const long long worst_us = worst_ping_pong_wait_us(client, k, options, 2500);
  INFO("worst wait " << worst_us << " us");
  CHECK(worst_us < 2000000);  // a lost hand-over would wait for the 5-15 s timer
  // Nothing left behind: lock, queue and queue info are all gone.
  CHECK(server.raw({"EXISTS", k, helper_key(k, ":waiters"), helper_key(k, ":waiters:info")})
            .integer() == 0);
}

TEST_CASE("Waiters still acquire after their subscriber connection is killed",
          "[redis][wake][fault]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("sub-killed");
  redlock::Lock holder(client, k, slow_polling());
  holder.lock();
  std::atomic<bool> got{false};
  std::atomic<long long> got_at{0};
  std::thread waiter([&] {
    redlock::Lock lock(client, k, slow_polling());
    lock.lock();
    got_at = monotonic_us();
    got = true;
    lock.unlock();
  });
  // Wait until the waiter's subscription is live, then kill it.
  const auto end = Clock::now() + 3s;
  while (subscribers(server, helper_key(k, ":released")) < 1 && Clock::now() < end) {
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(subscribers(server, helper_key(k, ":released")) == 1);
  server.raw({"CLIENT", "KILL", "TYPE", "pubsub"});
  std::this_thread::sleep_for(300ms);  // re-subscribed by now
  const long long released = monotonic_us();
  holder.unlock();
  waiter.join();
  CHECK(got.load());
  CHECK(got_at.load() - released < 1000000);
}

TEST_CASE("A holder that crashes publishes nothing: waiters retry when its ttl runs out",
          "[redis][wake]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("expired-holder");
  server.raw({"SET", k, "crashed-holder-token", "PX", "400"});
  redlock::Lock lock(client, k, slow_polling());
  const auto start = Clock::now();
  REQUIRE(lock.try_lock_for(5s));
  const auto waited = Clock::now() - start;
  CHECK(waited >= 300ms);
  CHECK(waited < 1500ms);  // bounded by the holder's PTTL, not the 10 s retry delay
  lock.unlock();
}

TEST_CASE("Redlock waiters wake on a release from any node", "[redis][wake][redlock]") {
  ServerGroup group(3);
  std::vector<redlock::Client> clients;
  for (const auto& ep : group.endpoints()) clients.emplace_back(ep);
  const auto k = key("redlock-wake");
  redlock::Redlock holder(clients, k, slow_polling());
  holder.lock();
  std::atomic<long long> got_at{0};
  std::thread waiter([&] {
    redlock::Redlock lock(clients, k, slow_polling());
    lock.lock();
    got_at = monotonic_us();
    lock.unlock();
  });
  std::this_thread::sleep_for(300ms);
  const long long released = monotonic_us();
  holder.unlock();
  waiter.join();
  CHECK(got_at.load() - released < 200000);
}

TEST_CASE("wake_on_release = false polls with the jittered retry delay", "[redis][wake]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("polling");
  redlock::LockOptions o;
  o.fair = false;  // this suite is wake-on-release's
  o.ttl = 60s;
  o.retry_delay = 200ms;
  o.wake_on_release = false;
  redlock::Lock holder(client, k, o);
  holder.lock();
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    redlock::Lock lock(client, k, o);
    lock.lock();
    done = true;
    lock.unlock();
  });
  std::this_thread::sleep_for(100ms);
  CHECK(subscribers(server, helper_key(k, ":released")) ==
        0);  // no subscription without the option
  holder.unlock();
  waiter.join();
  CHECK(done.load());
}

TEST_CASE("A refused SUBSCRIBE (NOPERM) falls back to polling with one warning and no entry",
          "[redis][wake][acl]") {
  redlock::test::ServerOptions options;
  // No channel permission at all: every SUBSCRIBE (and PUBLISH) is refused with NOPERM.
  options.extra_args = {"--user", "nochan", "on", ">nochan-pw-1", "~*", "resetchannels", "+@all"};
  RedisServer server(options);
  redlock::Client holder_client(server.endpoint());  // default user: its releases publish
  auto ep = server.endpoint();
  ep.username = "nochan";
  ep.password = "nochan-pw-1";
  ep.connect_timeout = 1000ms;
  ep.command_timeout = 1000ms;  // an unconfirmed subscription would stall a waiter for 2 s
  redlock::Client client(ep);
  auto warnings = std::make_shared<std::atomic<int>>(0);
  redlock::set_log_handler([warnings](redlock::LogLevel level, std::string_view message) {
    if (level >= redlock::LogLevel::warn && message.find("SUBSCRIBE") != std::string_view::npos) {
      ++*warnings;
    }
  });
  redlock::LockOptions o;
  o.fair = false;  // this suite is wake-on-release's
  o.ttl = 10s;
  o.retry_delay = 20ms;
  for (int i = 0; i < 8; ++i) {
    const auto k = key("nochan-" + std::to_string(i));
    redlock::Lock holder(holder_client, k, o);
    REQUIRE(holder.try_lock());
    std::atomic<long long> waited_ms{-1};
    std::thread waiter([&] {
      redlock::Lock lock(client, k, o);
      const auto start = Clock::now();
      if (lock.try_lock_for(5s)) {
        waited_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
        lock.unlock();
      }
    });
    std::this_thread::sleep_for(30ms);
    holder.unlock();
    waiter.join();
    INFO("round " << i << ": the waiter took " << waited_ms.load() << " ms");
    CHECK(waited_ms.load() >= 0);
    CHECK(waited_ms.load() < 1000);  // polling pace (20 ms), not the 2 s confirmation wait
  }
  CHECK(redlock::detail::Access::client(client)->subscriber().stats().channels ==
        0);  // no entry left per key
  redlock::set_log_handler({});
  CHECK(warnings->load() == 1);
}

TEST_CASE("A lone thread after contention: its own lingering subscription is not a listener",
          "[redis][wake]") {
  // After contention this process stays subscribed to the release channel for a while (the
  // linger). A release then reaches only that subscription: no other process, and no waiter of
  // this one, heard it, so the releasing thread must not pause for a woken waiter (the
  // "courtesy" pause), nor count as having been heard.
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("lone-after-contention");
  redlock::LockOptions o;
  o.fair = false;  // this suite is wake-on-release's
  o.ttl = 10s;
  {
    std::atomic<bool> stop{false};
    auto cycle = [&] {
      redlock::Lock lock(client, k, o);
      while (!stop) {
        lock.lock();
        lock.unlock();
      }
    };
    std::thread a(cycle);
    std::thread b(cycle);
    std::this_thread::sleep_for(300ms);
    stop = true;
    a.join();
    b.join();
  }
  const auto node = redlock::detail::Access::client(client);
  auto engine = redlock::detail::make_lease_engine({node}, k, o);
  REQUIRE(node->subscriber().subscribed(engine->channel()));  // it lingers: the case under test
  constexpr int kCycles = 20;
  std::size_t heard = 0;
  for (int i = 0; i < kCycles; ++i) {
    const std::string token = redlock::detail::make_token();
    const auto got = engine->acquire(redlock::detail::AcquireRequest{&token});
    REQUIRE(got.held);
    heard += engine->release(token, redlock::detail::Announce::waiters).listeners;
  }
  CHECK(subscribers(server, helper_key(k, ":released")) == 1);  // still only our own subscription
  CHECK(heard == 0);
}

TEST_CASE("A subscribed waiter does not poll faster than the holder's remaining ttl requires",
          "[redis][wake]") {
  // The holder neither releases nor lets its lease run out within the wait: a subscribed waiter
  // learns of a release from the announcement, so retrying every retry_delay would only load the
  // server. Counted in commands, not time.
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("no-poll-while-subscribed");
  server.raw({"SET", k, "someone-else", "PX", "60000"});
  redlock::LockOptions o;
  o.fair = false;        // this suite is wake-on-release's
  o.retry_delay = 20ms;  // polling would make ~50 attempts in the second below
  redlock::Lock lock(client, k, o);
  const auto sets = [&] { return set_calls(server); };
  const long before = sets();
  CHECK_FALSE(lock.try_lock_for(1s));
  const long attempts = sets() - before;
  INFO(attempts << " attempts in 1 s");
  CHECK(attempts <= 3);  // the first, the one after the subscription is confirmed, and slack
}

TEST_CASE("Threads of one process with their own Lock on a key wait their turn instead of barging",
          "[redis][wake]") {
  // A thread that releases and at once calls lock() again, while other threads of the process
  // wait for the key, queues behind them (a release wakes them in arrival order): its attempt
  // would only be refused. Counted in SET commands per acquisition, not time.
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("no-local-barging");
  redlock::LockOptions o;
  o.fair = false;  // this suite is wake-on-release's
  o.ttl = 10s;
  const auto sets = [&] { return set_calls(server); };
  constexpr int kThreads = 8;
  constexpr int kCycles = 40;
  const long before = sets();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      redlock::Lock lock(client, k, o);
      for (int i = 0; i < kCycles; ++i) {
        if (!lock.try_lock_for(20s)) {
          ++failures;
          continue;
        }
        lock.unlock();
      }
    });
  }
  for (auto& t : threads) t.join();
  const double per_acquisition =
      static_cast<double>(sets() - before) / static_cast<double>(kThreads * kCycles);
  INFO(per_acquisition << " SET per acquisition");
  CHECK(failures.load() == 0);
  CHECK(per_acquisition < 1.5);  // 2 when every releaser's next attempt is refused
}

TEST_CASE("A try_lock_for queued behind this process's waiters still tries once before it ends",
          "[redis][wake]") {
  // The key is freed without an announcement (a DEL from elsewhere), so the waiter ahead sleeps
  // on. A try_lock_for() that queued behind it (no attempt at first) must not give up without
  // a single attempt.
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("queued-tries-once");
  server.raw({"SET", k, "someone-else", "PX", "60000"});
  redlock::Lock ahead(client, k, slow_polling());
  std::atomic<bool> ahead_done{false};
  std::thread waiter([&] {
    if (ahead.try_lock_for(30s)) ahead.unlock();
    ahead_done = true;
  });
  std::this_thread::sleep_for(300ms);  // generous: it is subscribed and asleep
  server.raw({"DEL", k});
  redlock::Lock behind(client, k, slow_polling());
  const long sets_before = set_calls(server);
  CHECK(behind.try_lock_for(200ms));            // its wait ends in an attempt, at the deadline
  CHECK(set_calls(server) - sets_before == 1);  // and it made no other
  if (behind.owns_lock()) behind.unlock();
  ahead.cancel_waits();
  waiter.join();
}

TEST_CASE("Clients to one server share one subscriber connection and thread",
          "[redis][wake][load]") {
  RedisServer server;
  const auto k = key("shared-subscriber");
  redlock::Client holder_client(server.endpoint());
  redlock::Lock holder(holder_client, k, slow_polling());
  holder.lock();
  // 20 Clients (as a service with a Client per request or tenant would make), a waiter on each.
  constexpr int kClients = 20;
  std::vector<redlock::Client> clients;
  for (int i = 0; i < kClients; ++i) clients.emplace_back(server.endpoint());
  std::atomic<int> got{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kClients; ++i) {
    waiters.emplace_back([&, i] {
      redlock::Lock lock(clients[static_cast<std::size_t>(i)], k, slow_polling());
      if (lock.try_lock_for(30s)) {
        ++got;
        lock.unlock();
      }
    });
  }
  const auto end = Clock::now() + 10s;
  while (redlock::detail::Access::client(clients.back())->started_subscriber() == nullptr ||
         subscribers(server, helper_key(k, ":released")) < 1) {
    if (Clock::now() > end) break;
    std::this_thread::sleep_for(5ms);
  }
  std::this_thread::sleep_for(200ms);  // every waiter has watched by now (or soon will)
  CHECK(pubsub_connections(server) == 1);
  CHECK(subscribers(server, helper_key(k, ":released")) == 1);
  const auto* first = redlock::detail::Access::client(clients.front())->started_subscriber();
  for (const auto& c : clients) {
    const auto* s = redlock::detail::Access::client(c)->started_subscriber();
    CHECK((s == nullptr || s == first));
  }
  // Another user, or another server, gets its own.
  redlock::Endpoint other = server.endpoint();
  other.command_timeout = 999ms;
  redlock::Client different(other);
  CHECK(&redlock::detail::Access::client(different)->subscriber() != first);
  holder.unlock();
  for (auto& t : waiters) t.join();
  CHECK(got.load() == kClients);  // woken one after another through the one connection
}

TEST_CASE("An idle subscriber closes its connection, and the next wait opens it again",
          "[redis][wake][load]") {
  redlock::detail::set_idle_close_for_test(300ms);
  struct Restore {
    ~Restore() { redlock::detail::set_idle_close_for_test(30s); }
  } restore;
  RedisServer server;
  redlock::Endpoint endpoint = server.endpoint();
  endpoint.connect_timeout = 1234ms;  // a subscriber of this test's own
  redlock::Client client(endpoint);
  const auto k = key("idle-subscriber");
  for (int round = 0; round < 2; ++round) {
    redlock::Lock holder(client, k, slow_polling());
    holder.lock();
    std::atomic<bool> got{false};
    std::thread waiter([&] {
      redlock::Lock lock(client, k, slow_polling());
      got = lock.try_lock_for(20s);
      if (got) lock.unlock();
    });
    const auto end = Clock::now() + 5s;
    while (subscribers(server, helper_key(k, ":released")) < 1 && Clock::now() < end) {
      std::this_thread::sleep_for(5ms);
    }
    REQUIRE(subscribers(server, helper_key(k, ":released")) == 1);
    const auto released = Clock::now();
    holder.unlock();
    waiter.join();
    REQUIRE(got.load());
    CHECK(Clock::now() - released < 5s);  // woken, not polled (retry_delay is 10 s)
    // The subscription lingers 500 ms, then the connection 300 ms more: then it is closed.
    auto& subscriber = redlock::detail::Access::client(client)->subscriber();
    const auto closed_by = Clock::now() + 10s;
    while (subscriber.stats().idle_closes < static_cast<std::uint64_t>(round + 1) &&
           Clock::now() < closed_by) {
      std::this_thread::sleep_for(20ms);
    }
    CHECK(subscriber.stats().idle_closes == static_cast<std::uint64_t>(round + 1));
    // The server agrees: no connection is left whose last command was the UNSUBSCRIBE.
    const std::string list = server.raw({"CLIENT", "LIST"}).str();
    CHECK(list.find("cmd=unsubscribe") == std::string::npos);
  }
  CHECK(redlock::detail::Access::client(client)->subscriber().stats().reconnects == 2);
}

// Linux 6.16+ gives a process a futex hash sized for its CPUs (16 buckets on 2); every sleeping
// thread sits in one, and every futex operation walks its bucket. Threads blocked in the
// library's waits grow it to at least one bucket for every two of them (util/blocked_waits.hpp):
// without that, 15,000 waiters slowed a hot key on the same process to 0.7-0.9x (bench 6a).
TEST_CASE("Waiting threads grow the process's futex hash, and the count of them returns to 0",
          "[redis][wake][load]") {
  const auto slots = [] {
    return ::prctl(78 /* PR_FUTEX_HASH */, 2UL /* GET_SLOTS */, 0UL, 0UL, 0UL);
  };
  RedisServer server;
  redlock::Client client(server.endpoint());
  constexpr int kWaiters = 600;
  redlock::LockOptions options = slow_polling();
  options.retry_delay = 20s;
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  for (int i = 0; i < kWaiters; ++i) {
    const auto k = key("futex-hash-" + std::to_string(i));
    server.raw({"SET", k, "elsewhere", "PX", "60000"});
    locks.push_back(std::make_unique<redlock::Lock>(client, k, options));
  }
  std::atomic<int> acquired{0};
  std::vector<std::thread> waiters;
  for (auto& lock : locks) {
    waiters.emplace_back([&acquired, &lock] {
      try {
        if (lock->try_lock_for(30s)) ++acquired;
      } catch (const redlock::CancelledError&) {
      }
    });
  }
  // Each sleeps until its key's PTTL (60 s) or a jittered retry_delay (10-30 s): all 600 are
  // asleep at once before the first of them wakes.
  std::size_t most = 0;
  const auto end = Clock::now() + 20s;
  while (most < kWaiters && Clock::now() < end) {
    most = std::max(most, redlock::detail::blocked_waits());
    std::this_thread::sleep_for(10ms);
  }
  CHECK(most == kWaiters);
  const int before = slots();
  if (before < 0) {
    WARN("this kernel has no PR_FUTEX_HASH (Linux < 6.16): its global hash is left alone");
    CHECK(redlock::detail::futex_hash_requested() == 0);
  } else if (before == 0) {
    WARN("this process uses the global futex hash: left alone");
  } else {
    // The resize lands once the old hash is no longer in use: wait for it.
    const auto landed = Clock::now() + 5s;
    while (slots() * 2 < kWaiters && Clock::now() < landed) std::this_thread::sleep_for(10ms);
    INFO("futex hash buckets: " << slots() << ", asked for "
                                << redlock::detail::futex_hash_requested());
    CHECK(slots() * 2 >= kWaiters);
    CHECK(redlock::detail::futex_hash_requested() >= kWaiters / 2);
  }
  for (auto& lock : locks) lock->cancel_waits();
  for (auto& t : waiters) t.join();
  CHECK(acquired.load() == 0);
  CHECK(redlock::detail::blocked_waits() == 0);
}

namespace {

struct Shares {
  std::vector<int> acquisitions;  // per process
  long long max_wait_us{0};       // the longest lock() call of any process
  long long total{0};             // acquisitions of all processes
};

// `processes` forked processes, each with its own Client(s) and a default-option lock on `k`
// over `endpoints` (one: a Lock; more: a Redlock), loop for `seconds`: lock(), a read-sleep-write
// of a counter on the first endpoint (1 ms), unlock(). The parent reads what each one counted.
Shares contend_across_processes(const std::vector<redlock::Endpoint>& endpoints,
                                const std::string& k, int processes, long long seconds) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const auto stop_at = monotonic_us() + seconds * 1000000;
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid != 0) {
      children.push_back(pid);
      continue;
    }
    int rc = 1;
    try {
      std::vector<redlock::Client> clients(endpoints.begin(), endpoints.end());
      redlock::Client plain(endpoints.front());
      redlock::LockOptions options;
      options.fair = false;  // this suite is wake-on-release's
      options.ttl = 10s;
      std::unique_ptr<redlock::LockBase> lock;
      if (clients.size() == 1) {
        lock = std::make_unique<redlock::Lock>(clients.front(), k, options);
      } else {
        lock = std::make_unique<redlock::Redlock>(clients, k, options);
      }
      long long out[2] = {0, 0};  // acquisitions, longest wait (us)
      while (monotonic_us() < stop_at) {
        const auto asked = monotonic_us();
        std::lock_guard<redlock::LockBase> guard(*lock);
        out[1] = std::max(out[1], monotonic_us() - asked);
        const auto value = plain.command({"GET", k + ":counter"});
        const long long n = value.is_nil() ? 0 : std::stoll(value.str());
        std::this_thread::sleep_for(1ms);
        plain.command({"SET", k + ":counter", std::to_string(n + 1)});
        ++out[0];
      }
      rc = write(pipe_fds[1], out, sizeof out) == sizeof out ? 0 : 2;
    } catch (...) {
    }
    _exit(rc);
  }
  close(pipe_fds[1]);
  Shares shares;
  long long in[2];
  while (read(pipe_fds[0], in, sizeof in) == sizeof in) {
    shares.acquisitions.push_back(static_cast<int>(in[0]));
    shares.max_wait_us = std::max(shares.max_wait_us, in[1]);
    shares.total += in[0];
  }
  close(pipe_fds[0]);
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WEXITSTATUS(status) == 0);
  }
  REQUIRE(shares.acquisitions.size() == static_cast<std::size_t>(processes));
  return shares;
}

void check_even(const Shares& shares) {
  const auto [lo, hi] = std::minmax_element(shares.acquisitions.begin(), shares.acquisitions.end());
  INFO("acquisitions per process: " << *lo << " - " << *hi << ", longest wait "
                                    << shares.max_wait_us / 1000 << " ms");
  CHECK(*lo > 0);
  // Without the elder-first wake order one process took 10-15x another's share, and a wait
  // lasted over half a second (redlock-bench section 3 measures the figures).
  CHECK(static_cast<double>(*lo) >= 0.4 * static_cast<double>(*hi));
  CHECK(shares.max_wait_us < 1000000);  // no process starves (a loose bound: sanitizer builds)
}

}  // namespace

TEST_CASE(
    "Default options: processes contending for a Lock get even shares, the longest "
    "waiter first",
    "[redis][wake][slow]") {
  RedisServer server;
  const auto k = key("process-shares");
  const Shares shares = contend_across_processes({server.endpoint()}, k, 6, 2);
  CHECK(std::to_string(shares.total) == server.raw({"GET", k + ":counter"}).str());
  check_even(shares);
}

TEST_CASE("Default options: processes contending for a Redlock get even shares",
          "[redlock][wake][slow]") {
  ServerGroup group(3);
  const auto k = key("process-shares-redlock");
  const Shares shares = contend_across_processes(group.endpoints(), k, 6, 2);
  CHECK(std::to_string(shares.total) == group[0].raw({"GET", k + ":counter"}).str());
  check_even(shares);
}
