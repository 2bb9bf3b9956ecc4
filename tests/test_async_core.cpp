// The library side of the async operations (redlock/detail/async.hpp), with no asio: each
// operation completes exactly once on the library's async thread; a waiting acquire is woken by
// the release it hears (no thread per wait); cancellation before the send, while queued locally
// and while waiting leaves nothing on the server; many waiters on one key are served in order.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <redlock/detail/async.hpp>
#include <redlock/redlock.hpp>

#include "lock/async_driver.hpp"  // AsyncDriver::timers
#include "support/async_outcome.hpp"
#include "support/eventually.hpp"
#include "support/lock_fixture.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::fast;
using redlock::test::RedisServer;
using redlock::test::Setup;
using Clock = std::chrono::steady_clock;
using redlock::test::acquire;
using redlock::test::Op;

namespace {

long long keys(RedisServer& server) { return server.raw({"DBSIZE"}).integer(); }

// Counts acquire events by outcome.
class Counting final : public redlock::Observer {
 public:
  void on_acquire(const redlock::AcquireEvent& event) noexcept override {
    if (event.outcome == redlock::AcquireOutcome::acquired) ++acquired;
    if (event.outcome == redlock::AcquireOutcome::contended) ++contended;
    fence = event.fence;
  }
  std::atomic<int> acquired{0};
  std::atomic<int> contended{0};
  std::atomic<std::uint64_t> fence{0};
};

}  // namespace

TEST_CASE("async core: acquire, extend and release complete once, on the async thread",
          "[redis][async]") {
  Setup s("async-core-basic");
  auto counting = std::make_shared<Counting>();
  auto options = fast();
  options.observer = counting;
  options.fencing = true;
  redlock::Lock lock(s.client, s.k, options);
  Op a = acquire(lock);
  auto& got = a.wait();
  REQUIRE_FALSE(got.error);
  REQUIRE(got.hold);
  REQUIRE(got.hold->holds());
  CHECK(a.state->thread != std::this_thread::get_id());
  redlock::Hold hold = std::move(*got.hold);
  CHECK(counting->acquired == 1);  // the observer hears an async acquire as a blocking one
  CHECK(counting->fence == hold.fence());
  CHECK(hold.fence() > 0);

  Op e;
  e.op = redlock::detail::async_extend(hold, 2000ms, e.completion());
  CHECK(e.wait().value);
  CHECK(s.server.raw({"PTTL", s.k}).integer() > 1000);

  Op r;
  r.op = redlock::detail::async_release(std::move(hold), r.completion());
  CHECK_FALSE(hold.holds());  // moved into the operation at once
  CHECK(r.wait().value);
  CHECK(s.server.raw({"EXISTS", s.k}).integer() == 0);  // the fence counter stays
  CHECK(a.state->calls == 1);
  CHECK(r.state->calls == 1);
}

TEST_CASE("async core: a waiter is woken by the release, and a timed one gives up",
          "[redis][async]") {
  Setup s("async-core-wake");
  auto options = fast();
  options.ttl = 30s;         // only the release can end the wait in time
  options.retry_delay = 5s;  // no retry helps either
  redlock::Lock holder(s.client, s.k, options);
  redlock::Lock waiter(s.client, s.k, options);
  redlock::Hold held = holder.acquire();

  Op timed = acquire(waiter, std::chrono::nanoseconds(200ms));
  auto& gave_up = timed.wait();
  CHECK_FALSE(gave_up.error);
  CHECK_FALSE(gave_up.hold);
  CHECK_FALSE(gave_up.cancelled);

  Op w = acquire(waiter);
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(w.done());
  const auto released = Clock::now();
  CHECK(held.release());
  auto& got = w.wait(4s);  // well before retry_delay or the ttl
  REQUIRE(got.hold);
  CHECK(Clock::now() - released < 4s);
  CHECK(got.hold->release());
  CHECK(keys(s.server) == 0);
}

