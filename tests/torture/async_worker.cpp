// tests/torture/async_worker.cpp: a worker's --async mode (worker.hpp). T coroutines on one
// io_context thread instead of T threads, each with its own lock object, acquiring and releasing
// through <redlock/asio.hpp>: async_try_acquire_for with the same bound, async_release. The hold
// records, the store and the sleeps are the threads' (worker_parts.hpp), so the checker judges
// both modes by the same rules.
//
// The checker store is reached with blocking hiredis, as in the threads' mode; its calls run on
// a thread pool of T threads, so a slow store never holds up another coroutine's acquire or
// release on the io_context's thread. The sleeps of a hold are timers.
#include <algorithm>    // std::max, std::min
#include <chrono>       // std::chrono
#include <cstdio>       // std::fprintf
#include <exception>    // std::exception, std::exception_ptr
#include <memory>       // std::unique_ptr
#include <optional>     // std::optional
#include <random>       // std::uniform_int_distribution
#include <type_traits>  // std::invoke_result_t
#include <vector>       // std::vector

// First: with clang and libstdc++ it turns on asio 1.22's coroutines (see the header).
#include <redlock/asio.hpp>  // async_try_acquire_for, async_release

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/thread_pool.hpp>
#include <asio/use_awaitable.hpp>

#include "common.hpp"        // mono_ns
#include "worker_parts.hpp"  // Store, Counters, ModeLock, HoldTrack, plan_sleep

namespace redlock::torture {

namespace {

using asio::awaitable;
using asio::use_awaitable;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

awaitable<void> sleep_for(nanoseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(use_awaitable);
}

// One worker coroutine and what it owns.
class WorkerCoroutine {
 public:
  WorkerCoroutine(const WorkerConfig& config, int index, const std::vector<Client>& clients,
                  PgDatabase* pg, ZooKeeperSession* zookeeper, HoldLogWriter& log,
                  Counters& counters, asio::thread_pool& pool)
      : seat_(config, index, clients, pg, zookeeper), log_(log), counters_(counters), pool_(pool) {}

  awaitable<void> run() {
    LockBase& lock = seat_.lock->get();
    while (mono_ns() < seat_.config.until_ns) {
      counters_.attempts.fetch_add(1);
      std::optional<redlock::Hold> held;
      std::exception_ptr failed;
      try {
        held = co_await async_try_acquire_for(lock, acquire_bound(seat_.config), use_awaitable);
      } catch (const Error&) {  // use_awaitable rethrows what the blocking call would throw
        failed = std::current_exception();
      }
      if (held) {
        counters_.acquired.fetch_add(1);
        co_await hold(std::move(*held));
      } else if (!failed) {
        counters_.contended.fetch_add(1);  // the bound passed while others held it
      } else {
        counters_.acquire_failed(failed);
        // Every node failed: a short pause, as the threads make.
        co_await sleep_for(milliseconds(std::uniform_int_distribution<int>(5, 25)(seat_.rng)));
      }
    }
  }

 private:
  awaitable<void> hold(redlock::Hold held) {
    HoldTrack track(
        log_, seat_.config.index, seat_.index, ++seat_.seq, [&held] { return held.validity(); },
        held.fence());

    const std::int64_t t_read = mono_ns();
    const std::uint64_t fence = track.fence();
    const std::optional<Store::Values> read =
        co_await off_loop([&] { return seat_.store.read(fence); });
    if (!read) {
      track.read_failed(t_read);
    } else {
      HoldSleep sleep = plan_sleep(seat_.rng, seat_.config, track.validity_ms());
      while (const auto step = sleep.next(track)) co_await sleep_for(*step);  // timers
      const std::int64_t value = read->counter + 1;
      const WriteResult result =
          co_await off_loop([&] { return seat_.store.write(fence, value, read->shadow + 1); });
      track.written(result, t_read, value);
    }

    track.observe();
    const std::int64_t t_rel = mono_ns();
    EndKind kind = EndKind::error;
    try {
      kind = co_await async_release(held, use_awaitable) ? EndKind::released : EndKind::lost;
    } catch (const std::exception& e) {
      counters_.sample("release", e);
    }
    track.ended(kind, t_rel);
  }

  // Runs a blocking call of the store on the pool; the coroutine resumes on its io_context.
  template <class Call>
  awaitable<std::invoke_result_t<Call&>> off_loop(Call call) {
    co_return co_await asio::co_spawn(
        pool_, [&call]() -> awaitable<std::invoke_result_t<Call&>> { co_return call(); },
        use_awaitable);
  }

  Seat seat_;  // its number, store connection, randomness and lock
  HoldLogWriter& log_;
  Counters& counters_;
  asio::thread_pool& pool_;
};

}  // namespace

void run_async_workers(const WorkerConfig& config, const std::vector<Client>& clients,
                       PgDatabase* pg, ZooKeeperSession* zookeeper, HoldLogWriter& log,
                       Counters& counters) {
  asio::io_context io(1);
  asio::thread_pool pool(static_cast<std::size_t>(config.threads));  // the store's calls
  std::vector<std::unique_ptr<WorkerCoroutine>> coroutines;
  const auto fatal = [&](int t, const char* what) {
    std::fprintf(stderr, "redlock-torture worker %d coroutine %d: %s\n", config.index, t, what);
    counters.fatal.fetch_add(1);
  };
  for (int t = 0; t < config.threads; ++t) {
    try {
      coroutines.push_back(std::make_unique<WorkerCoroutine>(config, t, clients, pg, zookeeper, log,
                                                             counters, pool));
    } catch (const std::exception& e) {
      fatal(t, e.what());
      continue;
    }
    asio::co_spawn(io, coroutines.back()->run(), [&fatal, t](std::exception_ptr error) {
      try {
        if (error) std::rethrow_exception(error);
      } catch (const std::exception& e) {
        fatal(t, e.what());
      }
    });
  }
  io.run();
  pool.join();
}

}  // namespace redlock::torture
