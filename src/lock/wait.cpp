// src/lock/wait.cpp: the polling and wake-on-release wait strategies and the unavailability rule.
#include "lock/wait.hpp"

#include <redlock/errors.hpp>

#include "util/log_internal.hpp"
#include "util/token.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {

bool WaitStrategy::hand_over(Try& /*out*/) { return false; }

void WaitStrategy::start_watch(Ownership& ownership, SteadyClock::time_point deadline) {
  watch_ = make_watch(deadline);
  registered_.emplace(ownership, *watch_);
}

Try PollingWait::attempt(Attempt how) {
  Try out;
  out.token = make_token();
  out.sent = SteadyClock::now();
  marked_ = marked_ || (how == Attempt::contended && backend_.attempt_marks_waiter());
  out.result = backend_.acquire(AcquireRequest{&out.token, how, Queue::none, 0});
  if (out.result.held) marked_ = false;  // the grant removed the mark
  return out;
}

void PollingWait::leave() noexcept {
  if (!marked_) return;
  marked_ = false;
  backend_.unmark_waiter();
}

std::unique_ptr<ReleaseWatch> PollingWait::make_watch(SteadyClock::time_point /*deadline*/) {
  return make_timer_watch();
}

std::unique_ptr<ReleaseWatch> WakeOnReleaseWait::make_watch(SteadyClock::time_point deadline) {
  return backend_.watch(deadline, std::string());
}

void Unavailability::failed(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const ServerError&) {
    throw;
  } catch (const Error& e) {
    if (call_ == Call::try_lock) throw;
    const auto now = SteadyClock::now();
    if (!last_) {
      since_ = now;
      logf(LogLevel::warn, "redlock: {} cannot be acquired now ({}); retrying for up to {} ms{}",
           key_, e.what(), max_.count(), forever_ ? "" : " or until the deadline");
    }
    last_ = failure;
    if (now - since_ >= max_) throw;
  }
}

void Unavailability::answered() {
  if (!last_) return;
  logf(LogLevel::info, "redlock: the servers for {} answer again", key_);
  last_ = nullptr;
}

bool Unavailability::give_up() const {
  if (last_) std::rethrow_exception(last_);
  return false;
}

}  // namespace detail
}  // namespace redlock
