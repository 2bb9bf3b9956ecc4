// src/lock/hold_end.cpp: the end of a hold's last level (see hold_end.hpp).
#include "lock/hold_end.hpp"

#include "util/log_internal.hpp"

namespace redlock {
namespace detail {

HoldEnd end_hold(HoldState& hold, LeaseBackend& lease) noexcept {
  HoldEnd end;
  const bool was_valid = hold.begin_end() && !hold.lost(SteadyClock::now());
  if (hold.marked_lost() && hold.reason() == LostReason::cap_reached) return end;
  ReleaseResult result;
  end.sent = SteadyClock::now();
  try {
    result = lease.release(hold.token(), Announce::waiters);
    end.error = result.failure;
  } catch (...) {
    end.error = std::current_exception();
  }
  end.listeners = result.listeners;
  end.kept = was_valid && result.quorum_kept && !end.error;
  if (!end.error && !end.kept) {
    end.lost = true;
    end.reason = was_valid ? result.reason : LostReason::expired;
  }
  return end;
}

void end_hold_quietly(HoldState& hold, LeaseBackend& lease, const std::string& what,
                      const char* when) noexcept {
  const HoldEnd end = end_hold(hold, lease);
  if (end.error) {
    try {
      std::rethrow_exception(end.error);
    } catch (const std::exception& e) {
      logf(LogLevel::warn, "redlock: could not release {}{} ({}); it expires by its ttl", what,
           when, e.what());
    } catch (...) {
    }
  }
  hold.mark_released();
}

}  // namespace detail
}  // namespace redlock
