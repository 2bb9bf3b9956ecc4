// A wait always ends (#41), beyond one Lock's fair queue: a waiter that cannot subscribe, a
// process paused with queued threads and then killed, and the primitives that wait on a key
// (Election candidates, ReadWriteLock, MultiLock) when the holder is killed -9 or paused.
// Every process is a real forked one on a real redis-server; holders renew (auto_renew) until
// they are killed or stopped, so a lease ends only after its holder died or stopped. Survivors
// wait with a deadline far past the bound checked: served by their deadline would fail.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "election_worker.hpp"  // with_ttl
#include "support/fair_queue.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using namespace redlock::test;         // the servers, exit_by, key_held, kill_all, ...
using namespace redlock::test::bound;  // kTtl, kGuard, kSlack, kDeadline
using Clock = std::chrono::steady_clock;

namespace {

// A forked process running `body`: exits with its result (0 served), 2 if it threw.
pid_t fork_run(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int rc = 2;
  try {
    rc = body();
  } catch (...) {
  }
  ::_exit(rc);
}

// A process that takes `k` with `lock` (a fresh Lock per call) and keeps it (renewed) until
// killed or stopped.
template <typename Make>
pid_t fork_keeper(const RedisServer& server, Make make) {
  return fork_run([&server, make] {
    redlock::Client client(server.endpoint());
    auto held = make(client);
    for (;;) std::this_thread::sleep_for(1s);
    return 0;
  });
}

// A process that leads election `name` (renewed) until killed or stopped; its pid once it leads,
// -1 (killed) if it did not within 5 s.
pid_t fork_leader(const RedisServer& server, const std::string& name,
                  const redlock::ElectionOptions& options) {
  const pid_t leader = fork_keeper(server, [&name, options](redlock::Client& c) {
    auto e = std::make_unique<redlock::Election>(c, name, "leader", options);
    e->campaign();
    return e;
  });
  redlock::Election observer(redlock::Client(server.endpoint()), name, "observer", options);
  const auto end = Clock::now() + 5s;
  while (!observer.leader() && Clock::now() < end) std::this_thread::sleep_for(5ms);
  if (observer.leader()) return leader;
  kill_all({leader});
  return -1;
}

// A process that waits for `k` (a fair Lock logged in with `endpoint`), releases it, exits 0.
pid_t fork_lock_survivor(const redlock::Endpoint& endpoint, const std::string& k,
                         const redlock::LockOptions& o) {
  return fork_run([endpoint, k, o] {
    redlock::Client client(endpoint);
    redlock::Lock lock(client, k, o);
    if (!lock.try_lock_for(kDeadline)) return 1;
    lock.unlock();
    return 0;
  });
}

// Not fair, ttl 1 s, with a retry_delay far longer than the bound: polling alone could not pass.
redlock::LockOptions on_release_options() {
  redlock::LockOptions o;
  o.ttl = kTtl;
  o.retry_delay = 10s;
  return o;
}

// Stops `holder` (SIGSTOP if `pause`, else kill -9), then checks that every one of `waiters`
// exits 0 (served) within the lease end + a stall guard; kills `holder` at the end.
void check_served_after_loss(pid_t holder, bool pause, const std::vector<pid_t>& waiters) {
  ::kill(holder, pause ? SIGSTOP : SIGKILL);
  const auto gone = Clock::now();
  for (const pid_t w : waiters) CHECK(exit_by(w, gone + kTtl + kGuard + kSlack) == 0);
  kill_all({holder});
}

}  // namespace

