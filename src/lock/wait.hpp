// src/lock/wait.hpp: how one acquire call makes its attempts and waits between them, as one
// strategy interface: for a lock, polling (a timer), wake-on-release (a subscription to the
// lock's releases) and fair (lock/fair_wait.hpp: the server's queue and hand-overs); for a
// Semaphore, its permits (lock/semaphore.cpp); plus the unavailability rule every kind shares.
// The loop over a strategy is lock/acquire_loop.hpp.
//
// A strategy is one call's object on the caller's stack (no allocation until a wait begins); it
// is not thread-safe, except that cancel_waits() may wake its watch from any thread.
#ifndef REDLOCK_SRC_LOCK_WAIT_HPP
#define REDLOCK_SRC_LOCK_WAIT_HPP

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "core/backend.hpp"
#include "lock/ownership.hpp"

namespace redlock {
namespace detail {

// One attempt's outcome: the backend's result, the token it was made with and when it was sent
// (a lease is counted from then).
struct Try {
  AcquireResult result;
  std::string token;
  SteadyClock::time_point sent{};
};

class WaitStrategy {
 public:
  WaitStrategy() = default;
  virtual ~WaitStrategy() = default;
  WaitStrategy(const WaitStrategy&) = delete;
  WaitStrategy& operator=(const WaitStrategy&) = delete;

  // One acquire attempt on the backend. Throws what the backend throws.
  virtual Try attempt(Attempt how) = 0;
  // Fair mode: a hand-over that arrived and can still be trusted, as a held Try. False otherwise.
  virtual bool hand_over(Try& out);
  // Fair mode: gives up the place in the server's queue, if an attempt took one (passing on a
  // hand-over that came meanwhile). Idempotent; never throws.
  virtual void leave() noexcept {}
  // The call ends without a hold: leave(), and a release wake-up the watch consumed goes to the
  // process's next waiter (ReleaseWatch::give_up). Never throws.
  void abandon() noexcept {
    leave();
    if (watch_) watch_->give_up();
  }
  // True if watching costs no round trip now (this process is subscribed already): the wait
  // then watches before its first attempt.
  virtual bool watch_is_free() const noexcept { return false; }

  // True if a release will be announced to this wait (its watch is subscribed and confirmed on
  // every node): it then retries only when woken or when the holder's lease would end, not every
  // retry_delay.
  virtual bool hears_releases() const noexcept { return false; }
  // True if only a place in a queue is ever woken (fair mode: a release hands over to the
  // queue's head and announces nothing else). A refused attempt that took no place (a Redlock
  // whose orderer was silent or skipped in back-off) then hears nothing, and the wait polls.
  virtual bool wakes_queued_only() const noexcept { return false; }
  // True if the wait's attempts tell the server that it waits (fair mode: they join the
  // queue; a ReadWriteLock writer's marker: LeaseBackend::attempt_marks_waiter), so it never
  // skips one to wait behind this process's other waiters.
  virtual bool queues() const noexcept { return false; }
  // True if its attempts mark this call as waiting without a place in a queue (a ReadWriteLock
  // writer's marker): a call that will wait then marks from its first attempt, not only once
  // its watch is confirmed (which may take connect + command timeout after a fault).
  virtual bool marks_waiter() const noexcept { return false; }

  // Starts watching for releases, registered with `ownership` so that cancel_waits() wakes it;
  // subscription confirmations are awaited at most until `deadline`. Attempts made after it
  // cannot miss a release.
  void start_watch(Ownership& ownership, SteadyClock::time_point deadline);
  bool watching() const noexcept { return watch_ != nullptr; }
  // True if this process's earlier waiters for the lock are woken first (ReleaseWatch).
  bool behind_others() const noexcept { return watch_ && watch_->behind_others(); }
  // Sleeps until a release is announced, cancel_waits(), a notice, or `until`. start_watch()
  // first. Returns true if woken before `until` (a notice alone does not count: take_notice).
  bool wait_until(SteadyClock::time_point until) { return watch_->wait_until(until); }
  // The async driver's side of wait_until (ReleaseWatch::set_waker, due, poll). start_watch()
  // first.
  bool set_waker(Waker* waker) noexcept { return watch_->set_waker(waker); }
  SteadyClock::time_point due(SteadyClock::time_point until) noexcept { return watch_->due(until); }
  bool poll(SteadyClock::time_point until) { return watch_->poll(until); }
  // Fair mode: a notice that this waiter moved up in the server's queue (ReleaseWatch).
  bool take_notice(unsigned& position, std::chrono::milliseconds& pttl) noexcept {
    return watch_ && watch_->take_notice(position, pttl);
  }

 protected:
  virtual std::unique_ptr<ReleaseWatch> make_watch(SteadyClock::time_point deadline) = 0;

  std::unique_ptr<ReleaseWatch> watch_;

 private:
  std::optional<Ownership::Watching> registered_;  // destroyed before watch_
};

// Retries at jittered retry_delay; nothing is subscribed.
class PollingWait : public WaitStrategy {
 public:
  explicit PollingWait(LeaseBackend& backend) noexcept : backend_(backend) {}
  Try attempt(Attempt how) override;
  bool marks_waiter() const noexcept override { return backend_.attempt_marks_waiter(); }
  // A ReadWriteLock writer's wait that marked: the mark goes with it (unmark_waiter).
  void leave() noexcept override;

 protected:
  std::unique_ptr<ReleaseWatch> make_watch(SteadyClock::time_point deadline) override;

  LeaseBackend& backend_;

 private:
  bool marked_{false};  // a contended attempt was made by a backend whose attempts mark
};

// As polling, and a release announced by the holder wakes the wait at once; while subscribed
// it retries only when woken or when the holder's remaining ttl runs out (the lease may end by
// expiry, unannounced), not every retry_delay.
class WakeOnReleaseWait final : public PollingWait {
 public:
  using PollingWait::PollingWait;
  bool watch_is_free() const noexcept override { return backend_.watch_live(); }
  bool hears_releases() const noexcept override { return watching() && backend_.watch_live(); }
  bool queues() const noexcept override { return backend_.attempt_marks_waiter(); }

 protected:
  std::unique_ptr<ReleaseWatch> make_watch(SteadyClock::time_point deadline) override;
};

// The unavailability rule of one wait: try_lock() throws a transport failure at once; a wait
// logs one warning when attempts start failing that way, one info when the servers answer again,
// and at its deadline throws the failure if the last attempt was one. Server error replies are
// never unavailability: they always throw.
class Unavailability {
 public:
  // `max_unavailable`: LockOptions::max_unavailable, how long an outage may last in a wait.
  Unavailability(const std::string& key, Call call, SteadyClock::time_point deadline,
                 std::chrono::milliseconds max_unavailable)
      : key_(key),
        call_(call),
        forever_(deadline == SteadyClock::time_point::max()),
        max_(max_unavailable) {}

  // The attempt failed with `failure`: rethrows it, or records it and returns.
  void failed(const std::exception_ptr& failure);
  // The servers answered the attempt (granted or refused).
  void answered();
  // The deadline passed: returns false (contention), or throws the last failure.
  bool give_up() const;

 private:
  const std::string& key_;
  const Call call_;
  const bool forever_;
  const std::chrono::milliseconds max_;
  SteadyClock::time_point since_{};  // the first failure of the current outage
  std::exception_ptr last_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_WAIT_HPP
