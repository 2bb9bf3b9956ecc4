// tests/support/waiter_thread.hpp: what the wake-up tests share: a thread waiting in lock(), and
// the subscriber connections a server counts.
//   redlock::test::Waiter waiter(client, k, options);   // lock() on a thread of its own
//   REQUIRE(eventually([&] { return waiter.done(); }));
#ifndef REDLOCK_TESTS_SUPPORT_WAITER_THREAD_HPP
#define REDLOCK_TESTS_SUPPORT_WAITER_THREAD_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <redlock/redlock.hpp>

#include "support/redis_server.hpp"

namespace redlock {
namespace test {

// A thread that waits for `k` in lock() (no deadline), records when it got it and unlocks; its
// destructor cancels a wait still under way (cancel_waits) and joins it.
class Waiter {
 public:
  Waiter(redlock::Client& client, const std::string& k, redlock::LockOptions o)
      : lock_(client, k, o), thread_([this] { run(); }) {}
  ~Waiter() {
    lock_.cancel_waits();
    if (thread_.joinable()) thread_.join();
  }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  bool done() const { return done_.load(); }
  bool cancelled() const { return cancelled_.load(); }
  std::chrono::steady_clock::time_point at() const { return at_.load(); }
  void cancel() { lock_.cancel_waits(); }

 private:
  void run() {
    try {
      lock_.lock();
      at_ = std::chrono::steady_clock::now();
      lock_.unlock();
    } catch (const redlock::CancelledError&) {
      at_ = std::chrono::steady_clock::now();
      cancelled_ = true;
    }
    done_ = true;
  }

  redlock::Lock lock_;
  std::atomic<bool> done_{false};
  std::atomic<bool> cancelled_{false};
  std::atomic<std::chrono::steady_clock::time_point> at_{};
  std::thread thread_;
};

// The server's pub/sub connections (CLIENT LIST TYPE pubsub).
inline long long pubsub_connections(const RedisServer& server) {
  const std::string list = server.raw({"CLIENT", "LIST", "TYPE", "pubsub"}).str();
  return static_cast<long long>(std::count(list.begin(), list.end(), '\n'));
}

}  // namespace test
}  // namespace redlock

#endif  // REDLOCK_TESTS_SUPPORT_WAITER_THREAD_HPP
