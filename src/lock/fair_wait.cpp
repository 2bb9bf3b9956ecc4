// src/lock/fair_wait.cpp: fair mode's wait strategy (see fair_wait.hpp).
#include "lock/fair_wait.hpp"

#include <exception>
#include <utility>

#include "util/log_internal.hpp"
#include "util/sha1.hpp"
#include "util/token.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {

FairWait::FairWait(LeaseBackend& backend, FairWake wake, std::chrono::milliseconds retry_delay,
                   RetryLeave retry)
    : backend_(backend),
      wake_(wake),
      retry_(std::move(retry)),
      retry_delay_(retry_delay),
      token_(make_token()) {}

FairWait::~FairWait() = default;

Try FairWait::attempt(Attempt how) {
  if (how == Attempt::contended) queued_ = true;
  // A release heard before this attempt is seen by it: the key is free (taken now, or handed to
  // the head) or held by the one it went to, whose release hands over to this queue.
  if (how == Attempt::contended && watch_) watch_->spend_release_wake();
  Try out;
  out.sent = SteadyClock::now();
  sent_[seq_ % kKept] = out.sent;
  ++seq_;
  const Queue queue = how == Attempt::contended ? Queue::join : Queue::none;
  out.result = backend_.acquire(AcquireRequest{&token_, how, queue, seq_, claim_window()});
  // Held: the wait is over and the token becomes the hold's (no copy). Otherwise the Try's
  // token is not used.
  if (out.result.held) out.token = std::move(token_);
  if (!out.result.held && out.result.watcher > 2 && watch_) watch_->queued_behind_watchers();
  // A rollback that may not have reached a node (a failover under way) leaves our grant or
  // queue place there: retried in the background with this token, before it is retired.
  if (!out.result.undo_owed.empty() && retry_) retry_(token_, std::move(out.result.undo_owed));
  if (out.result.left_queue) {
    void_through_ = seq_;
    retire_token();
  }
  return out;
}

// A waiter that cannot be woken (wake_on_release = false, or no live subscription) polls at
// jittered retry_delay (at most 1.5 of it) or its holder's lease end: a hand-over to it waits
// that long plus a round trip for its next attempt, which re-arms the key to its ttl.
std::chrono::milliseconds FairWait::claim_window() const noexcept {
  if (hears_releases()) return std::chrono::milliseconds(0);
  return 2 * retry_delay_ + std::chrono::milliseconds(100);
}

void FairWait::retire_token() {
  token_ = make_token();
  queued_ = false;  // the old place is left by the fair_release; the new token has none yet
  if (watch_) watch_->retoken(sha1_hex(token_));
}

bool FairWait::hand_over(Try& out) {
  std::uint64_t granted = 0;
  std::uint64_t fence = 0;
  if (!watch_ || !watch_->take_grant(granted, fence) || granted <= void_through_ ||
      granted > seq_ || seq_ - granted >= kKept) {
    return false;
  }
  out.sent = sent_[(granted - 1) % kKept];
  out.result = backend_.handed_over(fence, out.sent);
  // Not held: too late to trust the message's validity; the next attempt re-arms the key.
  if (!out.result.held) return false;
  out.token = std::move(token_);
  return true;
}

void FairWait::leave() noexcept {
  if (!queued_ || token_.empty()) return;  // empty: it became the hold's token
  queued_ = false;
  try {
    ReleaseResult left = backend_.release(token_, Announce::waiters);
    if (!left.owed.empty() && retry_) retry_(token_, std::move(left.owed));
  } catch (const std::exception& e) {
    logf(LogLevel::debug, "redlock: leaving the queue of {}: {}", backend_.key(), e.what());
  } catch (...) {
  }
}

bool FairWait::watch_is_free() const noexcept {
  return wake_ == FairWake::releases && backend_.watch_live();
}

bool FairWait::hears_releases() const noexcept {
  return wake_ == FairWake::releases && watching() && backend_.watch_live();
}

std::unique_ptr<ReleaseWatch> FairWait::make_watch(SteadyClock::time_point deadline) {
  if (wake_ == FairWake::timer) return make_timer_watch();
  return backend_.watch(deadline, sha1_hex(token_));  // hand-overs name the token's SHA1
}

}  // namespace detail
}  // namespace redlock
