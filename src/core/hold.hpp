// src/core/hold.hpp: the state of one hold (one successful acquire until release or loss), shared
// by the lock, its LeaseTokens and the watchdog.
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

#include "core/quorum.hpp"
#include "util/small_vector.hpp"

namespace redlock {
namespace detail {

// The states of a hold, and who moves it between them.
//
//   state      flags (ending_, lost_, released_)   valid_until
//   live       no, no, no                         moves: extends lower it at once to their floor
//                                                 and set it on a confirmed result
//   lapsed     no, no, no; now >= valid_until     lost() is true; nothing is marked yet
//   ending     yes, no, no                        frozen: no renewal may begin
//   lost       yes, yes, no   (terminal)          reason() says why
//   released   yes, no, yes   (terminal)
//
//   event             from             to        triggered by
//   begin_renewal     live, lapsed     same      watchdog thread (false, and no renewal, from
//                                                ending/lost/released); at most one in flight
//   end_renewal       any              same      watchdog thread, once per begin_renewal; applied
//                                                only if confirmed, not ending and in time (before
//                                                valid_until: a late reply revives nothing)
//   begin_extend /    live, lapsed     same      owner thread (Lock::extend); end_extend returns
//     end_extend                                 false once ending
//   begin_end         live, lapsed     ending    owner (release), watchdog (cap), orphan cleanup;
//                                                waits for a renewal in flight; false if already
//                                                ending (the first caller owns the end)
//   mark_lost         any but released lost      watchdog (renewal verdict, cap, expiry; its
//                                                deadline thread at valid_until: expire_by) or
//                                                owner (extend/release found it gone); first wins
//   mark_released     any              released  owner, after its release round trip (on a lost
//                                                hold both flags end up set; lost() stays true)
//
// The end hook runs once, on whichever of mark_lost / mark_released ends the hold first; lost
// callbacks run only on mark_lost and are dropped by mark_released. Lock order: the lock's own
// mutex is never held while calling into a HoldState that may block (begin_end).
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

  // An async grant whose handler has not run yet (the asio layer hands it over): the watchdog
  // renews it for one ttl from acquired() only, then gives it up (LostReason::undelivered), so
  // a completion stuck in a stopped io_context cannot keep the lock for ever. Lock-free.
  void await_delivery() noexcept { undelivered_.store(true, std::memory_order_release); }
  void delivered() noexcept { undelivered_.store(false, std::memory_order_release); }
  bool undelivered() const noexcept { return undelivered_.load(std::memory_order_acquire); }

  // Extends in flight (the watchdog's renewals and the owner's extend(ttl)) may reach the
  // server in any order, so the local validity is never more than the least any of them can
  // leave there. An extend sent at `sent` with `ttl` that lands leaves the key valid until at
  // least `floor` = sent + ttl - drift; that is also the validity its confirmation yields. While
  // extends overlap (one starts before another's result is in), each result is capped by the
  // floors of all the others: the server keeps whichever landed last, and we cannot tell which.

