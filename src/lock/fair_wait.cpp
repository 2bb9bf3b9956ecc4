// src/lock/fair_wait.cpp: fair mode's wait strategy (see fair_wait.hpp).
#include "lock/fair_wait.hpp"

#include <exception>

#include "util/log_internal.hpp"
#include "util/sha1.hpp"
#include "util/token.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {

FairWait::FairWait(LeaseBackend& backend, FairWake wake)
    : WaitStrategy(backend), wake_(wake), token_(make_token()), token_sha1_(sha1_hex(token_)) {}

FairWait::~FairWait() = default;

Try FairWait::attempt(Attempt how) {
  if (how == Attempt::contended) queued_ = true;
  Try out;
  out.token = token_;
  out.sent = SteadyClock::now();
  sent_[seq_ % kKept] = out.sent;
  ++seq_;
  const Queue queue = how == Attempt::contended ? Queue::join : Queue::none;
  out.result = backend_.acquire(AcquireRequest{&out.token, how, queue, seq_});
  if (out.result.left_queue) {
    void_through_ = seq_;
    retire_token();
  }
  return out;
}

void FairWait::retire_token() {
  token_ = make_token();
  token_sha1_ = sha1_hex(token_);
  queued_ = false;  // the old place is left by the fair_release; the new token has none yet
  if (watch_) watch_->retoken(token_sha1_);
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
  out.token = token_;
  // Not held: too late to trust the message's validity; the next attempt re-arms the key.
  return out.result.held;
}

void FairWait::leave() noexcept {
  if (!queued_) return;
  queued_ = false;
  try {
    backend_.release(token_, Announce::waiters);
  } catch (const std::exception& e) {
    logf(LogLevel::debug, "redlock: leaving the queue of {}: {}", backend_.key(), e.what());
  } catch (...) {
  }
}

bool FairWait::watch_is_free() const noexcept {
  return wake_ == FairWake::releases && backend_.watch_live();
}

std::unique_ptr<ReleaseWatch> FairWait::make_watch(SteadyClock::time_point deadline) {
  if (wake_ == FairWake::timer) return make_timer_watch();
  return backend_.watch(deadline, token_sha1_);
}

}  // namespace detail
}  // namespace redlock
