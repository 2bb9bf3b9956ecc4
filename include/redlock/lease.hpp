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

#include <chrono>      // std::chrono::milliseconds
#include <functional>  // std::function
#include <memory>      // std::shared_ptr
#if __cplusplus >= 202002L && __has_include(<stop_token>)
#include <stop_token>  // std::stop_token, std::stop_source (C++20)
#endif

#include <redlock/options.hpp>  // LostReason

namespace redlock {

namespace detail {
class HoldState;
struct Access;
}  // namespace detail

class LeaseToken {
 public:
  // A token of no hold: lost() is true.
  LeaseToken() = default;

  // True once the hold has been lost, or its local validity deadline has passed while it was
  // still held. Never throws. Thread-safe, lock-free.
  bool lost() const noexcept;

  // Why it was lost; meaningful only when lost() is true (expired for an empty token).
  // Thread-safe.
  LostReason reason() const noexcept;

  // Blocks up to `timeout` (milliseconds) until the hold is lost or released. Returns lost().
  // Never throws. Thread-safe.
  bool wait_for(std::chrono::milliseconds timeout) const;

  // Runs `callback` once when the loss of this hold is detected (a refused or failed renewal,
  // a validity deadline noticed by the watchdog, extend() or release() finding the lease gone,
  // a cap), at once if it already was; never after a normal release. It runs on the thread that
  // detects the loss (often the watchdog's), so it must be quick and must not throw (exceptions
  // are swallowed). Without auto_renew, an expiry nobody looks at is not detected: poll lost().
  // Throws std::bad_alloc only. Thread-safe.
  void on_lost(std::function<void()> callback) const;

#if __cplusplus >= 202002L && __has_include(<stop_token>)
  // C++20: a std::stop_token that is stop-requested when the loss of this hold is detected (see
  // on_lost()); an empty token's is stop-requested at once. Thread-safe.
  std::stop_token stop_token() const {
    auto source = std::make_shared<std::stop_source>();
    on_lost([source] { source->request_stop(); });
    return source->get_token();
  }
#endif

 private:
  friend struct detail::Access;  // locks hand out tokens of their holds (src/api/access.hpp)
  explicit LeaseToken(std::shared_ptr<detail::HoldState> state) noexcept
      : state_(std::move(state)) {}

  std::shared_ptr<detail::HoldState> state_;
};

}  // namespace redlock

#endif  // REDLOCK_LEASE_HPP
