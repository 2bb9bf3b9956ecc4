// redlock/detail/chrono.hpp: overflow-free duration arithmetic for the lock templates.
#ifndef REDLOCK_DETAIL_CHRONO_HPP
#define REDLOCK_DETAIL_CHRONO_HPP

#include <chrono>  // std::chrono::duration, nanoseconds

namespace redlock {
namespace detail {

// Converts any duration to nanoseconds, clamping to the representable range instead of
// overflowing (try_lock_for(std::chrono::hours::max()) means "wait forever").
template <class Rep, class Period>
std::chrono::nanoseconds saturating_ns(const std::chrono::duration<Rep, Period>& d) noexcept {
  using Wide = std::chrono::duration<long double, std::nano>;
  const Wide wide = d;
  if (wide >= Wide(std::chrono::nanoseconds::max())) return std::chrono::nanoseconds::max();
  if (wide <= Wide(std::chrono::nanoseconds::min())) return std::chrono::nanoseconds::min();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d);
}

// Time left until `deadline` on its own clock, in nanoseconds, clamped: computed in a wide type
// so that extreme time points (time_point::min()/max()) cannot overflow the subtraction.
template <class Clock, class Duration>
std::chrono::nanoseconds remaining_ns(const std::chrono::time_point<Clock, Duration>& deadline) {
  using Wide = std::chrono::duration<long double, std::nano>;
  const Wide left = Wide(deadline.time_since_epoch()) - Wide(Clock::now().time_since_epoch());
  return saturating_ns(left);
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_DETAIL_CHRONO_HPP
