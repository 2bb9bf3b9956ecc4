// src/lock/async_driver.hpp: the library's async thread ("redlock-async") and the tasks it runs:
// the driver of asynchronous operations (redlock/detail/async.hpp). A task is a state machine
// stepped on that one thread: it runs when scheduled (a watch's waker, a local gate handed to
// it, a cancel) or when its timer is due, and between steps it costs no thread. A waiting acquire
// is an AcquireLoop stepped here (begin/resume), the same loop the blocking API runs on the
// caller's thread.
#ifndef REDLOCK_SRC_LOCK_ASYNC_DRIVER_HPP
#define REDLOCK_SRC_LOCK_ASYNC_DRIVER_HPP

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/backend.hpp"  // Waker, SteadyClock

namespace redlock {
namespace detail {

class AsyncTask;
// The driver's timers by due time; a task has at most one, erased when it is replaced or the
// task ends, so a finished operation is never kept alive by a timer that was due later.
using AsyncTimers = std::multimap<SteadyClock::time_point, std::shared_ptr<AsyncTask>>;

class AsyncTask : public std::enable_shared_from_this<AsyncTask>, public Waker {
 public:
  AsyncTask() = default;
  virtual ~AsyncTask() = default;
  AsyncTask(const AsyncTask&) = delete;
  AsyncTask& operator=(const AsyncTask&) = delete;

  // One step, on the driver's thread. It ends by finishing the task or arming its timer
  // (AsyncDriver::wake_at); a wake_up() meanwhile runs it again sooner. Never throws.
  virtual void run() noexcept = 0;
  // Schedules run() (Waker): any thread, under any watch's lock; a no-op once the task is gone.
  void wake_up() noexcept override;

 private:
  friend class AsyncDriver;
  // Guarded by the driver's mutex.
  bool queued_{false};           // in the ready queue
  bool timed_{false};            // timer_ is this task's entry in the driver's timers
  AsyncTimers::iterator timer_;  // valid while timed_
};

class AsyncDriver {
 public:
  // The process's driver; its thread starts with a task to run and ends when idle. Never
  // destroyed: at exit a thread may be in a round trip, and the tasks still waiting stay
  // reachable (not leaks).
  static AsyncDriver& instance();
  AsyncDriver() = default;
  AsyncDriver(const AsyncDriver&) = delete;
  AsyncDriver& operator=(const AsyncDriver&) = delete;

  // Keeps `task` alive until forget(), whoever else holds it: a waiting task is referred to
  // only by raw wakers. Throws std::bad_alloc.
  void adopt(std::shared_ptr<AsyncTask> task);
  // Ends adopt() and erases the task's timer; returns the reference, for the caller to drop
  // outside the driver's lock.
  std::shared_ptr<AsyncTask> forget(AsyncTask* task) noexcept;

  // Runs `task` soon (once, however often it is scheduled before it runs). Never throws.
  void schedule(std::shared_ptr<AsyncTask> task) noexcept;
  // Runs `task` at `at` unless it runs sooner; replaces (erases) its earlier timer. max(), or a
  // task that was forgotten (it ended): no timer. Throws std::bad_alloc.
  void wake_at(const std::shared_ptr<AsyncTask>& task, SteadyClock::time_point at);
  // Threads this driver runs: 1 while operations need it, else 0 (for tests and the bench).
  std::size_t threads() const noexcept;
  // Timers set: at most one per task that waits for one (for tests).
  std::size_t timers() const noexcept;
  // Tasks adopted and not yet ended: an operation cancelled at once is counted until its task
  // has given back what it may have won (for tests).
  std::size_t tasks() const noexcept;

 private:
  void start();  // mutex_ held
  // Erases the task's timer, if any; returns its reference, to drop after the lock. mutex_ held.
  std::shared_ptr<AsyncTask> drop_timer(AsyncTask& task) noexcept;
  void loop();
  std::shared_ptr<AsyncTask> next_task();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<AsyncTask>> ready_;
  AsyncTimers timers_;
  std::unordered_map<const AsyncTask*, std::shared_ptr<AsyncTask>> live_;  // adopted tasks
  bool running_{false};  // a thread runs loop() (detached; it ends when idle)
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_ASYNC_DRIVER_HPP
