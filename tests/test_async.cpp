// [async]: the asio completion tokens of <redlock/asio.hpp> on a standalone server and a Redlock:
// co_await of acquire, try-acquire, extend and release; callbacks on their executor; a release
// that wakes an async waiter (wake-on-release and fair mode) without polling; FIFO hand-overs to
// queued coroutines; a Redlock with one paused node; an io_context run by four threads; Holds
// moved between threads and coroutines; the watchdog and on_lost for async holds; Semaphore
// permits. Cancellation is in test_async_cancel.cpp, the other topologies and backends in
// test_async_topologies.cpp.
#include <catch2/catch.hpp>

#include <asio.hpp>
#include <asio/experimental/deferred.hpp>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <redlock/asio.hpp>
#include <redlock/redlock.hpp>

#include "async_fixture.hpp"
#include "support/eventually.hpp"
#include "support/fair_queue.hpp"
#include "support/lock_fixture.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using asio::use_awaitable;
using redlock::test::eventually;
using redlock::test::fair_lock_options;
using redlock::test::fast;
using redlock::test::IoThreads;
using redlock::test::key;
using redlock::test::leftovers;
using redlock::test::queue_length;
using redlock::test::RedisServer;
using redlock::test::Setup;
using redlock::test::value_of;
using redlock::test::wait_for_queue;
using Clock = std::chrono::steady_clock;

namespace {

// Calls of every command on `server` except the probes' own (INFO, PING, PUBSUB, CLIENT).
long long commands_run(const RedisServer& server) {
  const std::string info = server.raw({"INFO", "commandstats"}).str();
  long long n = 0;
  for (std::size_t at = info.find("cmdstat_"); at != std::string::npos;
       at = info.find("cmdstat_", at + 1)) {
    const std::string name = info.substr(at + 8, info.find(':', at) - at - 8);
    if (name == "info" || name == "ping" || name.rfind("pubsub", 0) == 0 ||
        name.rfind("client", 0) == 0)
      continue;
    n += std::stoll(info.substr(info.find("calls=", at) + 6));
  }
  return n;
}

// Acquires, checks the hold, extends it, releases it: the whole cycle in one coroutine.
asio::awaitable<std::uint64_t> cycle(redlock::LockBase& lock) {
  redlock::Hold hold = co_await redlock::async_acquire(lock, use_awaitable);
  if (!hold.holds() || hold.validity() <= 0ms) throw std::runtime_error("granted, but not held");
  if (!co_await redlock::async_extend(hold, 20s, use_awaitable))
    throw std::runtime_error("extend refused");
  const std::uint64_t fence = hold.fence();
  if (!co_await redlock::async_release(hold, use_awaitable))
    throw std::runtime_error("release refused");
  co_return fence;
}

}  // namespace