TEST_CASE("async core: cancelled before the send, while queued locally and while waiting",
          "[redis][async]") {
  Setup s("async-core-cancel");
  for (const bool fair : {false, true}) {
    auto options = fast();
    options.ttl = 30s;
    options.fair = fair;
    redlock::Lock holder(s.client, s.k, options);
    redlock::Lock waiter(s.client, s.k, options);
    redlock::Hold held = holder.acquire();

    Op first = acquire(waiter);   // waits on the server (queued there in fair mode)
    Op second = acquire(waiter);  // queued behind it in the object's local queue
    Op third = acquire(waiter);
    third.op->cancel();  // at once: probably before its first step
    std::this_thread::sleep_for(300ms);
    second.op->cancel();
    first.op->cancel();
    for (Op* op : {&first, &second, &third}) {
      auto& result = op->wait();
      CHECK_FALSE(result.error);
      CHECK(result.cancelled);
      CHECK_FALSE(result.hold);
    }
    CHECK(held.release());
    // Nothing left: no key, no queue entry (the waiter's leave is sent by the async thread).
    CHECK(eventually([&] { return keys(s.server) == 0; }, 5s));
    // The object is usable afterwards: its local gate was passed on.
    Op again = acquire(waiter);
    auto& got = again.wait();
    REQUIRE(got.hold);
    CHECK(got.hold->release());
    CHECK(eventually([&] { return keys(s.server) == 0; }, 5s));
  }
}

// Issue 43, defect 2: a waiter woken by a release before its timer was due left that timer in
// the driver's heap, with a reference to its task (and the lock's state) until its old due time:
// the holder's lease end, or the caller's whole timeout.
TEST_CASE("async core: an operation that ends leaves no timer behind", "[redis][async]") {
  Setup s("async-core-timers");
  auto options = fast();
  options.ttl = 30s;         // the waiter's timer is due at the holder's lease end
  options.retry_delay = 5s;  // or at the next retry: either way long after the test
  redlock::Lock holder(s.client, s.k, options);
  redlock::Lock waiter(s.client, s.k, options);
  auto& driver = redlock::detail::AsyncDriver::instance();
  constexpr int kCycles = 20;
  for (int i = 0; i < kCycles; ++i) {
    redlock::Hold held = holder.acquire();
    Op w = acquire(waiter, std::chrono::nanoseconds(1h));
    REQUIRE(eventually([&] { return driver.timers() > 0; }, 5s));  // it waits, timed
    CHECK(held.release());
    auto& got = w.wait();
    REQUIRE(got.hold);
    CHECK(got.hold->release());
  }
  CHECK(eventually([&] { return driver.timers() == 0; }, 2s));
  CHECK(keys(s.server) == 0);
}

TEST_CASE("async core: 200 waiters on one key take turns, in order, on one thread",
          "[redis][async]") {
  Setup s("async-core-many");
  auto options = fast();
  options.ttl = 30s;
  redlock::Lock lock(s.client, s.k, options);
  constexpr int kWaiters = 200;
  std::vector<Op> ops(kWaiters);
  for (auto& op : ops) op.op = redlock::detail::async_acquire(lock, std::nullopt, op.completion());
  // One at a time: each hold is released once it is handed out, and the next one follows.
  for (int i = 0; i < kWaiters; ++i) {
    auto& got = ops[static_cast<std::size_t>(i)].wait();
    REQUIRE(got.hold);
    for (int j = i + 1; j < kWaiters && j < i + 3; ++j) {
      CHECK_FALSE(ops[static_cast<std::size_t>(j)].done());  // later ones still wait
    }
    CHECK(got.hold->release());
  }
  CHECK(keys(s.server) == 0);
}

TEST_CASE("async core: Semaphore permits, and a waiter for one woken by a release",
          "[redis][async]") {
  Setup s("async-core-semaphore");
  auto options = fast();
  options.ttl = 30s;
  redlock::Semaphore a(s.client, s.k, 2, options);
  redlock::Semaphore b(s.client, s.k, 2, options);
  redlock::Semaphore c(s.client, s.k, 2, options);
  const auto permit = [](redlock::Semaphore& sem, std::optional<std::chrono::nanoseconds> t) {
    Op op;
    op.op = redlock::detail::async_acquire(sem, t, op.completion());
    return op;
  };
  Op first = permit(a, std::nullopt);
  Op second = permit(b, std::nullopt);
  auto& one = first.wait();
  auto& two = second.wait();
  REQUIRE(one.hold);
  REQUIRE(two.hold);
  Op none = permit(c, std::chrono::nanoseconds(200ms));  // both permits are taken
  CHECK_FALSE(none.wait().hold);
  Op third = permit(c, std::nullopt);
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(third.done());
  CHECK(one.hold->release());
  auto& got = third.wait();
  REQUIRE(got.hold);
  CHECK(got.hold->release());
  CHECK(two.hold->release());
}
