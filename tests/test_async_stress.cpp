// [async]: cancellation beyond the single stages of test_async_cancel.cpp: coroutines on four io
// threads cancelled by timers of random length (so at every stage, racing each other's grants
// and releases) with mutual exclusion counted; an acquire cancelled while it waits in its
// object's local queue; a Semaphore's permit waiter and a Redlock's waiter cancelled. Afterwards
// the servers hold nothing of them. And many waiting operations: no thread added, the io thread
// never blocked.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <asio.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <redlock/asio.hpp>
#include <redlock/redlock.hpp>

#include "async_fixture.hpp"
#include "support/eventually.hpp"
#include "support/lock_fixture.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using asio::use_awaitable;
using redlock::test::Cancellable;
using redlock::test::eventually;
using redlock::test::fast;
using redlock::test::IoThreads;
using redlock::test::key;
using redlock::test::leftovers;
using redlock::test::Outcome;
using redlock::test::RedisServer;
using redlock::test::run_keys;
using redlock::test::Setup;

namespace {

constexpr std::size_t kKeys = 4;  // 0, 1: wake-on-release; 2, 3: fair

struct Tally {
  std::atomic<int> inside[kKeys] = {};
  std::atomic<int> violations{0};
  std::atomic<int> granted{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> failures{0};
};

// `rounds` times: one of the keys, acquired against a timer of 0-15 ms; held 0-2 ms if won.
asio::awaitable<void> racer(std::vector<redlock::Lock*> locks, unsigned seed, int rounds,
                            Tally& tally) {
  std::mt19937 random(seed);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  try {
    for (int r = 0; r < rounds; ++r) {
      const std::size_t which = random() % locks.size();
      timer.expires_after(std::chrono::microseconds(random() % 15'000));
      auto won = co_await(redlock::async_acquire(*locks[which], use_awaitable) ||
                          timer.async_wait(use_awaitable));
      if (won.index() == 1) {
        ++tally.cancelled;
        continue;
      }
      redlock::Hold hold = std::move(std::get<0>(won));
      if (tally.inside[which].fetch_add(1) != 0) ++tally.violations;
      timer.expires_after(std::chrono::microseconds(random() % 2'000));
      co_await timer.async_wait(use_awaitable);
      tally.inside[which].fetch_sub(1);
      ++tally.granted;
      if (!co_await redlock::async_release(hold, use_awaitable)) ++tally.failures;
    }
  } catch (...) {
    ++tally.failures;
  }
}

}  // namespace

TEST_CASE("Async: coroutines on four threads cancelled by random timers leave nothing behind",
          "[async][redis][cancel]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  IoThreads io(4);
  const int workers = 24;
  const int rounds = redlock::test::rounds(40);
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  std::vector<std::future<void>> done;
  Tally tally;
  for (int w = 0; w < workers; ++w) {
    std::vector<redlock::Lock*> mine;
    for (std::size_t k = 0; k < kKeys; ++k) {
      redlock::LockOptions options = fast(30s);
      options.fair = k >= 2;
      locks.push_back(std::make_unique<redlock::Lock>(
          client, key("async-racers-" + std::to_string(k)), options));
      mine.push_back(locks.back().get());
    }
    done.push_back(io.spawn(racer(mine, 1000u + static_cast<unsigned>(w), rounds, tally)));
  }
  for (auto& f : done) IoThreads::await(std::move(f), std::chrono::seconds(300));
  INFO("granted " << tally.granted.load() << ", cancelled " << tally.cancelled.load());
  CHECK(tally.violations.load() == 0);
  CHECK(tally.failures.load() == 0);
  CHECK(tally.granted.load() + tally.cancelled.load() == workers * rounds);
  CHECK(tally.granted.load() > 0);
  CHECK(tally.cancelled.load() > 0);
  CHECK(eventually([&] { return run_keys(server) == 0; }, 30s));
}

TEST_CASE("Async: an acquire cancelled in its object's local queue leaves the next one served",
          "[async][redis][cancel]") {
  Setup s("async-cancel-local");
  IoThreads io;
  redlock::Lock lock(s.client, s.k, fast(30s));
  redlock::Hold first = io.await(redlock::async_acquire(lock, use_awaitable));
  REQUIRE(first.holds());
  Cancellable second(io.context, lock);  // waits behind `first` in the object's local queue
  auto third = io.spawn(redlock::async_try_acquire_for(lock, 60s, use_awaitable));
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(second.done_within(0ms));
  second.cancel();
  const Outcome o = second.result();
  CHECK(o.aborted);
  CHECK(third.wait_for(0s) == std::future_status::timeout);
  CHECK(io.await(redlock::async_release(first, use_awaitable)));
  std::optional<redlock::Hold> got = IoThreads::await(std::move(third));
  REQUIRE(got);
  CHECK(got->holds());
  CHECK(io.await(redlock::async_release(*got, use_awaitable)));
  CHECK(leftovers(s.server, s.k) == 0);
}

TEST_CASE("Async: a cancelled Semaphore permit waiter leaves no slot or queue entry",
          "[async][redis][cancel][semaphore]") {
  Setup s("async-cancel-permit");
  IoThreads io;
  redlock::Semaphore a(s.client, s.k, 1, redlock::test::parked(true));
  redlock::Semaphore b(redlock::Client(s.server.endpoint()), s.k, 1, redlock::test::parked(true));
  redlock::Hold held = io.await(redlock::async_acquire(a, use_awaitable));
  REQUIRE(held.holds());
  Cancellable waiter(io.context, b);
  std::this_thread::sleep_for(300ms);  // refused, and waiting for the permit
  CHECK_FALSE(waiter.done_within(0ms));
  waiter.cancel();
  CHECK(waiter.result().aborted);
  CHECK(io.await(redlock::async_release(held, use_awaitable)));
  CHECK(eventually([&] { return run_keys(s.server) == 0; }));
  CHECK(redlock::test::run_key_names(s.server) == std::vector<std::string>{});
  // The permit is free for the next one.
  std::optional<redlock::Hold> next =
      io.await(redlock::async_try_acquire_for(b, 5s, use_awaitable));
  REQUIRE(next);
  CHECK(io.await(redlock::async_release(*next, use_awaitable)));
  CHECK(eventually([&] { return run_keys(s.server) == 0; }));
}

TEST_CASE("Async: a cancelled Redlock waiter leaves nothing on any node",
          "[async][redis][cancel][redlock]") {
  redlock::test::ServerGroup group(3);
  std::vector<redlock::Client> clients;
  for (const auto& endpoint : group.endpoints()) clients.emplace_back(endpoint);
  const auto k = key("async-cancel-redlock");
  IoThreads io;
  redlock::Redlock holder(clients, k, redlock::test::parked(false));
  redlock::Redlock lock(clients, k, redlock::test::parked(false));
  REQUIRE(holder.try_lock());
  Cancellable waiter(io.context, lock);
  std::this_thread::sleep_for(300ms);
  CHECK_FALSE(waiter.done_within(0ms));
  waiter.cancel();
  CHECK(waiter.result().aborted);
  holder.unlock();
  std::this_thread::sleep_for(300ms);  // a waiter that had not ended would take it now
  CHECK(eventually([&] {
    return leftovers(group[0], k) + leftovers(group[1], k) + leftovers(group[2], k) == 0;
  }));
}

namespace {

// Threads of this process now (entries of /proc/self/task).
int thread_count() {
  int n = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(dir)) n += e->d_name[0] != '.' ? 1 : 0;
    ::closedir(dir);
  }
  return n;
}

asio::awaitable<void> acquire_release(redlock::LockBase& lock) {
  redlock::Hold hold = co_await redlock::async_acquire(lock, use_awaitable);
  co_await redlock::async_release(hold, use_awaitable);
}

// Ticks `n` times every 10 ms on the io thread: it ends only if that thread is never blocked.
asio::awaitable<int> ticker(int n) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  int ticks = 0;
  for (; ticks < n; ++ticks) {
    timer.expires_after(10ms);
    co_await timer.async_wait(use_awaitable);
  }
  co_return ticks;
}

}  // namespace

TEST_CASE("Async: many waiting operations add no thread and never block the io thread",
          "[async][redis][wake]") {
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    Setup s(fair ? "async-no-threads-fair" : "async-no-threads");
    IoThreads io(1);
    redlock::Lock holder(redlock::Client(s.server.endpoint()), s.k, redlock::test::parked(fair));
    REQUIRE(holder.try_lock());
    const int n = redlock::test::rounds(200);
    std::vector<std::unique_ptr<redlock::Lock>> locks;
    std::vector<std::future<void>> done;
    const auto start_one = [&] {
      locks.push_back(std::make_unique<redlock::Lock>(s.client, s.k, redlock::test::parked(fair)));
      done.push_back(io.spawn(acquire_release(*locks.back())));
    };
    start_one();  // the library's threads for waiting (its loop, the subscriber) exist now
    REQUIRE(redlock::test::await_parked(s.server, s.k, fair));
    const int before = thread_count();
    for (int i = 1; i < n; ++i) start_one();
    CHECK(io.await(ticker(50)) == 50);  // the io thread runs timers meanwhile
    if (fair) CHECK(redlock::test::wait_for_queue(s.server, s.k, n, 60s));
    CHECK(thread_count() == before);
    holder.unlock();
    for (auto& f : done) IoThreads::await(std::move(f), std::chrono::seconds(120));
    CHECK(thread_count() == before);
    CHECK(eventually([&] { return leftovers(s.server, s.k) == 0; }));
  }
}
