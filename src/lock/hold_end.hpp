// src/lock/hold_end.hpp: the end of a hold's last level, shared by Lock, Redlock and Semaphore:
// renewal stopped, the release sent (unless the watchdog already released at a cap), and what
// that found (kept, or lost and why).
#ifndef REDLOCK_SRC_LOCK_HOLD_END_HPP
#define REDLOCK_SRC_LOCK_HOLD_END_HPP

#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <redlock/observer.hpp>
#include <redlock/options.hpp>

#include "core/backend.hpp"
#include "core/hold.hpp"

namespace redlock {
namespace detail {

struct HoldEnd {
  bool kept{false};                // valid up to the release, and no quorum can have lost it before
  std::size_t listeners{0};        // waiters the release was announced to
  SteadyClock::time_point sent{};  // when the release was sent
  std::exception_ptr error;        // the release's transport or server failure
  bool lost{false};                // found lost on the way: report `reason`
  LostReason reason{LostReason::refused};
};

// Ends `hold` through `lease`: stops its renewal (waiting out one in flight), then releases it
// and announces the release to waiters, unless the watchdog already released it at its cap.
// Nodes the release may not have reached (ReleaseResult::owed) get it again in the background,
// on options.watchdog, while the hold would be valid; the caller
// does not wait for that, and `end` reports the first round only. Does not mark the hold
// released (the caller reports a loss first). Never throws: failures land in `error`.
HoldEnd end_hold(HoldState& hold, const std::shared_ptr<LeaseBackend>& lease,
                 const LockOptions& options) noexcept;

// Hands a release of `token` that left nodes `owed` (ReleaseResult::owed, or a rollback's
// AcquireResult::undo_owed) to the background retry on options.watchdog (empty: no retry; the
// cores always set it), until `until`. Returns at once. Never throws (without memory the key
// expires by its ttl). Thread-safe.
void retry_release(const LockOptions& options, const std::shared_ptr<LeaseBackend>& lease,
                   const std::string& token, std::vector<char> owed,
                   SteadyClock::time_point until) noexcept;

// Marks `hold` lost for `reason`; the first to do so tells options.on_lost (on the watchdog's
// callback thread, naming `key`). Never throws.
void report_loss(const std::shared_ptr<HoldState>& hold, LostReason reason,
                 const LockOptions& options, const std::string& key) noexcept;

// Resets `hold`'s lease on `lease` to `ttl` from now (LockBase::extend(ttl) and Hold::extend):
// the hold tracks what is safe while the extend and a renewal may be in flight; the observer
// hears of it (`key`); with auto_renew the watchdog's next renewal moves up. Returns true if
// renewed, false if the hold is ending or was lost (a loss found now is reported). Throws
// std::invalid_argument for a bad ttl, and the extend's failure.
bool extend_hold(const std::shared_ptr<HoldState>& hold, LeaseBackend& lease,
                 const LockOptions& options, const std::string& key, std::chrono::milliseconds ttl);

// Tells `observer` (nullptr: nobody) how the hold `key` ended. Never throws.
void observe_release(Observer* observer, const std::string& key, const HoldState& hold,
                     const HoldEnd& end) noexcept;

// Ends a hold nobody will hear of (its thread exited, its object is destroyed): as end_hold,
// then marks it released. A failure is logged, naming `what` (e.g. "a permit of k") and `when`.
void end_hold_quietly(HoldState& hold, const std::shared_ptr<LeaseBackend>& lease,
                      const LockOptions& options, const std::string& what,
                      const char* when) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_HOLD_END_HPP
