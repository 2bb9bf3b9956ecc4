// [async]: cancellation of an async acquire at each stage, through its handler's cancellation
// slot (bind_cancellation_slot) and through the awaitable operator || with a timer: right after
// initiation (before the send), in flight (the server stopped with the SET in its socket), while
// waiting (wake-on-release), while queued fair, and at the moment of the grant. Afterwards the
// servers hold no key and no queue entry of the cancelled operations. And the io_context
// destroyed with 1,000 operations in flight: no crash, and the finisher gives every lease back.
#include <catch2/catch.hpp>

#include <asio.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <redlock/asio.hpp>
#include <redlock/redlock.hpp>

#include "async_fixture.hpp"
#include "lock/async_driver.hpp"  // AsyncDriver::tasks
#include "support/eventually.hpp"
#include "support/fair_queue.hpp"
#include "support/lock_fixture.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using asio::use_awaitable;
using redlock::test::await_parked;
using redlock::test::Cancellable;
using redlock::test::eventually;
using redlock::test::fast;
using redlock::test::IoThreads;
using redlock::test::key;
using redlock::test::leftovers;
using redlock::test::Outcome;
using redlock::test::parked;
using redlock::test::queue_length;
using redlock::test::RedisServer;
using redlock::test::Setup;
using redlock::test::value_of;

namespace {

// Counts outcomes; a granted hold is released (blocking) so the count of keys can be checked.
struct Outcomes {
  int granted = 0;
  int aborted = 0;
  int other = 0;
  void add(Outcome o) {
    if (o.hold.holds()) {
      ++granted;
      o.hold.release();
    } else if (o.aborted) {
      ++aborted;
    } else {
      ++other;
    }
  }
};

// Nothing left on the server, once every task has ended: a cancel completes at once, and the
// task's attempt in flight may still win a grant, which it then gives back.
bool given_back(const RedisServer& server, const std::string& k) {
  return redlock::detail::AsyncDriver::instance().tasks() == 0 && leftovers(server, k) == 0;
}

}  // namespace

TEST_CASE("Async cancellation right after initiation leaves nothing on the server",
          "[async][redis][cancel]") {
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    Setup s(fair ? "async-cancel-at-once-fair" : "async-cancel-at-once");
    IoThreads io;
    redlock::Lock lock(s.client, s.k, parked(fair));
    Outcomes free_lock;  // nobody holds it: granted or aborted, whichever came first
    for (int i = 0; i < redlock::test::rounds(20); ++i) {
      Cancellable op(io.context, lock, true);
      free_lock.add(op.result());
    }
    CHECK(free_lock.other == 0);
    CHECK(free_lock.granted + free_lock.aborted == redlock::test::rounds(20));
    CHECK(eventually([&] { return given_back(s.server, s.k); }));

    redlock::Lock holder(redlock::Client(s.server.endpoint()), s.k, parked(fair));
    REQUIRE(holder.try_lock());
    Outcomes held;  // held by another: never granted
    for (int i = 0; i < redlock::test::rounds(20); ++i) {
      Cancellable op(io.context, lock, true);
      held.add(op.result());
    }
    CHECK(held.aborted == redlock::test::rounds(20));
    CHECK(eventually([&] { return queue_length(s.server, s.k) == 0; }));
    holder.unlock();
    CHECK(eventually([&] { return given_back(s.server, s.k); }));
  }
}

TEST_CASE("Async cancellation in flight: a SET that reached a stopped server is released",
          "[async][redis][cancel]") {
  RedisServer server;
  redlock::Endpoint patient = server.endpoint();
  patient.connect_timeout = 60s;  // the reply is waited for, not timed out
  patient.command_timeout = 60s;
  redlock::Client client(patient);
  const auto k = key("async-cancel-in-flight");
  IoThreads io;
  redlock::Lock lock(client, k, fast(30s));
  redlock::Hold warm = io.await(redlock::async_acquire(lock, use_awaitable));  // connected
  CHECK(warm.release());
  server.pause();
  Cancellable op(io.context, lock);
  std::this_thread::sleep_for(300ms);  // the SET is in the stopped server's socket
  CHECK_FALSE(op.done_within(0ms));
  op.cancel();
  // It ends now, with the server still stopped: a cancel does not wait for the SET's reply
  // (detail/async.hpp: cancel() "asks the operation to end now"; the reply's timeout is 60 s).
  CHECK(op.done_within(20s));
  server.resume();  // runs the SET (the key appears), then the release the cancel sent
  const Outcome o = op.result();
  CHECK(o.aborted);
  CHECK_FALSE(o.hold.holds());
  CHECK(eventually([&] { return given_back(server, k); }, 20s));
  std::this_thread::sleep_for(200ms);
  CHECK(leftovers(server, k) == 0);  // and nothing comes back
}

