// bench/async_waiters.cpp: section 13's waiters and cancellation parts (see async.cpp's header).
#include "async.hpp"

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>  // std::max
#include <array>      // std::array
#include <atomic>     // std::atomic
#include <chrono>     // std::chrono
#include <iostream>   // std::cout
#include <memory>     // std::unique_ptr
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <thread>     // std::this_thread
#include <tuple>      // std::tie
#include <variant>    // std::get
#include <vector>     // std::vector

#include <fmt/format.h>

#include <redlock/asio.hpp>
#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "raw.hpp"
#include "support/redis_server.hpp"

namespace bench::async {

using std::chrono::milliseconds;

LeftOver left_over(redisContext* c, const std::string& prefix) {
  LeftOver out;
  std::string cursor = "0";
  do {
    RawReply r = raw_command(c, {"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) throw std::runtime_error("SCAN failed");
    cursor.assign(r->element[0]->str, r->element[0]->len);
    const redisReply* names = r->element[1];
    for (std::size_t i = 0; i < names->elements; ++i) {
      const std::string k(names->element[i]->str, names->element[i]->len);
      const std::string type = raw_command(c, {"TYPE", k})->str;
      if (type == "list") {
        out.queue_entries += raw_command(c, {"LLEN", k})->integer;
      } else if (type == "hash") {
        out.queue_entries += raw_command(c, {"HLEN", k})->integer;
      } else if (type != "none") {
        ++out.keys;
      }
    }
  } while (cursor != "0");
  return out;
}

namespace {

// ---- Waiters ---------------------------------------------------------------------------------

enum class WaitOn { timer, lock };

// The waiters of one run. The vectors are touched on the io thread only, and read by the main
// thread once every waiter finished (on_io_thread orders the two).
struct Waiters {
  explicit Waiters(std::size_t n) : signals(n), granted(n, 0) {}
  std::vector<asio::cancellation_signal> signals;
  std::vector<char> granted;
  std::vector<std::size_t> order;         // the waiters in the order they were served
  std::vector<std::int64_t> granted_at;   // when each of them resumed with its Hold
  std::vector<std::int64_t> released_at;  // when each of them started its release
  std::atomic<std::size_t> started{0};
  std::atomic<std::size_t> served{0};
  std::atomic<std::size_t> finished{0};
  std::exception_ptr error;  // the first failure that was not a cancellation
};

// One coroutine body for both runs, so that their frames are the same size: the heap of the
// timer run is the baseline of the lock run.
asio::awaitable<void> waiter(WaitOn what, redlock::LockBase* lock, std::size_t i, Waiters& w) {
  asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::hours(1));
  w.started.fetch_add(1);
  if (what == WaitOn::timer) {
    co_await timer.async_wait(asio::use_awaitable);
    co_return;
  }
  redlock::Hold hold = co_await redlock::async_acquire(*lock, asio::use_awaitable);
  w.granted_at.push_back(now_ns());
  w.order.push_back(i);
  w.granted[i] = 1;
  w.served.fetch_add(1);
  timer.expires_after(milliseconds(1));  // the hold, as in the blocking hand-off
  co_await timer.async_wait(asio::use_awaitable);
  w.released_at.push_back(now_ns());
  co_await redlock::async_release(hold, asio::use_awaitable);
}

void spawn(asio::io_context& io, WaitOn what, redlock::LockBase* lock, std::size_t i, Waiters& w) {
  asio::co_spawn(io, waiter(what, lock, i, w),
                 asio::bind_cancellation_slot(w.signals[i].slot(), [&w](std::exception_ptr e) {
                   if (e && !aborted(e) && !w.error) w.error = e;
                   w.finished.fetch_add(1);
                 }));
}

// Cancels every waiter not served yet (on the io thread), and waits until all have finished.
void cancel_rest(asio::io_context& io, Waiters& w, std::chrono::seconds within) {
  on_io_thread(io, [&w] {
    for (std::size_t i = 0; i < w.signals.size(); ++i) {
      if (w.granted[i] == 0) w.signals[i].emit(asio::cancellation_type::terminal);
    }
  });
  const std::int64_t end = now_ns() + std::chrono::nanoseconds(within).count();
  while (w.finished.load() < w.signals.size()) {
    if (now_ns() > end) throw std::runtime_error("waiters did not finish after their cancellation");
    std::this_thread::sleep_for(milliseconds(5));
  }
  on_io_thread(io, [] {});
  if (w.error) std::rethrow_exception(w.error);
}

bool wait_until(const std::function<bool()>& done, milliseconds within) {
  const std::int64_t end = now_ns() + std::chrono::nanoseconds(within).count();
  while (!done()) {
    if (now_ns() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// The heap in use per coroutine waiting on a steady_timer (the baseline).
double timer_heap_per_waiter(asio::io_context& io, std::size_t n) {
  Waiters w(n);
  const std::int64_t before = heap_in_use();
  on_io_thread(io, [&] {
    for (std::size_t i = 0; i < n; ++i) spawn(io, WaitOn::timer, nullptr, i, w);
  });
  if (!wait_until([&] { return w.started.load() == n; }, milliseconds(30'000))) {
    throw std::runtime_error("the timer waiters did not start");
  }
  on_io_thread(io, [] {});
  const std::int64_t during = heap_in_use();
  cancel_rest(io, w, std::chrono::seconds(30));
  return static_cast<double>(during - before) / static_cast<double>(n);
}

long long queue_length(redisContext* admin, const std::string& key) {
  // The fair queue's list, `{<key>}:waiters` (LockOptions::fair; the bench's keys have no tag).
  return raw_command(admin, {"LLEN", "{" + key + "}:waiters"})->integer;
}

// What the lock run saw while its waiters started and waited.
struct Started {
  bool one_by_one{true};  // each waiter started once the previous one was in the server's queue
  std::size_t threads_max{0};
  std::int64_t heap_waiting{0};
  double start_seconds{0};
  long long queued{0};  // entries the waiters added to the server's queue
};

// Starts the waiters one at a time, each once the previous one joined the server's queue (so the
// queue's order is the start order), sampling the process's threads; falls back to starting the
// rest at once if a waiter is not in the queue within 2 s.
Started start_waiters(asio::io_context& io,
                      const std::vector<std::unique_ptr<redlock::Lock>>& locks, Waiters& w,
                      redisContext* admin, const std::string& key) {
  Started s;
  const std::int64_t t0 = now_ns();
  const long long base = queue_length(admin, key);
  const std::size_t n = locks.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (!s.one_by_one) {
      on_io_thread(io, [&] {
        for (std::size_t j = i; j < n; ++j) spawn(io, WaitOn::lock, locks[j].get(), j, w);
      });
      break;
    }
    asio::post(io, [&, i] { spawn(io, WaitOn::lock, locks[i].get(), i, w); });
    const auto want = base + static_cast<long long>(i) + 1;
    s.one_by_one =
        wait_until([&] { return queue_length(admin, key) >= want; }, milliseconds(2'000));
    if (i % 500 == 0) s.threads_max = std::max(s.threads_max, thread_ids().size());
  }
  // All in the queue, or (a library that queues later) all started and 30 s gone.
  const auto all = base + static_cast<long long>(n);
  wait_until([&] { return queue_length(admin, key) >= all; }, milliseconds(30'000));
  wait_until([&] { return w.started.load() == n; }, milliseconds(30'000));
  s.queued = queue_length(admin, key) - base;
  std::this_thread::sleep_for(milliseconds(100));  // the last replies read, nothing in flight
  on_io_thread(io, [] {});
  s.threads_max = std::max(s.threads_max, thread_ids().size());
  s.heap_waiting = heap_in_use();
  s.start_seconds = static_cast<double>(now_ns() - t0) / 1e9;
  return s;
}

// release -> the next waiter's completion, for every consecutive pair the waiters served.
std::vector<std::int64_t> handoffs(const Waiters& w) {
  std::vector<std::int64_t> out;
  for (std::size_t k = 1; k < w.granted_at.size() && k - 1 < w.released_at.size(); ++k) {
    out.push_back(w.granted_at[k] - w.released_at[k - 1]);
  }
  return out;
}

bool served_in_order(const std::vector<std::size_t>& order) {
  for (std::size_t k = 0; k < order.size(); ++k) {
    if (order[k] != k) return false;
  }
  return !order.empty();
}

// Holds `key` with `holder`, and lets one other lock wait for it and get it once (the library's
// async thread and subscriptions exist before the threads are counted).
redlock::Hold warm_up(asio::io_context& io, redlock::Client& client, redlock::Lock& holder,
                      const std::string& key) {
  redlock::Lock other(client, key);
  redlock::Hold first = holder.acquire();
  std::promise<void> done;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        redlock::Hold h = co_await redlock::async_acquire(other, asio::use_awaitable);
        co_await redlock::async_release(h, asio::use_awaitable);
      },
      [&](std::exception_ptr e) {
        if (e) {
          done.set_exception(e);
        } else {
          done.set_value();
        }
      });
  std::this_thread::sleep_for(milliseconds(50));
  first.release();
  done.get_future().get();
  return holder.acquire();
}

// What is left on the server once every operation ended: counted after `grace` (a command the
// library still had in flight, a SET that may land, ends by its command timeout), then again
// every 50 ms until nothing is left or `within` passed since the call. Returns what was left
// then, and the seconds since the call.
std::pair<LeftOver, double> settle(redisContext* admin, milliseconds grace, milliseconds within) {
  const std::int64_t t0 = now_ns();
  std::this_thread::sleep_for(grace);
  LeftOver left = left_over(admin, "");
  while ((left.keys > 0 || left.queue_entries > 0) &&
         now_ns() - t0 < std::chrono::nanoseconds(within).count()) {
    std::this_thread::sleep_for(milliseconds(50));
    left = left_over(admin, "");
  }
  return {left, static_cast<double>(now_ns() - t0) / 1e9};
}

Json left_json(const LeftOver& left, double seconds) {
  return Json::object()
      .set("keys", left.keys)
      .set("queue_entries", left.queue_entries)
      .set("seconds_waited", seconds);
}

// The blocking hand-off in the waiters' mode (fair), 2 runs of --seconds (at least 0.25 s).
std::vector<std::int64_t> blocking_handoffs(const Config& config,
                                            const redlock::Endpoint& endpoint) {
  std::vector<std::int64_t> all;
  for (int i = 0; i < 2; ++i) {
    const std::vector<std::int64_t> h =
        handoff_ping_pong(endpoint, redlock::test::key("s13:ping-pong" + std::to_string(i)),
                          std::max(config.seconds, 0.25), HandoffMode::fair);
    all.insert(all.end(), h.begin(), h.end());
  }
  return all;
}

// What the waiters part measured.
struct WaitFigures {
  std::size_t waiters{0};
  Started started;
  std::size_t threads_before{0};
  double timer_heap{0};   // per coroutine waiting on a steady_timer
  double lock_heap{0};    // per coroutine waiting in async_acquire
  double object_heap{0};  // per Lock object
  std::vector<std::size_t> order;
  Summary handoff;
  LeftOver left;
  double left_seconds{0};
};

// Runs the waiters on `io`; on a failure, stops `io` before the waiters' state goes away.
WaitFigures run_waiters(const Config& config, redlock::Client& client, redisContext* admin,
                        const std::string& key, Waiters& w, IoThread& io) {
  WaitFigures f;
  f.waiters = w.signals.size();
  const std::size_t serve = std::min<std::size_t>(1'000, f.waiters / 2);
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  try {
    redlock::Lock holder(client, key);
    redlock::Hold held = warm_up(io.io(), client, holder, key);
    f.timer_heap = timer_heap_per_waiter(io.io(), f.waiters);
    const std::int64_t heap0 = heap_in_use();
    for (std::size_t i = 0; i < f.waiters; ++i) {
      locks.push_back(std::make_unique<redlock::Lock>(client, key));
    }
    f.threads_before = thread_ids().size();
    const std::int64_t heap1 = heap_in_use();
    f.object_heap = static_cast<double>(heap1 - heap0) / static_cast<double>(f.waiters);
    f.started = start_waiters(io.io(), locks, w, admin, key);
    f.lock_heap =
        static_cast<double>(f.started.heap_waiting - heap1) / static_cast<double>(f.waiters);
    held.release();
    wait_until([&] { return w.served.load() >= serve; }, milliseconds(serve * 50 + 5'000));
    cancel_rest(io.io(), w, std::chrono::seconds(60));
  } catch (...) {
    io.io().stop();  // the pending waiters end with the io_context, before `locks` and `w`
    throw;
  }
  std::tie(f.left, f.left_seconds) =
      settle(admin, config.timeout + milliseconds(500), milliseconds(10'000));
  f.order = w.order;
  f.handoff = summarize(handoffs(w));
  return f;
}

}  // namespace

void waiters_part(const Config& config, Json& out, Goals& goals, Report& /*report*/) {
  const auto n = static_cast<std::size_t>(config.async_waiters);
  std::cout << "\n  " << n << " coroutines waiting on one key on one io_context thread, each its "
            << "own Lock (default options: fair); the first " << std::min<std::size_t>(1'000, n / 2)
            << " served (hold 1 ms, async_release), the rest cancelled\n";
  std::cout.flush();
  redlock::test::RedisServer server;
  const redlock::Endpoint endpoint = endpoint_of(server, config.timeout);
  redlock::Client client(endpoint);
  RawContext admin = raw_connect(endpoint);
  Waiters w(n);
  WaitFigures f;
  {
    IoThread io;
    f = run_waiters(config, client, admin.get(), redlock::test::key("s13:waiters"), w, io);
  }
  const Summary blocking = summarize(blocking_handoffs(config, endpoint));
  const auto added =
      static_cast<long long>(f.started.threads_max) - static_cast<long long>(f.threads_before);
  const double op_heap = f.lock_heap - f.timer_heap;
  const bool fifo = f.started.one_by_one && served_in_order(f.order);
  const double handoff_ratio = ratio(f.handoff.p50_ns, blocking.p50_ns);

  std::cout << fmt::format(
      "    started {} in {:.2f} s ({}, {} in the server's queue); threads: {} before, at most {} "
      "while they waited\n"
      "    heap per waiting coroutine: {:.0f} bytes (async_acquire) - {:.0f} (steady_timer) = "
      "{:.0f} bytes per waiting operation; a Lock object: {:.0f} bytes\n"
      "    served {} in order {}; hand-off p50 {:.3f} ms, p99 {:.3f} ms (blocking, 2 threads "
      "alternating, fair: p50 {:.3f} ms)\n"
      "    after cancelling the rest: {} keys, {} queue entries left ({:.2f} s later)\n",
      n, f.started.start_seconds,
      f.started.one_by_one ? "one by one, in queue order" : "NOT one by one", f.started.queued,
      f.threads_before, f.started.threads_max, f.lock_heap, f.timer_heap, op_heap, f.object_heap,
      f.order.size(), fifo ? "FIFO" : "NOT FIFO", f.handoff.p50_ns / 1e6, f.handoff.p99_ns / 1e6,
      blocking.p50_ns / 1e6, f.left.keys, f.left.queue_entries, f.left_seconds);
  std::cout << "  goals (#33), " << n << " waiters:\n";
  goals.verdict("threads added by the waits == 0", static_cast<double>(added),
                std::to_string(added), added == 0);
  goals.verdict("library heap per waiting operation <= 1 KiB", op_heap,
                fmt::format("{:.0f} bytes", op_heap), op_heap <= 1024);
  goals.verdict("hand-off p50 <= 1.1x the blocking hand-off p50", handoff_ratio,
                times(handoff_ratio), handoff_ratio > 0 && handoff_ratio <= 1.1);
  goals.verdict("fair mode: served in FIFO order", fifo ? 1 : 0, fifo ? "yes" : "no", fifo);

  Json j = Json::object();
  j.set("waiters", n).set("served", f.order.size()).set("started_one_by_one", f.started.one_by_one);
  j.set("start_seconds", f.started.start_seconds).set("queued", f.started.queued);
  j.set("threads_before", f.threads_before).set("threads_max_while_waiting", f.started.threads_max);
  j.set("heap_bytes_per_lock_waiter", f.lock_heap).set("heap_bytes_per_timer_waiter", f.timer_heap);
  j.set("heap_bytes_per_waiting_operation", op_heap)
      .set("heap_bytes_per_lock_object", f.object_heap);
  j.set("handoff_p50_ms", f.handoff.p50_ns / 1e6).set("handoff_p99_ms", f.handoff.p99_ns / 1e6);
  j.set("handoffs", f.handoff.count).set("blocking_handoff_p50_ms", blocking.p50_ns / 1e6);
  j.set("handoff_p50_ratio", handoff_ratio).set("fifo", fifo);
  j.set("left_after_cancelling_the_rest", left_json(f.left, f.left_seconds));
  out.set("waiters", std::move(j));
}

namespace {

// ---- Cancellation ----------------------------------------------------------------------------

// The delays before a cancellation, by the stage they aim at (aim: the stage an operation is in
// when its timer fires is not observed): at once (the timer's handler runs on the io thread's
// next turn: before the send or in flight), within a round trip (in flight, or at the grant),
// while refused and waiting, and while queued.
constexpr std::array<std::pair<int, int>, 4> kDelayUs{
    {{0, 0}, {1, 200}, {200, 2'000}, {2'000, 20'000}}};
constexpr int kCancelKeys = 8;
constexpr int kCancelWorkers = 64;

struct Cancels {
  std::size_t target{0};
  std::size_t cancelled{0};
  std::size_t granted_first{0};  // acquires whose grant came before their cancellation
  std::array<std::size_t, kDelayUs.size()> by_delay{};
  std::int64_t deadline_ns{0};
  std::mt19937_64 random{33};  // the delays, not tokens: reproducible runs
  std::exception_ptr error;
};

std::chrono::microseconds draw(std::size_t bucket, std::mt19937_64& random) {
  const auto [lo, hi] = kDelayUs[bucket];
  return std::chrono::microseconds(std::uniform_int_distribution<int>(lo, hi)(random));
}

// One worker: acquires a random key with a fresh Lock, cancelled after a random delay (the
// operator || with a timer); an acquire granted first holds 0-2 ms (the contention the others
// wait on), then releases.
asio::awaitable<void> canceller(redlock::Client& client, const std::vector<std::string>& keys,
                                Cancels& c) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (c.cancelled < c.target && now_ns() < c.deadline_ns) {
    redlock::Lock lock(client, keys[c.random() % keys.size()]);
    const std::size_t bucket = c.random() % kDelayUs.size();
    timer.expires_after(draw(bucket, c.random));
    auto won = co_await(redlock::async_acquire(lock, asio::use_awaitable) ||
                        timer.async_wait(asio::use_awaitable));
    if (won.index() == 1) {
      ++c.cancelled;
      ++c.by_delay[bucket];
      continue;
    }
    ++c.granted_first;
    redlock::Hold hold = std::get<0>(std::move(won));
    timer.expires_after(draw(2, c.random));
    co_await timer.async_wait(asio::use_awaitable);
    co_await redlock::async_release(hold, asio::use_awaitable);
  }
}

}  // namespace

void cancellation_part(const Config& config, Json& out, Goals& goals, Report& /*report*/) {
  std::cout << "\n  cancellation: " << kCancelWorkers << " coroutines on " << kCancelKeys
            << " keys, each acquire cancelled after a random delay (operator || with a timer) "
               "until "
            << config.async_cancels << " were cancelled\n";
  std::cout.flush();
  redlock::test::RedisServer server;
  const redlock::Endpoint endpoint = endpoint_of(server, config.timeout);
  redlock::Client client(endpoint);
  RawContext admin = raw_connect(endpoint);
  std::vector<std::string> keys;
  for (int i = 0; i < kCancelKeys; ++i) {
    keys.push_back(redlock::test::key("s13:cancel" + std::to_string(i)));
  }
  Cancels c;
  c.target = static_cast<std::size_t>(config.async_cancels);
  const std::int64_t t0 = now_ns();
  c.deadline_ns = t0 + 90'000'000'000;  // a bound on the section's time, whatever happens
  {
    asio::io_context io(1);
    for (int i = 0; i < kCancelWorkers; ++i) {
      asio::co_spawn(io, canceller(client, keys, c), [&c](std::exception_ptr e) {
        if (e && !c.error) c.error = e;
      });
    }
    io.run();
  }
  const double run_s = static_cast<double>(now_ns() - t0) / 1e9;
  if (c.error) std::rethrow_exception(c.error);
  const auto [left, left_s] =
      settle(admin.get(), config.timeout + milliseconds(500), milliseconds(10'000));

  std::cout << fmt::format(
      "    {} cancelled in {:.2f} s ({} granted before their cancellation, released); by delay "
      "0 / <= 0.2 / 0.2-2 / 2-20 ms: {} / {} / {} / {}\n"
      "    left on the server: {} keys, {} queue entries ({:.2f} s after the last operation)\n",
      c.cancelled, run_s, c.granted_first, c.by_delay[0], c.by_delay[1], c.by_delay[2],
      c.by_delay[3], left.keys, left.queue_entries, left_s);
  std::cout << "  goals (#33), cancellation:\n";
  const bool all = c.cancelled >= c.target;
  goals.verdict(fmt::format("{} acquires cancelled", c.target), static_cast<double>(c.cancelled),
                std::to_string(c.cancelled), all);
  goals.verdict("keys left == 0", static_cast<double>(left.keys), std::to_string(left.keys),
                left.keys == 0);
  goals.verdict("queue entries left == 0", static_cast<double>(left.queue_entries),
                std::to_string(left.queue_entries), left.queue_entries == 0);
  Json by_delay = Json::array();
  for (const std::size_t k : c.by_delay) by_delay.push(k);
  Json j = Json::object();
  j.set("cancelled", c.cancelled).set("granted_first", c.granted_first).set("seconds", run_s);
  j.set("workers", kCancelWorkers).set("keys", kCancelKeys);
  j.set("cancelled_by_delay_0_0.2_2_20_ms", std::move(by_delay));
  j.set("left", left_json(left, left_s));
  out.set("cancellation", std::move(j));
}

}  // namespace bench::async
