// src/watch/watchdog.cpp: one renewal thread for any number of leases, plus a callback thread.
#include <redlock/watchdog.hpp>

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <map>

#include <redlock/errors.hpp>

#include "util/log_internal.hpp"
#include "util/observe.hpp"
#include "util/prefetch.hpp"
#include "util/token.hpp"
#include "watch/watchdog_impl.hpp"

namespace redlock {
namespace detail {
namespace {

constexpr std::size_t kLatenessWindow = 65536;
// Leases due within this much of each other are renewed in the same round trip.
constexpr auto kCoalesce = std::chrono::milliseconds(2);

std::int64_t cpu_us(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}
std::int64_t thread_cpu_us() { return cpu_us(CLOCK_THREAD_CPUTIME_ID); }

}  // namespace

void WatchdogImpl::shutdown() noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stop_ = true;
  }
  bell_.ring();
  {
    std::lock_guard<std::mutex> guard(callback_mutex_);
    callback_stop_ = true;
  }
  callback_wake_.notify_all();
  for (std::thread* t : {&renewer_, &callbacker_}) {
    if (!t->joinable()) continue;
    if (t->get_id() == std::this_thread::get_id()) {
      t->detach();  // it holds a reference to *this and exits by itself
    } else {
      t->join();
    }
  }
}

void WatchdogImpl::ensure_started() {
  if (started_) return;
  if (stop_) throw Error("redlock: the watchdog is stopped (its threads could not be started)");
  auto self = shared_from_this();
  renewer_ = std::thread([self] { self->renew_loop(); });
  try {
    callbacker_ = std::thread([self] { self->callback_loop(); });
  } catch (...) {
    stop_ = true;  // mutex_ is held: the renewal thread sees it when it gets the lock, and exits
    bell_.ring();
    renewer_.detach();
    throw;
  }
  started_ = true;
}

SteadyClock::time_point WatchdogImpl::next_due(const Entry& entry,
                                               SteadyClock::time_point from) const {
  // About ttl/3, spread by +-10% so that leases taken together do not renew in lock-step.
  const auto third = std::chrono::nanoseconds(entry.backend->ttl()) / 3;
  return from + third - third / 5 + jittered(third / 5);
}

void WatchdogImpl::watch(std::shared_ptr<LeaseBackend> backend, std::shared_ptr<HoldState> hold,
                         WatchSettings settings) {
  auto entry = std::make_unique<Entry>();
  entry->backend = std::move(backend);
  entry->hold = std::move(hold);
  entry->settings = std::move(settings);
  entry->due = next_due(*entry, entry->hold->acquired());
  const std::shared_ptr<HoldState> hold_ref = entry->hold;
  const HoldState* held = hold_ref.get();
  {
    std::lock_guard<std::mutex> guard(mutex_);
    ensure_started();
    std::size_t slot = 0;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      entries_[slot] = std::move(entry);
      free_slots_.pop_back();
    } else {
      slot = entries_.size();
      entries_.push_back(std::move(entry));
      free_slots_.reserve(entries_.size());  // so that free_slot() never allocates
    }
    slot_of_[held] = slot;
    // Wake the renewal thread only if this lease is due before everything it is waiting for.
    const bool sooner = entries_[slot]->due < queue_.next();
    queue_.push(Due{entries_[slot]->due, slot});
    if (sooner) bell_.ring();
  }
  // The entry goes as soon as the hold ends (release, loss, cap), not at its next due time.
  std::weak_ptr<WatchdogImpl> weak = weak_from_this();
  auto hook = [weak, held] {
    if (auto self = weak.lock()) self->forget(held);
  };
  if (!hold_ref->set_end_hook(std::move(hook))) forget(held);
}

std::unique_ptr<WatchdogImpl::Entry> WatchdogImpl::free_slot(std::size_t slot) {
  std::unique_ptr<Entry> entry = std::move(entries_[slot]);
  slot_of_.erase(entry->hold.get());
  free_slots_.push_back(slot);  // cannot throw: capacity was reserved when the slot was made
  return entry;
}

