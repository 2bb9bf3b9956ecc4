// src/watch/due_queue.hpp: the watchdog's queue of due renewals.
//
// A binary heap of one record per lease misses the cache on nearly every level of every pop
// once it holds thousands of leases (measured: a seventh of the renewal thread's CPU at 10,000
// leases, ttl 3 s). The watchdog takes everything due within a few milliseconds at once, so
// exact order within a millisecond does not matter: records go into a wheel of time buckets
// (kWidth each, kBuckets of them), a batch reads one or two buckets front to back, and a push
// appends to one bucket. Records beyond the wheel's horizon wait in a heap.
#ifndef REDLOCK_SRC_WATCH_DUE_QUEUE_HPP
#define REDLOCK_SRC_WATCH_DUE_QUEUE_HPP

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "core/hold.hpp"  // SteadyClock

namespace redlock {
namespace detail {

// Not thread-safe: the watchdog guards it with its mutex.
class DueQueue {
 public:
  struct Due {
    SteadyClock::time_point when;
    std::size_t slot;
    bool operator>(const Due& other) const noexcept { return when > other.when; }
  };

  bool empty() const noexcept { return in_wheel_ == 0 && far_.empty(); }

  // The earliest record's time; time_point::max() when empty.
  SteadyClock::time_point next() const noexcept {
    auto earliest = far_.empty() ? SteadyClock::time_point::max() : far_.top().when;
    if (in_wheel_ == 0) return earliest;
    // Only the cursor's bucket holds records from before its start (see push), so the first
    // bucket with records holds the earliest.
    const std::vector<Due>& bucket = wheel_[first_used()];
    for (const Due& due : bucket) earliest = std::min(earliest, due.when);
    return earliest;
  }

  // Adds a record. Throws std::bad_alloc (the queue is then unchanged).
  void push(const Due& due) {
    if (wheel_.empty()) wheel_.resize(kBuckets);  // on first use (96 KiB)
    const std::int64_t b = bucket_of(due.when);
    if (in_wheel_ == 0) cursor_ = b;  // a fresh start: the wheel's horizon begins here
    if (b >= cursor_ + static_cast<std::int64_t>(kBuckets)) {
      far_.push(due);
      return;
    }
    // Already due when the cursor has passed its bucket: it goes into the cursor's.
    const std::size_t index = index_of(std::max(b, cursor_));
    wheel_[index].push_back(due);
    used_[index / 64] |= std::uint64_t{1} << (index % 64);
    ++in_wheel_;
  }

  // Moves every record due at or before `limit` to the end of `out` (in no particular order).
  // Throws std::bad_alloc from `out` (records not moved yet stay queued).
  void take_until(SteadyClock::time_point limit, std::vector<Due>& out) {
    while (!far_.empty() && far_.top().when <= limit) {
      out.push_back(far_.top());
      far_.pop();
    }
    const std::int64_t last = std::max(cursor_, bucket_of(limit));
    while (in_wheel_ > 0) {
      const std::int64_t b = cursor_ + static_cast<std::int64_t>(distance_to_used());
      if (b > last) break;
      std::vector<Due>& bucket = wheel_[index_of(b)];
      // Records before `limit` are taken; the rest (only in the last bucket) stay, in order.
      out.reserve(out.size() + bucket.size());  // the only throw: before anything moved
      std::size_t kept = 0;
      for (std::size_t i = 0; i < bucket.size(); ++i) {
        if (bucket[i].when <= limit) {
          out.push_back(bucket[i]);
        } else {
          bucket[kept++] = bucket[i];
        }
      }
      in_wheel_ -= bucket.size() - kept;
      bucket.resize(kept);
      cursor_ = b;
      if (kept > 0) break;
      clear_used(index_of(b));
    }
    if (cursor_ < last) cursor_ = last;
  }

 private:
  static constexpr auto kWidth = std::chrono::milliseconds(4);
  static constexpr std::size_t kBuckets = 4096;  // a horizon of 16 s
  static constexpr std::size_t kWords = kBuckets / 64;

  static std::int64_t bucket_of(SteadyClock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() /
           std::chrono::nanoseconds(kWidth).count();
  }
  static std::size_t index_of(std::int64_t bucket) noexcept {
    return static_cast<std::size_t>(bucket) % kBuckets;  // kBuckets is a power of two
  }
  void clear_used(std::size_t index) noexcept {
    used_[index / 64] &= ~(std::uint64_t{1} << (index % 64));
  }
  // Buckets from the cursor's to the first one with records. Precondition: in_wheel_ > 0.
  std::size_t distance_to_used() const noexcept {
    const std::size_t start = index_of(cursor_);
    for (std::size_t step = 0; step <= kWords; ++step) {
      const std::size_t word = (start / 64 + step) % kWords;
      std::uint64_t bits = used_[word];
      if (step == 0) bits &= ~std::uint64_t{0} << (start % 64);  // from the cursor on
      if (bits == 0) continue;
      const std::size_t index = word * 64 + static_cast<std::size_t>(__builtin_ctzll(bits));
      return (index + kBuckets - start) % kBuckets;
    }
    return 0;  // unreachable while in_wheel_ > 0
  }
  std::size_t first_used() const noexcept {
    return index_of(cursor_ + static_cast<std::int64_t>(distance_to_used()));
  }

  std::vector<std::vector<Due>> wheel_;       // bucket b at b % kBuckets, b in [cursor_, +kBuckets)
  std::array<std::uint64_t, kWords> used_{};  // bit set: that bucket holds records
  std::int64_t cursor_{0};                    // no bucket before it holds records
  std::size_t in_wheel_{0};
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> far_;  // beyond the horizon
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_WATCH_DUE_QUEUE_HPP
