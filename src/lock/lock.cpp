// src/lock/lock.cpp: Lock and Redlock on top of the lease engine: thread ownership, re-entrancy,
// local queueing, waiting (jittered backoff + wake-on-release), the watchdog hand-off.
#include <redlock/lock.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include <redlock/errors.hpp>
#include <redlock/watchdog.hpp>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "core/hold.hpp"
#include "util/log_internal.hpp"
#include "util/sha1.hpp"
#include "util/token.hpp"
#include "watch/subscriber.hpp"
#include "watch/watchdog_impl.hpp"

namespace redlock {
namespace detail {
namespace {

std::vector<std::shared_ptr<ClientImpl>> impls_of(const std::vector<Client>& clients) {
  std::vector<std::shared_ptr<ClientImpl>> out;
  out.reserve(clients.size());
  for (const auto& c : clients) out.push_back(Access::client(c));
  return out;
}

// Subscribes one waiter to the lock's release channel on every node for the duration of a
// contended wait. Registration goes to all nodes first; confirmations are then awaited together,
// until one shared deadline (at most connect + command timeout, and never past the caller's own
// deadline), so a dead or slow node costs at most that once, not once per node.
class SubscriptionWatch {
 public:
  // `token_sha1`: fair mode, SHA1 of the token the waiter queues with (hand-overs naming it come
  // to this watch).
  SubscriptionWatch(const LeaseEngine& engine, bool enabled,
                    SteadyClock::time_point caller_deadline, std::string token_sha1 = {})
      : engine_(engine), slot_(std::move(token_sha1)) {
    if (!enabled) return;
    watched_.reserve(engine_.nodes().size());
    std::chrono::milliseconds limit{0};
    for (const auto& node : engine_.nodes()) {
      Subscriber* subscriber = nullptr;
      try {
        subscriber = &node->subscriber();
        each_channel(engine_, [&](const std::string& c) { subscriber->watch(c, &slot_); });
        watched_.push_back(node.get());
        limit =
            std::max(limit, node->endpoint().connect_timeout + node->endpoint().command_timeout);
      } catch (const std::exception& e) {
        // Whatever was registered must not outlive this slot.
        if (subscriber != nullptr) {
          each_channel(engine_, [&](const std::string& c) { subscriber->unwatch(c, &slot_); });
        }
        logf(LogLevel::debug, "redlock: cannot subscribe for {}: {}", engine_.key(), e.what());
      }
    }
    const auto deadline = std::min(SteadyClock::now() + limit, caller_deadline);
    // The attempt that follows must come after the subscriptions are live (no lost wake-up); a
    // node that does not confirm in time leaves this waiter to its timer there.
    for (ClientImpl* node : watched_) {
      each_channel(engine_,
                   [&](const std::string& c) { node->subscriber().confirmed(c, deadline); });
    }
  }
  ~SubscriptionWatch() {
    for (ClientImpl* node : watched_) {
      each_channel(engine_, [&](const std::string& c) { node->subscriber().unwatch(c, &slot_); });
    }
  }
  SubscriptionWatch(const SubscriptionWatch&) = delete;
  SubscriptionWatch& operator=(const SubscriptionWatch&) = delete;

  // True if every node's subscriber already has a live subscription to the lock's channel (a
  // watch would be confirmed at once). Never throws; false when unsure.
  static bool live(const LeaseEngine& engine) noexcept {
    try {
      for (const auto& node : engine.nodes()) {
        const Subscriber* s = node->started_subscriber();
        bool all = s != nullptr;
        each_channel(engine, [&](const std::string& c) { all = all && s->subscribed(c); });
        if (!all) return false;
      }
      return true;
    } catch (...) {
      return false;
    }
  }

  // Waits until a release is announced or `until`. Without a confirmed subscription the timer
  // does the work, but a wake-up that reaches the slot anyway is still taken.
  void wait_until(SteadyClock::time_point until) { slot_.wait_until(until); }
  // What cancel_waits() wakes.
  WakeSlot& slot() noexcept { return slot_; }
  // Fair mode: a hand-over that arrived (see WakeSlot::take_grant).
  bool take_grant(std::uint64_t& seq, std::uint64_t& fence) noexcept {
    return slot_.take_grant(seq, fence);
  }

