// src/lock/semaphore.cpp: Semaphore: acquiring and waiting for a permit (the one acquire loop,
// lock/acquire_loop, over the permits' wait strategy: the wake-one queue, or with fair = false
// wake-on-release and a backoff bounded by the earliest slot expiry), its validity, renewal
// hand-off, release and loss. The permits are a PermitBackend (core/backend.hpp; Redis's is
// core/permits); thread ownership, the local queue, cancellation and the end of a hold are a Lock's
// (lock/ownership, lock/hold_end).
#include <redlock/semaphore.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include <redlock/errors.hpp>
#include <redlock/watchdog.hpp>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "core/hold.hpp"
#include "core/permits.hpp"
#include "lock/acquire_loop.hpp"
#include "lock/async_acquire.hpp"
#include "lock/hold_end.hpp"
#include "lock/hold_owner.hpp"
#include "lock/observed.hpp"
#include "lock/ownership.hpp"
#include "util/log_internal.hpp"
#include "util/observe.hpp"
#include "util/sha1.hpp"
#include "util/token.hpp"
#include "watch/release_watch.hpp"
#include "watch/watchdog_impl.hpp"

namespace redlock {
namespace detail {
namespace {

LockOptions validated(std::size_t limit, const std::string& key, LockOptions options) {
  if (limit == 0 || limit > Semaphore::kMaxLimit) {
    throw std::invalid_argument(
        fmt::format("redlock: limit must be in 1..{} (got {})", Semaphore::kMaxLimit, limit));
  }
  if (key.empty()) throw std::invalid_argument("redlock: key must not be empty");
  if (key.size() > kMaxKeyBytes / limit) {
    throw std::invalid_argument(fmt::format(
        "redlock: key of {} bytes times limit {} exceeds 4 MiB (every attempt names each of the "
        "limit slot keys); use a shorter key or a smaller limit",
        key.size(), limit));
  }
  // Always a watchdog of its own reference: renewal, on_lost, and the background release retry
  // (which may run from ~Hold's job while the program exits, after Watchdog::shared()'s static).
  if (!options.watchdog) options.watchdog = Watchdog::shared();
  return options;
}

}  // namespace

constexpr CallWords kWords{"acquire() of a permit of ",
                           " by the thread that owns one, but it was lost; release() it first"};
// A handle acquire never re-enters, so its `lost` words are never used.
constexpr CallWords kHandleWords{"acquire_hold() of a permit of ", ""};

// A Semaphore's wait strategy. Fair (the default), it is the lock's waiter model (docs/
// ARCHITECTURE.md, "The waiter model") over the permits: one token is the waiter's place in the
// semaphore's wake-one queue for the whole wait; a release hands the permit to the oldest live
// waiter (its slot set to the token, a grant published on its process's channel, nobody else
// woken), which claims it with its next attempt; the first two waiters watch the permits' lease
// ends (AcquireLoop::turn_wake), the others sleep until their grant; a waiter that gives up
// leaves (passing on a permit handed to it meanwhile). With fair = false each attempt uses a new
// token, and a wait watches the permits' release channel (every waiting process wakes on a
// release) or a timer, retrying within retry_delay, never later than the earliest expiry.
class PermitWait final : public WaitStrategy {
 public:
  // Makes the waiter's token. Throws what token generation throws.
  PermitWait(PermitBackend& permits, bool wake_on_release)
      : permits_(permits), wake_(wake_on_release), token_(make_token()) {}

  // A failure to reach the server is the attempt's result (the unavailability rule decides).
  Try attempt(Attempt how) override {
    if (token_.empty() || !permits_.fair()) retire_token();  // empty: a grant given back
    const Queue queue = how == Attempt::contended ? Queue::join : Queue::none;
    if (queue == Queue::join && permits_.fair()) queued_ = true;  // unfair: nothing to leave
    Try out;
    out.sent = SteadyClock::now();
    try {
      out.result = permits_.acquire(token_, queue);
    } catch (const Error&) {
      out.result.failure = std::current_exception();
      // Its rollback (the leave script) may reach the server after later attempts: with the
      // same token it would give up what they took. The rollback leaves the queue place too.
      retire_token();
    }
    if (out.result.held) out.token = std::move(token_);
    return out;
  }
  // No hand_over(): a grant only wakes the wait (it is never consumed before the wake-up is, so
  // a notice handled first cannot hide it), and the attempt that follows claims the permit.
  void leave() noexcept override {
    if (!queued_ || token_.empty()) return;
    queued_ = false;
    try {
      permits_.leave(token_);
    } catch (const std::exception& e) {
      logf(LogLevel::debug, "redlock: leaving the queue of {}: {}", permits_.key(), e.what());
    } catch (...) {
    }
  }
  bool watch_is_free() const noexcept override { return subscribes() && permits_.watch_live(); }
  bool hears_releases() const noexcept override {
    return subscribes() && watching() && permits_.watch_live();
  }
  bool queues() const noexcept override { return permits_.fair(); }

