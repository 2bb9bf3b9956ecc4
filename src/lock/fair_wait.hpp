// src/lock/fair_wait.hpp: fair mode's wait strategy, the one place fair waiting lives: one token
// is the waiter's place in the server's queue for the whole wait (unless an attempt of it may
// still be undone: see below), the waiter's subscription is its liveness, a release hands the
// lock over without a round trip, the first two waiters watch the holder's lease and every
// waiter re-attempts once per stall guard (AcquireLoop::turn_wake), a waiter that cannot be
// woken polls and picks a hand-over up within its claim window, and a waiter that gives up
// leaves the queue.
#ifndef REDLOCK_SRC_LOCK_FAIR_WAIT_HPP
#define REDLOCK_SRC_LOCK_FAIR_WAIT_HPP

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lock/wait.hpp"

namespace redlock {
namespace detail {

// How a fair waiter learns of releases and hand-overs.
enum class FairWake { timer, releases };

// A release hands the lock over by setting the key to the waiter's token and publishing
// "grant:<seq>:<fence>:<SHA1 of the token>" on this process's own channel, where seq numbers the
// last attempt the server had seen; that attempt was sent before the key was set, so a lease
// counted from its send time ends no later than the server's. An attempt after which the backend
// ran fair_release with the token (a rollback: AcquireResult::left_queue) voids every hand-over
// naming it or an earlier attempt, and retires the token: that fair_release may reach the server
// after later attempts (it follows an abandoned request on its connection, or goes on a fresh
// one), and with the same token it would end the hold they made or the hand-over they queued
// for. Later attempts queue with a new token, which nothing in flight can end.
class FairWait final : public WaitStrategy {
 public:
  // Hands a token's release (a rollback, a leave) that left nodes owed to the background retry
  // (lock/hold_end.hpp retry_release). Must not throw.
  using RetryLeave = std::function<void(const std::string& token, std::vector<char> owed)>;

  // Makes the waiter's token; `retry_delay` is the pace it polls at when it cannot be woken;
  // `retry` (may be empty) gets the queue places whose leave may not have reached a node, so
  // that a failover's lost leave does not keep the queue's head for a whole ttl. Throws what
  // token generation throws.
  FairWait(LeaseBackend& backend, FairWake wake, std::chrono::milliseconds retry_delay,
           RetryLeave retry = {});
  ~FairWait() override;

  Try attempt(Attempt how) override;
  bool hand_over(Try& out) override;
  void leave() noexcept override;
  bool watch_is_free() const noexcept override;
  // Subscribed for hand-overs on every node: the wait sleeps until a hand-over, a notice, or
  // (a watcher) the holder's lease end, with no periodic attempt.
  bool hears_releases() const noexcept override;
  bool queues() const noexcept override { return true; }
  bool wakes_queued_only() const noexcept override { return true; }

 protected:
  std::unique_ptr<ReleaseWatch> make_watch(SteadyClock::time_point deadline) override;

 private:
  // Send times remembered (recent attempts). A queued waiter makes an attempt only when woken,
  // told it moved up, or at a lease end, and a hand-over names its latest join: 8 is plenty,
  // and one older than that is refused (the next attempt re-arms the key), never trusted.
  static constexpr std::uint64_t kKept = 8;

  void retire_token();
  // Zero for a waiter that hears its grants; otherwise how long a hand-over waits for its next
  // attempt (AcquireRequest::polls).
  std::chrono::milliseconds claim_window() const noexcept;

  LeaseBackend& backend_;
  const FairWake wake_;
  const RetryLeave retry_;
  const std::chrono::milliseconds retry_delay_;
  std::string token_;  // moved into the hold once an attempt is granted
  std::uint64_t seq_{0};
  std::uint64_t void_through_{0};        // hand-overs naming attempts up to this are void
  bool queued_{false};                   // a contended attempt may have taken a place in the queue
  SteadyClock::time_point sent_[kKept];  // attempt s was sent at sent_[(s - 1) % kKept]
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_FAIR_WAIT_HPP
