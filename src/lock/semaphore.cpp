// src/lock/semaphore.cpp: Semaphore. A permit is a lease on one of `limit` slot keys: one script
// takes the first free slot; extend, renewal (the Watchdog, through a LeaseEngine per slot key),
// release and loss are the lease machinery a Lock uses. This file adds the slot choice, thread
// ownership, local queueing, waiting (jittered backoff bounded by the earliest slot expiry, plus
// wake-on-release) and cancellation.
#include <redlock/semaphore.hpp>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <redlock/errors.hpp>
#include <redlock/watchdog.hpp>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "core/hold.hpp"
#include "io/connection.hpp"
#include "util/log_internal.hpp"
#include "util/token.hpp"
#include "watch/subscriber.hpp"
#include "watch/watchdog_impl.hpp"

namespace redlock {
namespace detail {
namespace {

// KEYS[1..n] the slot keys, KEYS[n+1] the fence counter; ARGV[1] token, ARGV[2] ttl ms, ARGV[3]
// "1" with fencing. Takes the first free slot (SET PX). A repeat of the same attempt (a retried
// connection) finds its token and re-arms that slot; it gets a fresh fence, so no two holds ever
// share one. Returns {slot, fence (0 without fencing)} or {0, smallest pttl of the slots (-1:
// none expires)}. GET on a slot holding another type fails the script with WRONGTYPE.
const char kAcquireLua[] = R"(local n = #KEYS - 1
local free = 0
local pttl = -1
local function fence()
  if ARGV[3] ~= '1' then return 0 end
  return redis.call('incr', KEYS[n + 1])
end
for i = 1, n do
  local holder = redis.call('get', KEYS[i])
  if holder == ARGV[1] then
    redis.call('pexpire', KEYS[i], ARGV[2])
    return {i, fence()}
  end
  if not holder then
    if free == 0 then free = i end
  else
    local left = redis.call('pttl', KEYS[i])
    if left >= 0 and (pttl < 0 or left < pttl) then pttl = left end
  end
end
if free == 0 then return {0, pttl} end
redis.call('set', KEYS[free], ARGV[1], 'PX', ARGV[2])
return {free, fence()})";

// The rollback of an attempt whose outcome is unknown (timed out, connection lost): KEYS the
// slot keys; ARGV[1] token, ARGV[2] release channel. Deletes the slot holding the token, if any,
// and announces it.
const char kUndoLua[] = R"(for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    redis.call('del', KEYS[i])
    return 1 + redis.call('publish', ARGV[2], ARGV[1])
  end
end
return 0)";

// Never destroyed, like Scripts::get(): semaphores with static storage may still use them.
const Script& acquire_script() {
  static const Script& script = *new Script(kAcquireLua);
  return script;
}
const Script& undo_script() {
  static const Script& script = *new Script(kUndoLua);
  return script;
}

// An acquire script's reply: granted a slot, or refused with the earliest expiry.
struct SlotReply {
  std::size_t slot{0};  // 1..limit if granted
  std::uint64_t fence{0};
  std::chrono::milliseconds holder_pttl{-1};
};

SlotReply read_slot_reply(const redisReply* r, std::size_t limit, const std::string& address) {
  if (r != nullptr && r->type == REDIS_REPLY_ERROR) {
    std::rethrow_exception(server_error(address, "the semaphore acquire script", text(r)));
  }
  const bool shape = r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                     r->element[0]->type == REDIS_REPLY_INTEGER &&
                     r->element[1]->type == REDIS_REPLY_INTEGER;
  const long long slot = shape ? r->element[0]->integer : -1;
  const long long value = shape ? r->element[1]->integer : -1;
  if (slot < 0 || static_cast<unsigned long long>(slot) > limit || (slot > 0 && value < 0)) {
    throw ProtocolError(
        fmt::format("redlock: unexpected reply to the semaphore acquire script from {}", address));
  }
  SlotReply out;
  out.slot = static_cast<std::size_t>(slot);
  if (slot > 0) {
    out.fence = static_cast<std::uint64_t>(value);
  } else {
    out.holder_pttl = std::chrono::milliseconds(value);
  }
  return out;
}

// argv storage for one command with a variable number of arguments.
struct Argv {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  Argv& arg(std::string_view value) {
    argv.push_back(value.data());
    lens.push_back(value.size());
    return *this;
  }
  CommandView view(const Script* script = nullptr) const {
    return CommandView{static_cast<int>(argv.size()), argv.data(), lens.data(), script};
  }
};

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
  if (options.fair) {
    throw std::invalid_argument("redlock: options.fair is not supported by Semaphore");
  }
  if ((options.auto_renew || options.on_lost) && !options.watchdog) {
    options.watchdog = Watchdog::shared();
  }
  return options;
}

}  // namespace