  // Watchdog side: claims the right to renew, with a renewal whose floor is `floor`. False if
  // the hold is ending (release began or it was lost): then no renewal may be sent.
  bool begin_renewal(SteadyClock::time_point floor) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (ending_) return false;
    renewing_ = true;
    renewal_id_ = begin_extend_locked(floor);
    return true;
  }
  // Watchdog side: the renewal's result is in. Applies it (capped as above) only if the hold is
  // not ending and its validity has not ended. Returns true if applied.
  bool end_renewal(bool confirmed) {
    bool ender_waits = false;
    bool applied = false;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      renewing_ = false;
      ender_waits = ending_;  // only begin_end() waits for a renewal, and it set ending_ first
      // A confirmation that comes back after the validity ended does not revive the hold: the
      // holder has already been told (or is about to be) that it is lost.
      const bool in_time = SteadyClock::now() < valid_until();
      applied = end_extend_locked(renewal_id_, confirmed && !ending_ && in_time);
      if (applied) renewals_.fetch_add(1, std::memory_order_relaxed);
    }
    if (ender_waits) cv_.notify_all();
    return applied;
  }
  // Owner side (extend(ttl)): an extend with `floor` is about to be sent. Lowers the validity to
  // `floor` at once if that is sooner (the server may apply it any moment). Returns its id.
  std::uint64_t begin_extend(SteadyClock::time_point floor) {
    std::lock_guard<std::mutex> guard(mutex_);
    return begin_extend_locked(floor);
  }
  // Owner side: the extend's result is in; `confirmed`: a quorum confirmed it in time. Returns
  // true if the hold is valid with it (capped as above), false if it is ending.
  bool end_extend(std::uint64_t id, bool confirmed) {
    std::lock_guard<std::mutex> guard(mutex_);
    return end_extend_locked(id, confirmed && !ending_);
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

  // Installs `hook`, run once when the hold ends (released or lost), on the thread that ends
  // it, with no lock held. Returns false, and installs nothing, if the hold has ended already.
  bool set_end_hook(std::function<void()> hook) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (lost_.load(std::memory_order_relaxed) || released_.load(std::memory_order_relaxed)) {
      return false;
    }
    end_hook_ = std::move(hook);
    return true;
  }

  // Marks the hold lost (first call wins) and runs the on_lost callbacks. Returns true if this
  // call marked it.
  // With `deferred`, the callbacks are moved there for the caller to run elsewhere.
  bool mark_lost(LostReason reason, std::vector<std::function<void()>>* deferred = nullptr) {
    return mark_lost_if(SteadyClock::time_point::max(), reason, deferred);
  }
  // The watchdog's deadline thread: as mark_lost(), but only if the validity ends at or before
  // `by` (checked under the mutex that a renewal's result is applied under, so a renewal that
  // lands first keeps the hold, and one that lands after cannot revive it). Returns true if this
  // call marked it.
  bool expire_by(SteadyClock::time_point by, LostReason reason,
                 std::vector<std::function<void()>>* deferred) {
    return mark_lost_if(by, reason, deferred);
  }

 private:
  // mark_lost() when the validity ends at or before `by` (max: always).
  bool mark_lost_if(SteadyClock::time_point by, LostReason reason,
                    std::vector<std::function<void()>>* deferred) {
    bool first = false;
    std::vector<std::function<void()>> callbacks;
    std::function<void()> end_hook;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (by != SteadyClock::time_point::max() && by < valid_until()) return false;
      ending_ = true;
      if (!lost_.load(std::memory_order_relaxed) && !released_.load(std::memory_order_relaxed)) {
        reason_.store(static_cast<int>(reason), std::memory_order_release);
        lost_.store(true, std::memory_order_release);
        first = true;
        callbacks.swap(callbacks_);
        end_hook.swap(end_hook_);
      }
    }
    cv_.notify_all();
    run_end_hook(end_hook);
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

 public:
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
    std::function<void()> end_hook;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      ending_ = true;
      released_.store(true, std::memory_order_release);
      dropped.swap(callbacks_);
      end_hook.swap(end_hook_);
    }
    cv_.notify_all();
    run_end_hook(end_hook);
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
  static void run_end_hook(const std::function<void()>& hook) noexcept {
    if (!hook) return;
    try {
      hook();
    } catch (...) {
    }
  }
  struct Extend {
    std::uint64_t id;
    SteadyClock::time_point floor;
  };
  std::uint64_t begin_extend_locked(SteadyClock::time_point floor) {
    if (in_flight_.empty()) overlap_floor_ = SteadyClock::time_point::max();
    in_flight_.push_back(Extend{++next_extend_id_, floor});
    overlap_floor_ = std::min(overlap_floor_, floor);
    if (floor < valid_until()) set_valid_until(floor);
    return next_extend_id_;
  }
  // Ends extend `id`; if `apply`, sets the validity to the least floor among the extends that
  // overlapped it (its own included). Returns `apply`.
  bool end_extend_locked(std::uint64_t id, bool apply) {
    // Order does not matter (only the least floor does): the last takes the place of `id`'s.
    for (std::size_t i = 0; i < in_flight_.size(); ++i) {
      if (in_flight_[i].id != id) continue;
      in_flight_[i] = in_flight_.back();
      in_flight_.resize(in_flight_.size() - 1);
      break;
    }
    if (apply) set_valid_until(overlap_floor_);
    return apply;
  }

  const std::string token_;
  const std::uint64_t fence_;
  const SteadyClock::time_point acquired_;
  std::atomic<SteadyClock::rep> valid_until_{0};
  std::atomic<bool> lost_{false};
  std::atomic<bool> released_{false};
  std::atomic<bool> undelivered_{false};  // await_delivery() until delivered()
  std::atomic<int> reason_{static_cast<int>(LostReason::expired)};
  std::atomic<std::uint64_t> renewals_{0};

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool renewing_{false};  // guarded by mutex_
  bool ending_{false};    // guarded by mutex_
  // Guarded by mutex_: extends sent, no result yet. Rarely more than the watchdog's renewal and
  // one extend(ttl): no allocation per hold.
  SmallVector<Extend, 2> in_flight_;
  SteadyClock::time_point overlap_floor_{};       // guarded by mutex_: least floor since idle
  std::uint64_t next_extend_id_{0};               // guarded by mutex_
  std::uint64_t renewal_id_{0};                   // guarded by mutex_: the watchdog's extend
  std::vector<std::function<void()>> callbacks_;  // guarded by mutex_
  std::function<void()> end_hook_;                // guarded by mutex_
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
