// [async]: Holds from the asio completion tokens as handles: moved between io_contexts'
// coroutines and plain threads and released on another thread; renewed by the watchdog past
// their ttl; reported lost through on_lost; and a Semaphore's permits taken asynchronously.
#include <catch2/catch.hpp>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include <redlock/asio.hpp>
#include <redlock/redlock.hpp>

#include "async_fixture.hpp"
#include "support/eventually.hpp"
#include "support/lock_fixture.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: permit keys

using namespace std::chrono_literals;
using asio::use_awaitable;
using redlock::detail::helper_key;
using redlock::test::eventually;
using redlock::test::fast;
using redlock::test::IoThreads;
using redlock::test::leftovers;
using redlock::test::Setup;
using redlock::test::value_of;

namespace {

// Takes `from`'s hold into the coroutine, extends it on the coroutine's io thread and hands it
// back. (References, not Holds by value: this coroutine taking a Hold by value crashed with
// SIGILL on resumption with GCC 12.2; not investigated further.)
asio::awaitable<redlock::Hold> extend_and_return(redlock::Hold& from) {
  redlock::Hold hold = std::move(from);
  if (!co_await redlock::async_extend(hold, 20s, use_awaitable))
    throw std::runtime_error("extend refused");
  co_return std::move(hold);
}

// Takes `from`'s hold into the coroutine, releases it and reports whether it was still ours.
asio::awaitable<bool> release_it(redlock::Hold& from) {
  redlock::Hold hold = std::move(from);
  co_return co_await redlock::async_release(hold, use_awaitable);
}

}  // namespace

TEST_CASE("Async: a Hold moves between coroutines of two io_contexts and threads",
          "[async][redis][hold]") {
  Setup s("async-moved");
  IoThreads first;
  IoThreads second;
  redlock::Lock lock(s.client, s.k, fast(10s));
  // Acquired in a coroutine on the first context, extended in one on the second, released by a
  // plain thread: the same lease throughout.
  redlock::Hold hold = first.await(redlock::async_acquire(lock, use_awaitable));
  REQUIRE(hold.holds());
  const std::string token = value_of(s.server, s.k);
  hold = second.await(extend_and_return(hold));
  CHECK(hold.holds());
  CHECK(value_of(s.server, s.k) == token);
  CHECK(s.server.raw({"PTTL", s.k}).integer() > 10'000);
  std::promise<bool> released;
  std::thread([&released, held = std::move(hold)]() mutable {
    released.set_value(held.release());
  }).join();
  CHECK(released.get_future().get());
  CHECK(leftovers(s.server, s.k) == 0);

  // A blocking acquire's Hold released by a coroutine; an async one released on another context.
  redlock::Hold blocking = lock.acquire();
  CHECK(first.await(release_it(blocking)));
  CHECK(leftovers(s.server, s.k) == 0);
  redlock::Hold again = first.await(redlock::async_acquire(lock, use_awaitable));
  CHECK(second.await(release_it(again)));
  CHECK(leftovers(s.server, s.k) == 0);
}

TEST_CASE("Async: the watchdog renews an async handle hold past its ttl",
          "[async][redis][hold][watchdog]") {
  Setup s("async-renewed");
  IoThreads io;
  auto dog = std::make_shared<redlock::Watchdog>();
  redlock::LockOptions options = fast(300ms);
  options.auto_renew = true;
  options.watchdog = dog;
  redlock::Lock lock(s.client, s.k, options);
  redlock::Hold hold = io.await(redlock::async_acquire(lock, use_awaitable));
  REQUIRE(hold.holds());
  const std::string token = value_of(s.server, s.k);
  int still_ours = 0;
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(300ms);  // one ttl each
    still_ours += value_of(s.server, s.k) == token ? 1 : 0;
  }
  CHECK(still_ours == 3);
  CHECK(hold.holds());
  CHECK(hold.validity() > 0ms);
  CHECK(dog->stats().renewals >= 3);
  CHECK(io.await(redlock::async_release(hold, use_awaitable)));
  CHECK(leftovers(s.server, s.k) == 0);
}

