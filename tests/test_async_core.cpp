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

#include "support/eventually.hpp"
#include "support/lock_fixture.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::fast;
using redlock::test::RedisServer;
using redlock::test::Setup;
using Clock = std::chrono::steady_clock;

namespace {

// Collects one operation's result; waitable from the test's thread.
class Outcome final : public redlock::detail::AsyncCompletion {
 public:
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    bool done{false};
    int calls{0};
    std::thread::id thread;
    redlock::detail::AsyncResult result;
  };
  explicit Outcome(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void complete(redlock::detail::AsyncResult&& result) noexcept override {
    std::lock_guard<std::mutex> guard(state_->mutex);
    ++state_->calls;
    state_->thread = std::this_thread::get_id();
    state_->result = std::move(result);
    state_->done = true;
    state_->cv.notify_all();
  }
  void destroy() noexcept override { delete this; }

 private:
  std::shared_ptr<State> state_;
};

struct Op {
  std::shared_ptr<Outcome::State> state = std::make_shared<Outcome::State>();
  std::shared_ptr<redlock::detail::AsyncOperation> op;
  redlock::detail::AsyncCompletionPtr completion() {
    return redlock::detail::AsyncCompletionPtr(new Outcome(state));
  }
  bool done() {
    std::lock_guard<std::mutex> guard(state->mutex);
    return state->done;
  }
  redlock::detail::AsyncResult& wait(std::chrono::milliseconds limit = 10s) {
    std::unique_lock<std::mutex> lock(state->mutex);
    REQUIRE(state->cv.wait_for(lock, limit, [&] { return state->done; }));
    return state->result;
  }
};

Op acquire(redlock::LockBase& lock, std::optional<std::chrono::nanoseconds> timeout = {}) {
  Op op;
  op.op = redlock::detail::async_acquire(lock, timeout, op.completion());
  return op;
}

long long keys(RedisServer& server) { return server.raw({"DBSIZE"}).integer(); }

}  // namespace

TEST_CASE("async core: acquire, extend and release complete once, on the async thread",
          "[redis][async]") {
  Setup s("async-core-basic");
  redlock::Lock lock(s.client, s.k, fast());
  Op a = acquire(lock);
  auto& got = a.wait();
  REQUIRE_FALSE(got.error);
  REQUIRE(got.hold);
  REQUIRE(got.hold->holds());
  CHECK(a.state->thread != std::this_thread::get_id());
  redlock::Hold hold = std::move(*got.hold);

  Op e;
  e.op = redlock::detail::async_extend(hold, 2000ms, e.completion());
  CHECK(e.wait().value);
  CHECK(s.server.raw({"PTTL", s.k}).integer() > 1000);

  Op r;
  r.op = redlock::detail::async_release(std::move(hold), r.completion());
  CHECK_FALSE(hold.holds());  // moved into the operation at once
  CHECK(r.wait().value);
  CHECK(keys(s.server) == 0);
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