// Issue 43, defect 3: a cancel of an acquire whose round trip is in flight completed on the
// background finisher's one job thread, behind every Hold destructor's release queued there:
// with 5 releases to a stopped server (1 s timeout each), the cancel took 4.7 s. It completes
// at once now, on the cancelling thread (the handler is posted to its executor).
TEST_CASE("Async cancellation in flight does not wait for background releases",
          "[async][redis][cancel]") {
  RedisServer stuck;  // the dropped Holds' releases time out here, one after another
  redlock::Endpoint brief = stuck.endpoint();
  brief.command_timeout = 1s;
  redlock::Client dropped_client(brief);
  RedisServer server;
  redlock::Endpoint patient = server.endpoint();
  patient.command_timeout = 60s;  // the acquire's SET waits for its reply
  redlock::Client client(patient);
  const auto k = key("async-cancel-behind-releases");
  IoThreads io;
  redlock::Lock lock(client, k, fast(30s));
  redlock::Hold warm = io.await(redlock::async_acquire(lock, use_awaitable));  // connected
  CHECK(warm.release());
  {
    std::vector<redlock::Hold> holds;
    for (int i = 0; i < 5; ++i) {
      redlock::Lock other(dropped_client, k + ":" + std::to_string(i), fast(30s));
      holds.push_back(other.acquire());
    }
    stuck.pause();
  }  // dropped: 5 releases queued in the background, about 5 s of timeouts
  server.pause();
  Cancellable op(io.context, lock);
  std::this_thread::sleep_for(300ms);  // the SET is in the stopped server's socket
  CHECK_FALSE(op.done_within(0ms));
  op.cancel();
  CHECK(op.done_within(2s));  // not after the releases' timeouts
  server.resume();
  stuck.resume();
  CHECK(op.result().aborted);
  CHECK(eventually([&] { return given_back(server, k); }, 20s));
}

TEST_CASE("Async cancellation while waiting and while queued fair: the waiter leaves",
          "[async][redis][cancel][fair]") {
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    Setup s(fair ? "async-cancel-queued" : "async-cancel-waiting");
    IoThreads io;
    redlock::Lock holder(redlock::Client(s.server.endpoint()), s.k, parked(fair));
    REQUIRE(holder.try_lock());
    const std::string token = value_of(s.server, s.k);
    redlock::Lock lock(s.client, s.k, parked(fair));
    Cancellable op(io.context, lock);
    REQUIRE(await_parked(s.server, s.k, fair));
    op.cancel();
    const Outcome o = op.result();
    CHECK(o.aborted);
    // A fair waiter left the queue: just after the completion (a cancel completes first, then
    // the task gives back its place).
    CHECK(eventually([&] { return queue_length(s.server, s.k) == 0; }));
    CHECK(value_of(s.server, s.k) == token);  // the holder's hold is untouched
    holder.unlock();
    std::this_thread::sleep_for(300ms);  // a waiter that had not left would take it now
    CHECK(leftovers(s.server, s.k) == 0);
    // The object serves the next acquire at once.
    redlock::Hold next = io.await(redlock::async_acquire(lock, use_awaitable));
    CHECK(next.holds());
    CHECK(next.release());
    CHECK(leftovers(s.server, s.k) == 0);
  }
}

TEST_CASE("Async cancellation at the moment of the grant gives back what it won",
          "[async][redis][cancel][fair]") {
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    Setup s(fair ? "async-cancel-grant-fair" : "async-cancel-grant");
    IoThreads io;
    redlock::Lock holder(redlock::Client(s.server.endpoint()), s.k, parked(fair));
    redlock::Lock lock(s.client, s.k, parked(fair));
    Outcomes outcomes;
    const int n = redlock::test::rounds(12);
    for (int i = 0; i < n; ++i) {
      REQUIRE(holder.try_lock());
      Cancellable op(io.context, lock);
      REQUIRE(await_parked(s.server, s.k, fair));
      // The release wakes the waiter; the cancel races its grant, sooner or later each round.
      holder.unlock();
      if (i % 3 == 1) std::this_thread::sleep_for(std::chrono::microseconds(200 * i));
      op.cancel();
      outcomes.add(op.result());
      REQUIRE(eventually([&] { return given_back(s.server, s.k); }));
    }
    INFO("granted " << outcomes.granted << ", aborted " << outcomes.aborted);
    CHECK(outcomes.other == 0);
    CHECK(outcomes.granted + outcomes.aborted == n);
  }
}

namespace {

// The acquire or the timer, whichever ends first (the other is cancelled): 0 for a Hold (kept
// in `hold`), 1 for the timer.
asio::awaitable<std::size_t> acquire_or_timeout(redlock::LockBase& lock,
                                                std::chrono::milliseconds limit,
                                                redlock::Hold& hold) {
  asio::steady_timer timer(co_await asio::this_coro::executor, limit);
  auto won =
      co_await(redlock::async_acquire(lock, use_awaitable) || timer.async_wait(use_awaitable));
  if (won.index() == 0) hold = std::move(std::get<0>(won));
  co_return won.index();
}

}  // namespace

