// tests/support/async_outcome.hpp: one asynchronous operation of redlock/detail/async.hpp (no
// asio) as the tests see it: its completion recorded, waitable from the test's thread.
#ifndef REDLOCK_TESTS_SUPPORT_ASYNC_OUTCOME_HPP
#define REDLOCK_TESTS_SUPPORT_ASYNC_OUTCOME_HPP

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <redlock/detail/async.hpp>
#include <redlock/lock.hpp>
#include <redlock/options.hpp>

#include "support/eventually.hpp"

namespace redlock::test {

// Collects one operation's result; waitable from the test's thread.
class Outcome final : public detail::AsyncCompletion {
 public:
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    bool done{false};
    int calls{0};
    std::thread::id thread;
    detail::AsyncResult result;
  };
  explicit Outcome(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void complete(detail::AsyncResult&& result) noexcept override {
    std::lock_guard<std::mutex> guard(state_->mutex);
    ++state_->calls;
    state_->thread = std::this_thread::get_id();
    if (result.hold) detail::hold_delivered(*result.hold);  // the test has it now
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
  std::shared_ptr<detail::AsyncOperation> op;
  detail::AsyncCompletionPtr completion() { return detail::AsyncCompletionPtr(new Outcome(state)); }
  bool done() {
    std::lock_guard<std::mutex> guard(state->mutex);
    return state->done;
  }
  detail::AsyncResult& wait(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(state->mutex);
    REQUIRE(state->cv.wait_for(lock, limit, [&] { return state->done; }));
    return state->result;
  }
};

inline Op acquire(LockBase& lock, std::optional<std::chrono::nanoseconds> timeout = {}) {
  Op op;
  op.op = detail::async_acquire(lock, timeout, op.completion());
  return op;
}

// A holder, a timed waiter that gives up, a waiter completed by the release well before its
// ttl or retry_delay, and a cancelled waiter; `queued()` counts the store's waiters.
template <class Queued>
void waits_and_cancels(LockBase& holder, LockBase& waiter, Queued queued) {
  Hold held = holder.acquire();
  Op timed = acquire(waiter, std::chrono::milliseconds(300));
  auto& gave_up = timed.wait();
  CHECK_FALSE(gave_up.error);
  CHECK_FALSE(gave_up.hold);

  Op cancelled = acquire(waiter);
  CHECK(eventually([&] { return queued() == 1; }, std::chrono::seconds(10)));
  cancelled.op->cancel();
  auto& none = cancelled.wait();
  CHECK(none.cancelled);
  CHECK(eventually([&] { return queued() == 0; }, std::chrono::seconds(10)));

  Op w = acquire(waiter);
  CHECK(eventually([&] { return queued() == 1; }, std::chrono::seconds(10)));
  const auto released = std::chrono::steady_clock::now();
  CHECK(held.release());
  auto& got = w.wait(std::chrono::milliseconds(20000));
  REQUIRE_FALSE(got.error);
  REQUIRE(got.hold);
  // The ttl is 60 s and retry_delay 30 s: only the release ends the wait so soon.
  CHECK(std::chrono::steady_clock::now() - released < std::chrono::seconds(10));
  CHECK(got.hold->release());
  CHECK(eventually([&] { return queued() == 0; }, std::chrono::seconds(10)));
}

inline LockOptions slow_options() {
  LockOptions options;
  options.ttl = std::chrono::seconds(60);
  options.retry_delay = std::chrono::seconds(30);
  return options;
}

}  // namespace redlock::test

#endif  // REDLOCK_TESTS_SUPPORT_ASYNC_OUTCOME_HPP