 private:
  // Calls f with the release channel, and in fair mode with this process's own hand-over
  // channel too.
  template <class F>
  static void each_channel(const LeaseEngine& engine, F&& f) {
    f(engine.channel());
    if (engine.fair()) f(engine.grant_channel());
  }

  const LeaseEngine& engine_;
  WakeSlot slot_;
  std::vector<ClientImpl*> watched_;
};

}  // namespace

// How a caller waits: try_lock() once, try_lock_for/until() until a deadline, or lock().
enum class Call { try_lock, try_lock_for, lock };

namespace {

// The unavailability rule of one wait: try_lock() throws a transport failure at once; a wait
// logs one warning when attempts start failing that way, one info when the servers answer again,
// and at its deadline throws the failure if the last attempt was one. Server error replies are
// never unavailability: they always throw.
class Unavailability {
 public:
  Unavailability(const std::string& key, Call call, bool forever,
                 std::chrono::milliseconds max_unavailable)
      : key_(key), call_(call), forever_(forever), max_(max_unavailable) {}

  // The attempt failed with `failure`: rethrows it, or records it and returns.
  void failed(const std::exception_ptr& failure) {
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
  // The servers answered the attempt (granted or refused).
  void answered() {
    if (!last_) return;
    logf(LogLevel::info, "redlock: the servers for {} answer again", key_);
    last_ = nullptr;
  }
  // The deadline passed: returns false (contention), or throws the last failure.
  bool give_up() const {
    if (last_) std::rethrow_exception(last_);
    return false;
  }

 private:
  const std::string& key_;
  const Call call_;
  const bool forever_;
  const std::chrono::milliseconds max_;  // LockOptions::max_unavailable
  SteadyClock::time_point since_{};      // the first failure of the current outage
  std::exception_ptr last_;
};

}  // namespace

class LockCore : public std::enable_shared_from_this<LockCore> {
 public:
  LockCore(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string key, LockOptions options)
      : options_(std::move(options)),
        engine_(std::make_shared<LeaseEngine>(std::move(nodes), std::move(key), options_)) {
    if (options_.auto_renew || options_.on_lost) {
      if (!options_.watchdog) options_.watchdog = Watchdog::shared();
    }
  }

  // `deadline` max(): no deadline.
  bool acquire(Call call, SteadyClock::time_point deadline);
  bool release();
  bool extend(std::chrono::milliseconds ttl);
  void destroy() noexcept;
  void cancel_waits() noexcept;
  // The thread that owns the hold is exiting: release the hold (best effort), so that no thread
  // that gets the same std::thread::id later inherits it.
  void orphaned() noexcept;

  // The calling thread's hold, if it has one.
  std::shared_ptr<HoldState> hold_of_caller() const noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    return owner_ == std::this_thread::get_id() ? hold_ : nullptr;
  }
  bool owns() const noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    return owner_ == std::this_thread::get_id() && hold_ && !hold_->lost(SteadyClock::now());
  }
  std::shared_ptr<HoldState> hold() const noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    return hold_;
  }

  const LockOptions& options() const noexcept { return options_; }
  const LeaseEngine& engine() const noexcept { return *engine_; }

 private:
  bool attempts(Call call, SteadyClock::time_point deadline);
  bool give_up(Call call);
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }
  bool take(const AcquireResult& result, std::string token, SteadyClock::time_point start);
  void free_gate() {
    std::lock_guard<std::mutex> guard(mutex_);
    busy_ = false;
    local_.notify_one();
  }
  void report_lost(const std::shared_ptr<HoldState>& hold, LostReason reason) {
    if (hold->mark_lost(reason) && options_.on_lost && options_.watchdog) {
      Access::watchdog(*options_.watchdog)
          .report_lost(engine_->key(), hold, options_.on_lost, reason);
    }
  }

  LockOptions options_;
  std::shared_ptr<LeaseEngine> engine_;

  mutable std::mutex mutex_;
  std::condition_variable local_;  // threads of this process queueing for this object
  bool busy_{false};               // a thread of this process is acquiring or holds the lock
  std::thread::id owner_{};
  std::size_t depth_{0};
  std::shared_ptr<HoldState> hold_;
  SteadyClock::time_point courtesy_until_{};  // no acquire attempt before this (anti-barging)
  std::atomic<bool> cancelled_{false};        // cancel_waits() was called
  std::vector<WakeSlot*> waiting_;            // slots of the waits in progress (cancel wakes them)
};

