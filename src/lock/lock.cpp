// src/lock/lock.cpp: the public Lock, Redlock and LeaseToken: thin forwarding to LockCore
// (lock/lock_core.hpp) and the hold state.
#include <redlock/lock.hpp>

#include <vector>

#include "api/access.hpp"
#include "lock/lock_core.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {
namespace {

std::vector<std::shared_ptr<ClientImpl>> impls_of(const std::vector<Client>& clients) {
  std::vector<std::shared_ptr<ClientImpl>> out;
  out.reserve(clients.size());
  for (const auto& c : clients) out.push_back(Access::client(c));
  return out;
}

}  // namespace
}  // namespace detail

// ---- LockBase / Lock / Redlock -------------------------------------------------------------

LockBase::LockBase(std::vector<Client> instances, std::string key, LockOptions options)
    : core_(std::make_shared<detail::LockCore>(detail::impls_of(instances), std::move(key),
                                               std::move(options))) {}

LockBase::LockBase(std::shared_ptr<detail::LockCore> core) noexcept : core_(std::move(core)) {}

LockBase::~LockBase() { core_->destroy(); }

void LockBase::lock() {
  core_->acquire(detail::Call::lock, detail::SteadyClock::time_point::max());
}

bool LockBase::try_lock() {
  return core_->acquire(detail::Call::try_lock, detail::SteadyClock::now());
}

void LockBase::cancel_waits() noexcept { core_->cancel_waits(); }

bool LockBase::try_lock_for_ns(std::chrono::nanoseconds timeout) {
  const detail::TimedCall timed = detail::timed_call(timeout);
  return core_->acquire(timed.call, timed.deadline);
}

Hold LockBase::acquire() {
  detail::Held held =
      core_->acquire_handle(detail::Call::lock, detail::SteadyClock::time_point::max());
  return detail::Access::hold(core_, std::move(held.hold), 0);
}

std::optional<Hold> LockBase::try_acquire_for_ns(std::chrono::nanoseconds timeout) {
  const detail::TimedCall timed = detail::timed_call(timeout);
  detail::Held held = core_->acquire_handle(timed.call, timed.deadline);
  if (!held.hold) return std::nullopt;
  return detail::Access::hold(core_, std::move(held.hold), 0);
}

void LockBase::unlock() noexcept {
  try {
    core_->release();
  } catch (const std::exception& e) {
    detail::logf(LogLevel::warn, "redlock: unlock of {} failed ({}); the lease expires by its ttl",
                 core_->backend().key(), e.what());
  } catch (...) {
  }
}

bool LockBase::release() { return core_->release(); }

bool LockBase::extend() { return core_->extend(core_->options().ttl); }

bool LockBase::extend(std::chrono::milliseconds ttl) { return core_->extend(ttl); }

bool LockBase::owns_lock() const noexcept { return core_->ownership().owns(); }

std::chrono::milliseconds LockBase::validity() const noexcept {
  auto hold = core_->ownership().hold_of_caller();
  if (!hold) return std::chrono::milliseconds::zero();
  const auto now = detail::SteadyClock::now();
  if (hold->lost(now)) return std::chrono::milliseconds::zero();
  return std::chrono::duration_cast<std::chrono::milliseconds>(hold->valid_until() - now);
}

std::uint64_t LockBase::fence() const noexcept {
  auto hold = core_->ownership().hold_of_caller();
  return hold && !hold->lost(detail::SteadyClock::now()) ? hold->fence() : 0;
}

LeaseToken LockBase::lease() const noexcept {
  return detail::Access::lease(core_->ownership().hold());
}

const std::string& LockBase::key() const noexcept { return core_->backend().key(); }

const LockOptions& LockBase::options() const noexcept { return core_->options(); }

std::size_t LockBase::size() const noexcept { return core_->backend().size(); }

std::size_t LockBase::quorum() const noexcept { return core_->backend().quorum(); }

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
    case LostReason::session_expired:
      return "session_expired";
    case LostReason::undelivered:
      return "undelivered";
  }
  return "unknown";
}

}  // namespace redlock
