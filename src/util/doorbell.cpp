// src/util/doorbell.cpp: see doorbell.hpp. Linux futexes (FUTEX_WAIT_BITSET takes an absolute
// CLOCK_MONOTONIC deadline, which is what std::chrono::steady_clock reads).
#include "util/doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace redlock {
namespace detail {
namespace {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "a futex is a plain 32-bit word");

std::uint32_t* word(std::atomic<std::uint32_t>& a) noexcept {
  return reinterpret_cast<std::uint32_t*>(&a);
}

}  // namespace

void Doorbell::sleep(std::uint32_t ticket,
                     std::chrono::steady_clock::time_point deadline) noexcept {
  timespec until{};
  timespec* limit = nullptr;
  if (deadline != std::chrono::steady_clock::time_point::max()) {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch());
    if (ns.count() <= 0) return;
    until.tv_sec = static_cast<time_t>(ns.count() / 1'000'000'000);
    until.tv_nsec = static_cast<long>(ns.count() % 1'000'000'000);
    limit = &until;
  }
  // EAGAIN (rung since the ticket), ETIMEDOUT, EINTR: all mean "look again".
  ::syscall(SYS_futex, word(rings_), FUTEX_WAIT_BITSET_PRIVATE, ticket, limit, nullptr,
            FUTEX_BITSET_MATCH_ANY);
}

void Doorbell::ring() noexcept {
  rings_.fetch_add(1, std::memory_order_acq_rel);
  ::syscall(SYS_futex, word(rings_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace detail
}  // namespace redlock
