// src/watch/watchdog.cpp: one renewal thread per lane (a store or a set of servers) for any
// number of leases, a deadline thread that reports a loss when a hold's validity ends, and a
// callback thread.
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
// A renewal lane with no lease for this long ends its thread.
constexpr auto kLaneIdle = std::chrono::seconds(10);

// How long before a hold's validity ends the deadline thread marks it lost, so that on_lost and
// a worker's stop come by the deadline although waking a thread takes time: 1% of the ttl,
// within [1 ms, 10 ms].
SteadyClock::duration deadline_lead(std::chrono::milliseconds ttl) {
  return std::clamp<SteadyClock::duration>(std::chrono::nanoseconds(ttl) / 100,
                                           std::chrono::milliseconds(1),
                                           std::chrono::milliseconds(10));
}

std::int64_t cpu_us(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}
std::int64_t thread_cpu_us() { return cpu_us(CLOCK_THREAD_CPUTIME_ID); }

}  // namespace

void WatchdogImpl::shutdown() noexcept {
  retries_.stop();
  std::vector<std::thread*> threads{&deadliner_, &callbacker_};
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stop_ = true;
    for (const auto& lane : lanes_) {
      lane->bell.ring();
      threads.push_back(&lane->thread);
    }
  }
  deadline_bell_.ring();
  {
    std::lock_guard<std::mutex> guard(callback_mutex_);
    callback_stop_ = true;
  }
  callback_wake_.notify_all();
  // No lane is added once stop_ is set, so `threads` stays valid.
  for (std::thread* t : threads) {
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
  deadliner_ = std::thread([self] { self->deadline_loop(); });
  try {
    callbacker_ = std::thread([self] { self->callback_loop(); });
  } catch (...) {
    stop_ = true;  // mutex_ is held: the deadline thread sees it when it gets the lock, and exits
    deadline_bell_.ring();
    deadliner_.detach();
    throw;
  }
  started_ = true;
}

WatchdogImpl::Lane& WatchdogImpl::lane_for(std::uintptr_t key) {
  const auto found = lane_of_.find(key);
  if (found != lane_of_.end()) return *found->second;
  auto lane = std::make_unique<Lane>();
  lane->key = key;
  lanes_.reserve(lanes_.size() + 1);
  lane_of_.reserve(lane_of_.size() + 1);
  Lane& made = *lane;
  auto self = shared_from_this();
  made.thread = std::thread([self, &made] { self->renew_loop(made); });  // may throw: no lane
  lanes_.push_back(std::move(lane));
  lane_of_.emplace(key, &made);
  return made;
}

void WatchdogImpl::arm(std::size_t slot, Entry& entry) {
  const auto when = entry.hold->valid_until() - deadline_lead(entry.backend->ttl());
  if (when >= entry.armed) return;
  const bool sooner = when < deadlines_.next();
  deadlines_.push(Due{when, slot});
  entry.armed = when;
  if (sooner) deadline_bell_.ring();
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
  const std::uintptr_t lane_key = entry->backend->renewal_lane();
  {
    std::lock_guard<std::mutex> guard(mutex_);
    ensure_started();
    entry->lane = &lane_for(lane_key);
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
    ++entries_[slot]->lane->leases;  // until free_slot(): the lane stays
    slot_of_[held] = slot;
    Entry& added = *entries_[slot];
    // Wake the renewal thread only if this lease is due before everything it is waiting for.
    const bool sooner = added.due < added.lane->queue.next();
    added.lane->queue.push(Due{added.due, slot});
    if (sooner) added.lane->bell.ring();
    arm(slot, added);
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
  --entry->lane->leases;
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
    arm(it->second, entry);  // a short extend may have moved the deadline up
    if (when >= entry.due) return;
    entry.due = when;
    entry.lane->queue.push(Due{when, it->second});
    entry.lane->bell.ring();
  }
}

void WatchdogImpl::hurry(const void* group) noexcept {
  const auto now = SteadyClock::now();
  std::lock_guard<std::mutex> guard(mutex_);
  for (std::size_t slot = 0; slot < entries_.size(); ++slot) {
    Entry* entry = entries_[slot].get();
    if (entry == nullptr || entry->backend->batch_group() != group) continue;
    if (entry->in_batch) {
      entry->hurry = now;
    } else if (now < entry->due) {
      try {
        entry->lane->queue.push(Due{now, slot});
        entry->due = now;
      } catch (...) {  // no memory: renewed when planned
      }
    }
    entry->lane->bell.ring();
  }
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
  announce_loss(*entry.backend, *entry.hold, entry.settings, reason, std::move(token_callbacks));
}

