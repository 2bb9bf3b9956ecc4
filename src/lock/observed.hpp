// src/lock/observed.hpp: an acquire call told to an Observer (redlock/observer.hpp), the one
// shape shared by Lock, Redlock and Semaphore.
#ifndef REDLOCK_SRC_LOCK_OBSERVED_HPP
#define REDLOCK_SRC_LOCK_OBSERVED_HPP

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <redlock/observer.hpp>

#include "core/quorum.hpp"

namespace redlock {
namespace detail {

// One acquire call told to `observer`: its event counts the attempts and votes (AcquireLoop
// fills it), and one of held(), contended() or failed() tells how it ended, with the latency
// since the call began. Not thread-safe (one call's object).
class ObservedCall {
 public:
  ObservedCall(Observer& observer, std::string_view key, std::size_t nodes) noexcept
      : observer_(observer), start_(SteadyClock::now()) {
    event_.key = key;
    event_.nodes = nodes;
  }
  AcquireEvent* event() noexcept { return &event_; }
  void held(std::uint64_t fence) {
    event_.fence = fence;
    end(AcquireOutcome::acquired);
  }
  void contended() { end(AcquireOutcome::contended); }
  void failed() { end(AcquireOutcome::failed); }

 private:
  void end(AcquireOutcome outcome) {
    event_.latency = SteadyClock::now() - start_;
    event_.outcome = outcome;
    observer_.on_acquire(event_);
  }

  Observer& observer_;
  AcquireEvent event_;
  const SteadyClock::time_point start_;
};

// Runs `acquire(&event)` (returns held; counts attempts and votes into the event) and tells
// `observer` how it ended: acquired (with `fence_of_hold()`), contended, or failed (the
// exception is rethrown). Returns what `acquire` returned.
template <typename Acquire, typename FenceOfHold>
bool observed_acquire(Observer& observer, std::string_view key, std::size_t nodes,
                      Acquire&& acquire, FenceOfHold&& fence_of_hold) {
  ObservedCall call(observer, key, nodes);
  bool held = false;
  try {
    held = acquire(call.event());
  } catch (...) {
    call.failed();
    throw;
  }
  if (held) {
    call.held(fence_of_hold());
  } else {
    call.contended();
  }
  return held;
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_OBSERVED_HPP
