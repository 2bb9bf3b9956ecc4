// src/core/release_watch_stand_in.cpp: TEMPORARY stand-ins for the two functions HC's
// src/watch/release_watch.cpp provides (pinned in ARCH_PLAN), so that LeaseEngine implements
// LeaseBackend on this branch. Nothing on this branch calls them (lock/ still uses its own
// SubscriptionWatch). The integrator deletes this file when HC's branch merges.
#include <thread>

#include "core/engine.hpp"

namespace redlock {
namespace detail {
namespace {

// Wakes at `until` only: waiting degrades to polling, never to a missed wake-up.
class PollingWatch final : public ReleaseWatch {
 public:
  void wait_until(SteadyClock::time_point until) override { std::this_thread::sleep_until(until); }
  bool take_grant(std::uint64_t&, std::uint64_t&) noexcept override { return false; }
};

}  // namespace

std::unique_ptr<ReleaseWatch> make_release_watch(const LeaseEngine&, SteadyClock::time_point,
                                                 std::string) {
  return std::make_unique<PollingWatch>();
}

bool release_watch_live(const LeaseEngine&) noexcept { return false; }

}  // namespace detail
}  // namespace redlock
