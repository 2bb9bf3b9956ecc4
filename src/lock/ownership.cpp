// src/lock/ownership.cpp: thread ownership, re-entrancy, the FIFO local queue and cancellation of
// one Lock, Redlock or Semaphore object.
#include "lock/ownership.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <redlock/errors.hpp>

#include "util/blocked_waits.hpp"

namespace redlock {
namespace detail {

Ownership::Entry Ownership::enter(Call call, SteadyClock::time_point deadline, Claim claim) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (owner_ == std::this_thread::get_id()) {
    return claim == Claim::thread ? reenter() : Entry::self;
  }
  if (!busy_ && queue_.empty()) {
    if (call != Call::try_lock && cancelled()) return Entry::cancelled;
    busy_ = true;
    return Entry::entered;
  }
  if (call == Call::try_lock) return Entry::busy;
  return queue(lock, deadline);
}

Ownership::Entry Ownership::reenter() noexcept {
  // A lost hold is not silently re-acquired; the caller decides (lock() throws, others fail).
  if (!held_.hold || held_.hold->lost(SteadyClock::now())) return Entry::lost;
  ++depth_;
  return Entry::reentered;
}

// Waits for the gate behind the threads queued before this one: the gate is handed to the
// first in line (open_gate), so a thread arriving later cannot overtake.
Ownership::Entry Ownership::queue(std::unique_lock<std::mutex>& lock,
                                  SteadyClock::time_point deadline) {
  Queued me;
  queue_.push_back(&me);
  const auto done = [&] { return me.granted || cancelled(); };
  const BlockedWait blocked;
  if (deadline == SteadyClock::time_point::max()) {
    me.cv.wait(lock, done);
  } else {
    me.cv.wait_until(lock, deadline, done);
  }
  if (!me.granted) queue_.erase(std::find(queue_.begin(), queue_.end(), &me));
  if (cancelled()) {
    if (me.granted) {  // pass it on: this thread gives up
      lock.unlock();
      open_gate();
    }
    return Entry::cancelled;
  }
  return me.granted ? Entry::entered : Entry::timed_out;
}

void Ownership::open_gate() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  if (queue_.empty()) {
    busy_ = false;
    return;
  }
  Queued* next = queue_.front();
  queue_.pop_front();
  next->granted = true;  // busy_ stays true: the gate goes straight to the next waiter
  if (next->async) {
    next->async->gate_opened();
  } else {
    next->cv.notify_one();
  }
}

Ownership::Entry Ownership::enter_async(Call call, LocalWaiter& waiter) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (call != Call::try_lock && cancelled()) return Entry::cancelled;
  if (!busy_ && queue_.empty()) {
    busy_ = true;
    return Entry::entered;
  }
  if (call == Call::try_lock) return Entry::busy;
  async_.emplace_back();
  async_.back().async = &waiter;
  queue_.push_back(&async_.back());
  return Entry::queued;
}

// The Queued of `waiter` in async_ (mutex_ held); end() if none.
std::list<Ownership::Queued>::iterator Ownership::async_entry(LocalWaiter& waiter) noexcept {
  return std::find_if(async_.begin(), async_.end(),
                      [&](const Queued& q) { return q.async == &waiter; });
}

bool Ownership::granted(LocalWaiter& waiter) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  const auto it = async_entry(waiter);
  if (it == async_.end() || !it->granted) return false;
  async_.erase(it);
  return true;
}

bool Ownership::leave_queue(LocalWaiter& waiter) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  const auto it = async_entry(waiter);
  if (it == async_.end()) return true;
  const bool had_gate = it->granted;
  if (!had_gate) queue_.erase(std::find(queue_.begin(), queue_.end(), &*it));
  async_.erase(it);
  return !had_gate;
}

void Ownership::own(Held held) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  owner_ = std::this_thread::get_id();
  depth_ = 1;
  held_ = std::move(held);
}

Held Ownership::disown() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  owner_ = {};
  depth_ = 0;
  return std::exchange(held_, Held{});
}

Held Ownership::disown_caller() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  if (owner_ != std::this_thread::get_id()) return {};
  owner_ = {};
  depth_ = 0;
  return std::exchange(held_, Held{});
}

Ownership::Exit Ownership::exit(Held& last) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  if (owner_ != std::this_thread::get_id() || !held_.hold) return Exit::not_owner;
  if (depth_ > 1) {
    --depth_;
    return held_.hold->lost(SteadyClock::now()) ? Exit::nested_lost : Exit::nested_valid;
  }
  owner_ = {};
  depth_ = 0;
  last = std::exchange(held_, Held{});
  return Exit::last;
}

std::shared_ptr<HoldState> Ownership::hold() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return held_.hold;
}

std::shared_ptr<HoldState> Ownership::hold_of_caller() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return owner_ == std::this_thread::get_id() ? held_.hold : nullptr;
}

std::size_t Ownership::slot() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return held_.hold ? held_.slot : 0;
}

bool Ownership::owns() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return owner_ == std::this_thread::get_id() && held_.hold &&
         !held_.hold->lost(SteadyClock::now());
}

void Ownership::cancel() noexcept {
  cancelled_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> guard(mutex_);
  for (ReleaseWatch* watch : waiting_) watch->wake();
  for (Queued* queued : queue_) {
    if (queued->async) {
      queued->async->gate_opened();
    } else {
      queued->cv.notify_one();
    }
  }
}

Ownership::Watching::Watching(Ownership& ownership, ReleaseWatch& watch)
    : ownership_(ownership), watch_(watch) {
  std::lock_guard<std::mutex> guard(ownership_.mutex_);
  ownership_.waiting_.push_back(&watch_);
  if (ownership_.cancelled()) watch_.wake();
}

Ownership::Watching::~Watching() {
  std::lock_guard<std::mutex> guard(ownership_.mutex_);
  auto& waiting = ownership_.waiting_;
  waiting.erase(std::find(waiting.begin(), waiting.end(), &watch_));
}

bool entry_result(Ownership::Entry entry, Call call, const std::string& key,
                  const CallWords& words) {
  switch (entry) {
    case Ownership::Entry::reentered:
      return true;
    case Ownership::Entry::lost:
      if (call == Call::lock) throw Error(std::string("redlock: ") + words.call + key + words.lost);
      return false;
    case Ownership::Entry::cancelled:
      return cancelled_result(call, key, words);
    case Ownership::Entry::self:
      throw std::logic_error(std::string("redlock: ") + words.call + key +
                             " by the thread that holds it with lock(): a Hold would wait for that "
                             "thread's unlock(); unlock() first, or use another object");
    case Ownership::Entry::entered:
    case Ownership::Entry::busy:
    case Ownership::Entry::timed_out:
    case Ownership::Entry::queued:
      break;
  }
  return false;
}

bool cancelled_result(Call call, const std::string& key, const CallWords& words) {
  if (call == Call::lock) {
    throw CancelledError(std::string("redlock: ") + words.call + key +
                         " was cancelled by cancel_waits()");
  }
  return false;
}

}  // namespace detail
}  // namespace redlock