TEST_CASE("Liveness: a waiter of a user refused SUBSCRIBE is served behind two busy processes",
          "[redis][fair][liveness][security]") {
  // The minimal ACL without +subscribe: the Client logs one warning and its waiters poll.
  ServerOptions server_options;
  server_options.extra_args = {"--user", "deaf"};
  for (const auto& rule : minimal_acl_rules()) {
    if (rule != "+subscribe" && rule.rfind('>', 0) != 0) server_options.extra_args.push_back(rule);
  }
  server_options.extra_args.push_back(">deaf-pw");
  RedisServer server(server_options);
  const std::string k = key("liveness-nosub");
  const auto end = Clock::now() + 3s;
  // Two busy processes: the key is always held or handed from one to the other.
  std::vector<pid_t> busy;
  for (int i = 0; i < 2; ++i) {
    busy.push_back(fork_run([&server, &k, end] {
      redlock::Client client(server.endpoint());
      redlock::Lock lock(client, k, fair_lock_options(10s, kTtl));
      while (Clock::now() < end) {
        if (!lock.try_lock_for(kDeadline)) return 1;
        std::this_thread::sleep_for(5ms);
        lock.unlock();
      }
      return 0;
    }));
  }
  std::this_thread::sleep_for(300ms);
  redlock::Endpoint deaf = server.endpoint();
  deaf.username = "deaf";
  deaf.password = "deaf-pw";
  auto o = fair_lock_options(50ms, kTtl);  // polls at 50 ms: a hand-over waits 200 ms for it
  const pid_t poller = fork_run([deaf, k, o] {
    redlock::Client client(deaf);
    redlock::Lock lock(client, k, o);
    // Served, then its release (PUBLISH allowed) hands the key back to the busy ones.
    if (!lock.try_lock_for(2500ms)) return 1;
    lock.unlock();
    return 0;
  });
  CHECK(exit_by(poller, Clock::now() + 5s) == 0);
  for (const pid_t b : busy) CHECK(exit_by(b, end + 5s) == 0);
  // It was refused indeed (ACL LOG: the denied command is the entry's "object").
  bool refused = false;
  const auto acl_log = server.raw({"ACL", "LOG"});  // kept: the loop reads into it
  for (const auto& entry : acl_log.elements()) {
    for (const auto& field : entry.elements()) refused = refused || field.str() == "subscribe";
  }
  CHECK(refused);
}

TEST_CASE(
    "Liveness: a process with five queued threads paused, the holder releases, the process is "
    "killed -9: the others are served",
    "[redis][fair][liveness][fault]") {
  RedisServer server;
  const std::string k = key("liveness-stop-kill");
  redlock::Client client(server.endpoint());
  redlock::Lock holder(client, k, fair_lock_options(10s, kTtl));
  holder.lock();
  // First in the queue: five threads of one process (the watchers and the next grantee).
  const pid_t paused = fork_run([&server, &k] {
    redlock::Client c(server.endpoint());
    std::vector<std::unique_ptr<redlock::Lock>> locks;
    std::vector<std::thread> threads;
    for (int i = 0; i < 5; ++i) {
      locks.push_back(std::make_unique<redlock::Lock>(c, k, fair_lock_options(10s, kTtl)));
      threads.emplace_back([&lock = *locks.back()] { (void)lock.try_lock_for(60s); });
      std::this_thread::sleep_for(100ms);  // queued in this order
    }
    for (;;) std::this_thread::sleep_for(1s);
    return 0;
  });
  const std::string info = redlock::detail::helper_key(k, ":waiters:info");
  REQUIRE(wait_for_waiters(server, info, 5, 10s));
  std::vector<pid_t> survivors;
  for (long long n = 6; n <= 7; ++n) {
    survivors.push_back(fork_lock_survivor(server.endpoint(), k, fair_lock_options(10s, kTtl)));
    REQUIRE(wait_for_waiters(server, info, n, 10s));
  }
  ::kill(paused, SIGSTOP);
  const auto released = Clock::now();
  holder.unlock();  // handed to a paused thread, whose subscription is still open
  std::this_thread::sleep_for(1500ms);
  kill_all({paused});  // never woke: its grant and its watch die with it
  // The grant's lease (ttl), the pause, a stall guard, then one grant each in turn.
  const auto bound = released + kTtl + 1500ms + kGuard + kSlack;
  for (const pid_t s : survivors) CHECK(exit_by(s, bound) == 0);
}

TEST_CASE("Liveness: Semaphore(2) with both permit holders and both watchers killed -9",
          "[redis][fair][semaphore][liveness][fault]") {
  RedisServer server;
  const std::string k = key("liveness-permits");
  const auto options = fair_lock_options(10s, kTtl);
  const std::string info = redlock::detail::helper_key(k, ":permit:waiters:info");
  std::vector<pid_t> doomed;
  for (int i = 0; i < 2; ++i) {  // the holders, renewed until killed
    doomed.push_back(fork_keeper(server, [&k, options](redlock::Client& c) {
      auto s = std::make_unique<redlock::Semaphore>(c, k, 2, options);
      s->acquire();
      return s;
    }));
    REQUIRE(key_held(server, redlock::detail::helper_key(k, ":permit:" + std::to_string(i + 1))));
  }
  const auto wait_permit = [&server, &k, options] {
    redlock::Client c(server.endpoint());
    redlock::Semaphore s(c, k, 2, options);
    if (!s.try_acquire_for(kDeadline)) return 1;
    s.release();
    return 0;
  };
  std::vector<pid_t> survivors;
  for (long long n = 1; n <= 4; ++n) {  // two watchers (doomed), then two survivors
    (n <= 2 ? doomed : survivors).push_back(fork_run(wait_permit));
    REQUIRE(wait_for_waiters(server, info, n, 10s));
  }
  kill_all(doomed);
  const auto killed = Clock::now();
  for (const pid_t s : survivors) CHECK(exit_by(s, killed + kTtl + kGuard + kSlack) == 0);
}