namespace {

// One per thread that ever acquired: when the thread exits, the locks it still holds are
// released (their owner id may be given to a new thread).
class ThreadHolds {
 public:
  ThreadHolds() = default;
  ThreadHolds(const ThreadHolds&) = delete;
  ThreadHolds& operator=(const ThreadHolds&) = delete;
  ~ThreadHolds() {
    for (auto& weak : cores_) {
      if (auto core = weak.lock()) core->orphaned();
    }
  }
  void add(const std::shared_ptr<LockCore>& core) {
    cores_.erase(std::remove_if(cores_.begin(), cores_.end(),
                                [](const std::weak_ptr<LockCore>& w) { return w.expired(); }),
                 cores_.end());
    for (const auto& weak : cores_) {
      if (weak.lock() == core) return;
    }
    cores_.push_back(core);
  }

 private:
  std::vector<std::weak_ptr<LockCore>> cores_;
};

ThreadHolds& thread_holds() {
  thread_local ThreadHolds holds;
  return holds;
}

// Registers a wait's wake slot with its lock for the wait's duration (cancel_waits wakes it).
class WaitingSlot {
 public:
  WaitingSlot(std::mutex& mutex, std::vector<WakeSlot*>& waiting)
      : mutex_(mutex), waiting_(waiting) {}
  ~WaitingSlot() {
    if (slot_ == nullptr) return;
    std::lock_guard<std::mutex> guard(mutex_);
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), slot_));
  }
  WaitingSlot(const WaitingSlot&) = delete;
  WaitingSlot& operator=(const WaitingSlot&) = delete;
  void set(WakeSlot& slot) {
    std::lock_guard<std::mutex> guard(mutex_);
    slot_ = &slot;
    waiting_.push_back(slot_);
  }

 private:
  std::mutex& mutex_;
  std::vector<WakeSlot*>& waiting_;
  WakeSlot* slot_{nullptr};
};

}  // namespace

bool LockCore::acquire(Call call, SteadyClock::time_point deadline) {
  const bool wait_forever = deadline == SteadyClock::time_point::max();
  std::unique_lock<std::mutex> lock(mutex_);
  if (owner_ == std::this_thread::get_id()) {
    // Re-entrant: a lost hold is not silently re-acquired; lock() still counts so that unlocks
    // balance, try_lock*() report false.
    if (hold_ && !hold_->lost(SteadyClock::now())) {
      ++depth_;
      return true;
    }
    if (call == Call::lock) {
      // lock() must not return without the lock, and this thread cannot wait for itself.
      throw Error("redlock: lock() of " + engine_->key() +
                  " by the thread that owns it, but its hold was lost; unlock() it first");
    }
    return false;
  }
  // Queue behind other threads of this process: only one of them talks to Redis at a time.
  const auto free_or_cancelled = [this] { return !busy_ || cancelled(); };
  if (call == Call::try_lock) {
    if (busy_) return false;
  } else if (wait_forever) {
    local_.wait(lock, free_or_cancelled);
  } else if (!local_.wait_until(lock, deadline, free_or_cancelled)) {
    return false;
  }
  if (call != Call::try_lock && cancelled()) {
    lock.unlock();
    return give_up(call);
  }
  busy_ = true;
  const auto courtesy = courtesy_until_;
  lock.unlock();
  // This object just released a lock others were waiting for: give the woken waiter the few
  // round trips it needs before competing again (no barging; see release()).
  if (call != Call::try_lock && SteadyClock::now() < courtesy) {
    std::this_thread::sleep_until(std::min(courtesy, deadline));
  }
  bool held = false;
  try {
    held = attempts(call, deadline);
  } catch (...) {
    free_gate();
    throw;
  }
  if (!held) free_gate();
  return held;
}