class SemaphoreCore {
 public:
  enum class Wait { once, until_deadline, forever };

  SemaphoreCore(Client client, std::string key, std::size_t limit, LockOptions options);

  bool acquire(Wait mode, SteadyClock::time_point deadline);
  bool release();
  void destroy() noexcept;
  void cancel() noexcept;

  bool owns() const noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    return owner_ == std::this_thread::get_id() && hold_ && !hold_->lost(SteadyClock::now());
  }
  std::shared_ptr<HoldState> hold() const noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    return hold_;
  }
  std::size_t slot() const noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    return hold_ ? slot_ : 0;
  }
  const std::string& key() const noexcept { return key_; }
  std::size_t limit() const noexcept { return permit_keys_.size(); }
  const LockOptions& options() const noexcept { return options_; }

 private:
  // Registers a wait for cancel_waits() and, with wake_on_release, for release announcements.
  class Waiter;

  struct Attempt {
    bool held{false};
    std::chrono::milliseconds holder_pttl{-1};
  };
  Attempt attempt();
  SlotReply run_acquire(const std::string& token);
  void undo(const std::string& token) noexcept;
  bool wait_loop(Wait mode, SteadyClock::time_point deadline);
  bool give_up(Wait mode) const;
  void take(const SlotReply& reply, std::string token, SteadyClock::time_point start,
            SteadyClock::time_point valid_until);
  long long release_slot(std::size_t slot, const std::string& token);
  std::shared_ptr<LeaseEngine> engine_for(std::size_t slot);
  void report_lost(const std::shared_ptr<HoldState>& hold, LostReason reason);
  // Clears the ownership of the current permit and returns its hold (null if none).
  std::shared_ptr<HoldState> disown() noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    owner_ = {};
    depth_ = 0;
    return std::move(hold_);
  }
  void free_gate() {
    std::lock_guard<std::mutex> guard(mutex_);
    busy_ = false;
    local_.notify_one();
  }

  Client client_;
  std::string key_;
  LockOptions options_;
  std::vector<std::string> permit_keys_;  // slot i is permit_keys_[i - 1]
  std::string fence_key_;
  std::string channel_;
  std::string ttl_ms_;

  mutable std::mutex mutex_;
  std::condition_variable local_;  // threads of this process queueing for this object
  bool busy_{false};               // a thread of this process is acquiring or holds a permit
  bool cancelled_{false};          // cancel_waits() was called (sticky)
  std::set<WakeSlot*> waiting_;    // waits in progress, woken by cancel_waits()
  std::thread::id owner_{};
  std::size_t depth_{0};
  std::shared_ptr<HoldState> hold_;
  std::size_t slot_{0};
  std::vector<std::shared_ptr<LeaseEngine>> engines_;  // per slot, made when first held
};

class SemaphoreCore::Waiter {
 public:
  Waiter(SemaphoreCore& core, SteadyClock::time_point deadline) : core_(core) {
    {
      std::lock_guard<std::mutex> guard(core_.mutex_);
      core_.waiting_.insert(&slot_);
      if (core_.cancelled_) slot_.notify();
    }
    if (!core_.options_.wake_on_release) return;
    ClientImpl& node = *Access::client(core_.client_);
    try {
      subscriber_ = &node.subscriber();
      subscriber_->watch(core_.channel_, &slot_);
    } catch (const std::exception& e) {
      subscriber_ = nullptr;
      logf(LogLevel::debug, "redlock: cannot subscribe for {}: {}", core_.key_, e.what());
      return;
    }
    // Attempts after this cannot miss a release (an unconfirmed watch leaves it to the timer).
    const auto& ep = node.endpoint();
    subscriber_->confirmed(
        core_.channel_,
        std::min(SteadyClock::now() + ep.connect_timeout + ep.command_timeout, deadline));
  }
  ~Waiter() {
    if (subscriber_ != nullptr) subscriber_->unwatch(core_.channel_, &slot_);
    std::lock_guard<std::mutex> guard(core_.mutex_);
    core_.waiting_.erase(&slot_);
  }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  void wait_until(SteadyClock::time_point until) { slot_.wait_until(until); }