TEST_CASE("Async: acquire, extend and release with co_await on a standalone server",
          "[async][redis]") {
  Setup s("async-basics");
  IoThreads io;
  redlock::LockOptions options = fast(10s);
  options.fencing = true;
  redlock::Lock lock(s.client, s.k, options);
  redlock::Lock rival(s.client, s.k, options);

  redlock::Hold hold = io.await(redlock::async_acquire(lock, use_awaitable));
  REQUIRE(hold.holds());
  CHECK(hold.validity() > 0ms);
  CHECK(hold.validity() <= 10s);
  CHECK(hold.fence() > 0);
  const std::string token = value_of(s.server, s.k);
  CHECK_FALSE(token.empty());
  CHECK_FALSE(lock.owns_lock());  // a handle hold, not the io thread's
  CHECK_FALSE(rival.try_lock());
  CHECK(io.await(redlock::async_extend(hold, 30s, use_awaitable)));
  CHECK(s.server.raw({"PTTL", s.k}).integer() > 20'000);
  CHECK(value_of(s.server, s.k) == token);

  const std::uint64_t first_fence = hold.fence();
  auto released = io.spawn(redlock::async_release(hold, use_awaitable));
  CHECK(IoThreads::await(std::move(released)));
  CHECK_FALSE(hold.holds());
  CHECK(leftovers(s.server, s.k) == 0);
  // Released: false, and an empty Hold's extend is false too.
  CHECK_FALSE(io.await(redlock::async_release(hold, use_awaitable)));
  CHECK_FALSE(io.await(redlock::async_extend(hold, 1s, use_awaitable)));

  // The whole cycle inside one coroutine, twice: fences grow.
  const std::uint64_t second = io.await(cycle(lock));
  const std::uint64_t third = io.await(cycle(lock));
  CHECK(second > first_fence);
  CHECK(third > second);
  CHECK(leftovers(s.server, s.k) == 0);
}

TEST_CASE("Async: the hold is taken from the Hold at async_release's initiation",
          "[async][redis]") {
  Setup s("async-release-init");
  IoThreads io;
  redlock::Lock lock(s.client, s.k, fast());
  redlock::Hold hold = io.await(redlock::async_acquire(lock, use_awaitable));
  REQUIRE(hold.holds());
  std::promise<bool> released;
  redlock::async_release(hold,
                         [&](std::exception_ptr e, bool ok) { released.set_value(!e && ok); });
  CHECK_FALSE(hold.holds());  // emptied by the initiating call itself
  auto done = released.get_future();
  REQUIRE(done.wait_for(30s) == std::future_status::ready);
  CHECK(done.get());
  CHECK(leftovers(s.server, s.k) == 0);
}

TEST_CASE("Async: try_acquire_for gives nullopt on contention, a Hold when released in time",
          "[async][redis]") {
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    Setup s(fair ? "async-try-fair" : "async-try");
    IoThreads io;
    redlock::LockOptions options = fast(60s);
    options.fair = fair;
    redlock::Lock lock(s.client, s.k, options);
    redlock::Lock rival(redlock::Client(s.server.endpoint()), s.k, options);
    REQUIRE(rival.try_lock());
    const std::string token = value_of(s.server, s.k);

    std::optional<redlock::Hold> none =
        io.await(redlock::async_try_acquire_for(lock, 200ms, use_awaitable));
    CHECK_FALSE(none);
    CHECK(value_of(s.server, s.k) == token);  // the rival's hold is untouched
    CHECK(queue_length(s.server, s.k) == 0);  // a fair waiter that gave up left the queue

    auto later = io.spawn(redlock::async_try_acquire_for(lock, 30s, use_awaitable));
    std::this_thread::sleep_for(100ms);
    CHECK(later.wait_for(0s) == std::future_status::timeout);
    rival.unlock();
    std::optional<redlock::Hold> got = IoThreads::await(std::move(later));
    REQUIRE(got);
    CHECK(got->holds());
    CHECK(value_of(s.server, s.k) != token);
    CHECK(io.await(redlock::async_release(*got, use_awaitable)));
    CHECK(leftovers(s.server, s.k) == 0);
  }
}

TEST_CASE("Async: a callback runs on its associated executor, or on the library's thread",
          "[async][redis]") {
  Setup s("async-executor");
  IoThreads io(2);
  redlock::Lock lock(s.client, s.k, fast());
  auto strand = asio::make_strand(io.context);
  std::promise<bool> on_strand;
  redlock::async_acquire(
      lock, asio::bind_executor(strand, [&](std::exception_ptr e, redlock::Hold hold) {
        on_strand.set_value(!e && hold.holds() && strand.running_in_this_thread());
      }));  // the Hold is destroyed at the end: released in the background
  auto f = on_strand.get_future();
  REQUIRE(f.wait_for(30s) == std::future_status::ready);
  CHECK(f.get());

  // No associated executor: the library's callback thread runs it (not the caller's, not the
  // io's).
  std::promise<std::thread::id> ran_on;
  redlock::Hold kept;
  std::mutex m;
  redlock::async_acquire(lock, [&](std::exception_ptr e, redlock::Hold hold) {
    if (!e) {
      std::lock_guard<std::mutex> guard(m);
      kept = std::move(hold);
    }
    ran_on.set_value(std::this_thread::get_id());
  });
  auto id = ran_on.get_future();
  REQUIRE(id.wait_for(30s) == std::future_status::ready);
  CHECK(id.get() != std::this_thread::get_id());
  std::lock_guard<std::mutex> guard(m);
  CHECK(kept.holds());
  CHECK(kept.release());
  CHECK(leftovers(s.server, s.k) == 0);
}