 protected:
  std::unique_ptr<ReleaseWatch> make_watch(SteadyClock::time_point deadline) override {
    return wake_ ? permits_.watch(deadline, sha1_hex(token_)) : make_timer_watch();
  }

 private:
  // Fair with wake_on_release: grants reach this waiter, so it sleeps until one (or its turn to
  // watch a lease end) instead of retrying every retry_delay.
  bool subscribes() const noexcept { return wake_ && permits_.fair(); }
  void retire_token() {
    token_ = make_token();
    queued_ = false;
    if (watch_ && permits_.fair()) watch_->retoken(sha1_hex(token_));
  }

  PermitBackend& permits_;
  const bool wake_;
  std::string token_;
  bool queued_{false};  // a contended attempt may have taken a place in the queue
};

class SemaphoreCore final : public HoldOwner, private AcquireLoop::Taker {
 public:
  SemaphoreCore(Client client, std::string key, std::size_t limit, LockOptions options);

  bool acquire(Call call, SteadyClock::time_point deadline);
  // A permit owned by a handle (Semaphore::acquire_hold and try_acquire_hold_for): what was
  // taken, a null hold if none. Throws as acquire(), and std::logic_error when the calling
  // thread owns this object's thread permit.
  Held acquire_handle(Call call, SteadyClock::time_point deadline);
  // A granted permit made a hold, renewed with auto_renew; nobody owns it yet. Throws if renewal
  // could not start (the permit is then given back).
  Held start_hold(const AcquireResult& result, std::string token,
                  SteadyClock::time_point start) override;
  bool release();
  // HoldOwner: a handle acquire that does not block (lock/async_acquire).
  Ownership& gate() noexcept override { return ownership_; }
  AcquireLoop::Waiter handle_waiter() noexcept override {
    return AcquireLoop::Waiter{ownership_, options_, key_, kHandleWords, AcquireLoop::Order::none};
  }
  std::unique_ptr<WaitStrategy> new_wait() override {
    return std::make_unique<PermitWait>(*permits_, options_.wake_on_release);
  }
  // HoldOwner (lock/hold_owner.hpp): a Hold's release and extend.
  bool release_handle(const Held& held) override { return release_last(held); }
  bool extend_handle(const Held& held, std::chrono::milliseconds ttl) override {
    return extend_hold(held.hold, *permits_->permit(held.slot), options_, key_, ttl);
  }
  std::chrono::milliseconds ttl() const noexcept override { return options_.ttl; }
  std::string describe() const override { return "a permit of " + key_; }
  void destroy() noexcept;
  void cancel() noexcept { ownership_.cancel(); }

  const Ownership& ownership() const noexcept { return ownership_; }
  const std::string& key() const noexcept { return key_; }
  std::size_t limit() const noexcept { return permits_->limit(); }
  const LockOptions& options() const noexcept { return options_; }

 private:
  // Enters the local queue; false (and `result`) when the call ends there.
  bool entered(Call call, SteadyClock::time_point deadline, Claim claim, bool& result);
  template <class FenceOfHold>
  bool entered_acquire(Call call, SteadyClock::time_point deadline, AcquireLoop::Taker& taker,
                       const FenceOfHold& fence_of_hold);
  bool gated_acquire(Call call, SteadyClock::time_point deadline, AcquireEvent* event,
                     AcquireLoop::Taker& taker);
  bool take(const AcquireResult& result, std::string token, SteadyClock::time_point start) override;
  bool release_last(const Held& last);
  void report_lost(const std::shared_ptr<HoldState>& hold, LostReason reason);

