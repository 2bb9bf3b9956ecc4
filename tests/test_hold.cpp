// Holds owned by a handle (redlock/hold.hpp): acquired on one thread and released on another,
// moved, default, released by the destructor in the background, renewed by the watchdog, reported
// lost, fenced, in fair mode, refused to the thread that owns the object's thread hold, queued
// behind each other and behind thread holds, and a Semaphore's permits.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/eventually.hpp"
#include "support/lock_fixture.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: a Semaphore's slot keys

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::fast;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::Setup;
using redlock::test::value_of;
using Clock = std::chrono::steady_clock;

TEST_CASE("Hold: acquired on one thread, released on another", "[redis][hold]") {
  Setup s("hold-threads");
  redlock::Lock lock(s.client, s.k, fast());
  redlock::Hold hold;
  std::thread([&] { hold = lock.acquire(); }).join();  // its thread has exited: the hold stays
  REQUIRE(hold.holds());
  CHECK(hold.validity() > 0ms);
  const std::string token = value_of(s.server, s.k);
  CHECK_FALSE(token.empty());
  CHECK_FALSE(lock.owns_lock());  // not a thread hold
  std::promise<bool> released;
  std::thread([&] { released.set_value(hold.release()); }).join();
  CHECK(released.get_future().get());
  CHECK_FALSE(hold.holds());
  CHECK(s.server.raw({"EXISTS", s.k}).integer() == 0);
  CHECK_FALSE(hold.release());  // holds nothing any more
}

TEST_CASE("Hold: moved, default, and move-assigned", "[redis][hold]") {
  Setup s("hold-moved");
  redlock::Lock lock(s.client, s.k, fast());

  redlock::Hold empty;
  CHECK_FALSE(empty.holds());
  CHECK_FALSE(static_cast<bool>(empty));
  CHECK(empty.validity() == 0ms);
  CHECK(empty.fence() == 0);
  CHECK(empty.lease().lost());
  CHECK_FALSE(empty.extend());
  CHECK_FALSE(empty.release());

  redlock::Hold first = lock.acquire();
  const std::string token = value_of(s.server, s.k);
  redlock::Hold moved(std::move(first));
  CHECK_FALSE(first.holds());  // NOLINT(bugprone-use-after-move): documented to hold nothing
  REQUIRE(moved.holds());
  CHECK(value_of(s.server, s.k) == token);  // moving sent nothing
  std::thread worker([held = std::move(moved)]() mutable {
    CHECK(held.extend(20s));
    CHECK(held.release());
  });
  worker.join();
  CHECK(s.server.raw({"EXISTS", s.k}).integer() == 0);

  // Assigning over a Hold releases what it held (in the background).
  redlock::Hold a = lock.acquire();
  const std::string a_token = value_of(s.server, s.k);
  a = redlock::Hold();
  CHECK(eventually([&] { return value_of(s.server, s.k) != a_token; }));
  auto b = lock.try_acquire_for(5s);  // the object's gate was opened by that release
  REQUIRE(b);
  CHECK(b->holds());
}

TEST_CASE("Hold: the destructor's release reaches a waiter of another client", "[redis][hold]") {
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    Setup s(fair ? "hold-dtor-fair" : "hold-dtor");
    redlock::LockOptions options = fast(60s);
    options.fair = fair;
    redlock::Lock lock(s.client, s.k, options);
    redlock::Client other_client(s.server.endpoint());
    redlock::Lock other(other_client, s.k, options);  // another connection and subscriber
    auto hold = std::make_unique<redlock::Hold>(lock.acquire());
    const std::string token = value_of(s.server, s.k);
    std::atomic<bool> waiting{false};
    auto waiter = std::async(std::launch::async, [&] {
      waiting = true;
      return other.try_lock_for(30s) ? value_of(s.server, s.k) : std::string();
    });
    REQUIRE(eventually([&] { return waiting.load(); }));
    std::this_thread::sleep_for(50ms);  // the waiter is refused and waits (fair: queued)
    const auto destroyed = Clock::now();
    hold.reset();  // returns at once; the release runs in the background
    const auto returned = Clock::now();
    // A generous bound (the 60 s ttl is far away): the waiter holds because of the release.
    REQUIRE(waiter.wait_for(20s) == std::future_status::ready);
    const std::string winner = waiter.get();
    CHECK_FALSE(winner.empty());
    CHECK(winner != token);
    CHECK(returned - destroyed < 5s);  // no round trip needed; a bound only a hang exceeds
    other.unlock();
    CHECK(s.server.raw({"EXISTS", s.k}).integer() == 0);
  }
}

