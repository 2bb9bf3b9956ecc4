// C++20 only: LeaseToken::stop_token() is stop-requested when the watchdog finds the lease lost.
// Built as its own executable with CXX_STANDARD 20 (the library itself is C++17).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stop_token>
#include <thread>

#include <redlock/redlock.hpp>

#include "support/redis_server.hpp"

using namespace std::chrono_literals;

TEST_CASE("C++20: a lease's stop_token is requested when the lease is lost",
          "[redis][watchdog][cxx20]") {
  redlock::test::RedisServer server;
  redlock::Client client(server.endpoint());
  redlock::LockOptions options;
  options.ttl = 600ms;
  options.auto_renew = true;
  options.watchdog = std::make_shared<redlock::Watchdog>();
  const auto key = redlock::test::key("stop-token");
  redlock::Lock lock(client, key, options);
  REQUIRE(lock.try_lock());
  std::stop_token stop = lock.lease().stop_token();
  CHECK_FALSE(stop.stop_requested());
  server.raw({"DEL", key});  // the next renewal is refused
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!stop.stop_requested() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(stop.stop_requested());
  CHECK_FALSE(lock.owns_lock());
  CHECK(redlock::LeaseToken().stop_token().stop_requested());  // no hold: already stopped
  lock.unlock();
}

TEST_CASE("C++20: a normal release never requests stop", "[redis][cxx20]") {
  redlock::test::RedisServer server;
  redlock::Client client(server.endpoint());
  redlock::Lock lock(client, redlock::test::key("stop-token-release"));
  REQUIRE(lock.try_lock());
  std::stop_token stop = lock.lease().stop_token();
  lock.unlock();
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(stop.stop_requested());
}

TEST_CASE("C++20: Election::run() takes a worker of std::stop_token, stopped by stop()",
          "[redis][election][cxx20]") {
  redlock::test::RedisServer server;
  redlock::Election election(redlock::Client(server.endpoint()),
                             redlock::test::key("cxx20-election"), "w");
  std::atomic<std::uint64_t> led{0};
  std::thread service([&] {
    election.run([&](std::stop_token stop, std::uint64_t term) {
      led = term;
      while (!stop.stop_requested()) std::this_thread::sleep_for(5ms);
    });
  });
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (led == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(led > 0);
  CHECK(election.term() == led);
  election.stop();
  service.join();
  CHECK_FALSE(election.is_leader());
}
