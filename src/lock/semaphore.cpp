// src/lock/semaphore.cpp: Semaphore. A permit is a lease on one of `limit` slot keys: one script
// takes the first free slot; extend, renewal (the Watchdog, through a LeaseEngine per slot key),
// release and loss are the lease machinery a Lock uses. This file adds the slot choice and
// waiting (jittered backoff bounded by the earliest slot expiry, plus wake-on-release); thread
// ownership, the local queue and cancellation are a Lock's (lock/ownership.hpp).
#include <redlock/semaphore.hpp>

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <redlock/errors.hpp>
#include <redlock/watchdog.hpp>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "core/hold.hpp"
#include "io/connection.hpp"
#include "lock/ownership.hpp"
#include "util/log_internal.hpp"
#include "util/token.hpp"
#include "watch/release_watch.hpp"
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

constexpr CallWords kWords{"acquire() of a permit of ",
                           " by the thread that owns one, but it was lost; release() it first"};

class SemaphoreCore {
 public:
  SemaphoreCore(Client client, std::string key, std::size_t limit, LockOptions options);

  bool acquire(Call call, SteadyClock::time_point deadline);
  bool release();
  void destroy() noexcept;
  void cancel() noexcept { ownership_.cancel(); }

  const Ownership& ownership() const noexcept { return ownership_; }
  const std::string& key() const noexcept { return key_; }
  std::size_t limit() const noexcept { return permit_keys_.size(); }
  const LockOptions& options() const noexcept { return options_; }

 private:
  struct Attempt {
    bool held{false};
    std::chrono::milliseconds holder_pttl{-1};
  };
  Attempt attempt();
  SlotReply run_acquire(const std::string& token);
  void undo(const std::string& token) noexcept;
  bool wait_loop(Call call, SteadyClock::time_point deadline);
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline);
  void take(const SlotReply& reply, std::string token, SteadyClock::time_point start,
            SteadyClock::time_point valid_until);
  long long release_slot(std::size_t slot, const std::string& token);
  std::shared_ptr<LeaseEngine> engine_for(std::size_t slot);
  void report_lost(const std::shared_ptr<HoldState>& hold, LostReason reason);

  Client client_;
  std::string key_;
  LockOptions options_;
  std::vector<std::string> permit_keys_;  // slot i is permit_keys_[i - 1]
  std::string fence_key_;
  std::string channel_;
  std::string ttl_ms_;
  Ownership ownership_;
  // Per slot, made when first held. Only the thread with the ownership gate touches it.
  std::vector<std::shared_ptr<LeaseEngine>> engines_;
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

bool SemaphoreCore::acquire(Call call, SteadyClock::time_point deadline) {
  const Ownership::Entry entry = ownership_.enter(call, deadline);
  if (entry != Ownership::Entry::entered) return entry_result(entry, call, key_, kWords);
  if (ownership_.cancelled()) {  // try_acquire() too ends after cancel_waits()
    ownership_.open_gate();
    return cancelled_result(call, key_, kWords);
  }
  bool held = false;
  try {
    held = wait_loop(call, deadline);
  } catch (...) {
    ownership_.open_gate();
    throw;
  }
  if (!held) ownership_.open_gate();
  return held;
}

// Subscribed to the permits' release channel with wake_on_release, else a timer only.
std::unique_ptr<ReleaseWatch> SemaphoreCore::watch(SteadyClock::time_point deadline) {
  if (!options_.wake_on_release) return make_timer_watch();
  static const std::string no_grants;
  return make_release_watch({Access::client(client_)}, WatchChannels{channel_, no_grants, key_},
                            deadline, std::string());
}

// Waiting means: watch for releases first, then try again, so a release between a refused
// attempt and the wait cannot be missed. A wait never sleeps past the earliest slot expiry
// (expiry is not announced), nor past the caller's deadline.
bool SemaphoreCore::wait_loop(Call call, SteadyClock::time_point deadline) {
  Attempt a = attempt();
  if (a.held || call == Call::try_lock) return a.held;
  const bool forever = deadline == SteadyClock::time_point::max();
  const std::unique_ptr<ReleaseWatch> watch = this->watch(deadline);
  const Ownership::Watching registered(ownership_, *watch);
  const auto base = std::chrono::nanoseconds(options_.retry_delay);
  while (!ownership_.cancelled()) {
    a = attempt();
    if (a.held) return true;
    const auto now = SteadyClock::now();
    if (!forever && now >= deadline) return false;
    auto wait = jittered(base);
    if (a.holder_pttl.count() >= 0) {
      wait = std::min<std::chrono::nanoseconds>(wait, a.holder_pttl + std::chrono::milliseconds(1));
    }
    watch->wait_until(forever ? now + wait : std::min(now + wait, deadline));
  }
  return cancelled_result(call, key_, kWords);
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
  ownership_.own(Held{hold, reply.slot});
  if (!options_.auto_renew) return;
  const std::shared_ptr<LeaseEngine> engine = engine_for(reply.slot);
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
    ownership_.disown();
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
  const std::shared_ptr<HoldState>& hold = last.hold;
  // Stop renewal before the key is deleted, and wait out a renewal in flight.
  const bool was_valid = hold->begin_end() && !hold->lost(SteadyClock::now());
  const bool capped = hold->marked_lost() && hold->reason() == LostReason::cap_reached;
  long long released = 0;
  std::exception_ptr error;
  if (!capped) {  // after a cap the watchdog has already released it
    try {
      released = release_slot(last.slot, hold->token());
    } catch (...) {
      error = std::current_exception();
    }
  }
  const bool kept = was_valid && released > 0;
  if (!capped && !error && !kept) {
    report_lost(hold, was_valid ? LostReason::refused : LostReason::expired);
  }
  hold->mark_released();
  ownership_.open_gate();
  if (error) std::rethrow_exception(error);
  return kept;
}

void SemaphoreCore::destroy() noexcept {
  const Held held = ownership_.disown();
  if (!held.hold) return;
  try {
    held.hold->begin_end();
    if (!(held.hold->marked_lost() && held.hold->reason() == LostReason::cap_reached)) {
      release_slot(held.slot, held.hold->token());
    }
  } catch (const std::exception& e) {
    logf(LogLevel::warn,
         "redlock: could not release a permit of {} while destroying the semaphore ({}); it "
         "expires by its ttl",
         key_, e.what());
  } catch (...) {
  }
  held.hold->mark_released();
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
  if (timeout <= std::chrono::nanoseconds::zero()) return try_acquire();
  const auto now = detail::SteadyClock::now();
  if (timeout >= detail::SteadyClock::time_point::max() - now) {
    // Effectively forever, but cancellation still answers false.
    return core_->acquire(detail::Call::try_lock_for, detail::SteadyClock::time_point::max());
  }
  return core_->acquire(detail::Call::try_lock_for, now + timeout);
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

}  // namespace redlock
