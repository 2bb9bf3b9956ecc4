// redlock/detail/chrono.hpp: saturating duration conversion for the lock templates.
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

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_DETAIL_CHRONO_HPP
