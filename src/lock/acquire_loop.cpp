// src/lock/acquire_loop.cpp: the acquire loop shared by Lock, Redlock, other backends' locks and
// Semaphore (see acquire_loop.hpp).
#include "lock/acquire_loop.hpp"

#include <algorithm>
#include <thread>

#include "util/blocked_waits.hpp"
#include "util/observe.hpp"
#include "util/token.hpp"

namespace redlock {
namespace detail {
namespace {
constexpr auto kNoDeadline = SteadyClock::time_point::max();
}  // namespace

SteadyClock::duration answer_time(SteadyClock::duration round_trip) {
  return std::clamp<SteadyClock::duration>(4 * round_trip, std::chrono::microseconds(250),
                                           std::chrono::milliseconds(5));
}

AcquireLoop::AcquireLoop(const Waiter& waiter, Taker& taker, WaitStrategy& wait, Call call,
                         SteadyClock::time_point deadline, AcquireEvent* event, bool crowded)
    : who_(waiter),
      taker_(taker),
      wait_(wait),
      call_(call),
      deadline_(deadline),
      unavailable_(waiter.key, call, deadline, waiter.options.max_unavailable),
      event_(event),
      crowded_(crowded) {}

// Waiting means: watch for releases first, then try again (and queue, in fair mode). A release
// after the watch is confirmed cannot be missed; one before it is seen by the attempt (in fair
// mode the key then holds our token, and the attempt re-arms it). When watching is free (this
// process is subscribed already) the watch comes first and the very first attempt counts.
// Unavailability (the servers cannot be reached) ends try_lock() with the error; a wait rides it
// out until its deadline, and throws it if the last attempt failed that way.
//
// The blocking driver: the caller's thread sleeps on the watch between steps. The async driver
// (lock/async_driver) runs the same steps on its thread, woken by the watch's waker instead.
bool AcquireLoop::run() {
  Step step = begin();
  while (step.kind != Step::Kind::done) {
    bool woken = false;
    if (step.kind == Step::Kind::wait) {
      const BlockedWait blocked;
      woken = wait_.wait_until(step.until);
    } else {
      std::this_thread::sleep_until(step.until);
    }
    step = resume(woken);
  }
  return step.held;
}

AcquireLoop::Step AcquireLoop::begin() {
  try {
    if (call_ != Call::try_lock && wait_.watch_is_free()) {
      wait_.start_watch(who_.ownership, deadline_);
      if (!wait_.queues() && wait_.hears_releases() && wait_.behind_others()) {
        // Threads of this process that watched earlier wait for the lock (on other objects): a
        // release wakes them in arrival order, so this call waits its turn instead of an
        // attempt that would be refused. It trusts the releases it hears; a lease that ends
        // unannounced (a crashed holder) is tried again after this lock's own ttl, which a
        // holder with the same options cannot exceed.
        holder_pttl_ = who_.options.ttl;
        return next();
      }
    }
    // A waiting ReadWriteLock writer marks from its first attempt: readers that arrive while
    // its watch is being confirmed (a subscriber reconnecting after a fault) wait behind it.
    const bool marks = call_ != Call::try_lock && wait_.marks_waiter();
    if (settle(wait_.attempt(wait_.watching() || marks ? Attempt::contended : Attempt::first))) {
      return done(true);
    }
    if (call_ == Call::try_lock) return done(false);
    if (!wait_.watching()) {
      if (deadline_ != kNoDeadline && SteadyClock::now() >= deadline_) {
        return done(unavailable_.give_up());
      }
      wait_.start_watch(who_.ownership, deadline_);
      if (!cancelled() && settle(wait_.attempt(Attempt::contended))) return done(true);
    }
    return next();
  } catch (...) {
    wait_.abandon();
    throw;
  }
}

// Before each wait: cancellation, the deadline (a hand-over that came in time still counts),
// then when to look again.
AcquireLoop::Step AcquireLoop::next() {
  if (cancelled()) {
    wait_.abandon();  // passes on a hand-over or a wake-up that came meanwhile
    if (stopped()) return done(false);
    return done(cancelled_result(call_, who_.key, who_.words));
  }
  const auto now = SteadyClock::now();
  if (deadline_ != kNoDeadline && now >= deadline_) {
    if (take_hand_over()) return done(true);  // it came in time
    wait_.abandon();
    return done(unavailable_.give_up());
  }
  wake_at_ = next_wake(now);
  return Step{Step::Kind::wait, false, wake_at_};
}

AcquireLoop::Step AcquireLoop::resume(bool woken) {
  try {
    if (paused_) {  // the elder-first pause follows a wake-up only
      paused_ = false;
      return attempt_after(true);
    }
    if (cancelled()) return next();
    if (take_hand_over()) return done(true);
    // Moved up in the queue: sleep on, until the new place's wake time.
    if (!woken && took_notice() && SteadyClock::now() < wake_at_) return next();
    if (!woken) return attempt_after(false);
    if (event_) observe_wake(WakeKind::released);
    if (const auto until = elders_pause()) {
      paused_ = true;
      return Step{Step::Kind::pause, false, *until};
    }
    return attempt_after(true);
  } catch (...) {
    wait_.abandon();
    throw;
  }
}

AcquireLoop::Step AcquireLoop::attempt_after(bool woken) {
  const unsigned refused = refused_;
  if (settle(wait_.attempt(Attempt::contended))) return done(true);
  if (woken && refused_ > refused) crowded_ = true;  // another waiter won this release
  return next();
}

// Jittered retry_delay, never past the holder's lease end (it may end by expiry, unannounced)
// nor past the deadline. A wait that hears releases sleeps until the lease end (a release wakes
// it sooner); retry_delay only when the lease end is unknown. A place in a wake-one queue: a
// watcher sleeps until the lease end, the others until their grant (or the deadline). A fair
// wait refused without a place (a Redlock's orderer silent or in back-off) hears no hand-over:
// it polls at retry_delay until an attempt queues it.
SteadyClock::time_point AcquireLoop::next_wake(SteadyClock::time_point now) const {
  if (watcher_ != 0 && wait_.hears_releases()) return turn_wake(now);
  const bool hears = wait_.hears_releases() && !wait_.wakes_queued_only();
  auto wait = jittered(std::chrono::nanoseconds(who_.options.retry_delay));
  if (holder_pttl_.count() >= 0) {
    const auto lease_end = std::chrono::nanoseconds(holder_pttl_ + std::chrono::milliseconds(1));
    wait = hears ? lease_end : std::min(wait, lease_end);
  }
  const auto until = now + wait;
  return deadline_ == kNoDeadline ? until : std::min(until, deadline_);
}

// A queued fair waiter's wake: the first two in the server's queue watch the holder's lease (an
// expiry announces nothing) and advance the queue when it ends, the second one a hand-over
// later (in case the first is gone too); the others sleep until a hand-over or a notice that
// they moved up. A holder with no expiry (PTTL -1: another client's plain SET) is polled by
// the watchers at jittered retry_delay. Every queued waiter, watcher or not, also attempts
// again once per stall guard (jittered, 1.125 to 1.375 of its ttl): the holder and both
// watchers may be dead, or the grantee paused, and the attempt advances a free key's queue.
SteadyClock::time_point AcquireLoop::turn_wake(SteadyClock::time_point now) const {
  const auto ttl = std::chrono::nanoseconds(who_.options.ttl);
  auto until = now + ttl + jittered(ttl / 4);  // the stall guard
  if (watcher_ <= 2) {
    SteadyClock::duration wait = jittered(std::chrono::nanoseconds(who_.options.retry_delay));
    if (holder_pttl_.count() >= 0) {
      wait = holder_pttl_ + std::chrono::milliseconds(1);
      if (watcher_ == 2) wait += std::chrono::milliseconds(250) + 4 * answer_time(round_trip_);
    }
    until = std::min(until, now + wait);
  }
  return deadline_ == kNoDeadline ? until : std::min(until, deadline_);
}

bool AcquireLoop::took_notice() {
  unsigned position = 0;
  std::chrono::milliseconds pttl{-1};
  if (!wait_.take_notice(position, pttl)) return false;
  watcher_ = static_cast<unsigned char>(position);
  holder_pttl_ = pttl;
  return true;
}

// Applies one attempt's outcome: a failure goes to the unavailability rule, a grant is taken.
bool AcquireLoop::settle(Try attempt) {
  holder_pttl_ = attempt.result.holder_pttl;
  watcher_ = attempt.result.watcher;
  round_trip_ = SteadyClock::now() - attempt.sent;
  if (event_) {
    ++event_->attempts;
    event_->granted = attempt.result.granted;
  }
  if (attempt.result.failure) {
    unavailable_.failed(attempt.result.failure);
    return false;
  }
  unavailable_.answered();
  if (!attempt.result.held) ++refused_;
  return attempt.result.held && taker_.take(attempt.result, std::move(attempt.token), attempt.sent);
}

bool AcquireLoop::take_hand_over() {
  Try handed;
  if (!wait_.hand_over(handed) ||
      !taker_.take(handed.result, std::move(handed.token), handed.sent)) {
    return false;
  }
  if (event_) {
    event_->handed_over = true;
    observe_wake(WakeKind::handed_over);
  }
  return true;
}

void AcquireLoop::observe_wake(WakeKind kind) const noexcept {
  Observer* const observer = observer_of(who_.options);
  if (observer) observer->on_wake(WakeEvent{who_.key, kind});
}

// Elder first: every process waiting for a lock hears a release at about the same moment, and
// without an order the one whose subscription the server writes to first wins nearly every
// race (one process took 10-15x another's share). A crowded wait (other processes wait too: a
// release of this object reached several, or another waiter won a release this one heard)
// holds back its attempt by (8 - refused) / 8 of answer_time: a process refused more often has
// waited through more releases and answers first; one that just arrived waits the longest. A lone
// waiter (the ping-pong hand-off) is never crowded and pays nothing; fair mode has its queue.
// Returns when the pause ends, or nothing for no pause.
std::optional<SteadyClock::time_point> AcquireLoop::elders_pause() const {
  constexpr unsigned kLevels = 8;  // refused 8 times or more: no pause
  if (!crowded_ || refused_ >= kLevels || who_.order != Order::elder_first) return std::nullopt;
  auto until = SteadyClock::now() + answer_time(round_trip_) * (kLevels - refused_) / kLevels;
  if (deadline_ != kNoDeadline) until = std::min(until, deadline_);
  return until;
}

}  // namespace detail
}  // namespace redlock
