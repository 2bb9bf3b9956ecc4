// src/lock/lock_core.hpp: LockCore, what a Lock or Redlock object is: a lease backend, the
// object's ownership (lock/ownership.hpp) and the acquire loop over a wait strategy
// (lock/acquire_loop.hpp over lock/wait.hpp), plus the watchdog hand-off and loss reporting.
#ifndef REDLOCK_SRC_LOCK_LOCK_CORE_HPP
#define REDLOCK_SRC_LOCK_LOCK_CORE_HPP

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <redlock/observer.hpp>
#include <redlock/options.hpp>

#include "core/backend.hpp"
#include "core/hold.hpp"
#include "lock/acquire_loop.hpp"
#include "lock/hold_owner.hpp"
#include "lock/ownership.hpp"
#include "lock/wait.hpp"

namespace redlock {
namespace detail {

class ClientImpl;
class LeaseEngine;

class LockCore : public std::enable_shared_from_this<LockCore>,
                 public HoldOwner,
                 private AcquireLoop::Taker {
 public:
  // Throws std::invalid_argument for bad options or duplicate nodes.
  LockCore(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string key, LockOptions options);
  // A lock over any lease store (another backend behind the seam). `options` must already be
  // validated by the backend's maker (ttl, retry_delay, ...). Never throws but std::bad_alloc.
  LockCore(std::shared_ptr<LeaseBackend> backend, LockOptions options);

  // `deadline` max(): no deadline. Returns held; throws as LockBase::lock/try_lock*.
  bool acquire(Call call, SteadyClock::time_point deadline);
  // A hold owned by a handle (LockBase::acquire/try_acquire_for): what was taken, a null hold if
  // not held. Throws as acquire(), and std::logic_error when the calling thread owns the thread
  // hold.
  Held acquire_handle(Call call, SteadyClock::time_point deadline);
  // A granted attempt made a hold, renewed with auto_renew; nobody owns it yet. Throws if
  // renewal could not start (the grant is then released).
  Held start_hold(const AcquireResult& result, std::string token,
                  SteadyClock::time_point start) override;
  bool release();
  bool extend(std::chrono::milliseconds ttl);
  // HoldOwner (lock/hold_owner.hpp): a Hold's release and extend.
  bool release_handle(const Held& held) override;
  bool extend_handle(const Held& held, std::chrono::milliseconds ttl) override;
  std::chrono::milliseconds ttl() const noexcept override { return options_.ttl; }
  std::string describe() const override { return backend_->key(); }
  Ownership& gate() noexcept override { return ownership_; }
  AcquireLoop::Waiter handle_waiter() noexcept override;
  std::unique_ptr<WaitStrategy> new_wait() override;
  SteadyClock::time_point courtesy_until() const noexcept override;
  bool crowded() const noexcept override { return crowded_.load(std::memory_order_relaxed); }
  void destroy() noexcept;
  // The calling thread's hold, handed out of this object (an election's term is no thread's):
  // the thread's exit no longer releases it, nor does destroy(); the caller ends it
  // (lock/hold_end.hpp). The gate stays closed: this object takes no other hold. Null if none.
  std::shared_ptr<HoldState> hand_out() noexcept { return ownership_.disown_caller().hold; }
  void cancel_waits() noexcept { ownership_.cancel(); }
  // The thread that owns the hold is exiting: release the hold (best effort), so that no thread
  // that gets the same std::thread::id later inherits it.
  void orphaned() noexcept;

  const Ownership& ownership() const noexcept { return ownership_; }
  const LockOptions& options() const noexcept { return options_; }
  const LeaseBackend& backend() const noexcept { return *backend_; }

 private:
  // An acquire call that has the gate: `taker` takes the grant; an observer is told of
  // `fence_of_hold()`.
  template <class FenceOfHold>
  bool entered_acquire(Call call, SteadyClock::time_point deadline, AcquireLoop::Taker& taker,
                       const FenceOfHold& fence_of_hold);
  bool gated_acquire(Call call, SteadyClock::time_point deadline, AcquireEvent* event,
                     AcquireLoop::Taker& taker);
  bool attempts(Call call, SteadyClock::time_point deadline, AcquireEvent* event,
                AcquireLoop::Taker& taker);
  AcquireLoop::Order order() const noexcept;
  // A granted attempt becomes the calling thread's hold (and is renewed with auto_renew).
  bool take(const AcquireResult& result, std::string token, SteadyClock::time_point start) override;
  // Ends the last level of a hold of either kind and opens the gate; returns as release().
  bool release_last(const std::shared_ptr<HoldState>& hold);
  void hold_back_after(SteadyClock::time_point release_start);
  void report_lost(const std::shared_ptr<HoldState>& hold, LostReason reason);

  LockOptions options_;
  std::shared_ptr<LeaseBackend> backend_;  // shared with the watchdog while it renews a hold
  Ownership ownership_;
  // No acquire attempt before this (anti-barging), steady_clock ticks since its epoch.
  std::atomic<SteadyClock::rep> courtesy_until_{0};
  // This object's last release was announced to more than one waiting process: its next wait
  // starts crowded (AcquireLoop::elders_pause).
  std::atomic<bool> crowded_{false};
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_LOCK_CORE_HPP
