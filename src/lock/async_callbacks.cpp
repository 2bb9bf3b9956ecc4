// src/lock/async_callbacks.cpp: the library's callback thread, which runs plain callbacks'
// completion handlers (detail::post_callback) so that one that blocks, on a redlock operation
// or anything else, never holds up the async thread (issue 43, defect 4).
#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <redlock/detail/async.hpp>

namespace redlock {
namespace detail {
namespace {

// A FIFO of callbacks and at most one thread that runs them. Never destroyed (as AsyncDriver):
// a callback may be posted while the process exits, and the detached thread may outlive every
// static destructor.
class CallbackThread {
 public:
  static CallbackThread& instance() {
    static CallbackThread* const runner = new CallbackThread();
    return *runner;
  }

  // False when no thread runs the callback (none could be started): the caller runs it.
  bool post(AsyncCallback* callback) noexcept {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      try {
        queue_.push_back(callback);
      } catch (...) {
        return false;
      }
      if (!running_ && !start()) {
        queue_.pop_back();
        return false;
      }
    }
    cv_.notify_one();
    return true;
  }

 private:
  // mutex_ held.
  bool start() noexcept {
    try {
      std::thread thread([this] { loop(); });
      pthread_setname_np(thread.native_handle(), "redlock-cb");  // 15 bytes at most
      thread.detach();
    } catch (...) {
      return false;
    }
    running_ = true;
    return true;
  }

  // Runs the callbacks in the order they came; ends when none came for kLinger, so no thread
  // of the library exists while no plain callback is due.
  void loop() noexcept {
    constexpr auto kLinger = std::chrono::milliseconds(200);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!cv_.wait_for(lock, kLinger, [this] { return !queue_.empty(); })) {
        running_ = false;
        return;
      }
      AsyncCallback* const callback = queue_.front();
      queue_.pop_front();
      lock.unlock();
      callback->run();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<AsyncCallback*> queue_;
  bool running_{false};
};

}  // namespace

void post_callback(AsyncCallback* callback) noexcept {
  if (!CallbackThread::instance().post(callback)) callback->run();
}

}  // namespace detail
}  // namespace redlock
