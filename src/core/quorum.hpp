// src/core/quorum.hpp: the Redlock arithmetic, pure and clock-free (tests drive it with fake
// times).
//
// A single-instance Lock is the N = 1 case of the same rules: quorum(1) = 1.
#ifndef REDLOCK_SRC_QUORUM_HPP
#define REDLOCK_SRC_QUORUM_HPP

#include <chrono>
#include <cstddef>

namespace redlock {
namespace detail {

using SteadyClock = std::chrono::steady_clock;

// Nodes that must agree: a strict majority.
constexpr std::size_t quorum_of(std::size_t nodes) noexcept { return nodes / 2 + 1; }

// The drift allowance: ttl * factor + 2 ms (the 2 ms cover the granularity of Redis expiry).
inline std::chrono::nanoseconds drift_of(std::chrono::milliseconds ttl, double factor) noexcept {
  const auto scaled = std::chrono::duration<double, std::nano>(ttl) * factor;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(scaled) +
         std::chrono::milliseconds(2);
}

struct Decision {
  bool held{false};
  // When the hold stops being valid on the local steady clock (meaningful when held).
  SteadyClock::time_point valid_until{};
};

// Held iff at least a quorum granted and validity = ttl - elapsed - drift is still positive, with
// elapsed measured from `started` (taken before the first request was sent) to `finished`.
inline Decision decide(std::size_t nodes, std::size_t granted, std::chrono::milliseconds ttl,
                       double drift_factor, SteadyClock::time_point started,
                       SteadyClock::time_point finished) noexcept {
  Decision d;
  const auto validity =
      std::chrono::nanoseconds(ttl) - (finished - started) - drift_of(ttl, drift_factor);
  d.valid_until = finished + validity;
  d.held = granted >= quorum_of(nodes) && validity > std::chrono::nanoseconds::zero();
  return d;
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_QUORUM_HPP
