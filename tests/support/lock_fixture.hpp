// tests/support/lock_fixture.hpp: what most lock suites start from: quick options, the value a
// key holds, and a server with a Client and a key of the run.
//   Setup s("name");                                  // a redis-server, a Client, key("name")
//   redlock::Lock lock(s.client, s.k, fast(60s));     // ttl 60 s, retry_delay 5 ms
//   CHECK(value_of(s.server, s.k) == token);          // "" when the key does not exist
// (test_hold.cpp uses it; the older suites still carry copies of these three.)
#ifndef REDLOCK_TESTS_SUPPORT_LOCK_FIXTURE_HPP
#define REDLOCK_TESTS_SUPPORT_LOCK_FIXTURE_HPP

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>

#include <redlock/client.hpp>
#include <redlock/options.hpp>
#include <redlock/watchdog.hpp>

#include "support/redis_server.hpp"

namespace redlock {
namespace test {

// ttl `ttl`, retry_delay 5 ms: waits that notice a change quickly.
inline redlock::LockOptions fast(std::chrono::milliseconds ttl = std::chrono::seconds(10)) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.retry_delay = std::chrono::milliseconds(5);
  return o;
}

// The string value of `k` on `server` (through the harness's own connection); "" if none.
inline std::string value_of(const RedisServer& server, const std::string& k) {
  const auto r = server.raw({"GET", k});
  return r.is_nil() ? std::string() : r.str();
}

// Options for a renewed hold (fast(ttl), auto_renew, a watchdog of its own) whose on_lost keeps
// the first LostEvent in `first` and counts every call.
struct LostWatch {
  std::promise<redlock::LostEvent> first;
  std::atomic<int> calls{0};
  redlock::LockOptions renewed(std::chrono::milliseconds ttl) {
    redlock::LockOptions options = fast(ttl);
    options.auto_renew = true;
    options.watchdog = std::make_shared<redlock::Watchdog>();
    options.on_lost = [this](const redlock::LostEvent& e) {
      if (calls++ == 0) first.set_value(e);
    };
    return options;
  }
};

// A server, a Client to it, and a key under the run's prefix.
struct Setup {
  explicit Setup(const std::string& name) : client(server.endpoint()), k(key(name)) {}
  RedisServer server;
  redlock::Client client;
  std::string k;
};

}  // namespace test
}  // namespace redlock

#endif  // REDLOCK_TESTS_SUPPORT_LOCK_FIXTURE_HPP