bool LockCore::give_up(Call call) {
  if (call == Call::lock) {
    throw CancelledError("redlock: lock() of " + engine_->key() +
                         " was cancelled by cancel_waits()");
  }
  return false;
}

void LockCore::cancel_waits() noexcept {
  cancelled_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> guard(mutex_);
  for (WakeSlot* slot : waiting_) slot->notify();
  local_.notify_all();
}

// Fair mode differs in three ways. One token serves the whole wait: it is the waiter's place in
// the server's queue, and each attempt refreshes it. A release hands the lock over by setting the
// key to our token and publishing "grant:<seq>:<fence>:<SHA1 of the token>" on this process's
// own channel, where seq numbers the last attempt the server had seen; that attempt was sent before
// the key was set, so a lease counted from its send time ends no later than the server's, and no
// round trip is needed. A waiter that gives up leaves the queue (passing on a hand-over that raced
// with its deadline). An attempt after which the engine ran fair_release with the token (a
// rollback) voids every hand-over naming it or an earlier attempt.
// Unavailability (the servers cannot be reached) ends try_lock() with the error; a wait rides it
// out until its deadline, and throws it if the last attempt failed that way.
bool LockCore::attempts(Call call, SteadyClock::time_point deadline) {
  const bool wait_forever = deadline == SteadyClock::time_point::max();
  const bool single_attempt = call == Call::try_lock;
  const bool fair = engine_->fair();
  const std::string fair_token = fair ? make_token() : std::string();
  const std::string fair_token_sha1 = fair ? sha1_hex(fair_token) : std::string();
  std::uint64_t seq = 0;
  std::uint64_t void_through = 0;  // fair mode: hand-overs naming attempts up to this are void
  // Fair mode: send times of the recent attempts; attempt s was sent at sent[(s - 1) % kKept].
  constexpr std::uint64_t kKept = 32;
  SteadyClock::time_point sent[kKept];
  Unavailability unavailable(engine_->key(), call, wait_forever, options_.max_unavailable);
  auto attempt = [&](bool contended, AcquireResult& out) {
    std::string token = fair ? fair_token : make_token();
    const auto start = SteadyClock::now();
    sent[seq % kKept] = start;
    ++seq;
    out = engine_->acquire(token, contended, fair && contended, seq);
    if (out.left_queue) void_through = seq;
    if (out.failure) {
      unavailable.failed(out.failure);
      return false;
    }
    unavailable.answered();
    return out.held && take(out, std::move(token), start);
  };
  bool queued = false;  // fair mode: an attempt may have taken a place in the queue
  auto leave_queue = [&]() noexcept {
    if (!queued) return;
    try {
      engine_->release(fair_token);
    } catch (const std::exception& e) {
      logf(LogLevel::debug, "redlock: leaving the queue of {}: {}", engine_->key(), e.what());
    } catch (...) {
    }
  };
  auto contended_attempt = [&](AcquireResult& out) {
    queued = fair;
    return attempt(true, out);
  };
  // Waiting means: subscribe to releases first, then try again (and queue, in fair mode). A
  // release after the subscription is confirmed cannot be missed; one before it is seen by the
  // attempt (in fair mode the key then holds our token, and the attempt re-arms it). When this
  // process is subscribed already (another waiter, or a lingering subscription), the watch
  // costs no round trip and the very first attempt is the one that counts.
  std::optional<SubscriptionWatch> watch;
  WaitingSlot waiting(mutex_, waiting_);  // destroyed before the watch
  auto start_watch = [&](bool enabled) {
    watch.emplace(*engine_, enabled, deadline, fair_token_sha1);
    waiting.set(watch->slot());
  };
  if (!single_attempt && options_.wake_on_release && SubscriptionWatch::live(*engine_)) {
    start_watch(true);
  }
  // Fair mode: takes a hand-over that arrived, if its validity can still be trusted.
  auto take_hand_over = [&] {
    std::uint64_t granted = 0;
    std::uint64_t fence = 0;
    if (!fair || !watch->take_grant(granted, fence) || granted <= void_through || granted > seq ||
        seq - granted >= kKept) {
      return false;
    }
    const auto from = sent[(granted - 1) % kKept];
    const AcquireResult handed = engine_->handed_over(fence, from);
    // Not held: too late to trust the message's validity; the next attempt re-arms the key.
    return handed.held && take(handed, fair_token, from);
  };
  const auto base = std::chrono::nanoseconds(options_.retry_delay);
  try {
    AcquireResult result;
    if (watch ? contended_attempt(result) : attempt(false, result)) return true;
    if (single_attempt) return false;
    if (!watch) {
      if (!wait_forever && SteadyClock::now() >= deadline) return unavailable.give_up();
      start_watch(options_.wake_on_release);
      if (!cancelled() && contended_attempt(result)) return true;
    }
    for (;;) {
      if (cancelled()) {
        leave_queue();  // passes on a hand-over that came meanwhile
        return give_up(call);
      }
      const auto now = SteadyClock::now();
      if (!wait_forever && now >= deadline) {
        if (take_hand_over()) return true;  // it came in time
        leave_queue();
        return unavailable.give_up();
      }
      auto wait = jittered(base);
      if (result.holder_pttl.count() >= 0) {
        // The holder's lease ends then: do not sleep past it (it may end by expiry, unannounced).
        wait = std::min<std::chrono::nanoseconds>(
            wait, result.holder_pttl + std::chrono::milliseconds(1));
      }
      auto until = now + wait;
      if (!wait_forever) until = std::min(until, deadline);
      watch->wait_until(until);
      if (cancelled()) continue;
      if (take_hand_over() || contended_attempt(result)) return true;
    }
  } catch (...) {
    leave_queue();
    throw;
  }
}

