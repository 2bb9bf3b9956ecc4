// redlock/options.hpp: how a Lock or Redlock behaves (ttl, waiting, fencing, renewal).
//
//   redlock::LockOptions opts;
//   opts.ttl = std::chrono::seconds(10);     // lease length on the server
//   opts.auto_renew = true;                  // the watchdog keeps it alive while held
//   opts.on_lost = [](const redlock::LostEvent& e) { /* stop writing, e.reason says why */ };
//   redlock::Lock lock(client, "orders:compaction", opts);
#ifndef REDLOCK_OPTIONS_HPP
#define REDLOCK_OPTIONS_HPP

#include <chrono>      // std::chrono::milliseconds
#include <cstdint>     // std::uint64_t
#include <functional>  // std::function
#include <memory>      // std::shared_ptr
#include <optional>    // std::optional
#include <string>      // std::string

namespace redlock {

class Observer;  // redlock/observer.hpp

class Watchdog;

// Why a held lease ended without the holder releasing it.
enum class LostReason {
  refused,          // a renewal found the key gone or owned by another token
  no_quorum,        // Redlock: fewer than a quorum of nodes confirmed a renewal
  expired,          // the local validity deadline passed without a confirmed renewal
  cap_reached,      // max_renewals or max_hold was reached; the lock was released on purpose
  session_expired,  // ZooKeeper: the session ended, and with it the lock's ephemeral znode
  undelivered,      // async: the grant's handler did not run within one ttl (its io_context
                    // stopped or stalled); the lock was released on purpose
};

// Short lowercase name ("refused", "no_quorum", "expired", "cap_reached", "session_expired",
// "undelivered").
// Thread-safe.
const char* to_string(LostReason reason) noexcept;

// What on_lost receives.
struct LostEvent {
  std::string key;            // the lock's key
  LostReason reason{};        // why
  std::uint64_t fence{0};     // the fence token of the lost hold (0 without fencing)
  std::uint64_t renewals{0};  // renewals that succeeded during the hold
};

struct LockOptions {
  // How long the lease lives on the server unless renewed. Must be longer than the drift
  // allowance (ttl * clock_drift_factor + 2 ms) and at most 200 years.
  std::chrono::milliseconds ttl{30'000};
  // Base of the wait between attempts in lock()/try_lock_for(): each wait is drawn uniformly from
  // [retry_delay/2, retry_delay*3/2] and never runs past the remaining ttl of the current holder
  // or the caller's deadline. With wake_on_release, a waiter whose subscription the server has
  // confirmed does not use it while the holder's remaining ttl is known: it retries when a
  // release is announced or when that ttl runs out; retry_delay is the pace only while the
  // subscription is not confirmed (a node down, a refused SUBSCRIBE) or the ttl is unknown. Must
  // be > 0.
  std::chrono::milliseconds retry_delay{50};
  // Clock drift allowance: validity = ttl - elapsed - (ttl * factor + 2 ms). In [0, 1).
  double clock_drift_factor{0.01};
  // Issue a fencing token (fence()) with every hold: a per-key counter that only grows.
  bool fencing{false};
  // Waiters subscribe to the lock's release channel and retry as soon as a holder releases,
  // instead of only sleeping retry_delay. Costs one subscriber connection per Client.
  bool wake_on_release{true};
  // First come, first served across processes, and a release wakes exactly one waiter. Unset
  // (the default): on for a Lock and a Semaphore on Redis (standalone, TLS, Sentinel, Cluster; a
  // Semaphore's waiters share one queue, `{<key>}:permit:waiters`, and a released permit goes to
  // the longest-waiting live one), off for a Redlock over several servers (wake-on-release, see
  // below), a MultiLock and a ReadWriteLock (the last two throw std::invalid_argument for true); a
  // PostgreSQL lease-mode lock always queues and a ZooKeeper lock is fair by its recipe. false
  // turns it off (then every waiting process retries on each release: wake-on-release).
  //
  // Waiters queue on the server (`{<key>}:waiters`, `{<key>}:waiters:info`, in the key's slot)
  // and a release hands the lock straight to the longest-waiting live waiter, which learns it
  // from its Client's own channel without another round trip. Nobody refreshes a place: a waiter
  // whose process is gone has no subscriber left on its channel, so a release skips it. The
  // first two waiters watch the holder's lease, so a crashed holder's lease passes on when it
  // expires. While nobody contends, a Lock (without fencing) attempts with a plain SET NX PX
  // like fair = false: a client whose last grant found no queue and whose release nobody heard
  // skips the attempt's queue check until it meets contention (a cycle costs the server 6
  // commands, fair = false's 5; its release still checks the queue and hands over).
  //
  // A Redlock is fair only when asked (true), at a cost: its queue lives on one of its servers
  // (the orderer, the same for every client), and an order kept by one server holds only if that
  // server's refusal overrides the others' grants. So with fair = true that one server vetoes:
  // a stale key of another holder on it refuses every attempt until its ttl ends, even when a
  // majority is free, and every attempt waits for its answer however slow it is (a silent one
  // times out and is skipped). Without it (the default), any majority grants, and a slow or stale
  // minority costs nothing (docs/ARCHITECTURE.md). Every client of a key should use the same
  // setting: mixing is safe, but not fair.
  std::optional<bool> fair;
  // How long a wait (lock(), try_lock_for(), try_lock_until()) rides out servers that cannot be
  // reached (Lock: its server; Redlock: fewer than a quorum answer) before it throws the last
  // ConnectionError/TimeoutError (QuorumUnavailableError for a Redlock). Counted from the first
  // failed attempt of the wait; an answer resets it. A wait whose own deadline comes first throws
  // then. try_lock() never waits: it throws at once. 0: a wait throws at its first failure. At
  // most 200 years.
  std::chrono::milliseconds max_unavailable{10'000};

  // Renew the lease in the background (about every ttl/3) while it is held.
  bool auto_renew{false};
  // The watchdog that renews it. nullptr: the process-wide Watchdog::shared().
  std::shared_ptr<Watchdog> watchdog;
  // Stop after this many renewals: the lock is released and on_lost gets cap_reached. 0: no cap.
  std::uint64_t max_renewals{0};
  // Stop renewing once the hold is this old: released, on_lost gets cap_reached. 0: no cap.
  std::chrono::milliseconds max_hold{0};
  // Called once when a held lease is lost (renewal refused, no quorum, expired, cap reached).
  // Runs on the watchdog's callback thread, never on its renewal thread; must not throw
  // (exceptions are swallowed and logged). May be empty.
  std::function<void(const LostEvent&)> on_lost;
  // Metrics hooks for this lock's events (redlock/observer.hpp). nullptr: the process-wide
  // observer (redlock::set_observer), if any. Shared: the same observer may serve many locks.
  std::shared_ptr<Observer> observer;
};

}  // namespace redlock

#endif  // REDLOCK_OPTIONS_HPP