// Issue 43's defect 4: a plain callback that blocks, on another redlock operation or on
// anything else, held up every async operation of the process.
TEST_CASE("Async: a plain callback that blocks holds up no operation", "[async][redis][callback]") {
  Setup s("async-blocking-callback");
  redlock::Lock lock(s.client, s.k, fast());
  redlock::Lock other(s.client, key("async-blocking-callback-other"), fast());

  // The callback waits for a release that it starts itself (the case: a deadlock). The
  // promises are shared with the handlers, which may still run if a check fails first.
  auto released_inside = std::make_shared<std::promise<bool>>();
  redlock::async_acquire(lock, [released_inside](std::exception_ptr e, redlock::Hold hold) {
    if (e) return released_inside->set_value(false);
    auto released = redlock::async_release(hold, asio::use_future);
    released_inside->set_value(released.wait_for(5s) == std::future_status::ready &&
                               released.get());
  });
  auto inside = released_inside->get_future();
  REQUIRE(inside.wait_for(30s) == std::future_status::ready);
  CHECK(inside.get());
  CHECK(leftovers(s.server, s.k) == 0);

  // While a plain callback blocks, an operation with an io_context's handler completes.
  std::promise<void> unblock;
  std::shared_future<void> gate = unblock.get_future().share();
  auto blocking = std::make_shared<std::promise<void>>();
  redlock::async_acquire(lock, [blocking, gate](std::exception_ptr, redlock::Hold) {
    blocking->set_value();
    gate.wait_for(10s);
  });  // the Hold is destroyed when the callback returns: released in the background
  REQUIRE(blocking->get_future().wait_for(30s) == std::future_status::ready);
  auto granted = std::make_shared<std::promise<redlock::Hold>>();
  IoThreads io;
  redlock::async_acquire(
      other, asio::bind_executor(io.context, [granted](std::exception_ptr e, redlock::Hold hold) {
        if (!e) granted->set_value(std::move(hold));
      }));
  auto meanwhile = granted->get_future();
  const bool completed = meanwhile.wait_for(3s) == std::future_status::ready;
  unblock.set_value();
  CHECK(completed);
  if (completed) CHECK(meanwhile.get().release());
  CHECK(eventually([&] { return leftovers(s.server, s.k) == 0; }));
}

TEST_CASE("Async: a release completes a parked async waiter, without polling",
          "[async][redis][wake][fair]") {
  for (const bool fair : {false, true}) {
    INFO("fair " << fair);
    Setup s(fair ? "async-wake-fair" : "async-wake");
    IoThreads io;
    const redlock::LockOptions options = redlock::test::parked(fair);
    redlock::Lock holder(redlock::Client(s.server.endpoint()), s.k, options);
    REQUIRE(holder.try_lock());
    redlock::Lock lock(s.client, s.k, options);
    auto waiter = io.spawn(redlock::async_acquire(lock, use_awaitable));
    REQUIRE(redlock::test::await_parked(s.server, s.k, fair));
    // Parked: a second of waiting costs the server (almost) no commands. A waiter that polled
    // every 20 ms would run about 50.
    const long long before = commands_run(s.server);
    std::this_thread::sleep_for(1s);
    const long long during = commands_run(s.server) - before;
    CHECK(during <= 5);
    CHECK(waiter.wait_for(0s) == std::future_status::timeout);
    const auto released = Clock::now();
    holder.unlock();
    redlock::Hold hold = IoThreads::await(std::move(waiter), 50s);
    INFO("release to grant: "
         << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - released).count()
         << " ms");
    CHECK(Clock::now() - released < 30s);  // the retry delay is 60 s: this was a wake-up
    CHECK(hold.holds());
    CHECK(io.await(redlock::async_release(hold, use_awaitable)));
    CHECK(leftovers(s.server, s.k) == 0);
  }
}