TEST_CASE("Async cancellation by the awaitable operator || with a steady_timer",
          "[async][redis][cancel][fair]") {
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    Setup s(fair ? "async-or-timer-fair" : "async-or-timer");
    IoThreads io;
    redlock::Lock lock(s.client, s.k, parked(fair));
    redlock::Hold hold;
    // Free: the acquire wins.
    CHECK(io.await(acquire_or_timeout(lock, 30s, hold)) == 0);
    CHECK(hold.holds());
    CHECK(hold.release());
    // Held by another: the timer wins, the acquire is cancelled and leaves the queue.
    redlock::Lock holder(redlock::Client(s.server.endpoint()), s.k, parked(fair));
    REQUIRE(holder.try_lock());
    for (int i = 0; i < redlock::test::rounds(8); ++i) {
      CHECK(io.await(acquire_or_timeout(lock, std::chrono::milliseconds(50 * i), hold)) == 1);
      CHECK_FALSE(hold.holds());
    }
    CHECK(eventually([&] { return queue_length(s.server, s.k) == 0; }));
    holder.unlock();
    CHECK(eventually([&] { return given_back(s.server, s.k); }));
  }
}

// Issue 43, defect 7: total cancellation promises no visible side effect, so it is honoured only
// before the first attempt (waiting in this process's queue for the object); an acquire already
// waiting on the server (its queue place or its refused SET seen there) goes on. Before, it was
// cancelled at every stage.
TEST_CASE("Async cancellation: total only before the first attempt, ignored after it",
          "[async][redis][cancel][fair]") {
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    Setup s(fair ? "async-cancel-total-fair" : "async-cancel-total");
    IoThreads io;
    redlock::Lock holder(redlock::Client(s.server.endpoint()), s.k, parked(fair));
    REQUIRE(holder.try_lock());
    redlock::Lock lock(s.client, s.k, parked(fair));
    Cancellable sent(io.context, lock);  // waits on the server
    REQUIRE(await_parked(s.server, s.k, fair));
    Cancellable unsent(io.context, lock);  // queued behind it in this process: nothing sent
    std::this_thread::sleep_for(100ms);
    unsent.cancel(asio::cancellation_type::total);
    REQUIRE(unsent.done_within(5s));
    CHECK(unsent.result().aborted);
    sent.cancel(asio::cancellation_type::total);
    CHECK_FALSE(sent.done_within(300ms));  // ignored
    holder.unlock();
    Outcome o = sent.result();
    CHECK_FALSE(o.aborted);
    CHECK(o.hold.holds());
    CHECK(o.hold.release());
    // Partial cancellation works at every stage, as terminal does.
    REQUIRE(holder.try_lock());
    Cancellable partial(io.context, lock);
    REQUIRE(await_parked(s.server, s.k, fair));
    partial.cancel(asio::cancellation_type::partial);
    CHECK(partial.result().aborted);
    holder.unlock();
    CHECK(eventually([&] { return given_back(s.server, s.k); }));
  }
}

namespace {

// Acquires and keeps the Hold in its frame until the io_context goes; counts the grants.
asio::awaitable<void> acquire_and_keep(redlock::LockBase& lock, std::atomic<int>& granted) {
  redlock::Hold hold = co_await redlock::async_acquire(lock, use_awaitable);
  ++granted;
  asio::steady_timer forever(co_await asio::this_coro::executor, 24h);
  co_await forever.async_wait(use_awaitable);
}

}  // namespace

TEST_CASE("Async: the io_context destroyed with 1,000 operations in flight",
          "[async][redis][cancel][slow]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto shared = key("async-destroyed-shared");
  redlock::Lock holder(redlock::Client(server.endpoint()), shared, parked(true));
  REQUIRE(holder.try_lock());
  // 50 operations on free keys (granted, their Holds in the coroutines' frames) and 950 on the
  // held key, fair, spread over 95 lock objects (queued on the server, or locally behind them).
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  for (int i = 0; i < 50; ++i)
    locks.push_back(std::make_unique<redlock::Lock>(
        client, key("async-destroyed-" + std::to_string(i)), fast(60s)));
  for (int i = 0; i < 95; ++i)
    locks.push_back(std::make_unique<redlock::Lock>(client, shared, parked(true)));
  std::atomic<int> granted{0};
  auto io = std::make_unique<IoThreads>();
  for (int i = 0; i < 1000; ++i) {
    redlock::LockBase& lock = i < 50 ? *locks[i] : *locks[50 + (i - 50) % 95];
    asio::co_spawn(io->context, acquire_and_keep(lock, granted), asio::detached);
  }
  REQUIRE(eventually([&] { return granted.load() == 50; }, 60s));
  CHECK(eventually([&] { return queue_length(server, shared) >= 1; }, 30s));
  io.reset();  // stops its thread, then destroys the context with the operations in flight
  CHECK(granted.load() == 50);
  locks.clear();
  holder.unlock();
  // The granted Holds went with their frames: the finisher releases them; the waiters ended.
  CHECK(eventually([&] { return redlock::test::run_keys(server) == 0; }, 60s));
  std::this_thread::sleep_for(500ms);
  CHECK(redlock::test::run_keys(server) == 0);  // and no ended waiter takes the key later
}
