// Fair mode's quiet waiters (#32): between its join and its turn a queued waiter sends nothing
// but one last attempt at its deadline, and a waiter behind the two watchers does not answer a
// release announcement (one heard from a release before it joined, or from a
// holder that does not hand over). Counted on the server: the scripts run (INFO commandstats'
// evalsha and eval calls; a waiter's first attempt, before it subscribes, is no script).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/eventually.hpp"
#include "support/fair_queue.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of a lock's helper keys

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::command_calls;
using redlock::test::fair_lock_options;
using redlock::test::HeldFairLock;
using redlock::test::key;
using redlock::test::queue_length;
using redlock::test::RedisServer;
using redlock::test::wait_for_queue;

namespace {

long long script_runs(const RedisServer& server) {
  return command_calls(server, "evalsha") + command_calls(server, "eval");
}

// `n` waiters of this process (their Clients share one subscription), queued one after the
// other behind a holder, each in try_lock_for(`wait`) on a thread of its own.
struct QueuedWaiters {
  QueuedWaiters(const RedisServer& server, const std::string& k, int n,
                std::chrono::milliseconds wait) {
    for (int i = 0; i < n; ++i) {
      clients.push_back(std::make_unique<redlock::Client>(server.endpoint()));
      locks.push_back(std::make_unique<redlock::Lock>(*clients.back(), k, fair_lock_options()));
      redlock::Lock& lock = *locks.back();
      results.push_back(
          std::async(std::launch::async, [&lock, wait] { return lock.try_lock_for(wait); }));
      REQUIRE(wait_for_queue(server, k, i + 1));  // in this order
    }
  }
  std::vector<std::unique_ptr<redlock::Client>> clients;
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  std::vector<std::future<bool>> results;
};

}  // namespace

TEST_CASE("A queued fair waiter sends nothing between its join and its deadline",
          "[redis][fair][wake]") {
  HeldFairLock held("fair-quiet-deadline");
  const RedisServer& server = held.server;
  const std::string& k = held.k;
  constexpr int kWaiters = 5;
  {  // one wait first, so that every script is in the server's cache (no NOSCRIPT retry below)
    redlock::Lock once(held.client, k, fair_lock_options());
    CHECK_FALSE(once.try_lock_for(50ms));
  }
  const long long before = script_runs(server);
  {
    QueuedWaiters waiters(server, k, kWaiters, 1500ms);
    for (auto& r : waiters.results) CHECK_FALSE(r.get());
  }
  // Each: the join, one last attempt at its deadline (a hand-over lost on its way, or a queue
  // whose holder and watchers died, is caught there), and the leave. The two watchers (the
  // holder's lease ends in 60 s) and the three behind them wake only at their deadline.
  const long long runs = script_runs(server) - before;
  CHECK(runs == 3 * kWaiters);
  CHECK(queue_length(server, k) == 0);
  CHECK(server.raw({"EXISTS", helper_key(k, ":waiters:info")}).integer() == 0);
  CHECK(held.holder.release());
}

TEST_CASE("A release announcement wakes the two watchers of a fair queue and not those behind them",
          "[redis][fair][wake]") {
  HeldFairLock held("fair-quiet-announce");
  const RedisServer& server = held.server;
  const std::string& k = held.k;
  // Processes of their own: each has its own subscription, as a fleet's waiters do.
  constexpr int kWaiters = 5;
  std::vector<pid_t> pids;
  for (int i = 0; i < kWaiters; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 1;
      try {
        redlock::Client client(server.endpoint());
        redlock::Lock lock(client, k, fair_lock_options());
        if (lock.try_lock_for(30s)) rc = lock.release() ? 0 : 3;
      } catch (...) {
      }
      ::_exit(rc);
    }
    REQUIRE(pid > 0);
    pids.push_back(pid);
    REQUIRE(wait_for_queue(server, k, i + 1));  // in this order
  }
  std::this_thread::sleep_for(1s);  // every join answered and its reply read (sanitizers: slow)
  const long long before = script_runs(server);
  // What a release that ran before a waiter's join announces, delivered after the join (or a
  // holder that deletes the key without handing over): the key is still held, so an attempt
  // is refused; only the head and the next one, who would take a free key, try.
  CHECK(server.raw({"PUBLISH", helper_key(k, ":released"), "some-token"}).integer() == kWaiters);
  // The two watchers' attempts, then time for any other to show (none should).
  CHECK(redlock::test::eventually([&] { return script_runs(server) - before >= 2; }));
  std::this_thread::sleep_for(500ms);
  const long long runs = script_runs(server) - before;
  CHECK(runs == 2);
  CHECK(queue_length(server, k) == kWaiters);
  // Every waiter still gets its turn: the release hands over, each waiter passes it on.
  CHECK(held.holder.release());
  for (const pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  CHECK(server.raw({"EXISTS", k}).integer() == 0);
  CHECK(queue_length(server, k) == 0);
}
