// src/watch/renewal.cpp: one renewal batch of one watchdog lane: which due leases renew, one
// extend_many() per batch group of their backends (core/backend.hpp), and each lease's verdict
// applied.
#include <algorithm>
#include <optional>

#include "core/tally.hpp"
#include "util/log_internal.hpp"
#include "util/observe.hpp"
#include "util/prefetch.hpp"
#include "watch/watchdog_impl.hpp"

namespace redlock {
namespace detail {

std::optional<LostReason> WatchdogImpl::give_up(const Entry& entry,
                                                SteadyClock::time_point now) const {
  const WatchSettings& s = entry.settings;
  const HoldState& hold = *entry.hold;
  if ((s.max_renewals > 0 && hold.renewals() >= s.max_renewals) ||
      (s.max_hold.count() > 0 && now - hold.acquired() >= s.max_hold)) {
    return LostReason::cap_reached;
  }
  if (hold.undelivered() && now - hold.acquired() >= entry.backend->ttl()) {
    return LostReason::undelivered;
  }
  return std::nullopt;
}

bool WatchdogImpl::begin(Entry& entry, SteadyClock::time_point now) {
  HoldState& hold = *entry.hold;
  if (hold.ending()) return false;
  if (const std::optional<LostReason> reason = give_up(entry, now)) {
    // The seeds' advice: at the cap, give the lock up rather than hold it forever. The holder
    // is told first: once the key is deleted (and the release published) another process may
    // hold the lock, so owns_lock() must already be false by then.
    if (hold.begin_end()) {
      lose(entry, *reason);
      try {
        entry.backend->release(hold.token(), Announce::waiters);
      } catch (...) {
      }
    }
    return false;
  }
  if (hold.lost(now)) {
    lose(entry, LostReason::expired);
    return false;
  }
  return hold.begin_renewal(entry.backend->extend_floor(now, entry.backend->ttl()));
}

std::size_t WatchdogImpl::extend_grouped(std::vector<RenewItem>& items) {
  const auto group_of = [](const RenewItem& item) { return item.backend->batch_group(); };
  const void* const first = group_of(items.front());
  if (std::all_of(items.begin(), items.end(),
                  [&](const RenewItem& item) { return group_of(item) == first; })) {
    return items.front().backend->extend_many(items.data(), items.size());
  }
  // Rare: backends of different kinds share this watchdog. One call per group; the items keep
  // their places.
  std::size_t round_trips = 0;
  std::vector<bool> taken(items.size(), false);
  std::vector<RenewItem> group;
  std::vector<std::size_t> places;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (taken[i]) continue;
    group.clear();
    places.clear();
    for (std::size_t j = i; j < items.size(); ++j) {
      if (taken[j] || group_of(items[j]) != group_of(items[i])) continue;
      taken[j] = true;
      group.push_back(items[j]);
      places.push_back(j);
    }
    round_trips += group.front().backend->extend_many(group.data(), group.size());
    for (std::size_t m = 0; m < group.size(); ++m) items[places[m]] = std::move(group[m]);
  }
  return round_trips;
}

const std::vector<WatchdogImpl::Entry*>& WatchdogImpl::entries_of(Lane& lane) {
  std::vector<Entry*>& entries = lane.entries;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    entries.clear();
    for (std::size_t slot : lane.slots) entries.push_back(entries_[slot].get());
  }
  for (const Entry* entry : entries) {  // see util/prefetch.hpp
    prefetch_object(entry->hold.get());
    prefetch_bytes(entry->backend.get(), 2 * kCacheLine);
  }
  return entries;
}

// Gathers the lane's batch: each hold whose renewal can begin (begin()) becomes a RenewItem in
// lane.items, beside its slot in lane.renewing; the others are marked done.
void WatchdogImpl::gather_batch(Lane& lane) {
  const std::vector<std::size_t>& slots = lane.slots;
  std::vector<Renewing>& renewing = lane.renewing;  // kept across batches: no allocation
  std::vector<RenewItem>& items = lane.items;       // once warm
  renewing.clear();
  items.clear();
  renewing.reserve(slots.size());
  items.reserve(slots.size());
  const std::vector<Entry*>& entries = entries_of(lane);
  // Read just before the batch is sent: a renewal is never sent for a hold whose validity has
  // ended (begin() declares it expired instead).
  const auto now = SteadyClock::now();
  for (std::size_t i = 0; i < slots.size(); ++i) {
    Entry* entry = entries[i];
    if (!begin(*entry, now)) {
      entry->done = true;
      continue;
    }
    renewing.push_back(Renewing{slots[i], entry});
    items.push_back(
        RenewItem{entry->backend.get(), &entry->hold->token(), {}, 0, entry->hold->valid_until()});
    // The key's and the token's bytes (heap blocks of their own) are copied into the batch's
    // commands once every lease has begun: fetched meanwhile.
    __builtin_prefetch(entry->hold->token().data());
    __builtin_prefetch(entry->backend->key().data());
  }
}