void WatchdogImpl::announce_loss(const LeaseBackend& backend, const HoldState& hold,
                                 const WatchSettings& settings, LostReason reason,
                                 std::vector<std::function<void()>> token_callbacks) {
  observe_loss(observer_of(settings.observer), backend.key(), reason, hold.fence(),
               hold.renewals());
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
         backend.key(), hold.renewals());
  } else {
    logf(LogLevel::warn, "redlock: lease on {} lost ({}) after {} renewals", backend.key(),
         to_string(reason), hold.renewals());
  }
  if (settings.on_lost) {
    LostEvent event{backend.key(), reason, hold.fence(), hold.renewals()};
    auto callback = settings.on_lost;
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

void WatchdogImpl::renew_loop(Lane& lane) noexcept {
  {
    // stats() reads this thread's CPU clock while it runs (not a system call per batch here).
    std::lock_guard<std::mutex> guard(mutex_);
    lane.clock_known = pthread_getcpuclockid(pthread_self(), &lane.clock) == 0;
  }
  for (;;) {
    try {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        std::unique_ptr<Lane> retired;
        if (!wait_due(lane, lock, retired)) {
          lock.unlock();
          return;  // `retired` (this lane, if idle) goes now; its thread was detached
        }
        const auto now = SteadyClock::now();
        lane.slots.clear();
        lane.popped.clear();
        lane.queue.take_until(now + kCoalesce, lane.popped);
        // Thousands of leases are spread over memory: their entries are fetched together, not
        // one cache miss after another (the same for the batch's holds in renew_batch).
        for (const Due& due : lane.popped) __builtin_prefetch(&entries_[due.slot]);
        for (const Due& due : lane.popped) prefetch_object(entries_[due.slot].get());
        for (const Due& due : lane.popped) {
          Entry* entry = entries_[due.slot].get();
          if (entry == nullptr || entry->due != due.when || entry->lane != &lane) continue;
          record_lateness(std::chrono::duration_cast<std::chrono::microseconds>(
              std::max(now - due.when, SteadyClock::duration::zero())));
          entry->in_batch = true;
          lane.slots.push_back(due.slot);
        }
      }
      if (!lane.slots.empty()) renew_batch(lane);
    } catch (const std::exception& e) {
      logf(LogLevel::error, "redlock: watchdog: {}", e.what());
    } catch (...) {
      logf(LogLevel::error, "redlock: watchdog: unknown exception");
    }
  }
}

bool WatchdogImpl::wait_due(Lane& lane, std::unique_lock<std::mutex>& lock,
                            std::unique_ptr<Lane>& retired) {
  auto idle_since = SteadyClock::time_point::max();
  for (;;) {
    if (stop_) {
      lane.cpu_at_exit = thread_cpu_us();  // for stats()
      return false;
    }
    const auto now = SteadyClock::now();
    auto next = lane.queue.next();
    if (next <= now) return true;
    if (lane.leases > 0) {
      idle_since = SteadyClock::time_point::max();
    } else if (idle_since == SteadyClock::time_point::max()) {
      idle_since = now;
    } else if (now - idle_since >= kLaneIdle) {
      retired_cpu_us_ += std::max<std::int64_t>(0, thread_cpu_us());
      lane_of_.erase(lane.key);
      const auto it =
          std::find_if(lanes_.begin(), lanes_.end(),
                       [&](const std::unique_ptr<Lane>& l) { return l.get() == &lane; });
      retired = std::move(*it);
      lanes_.erase(it);
      lane.thread.detach();
      return false;
    }
    if (idle_since != SteadyClock::time_point::max()) next = std::min(next, idle_since + kLaneIdle);
    const std::uint32_t ticket = lane.bell.ticket();
    lock.unlock();
    lane.bell.sleep(ticket, next);  // util/doorbell.hpp: one system call, not two
    lock.lock();
  }
}

void WatchdogImpl::deadline_loop() noexcept {
  for (;;) {
    try {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
          if (stop_) return;
          const auto next = deadlines_.next();
          if (next <= SteadyClock::now()) break;
          const std::uint32_t ticket = deadline_bell_.ticket();
          lock.unlock();
          deadline_bell_.sleep(ticket, next);
          lock.lock();
        }
      }
      expire_due(SteadyClock::now());
    } catch (const std::exception& e) {
      logf(LogLevel::error, "redlock: watchdog deadline: {}", e.what());
    } catch (...) {
      logf(LogLevel::error, "redlock: watchdog deadline: unknown exception");
    }
  }
}

void WatchdogImpl::expire_due(SteadyClock::time_point now) {
  struct Expiring {
    std::shared_ptr<LeaseBackend> backend;
    std::shared_ptr<HoldState> hold;
    WatchSettings settings;
    SteadyClock::time_point by;
  };
  std::vector<Expiring> expiring;
  std::vector<Due> due;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    deadlines_.take_until(now, due);
    for (const Due& record : due) {
      Entry* entry = entries_[record.slot].get();
      if (entry == nullptr || entry->armed != record.when) continue;  // stale record
      entry->armed = SteadyClock::time_point::max();
      const auto lead = deadline_lead(entry->backend->ttl());
      if (entry->hold->valid_until() - lead > now) {
        arm(record.slot, *entry);  // renewed meanwhile: look again at its new deadline
        continue;
      }
      expiring.push_back(Expiring{entry->backend, entry->hold, entry->settings, now + lead});
    }
  }
  // Outside mutex_: marking a hold lost runs its end hook, which forgets it (takes mutex_).
  for (Expiring& e : expiring) {
    std::vector<std::function<void()>> token_callbacks;
    const LostReason reason = lapse_reason(e.backend->size());
    if (!e.hold->expire_by(e.by, reason, &token_callbacks)) continue;
    announce_loss(*e.backend, *e.hold, e.settings, reason, std::move(token_callbacks));
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
    // A lane's thread runs until it sees stop_ (under mutex_): its clock is valid while stop_
    // is false; after, the figure it stored on its way out.
    std::int64_t cpu = retired_cpu_us_;
    for (const auto& lane : lanes_) {
      const std::int64_t live = lane->clock_known && !stop_ ? cpu_us(lane->clock) : -1;
      cpu += std::max<std::int64_t>(0, live >= 0 ? live : lane->cpu_at_exit);
    }
    out.thread_cpu = std::chrono::microseconds(cpu);
  }
  const ReleaseRetries::Counts retries = retries_.counts();
  out.release_retries = retries.started;
  out.releases_retried = retries.completed;
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
  retries_.reset_counts();
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
