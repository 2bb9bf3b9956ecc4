// src/util/prefetch.hpp: asks the CPU to start loading memory that is about to be read.
//
// The watchdog's batch touches a few objects of each of thousands of leases, spread over the
// heap: fetched one after another, each is a cache miss on the renewal thread's CPU time.
// Prefetching every object of a batch first lets those misses overlap.
#ifndef REDLOCK_SRC_UTIL_PREFETCH_HPP
#define REDLOCK_SRC_UTIL_PREFETCH_HPP

#include <cstddef>

namespace redlock {
namespace detail {

constexpr std::size_t kCacheLine = 64;

// Starts loading the first `bytes` bytes at `p` (nothing for nullptr). Never faults.
inline void prefetch_bytes(const void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  const char* const first = static_cast<const char*>(p);
  for (std::size_t at = 0; at < bytes; at += kCacheLine) __builtin_prefetch(first + at);
}

// Starts loading every cache line of *p (nothing for nullptr).
template <class T>
void prefetch_object(const T* p) noexcept {
  prefetch_bytes(p, sizeof(T));
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_UTIL_PREFETCH_HPP
