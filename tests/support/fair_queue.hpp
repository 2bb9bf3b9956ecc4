// tests/support/fair_queue.hpp: what the fair-mode tests share: the options, a lock held by this
// process, and what they count on the redis-server: the commands it ran (INFO commandstats, the
// calls inside scripts included) and the length of a fair queue; and the forked processes'
// exits (exit_by, kill_all).
//   HeldFairLock held("my-test");                        // a server, and a lock held on it
//   const long long before = command_calls(held.server, "evalsha");
//   REQUIRE(wait_for_queue(held.server, held.k, 3));     // three waiters queued
#ifndef REDLOCK_TESTS_SUPPORT_FAIR_QUEUE_HPP
#define REDLOCK_TESTS_SUPPORT_FAIR_QUEUE_HPP

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of a lock's helper keys

namespace redlock {
namespace test {

// The bound of a fair wait (docs/locks-and-waiting.md) at the ttl the liveness tests use.
namespace bound {
inline constexpr std::chrono::milliseconds kTtl{1000};
inline constexpr std::chrono::milliseconds kClaim{200};   // the claim window at ttl 1 s: ttl / 5
inline constexpr auto kGuard = kTtl * 11 / 8;             // the longest stall guard: 1.375 ttl
inline constexpr std::chrono::milliseconds kSlack{1500};  // a busy 2-core machine
inline constexpr std::chrono::seconds kDeadline{20};  // the survivors' own: far past every bound
}  // namespace bound

// Fair mode, with a long retry_delay (polling alone could not pass these tests) and ttl.
inline redlock::LockOptions fair_lock_options(
    std::chrono::milliseconds retry_delay = std::chrono::seconds(10),
    std::chrono::milliseconds ttl = std::chrono::seconds(60)) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.retry_delay = retry_delay;
  o.fair = true;
  return o;
}

// A server, and a fair lock on `name` that this process holds (its lease ends in 60 s).
struct HeldFairLock {
  explicit HeldFairLock(const std::string& name)
      : k(key(name)), client(server.endpoint()), holder(client, k, fair_lock_options()) {
    holder.lock();
  }
  RedisServer server;
  std::string k;
  redlock::Client client;
  redlock::Lock holder;
};

// Calls of `command` (lower case, e.g. "evalsha") since the server started or CONFIG RESETSTAT.
inline long long command_calls(const RedisServer& server, const std::string& command) {
  const std::string info = server.raw({"INFO", "commandstats"}).str();
  const std::string tag = "cmdstat_" + command + ":calls=";
  const auto at = info.find(tag);
  if (at == std::string::npos) return 0;
  return std::stoll(info.substr(at + tag.size()));
}

// Entries in the fair queue of the lock on `k` (live and departed ones alike).
inline long long queue_length(const RedisServer& server, const std::string& k) {
  return server.raw({"LLEN", redlock::detail::helper_key(k, ":waiters")}).integer();
}

// Waits until the fair queue of `k` has `n` entries; false if it has not within `within`.
inline bool wait_for_queue(const RedisServer& server, const std::string& k, long long n,
                           std::chrono::seconds within = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + within;
  while (queue_length(server, k) != n) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Waits until the hash `info` (a queue's live waiters: a lock's {k}:waiters:info, a Semaphore's
// {k}:permit:waiters:info) has `n` fields; false after `within`. Unlike the list's length, a
// waiter that queues again (a new token) does not change it.
inline bool wait_for_waiters(const RedisServer& server, const std::string& info, long long n,
                             std::chrono::seconds within = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + within;
  while (server.raw({"HLEN", info}).integer() != n) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Waits until `k` exists on `server` (a holder took it); false after 5 s.
inline bool key_held(const RedisServer& server, const std::string& k) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server.raw({"EXISTS", k}).integer() == 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// The exit code of the forked `pid` if it exits by `until` (128 + the signal if one ended it);
// otherwise kills it and returns -1.
inline int exit_by(pid_t pid, std::chrono::steady_clock::time_point until) {
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// kill -9 of every one of `pids`, then reaps them.
inline void kill_all(const std::vector<pid_t>& pids) {
  for (const pid_t pid : pids) ::kill(pid, SIGKILL);
  for (const pid_t pid : pids) ::waitpid(pid, nullptr, 0);
}

}  // namespace test
}  // namespace redlock

#endif  // REDLOCK_TESTS_SUPPORT_FAIR_QUEUE_HPP
