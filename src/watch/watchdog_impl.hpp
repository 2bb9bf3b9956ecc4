// src/watch/watchdog_impl.hpp: the watchdog's machinery (see include/redlock/watchdog.hpp).
#ifndef REDLOCK_SRC_WATCHDOG_IMPL_HPP
#define REDLOCK_SRC_WATCHDOG_IMPL_HPP

#include <time.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <redlock/observer.hpp>
#include <redlock/options.hpp>
#include <redlock/watchdog.hpp>

#include "core/backend.hpp"
#include "core/hold.hpp"
#include "core/tally.hpp"
#include "util/doorbell.hpp"
#include "watch/due_queue.hpp"
#include "watch/release_retry.hpp"

namespace redlock {
namespace detail {

struct WatchSettings {
  std::uint64_t max_renewals{0};
  std::chrono::milliseconds max_hold{0};
  std::function<void(const LostEvent&)> on_lost;
  std::shared_ptr<Observer> observer;  // the lock's own; nullptr: the process-wide one
};

// Shared with its own threads (they hold a reference), so that the last Watchdog reference may
// be dropped anywhere, even on one of these threads (an on_lost callback capturing the Watchdog).
//
// Threads: one renewal thread per lane (LeaseBackend::renewal_lane: a store or a set of
// servers), so that a lane whose round trip hangs (a store cut off) never delays another lane's
// renewals (the isolation the ZooKeeper component got by giving each Session a Watchdog of its
// own, here for every store within one Watchdog, Watchdog::shared() included); one deadline
// thread, which marks a hold lost when its validity ends on the steady clock (a lead of 1% of
// the ttl, 1-10 ms, before it: deadline_lead in watchdog.cpp), whatever its renewal's round
// trip does; one callback thread for on_lost. Lock order: mutex_ is taken alone (never while
// calling into a hold that may block, never while a renewal is in flight); a hold's mutex is taken
// without mutex_ held; callback_mutex_ alone.
class WatchdogImpl : public std::enable_shared_from_this<WatchdogImpl> {
 public:
  WatchdogImpl() = default;
  ~WatchdogImpl() = default;
  // Stops every thread: joins them, or detaches the one it runs on. Never throws.
  void shutdown() noexcept;
  WatchdogImpl(const WatchdogImpl&) = delete;
  WatchdogImpl& operator=(const WatchdogImpl&) = delete;

  // Starts renewing `hold` (first renewal at about ttl/3) on its backend's lane, and watching
  // its validity deadline. Starts the threads it needs. Throws std::system_error if a thread
  // cannot be started (nothing is watched then).
  void watch(std::shared_ptr<LeaseBackend> backend, std::shared_ptr<HoldState> hold,
             WatchSettings settings);
  // An explicit extend changed `hold`'s validity: its next renewal is due within a third of
  // what is left (sooner than planned if the extend was short). No-op if it is not watched.
  void reschedule(const HoldState& hold);
  // The store behind batch group `group` says its leases may be gone (a ZooKeeper session
  // expired): every lease of that group is renewed now, so a loss is reported at once rather
  // than at its next planned renewal. Never throws; any thread, but not under a lock the
  // renewal thread may wait for.
  void hurry(const void* group) noexcept;
  // Stops watching `hold` (its hold ended) and frees its entry. No-op if it is not watched.
  void forget(const HoldState* hold) noexcept;
  // Runs on_lost for a hold found lost outside the watchdog (e.g. by extend()), on the callback
  // thread. No-op if on_lost is empty.
  void report_lost(const std::string& key, const std::shared_ptr<HoldState>& hold,
                   const std::function<void(const LostEvent&)>& on_lost, LostReason reason);

  // Retries a release that left nodes owed (ReleaseResult::owed) on a thread of the store's own
  // lane, never delaying a renewal or another store's retries, until `until` (the hold's
  // validity end). Never throws (watch/release_retry.hpp).
  void retry_release(std::shared_ptr<LeaseBackend> backend, std::string token,
                     std::vector<char> owed, SteadyClock::time_point until) noexcept {
    retries_.add(std::move(backend), std::move(token), std::move(owed), until);
  }

  WatchdogStats stats() const;
  void reset_stats();

 private:
  struct Lane;
  struct Entry {
    std::shared_ptr<LeaseBackend> backend;
    std::shared_ptr<HoldState> hold;
    WatchSettings settings;
    Lane* lane{nullptr};
    SteadyClock::time_point due;
    // Guarded by mutex_. While in a renewal batch the renewal thread owns `due`; reschedule()
    // and forget() leave their wishes in `hurry` and `dropped` for it.
    bool in_batch{false};
    bool dropped{false};
    SteadyClock::time_point hurry{SteadyClock::time_point::max()};
    // Guarded by mutex_: when the deadline thread looks at this hold next (its record in
    // deadlines_); max: not armed.
    SteadyClock::time_point armed{SteadyClock::time_point::max()};
    bool done{false};  // renewal thread only: stop watching after this batch
  };
  using Due = DueQueue::Due;
  // A lease whose renewal was begun in this batch.
  struct Renewing {
    std::size_t slot;
    Entry* entry;
  };
  // A lane's own counts, folded into the stats below by close_batch() under the one lock it
  // takes (not one lock per renewal).
  struct BatchCounts {
    std::uint64_t renewals{0};
    std::uint64_t refused{0};
    std::uint64_t round_trips{0};
  };
  // One renewal thread and its queue; `queue` and `leases` are guarded by mutex_, the batch
  // buffers are the thread's own. A lane with no lease for kLaneIdle ends its thread and goes
  // (a process that makes Clients and drops them keeps no thread per Client it ever had).
  struct Lane {
    std::uintptr_t key{0};
    std::size_t leases{0};  // entries on this lane
    DueQueue queue;
    Doorbell bell;
    std::thread thread;
    BatchCounts batch;
    std::vector<std::size_t> slots;
    std::vector<Entry*> entries;
    std::vector<Renewing> renewing;
    std::vector<RenewItem> items;
    std::vector<Due> popped;
    clockid_t clock{};             // its CPU clock (guarded by mutex_)
    bool clock_known{false};       // guarded by mutex_
    std::int64_t cpu_at_exit{-1};  // guarded by mutex_: stored as the thread exits
  };

