// tests/support/eventually.hpp: waits for something a server does in the background (a release
// sent to a node that was not awaited, an undo queued behind a paused node's commands).
//   sleep_for(200ms);                                  // at least this long: queued work runs
//   CHECK(eventually([&] { return holders(group, k) == 0; }));
// A fixed sleep alone makes the check race a loaded machine; this one waits up to `within`
// (5 s by default: keep it below the ttl of a key that should go), so a state that never
// comes still fails. A background release on a sanitizer build under load has taken over 1 s.
#ifndef REDLOCK_TESTS_SUPPORT_EVENTUALLY_HPP
#define REDLOCK_TESTS_SUPPORT_EVENTUALLY_HPP

#include <chrono>
#include <thread>

namespace redlock {
namespace test {

// Returns true as soon as done() does (polled every 5 ms), false if it has not within `within`
// (done() is asked once more when the time is up).
template <class Done>
bool eventually(Done done, std::chrono::steady_clock::duration within = std::chrono::seconds(5)) {
  const auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace test
}  // namespace redlock

#endif  // REDLOCK_TESTS_SUPPORT_EVENTUALLY_HPP
