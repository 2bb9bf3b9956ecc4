// redlock/lease.hpp: LeaseToken, the cancellation signal of one hold.
//
// A critical section that may outlive its lease polls or waits on the token of its hold:
//
//   std::lock_guard<redlock::Lock> guard(lock);
//   redlock::LeaseToken lease = lock.lease();
//   for (auto& chunk : work) {
//     if (lease.lost()) return;        // another process may own the lock now: stop writing
//     process(chunk);
//   }
//
// A token is raised once, when the hold is lost (renewal refused, no quorum, expired, cap
// reached); a normal release does not raise it. Copies share one state.
#ifndef REDLOCK_LEASE_HPP
#define REDLOCK_LEASE_HPP

#include <chrono>  // std::chrono::milliseconds
#include <memory>  // std::shared_ptr

#include <redlock/options.hpp>  // LostReason

namespace redlock {

namespace detail {
class HoldState;
}  // namespace detail

class LeaseToken {
 public:
  // A token of no hold: lost() is true.
  LeaseToken() = default;
  explicit LeaseToken(std::shared_ptr<detail::HoldState> state) noexcept
      : state_(std::move(state)) {}

  // True once the hold has been lost, or its local validity deadline has passed while it was
  // still held. Never throws. Thread-safe, lock-free.
  bool lost() const noexcept;

  // Why it was lost; meaningful only when lost() is true (expired for an empty token).
  // Thread-safe.
  LostReason reason() const noexcept;

  // Blocks up to `timeout` (milliseconds) until the hold is lost or released. Returns lost().
  // Never throws. Thread-safe.
  bool wait_for(std::chrono::milliseconds timeout) const;

 private:
  std::shared_ptr<detail::HoldState> state_;
};

}  // namespace redlock

#endif  // REDLOCK_LEASE_HPP
