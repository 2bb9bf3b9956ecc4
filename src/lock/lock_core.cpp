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
#include "lock/acquire_loop.hpp"
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

constexpr CallWords kWords{"lock() of ",
                           " by the thread that owns it, but its hold was lost; unlock() it first"};
// A handle acquire never re-enters, so its `lost` words are never used.
constexpr CallWords kHandleWords{"acquire() of ", ""};

}  // namespace

LockCore::LockCore(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string key,
                   LockOptions options)
    : LockCore(make_lease_engine(std::move(nodes), std::move(key), options), options) {}

LockCore::LockCore(std::shared_ptr<LeaseBackend> backend, LockOptions options)
    : options_(std::move(options)), backend_(std::move(backend)) {
  // Always a watchdog of its own reference: renewal, on_lost, and the background release retry
  // (which may run from ~Hold's job while the program exits, after Watchdog::shared()'s static).
  if (!options_.watchdog) options_.watchdog = Watchdog::shared();
}

template <class FenceOfHold>
bool LockCore::entered_acquire(Call call, SteadyClock::time_point deadline,
                               AcquireLoop::Taker& taker, const FenceOfHold& fence_of_hold) {
  Observer* const observer = observer_of(options_);
  if (!observer) return gated_acquire(call, deadline, nullptr, taker);
  return observed_acquire(
      *observer, backend_->key(), backend_->size(),
      [&](AcquireEvent* event) { return gated_acquire(call, deadline, event, taker); },
      fence_of_hold);
}

bool LockCore::acquire(Call call, SteadyClock::time_point deadline) {
  const Ownership::Entry entry = ownership_.enter(call, deadline);
  if (entry != Ownership::Entry::entered) return entry_result(entry, call, backend_->key(), kWords);
  return entered_acquire(call, deadline, *this,
                         [&] { return ownership_.hold_of_caller()->fence(); });
}

Held LockCore::acquire_handle(Call call, SteadyClock::time_point deadline) {
  const Ownership::Entry entry = ownership_.enter(call, deadline, Claim::handle);
  if (entry != Ownership::Entry::entered) {
    entry_result(entry, call, backend_->key(), kHandleWords);
    return {};
  }
  HandleTaker<LockCore> taker(*this);
  entered_acquire(call, deadline, taker, [&] { return taker.held().hold->fence(); });
  return taker.held();
}

// This thread alone of this process talks to the servers for this object until it holds the
// lock or gives up.
bool LockCore::gated_acquire(Call call, SteadyClock::time_point deadline, AcquireEvent* event,
                             AcquireLoop::Taker& taker) {
  // This object just released a lock others were waiting for: give the woken waiter the few
  // round trips it needs before competing again (no barging; see release()).
  const SteadyClock::time_point courtesy = courtesy_until();
  if (call != Call::try_lock && SteadyClock::now() < courtesy) {
    std::this_thread::sleep_until(std::min(courtesy, deadline));
  }
  bool held = false;
  try {
    held = attempts(call, deadline, event, taker);
  } catch (...) {
    ownership_.open_gate();
    throw;
  }
  if (!held) ownership_.open_gate();
  return held;
}

SteadyClock::time_point LockCore::courtesy_until() const noexcept {
  return SteadyClock::time_point{
      SteadyClock::duration(courtesy_until_.load(std::memory_order_acquire))};
}

AcquireLoop::Order LockCore::order() const noexcept {
  return !backend_->fair() && options_.wake_on_release ? AcquireLoop::Order::elder_first
                                                       : AcquireLoop::Order::none;
}

AcquireLoop::Waiter LockCore::handle_waiter() noexcept {
  return AcquireLoop::Waiter{ownership_, options_, backend_->key(), kHandleWords, order()};
}

// The wait strategy of one call (the same choice for the blocking and the async driver); the
// loop is the one every waiting primitive shares (lock/acquire_loop).
std::unique_ptr<WaitStrategy> LockCore::new_wait() {
  if (backend_->fair()) {
    // A queue place whose leave may not have run is left for one ttl at most: a grant to it
    // would live that long.
    auto retry = [this](const std::string& token, std::vector<char> owed) {
      retry_release(options_, backend_, token, std::move(owed),
                    SteadyClock::now() + backend_->ttl());
    };
    return std::make_unique<FairWait>(
        *backend_, options_.wake_on_release ? FairWake::releases : FairWake::timer,
        options_.retry_delay, std::move(retry));
  }
  if (options_.wake_on_release) return std::make_unique<WakeOnReleaseWait>(*backend_);
  return std::make_unique<PollingWait>(*backend_);
}

bool LockCore::attempts(Call call, SteadyClock::time_point deadline, AcquireEvent* event,
                        AcquireLoop::Taker& taker) {
  // A thread's call takes through this object; a handle's through its HandleTaker.
  const bool thread = &taker == static_cast<AcquireLoop::Taker*>(this);
  const AcquireLoop::Waiter waiter{ownership_, options_, backend_->key(),
                                   thread ? kWords : kHandleWords, order()};
  const std::unique_ptr<WaitStrategy> wait = new_wait();
  return AcquireLoop(waiter, taker, *wait, call, deadline, event, crowded()).run();
}

Held LockCore::start_hold(const AcquireResult& result, std::string token,
                          SteadyClock::time_point start) {
  auto hold =
      std::make_shared<HoldState>(std::move(token), result.fence, start, result.valid_until);
  if (!options_.auto_renew) return Held{hold, 0};
  try {
    Access::watchdog(*options_.watchdog)
        .watch(backend_, hold,
               WatchSettings{options_.max_renewals, options_.max_hold, options_.on_lost,
                             options_.observer});
  } catch (...) {
    // Could not start renewal (thread creation failed): do not hand out a hold the caller
    // believes is renewed. Roll back and report.
    hold->mark_released();
    try {
      backend_->release(hold->token(), Announce::waiters);
    } catch (...) {
    }
    throw;
  }
  return Held{hold, 0};
}

bool LockCore::take(const AcquireResult& result, std::string token, SteadyClock::time_point start) {
  ownership_.own(start_hold(result, std::move(token), start));
  thread_holds().add(shared_from_this());
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
  return release_last(last.hold);
}

bool LockCore::release_handle(const Held& held) { return release_last(held.hold); }

bool LockCore::release_last(const std::shared_ptr<HoldState>& hold) {
  const HoldEnd end = end_hold(*hold, backend_, options_);
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

// Waiters heard a release that started at `release_start`. Hold back this object's next acquire
// for as long as a woken waiter needs to answer.
void LockCore::hold_back_after(SteadyClock::time_point release_start) {
  const auto pause = answer_time(SteadyClock::now() - release_start);
  courtesy_until_.store((SteadyClock::now() + pause).time_since_epoch().count(),
                        std::memory_order_release);
}

bool LockCore::extend(std::chrono::milliseconds ttl) {
  return extend_hold(ownership_.hold_of_caller(), *backend_, options_, backend_->key(), ttl);
}

bool LockCore::extend_handle(const Held& held, std::chrono::milliseconds ttl) {
  return extend_hold(held.hold, *backend_, options_, backend_->key(), ttl);
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
  end_hold_quietly(*held.hold, backend_, options_, backend_->key(), "");
  ownership_.open_gate();
}

void LockCore::destroy() noexcept {
  const Held held = ownership_.disown();
  if (!held.hold) return;
  end_hold_quietly(*held.hold, backend_, options_, backend_->key(), " while destroying the lock");
}

}  // namespace detail
}  // namespace redlock
