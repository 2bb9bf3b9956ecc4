// src/lock/hold_owner.hpp: what a Hold (redlock/hold.hpp) asks of the object that made it (a
// LockCore or a SemaphoreCore), and the acquire loop's Taker of a handle acquire. A handle hold
// is the same HoldState, with the same renewal, loss and release path, as a thread hold; only
// its owner differs (the Hold, not Ownership's owner thread).
#ifndef REDLOCK_SRC_LOCK_HOLD_OWNER_HPP
#define REDLOCK_SRC_LOCK_HOLD_OWNER_HPP

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "lock/acquire_loop.hpp"
#include "lock/ownership.hpp"

namespace redlock {
namespace detail {

class HoldOwner {
 public:
  virtual ~HoldOwner() = default;

  // Ends the handle hold `held` (as the last level of a thread hold ends): renewal stopped, the
  // release sent and announced, a loss reported, the object's local gate opened. Returns as
  // LockBase::release(); throws the release's failure after doing all that.
  virtual bool release_handle(const Held& held) = 0;
  // Extends the handle hold `held` by `ttl`, as LockBase::extend(ttl).
  virtual bool extend_handle(const Held& held, std::chrono::milliseconds ttl) = 0;
  // options().ttl: the default of extend().
  virtual std::chrono::milliseconds ttl() const noexcept = 0;
  // How messages name what a hold of this object holds ("k", "a permit of k").
  virtual std::string describe() const = 0;

  // What a handle acquire that does not block (lock/async_acquire) asks of the object: its local
  // gate; the loop's waiter (a handle's words); a wait strategy of the kind the blocking call
  // uses (the one choice of it); what a grant becomes (a renewed HoldState nobody owns yet);
  // until when a new acquire holds back after this object's release (epoch: not at all); and
  // whether other processes are known to wait too (AcquireLoop's `crowded`).
  virtual Ownership& gate() noexcept = 0;
  virtual AcquireLoop::Waiter handle_waiter() noexcept = 0;
  virtual std::unique_ptr<WaitStrategy> new_wait() = 0;
  virtual Held start_hold(const AcquireResult& result, std::string token,
                          SteadyClock::time_point start) = 0;
  virtual SteadyClock::time_point courtesy_until() const noexcept { return {}; }
  virtual bool crowded() const noexcept { return false; }
};

// The Taker of a handle acquire: keeps what `core.start_hold()` made of the grant (a renewed
// HoldState nobody owns yet) for the Hold the call returns.
template <class Core>
class HandleTaker final : public AcquireLoop::Taker {
 public:
  explicit HandleTaker(Core& core) noexcept : core_(core) {}

  bool take(const AcquireResult& result, std::string token, SteadyClock::time_point sent) override {
    held_ = core_.start_hold(result, std::move(token), sent);
    return true;
  }
  const Held& held() const noexcept { return held_; }

 private:
  Core& core_;
  Held held_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_HOLD_OWNER_HPP