TEST_CASE("Hold: the watchdog renews a handle hold past its ttl", "[redis][hold][watchdog]") {
  Setup s("hold-renewed");
  auto dog = std::make_shared<redlock::Watchdog>();
  redlock::LockOptions options = fast(300ms);
  options.auto_renew = true;
  options.watchdog = dog;
  redlock::Lock lock(s.client, s.k, options);
  redlock::Hold hold = lock.acquire();
  const std::string token = value_of(s.server, s.k);
  int still_ours = 0;
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(300ms);  // one ttl each
    still_ours += value_of(s.server, s.k) == token ? 1 : 0;
  }
  CHECK(still_ours == 3);
  CHECK(hold.holds());
  CHECK(dog->stats().renewals >= 3);
  CHECK(hold.release());
  CHECK(s.server.raw({"EXISTS", s.k}).integer() == 0);
}

TEST_CASE("Hold: on_lost fires for a handle hold whose key is taken over", "[redis][hold]") {
  Setup s("hold-lost");
  redlock::test::LostWatch lost;
  redlock::Lock lock(s.client, s.k, lost.renewed(600ms));
  redlock::Hold hold = lock.acquire();
  const redlock::LeaseToken lease = hold.lease();
  s.server.raw({"DEL", s.k});
  s.server.raw({"SET", s.k, "someone-else", "PX", "60000"});
  auto event = lost.first.get_future();
  REQUIRE(event.wait_for(10s) == std::future_status::ready);
  const redlock::LostEvent e = event.get();
  CHECK(e.key == s.k);
  CHECK(e.reason == redlock::LostReason::refused);
  CHECK(lease.lost());
  CHECK_FALSE(hold.holds());
  CHECK_FALSE(hold.release());  // lost: false, and the other holder's key is untouched
  CHECK(value_of(s.server, s.k) == "someone-else");
  CHECK(lost.calls.load() == 1);
}

TEST_CASE("Hold: fences grow across handle and thread holds", "[redis][hold]") {
  for (const bool fair : {false, true}) {
    Setup s(fair ? "hold-fence-fair" : "hold-fence");
    redlock::LockOptions options = fast();
    options.fencing = true;
    options.fair = fair;
    redlock::Lock lock(s.client, s.k, options);
    std::uint64_t last = 0;
    int increases = 0;
    for (int i = 0; i < 5; ++i) {
      redlock::Hold hold = lock.acquire();
      increases += hold.fence() > last ? 1 : 0;
      last = hold.fence();
      CHECK(hold.release());
      lock.lock();
      increases += lock.fence() > last ? 1 : 0;
      last = lock.fence();
      lock.unlock();
    }
    CHECK(increases == 10);
    CHECK(s.server.raw({"EXISTS", s.k}).integer() == 0);
  }
}

TEST_CASE("Hold: a handle acquire by the thread that owns the thread hold throws logic_error",
          "[redis][hold]") {
  Setup s("hold-self");
  redlock::Lock lock(s.client, s.k, fast());
  lock.lock();
  CHECK_THROWS_AS(lock.acquire(), std::logic_error);
  CHECK_THROWS_AS(lock.try_acquire_for(100ms), std::logic_error);
  CHECK(lock.owns_lock());  // the thread hold is untouched
  lock.unlock();
  CHECK(s.server.raw({"EXISTS", s.k}).integer() == 0);
  // Another thread's handle acquire waits for the thread hold instead.
  lock.lock();
  auto other = std::async(std::launch::async, [&] { return lock.try_acquire_for(30s); });
  CHECK(other.wait_for(100ms) == std::future_status::timeout);
  lock.unlock();
  auto hold = other.get();
  REQUIRE(hold);
  CHECK(hold->holds());
}

