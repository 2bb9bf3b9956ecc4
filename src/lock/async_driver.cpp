// src/lock/async_driver.cpp: the library's async thread (see async_driver.hpp).
#include "lock/async_driver.hpp"

#include <pthread.h>

#include <functional>

namespace redlock {
namespace detail {

void AsyncTask::wake_up() noexcept {
  if (auto self = weak_from_this().lock()) AsyncDriver::instance().schedule(std::move(self));
}

AsyncDriver& AsyncDriver::instance() {
  static AsyncDriver driver;
  return driver;
}

AsyncDriver::~AsyncDriver() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AsyncDriver::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { loop(); });
  pthread_setname_np(thread_.native_handle(), "redlock-async");
}

std::size_t AsyncDriver::threads() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return thread_.joinable() ? 1 : 0;
}

void AsyncDriver::schedule(std::shared_ptr<AsyncTask> task) noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (task->queued_ || stop_) return;
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
  const std::uint64_t gen = ++task->timer_gen_;  // an earlier timer of the task is stale now
  if (at == SteadyClock::time_point::max() || stop_) return;
  start();
  const bool earliest = timers_.empty() || at < timers_.top().at;
  timers_.push(Timer{at, gen, task});
  if (earliest) cv_.notify_one();
}

// The next task to run: a ready one, else the first timer that falls due; null when stopping.
std::shared_ptr<AsyncTask> AsyncDriver::next_task() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (stop_) return nullptr;
    const auto now = SteadyClock::now();
    while (!timers_.empty() && timers_.top().at <= now) {
      Timer due = timers_.top();
      timers_.pop();
      if (due.gen != due.task->timer_gen_ || due.task->queued_) continue;
      due.task->queued_ = true;
      ready_.push_back(std::move(due.task));
    }
    if (!ready_.empty()) {
      std::shared_ptr<AsyncTask> task = std::move(ready_.front());
      ready_.pop_front();
      task->queued_ = false;
      return task;
    }
    if (timers_.empty()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, timers_.top().at);
    }
  }
}

void AsyncDriver::loop() {
  while (const std::shared_ptr<AsyncTask> task = next_task()) task->run();
}

}  // namespace detail
}  // namespace redlock