namespace {

// Acquires `lock`, notes `index` in `order`, and releases.
asio::awaitable<void> take_in_turn(redlock::LockBase& lock, int index, std::vector<int>& order,
                                   std::mutex& m) {
  redlock::Hold hold = co_await redlock::async_acquire(lock, use_awaitable);
  {
    std::lock_guard<std::mutex> guard(m);
    order.push_back(index);
  }
  co_await redlock::async_release(hold, use_awaitable);
}

}  // namespace

TEST_CASE("Async: fair mode serves coroutines queued on one key in FIFO order",
          "[async][redis][fair]") {
  redlock::test::HeldFairLock held("async-fifo");
  IoThreads io;
  const int n = 8;
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  std::vector<std::future<void>> done;
  std::vector<int> order;
  std::mutex m;
  for (int i = 0; i < n; ++i) {  // each joins the queue before the next starts
    locks.push_back(std::make_unique<redlock::Lock>(held.client, held.k, fair_lock_options()));
    done.push_back(io.spawn(take_in_turn(*locks.back(), i, order, m)));
    REQUIRE(wait_for_queue(held.server, held.k, i + 1, 30s));
  }
  held.holder.unlock();
  for (auto& f : done) IoThreads::await(std::move(f));
  std::vector<int> expected;
  for (int i = 0; i < n; ++i) expected.push_back(i);
  CHECK(order == expected);
  CHECK(leftovers(held.server, held.k) == 0);
}

TEST_CASE("Async: a Redlock(3) with one node paused acquires on the quorum",
          "[async][redis][redlock]") {
  redlock::test::ServerGroup group(3);
  std::vector<redlock::Client> clients;
  for (const auto& endpoint : group.endpoints()) clients.emplace_back(endpoint);
  const auto k = key("async-redlock-paused");
  IoThreads io;
  redlock::Redlock lock(clients, k, fast(20s));
  group[2].pause();
  redlock::Hold hold = io.await(redlock::async_acquire(lock, use_awaitable));
  CHECK(hold.holds());
  CHECK(group[0].raw({"EXISTS", k}).integer() == 1);
  CHECK(group[1].raw({"EXISTS", k}).integer() == 1);
  CHECK(io.await(redlock::async_extend(hold, 20s, use_awaitable)));  // the quorum again
  CHECK(io.await(redlock::async_release(hold, use_awaitable)));
  group[2].resume();
  // What the paused node ran once it woke (the SET sent to it, then its release) leaves nothing.
  CHECK(eventually([&] {
    return leftovers(group[0], k) + leftovers(group[1], k) + leftovers(group[2], k) == 0;
  }));
}

namespace {

// What the workers of the multi-threaded case count.
struct Tally {
  std::atomic<int> inside[3] = {};  // holders of each shared key right now, as the workers see
  std::atomic<int> violations{0};   // a worker found another inside
  std::atomic<int> acquisitions{0};
  std::atomic<int> failures{0};  // refused releases, exceptions
};

// One worker: `rounds` times, a shared key (mutual exclusion counted) and its own key.
asio::awaitable<void> worker(std::vector<redlock::Lock*> shared, redlock::Lock& own, int id,
                             int rounds, Tally& tally) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  try {
    for (int r = 0; r < rounds; ++r) {
      const std::size_t which = static_cast<std::size_t>(id + r) % shared.size();
      redlock::Hold hold = co_await redlock::async_acquire(*shared[which], use_awaitable);
      if (tally.inside[which].fetch_add(1) != 0) ++tally.violations;
      timer.expires_after(1ms);  // stays inside while other io threads run
      co_await timer.async_wait(use_awaitable);
      tally.inside[which].fetch_sub(1);
      if (!co_await redlock::async_release(hold, use_awaitable)) ++tally.failures;
      redlock::Hold mine = co_await redlock::async_acquire(own, use_awaitable);
      if (!co_await redlock::async_release(mine, use_awaitable)) ++tally.failures;
      tally.acquisitions += 2;
    }
  } catch (...) {
    ++tally.failures;
  }
}

}  // namespace

