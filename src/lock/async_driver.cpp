// src/lock/async_driver.cpp: the library's async thread (see async_driver.hpp).
#include "lock/async_driver.hpp"

#include <pthread.h>

#include <functional>

#include "util/sha1.hpp"

namespace redlock {
namespace detail {

void AsyncTask::wake_up() noexcept {
  if (auto self = weak_from_this().lock()) AsyncDriver::instance().schedule(std::move(self));
}

AsyncDriver& AsyncDriver::instance() {
  static AsyncDriver* const driver = new AsyncDriver();  // never destroyed (see the header)
  return *driver;
}

void AsyncDriver::adopt(std::shared_ptr<AsyncTask> task) {
  std::lock_guard<std::mutex> guard(mutex_);
  const AsyncTask* const key = task.get();
  live_.emplace(key, std::move(task));
}

std::shared_ptr<AsyncTask> AsyncDriver::forget(AsyncTask* task) noexcept {
  std::shared_ptr<AsyncTask> timed;  // declared first: dropped after the lock
  std::lock_guard<std::mutex> guard(mutex_);
  timed = drop_timer(*task);
  const auto it = live_.find(task);
  if (it == live_.end()) return nullptr;
  std::shared_ptr<AsyncTask> kept = std::move(it->second);
  live_.erase(it);
  return kept;
}

std::shared_ptr<AsyncTask> AsyncDriver::drop_timer(AsyncTask& task) noexcept {
  if (!task.timed_) return nullptr;
  task.timed_ = false;
  std::shared_ptr<AsyncTask> ref = std::move(task.timer_->second);
  timers_.erase(task.timer_);
  return ref;
}

// The thread ends once nothing is ready and no timer is set for kLinger (a waiting task that
// has no timer is woken by its watch, which starts it again): so no thread of the library runs
// when no operation needs one, and a thread's OpenSSL state ends with it. mutex_ held.
void AsyncDriver::start() {
  if (running_) return;
  std::thread thread([this] { loop(); });
  pthread_setname_np(thread.native_handle(), "redlock-async");
  thread.detach();
  running_ = true;
}

std::size_t AsyncDriver::threads() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return running_ ? 1 : 0;
}

std::size_t AsyncDriver::timers() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return timers_.size();
}

std::size_t AsyncDriver::tasks() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return live_.size();
}

void AsyncDriver::schedule(std::shared_ptr<AsyncTask> task) noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (task->queued_) return;
    try {
      start();
      ready_.push_back(std::move(task));
    } catch (...) {
      return;  // no memory or no thread: its timer (if any) runs it, else it waits for one
    }
    ready_.back()->queued_ = true;
  }
  cv_.notify_one();
}

void AsyncDriver::wake_at(const std::shared_ptr<AsyncTask>& task, SteadyClock::time_point at) {
  std::lock_guard<std::mutex> guard(mutex_);
  // The caller's reference outlives the lock, so the old timer's is not the last one.
  drop_timer(*task);
  if (at == SteadyClock::time_point::max() || live_.count(task.get()) == 0) return;
  start();
  const bool earliest = timers_.empty() || at < timers_.begin()->first;
  task->timer_ = timers_.emplace(at, task);
  task->timed_ = true;
  if (earliest) cv_.notify_one();
}

// The next task to run: a ready one, else the first timer that falls due; null when the thread
// should end (idle for kLinger). A due timer's reference to a task already queued is dropped
// after the lock: a task's end may reach other locks (its watch's subscriber), which call
// schedule() under theirs.
std::shared_ptr<AsyncTask> AsyncDriver::next_task() {
  constexpr auto kLinger = std::chrono::milliseconds(200);
  std::vector<std::shared_ptr<AsyncTask>> stale;  // destroyed after `lock` is released
  bool drained = false;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    const auto now = SteadyClock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      std::shared_ptr<AsyncTask> due = drop_timer(*timers_.begin()->second);
      if (due->queued_) {
        stale.push_back(std::move(due));  // it runs anyway
        continue;
      }
      due->queued_ = true;
      ready_.push_back(std::move(due));
    }
    if (!ready_.empty()) {
      std::shared_ptr<AsyncTask> task = std::move(ready_.front());
      ready_.pop_front();
      task->queued_ = false;
      return task;
    }
    if (!stale.empty()) {
      lock.unlock();
      stale.clear();
      lock.lock();
      continue;
    }
    if (!drained) {  // about to sleep: its libcrypto state goes first (util/sha1.hpp)
      lock.unlock();
      release_thread_crypto_state();
      drained = true;
      lock.lock();
      continue;
    }
    if (timers_.empty()) {
      if (cv_.wait_for(lock, kLinger) == std::cv_status::timeout && ready_.empty() &&
          timers_.empty()) {
        running_ = false;  // a schedule() or wake_at() from now on starts a new thread
        return nullptr;
      }
    } else {
      cv_.wait_until(lock, timers_.begin()->first);
    }
  }
}

void AsyncDriver::loop() {
  while (const std::shared_ptr<AsyncTask> task = next_task()) task->run();
}

}  // namespace detail
}  // namespace redlock
