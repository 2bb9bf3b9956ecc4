// tests/asio_tokens.cpp: every initiating function of <redlock/asio.hpp>, instantiated with each
// completion token form (a callback bound to an io_context, asio::use_future, deferred; in C++20
// also use_awaitable), compiled, linked, and run once each against a real redis-server
// (tests/support). Built twice, as C++17 (redlock_asio_tokens) and C++20
// (redlock_asio_tokens_cxx20). It proves the header builds with every token and that each form
// delivers its result; the behaviour of the operations is the async suite's (test_async*.cpp).
//
// Exit status 0 and one line per form when every check passed; 1 and the failed checks otherwise.
#include <chrono>     // std::chrono::milliseconds
#include <cstdio>     // std::printf
#include <exception>  // std::exception_ptr
#include <future>     // std::promise, std::future
#include <optional>   // std::optional
#include <string>     // std::string
#include <utility>    // std::move

// First of the asio headers, as a user would include it: with clang and libstdc++ it is what
// enables asio's co_await support (see its preamble).
#include <redlock/asio.hpp>  // the initiating functions under test

#include <asio/bind_executor.hpp>  // bind_executor
#include <asio/io_context.hpp>     // io_context
#include <asio/use_future.hpp>     // use_future
#include <redlock/redlock.hpp>     // Client, Lock, Semaphore

#include "support/redis_server.hpp"  // RedisServer, key

#if ASIO_VERSION >= 102400
#include <asio/deferred.hpp>  // deferred
#define REDLOCK_TEST_DEFERRED asio::deferred
#else
#include <asio/experimental/deferred.hpp>  // experimental::deferred (asio 1.22, 1.23)
#define REDLOCK_TEST_DEFERRED asio::experimental::deferred
#endif

#if __cplusplus >= 202002L && !defined(ASIO_HAS_CO_AWAIT)
#error "C++20 but no asio co_await support: <redlock/asio.hpp> promises use_awaitable there"
#endif
#if defined(ASIO_HAS_CO_AWAIT)
#include <asio/co_spawn.hpp>       // co_spawn
#include <asio/use_awaitable.hpp>  // use_awaitable, awaitable
#endif

namespace {

using namespace std::chrono_literals;

int failures = 0;

void check(bool ok, const char* form, const char* what) {
  if (!ok) {
    ++failures;
    std::printf("FAILED %s: %s\n", form, what);
  }
}

// The completion token forms, each as a callable that starts an operation with its token and
// returns the operation's value (rethrowing its error).
struct Callback {  // a lambda bound to an io_context, which runs until the operation completes
  template <typename Start>
  auto operator()(Start start) const {
    using Value = decltype(start(asio::use_future).get());
    std::promise<Value> result;
    start(asio::bind_executor(*io, [&result](std::exception_ptr error, Value value) {
      if (error) {
        result.set_exception(error);
      } else {
        result.set_value(std::move(value));
      }
    }));
    io->restart();
    io->run();  // the operation's outstanding work keeps it running until the handler ran
    return result.get_future().get();
  }
  asio::io_context* io;
};
struct UseFuture {
  template <typename Start>
  auto operator()(Start start) const {
    return start(asio::use_future).get();
  }
};
struct Deferred {  // deferred, then launched with use_future
  template <typename Start>
  auto operator()(Start start) const {
    auto operation = start(REDLOCK_TEST_DEFERRED);
    return std::move(operation)(asio::use_future).get();
  }
};

// One pass over every initiating function with the token form `run`.
template <typename Run>
void every_operation(Run run, const char* form, redlock::Client& client) {
  const std::string key = redlock::test::key(std::string("asio-tokens-") + form);
  redlock::Lock lock(client, key);
  redlock::Lock other(client, key);
  redlock::Semaphore first(client, key + ":permits", 2);
  redlock::Semaphore second(client, key + ":permits", 2);

  redlock::Hold hold = run([&](auto&& token) { return redlock::async_acquire(lock, token); });
  check(hold.holds(), form, "async_acquire(lock) holds");
  std::optional<redlock::Hold> contended =
      run([&](auto&& token) { return redlock::async_try_acquire_for(other, 50ms, token); });
  check(!contended, form, "async_try_acquire_for(lock) gives up on a held lock");
  check(run([&](auto&& token) { return redlock::async_extend(hold, 5000ms, token); }), form,
        "async_extend(hold) renews");
  check(run([&](auto&& token) { return redlock::async_release(hold, token); }), form,
        "async_release(hold) releases");
  check(!hold.holds(), form, "async_release empties the Hold");

  redlock::Hold permit = run([&](auto&& token) { return redlock::async_acquire(first, token); });
  std::optional<redlock::Hold> timed =
      run([&](auto&& token) { return redlock::async_try_acquire_for(second, 1s, token); });
  check(permit.holds() && timed && timed->holds(), form, "two permits of a Semaphore(2)");
  std::printf("%s: every initiating function completed\n", form);
}

#if defined(ASIO_HAS_CO_AWAIT)
asio::awaitable<void> every_operation_awaited(redlock::Client& client) {
  const char* form = "use_awaitable";
  const std::string key = redlock::test::key("asio-tokens-awaitable");
  redlock::Lock lock(client, key);
  redlock::Lock other(client, key);
  redlock::Semaphore first(client, key + ":permits", 2);
  redlock::Semaphore second(client, key + ":permits", 2);
  redlock::Hold hold = co_await redlock::async_acquire(lock, asio::use_awaitable);
  check(hold.holds(), form, "co_await async_acquire(lock) yields a Hold that holds");
  std::optional<redlock::Hold> contended =
      co_await redlock::async_try_acquire_for(other, 50ms, asio::use_awaitable);
  check(!contended, form, "co_await async_try_acquire_for(lock) yields std::nullopt");
  check(co_await redlock::async_extend(hold, 5000ms, asio::use_awaitable), form, "extend");
  check(co_await redlock::async_release(hold, asio::use_awaitable), form, "release");
  redlock::Hold permit = co_await redlock::async_acquire(first, asio::use_awaitable);
  std::optional<redlock::Hold> timed =
      co_await redlock::async_try_acquire_for(second, 1s, asio::use_awaitable);
  check(permit.holds() && timed && timed->holds(), form, "two permits of a Semaphore(2)");
  std::printf("%s: every initiating function completed\n", form);
}
#endif

}  // namespace

int main() {
  try {
    redlock::test::RedisServer server;
    redlock::Client client(server.endpoint());
    asio::io_context io;
    every_operation(Callback{&io}, "callback", client);
    every_operation(UseFuture{}, "use_future", client);
    every_operation(Deferred{}, "deferred", client);
#if defined(ASIO_HAS_CO_AWAIT)
    std::future<void> done = asio::co_spawn(io, every_operation_awaited(client), asio::use_future);
    io.restart();
    io.run();
    done.get();
#endif
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