TEST_CASE("Async: on_lost fires for an async handle hold whose key is taken over",
          "[async][redis][hold]") {
  Setup s("async-lost");
  IoThreads io;
  redlock::test::LostWatch lost;
  redlock::Lock lock(s.client, s.k, lost.renewed(600ms));
  redlock::Hold hold = io.await(redlock::async_acquire(lock, use_awaitable));
  REQUIRE(hold.holds());
  const redlock::LeaseToken lease = hold.lease();
  s.server.raw({"DEL", s.k});
  s.server.raw({"SET", s.k, "someone-else", "PX", "60000"});
  auto event = lost.first.get_future();
  REQUIRE(event.wait_for(10s) == std::future_status::ready);
  CHECK(event.get().key == s.k);
  CHECK(lease.lost());
  CHECK_FALSE(hold.holds());
  CHECK_FALSE(io.await(redlock::async_extend(hold, 10s, use_awaitable)));  // lost: false
  CHECK_FALSE(io.await(redlock::async_release(hold, use_awaitable)));
  CHECK(value_of(s.server, s.k) == "someone-else");  // the other holder's key is untouched
  CHECK(lost.calls.load() == 1);
}

// Issue 43, defect 6: with auto_renew, a grant whose completion waits in a stopped (not
// destroyed) io_context was renewed forever: nobody could ever use or release that Hold. The
// watchdog now renews an undelivered hold for one ttl only; then it releases the key and reports
// the loss (LostReason::undelivered). The handler, run later, receives a lost Hold.
TEST_CASE("Async: a grant whose handler never runs is not renewed past one ttl",
          "[async][redis][hold][watchdog]") {
  Setup s("async-undelivered");
  asio::io_context io;  // not run until the end: the completion waits in it
  redlock::test::LostWatch lost;
  redlock::Lock lock(s.client, s.k, lost.renewed(600ms));
  std::optional<redlock::Hold> got;
  redlock::async_acquire(lock, asio::bind_executor(io, [&](std::exception_ptr, redlock::Hold h) {
                           got.emplace(std::move(h));
                         }));
  REQUIRE(eventually([&] { return value_of(s.server, s.k) != ""; }, 5s));  // granted
  auto event = lost.first.get_future();
  REQUIRE(event.wait_for(10s) == std::future_status::ready);
  CHECK(event.get().reason == redlock::LostReason::undelivered);
  CHECK(eventually([&] { return leftovers(s.server, s.k) == 0; }, 5s));  // given up at once
  io.run();                                                              // the handler runs at last
  REQUIRE(got);
  CHECK_FALSE(got->holds());
  CHECK(lost.calls.load() == 1);
}

TEST_CASE("Async: Semaphore permits taken and given back asynchronously",
          "[async][redis][semaphore]") {
  Setup s("async-permits");
  IoThreads io;
  redlock::LockOptions options = fast(30s);
  options.fencing = true;
  redlock::Semaphore a(s.client, s.k, 2, options);
  redlock::Semaphore b(s.client, s.k, 2, options);
  redlock::Semaphore c(s.client, s.k, 2, options);
  const auto permit = [&](int i) {
    return s.server.raw({"EXISTS", helper_key(s.k, ":permit:") + std::to_string(i)}).integer();
  };
  redlock::Hold first = io.await(redlock::async_acquire(a, use_awaitable));
  std::optional<redlock::Hold> second =
      io.await(redlock::async_try_acquire_for(b, 5s, use_awaitable));
  REQUIRE(first.holds());
  REQUIRE(second);
  CHECK(first.fence() < second->fence());
  CHECK(permit(1) + permit(2) == 2);
  CHECK_FALSE(io.await(redlock::async_try_acquire_for(c, 100ms, use_awaitable)));  // both taken
  auto third = io.spawn(redlock::async_acquire(c, use_awaitable));
  std::this_thread::sleep_for(100ms);
  CHECK(third.wait_for(0s) == std::future_status::timeout);
  CHECK(io.await(redlock::async_release(*second, use_awaitable)));
  redlock::Hold got = IoThreads::await(std::move(third));
  CHECK(got.holds());
  CHECK(got.fence() > first.fence());
  CHECK(io.await(redlock::async_extend(got, 20s, use_awaitable)));
  CHECK(io.await(redlock::async_release(got, use_awaitable)));
  CHECK(io.await(redlock::async_release(first, use_awaitable)));
  CHECK(permit(1) + permit(2) == 0);
}