void WatchdogImpl::renew_batch(Lane& lane) {
  gather_batch(lane);
  std::vector<Renewing>& renewing = lane.renewing;
  std::vector<RenewItem>& items = lane.items;
  // Every begin_renewal() above must be matched by an end_renewal(), also if something below
  // throws (bad_alloc): otherwise a release would wait for this renewal forever.
  struct Unwind {
    std::vector<Renewing>& renewing;
    std::size_t ended{0};
    ~Unwind() {
      for (std::size_t i = ended; i < renewing.size(); ++i) {
        renewing[i].entry->hold->end_renewal(false);
      }
    }
  } unwind{renewing};
  const auto started = SteadyClock::now();
  if (!items.empty()) lane.batch.round_trips += extend_grouped(items);
  const auto done = SteadyClock::now();
  for (std::size_t k = 0; k < renewing.size(); ++k) {
    HoldState& hold = *renewing[k].entry->hold;
    const RenewItem& item = items[k];
    RenewalOutcome outcome;
    outcome.nodes = item.backend->size();
    outcome.confirmed = item.result.confirmed;
    outcome.refused = item.refused;
    outcome.refusal = item.result.reason;
    outcome.held_in_time = item.result.held && done < hold.valid_until();
    // The hold's validity after this is capped by any extend(ttl) that overlapped it.
    outcome.held_in_time = hold.end_renewal(outcome.held_in_time);
    ++unwind.ended;
    outcome.lapsed = hold.lost(SteadyClock::now());
    conclude(lane, renewing[k], outcome, started, done);
  }
  // Destroyed after unlocking: an entry may hold the last reference to the Watchdog (through
  // its on_lost callback), whose destruction takes mutex_.
  std::vector<std::unique_ptr<Entry>> dead;
  dead.reserve(lane.slots.size());
  std::lock_guard<std::mutex> guard(mutex_);
  close_batch(lane, dead);
}

void WatchdogImpl::conclude(Lane& lane, const Renewing& renewing, const RenewalOutcome& outcome,
                            SteadyClock::time_point started, SteadyClock::time_point done) {
  Entry& entry = *renewing.entry;
  if (Observer* const observer = observer_of(entry.settings.observer)) {
    ExtendEvent event;
    event.key = entry.backend->key();
    event.renewal = true;
    event.held = outcome.held_in_time && !outcome.lapsed;
    event.latency = done - started;
    event.lateness = std::max(SteadyClock::duration::zero(), started - entry.due);
    observer->on_extend(event);
  }
  lane.batch.refused += outcome.refused;
  logf(LogLevel::debug, "redlock: renewal of {} confirmed by {} of {} nodes", entry.backend->key(),
       outcome.confirmed, outcome.nodes);
  const RenewalVerdict verdict = judge_renewal(outcome);
  switch (verdict.what) {
    case Renewal::renewed: {
      ++lane.batch.renewals;
      // Never later than halfway to the hold's validity (shorter than planned after a short
      // extend(ttl) overlapped this renewal).
      const auto valid_until = entry.hold->valid_until();
      entry.due = std::min(next_due(entry, started), started + (valid_until - started) / 2);
      break;
    }
    case Renewal::lost:
      lose(entry, verdict.reason);
      entry.done = true;
      return;
    case Renewal::retry:
      // Transient failure (timeouts): try again soon, but no later than the validity deadline,
      // where the hold is declared expired.
      entry.due = std::min(done + std::chrono::nanoseconds(entry.backend->ttl()) / 10,
                           entry.hold->valid_until());
      break;
  }
  // Queued again by close_batch(), under the one lock the batch takes at its end.
}

void WatchdogImpl::close_batch(Lane& lane, std::vector<std::unique_ptr<Entry>>& dead) {
  renewals_ += lane.batch.renewals;
  refused_ += lane.batch.refused;
  round_trips_ += lane.batch.round_trips;
  lane.batch = BatchCounts{};
  for (std::size_t slot : lane.slots) {
    Entry& entry = *entries_[slot];
    entry.in_batch = false;
    if (entry.done || entry.dropped) {
      dead.push_back(free_slot(slot));
      continue;
    }
    // An extend(ttl) or hurry() during the batch may have moved the renewal up.
    entry.due = std::min(entry.due, entry.hurry);
    entry.hurry = SteadyClock::time_point::max();
    lane.queue.push(Due{entry.due, slot});
    arm(slot, entry);  // an extend's floor may have lowered the validity
  }
}

}  // namespace detail
}  // namespace redlock
