// src/lock/async_driver.hpp: the library's async thread ("redlock-async") and the tasks it runs:
// the driver of asynchronous operations (redlock/detail/async.hpp). A task is a state machine
// stepped on that one thread: it runs when scheduled (a watch's waker, a local gate handed to
// it, a cancel) or when its timer is due, and between steps it costs no thread. A waiting acquire
// is an AcquireLoop stepped here (begin/resume), the same loop the blocking API runs on the
// caller's thread.
#ifndef REDLOCK_SRC_LOCK_ASYNC_DRIVER_HPP
#define REDLOCK_SRC_LOCK_ASYNC_DRIVER_HPP

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "core/backend.hpp"  // Waker, SteadyClock

namespace redlock {
namespace detail {

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
  bool queued_{false};          // guarded by the driver's mutex: in the ready queue
  std::uint64_t timer_gen_{0};  // guarded by the driver's mutex: the live timer's generation
};

class AsyncDriver {
 public:
  // The process's driver; its thread starts with the first task. Throws std::system_error if
  // the thread cannot start.
  static AsyncDriver& instance();
  AsyncDriver() = default;
  ~AsyncDriver();  // stops and joins the thread; tasks still waiting are dropped
  AsyncDriver(const AsyncDriver&) = delete;
  AsyncDriver& operator=(const AsyncDriver&) = delete;

  // Runs `task` soon (once, however often it is scheduled before it runs). Never throws.
  void schedule(std::shared_ptr<AsyncTask> task) noexcept;
  // Runs `task` at `at` unless it runs sooner; replaces its earlier timer. max(): no timer.
  // Throws std::bad_alloc.
  void wake_at(const std::shared_ptr<AsyncTask>& task, SteadyClock::time_point at);
  // Threads this driver runs (0 before the first task, then 1): for tests and the bench.
  std::size_t threads() const noexcept;

 private:
  struct Timer {
    SteadyClock::time_point at;
    std::uint64_t gen;
    std::shared_ptr<AsyncTask> task;
    bool operator>(const Timer& other) const noexcept { return at > other.at; }
  };
  void start();  // mutex_ held
  void loop();
  std::shared_ptr<AsyncTask> next_task();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<AsyncTask>> ready_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  bool stop_{false};
  std::thread thread_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_ASYNC_DRIVER_HPP
