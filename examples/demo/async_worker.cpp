// examples/demo/async_worker.cpp: a worker's --async mode. The same holds as the threads' loop
// (worker.cpp), but acquired and released through <redlock/asio.hpp> on an io_context.
//
// config.threads tasks share the process's lock object, as the threads do. Each task is a chain
// of callbacks (C++17, no coroutines):
//
//   async_try_acquire_for(lock, 250 ms)   on the io_context's thread (a wait blocks no thread)
//   -> the critical section               on a thread pool: it blocks (the counter is read and
//                                          written with the blocking Client, and it sleeps 1 ms),
//                                          so the Hold moves to a pool thread
//   -> async_release(hold)                started from that pool thread, completed on the
//                                          io_context, which reports the hold and starts again
//
// One thread runs the io_context for every task of the process.
#include <chrono>     // std::chrono
#include <exception>  // std::exception_ptr, std::rethrow_exception
#include <memory>     // std::unique_ptr
#include <optional>   // std::optional
#include <string>     // std::string
#include <thread>     // std::thread
#include <vector>     // std::vector

#include <asio/bind_executor.hpp>  // asio::bind_executor
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/thread_pool.hpp>

#include <redlock/asio.hpp>  // async_try_acquire_for, async_release

#include "worker_parts.hpp"  // Shared, increment(), hold_line(), send_line()

namespace demo {

namespace {

using namespace std::chrono_literals;

// The message of a failed operation's exception.
std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return one_line(e.what());
  } catch (...) {
    return "an exception of unknown type";
  }
}

// One task: acquire, critical section, release, again, until the worker is asked to stop.
class Task {
 public:
  Task(const Shared& s, int thread, asio::io_context& io, asio::thread_pool& pool)
      : s_(s), thread_(thread), io_(io), pool_(pool), retry_(io) {}

  // Starts the next hold; the chain ends (and stops counting as the io_context's work) once the
  // worker is asked to stop. Not before the previous hold's release has completed.
  void acquire() {
    if (stop_requested()) return;
    // Not async_acquire(): a bounded wait lets the task notice the stop request, as the threads'
    // try_lock_for(250ms) does.
    redlock::async_try_acquire_for(
        s_.lock, 250ms,
        asio::bind_executor(io_,
                            [this](std::exception_ptr error, std::optional<redlock::Hold> hold) {
                              acquired(error, std::move(hold));
                            }));
  }

 private:
  void acquired(const std::exception_ptr& error, std::optional<redlock::Hold> hold) {
    if (error) {  // no node answered at all: report it, pause, try again
      send_line("E lock: " + message_of(error));
      retry_.expires_after(100ms);
      retry_.async_wait([this](const asio::error_code&) { acquire(); });
      return;
    }
    if (!hold) {  // contention: the 250 ms passed while others held the lock
      acquire();
      return;
    }
    // The work guard keeps io_.run() going while the hold is on the pool, where the io_context
    // has nothing in flight.
    asio::post(pool_, [this, held = std::move(*hold), work = asio::make_work_guard(io_)]() mutable {
      critical_section(held);
    });
  }

  // On a pool thread.
  void critical_section(redlock::Hold& held) {
    Hold h;
    h.start_ns = monotonic_ns();
    h.fence = held.fence();
    const redlock::LeaseToken lease = held.lease();
    h.outcome = increment(s_, h.fence, lease);
    h.end_ns = monotonic_ns();
    h.valid_at_end = !lease.lost();  // checked after end_ns: valid then means valid at end_ns
    redlock::async_release(held,
                           asio::bind_executor(io_, [this, h](std::exception_ptr error, bool) {
                             // As unlock(), a failed release is a warning: the lease expires.
                             if (error) send_line("L release: " + message_of(error));
                             send_line(hold_line(s_, thread_, h));
                             acquire();
                           }));
  }

  const Shared& s_;
  const int thread_;
  asio::io_context& io_;
  asio::thread_pool& pool_;
  asio::steady_timer retry_;  // the pause after a failed acquire
};

}  // namespace

void run_async(const Shared& s) {
  asio::io_context io;
  asio::thread_pool pool(static_cast<std::size_t>(s.config.threads));  // critical sections
  auto until_stopped = asio::make_work_guard(io);  // io.run() returns only after the stop
  std::vector<std::unique_ptr<Task>> tasks;
  for (int t = 0; t < s.config.threads; ++t) {
    tasks.push_back(std::make_unique<Task>(s, t, io, pool));
    asio::post(io, [task = tasks.back().get()] { task->acquire(); });
  }
  std::thread runner([&io] { io.run(); });
  wait_for_stop();
  until_stopped.reset();  // each chain ends after its current hold is released and reported
  runner.join();
  pool.join();
}

}  // namespace demo
