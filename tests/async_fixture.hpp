// tests/async_fixture.hpp: what the [async] test files share (C++20, <redlock/asio.hpp>): an
// io_context run by threads of its own, coroutines started on it and awaited from the test's
// thread with a bound, the outcome of an operation that may be cancelled, and what a lock
// leaves on its server (its key, its fair queue and the queue's records).
//   IoThreads io(4);                                        // 4 threads run io.context
//   auto hold = io.await(redlock::async_acquire(lock, asio::use_awaitable));
//   CHECK(leftovers(server, k) == 0);                       // key, queue, queue records
#ifndef REDLOCK_TESTS_ASYNC_FIXTURE_HPP
#define REDLOCK_TESTS_ASYNC_FIXTURE_HPP

#include <asio.hpp>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <redlock/asio.hpp>
#include <redlock/redlock.hpp>

#include "support/fair_queue.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the fair queue's record hash

namespace redlock::test {

// Sanitizer builds run the loops with fewer rounds (the same cases, less load on 2 cores).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr int kSanitized = 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr int kSanitized = 1;
#else
inline constexpr int kSanitized = 0;
#endif
#else
inline constexpr int kSanitized = 0;
#endif
// `plain` rounds in a plain build, a quarter of them (at least 1) under a sanitizer.
inline int rounds(int plain) { return kSanitized ? (plain + 3) / 4 : plain; }

// An io_context run by `threads` threads until destruction (a work guard keeps them running
// while nothing is queued). The destructor stops and joins them, then the context is destroyed
// with whatever is still in flight (the case "io_context destroyed" relies on that order).
class IoThreads {
 public:
  explicit IoThreads(int threads = 1) : guard_(asio::make_work_guard(context)) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { context.run(); });
  }
  ~IoThreads() { stop(); }
  IoThreads(const IoThreads&) = delete;
  IoThreads& operator=(const IoThreads&) = delete;

  // Stops the threads (operations in flight stay in flight). Idempotent.
  void stop() {
    guard_.reset();
    context.stop();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  // Starts `a` on the context and returns its future.
  template <class T>
  std::future<T> spawn(asio::awaitable<T> a) {
    // Each coroutine on a strand of its own: with several threads running the context, its
    // completions and the cancellations its `||` emits must not run at once (asio's rule for a
    // cancellation slot).
    return asio::co_spawn(asio::make_strand(context), std::move(a), asio::use_future);
  }
  // Starts `a` and waits for its result (at most `limit`: a hang fails the case, it does not
  // block the suite). Rethrows what the coroutine threw.
  template <class T>
  T await(asio::awaitable<T> a, std::chrono::seconds limit = std::chrono::seconds(60)) {
    return await(spawn(std::move(a)), limit);
  }
  template <class T>
  static T await(std::future<T> f, std::chrono::seconds limit = std::chrono::seconds(60)) {
    if (f.wait_for(limit) != std::future_status::ready)
      throw std::runtime_error("an async operation did not complete within its bound");
    return f.get();
  }

  asio::io_context context;

 private:
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::vector<std::thread> threads_;
};

// What one acquire ended with, for cases where it may be granted or cancelled.
struct Outcome {
  redlock::Hold hold;        // granted
  bool aborted = false;      // completed with operation_aborted
  std::exception_ptr other;  // any other failure
};

// Classifies a completion (exception_ptr, Hold) as an Outcome.
inline Outcome outcome_of(std::exception_ptr e, redlock::Hold hold) {
  Outcome o;
  if (!e) {
    o.hold = std::move(hold);
    return o;
  }
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error& se) {
    if (se.code() == asio::error::operation_aborted)
      o.aborted = true;
    else
      o.other = e;
  } catch (...) {
    o.other = e;
  }
  return o;
}

