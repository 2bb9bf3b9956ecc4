// src/lock/observed.hpp: an acquire call told to an Observer (redlock/observer.hpp), the one
// shape shared by Lock, Redlock and Semaphore.
#ifndef REDLOCK_SRC_LOCK_OBSERVED_HPP
#define REDLOCK_SRC_LOCK_OBSERVED_HPP

#include <cstddef>
#include <string_view>

#include <redlock/observer.hpp>

#include "core/quorum.hpp"

namespace redlock {
namespace detail {

// Runs `acquire(&event)` (returns held; counts attempts and votes into the event) and tells
// `observer` how it ended: acquired (with `fence_of_hold()`), contended, or failed (the
// exception is rethrown). Returns what `acquire` returned.
template <typename Acquire, typename FenceOfHold>
bool observed_acquire(Observer& observer, std::string_view key, std::size_t nodes,
                      Acquire&& acquire, FenceOfHold&& fence_of_hold) {
  AcquireEvent event;
  event.key = key;
  event.nodes = nodes;
  const auto start = SteadyClock::now();
  bool held = false;
  try {
    held = acquire(&event);
  } catch (...) {
    event.outcome = AcquireOutcome::failed;
    event.latency = SteadyClock::now() - start;
    observer.on_acquire(event);
    throw;
  }
  event.latency = SteadyClock::now() - start;
  event.outcome = held ? AcquireOutcome::acquired : AcquireOutcome::contended;
  if (held) event.fence = fence_of_hold();
  observer.on_acquire(event);
  return held;
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_OBSERVED_HPP