TEST_CASE("Async: an io_context run by four threads, coroutines on shared and distinct keys",
          "[async][redis]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  IoThreads io(4);
  const int workers = 16;
  const int rounds = redlock::test::rounds(12);
  // Each worker has Lock objects of its own (one object holds one hold at a time: sharing them
  // would serialise the workers locally instead of on the server).
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  std::vector<std::future<void>> done;
  Tally tally;
  for (int w = 0; w < workers; ++w) {
    std::vector<redlock::Lock*> shared;
    for (int s = 0; s < 3; ++s) {
      locks.push_back(std::make_unique<redlock::Lock>(
          client, key("async-mt-shared-" + std::to_string(s)), fast(30s)));
      shared.push_back(locks.back().get());
    }
    locks.push_back(std::make_unique<redlock::Lock>(
        client, key("async-mt-own-" + std::to_string(w)), fast(30s)));
    done.push_back(io.spawn(worker(shared, *locks.back(), w, rounds, tally)));
  }
  for (auto& f : done) IoThreads::await(std::move(f), std::chrono::seconds(300));
  CHECK(tally.violations.load() == 0);
  CHECK(tally.failures.load() == 0);
  CHECK(tally.acquisitions.load() == workers * rounds * 2);
  CHECK(eventually([&] { return redlock::test::run_keys(server) == 0; }));
}

TEST_CASE("Async failures carry the blocking call's exception types, with every token",
          "[async][redis][fault]") {
  RedisServer server;
  const redlock::Endpoint endpoint = server.endpoint();
  server.kill9();  // nothing answers there now
  redlock::Client client(endpoint);
  redlock::LockOptions options = fast();
  options.max_unavailable = 300ms;  // a wait rides the outage out this long, then throws
  redlock::Lock lock(client, key("async-down"), options);
  IoThreads io;
  CHECK_THROWS_AS(io.await(redlock::async_acquire(lock, use_awaitable)), redlock::ConnectionError);
  CHECK_THROWS_AS(io.await(redlock::async_try_acquire_for(lock, 1h, use_awaitable)),
                  redlock::ConnectionError);
  // use_future rethrows it too; a callback gets it as the exception_ptr, with an empty Hold.
  auto future = redlock::async_acquire(lock, asio::use_future);
  REQUIRE(future.wait_for(30s) == std::future_status::ready);
  CHECK_THROWS_AS(future.get(), redlock::ConnectionError);
  std::promise<std::pair<std::exception_ptr, bool>> got;
  redlock::async_acquire(lock, [&](std::exception_ptr e, redlock::Hold hold) {
    got.set_value({e, hold.holds()});
  });
  auto called = got.get_future();
  REQUIRE(called.wait_for(30s) == std::future_status::ready);
  const auto [error, held] = called.get();
  CHECK_FALSE(held);
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), redlock::ConnectionError);
}

TEST_CASE("Async with use_future and deferred tokens", "[async][redis]") {
  Setup s("async-tokens");
  IoThreads io;
  redlock::Lock lock(s.client, s.k, fast());
  std::future<redlock::Hold> future = redlock::async_acquire(lock, asio::use_future);
  REQUIRE(future.wait_for(30s) == std::future_status::ready);
  redlock::Hold hold = future.get();
  CHECK(hold.holds());
  auto extended = redlock::async_extend(hold, 20s, asio::use_future);
  REQUIRE(extended.wait_for(30s) == std::future_status::ready);
  CHECK(extended.get());
  // deferred: the Hold is taken by the call (as for every token), the release is sent only when
  // the deferred operation is launched.
  auto later = redlock::async_release(hold, asio::experimental::deferred);
  CHECK_FALSE(hold.holds());
  std::this_thread::sleep_for(100ms);
  CHECK(s.server.raw({"EXISTS", s.k}).integer() == 1);  // not launched yet
  std::promise<bool> released;
  std::move(later)([&](std::exception_ptr e, bool ok) { released.set_value(!e && ok); });
  auto done = released.get_future();
  REQUIRE(done.wait_for(30s) == std::future_status::ready);
  CHECK(done.get());
  CHECK(leftovers(s.server, s.k) == 0);
}