// An acquire started on an io thread with a cancellation slot of its own (the asio way: the
// slot is used on the handler's executor only, so start and cancel are posted there too). Its
// completion runs on that executor and is kept as an Outcome.
//   Cancellable op(io, lock);            // started
//   op.cancel();                         // emits terminal cancellation on the io thread
//   Outcome o = op.result();             // granted or aborted (or another failure)
class Cancellable {
 public:
  // Starts the acquire; with `cancel_at_once`, emits the cancellation right after initiation, in
  // the same handler (before the library can have sent anything for it, most of the time).
  template <class Target>
  Cancellable(asio::io_context& io, Target& target, bool cancel_at_once = false)
      : io_(io), state_(std::make_shared<State>()) {
    auto state = state_;
    asio::post(io_, [&io, &target, state, cancel_at_once] {
      redlock::async_acquire(
          target, asio::bind_cancellation_slot(
                      state->signal.slot(),
                      asio::bind_executor(io, [state](std::exception_ptr e, redlock::Hold hold) {
                        state->done.set_value(outcome_of(e, std::move(hold)));
                      })));
      if (cancel_at_once) state->signal.emit(asio::cancellation_type::terminal);
    });
  }
  // Emits the cancellation (terminal unless told) on the io thread.
  void cancel(asio::cancellation_type type = asio::cancellation_type::terminal) {
    asio::post(io_, [state = state_, type] { state->signal.emit(type); });
  }
  bool done_within(std::chrono::milliseconds d) {
    return future_.wait_for(d) == std::future_status::ready;
  }
  // The outcome (waits at most 60 s; throws if the operation never completes).
  Outcome result() { return IoThreads::await(std::move(future_)); }

 private:
  struct State {
    asio::cancellation_signal signal;
    std::promise<Outcome> done;
  };
  asio::io_context& io_;
  std::shared_ptr<State> state_;
  std::future<Outcome> future_ = state_->done.get_future();
};

// A waiter's options: fair or not, a retry delay of a minute (so a waiter is parked, not
// polling: only a release's message brings it in sooner), a ttl of two.
inline redlock::LockOptions parked(bool fair) {
  redlock::LockOptions o = fair_lock_options(std::chrono::seconds(60), std::chrono::seconds(120));
  o.fair = fair;
  return o;
}

// Waits (at most 30 s) until a waiter on `k` is parked on `server`: queued (fair), or
// subscribed to the lock's release channel (wake-on-release).
inline bool await_parked(const RedisServer& server, const std::string& k, bool fair) {
  if (fair) return wait_for_queue(server, k, 1, std::chrono::seconds(30));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (server.raw({"PUBSUB", "NUMSUB", redlock::detail::helper_key(k, ":released")})
             .elements()
             .at(1)
             .integer() < 1) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// What a lock on `k` leaves on `server`: the lease key, the fair queue's entries and its
// records (0 when nothing is held and nobody waits). The fence counter is not counted: it
// stays by design.
inline long long leftovers(const RedisServer& server, const std::string& k) {
  return server.raw({"EXISTS", k}).integer() + queue_length(server, k) +
         server.raw({"HLEN", redlock::detail::helper_key(k, ":waiters:info")}).integer();
}

// Keys of this test run on `server` (the run's prefix, and helper keys that wrap it in braces)
// other than the ones that stay by design (a fence counter, a Semaphore's limit): what a case
// that used many keys leaves behind, by name.
inline std::vector<std::string> run_key_names(const RedisServer& server) {
  const auto ends_with = [](const std::string& name, const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::vector<std::string> names;
  for (const char* pattern : {"", "{"}) {
    const auto r = server.raw({"KEYS", std::string(pattern) + run_prefix() + "*"});
    for (const auto& e : r.elements()) {
      if (!ends_with(e.str(), ":fence") && !ends_with(e.str(), ":permit:limit"))
        names.push_back(e.str());
    }
  }
  return names;
}
inline long long run_keys(const RedisServer& server) {
  return static_cast<long long>(run_key_names(server).size());
}

}  // namespace redlock::test

#endif  // REDLOCK_TESTS_ASYNC_FIXTURE_HPP
