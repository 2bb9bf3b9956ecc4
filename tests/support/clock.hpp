// tests/support/clock.hpp: CLOCK_MONOTONIC in microseconds, the one clock all processes on this
// machine share, so holds and handoffs logged by different processes can be compared.
#ifndef REDLOCK_TESTS_SUPPORT_CLOCK_HPP
#define REDLOCK_TESTS_SUPPORT_CLOCK_HPP

#include <time.h>

namespace redlock {
namespace test {

inline long long monotonic_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace test
}  // namespace redlock

#endif  // REDLOCK_TESTS_SUPPORT_CLOCK_HPP
