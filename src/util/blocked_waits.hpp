// src/util/blocked_waits.hpp: counts the threads blocked in the library's waits and keeps the
// kernel's futex hash of the process large enough for them.
//
// Since Linux 6.16 a multi-threaded process gets a private futex hash sized for its CPUs, not
// its threads (16 buckets on 2 CPUs). Every thread asleep on a condition variable sits in one of
// them, and every futex wake or wait of the process walks its bucket: with 15,000 threads waiting
// on distinct keys (about 940 a bucket) a hot key's hand-over between two other threads ran at
// 0.6-0.8x its rate without them (bench section 6a). So when the threads blocked here outgrow
// the hash (2 a bucket), it is grown (PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS) to two buckets a
// waiter, up to 64k buckets. It is
// never shrunk, never moved off the global hash (0 slots, the setting of older kernels or a
// process that chose it), and left alone for good where the kernel refuses or lacks the call.
#ifndef REDLOCK_SRC_UTIL_BLOCKED_WAITS_HPP
#define REDLOCK_SRC_UTIL_BLOCKED_WAITS_HPP

#include <cstddef>

namespace redlock {
namespace detail {

// Marks the calling thread as blocked in a library wait for its lifetime. Construct it just
// before the thread sleeps on a condition variable (or similar) that may last. Never throws.
// Thread-safe.
class BlockedWait {
 public:
  BlockedWait() noexcept;
  ~BlockedWait();
  BlockedWait(const BlockedWait&) = delete;
  BlockedWait& operator=(const BlockedWait&) = delete;
};

// The number of threads blocked in library waits now. Never throws. Thread-safe.
std::size_t blocked_waits() noexcept;

// The futex hash size this process last asked the kernel for: 0 if it never asked. Never throws.
// Thread-safe.
std::size_t futex_hash_requested() noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_UTIL_BLOCKED_WAITS_HPP
