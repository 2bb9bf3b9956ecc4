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
class WatchdogImpl : public std::enable_shared_from_this<WatchdogImpl> {
 public:
  WatchdogImpl() = default;
  ~WatchdogImpl() = default;
  // Stops both threads: joins them, or detaches the one it runs on. Never throws.
  void shutdown() noexcept;
  WatchdogImpl(const WatchdogImpl&) = delete;
  WatchdogImpl& operator=(const WatchdogImpl&) = delete;

  // Starts renewing `hold` (first renewal at about ttl/3). Starts the threads if needed.
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

  WatchdogStats stats() const;
  void reset_stats();

 private:
  struct Entry {
    std::shared_ptr<LeaseBackend> backend;
    std::shared_ptr<HoldState> hold;
    WatchSettings settings;
    SteadyClock::time_point due;
    // Guarded by mutex_. While in a renewal batch the renewal thread owns `due`; reschedule()
    // and forget() leave their wishes in `hurry` and `dropped` for it.
    bool in_batch{false};
    bool dropped{false};
    SteadyClock::time_point hurry{SteadyClock::time_point::max()};
    bool done{false};  // renewal thread only: stop watching after this batch
  };
  using Due = DueQueue::Due;

  void ensure_started();  // mutex_ held
  void renew_loop() noexcept;
  void callback_loop() noexcept;
  // A lease whose renewal was begun in this batch.
  struct Renewing {
    std::size_t slot;
    Entry* entry;
  };
  // The entries of `slots` (in batch_entries_), their holds and backends prefetched.
  const std::vector<Entry*>& entries_of(const std::vector<std::size_t>& slots);
  // Renews the due leases in `slots`: one extend_many() per batch group of their backends (one
  // round trip per node for the Redis engines).
  void renew_batch(std::vector<std::size_t>& slots, SteadyClock::time_point now);
  // extend_many() on the items of each batch group, results in place. Returns the round trips.
  static std::size_t extend_grouped(std::vector<RenewItem>& items);
  bool at_cap(const Entry& entry, SteadyClock::time_point now) const;
  // Checks a due lease (ending, cap, expiry) and begins its renewal. False: not renewed now.
  bool begin(Entry& entry, SteadyClock::time_point now);
  // Applies a renewal's verdict: reschedules the lease, or declares it lost.
  void conclude(const Renewing& renewing, const RenewalOutcome& outcome,
                SteadyClock::time_point started, SteadyClock::time_point done);
  void lose(Entry& entry, LostReason reason);
  void post(std::function<void()> task);
  SteadyClock::time_point next_due(const Entry& entry, SteadyClock::time_point from) const;
  void record_lateness(std::chrono::microseconds late);  // mutex_ held
  std::unique_ptr<Entry> free_slot(std::size_t slot);    // mutex_ held
  // Ends a batch: frees the entries it finished (or that were forgotten meanwhile) into `dead`,
  // applies reschedules that came in meanwhile. mutex_ held.
  void close_batch(const std::vector<std::size_t>& slots,
                   std::vector<std::unique_ptr<Entry>>& dead);

  mutable std::mutex mutex_;
  Doorbell bell_;  // wakes the renewal thread (util/doorbell.hpp)
  bool stop_{false};
  bool started_{false};
  std::vector<std::unique_ptr<Entry>> entries_;  // slot -> entry (null: free)
  std::vector<std::size_t> free_slots_;
  std::unordered_map<const HoldState*, std::size_t> slot_of_;  // the entry watching a hold
  DueQueue queue_;
  std::thread renewer_;

  std::mutex callback_mutex_;
  std::condition_variable callback_wake_;
  std::deque<std::function<void()>> callbacks_;
  bool callback_stop_{false};
  std::thread callbacker_;

  // The renewal thread's own: a batch's entries and counts, folded into the stats below by
  // close_batch() under the one lock it takes (not one lock per renewal).
  struct BatchCounts {
    std::uint64_t renewals{0};
    std::uint64_t refused{0};
    std::uint64_t round_trips{0};
  };
  BatchCounts batch_;
  std::vector<Entry*> batch_entries_;
  std::vector<Renewing> batch_renewing_;
  std::vector<RenewItem> batch_items_;
  std::vector<Due> popped_;  // renew_loop(): the records taken for the next batch

  // Stats (guarded by mutex_).
  std::uint64_t renewals_{0};
  std::uint64_t refused_{0};
  std::uint64_t lost_{0};
  std::uint64_t round_trips_{0};
  std::vector<std::int64_t> lateness_us_;  // ring of the last kWindow
  std::size_t lateness_next_{0};
  std::atomic<std::int64_t> thread_cpu_us_{0};  // the renewal thread's, stored as it exits
  clockid_t renewer_clock_{};                   // its CPU clock (guarded by mutex_)
  bool renewer_clock_known_{false};
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_WATCHDOG_IMPL_HPP
