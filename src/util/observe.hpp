// src/util/observe.hpp: which observer (redlock/observer.hpp) hears an event. Only a load and a
// branch when none is set.
#ifndef REDLOCK_SRC_UTIL_OBSERVE_HPP
#define REDLOCK_SRC_UTIL_OBSERVE_HPP

#include <cstdint>
#include <memory>
#include <string>

#include <redlock/observer.hpp>
#include <redlock/options.hpp>

namespace redlock {
namespace detail {

// A lock's own observer if it has one, else the process-wide one; nullptr: nobody listens.
inline Observer* observer_of(const std::shared_ptr<Observer>& own) noexcept {
  return own ? own.get() : redlock::observer();
}
inline Observer* observer_of(const LockOptions& options) noexcept {
  return observer_of(options.observer);
}

// Tells `observer` (nullptr: nobody) that a hold on `key` was lost. Never throws (an event that
// cannot be built, std::bad_alloc copying the key, is dropped).
inline void observe_loss(Observer* observer, const std::string& key, LostReason reason,
                         std::uint64_t fence, std::uint64_t renewals) noexcept {
  if (!observer) return;
  try {
    observer->on_lost(LostEvent{key, reason, fence, renewals});
  } catch (...) {
  }
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_UTIL_OBSERVE_HPP
