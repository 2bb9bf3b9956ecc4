// tests/support/fair_queue.hpp: what the fair-mode tests share: the options, a lock held by this
// process, and what they count on the redis-server: the commands it ran (INFO commandstats, the
// calls inside scripts included) and the length of a fair queue.
//   HeldFairLock held("my-test");                        // a server, and a lock held on it
//   const long long before = command_calls(held.server, "evalsha");
//   REQUIRE(wait_for_queue(held.server, held.k, 3));     // three waiters queued
#ifndef REDLOCK_TESTS_SUPPORT_FAIR_QUEUE_HPP
#define REDLOCK_TESTS_SUPPORT_FAIR_QUEUE_HPP

#include <chrono>
#include <string>
#include <thread>

#include <redlock/redlock.hpp>

#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of a lock's helper keys

namespace redlock {
namespace test {

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

}  // namespace test
}  // namespace redlock

#endif  // REDLOCK_TESTS_SUPPORT_FAIR_QUEUE_HPP