 private:
  SemaphoreCore& core_;
  WakeSlot slot_;
  Subscriber* subscriber_{nullptr};
};

SemaphoreCore::SemaphoreCore(Client client, std::string key, std::size_t limit, LockOptions options)
    : client_(std::move(client)),
      key_(std::move(key)),
      options_(validated(limit, key_, std::move(options))) {
  permit_keys_.reserve(limit);
  for (std::size_t i = 1; i <= limit; ++i)
    permit_keys_.push_back(key_ + ":permit:" + std::to_string(i));
  fence_key_ = key_ + ":permit:fence";
  channel_ = key_ + ":permit:released";
  ttl_ms_ = std::to_string(options_.ttl.count());
  engines_.resize(limit);
  engine_for(1);  // validates the options as a Lock's engine does
}

// The lease engine of one slot key: what the watchdog renews (and releases at a cap). No fencing
// of its own (the semaphore's counter is per key), never fair.
std::shared_ptr<LeaseEngine> SemaphoreCore::engine_for(std::size_t slot) {
  std::shared_ptr<LeaseEngine>& engine = engines_[slot - 1];
  if (!engine) {
    LockOptions slot_options = options_;
    slot_options.fencing = false;
    engine = std::make_shared<LeaseEngine>(
        std::vector<std::shared_ptr<ClientImpl>>{Access::client(client_)}, permit_keys_[slot - 1],
        slot_options);
  }
  return engine;
}

bool SemaphoreCore::acquire(Wait mode, SteadyClock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (owner_ == std::this_thread::get_id()) {
    if (hold_ && !hold_->lost(SteadyClock::now())) {
      ++depth_;
      return true;
    }
    if (mode == Wait::forever) {
      throw Error("redlock: acquire() of a permit of " + key_ +
                  " by the thread that owns one, but it was lost; release() it first");
    }
    return false;
  }
  // Queue behind other threads of this process: only one of them talks to Redis at a time.
  const auto free = [this] { return !busy_ || cancelled_; };
  if (mode == Wait::once) {
    if (busy_) return false;
  } else if (mode == Wait::forever || deadline == SteadyClock::time_point::max()) {
    local_.wait(lock, free);
  } else if (!local_.wait_until(lock, deadline, free)) {
    return false;
  }
  if (cancelled_) {
    lock.unlock();
    return give_up(mode);
  }
  busy_ = true;
  lock.unlock();
  bool held = false;
  try {
    held = wait_loop(mode, deadline);
  } catch (...) {
    free_gate();
    throw;
  }
  if (!held) free_gate();
  return held;
}

bool SemaphoreCore::give_up(Wait mode) const {
  if (mode == Wait::forever) {
    // TODO CancelledError after merge
    throw Error("redlock: acquire() of a permit of " + key_ + " was cancelled by cancel_waits()");
  }
  return false;
}

// Waiting means: subscribe to releases first, then try again, so a release between a refused
// attempt and the wait cannot be missed. A wait never sleeps past the earliest slot expiry
// (expiry is not announced), nor past the caller's deadline.
bool SemaphoreCore::wait_loop(Wait mode, SteadyClock::time_point deadline) {
  Attempt a = attempt();
  if (a.held || mode == Wait::once) return a.held;
  const bool forever = mode == Wait::forever;
  Waiter waiter(*this, forever ? SteadyClock::time_point::max() : deadline);
  const auto base = std::chrono::nanoseconds(options_.retry_delay);
  for (;;) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (cancelled_) break;
    }
    a = attempt();
    if (a.held) return true;
    const auto now = SteadyClock::now();
    if (!forever && now >= deadline) return false;
    auto wait = jittered(base);
    if (a.holder_pttl.count() >= 0) {
      wait = std::min<std::chrono::nanoseconds>(wait, a.holder_pttl + std::chrono::milliseconds(1));
    }
    waiter.wait_until(forever ? now + wait : std::min(now + wait, deadline));
  }
  return give_up(mode);
}

