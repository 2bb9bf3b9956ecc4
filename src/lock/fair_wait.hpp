// src/lock/fair_wait.hpp: fair mode's wait strategy, the one place fair waiting lives: one token
// is the waiter's place in the server's queue for the whole wait (unless an attempt of it may
// still be undone: see below), nothing refreshes it (the waiter's subscription is its liveness),
// a release hands the lock over without a round trip, the first two waiters watch the holder's
// lease (AcquireLoop::turn_wake), and a waiter that gives up leaves the queue.
#ifndef REDLOCK_SRC_LOCK_FAIR_WAIT_HPP
#define REDLOCK_SRC_LOCK_FAIR_WAIT_HPP

#include <cstdint>
#include <string>

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
  // Makes the waiter's token. Throws what token generation throws.
  FairWait(LeaseBackend& backend, FairWake wake);
  ~FairWait() override;

  Try attempt(Attempt how) override;
  bool hand_over(Try& out) override;
  void leave() noexcept override;
  bool watch_is_free() const noexcept override;
  // Subscribed for hand-overs on every node: the wait sleeps until a hand-over, a notice, or
  // (a watcher) the holder's lease end, with no periodic attempt.
  bool hears_releases() const noexcept override;
  bool queues() const noexcept override { return true; }

 protected:
  std::unique_ptr<ReleaseWatch> make_watch(SteadyClock::time_point deadline) override;

 private:
  // Send times remembered (recent attempts). A queued waiter makes an attempt only when woken,
  // told it moved up, or at a lease end, and a hand-over names its latest join: 8 is plenty,
  // and one older than that is refused (the next attempt re-arms the key), never trusted.
  static constexpr std::uint64_t kKept = 8;

  void retire_token();

  LeaseBackend& backend_;
  const FairWake wake_;
  std::string token_;  // moved into the hold once an attempt is granted
  std::uint64_t seq_{0};
  std::uint64_t void_through_{0};        // hand-overs naming attempts up to this are void
  bool queued_{false};                   // a contended attempt may have taken a place in the queue
  SteadyClock::time_point sent_[kKept];  // attempt s was sent at sent_[(s - 1) % kKept]
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_FAIR_WAIT_HPP
