// src/lock/hold_end.cpp: the end of a hold's last level (see hold_end.hpp).
#include "lock/hold_end.hpp"

#include "api/access.hpp"
#include "util/log_internal.hpp"
#include "util/observe.hpp"
#include "watch/watchdog_impl.hpp"

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

void observe_release(Observer* observer, const std::string& key, const HoldState& hold,
                     const HoldEnd& end) noexcept {
  if (!observer) return;
  const auto now = SteadyClock::now();
  ReleaseEvent event;
  event.key = key;
  event.kept = end.kept;
  event.failed = end.error != nullptr;
  event.held = now - hold.acquired();
  if (end.sent != SteadyClock::time_point{}) event.latency = now - end.sent;
  event.listeners = end.listeners;
  observer->on_release(event);
}

void report_loss(const std::shared_ptr<HoldState>& hold, LostReason reason,
                 const LockOptions& options, const std::string& key) noexcept {
  if (!hold->mark_lost(reason)) return;
  observe_loss(observer_of(options), key, reason, hold->fence(), hold->renewals());
  if (!options.on_lost || !options.watchdog) return;
  try {
    Access::watchdog(*options.watchdog).report_lost(key, hold, options.on_lost, reason);
  } catch (const std::exception& e) {  // no callback thread or memory: the loss stays marked
    logf(LogLevel::warn, "redlock: could not tell on_lost that {} was lost ({})", key, e.what());
  } catch (...) {
  }
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