void WatchdogImpl::forget(const HoldState* hold) noexcept {
  std::unique_ptr<Entry> dead;  // destroyed after unlocking (see renew_batch)
  std::lock_guard<std::mutex> guard(mutex_);
  const auto it = slot_of_.find(hold);
  if (it == slot_of_.end()) return;
  Entry& entry = *entries_[it->second];
  if (entry.in_batch) {
    entry.dropped = true;  // the renewal thread frees it when the batch is done
    return;
  }
  dead = free_slot(it->second);
}

void WatchdogImpl::reschedule(const HoldState& hold) {
  const auto now = SteadyClock::now();
  const auto when = now + (hold.valid_until() - now) / 3;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    const auto it = slot_of_.find(&hold);
    if (it == slot_of_.end()) return;
    Entry& entry = *entries_[it->second];
    if (entry.in_batch) {
      entry.hurry = std::min(entry.hurry, when);
      return;
    }
    if (when >= entry.due) return;
    entry.due = when;
    queue_.push(Due{when, it->second});
  }
  bell_.ring();
}

void WatchdogImpl::hurry(const void* group) noexcept {
  const auto now = SteadyClock::now();
  bool any = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    for (std::size_t slot = 0; slot < entries_.size(); ++slot) {
      Entry* entry = entries_[slot].get();
      if (entry == nullptr || entry->backend->batch_group() != group) continue;
      any = true;
      if (entry->in_batch) {
        entry->hurry = now;
      } else if (now < entry->due) {
        try {
          queue_.push(Due{now, slot});
          entry->due = now;
        } catch (...) {  // no memory: renewed when planned
        }
      }
    }
  }
  if (any) bell_.ring();
}

void WatchdogImpl::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> guard(callback_mutex_);
    callbacks_.push_back(std::move(task));
  }
  callback_wake_.notify_one();
}

void WatchdogImpl::report_lost(const std::string& key, const std::shared_ptr<HoldState>& hold,
                               const std::function<void(const LostEvent&)>& on_lost,
                               LostReason reason) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    ++lost_;
    ensure_started();
  }
  if (!on_lost) return;
  LostEvent event{key, reason, hold->fence(), hold->renewals()};
  post([on_lost, event] { on_lost(event); });
}

void WatchdogImpl::lose(Entry& entry, LostReason reason) {
  std::vector<std::function<void()>> token_callbacks;
  if (!entry.hold->mark_lost(reason, &token_callbacks)) return;
  observe_loss(observer_of(entry.settings.observer), entry.backend->key(), reason,
               entry.hold->fence(), entry.hold->renewals());
  if (!token_callbacks.empty()) {
    // LeaseToken::on_lost callbacks run on the callback thread too, never on this one.
    post([callbacks = std::move(token_callbacks)]() mutable {
      for (auto& callback : callbacks) {
        try {
          callback();
        } catch (...) {
        }
      }
    });
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    ++lost_;
  }
  if (reason == LostReason::cap_reached) {
    logf(LogLevel::info, "redlock: lease on {} released at its cap after {} renewals",
         entry.backend->key(), entry.hold->renewals());
  } else {
    logf(LogLevel::warn, "redlock: lease on {} lost ({}) after {} renewals", entry.backend->key(),
         to_string(reason), entry.hold->renewals());
  }
  if (entry.settings.on_lost) {
    LostEvent event{entry.backend->key(), reason, entry.hold->fence(), entry.hold->renewals()};
    auto callback = entry.settings.on_lost;
    post([callback, event] { callback(event); });
  }
}

void WatchdogImpl::record_lateness(std::chrono::microseconds late) {
  if (lateness_us_.size() < kLatenessWindow) {
    lateness_us_.push_back(late.count());
  } else {
    lateness_us_[lateness_next_] = late.count();
    lateness_next_ = (lateness_next_ + 1) % kLatenessWindow;
  }
}

