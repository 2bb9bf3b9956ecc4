// src/lock/lock_core.cpp: LockCore: the acquire loop of a Lock or Redlock over its wait
// strategy, release, extend, the watchdog hand-off, and the release of holds whose thread exited.
#include "lock/lock_core.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <redlock/errors.hpp>
#include <redlock/watchdog.hpp>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "lock/fair_wait.hpp"
#include "lock/hold_end.hpp"
#include "lock/observed.hpp"
#include "util/blocked_waits.hpp"
#include "util/log_internal.hpp"
#include "util/observe.hpp"
#include "util/token.hpp"
#include "watch/watchdog_impl.hpp"

namespace redlock {
namespace detail {
namespace {

// One per thread that ever acquired: when the thread exits, the locks it still holds are
// released (their owner id may be given to a new thread).
class ThreadHolds {
 public:
  ThreadHolds() = default;
  ThreadHolds(const ThreadHolds&) = delete;
  ThreadHolds& operator=(const ThreadHolds&) = delete;
  ~ThreadHolds() {
    for (auto& entry : cores_) {
      if (auto core = entry.second.lock()) core->orphaned();
    }
  }
  // O(1) amortized: a thread taking 100,000 locks must not pay for the ones it took before.
  void add(const std::shared_ptr<LockCore>& core) {
    std::weak_ptr<LockCore>& known = cores_[core.get()];
    if (known.lock() == core) return;
    known = core;  // new, or a destroyed core's address reused
    if (cores_.size() < prune_at_) return;
    for (auto it = cores_.begin(); it != cores_.end();) {
      it = it->second.expired() ? cores_.erase(it) : std::next(it);
    }
    prune_at_ = std::max<std::size_t>(64, 2 * cores_.size());
  }