TEST_CASE("Liveness: Election candidates queued behind a leader killed -9 (and the next one)",
          "[redis][election][liveness][fault]") {
  RedisServer server;
  const std::string name = key("liveness-election");
  const auto options = with_ttl(kTtl);
  const pid_t leader = fork_leader(server, name, options);
  REQUIRE(leader > 0);
  // Two candidates wait; the first one dies with the leader.
  std::vector<pid_t> candidates;
  for (const char* id : {"first", "second"}) {
    candidates.push_back(fork_run([&server, &name, options, id] {
      redlock::Election e(redlock::Client(server.endpoint()), name, id, options);
      return e.try_campaign_for(kDeadline) ? 0 : 1;
    }));
    std::this_thread::sleep_for(300ms);  // campaigning in this order
  }
  kill_all({leader, candidates[0]});
  const auto killed = Clock::now();
  CHECK(exit_by(candidates[1], killed + kTtl + kGuard + kSlack) == 0);
}

TEST_CASE("Liveness: an Election leader paused (SIGSTOP) is replaced by a waiting candidate",
          "[redis][election][liveness][fault]") {
  RedisServer server;
  const std::string name = key("liveness-election-stop");
  const auto options = with_ttl(kTtl);
  const pid_t leader = fork_leader(server, name, options);
  REQUIRE(leader > 0);
  redlock::Election candidate(redlock::Client(server.endpoint()), name, "next", options);
  ::kill(leader, SIGSTOP);  // its renewals stop; its socket stays open
  const auto stopped = Clock::now();
  CHECK(candidate.try_campaign_for(kDeadline));
  CHECK(Clock::now() - stopped < kTtl + kGuard + kSlack);
  kill_all({leader});
}

TEST_CASE("Liveness: ReadWriteLock writers and readers behind a writer killed -9 or paused",
          "[redis][rwlock][liveness][fault]") {
  RedisServer server;
  const std::string k = key("liveness-rw");
  const auto options = on_release_options();  // a ReadWriteLock waits on release
  const bool pause = GENERATE(false, true);
  const pid_t writer = fork_keeper(server, [&k, options](redlock::Client& c) {
    auto rw = std::make_unique<redlock::ReadWriteLock>(c, k, options);
    rw->lock();
    return rw;
  });
  REQUIRE(key_held(server, k));
  std::vector<pid_t> waiters;
  for (const bool shared : {false, true, false}) {
    waiters.push_back(fork_run([&server, &k, options, shared] {
      redlock::Client c(server.endpoint());
      redlock::ReadWriteLock rw(c, k, options);
      if (shared) return rw.try_lock_shared_for(kDeadline) ? (rw.unlock_shared(), 0) : 1;
      return rw.try_lock_for(kDeadline) ? (rw.unlock(), 0) : 1;
    }));
    std::this_thread::sleep_for(200ms);
  }
  check_served_after_loss(writer, pause, waiters);
}

TEST_CASE("Liveness: MultiLock waiters behind a holder killed -9 or paused",
          "[redis][multilock][liveness][fault]") {
  RedisServer server;
  const std::vector<std::string> keys{key("{liveness-multi}:a"), key("{liveness-multi}:b")};
  const auto options = on_release_options();  // a MultiLock waits on release
  const bool pause = GENERATE(false, true);
  const pid_t holder = fork_keeper(server, [&keys, options](redlock::Client& c) {
    auto lock = std::make_unique<redlock::MultiLock>(c, keys, options);
    lock->lock();
    return lock;
  });
  REQUIRE(key_held(server, keys[1]));
  std::vector<pid_t> waiters;
  for (int i = 0; i < 2; ++i) {
    waiters.push_back(fork_run([&server, &keys, options] {
      redlock::Client c(server.endpoint());
      redlock::MultiLock lock(c, keys, options);
      if (!lock.try_lock_for(kDeadline)) return 1;
      lock.unlock();
      return 0;
    }));
    std::this_thread::sleep_for(200ms);
  }
  check_served_after_loss(holder, pause, waiters);
}
