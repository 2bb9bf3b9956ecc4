// src/hold.hpp: the state of one hold (one successful acquire until release or loss), shared by
// the lock, its LeaseTokens and the watchdog.
#ifndef REDLOCK_SRC_HOLD_HPP
#define REDLOCK_SRC_HOLD_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <redlock/options.hpp>

#include "quorum.hpp"

namespace redlock {
namespace detail {

class HoldState {
 public:
  HoldState(std::string token, std::uint64_t fence, SteadyClock::time_point acquired,
            SteadyClock::time_point valid_until)
      : token_(std::move(token)), fence_(fence), acquired_(acquired) {
    set_valid_until(valid_until);
  }

  const std::string& token() const noexcept { return token_; }
  std::uint64_t fence() const noexcept { return fence_; }
  SteadyClock::time_point acquired() const noexcept { return acquired_; }

  SteadyClock::time_point valid_until() const noexcept {
    return SteadyClock::time_point(
        SteadyClock::duration(valid_until_.load(std::memory_order_acquire)));
  }
  void set_valid_until(SteadyClock::time_point t) noexcept {
    valid_until_.store(t.time_since_epoch().count(), std::memory_order_release);
  }

  // Lost: marked lost, or past its validity while not released. Lock-free.
  bool lost(SteadyClock::time_point now) const noexcept {
    if (lost_.load(std::memory_order_acquire)) return true;
    return !released_.load(std::memory_order_acquire) && now >= valid_until();
  }
  bool marked_lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  bool released() const noexcept { return released_.load(std::memory_order_acquire); }
  LostReason reason() const noexcept {
    return static_cast<LostReason>(reason_.load(std::memory_order_acquire));
  }
  std::uint64_t renewals() const noexcept { return renewals_.load(std::memory_order_relaxed); }

  // Watchdog side: claims the right to renew. False if the hold is ending (release began or it
  // was lost): then no renewal may be sent.
  bool begin_renewal() {
    std::lock_guard<std::mutex> guard(mutex_);
    if (ending_) return false;
    renewing_ = true;
    return true;
  }
  // Watchdog side: the renewal's result is in. Applies it only if the hold is not ending.
  void end_renewal(bool confirmed, SteadyClock::time_point valid_until) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      renewing_ = false;
      if (confirmed && !ending_) {
        set_valid_until(valid_until);
        renewals_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    cv_.notify_all();
  }

  // Stops renewal for good and waits until no renewal is in flight, so that nothing can extend
  // the key after this returns. Returns false if it had already ended (released or lost).
  bool begin_end() {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool was_live = !ending_;
    ending_ = true;
    cv_.wait(lock, [this] { return !renewing_; });
    return was_live;
  }
  bool ending() const {
    std::lock_guard<std::mutex> guard(mutex_);
    return ending_;
  }

  // Marks the hold lost (first call wins) and runs the on_lost callbacks. Returns true if this
  // call marked it.
  // With `deferred`, the callbacks are moved there for the caller to run elsewhere.
  bool mark_lost(LostReason reason, std::vector<std::function<void()>>* deferred = nullptr) {
    bool first = false;
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      ending_ = true;
      if (!lost_.load(std::memory_order_relaxed) && !released_.load(std::memory_order_relaxed)) {
        reason_.store(static_cast<int>(reason), std::memory_order_release);
        lost_.store(true, std::memory_order_release);
        first = true;
        callbacks.swap(callbacks_);
      }
    }
    cv_.notify_all();
    if (deferred != nullptr) {
      *deferred = std::move(callbacks);
      return first;
    }
    for (auto& callback : callbacks) {
      try {
        callback();
      } catch (...) {  // documented: exceptions from these callbacks are swallowed
      }
    }
    return first;
  }

  // Registers a callback for mark_lost(); runs it now if already lost. Dropped on release.
  void add_lost_callback(std::function<void()> callback) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (!lost_.load(std::memory_order_relaxed)) {
        if (!released_.load(std::memory_order_relaxed)) callbacks_.push_back(std::move(callback));
        return;
      }
    }
    try {
      callback();
    } catch (...) {
    }
  }
  void mark_released() {
    std::vector<std::function<void()>> dropped;  // destroyed outside the lock
    {
      std::lock_guard<std::mutex> guard(mutex_);
      ending_ = true;
      released_.store(true, std::memory_order_release);
      dropped.swap(callbacks_);
    }
    cv_.notify_all();
  }

  // Blocks until lost or released, at most `timeout`. Returns lost().
  bool wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto deadline = SteadyClock::now() + std::min<std::chrono::milliseconds>(
                                                   timeout, std::chrono::hours(24 * 365));
    for (;;) {
      if (lost_.load() || released_.load()) break;
      const auto now = SteadyClock::now();
      if (now >= deadline || now >= valid_until()) break;
      cv_.wait_until(lock, std::min(deadline, valid_until()));
    }
    return lost(SteadyClock::now());
  }

 private:
  const std::string token_;
  const std::uint64_t fence_;
  const SteadyClock::time_point acquired_;
  std::atomic<SteadyClock::rep> valid_until_{0};
  std::atomic<bool> lost_{false};
  std::atomic<bool> released_{false};
  std::atomic<int> reason_{static_cast<int>(LostReason::expired)};
  std::atomic<std::uint64_t> renewals_{0};

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool renewing_{false};                          // guarded by mutex_
  bool ending_{false};                            // guarded by mutex_
  std::vector<std::function<void()>> callbacks_;  // guarded by mutex_
};

// What validity() reports for `hold` (may be null): the time left on the local steady clock,
// milliseconds rounded down; zero if none or lost.
inline std::chrono::milliseconds validity_of(const HoldState* hold) noexcept {
  if (hold == nullptr) return std::chrono::milliseconds::zero();
  const auto now = SteadyClock::now();
  if (hold->lost(now)) return std::chrono::milliseconds::zero();
  return std::chrono::duration_cast<std::chrono::milliseconds>(hold->valid_until() - now);
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_HOLD_HPP
