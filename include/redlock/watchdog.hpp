// redlock/watchdog.hpp: background threads that keep many leases alive.
//
// Locks created with LockOptions::auto_renew = true are renewed by a Watchdog about every ttl/3
// while held. Leases on the same node are renewed together, in one pipelined round trip. Each
// store or set of servers (a Redis node set, a PostgreSQL Database, a ZooKeeper session) has a
// renewal thread of its own, so a store that stops answering delays no other store's renewals.
// When a renewal fails the holder learns at once: owns_lock() turns false, its LeaseToken is
// raised and on_lost runs (on a separate callback thread, so a slow callback cannot delay other
// renewals). A renewal that hangs does not delay that either: a deadline thread reports the loss
// by the hold's validity end on the steady clock (a hair before it), a renewal confirmed after
// that end does not revive the hold, and none is sent once it ended.
//
//   auto dog = std::make_shared<redlock::Watchdog>();   // or leave options.watchdog empty to use
//   redlock::LockOptions opts;                          // the process-wide Watchdog::shared()
//   opts.auto_renew = true;
//   opts.watchdog = dog;
//
// The watchdog never renews a lease after its release has begun, never throws out of its thread,
// and does not keep a process alive: its threads stop when the last reference goes away.
#ifndef REDLOCK_WATCHDOG_HPP
#define REDLOCK_WATCHDOG_HPP

#include <chrono>   // std::chrono::microseconds
#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <memory>   // std::shared_ptr

namespace redlock {

namespace detail {
class WatchdogImpl;
struct Access;
}  // namespace detail

// Counters since construction (or the last reset_stats()).
struct WatchdogStats {
  std::size_t leases{0};         // leases watched right now
  std::uint64_t renewals{0};     // renewals confirmed
  std::uint64_t refused{0};      // renewals a node answered "not yours" (key gone or taken)
  std::uint64_t lost{0};         // leases reported lost (any reason, caps included)
  std::uint64_t round_trips{0};  // batches sent (one per node per wake-up)
  // How late renewals ran after they were due, over the last 65,536 renewals.
  std::chrono::microseconds lateness_p50{0};
  std::chrono::microseconds lateness_p99{0};
  std::chrono::microseconds lateness_max{0};
  // CPU time used by the renewal threads (one per store or set of servers) since they started.
  std::chrono::microseconds thread_cpu{0};
  // Releases that failed on some node (a reset, a timeout, a failover under way) and were
  // retried there in the background until the hold's validity would end, so that the key does
  // not stay for its whole ttl; and of those, the ones a retry completed on every such node.
  std::uint64_t release_retries{0};
  std::uint64_t releases_retried{0};
};

class Watchdog {
 public:
  // Creates an idle watchdog; its threads start with the first lease (a renewal thread with the
  // first lease of each store or set of servers). Throws std::system_error only if a thread
  // cannot be started (later, at such a lease).
  Watchdog();
  // Stops and joins its threads (at most about one command timeout if a renewal is in flight).
  // Leases still watched are no longer renewed and expire by their ttl. Never throws.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The process-wide watchdog used when LockOptions::watchdog is empty; created on first use.
  // Thread-safe.
  static std::shared_ptr<Watchdog> shared();

  // A snapshot of the counters. Thread-safe.
  WatchdogStats stats() const;
  // Zeroes the counters and the lateness window. Thread-safe.
  void reset_stats();

 private:
  friend struct detail::Access;  // the library's own layers reach the machinery
                                 // (src/api/access.hpp)
  std::shared_ptr<detail::WatchdogImpl> impl_;
};

}  // namespace redlock

#endif  // REDLOCK_WATCHDOG_HPP
