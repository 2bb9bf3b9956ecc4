// src/api/access.hpp: the one door from the library's layers into the public handles' internals
// (a Client's pool, a Watchdog's machinery, a LeaseToken's hold), so that no public header has to
// expose them. Tests reach internals through this header too.
#ifndef REDLOCK_SRC_API_ACCESS_HPP
#define REDLOCK_SRC_API_ACCESS_HPP

#include <cstddef>
#include <memory>
#include <utility>

#include <redlock/client.hpp>
#include <redlock/hold.hpp>
#include <redlock/lease.hpp>
#include <redlock/watchdog.hpp>

namespace redlock {
namespace detail {

struct Access {
  // The pool and node state shared by every copy of `client`.
  static const std::shared_ptr<ClientImpl>& client(const Client& client) noexcept {
    return client.impl_;
  }
  // The renewal machinery behind `watchdog`.
  static WatchdogImpl& watchdog(Watchdog& watchdog) noexcept { return *watchdog.impl_; }
  // The state behind a handle of an optional component (e.g. a zookeeper::Session's
  // ZkSession), which this header cannot name.
  template <class Handle>
  static const auto& impl(const Handle& handle) noexcept {
    return handle.impl_;
  }
  // The shared state behind a LockBase or a Semaphore (their `core_`).
  template <class Object>
  static auto core(const Object& object) noexcept {
    return object.core_;
  }
  // What a Hold holds: its owner, state (null: nothing) and permit slot.
  static const std::shared_ptr<HoldOwner>& hold_owner(const Hold& hold) noexcept {
    return hold.owner_;
  }
  static const std::shared_ptr<HoldState>& hold_state(const Hold& hold) noexcept {
    return hold.state_;
  }
  static std::size_t hold_slot(const Hold& hold) noexcept { return hold.slot_; }
  // A token observing `hold` (null: a token of no hold).
  static LeaseToken lease(std::shared_ptr<HoldState> hold) noexcept {
    return LeaseToken(std::move(hold));
  }
  // A Hold of `hold` (null: a Hold of nothing), on permit `slot` (0 for a lock), ended through
  // `owner`.
  static Hold hold(std::shared_ptr<HoldOwner> owner, std::shared_ptr<HoldState> hold,
                   std::size_t slot) noexcept {
    if (!hold) return Hold();
    return Hold(std::move(owner), std::move(hold), slot);
  }
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_API_ACCESS_HPP