bool LockCore::take(const AcquireResult& result, std::string token, SteadyClock::time_point start) {
  auto hold =
      std::make_shared<HoldState>(std::move(token), result.fence, start, result.valid_until);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    owner_ = std::this_thread::get_id();
    depth_ = 1;
    hold_ = hold;
  }
  thread_holds().add(shared_from_this());
  if (options_.auto_renew) {
    try {
      Access::watchdog(*options_.watchdog)
          .watch(engine_, hold,
                 WatchSettings{options_.max_renewals, options_.max_hold, options_.on_lost});
    } catch (...) {
      // Could not start renewal (thread creation failed): do not hand out a hold the caller
      // believes is renewed. Roll back and report.
      {
        std::lock_guard<std::mutex> guard(mutex_);
        owner_ = {};
        depth_ = 0;
        hold_.reset();
      }
      hold->mark_released();
      try {
        engine_->release(hold->token());
      } catch (...) {
      }
      throw;
    }
  }
  return true;
}

bool LockCore::release() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (owner_ != std::this_thread::get_id() || !hold_) {
    lock.unlock();
    logf(LogLevel::warn,
         "redlock: release of {} by a thread that does not hold it; nothing was done",
         engine_->key());
    return false;
  }
  if (depth_ > 1) {
    --depth_;
    return !hold_->lost(SteadyClock::now());
  }
  auto hold = std::move(hold_);
  owner_ = {};
  depth_ = 0;
  lock.unlock();

  // Stop renewal before the key is deleted, and wait out a renewal in flight.
  const bool live = hold->begin_end();
  const bool was_valid = live && !hold->lost(SteadyClock::now());
  const bool capped = hold->marked_lost() && hold->reason() == LostReason::cap_reached;
  ReleaseResult result;
  std::exception_ptr error;
  if (!capped) {  // after a cap the watchdog has already released it
    const auto start = SteadyClock::now();
    try {
      result = engine_->release(hold->token());
      error = result.failure;
    } catch (...) {
      error = std::current_exception();
    }
    if (result.listeners > 0 && !engine_->fair()) {  // fair mode: the queue decides
      // Waiters heard this release. Hold back this object's next acquire for about as long as a
      // woken waiter needs to answer (4 round trips of this release, 250 us .. 5 ms).
      const auto rtt = SteadyClock::now() - start;
      const auto pause = std::clamp<SteadyClock::duration>(4 * rtt, std::chrono::microseconds(250),
                                                           std::chrono::milliseconds(5));
      std::lock_guard<std::mutex> guard(mutex_);
      courtesy_until_ = SteadyClock::now() + pause;
    }
  }
  // Kept unless it had expired or enough nodes said "not ours" that no quorum can have held it;
  // a node that did not answer is unknown, not a loss.
  const std::size_t n = engine_->nodes().size();
  const bool kept = was_valid && n - result.refused >= engine_->quorum();
  if (!capped && !error && !kept) {
    // The lease turned out to be gone: that is a loss, and LeaseToken listeners hear of it.
    report_lost(hold, !was_valid ? LostReason::expired
                      : n > 1    ? LostReason::no_quorum
                                 : LostReason::refused);
  }
  hold->mark_released();
  free_gate();
  if (error) std::rethrow_exception(error);
  return kept;
}