  void ensure_started();               // mutex_ held
  Lane& lane_for(std::uintptr_t key);  // mutex_ held; starts the lane's thread
  void renew_loop(Lane& lane) noexcept;
  // The lane's thread waits for its next due renewal (mutex_ held through `lock`). Returns
  // false when the thread must end: stop_, or idle for kLaneIdle (then the lane is retired:
  // detached from lanes_ into `retired`, destroyed by its own thread after unlocking).
  bool wait_due(Lane& lane, std::unique_lock<std::mutex>& lock, std::unique_ptr<Lane>& retired);
  void deadline_loop() noexcept;
  void callback_loop() noexcept;
  // The entries of `lane.slots`, their holds and backends prefetched.
  const std::vector<Entry*>& entries_of(Lane& lane);
  // The holds of `lane.slots` whose renewal begins, into lane.renewing and lane.items.
  void gather_batch(Lane& lane);
  // Renews the due leases in `lane.slots`: one extend_many() per batch group of their backends
  // (one round trip per node for the Redis engines).
  void renew_batch(Lane& lane);
  // extend_many() on the items of each batch group, results in place. Returns the round trips.
  static std::size_t extend_grouped(std::vector<RenewItem>& items);
  // Why a due lease is given up on purpose now (max_renewals or max_hold reached; an async grant
  // still undelivered after one ttl), if it is.
  std::optional<LostReason> give_up(const Entry& entry, SteadyClock::time_point now) const;
  // Checks a due lease (ending, give_up(), expiry) and begins its renewal. False: not renewed.
  bool begin(Entry& entry, SteadyClock::time_point now);
  // Applies a renewal's verdict: reschedules the lease, or declares it lost.
  void conclude(Lane& lane, const Renewing& renewing, const RenewalOutcome& outcome,
                SteadyClock::time_point started, SteadyClock::time_point done);
  void lose(Entry& entry, LostReason reason);
  // Tells everyone of a loss this thread marked (observer, log, LeaseToken and on_lost
  // callbacks, posted to the callback thread).
  void announce_loss(const LeaseBackend& backend, const HoldState& hold,
                     const WatchSettings& settings, LostReason reason,
                     std::vector<std::function<void()>> token_callbacks);
  // Arms the deadline thread for `entry` at its validity's end (less the lead) if that is
  // sooner than it is armed for. mutex_ held.
  void arm(std::size_t slot, Entry& entry);
  // Marks lost, and announces, the holds whose deadline records are due (deadline thread).
  void expire_due(SteadyClock::time_point now);
  void post(std::function<void()> task);
  SteadyClock::time_point next_due(const Entry& entry, SteadyClock::time_point from) const;
  void record_lateness(std::chrono::microseconds late);  // mutex_ held
  std::unique_ptr<Entry> free_slot(std::size_t slot);    // mutex_ held
  // Ends a batch: frees the entries it finished (or that were forgotten meanwhile) into `dead`,
  // applies reschedules that came in meanwhile. mutex_ held.
  void close_batch(Lane& lane, std::vector<std::unique_ptr<Entry>>& dead);

  mutable std::mutex mutex_;
  bool stop_{false};
  bool started_{false};
  std::vector<std::unique_ptr<Entry>> entries_;  // slot -> entry (null: free)
  std::vector<std::size_t> free_slots_;
  std::unordered_map<const HoldState*, std::size_t> slot_of_;  // the entry watching a hold
  std::vector<std::unique_ptr<Lane>> lanes_;                   // guarded by mutex_
  std::unordered_map<std::uintptr_t, Lane*> lane_of_;          // guarded by mutex_
  DueQueue deadlines_;  // guarded by mutex_: validity deadlines (Entry::armed)
  Doorbell deadline_bell_;
  std::thread deadliner_;

  std::mutex callback_mutex_;
  std::condition_variable callback_wake_;
  std::deque<std::function<void()>> callbacks_;
  bool callback_stop_{false};
  std::thread callbacker_;

  // Stats (guarded by mutex_).
  std::uint64_t renewals_{0};
  std::uint64_t refused_{0};
  std::uint64_t lost_{0};
  std::uint64_t round_trips_{0};
  std::vector<std::int64_t> lateness_us_;  // ring of the last kWindow
  std::size_t lateness_next_{0};
  std::int64_t retired_cpu_us_{0};  // the CPU time of lanes retired while idle

  ReleaseRetries retries_;  // its own threads, one per lane with a release owed
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_WATCHDOG_IMPL_HPP