SemaphoreCore::Attempt SemaphoreCore::attempt() {
  std::string token = make_token();
  const auto start = SteadyClock::now();
  const SlotReply reply = run_acquire(token);
  Attempt out;
  if (reply.slot == 0) {
    out.holder_pttl = reply.holder_pttl;
    return out;
  }
  const Decision d =
      decide(1, 1, options_.ttl, options_.clock_drift_factor, start, SteadyClock::now());
  if (!d.held) {  // granted too late to be of use: give the slot back
    try {
      release_slot(reply.slot, token);
    } catch (...) {  // best effort; it expires by its ttl
    }
    out.holder_pttl = std::chrono::milliseconds(0);
    return out;
  }
  take(reply, std::move(token), start, d.valid_until);
  out.held = true;
  return out;
}

SlotReply SemaphoreCore::run_acquire(const std::string& token) {
  const Script& script = acquire_script();
  const std::string numkeys = std::to_string(permit_keys_.size() + 1);
  Argv command;
  command.arg("EVALSHA").arg(script.sha1()).arg(numkeys);
  for (const auto& k : permit_keys_) command.arg(k);
  command.arg(fence_key_).arg(token).arg(ttl_ms_).arg(options_.fencing ? "1" : "0");
  // A server too slow to answer may still run it: the rollback follows on the same connection.
  Argv rollback;
  rollback.arg("EVAL").arg(kUndoLua).arg(std::to_string(permit_keys_.size()));
  for (const auto& k : permit_keys_) rollback.arg(k);
  rollback.arg(token).arg(channel_);
  NodeBatch batch;
  batch.node = Access::client(client_).get();
  batch.commands.push_back(command.view(&script));
  batch.on_timeout.push_back(rollback.view());
  execute(&batch, 1);
  if (batch.error) {
    bool timed_out = false;
    try {
      std::rethrow_exception(batch.error);
    } catch (const TimeoutError&) {
      timed_out = true;
    } catch (...) {
    }
    if (!timed_out) undo(token);  // the request may have run before the connection died
    std::rethrow_exception(batch.error);
  }
  return read_slot_reply(batch.replies[0].get(), permit_keys_.size(),
                         Access::client(client_)->address());
}

void SemaphoreCore::undo(const std::string& token) noexcept {
  try {
    std::vector<std::string_view> keys(permit_keys_.begin(), permit_keys_.end());
    client_.eval(undo_script(), keys, {token, channel_});
  } catch (const std::exception& e) {
    logf(LogLevel::debug, "redlock: rollback of an attempt on {}: {}", key_, e.what());
  } catch (...) {
  }
}

void SemaphoreCore::take(const SlotReply& reply, std::string token, SteadyClock::time_point start,
                         SteadyClock::time_point valid_until) {
  auto hold = std::make_shared<HoldState>(std::move(token), reply.fence, start, valid_until);
  std::shared_ptr<LeaseEngine> engine;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    owner_ = std::this_thread::get_id();
    depth_ = 1;
    hold_ = hold;
    slot_ = reply.slot;
    if (options_.auto_renew) engine = engine_for(reply.slot);
  }
  if (!engine) return;
  try {
    // on_lost names the semaphore's key, not the slot key the watchdog renews.
    WatchSettings settings{options_.max_renewals, options_.max_hold, {}};
    if (options_.on_lost) {
      settings.on_lost = [on_lost = options_.on_lost, key = key_](const LostEvent& e) {
        LostEvent event = e;
        event.key = key;
        on_lost(event);
      };
    }
    Access::watchdog(*options_.watchdog).watch(engine, hold, std::move(settings));
  } catch (...) {
    // Renewal could not start: do not hand out a permit the caller believes is renewed.
    disown();
    hold->mark_released();
    try {
      release_slot(reply.slot, hold->token());
    } catch (...) {
    }
    throw;
  }
}

// Compare-and-delete of the slot key, announced to waiters. Returns 0 if it was not ours.
long long SemaphoreCore::release_slot(std::size_t slot, const std::string& token) {
  const Reply r = client_.eval(Scripts::get().release, {permit_keys_[slot - 1]}, {token, channel_});
  return r.type() == Reply::Type::integer ? r.integer() : 0;
}