TEST_CASE("Hold: handle holds of one object are sequential, try_acquire_for gives up",
          "[redis][hold]") {
  Setup s("hold-sequential");
  redlock::Lock lock(s.client, s.k, fast());
  redlock::Hold first = lock.acquire();
  CHECK_FALSE(lock.try_acquire_for(0ms));    // one attempt: the object's gate is taken
  CHECK_FALSE(lock.try_acquire_for(100ms));  // waits in the local queue, gives up
  CHECK_FALSE(lock.try_lock());              // a thread acquire queues behind it too
  redlock::Lock rival(s.client, s.k, fast());
  CHECK_FALSE(rival.try_acquire_for(100ms));  // another object: refused by the server
  auto second = std::async(std::launch::async, [&] { return lock.acquire(); });
  CHECK(second.wait_for(100ms) == std::future_status::timeout);
  CHECK(first.release());
  redlock::Hold next = second.get();
  CHECK(next.holds());
  CHECK(s.server.raw({"EXISTS", s.k}).integer() == 1);
}

TEST_CASE("Hold: a cancelled handle acquire throws CancelledError or returns nullopt",
          "[redis][hold]") {
  Setup s("hold-cancel");
  redlock::Lock lock(s.client, s.k, fast());
  redlock::Lock rival(s.client, s.k, fast());
  rival.lock();
  auto waiting = std::async(std::launch::async, [&] { return lock.try_acquire_for(30s); });
  auto blocked = std::async(std::launch::async, [&] { return lock.acquire(); });
  std::this_thread::sleep_for(50ms);
  lock.cancel_waits();
  REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
  CHECK_FALSE(waiting.get());
  REQUIRE(blocked.wait_for(10s) == std::future_status::ready);
  std::string message;
  try {
    blocked.get();
  } catch (const redlock::CancelledError& e) {
    message = e.what();
  }
  CHECK(message.find("acquire() of " + s.k) != std::string::npos);  // names the call made
  rival.unlock();
}

TEST_CASE("Hold: Semaphore permits owned by handles", "[redis][hold][semaphore]") {
  Setup s("hold-permits");
  redlock::LockOptions options = fast();
  options.fencing = true;
  redlock::Semaphore a(s.client, s.k, 2, options);
  redlock::Semaphore b(s.client, s.k, 2, options);
  redlock::Semaphore c(s.client, s.k, 2, options);
  redlock::Hold first = a.acquire_hold();
  std::optional<redlock::Hold> second = b.try_acquire_hold_for(1s);
  REQUIRE(second);
  CHECK(first.fence() < second->fence());
  CHECK(s.server.raw({"EXISTS", redlock::detail::helper_key(s.k, ":permit:") + "1"}).integer() ==
        1);
  CHECK(s.server.raw({"EXISTS", redlock::detail::helper_key(s.k, ":permit:") + "2"}).integer() ==
        1);
  CHECK_FALSE(c.try_acquire_hold_for(100ms));  // both permits taken
  CHECK_FALSE(a.owns_permit());                // handle permits are not the thread's
  std::promise<bool> released;
  std::thread([&] { released.set_value(second->release()); }).join();
  CHECK(released.get_future().get());
  auto third = c.try_acquire_hold_for(5s);
  REQUIRE(third);
  CHECK(third->fence() > first.fence());
  CHECK(third->extend(20s));
  first = redlock::Hold();  // the destructor's release gives the permit back in the background
  CHECK(eventually([&] {
    return s.server.raw({"EXISTS", redlock::detail::helper_key(s.k, ":permit:") + "1"}).integer() ==
           0;
  }));
  a.lock();  // a thread permit; a handle acquire by its owner would wait for itself
  CHECK_THROWS_AS(a.acquire_hold(), std::logic_error);
  a.unlock();
}

TEST_CASE("Hold: a Redlock's handle hold outlives its lock object", "[redis][hold][redlock]") {
  redlock::test::ServerGroup group(3);
  std::vector<redlock::Client> clients;
  for (const auto& endpoint : group.endpoints()) clients.emplace_back(endpoint);
  const auto k = key("hold-redlock");
  const auto holders = [&] {
    int n = 0;
    for (std::size_t i = 0; i < group.size(); ++i) n += group[i].raw({"EXISTS", k}).integer();
    return n;
  };
  redlock::Hold hold;
  {
    redlock::Redlock lock(clients, k, fast());
    hold = lock.acquire();
  }  // the lock object is gone; the Hold still holds
  CHECK(holders() == 3);
  CHECK(hold.holds());
  CHECK(hold.extend(20s));
  CHECK(hold.release());
  CHECK(holders() == 0);
}
