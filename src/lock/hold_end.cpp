// src/lock/hold_end.cpp: the end of a hold's last level (see hold_end.hpp).
#include "lock/hold_end.hpp"

#include <stdexcept>
#include <string>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "util/log_internal.hpp"
#include "util/observe.hpp"
#include "watch/watchdog_impl.hpp"

namespace redlock {
namespace detail {

HoldEnd end_hold(HoldState& hold, const std::shared_ptr<LeaseBackend>& lease,
                 const LockOptions& options) noexcept {
  HoldEnd end;
  const bool was_valid = hold.begin_end() && !hold.lost(SteadyClock::now());
  if (hold.marked_lost() && hold.reason() == LostReason::cap_reached) return end;
  ReleaseResult result;
  end.sent = SteadyClock::now();
  const SteadyClock::time_point until = hold.valid_until();
  try {
    result = lease->release(hold.token(), Announce::waiters);
    end.error = result.failure;
    // Nodes that may not have run it keep the key (and a fair queue's head waiting) until its
    // ttl ends: retried there in the background while the lease would still be valid.
    if (!result.owed.empty() && was_valid) {
      retry_release(options, lease, hold.token(), std::move(result.owed), until);
    }
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

void retry_release(const LockOptions& options, const std::shared_ptr<LeaseBackend>& lease,
                   const std::string& token, std::vector<char> owed,
                   SteadyClock::time_point until) noexcept {
  // Never Watchdog::shared() here: this may run while the program exits (a ~Hold's background
  // release), after that static is gone. Every core holds its watchdog (LockCore's constructor).
  if (!options.watchdog) return;
  try {
    Access::watchdog(*options.watchdog).retry_release(lease, token, std::move(owed), until);
  } catch (...) {  // bad_alloc: the key expires by its ttl
  }
}

bool extend_hold(const std::shared_ptr<HoldState>& hold, LeaseBackend& lease,
                 const LockOptions& options, const std::string& key,
                 std::chrono::milliseconds ttl) {
  if (ttl.count() <= 0 || ttl > kMaxTtl || drift_of(ttl, options.clock_drift_factor) >= ttl) {
    throw std::invalid_argument(
        "redlock: extend: ttl must be longer than the drift allowance "
        "(ttl * clock_drift_factor + 2 ms) and at most 200 years (got " +
        std::to_string(ttl.count()) + " ms)");
  }
  if (!hold) return false;
  const auto start = SteadyClock::now();
  if (hold->ending() || hold->lost(start)) return false;
  // From here the server may apply the new ttl at any moment, even if it is shorter than what
  // is left, and a watchdog renewal may be in flight too: the hold tracks what is safe.
  const auto id = hold->begin_extend(lease.extend_floor(start, ttl));
  ExtendResult result;
  try {
    result = lease.extend(hold->token(), ttl);
  } catch (...) {
    hold->end_extend(id, false);
    throw;
  }
  // Held only if a quorum confirmed before the old validity ran out.
  const auto done = SteadyClock::now();
  const bool in_time = result.held && done < hold->valid_until();
  const bool held = hold->end_extend(id, in_time && !result.failure);
  if (Observer* const observer = observer_of(options)) {
    ExtendEvent event;
    event.key = key;
    event.held = held;
    event.latency = done - start;
    observer->on_extend(event);
  }
  if (result.failure) std::rethrow_exception(result.failure);
  if (held) {
    // A short ttl must not outlive the watchdog's schedule: its next renewal moves up.
    if (options.auto_renew) Access::watchdog(*options.watchdog).reschedule(*hold);
    return true;
  }
  report_loss(hold, result.reason, options, key);
  return false;
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

void end_hold_quietly(HoldState& hold, const std::shared_ptr<LeaseBackend>& lease,
                      const LockOptions& options, const std::string& what,
                      const char* when) noexcept {
  const HoldEnd end = end_hold(hold, lease, options);
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