bool LockCore::extend(std::chrono::milliseconds ttl) {
  if (ttl.count() <= 0 || ttl > kMaxTtl || drift_of(ttl, options_.clock_drift_factor) >= ttl) {
    throw std::invalid_argument(
        "redlock: extend: ttl must be longer than the drift allowance "
        "(ttl * clock_drift_factor + 2 ms) and at most 200 years (got " +
        std::to_string(ttl.count()) + " ms)");
  }
  std::shared_ptr<HoldState> hold;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (owner_ != std::this_thread::get_id() || !hold_) return false;
    hold = hold_;
  }
  const auto start = SteadyClock::now();
  if (hold->ending() || hold->lost(start)) return false;
  // From here the server may apply the new ttl at any moment, even if it is shorter than what
  // is left, and a watchdog renewal may be in flight too: the hold tracks what is safe.
  const auto id = hold->begin_extend(start + std::chrono::nanoseconds(ttl) -
                                     drift_of(ttl, options_.clock_drift_factor));
  ExtendResult result;
  try {
    result = engine_->extend(hold->token(), ttl);
  } catch (...) {
    hold->end_extend(id, false);
    throw;
  }
  // Held only if a quorum confirmed before the old validity ran out.
  const bool in_time = result.held && SteadyClock::now() < hold->valid_until();
  const bool held = hold->end_extend(id, in_time && !result.failure);
  if (result.failure) std::rethrow_exception(result.failure);
  if (held) {
    // A short ttl must not outlive the watchdog's schedule: its next renewal moves up.
    if (options_.auto_renew) Access::watchdog(*options_.watchdog).reschedule(*hold);
    return true;
  }
  report_lost(hold, engine_->nodes().size() > 1 && result.confirmed > 0 ? LostReason::no_quorum
                                                                        : LostReason::refused);
  return false;
}

void LockCore::orphaned() noexcept {
  std::shared_ptr<HoldState> hold;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (owner_ != std::this_thread::get_id() || !hold_) return;
    hold = std::move(hold_);
    owner_ = {};
    depth_ = 0;
  }
  logf(LogLevel::warn, "redlock: a thread exited holding {}; releasing it", engine_->key());
  try {
    hold->begin_end();
    const bool capped = hold->marked_lost() && hold->reason() == LostReason::cap_reached;
    if (!capped) engine_->release(hold->token());
  } catch (const std::exception& e) {
    logf(LogLevel::warn, "redlock: could not release {} ({}); it expires by its ttl",
         engine_->key(), e.what());
  } catch (...) {
  }
  hold->mark_released();
  free_gate();
}

void LockCore::destroy() noexcept {
  std::shared_ptr<HoldState> hold;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    hold = std::move(hold_);
    owner_ = {};
    depth_ = 0;
  }
  if (!hold) return;
  try {
    hold->begin_end();
    const bool capped = hold->marked_lost() && hold->reason() == LostReason::cap_reached;
    if (!capped) {
      ReleaseResult r = engine_->release(hold->token());
      if (r.failure) std::rethrow_exception(r.failure);
    }
  } catch (const std::exception& e) {
    logf(LogLevel::warn,
         "redlock: could not release {} while destroying the lock ({}); it expires by its ttl",
         engine_->key(), e.what());
  } catch (...) {
  }
  hold->mark_released();
}

}  // namespace detail

