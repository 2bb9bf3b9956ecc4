// src/lock/hold.cpp: the public Hold (redlock/hold.hpp): a handle over a HoldState, ended and
// extended by the object that made it (lock/hold_owner.hpp); its destructor's release runs on
// the finisher's job thread (io/finisher.hpp).
#include <redlock/hold.hpp>

#include <exception>
#include <functional>
#include <utility>

#include "api/access.hpp"
#include "core/hold.hpp"
#include "io/finisher.hpp"
#include "lock/hold_owner.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {
namespace {

// The destructor's release: what release() does, with a failure logged instead of thrown.
void release_quietly(HoldOwner& owner, const Held& held) noexcept {
  try {
    owner.release_handle(held);
  } catch (const std::exception& e) {
    try {
      logf(LogLevel::warn, "redlock: release of a Hold of {} failed ({}); it expires by its ttl",
           owner.describe(), e.what());
    } catch (...) {
    }
  } catch (...) {
  }
}

}  // namespace
}  // namespace detail

Hold::Hold(std::shared_ptr<detail::HoldOwner> owner, std::shared_ptr<detail::HoldState> state,
           std::size_t slot) noexcept
    : owner_(std::move(owner)), state_(std::move(state)), slot_(slot) {}

Hold& Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    release_in_background();
    owner_ = std::move(other.owner_);
    state_ = std::move(other.state_);
    slot_ = std::exchange(other.slot_, 0);
  }
  return *this;
}

Hold::~Hold() { release_in_background(); }

void Hold::release_in_background() noexcept {
  if (!state_) return;
  detail::Held held{std::move(state_), slot_};
  std::shared_ptr<detail::HoldOwner> owner = std::move(owner_);
  std::function<void()> job;
  try {
    job = [owner, held] { detail::release_quietly(*owner, held); };
  } catch (...) {  // no memory for the job: release here, blocking
    detail::release_quietly(*owner, held);
    return;
  }
  detail::run_in_background(std::move(job));
}

bool Hold::holds() const noexcept { return validity() > std::chrono::milliseconds::zero(); }

std::chrono::milliseconds Hold::validity() const noexcept {
  return detail::validity_of(state_.get());
}

std::uint64_t Hold::fence() const noexcept {
  return state_ && !state_->lost(detail::SteadyClock::now()) ? state_->fence() : 0;
}

LeaseToken Hold::lease() const noexcept { return detail::Access::lease(state_); }

bool Hold::extend() { return state_ ? extend(owner_->ttl()) : false; }

bool Hold::extend(std::chrono::milliseconds ttl) {
  if (!state_) return false;
  return owner_->extend_handle(detail::Held{state_, slot_}, ttl);
}

bool Hold::release() {
  if (!state_) return false;
  const detail::Held held{std::move(state_), slot_};
  const std::shared_ptr<detail::HoldOwner> owner = std::move(owner_);
  return owner->release_handle(held);
}

}  // namespace redlock
