// src/util/blocked_waits.cpp: see blocked_waits.hpp.
#include "util/blocked_waits.hpp"

#include <atomic>
#include <cstdint>
#include <limits>

#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace redlock {
namespace detail {
namespace {

constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
// Waiters per bucket that trigger growth; after it there are two buckets per waiter.
constexpr std::size_t kLoad = 2;
constexpr std::size_t kMaxSlots = std::size_t{1} << 16;  // 64k buckets, a few MB in the kernel
constexpr std::size_t kFirstCheck = 16 * kLoad;          // the kernel's smallest private hash

std::atomic<std::size_t> g_blocked{0};
std::atomic<std::size_t> g_next_check{kFirstCheck};  // kNever while a thread checks, or for good
std::atomic<std::size_t> g_requested{0};

std::size_t round_up_pow2(std::size_t n) noexcept {
  std::size_t p = 1;
  while (p < n && p < kMaxSlots) p <<= 1;
  return p;
}

// Grows the hash for `blocked` waiters if the kernel has a private one; returns the count at
// which to look again (kNever: not again).
std::size_t grow(std::size_t blocked) noexcept {
#if defined(__linux__)
  constexpr int kFutexHash = 78;  // PR_FUTEX_HASH (Linux 6.16), spelled out for older headers
  constexpr unsigned long kSetSlots = 1;
  constexpr unsigned long kGetSlots = 2;
  const int now = ::prctl(kFutexHash, kGetSlots, 0UL, 0UL, 0UL);
  if (now <= 0) return kNever;  // no such call (EINVAL), or the global hash: leave it
  std::size_t slots = static_cast<std::size_t>(now);
  const std::size_t asked = g_requested.load(std::memory_order_relaxed);
  if (asked > slots) slots = asked;  // a resize takes effect once the old hash is unused
  if (blocked > kLoad * slots && slots < kMaxSlots) {
    const std::size_t target = round_up_pow2(2 * blocked);
    if (::prctl(kFutexHash, kSetSlots, static_cast<unsigned long>(target), 0UL, 0UL) != 0) {
      return kNever;  // refused (an immutable hash, a sandbox): leave it
    }
    g_requested.store(target, std::memory_order_relaxed);
    slots = target;
  }
  return slots >= kMaxSlots ? kNever : kLoad * slots + 1;
#else
  (void)blocked;
  return kNever;
#endif
}

}  // namespace

BlockedWait::BlockedWait() noexcept {
  const std::size_t blocked = g_blocked.fetch_add(1, std::memory_order_relaxed) + 1;
  std::size_t next = g_next_check.load(std::memory_order_relaxed);
  if (blocked < next) return;
  // One thread checks at a time; the others go on to wait (the next one past the new threshold
  // checks again).
  if (!g_next_check.compare_exchange_strong(next, kNever, std::memory_order_acq_rel)) return;
  g_next_check.store(grow(blocked), std::memory_order_release);
}

BlockedWait::~BlockedWait() { g_blocked.fetch_sub(1, std::memory_order_relaxed); }

std::size_t blocked_waits() noexcept { return g_blocked.load(std::memory_order_relaxed); }

std::size_t futex_hash_requested() noexcept { return g_requested.load(std::memory_order_relaxed); }

}  // namespace detail
}  // namespace redlock