// ---- LockBase / Lock / Redlock -------------------------------------------------------------

LockBase::LockBase(std::vector<Client> instances, std::string key, LockOptions options)
    : core_(std::make_shared<detail::LockCore>(detail::impls_of(instances), std::move(key),
                                               std::move(options))) {}

LockBase::~LockBase() { core_->destroy(); }

void LockBase::lock() {
  core_->acquire(detail::Call::lock, detail::SteadyClock::time_point::max());
}

bool LockBase::try_lock() {
  return core_->acquire(detail::Call::try_lock, detail::SteadyClock::now());
}

void LockBase::cancel_waits() noexcept { core_->cancel_waits(); }

bool LockBase::try_lock_for_ns(std::chrono::nanoseconds timeout) {
  if (timeout <= std::chrono::nanoseconds::zero()) return try_lock();
  const auto now = detail::SteadyClock::now();
  const auto room = detail::SteadyClock::time_point::max() - now;
  const auto deadline = timeout >= room ? detail::SteadyClock::time_point::max() : now + timeout;
  return core_->acquire(detail::Call::try_lock_for, deadline);
}

void LockBase::unlock() noexcept {
  try {
    core_->release();
  } catch (const std::exception& e) {
    detail::logf(LogLevel::warn, "redlock: unlock of {} failed ({}); the lease expires by its ttl",
                 core_->engine().key(), e.what());
  } catch (...) {
  }
}

bool LockBase::release() { return core_->release(); }

bool LockBase::extend() { return core_->extend(core_->options().ttl); }

bool LockBase::extend(std::chrono::milliseconds ttl) { return core_->extend(ttl); }

bool LockBase::owns_lock() const noexcept { return core_->owns(); }

std::chrono::milliseconds LockBase::validity() const noexcept {
  auto hold = core_->hold_of_caller();
  if (!hold) return std::chrono::milliseconds::zero();
  const auto now = detail::SteadyClock::now();
  if (hold->lost(now)) return std::chrono::milliseconds::zero();
  return std::chrono::duration_cast<std::chrono::milliseconds>(hold->valid_until() - now);
}

std::uint64_t LockBase::fence() const noexcept {
  auto hold = core_->hold_of_caller();
  return hold && !hold->lost(detail::SteadyClock::now()) ? hold->fence() : 0;
}

LeaseToken LockBase::lease() const noexcept { return detail::Access::lease(core_->hold()); }

const std::string& LockBase::key() const noexcept { return core_->engine().key(); }

const LockOptions& LockBase::options() const noexcept { return core_->options(); }

std::size_t LockBase::size() const noexcept { return core_->engine().nodes().size(); }

std::size_t LockBase::quorum() const noexcept { return core_->engine().quorum(); }

Lock::Lock(Client client, std::string key, LockOptions options)
    : LockBase(std::vector<Client>{std::move(client)}, std::move(key), std::move(options)) {}

Redlock::Redlock(std::vector<Client> instances, std::string key, LockOptions options)
    : LockBase(std::move(instances), std::move(key), std::move(options)) {}

// ---- LeaseToken ----------------------------------------------------------------------------

bool LeaseToken::lost() const noexcept {
  return !state_ || state_->lost(detail::SteadyClock::now());
}

LostReason LeaseToken::reason() const noexcept {
  return state_ ? state_->reason() : LostReason::expired;
}

void LeaseToken::on_lost(std::function<void()> callback) const {
  if (!callback) return;
  if (!state_) {
    try {
      callback();
    } catch (...) {
    }
    return;
  }
  state_->add_lost_callback(std::move(callback));
}

bool LeaseToken::wait_for(std::chrono::milliseconds timeout) const {
  if (!state_) return true;
  return state_->wait_for(timeout);
}

const char* to_string(LostReason reason) noexcept {
  switch (reason) {
    case LostReason::refused:
      return "refused";
    case LostReason::no_quorum:
      return "no_quorum";
    case LostReason::expired:
      return "expired";
    case LostReason::cap_reached:
      return "cap_reached";
  }
  return "unknown";
}

}  // namespace redlock