void SemaphoreCore::report_lost(const std::shared_ptr<HoldState>& hold, LostReason reason) {
  if (hold->mark_lost(reason) && options_.on_lost && options_.watchdog) {
    Access::watchdog(*options_.watchdog).report_lost(key_, hold, options_.on_lost, reason);
  }
}

bool SemaphoreCore::release() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (owner_ != std::this_thread::get_id() || !hold_) {
    lock.unlock();
    logf(LogLevel::warn,
         "redlock: release of a permit of {} by a thread that holds none; nothing was done", key_);
    return false;
  }
  if (depth_ > 1) {
    --depth_;
    return !hold_->lost(SteadyClock::now());
  }
  auto hold = std::move(hold_);
  const std::size_t slot = slot_;
  owner_ = {};
  depth_ = 0;
  lock.unlock();

  // Stop renewal before the key is deleted, and wait out a renewal in flight.
  const bool was_valid = hold->begin_end() && !hold->lost(SteadyClock::now());
  const bool capped = hold->marked_lost() && hold->reason() == LostReason::cap_reached;
  long long released = 0;
  std::exception_ptr error;
  if (!capped) {  // after a cap the watchdog has already released it
    try {
      released = release_slot(slot, hold->token());
    } catch (...) {
      error = std::current_exception();
    }
  }
  const bool kept = was_valid && released > 0;
  if (!capped && !error && !kept) {
    report_lost(hold, was_valid ? LostReason::refused : LostReason::expired);
  }
  hold->mark_released();
  free_gate();
  if (error) std::rethrow_exception(error);
  return kept;
}

void SemaphoreCore::destroy() noexcept {
  const std::size_t slot = this->slot();
  const std::shared_ptr<HoldState> hold = disown();
  if (!hold) return;
  try {
    hold->begin_end();
    if (!(hold->marked_lost() && hold->reason() == LostReason::cap_reached)) {
      release_slot(slot, hold->token());
    }
  } catch (const std::exception& e) {
    logf(LogLevel::warn,
         "redlock: could not release a permit of {} while destroying the semaphore ({}); it "
         "expires by its ttl",
         key_, e.what());
  } catch (...) {
  }
  hold->mark_released();
}

void SemaphoreCore::cancel() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  cancelled_ = true;
  for (WakeSlot* slot : waiting_) slot->notify();
  local_.notify_all();
}

}  // namespace detail

// ---- Semaphore -----------------------------------------------------------------------------

using Wait = detail::SemaphoreCore::Wait;

Semaphore::Semaphore(Client client, std::string key, std::size_t limit, LockOptions options)
    : core_(std::make_shared<detail::SemaphoreCore>(std::move(client), std::move(key), limit,
                                                    std::move(options))) {}

Semaphore::~Semaphore() { core_->destroy(); }

void Semaphore::acquire() { core_->acquire(Wait::forever, detail::SteadyClock::time_point::max()); }

bool Semaphore::try_acquire() { return core_->acquire(Wait::once, detail::SteadyClock::now()); }

bool Semaphore::try_acquire_for_ns(std::chrono::nanoseconds timeout) {
  if (timeout <= std::chrono::nanoseconds::zero()) return try_acquire();
  const auto now = detail::SteadyClock::now();
  if (timeout >= detail::SteadyClock::time_point::max() - now) {
    // Effectively forever, but cancellation still answers false.
    return core_->acquire(Wait::until_deadline, detail::SteadyClock::time_point::max());
  }
  return core_->acquire(Wait::until_deadline, now + timeout);
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

bool Semaphore::owns_permit() const noexcept { return core_->owns(); }

std::chrono::milliseconds Semaphore::validity() const noexcept {
  return detail::validity_of(core_->hold().get());
}

std::uint64_t Semaphore::fence() const noexcept {
  auto hold = core_->hold();
  return hold ? hold->fence() : 0;
}

LeaseToken Semaphore::lease() const noexcept { return detail::Access::lease(core_->hold()); }

std::size_t Semaphore::slot() const noexcept { return core_->slot(); }

const std::string& Semaphore::key() const noexcept { return core_->key(); }

std::size_t Semaphore::limit() const noexcept { return core_->limit(); }

const LockOptions& Semaphore::options() const noexcept { return core_->options(); }

}  // namespace redlock
