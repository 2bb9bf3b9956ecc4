// src/util/doorbell.hpp: one thread sleeps until a deadline or until another rings; one futex
// system call per sleep.
//
// The watchdog's renewal thread sleeps between batches. On a condition variable each sleep
// costs two system calls (the timed wait, then a wake on unlocking the mutex the wait took back,
// which glibc marks as contended): a third of the calls of a renewal batch. Here the state is
// still guarded by the caller's mutex; the bell only says "look again".
//
//   sleeper, mutex held:   check the state; seen = bell.ticket(); unlock; bell.sleep(seen, t)
//   ringer:                change the state under the mutex; then (under it or not) bell.ring()
//
// A ring after the sleeper took its ticket ends (or prevents) that sleep.
#ifndef REDLOCK_SRC_UTIL_DOORBELL_HPP
#define REDLOCK_SRC_UTIL_DOORBELL_HPP

#include <atomic>
#include <chrono>
#include <cstdint>

namespace redlock {
namespace detail {

class Doorbell {
 public:
  // The current ring count, to pass to sleep(). Never throws. Thread-safe.
  std::uint32_t ticket() const noexcept { return rings_.load(std::memory_order_acquire); }
  // Sleeps until `deadline` (steady_clock; time_point::max(): no deadline), or until a ring
  // after `ticket` was taken; returns at once if one came already. May return early (spurious
  // wake-up, signal): the caller checks its state again. Never throws. Thread-safe.
  void sleep(std::uint32_t ticket, std::chrono::steady_clock::time_point deadline) noexcept;
  // Ends the current or next sleep. Never throws. Thread-safe.
  void ring() noexcept;

 private:
  std::atomic<std::uint32_t> rings_{0};
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_UTIL_DOORBELL_HPP