 private:
  std::unordered_map<const LockCore*, std::weak_ptr<LockCore>> cores_;
  std::size_t prune_at_{64};
};

ThreadHolds& thread_holds() {
  thread_local ThreadHolds holds;
  return holds;
}

constexpr auto kNoDeadline = SteadyClock::time_point::max();
constexpr CallWords kWords{"lock() of ",
                           " by the thread that owns it, but its hold was lost; unlock() it first"};

}  // namespace

LockCore::LockCore(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string key,
                   LockOptions options)
    : LockCore(make_lease_engine(std::move(nodes), std::move(key), options), options) {}

LockCore::LockCore(std::shared_ptr<LeaseBackend> backend, LockOptions options)
    : options_(std::move(options)), backend_(std::move(backend)) {
  if ((options_.auto_renew || options_.on_lost) && !options_.watchdog) {
    options_.watchdog = Watchdog::shared();
  }
}

bool LockCore::acquire(Call call, SteadyClock::time_point deadline) {
  const Ownership::Entry entry = ownership_.enter(call, deadline);
  if (entry != Ownership::Entry::entered) return entry_result(entry, call, backend_->key(), kWords);
  Observer* const observer = observer_of(options_);
  if (!observer) return gated_acquire(call, deadline, nullptr);
  return observed_acquire(
      *observer, backend_->key(), backend_->size(),
      [&](AcquireEvent* event) { return gated_acquire(call, deadline, event); },
      [&] { return ownership_.hold_of_caller()->fence(); });
}

// This thread alone of this process talks to the servers for this object until it holds the
// lock or gives up.
bool LockCore::gated_acquire(Call call, SteadyClock::time_point deadline, AcquireEvent* event) {
  // This object just released a lock others were waiting for: give the woken waiter the few
  // round trips it needs before competing again (no barging; see release()).
  const SteadyClock::time_point courtesy{
      SteadyClock::duration(courtesy_until_.load(std::memory_order_acquire))};
  if (call != Call::try_lock && SteadyClock::now() < courtesy) {
    std::this_thread::sleep_until(std::min(courtesy, deadline));
  }
  bool held = false;
  try {
    held = attempts(call, deadline, event);
  } catch (...) {
    ownership_.open_gate();
    throw;
  }
  if (!held) ownership_.open_gate();
  return held;
}

// The wait strategy is chosen once per call and lives on this stack frame.
bool LockCore::attempts(Call call, SteadyClock::time_point deadline, AcquireEvent* event) {
  const auto round = [&](WaitStrategy& wait) {
    Round r{call,
            deadline,
            wait,
            Unavailability(backend_->key(), call, deadline, options_.max_unavailable),
            std::chrono::milliseconds(-1),
            event};
    r.crowded = crowded_.load(std::memory_order_relaxed);
    return attempts(r);
  };
  if (backend_->fair()) {
    FairWait wait(*backend_, options_.wake_on_release ? FairWake::releases : FairWake::timer);
    return round(wait);
  }
  if (options_.wake_on_release) {
    WakeOnReleaseWait wait(*backend_);
    return round(wait);
  }
  PollingWait wait(*backend_);
  return round(wait);
}

// Waiting means: watch for releases first, then try again (and queue, in fair mode). A release
// after the watch is confirmed cannot be missed; one before it is seen by the attempt (in fair
// mode the key then holds our token, and the attempt re-arms it). When watching is free (this
// process is subscribed already) the watch comes first and the very first attempt counts.
// Unavailability (the servers cannot be reached) ends try_lock() with the error; a wait rides it
// out until its deadline, and throws it if the last attempt failed that way.
bool LockCore::attempts(Round& r) {
  WaitStrategy& wait = r.wait;
  try {
    if (r.call != Call::try_lock && wait.watch_is_free()) {
      wait.start_watch(ownership_, r.deadline);
      if (wait.hears_releases() && wait.behind_others()) return queue_behind(r);
    }
    if (settle(r, wait.attempt(wait.watching() ? Attempt::contended : Attempt::first))) return true;
    if (r.call == Call::try_lock) return false;
    if (!wait.watching()) {
      if (r.deadline != kNoDeadline && SteadyClock::now() >= r.deadline) {
        return r.unavailable.give_up();
      }
      wait.start_watch(ownership_, r.deadline);
      if (!ownership_.cancelled() && settle(r, wait.attempt(Attempt::contended))) return true;
    }
    return wait_loop(r);
  } catch (...) {
    wait.leave();
    throw;
  }
}

// Threads of this process that watched earlier wait for the lock (on other Lock objects): a
// release wakes them in arrival order, so this call waits its turn instead of an attempt that
// would be refused. It trusts the releases it hears; a lease that ends unannounced (a crashed
// holder) is tried again after this lock's own ttl, which a holder with the same options cannot
// exceed.
bool LockCore::queue_behind(Round& r) {
  r.holder_pttl = options_.ttl;
  return wait_loop(r);
}

bool LockCore::wait_loop(Round& r) {
  for (;;) {
    if (ownership_.cancelled()) {
      r.wait.leave();  // passes on a hand-over that came meanwhile
      return cancelled_result(r.call, backend_->key(), kWords);
    }
    const auto now = SteadyClock::now();
    if (r.deadline != kNoDeadline && now >= r.deadline) {
      if (take_hand_over(r)) return true;  // it came in time
      r.wait.leave();
      return r.unavailable.give_up();
    }
    const bool woken = [&] {
      const BlockedWait blocked;
      return r.wait.wait_until(next_wake(r, now));
    }();
    if (ownership_.cancelled()) continue;
    if (take_hand_over(r)) return true;
    if (woken && r.event) observe_wake(WakeKind::released);
    if (woken) yield_to_elders(r);
    const unsigned refused = r.refused;
    if (settle(r, r.wait.attempt(Attempt::contended))) return true;
    if (woken && r.refused > refused) r.crowded = true;  // another waiter won this release
  }
}

// Jittered retry_delay, never past the holder's lease end (it may end by expiry, unannounced)
// nor past the deadline. A wait that hears releases sleeps until the lease end (a release wakes
// it sooner); retry_delay only when the lease end is unknown.
SteadyClock::time_point LockCore::next_wake(const Round& r, SteadyClock::time_point now) const {
  auto wait = jittered(std::chrono::nanoseconds(options_.retry_delay));
  if (r.holder_pttl.count() >= 0) {
    const auto lease_end = std::chrono::nanoseconds(r.holder_pttl + std::chrono::milliseconds(1));
    wait = r.wait.hears_releases() ? lease_end : std::min(wait, lease_end);
  }
  const auto until = now + wait;
  return r.deadline == kNoDeadline ? until : std::min(until, r.deadline);
}

// Applies one attempt's outcome: a failure goes to the unavailability rule, a grant is taken.
bool LockCore::settle(Round& r, Try attempt) {
  r.holder_pttl = attempt.result.holder_pttl;
  r.round_trip = SteadyClock::now() - attempt.sent;
  if (r.event) {
    ++r.event->attempts;
    r.event->granted = attempt.result.granted;
  }
  if (attempt.result.failure) {
    r.unavailable.failed(attempt.result.failure);
    return false;
  }
  r.unavailable.answered();
  if (!attempt.result.held) ++r.refused;
  return attempt.result.held && take(attempt.result, std::move(attempt.token), attempt.sent);
}

bool LockCore::take_hand_over(Round& r) {
  Try handed;
  if (!r.wait.hand_over(handed) || !take(handed.result, std::move(handed.token), handed.sent)) {
    return false;
  }
  if (r.event) {
    r.event->handed_over = true;
    observe_wake(WakeKind::handed_over);
  }
  return true;
}

void LockCore::observe_wake(WakeKind kind) const noexcept {
  Observer* const observer = observer_of(options_);
  if (observer) observer->on_wake(WakeEvent{backend_->key(), kind});
}

bool LockCore::take(const AcquireResult& result, std::string token, SteadyClock::time_point start) {
  auto hold =
      std::make_shared<HoldState>(std::move(token), result.fence, start, result.valid_until);
  ownership_.own(Held{hold, 0});
  thread_holds().add(shared_from_this());
  if (!options_.auto_renew) return true;
  try {
    Access::watchdog(*options_.watchdog)
        .watch(backend_, hold,
               WatchSettings{options_.max_renewals, options_.max_hold, options_.on_lost,
                             options_.observer});
  } catch (...) {
    // Could not start renewal (thread creation failed): do not hand out a hold the caller
    // believes is renewed. Roll back and report.
    ownership_.disown();
    hold->mark_released();
    try {
      backend_->release(hold->token(), Announce::waiters);
    } catch (...) {
    }
    throw;
  }
  return true;
}

bool LockCore::release() {
  Held last;
  switch (ownership_.exit(last)) {
    case Ownership::Exit::not_owner:
      logf(LogLevel::warn,
           "redlock: release of {} by a thread that does not hold it; nothing was done",
           backend_->key());
      return false;
    case Ownership::Exit::nested_valid:
      return true;
    case Ownership::Exit::nested_lost:
      return false;
    case Ownership::Exit::last:
      break;
  }
  const std::shared_ptr<HoldState>& hold = last.hold;
  const HoldEnd end = end_hold(*hold, *backend_);
  observe_release(observer_of(options_), backend_->key(), *hold, end);
  if (end.listeners > 0 && !backend_->fair()) hold_back_after(end.sent);  // fair: queue decides
  crowded_.store(end.listeners > 1, std::memory_order_relaxed);
  // The lease turned out to be gone: that is a loss, and LeaseToken listeners hear of it.
  if (end.lost) report_lost(hold, end.reason);
  hold->mark_released();
  ownership_.open_gate();
  if (end.error) std::rethrow_exception(end.error);
  return end.kept;
}

namespace {
// About as long as a woken waiter needs to answer a release: 4 round trips, 250 us .. 5 ms.
SteadyClock::duration answer_time(SteadyClock::duration round_trip) {
  return std::clamp<SteadyClock::duration>(4 * round_trip, std::chrono::microseconds(250),
                                           std::chrono::milliseconds(5));
}
}  // namespace

// Waiters heard a release that started at `release_start`. Hold back this object's next acquire
// for as long as a woken waiter needs to answer.
void LockCore::hold_back_after(SteadyClock::time_point release_start) {
  const auto pause = answer_time(SteadyClock::now() - release_start);
  courtesy_until_.store((SteadyClock::now() + pause).time_since_epoch().count(),
                        std::memory_order_release);
}

// Elder first: every process waiting for a lock hears a release at about the same moment, and
// without an order the one whose subscription the server writes to first wins nearly every
// race (one process took 10-15x another's share). A crowded wait (other processes wait too: a
// release of this object reached several, or another waiter won a release this one heard)
// holds back its attempt by (8 - refused) / 8 of answer_time: a process refused more often has
// waited through more releases and answers first; one that just arrived waits the longest. A lone
// waiter (the ping-pong hand-off) is never crowded and pays nothing; fair mode has its queue.
void LockCore::yield_to_elders(const Round& r) const {
  constexpr unsigned kLevels = 8;  // refused 8 times or more: no pause
  if (!r.crowded || r.refused >= kLevels || backend_->fair() || !options_.wake_on_release) return;
  auto until = SteadyClock::now() + answer_time(r.round_trip) * (kLevels - r.refused) / kLevels;
  if (r.deadline != kNoDeadline) until = std::min(until, r.deadline);
  std::this_thread::sleep_until(until);
}

bool LockCore::extend(std::chrono::milliseconds ttl) {
  if (ttl.count() <= 0 || ttl > kMaxTtl || drift_of(ttl, options_.clock_drift_factor) >= ttl) {
    throw std::invalid_argument(
        "redlock: extend: ttl must be longer than the drift allowance "
        "(ttl * clock_drift_factor + 2 ms) and at most 200 years (got " +
        std::to_string(ttl.count()) + " ms)");
  }
  const std::shared_ptr<HoldState> hold = ownership_.hold_of_caller();
  if (!hold) return false;
  const auto start = SteadyClock::now();
  if (hold->ending() || hold->lost(start)) return false;
  // From here the server may apply the new ttl at any moment, even if it is shorter than what
  // is left, and a watchdog renewal may be in flight too: the hold tracks what is safe.
  const auto id = hold->begin_extend(backend_->extend_floor(start, ttl));
  ExtendResult result;
  try {
    result = backend_->extend(hold->token(), ttl);
  } catch (...) {
    hold->end_extend(id, false);
    throw;
  }
  // Held only if a quorum confirmed before the old validity ran out.
  const auto done = SteadyClock::now();
  const bool in_time = result.held && done < hold->valid_until();
  const bool held = hold->end_extend(id, in_time && !result.failure);
  if (Observer* const observer = observer_of(options_)) {
    ExtendEvent event;
    event.key = backend_->key();
    event.held = held;
    event.latency = done - start;
    observer->on_extend(event);
  }
  if (result.failure) std::rethrow_exception(result.failure);
  if (held) {
    // A short ttl must not outlive the watchdog's schedule: its next renewal moves up.
    if (options_.auto_renew) Access::watchdog(*options_.watchdog).reschedule(*hold);
    return true;
  }
  report_lost(hold, result.reason);
  return false;
}

void LockCore::report_lost(const std::shared_ptr<HoldState>& hold, LostReason reason) {
  report_loss(hold, reason, options_, backend_->key());
}

// Ends `hold` and releases it unless the watchdog already did (cap); failures are logged and
// the lease expires by its ttl.
void LockCore::orphaned() noexcept {
  const Held held = ownership_.disown_caller();
  if (!held.hold) return;
  logf(LogLevel::warn, "redlock: a thread exited holding {}; releasing it", backend_->key());
  end_hold_quietly(*held.hold, *backend_, backend_->key(), "");
  ownership_.open_gate();
}

void LockCore::destroy() noexcept {
  const Held held = ownership_.disown();
  if (!held.hold) return;
  end_hold_quietly(*held.hold, *backend_, backend_->key(), " while destroying the lock");
}

}  // namespace detail
}  // namespace redlock