  std::string key_;
  LockOptions options_;
  std::unique_ptr<PermitBackend> permits_;
  Ownership ownership_;
};

SemaphoreCore::SemaphoreCore(Client client, std::string key, std::size_t limit, LockOptions options)
    : key_(std::move(key)),
      options_(validated(limit, key_, std::move(options))),
      permits_(make_redis_permits(std::move(client), key_, limit, options_)) {}

bool SemaphoreCore::entered(Call call, SteadyClock::time_point deadline, Claim claim,
                            bool& result) {
  const Ownership::Entry entry = ownership_.enter(call, deadline, claim);
  if (entry != Ownership::Entry::entered) {
    result = entry_result(entry, call, key_, claim == Claim::thread ? kWords : kHandleWords);
    return false;
  }
  if (ownership_.cancelled()) {  // try_acquire() too ends after cancel_waits()
    ownership_.open_gate();
    result = cancelled_result(call, key_, claim == Claim::thread ? kWords : kHandleWords);
    return false;
  }
  return true;
}

template <class FenceOfHold>
bool SemaphoreCore::entered_acquire(Call call, SteadyClock::time_point deadline,
                                    AcquireLoop::Taker& taker, const FenceOfHold& fence_of_hold) {
  Observer* const observer = observer_of(options_);
  if (!observer) return gated_acquire(call, deadline, nullptr, taker);
  return observed_acquire(
      *observer, key_, 1,
      [&](AcquireEvent* event) { return gated_acquire(call, deadline, event, taker); },
      fence_of_hold);
}

bool SemaphoreCore::acquire(Call call, SteadyClock::time_point deadline) {
  bool result = false;
  if (!entered(call, deadline, Claim::thread, result)) return result;
  return entered_acquire(call, deadline, *this,
                         [&] { return ownership_.hold_of_caller()->fence(); });
}

Held SemaphoreCore::acquire_handle(Call call, SteadyClock::time_point deadline) {
  bool result = false;
  if (!entered(call, deadline, Claim::handle, result)) return {};
  HandleTaker<SemaphoreCore> taker(*this);
  entered_acquire(call, deadline, taker, [&] { return taker.held().hold->fence(); });
  return taker.held();
}

bool SemaphoreCore::gated_acquire(Call call, SteadyClock::time_point deadline, AcquireEvent* event,
                                  AcquireLoop::Taker& taker) {
  bool held = false;
  try {
    const std::unique_ptr<WaitStrategy> wait = new_wait();
    // A thread's call takes through this object; a handle's through its HandleTaker.
    const bool thread = &taker == static_cast<AcquireLoop::Taker*>(this);
    const AcquireLoop::Waiter waiter{ownership_, options_, key_, thread ? kWords : kHandleWords,
                                     AcquireLoop::Order::none};
    held = AcquireLoop(waiter, taker, *wait, call, deadline, event, false).run();
  } catch (...) {
    ownership_.open_gate();
    throw;
  }
  if (!held) ownership_.open_gate();
  return held;
}

Held SemaphoreCore::start_hold(const AcquireResult& result, std::string token,
                               SteadyClock::time_point start) {
  auto hold =
      std::make_shared<HoldState>(std::move(token), result.fence, start, result.valid_until);
  if (!options_.auto_renew) return Held{hold, result.slot};
  const std::shared_ptr<LeaseBackend> lease = permits_->permit(result.slot);
  try {
    // on_lost names the semaphore's key, not the slot key the watchdog renews.
    WatchSettings settings{options_.max_renewals, options_.max_hold, {}, options_.observer};
    if (options_.on_lost) {
      settings.on_lost = [on_lost = options_.on_lost, key = key_](const LostEvent& e) {
        LostEvent event = e;
        event.key = key;
        on_lost(event);
      };
    }
    Access::watchdog(*options_.watchdog).watch(lease, hold, std::move(settings));
  } catch (...) {
    // Renewal could not start: do not hand out a permit the caller believes is renewed.
    hold->mark_released();
    try {
      lease->release(hold->token(), Announce::waiters);  // handed on, in fair mode
    } catch (...) {
    }
    throw;
  }
  return Held{hold, result.slot};
}

bool SemaphoreCore::take(const AcquireResult& result, std::string token,
                         SteadyClock::time_point start) {
  ownership_.own(start_hold(result, std::move(token), start));
  return true;
}

void SemaphoreCore::report_lost(const std::shared_ptr<HoldState>& hold, LostReason reason) {
  report_loss(hold, reason, options_, key_);
}

bool SemaphoreCore::release() {
  Held last;
  switch (ownership_.exit(last)) {
    case Ownership::Exit::not_owner:
      logf(LogLevel::warn,
           "redlock: release of a permit of {} by a thread that holds none; nothing was done",
           key_);
      return false;
    case Ownership::Exit::nested_valid:
      return true;
    case Ownership::Exit::nested_lost:
      return false;
    case Ownership::Exit::last:
      break;
  }
  return release_last(last);
}

bool SemaphoreCore::release_last(const Held& last) {
  const std::shared_ptr<HoldState>& hold = last.hold;
  const HoldEnd end = end_hold(*hold, permits_->permit(last.slot), options_);
  observe_release(observer_of(options_), key_, *hold, end);
  if (end.lost) report_lost(hold, end.reason);
  hold->mark_released();
  ownership_.open_gate();
  if (end.error) std::rethrow_exception(end.error);
  return end.kept;
}

void SemaphoreCore::destroy() noexcept {
  const Held held = ownership_.disown();
  if (!held.hold) return;
  try {
    end_hold_quietly(*held.hold, permits_->permit(held.slot), options_, "a permit of " + key_,
                     " while destroying the semaphore");
  } catch (...) {  // bad_alloc naming it: the permit expires by its ttl
    held.hold->mark_released();
  }
}

}  // namespace detail

// ---- Semaphore -----------------------------------------------------------------------------

Semaphore::Semaphore(Client client, std::string key, std::size_t limit, LockOptions options)
    : core_(std::make_shared<detail::SemaphoreCore>(std::move(client), std::move(key), limit,
                                                    std::move(options))) {}

Semaphore::~Semaphore() { core_->destroy(); }

void Semaphore::acquire() {
  core_->acquire(detail::Call::lock, detail::SteadyClock::time_point::max());
}

bool Semaphore::try_acquire() {
  return core_->acquire(detail::Call::try_lock, detail::SteadyClock::now());
}

bool Semaphore::try_acquire_for_ns(std::chrono::nanoseconds timeout) {
  const detail::TimedCall timed = detail::timed_call(timeout);
  return core_->acquire(timed.call, timed.deadline);
}

Hold Semaphore::acquire_hold() {
  detail::Held held =
      core_->acquire_handle(detail::Call::lock, detail::SteadyClock::time_point::max());
  return detail::Access::hold(core_, std::move(held.hold), held.slot);
}

std::optional<Hold> Semaphore::try_acquire_hold_for_ns(std::chrono::nanoseconds timeout) {
  const detail::TimedCall timed = detail::timed_call(timeout);
  detail::Held held = core_->acquire_handle(timed.call, timed.deadline);
  if (!held.hold) return std::nullopt;
  return detail::Access::hold(core_, std::move(held.hold), held.slot);
}

bool Semaphore::release() { return core_->release(); }

void Semaphore::unlock() noexcept {
  try {
    core_->release();
  } catch (const std::exception& e) {
    detail::logf(LogLevel::warn,
                 "redlock: unlock of a permit of {} failed ({}); it expires by its ttl",
                 core_->key(), e.what());
  } catch (...) {
  }
}

void Semaphore::cancel_waits() noexcept { core_->cancel(); }

bool Semaphore::owns_permit() const noexcept { return core_->ownership().owns(); }

std::chrono::milliseconds Semaphore::validity() const noexcept {
  return detail::validity_of(core_->ownership().hold().get());
}

std::uint64_t Semaphore::fence() const noexcept {
  auto hold = core_->ownership().hold();
  return hold ? hold->fence() : 0;
}

LeaseToken Semaphore::lease() const noexcept {
  return detail::Access::lease(core_->ownership().hold());
}

std::size_t Semaphore::slot() const noexcept { return core_->ownership().slot(); }

const std::string& Semaphore::key() const noexcept { return core_->key(); }

std::size_t Semaphore::limit() const noexcept { return core_->limit(); }

const LockOptions& Semaphore::options() const noexcept { return core_->options(); }

namespace detail {

std::shared_ptr<AsyncOperation> async_acquire(Semaphore& semaphore,
                                              std::optional<std::chrono::nanoseconds> timeout,
                                              AsyncCompletionPtr completion) {
  return start_async_acquire(Access::core(semaphore), timeout, std::move(completion));
}

}  // namespace detail
}  // namespace redlock