void WatchdogImpl::renew_loop() noexcept {
  std::vector<std::size_t> slots;
  {
    // stats() reads this thread's CPU clock while it runs (not a system call per batch here).
    std::lock_guard<std::mutex> guard(mutex_);
    renewer_clock_known_ = pthread_getcpuclockid(pthread_self(), &renewer_clock_) == 0;
  }
  for (;;) {
    try {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
          if (stop_) {
            thread_cpu_us_.store(thread_cpu_us(), std::memory_order_relaxed);  // for stats()
            return;
          }
          const auto next = queue_.next();
          if (next <= SteadyClock::now()) break;
          const std::uint32_t ticket = bell_.ticket();
          lock.unlock();
          bell_.sleep(ticket, next);  // util/doorbell.hpp: one system call, not two
          lock.lock();
        }
        const auto now = SteadyClock::now();
        slots.clear();
        popped_.clear();
        queue_.take_until(now + kCoalesce, popped_);
        // Thousands of leases are spread over memory: their entries are fetched together, not
        // one cache miss after another (the same for the batch's holds in renew_batch).
        for (const Due& due : popped_) __builtin_prefetch(&entries_[due.slot]);
        for (const Due& due : popped_) prefetch_object(entries_[due.slot].get());
        for (const Due& due : popped_) {
          Entry* entry = entries_[due.slot].get();
          if (entry == nullptr || entry->due != due.when) continue;  // stale queue record
          record_lateness(std::chrono::duration_cast<std::chrono::microseconds>(
              std::max(now - due.when, SteadyClock::duration::zero())));
          entry->in_batch = true;
          slots.push_back(due.slot);
        }
      }
      if (!slots.empty()) renew_batch(slots, SteadyClock::now());
    } catch (const std::exception& e) {
      logf(LogLevel::error, "redlock: watchdog: {}", e.what());
    } catch (...) {
      logf(LogLevel::error, "redlock: watchdog: unknown exception");
    }
  }
}

void WatchdogImpl::callback_loop() noexcept {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(callback_mutex_);
      callback_wake_.wait(lock, [this] { return callback_stop_ || !callbacks_.empty(); });
      if (callbacks_.empty()) return;  // stopping, and nothing left to run
      task = std::move(callbacks_.front());
      callbacks_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      logf(LogLevel::error, "redlock: on_lost callback threw: {}", e.what());
    } catch (...) {
      logf(LogLevel::error, "redlock: on_lost callback threw");
    }
  }
}

WatchdogStats WatchdogImpl::stats() const {
  WatchdogStats out;
  std::vector<std::int64_t> window;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    out.leases = entries_.size() - free_slots_.size();
    out.renewals = renewals_;
    out.refused = refused_;
    out.lost = lost_;
    out.round_trips = round_trips_;
    window = lateness_us_;
    // While stop_ is false the renewal thread runs (it exits only once it sees stop_, under
    // mutex_), so its clock is valid; after, the figure it stored on its way out.
    const std::int64_t live = renewer_clock_known_ && !stop_ ? cpu_us(renewer_clock_) : -1;
    out.thread_cpu = std::chrono::microseconds(
        live >= 0 ? live : thread_cpu_us_.load(std::memory_order_relaxed));
  }
  if (!window.empty()) {
    std::sort(window.begin(), window.end());
    auto at = [&](double q) {
      const auto i = static_cast<std::size_t>(q * static_cast<double>(window.size() - 1));
      return std::chrono::microseconds(window[i]);
    };
    out.lateness_p50 = at(0.50);
    out.lateness_p99 = at(0.99);
    out.lateness_max = std::chrono::microseconds(window.back());
  }
  return out;
}

void WatchdogImpl::reset_stats() {
  std::lock_guard<std::mutex> guard(mutex_);
  renewals_ = 0;
  refused_ = 0;
  lost_ = 0;
  round_trips_ = 0;
  lateness_us_.clear();
  lateness_next_ = 0;
}

}  // namespace detail

Watchdog::Watchdog() : impl_(std::make_shared<detail::WatchdogImpl>()) {}

Watchdog::~Watchdog() { impl_->shutdown(); }

std::shared_ptr<Watchdog> Watchdog::shared() {
  static const std::shared_ptr<Watchdog> instance = std::make_shared<Watchdog>();
  return instance;
}

WatchdogStats Watchdog::stats() const { return impl_->stats(); }

void Watchdog::reset_stats() { impl_->reset_stats(); }

}  // namespace redlock
