// redlock/semaphore.hpp: Semaphore, at most `limit` concurrent holders of a key on one Redis
// instance, each with its own lease, fence and renewal.
//
// Design (helper names as in docs/operations.md, "Key layout": `<key>:permit:...` when the key has
// a hash tag): a permit is an ordinary lease on one of `limit` slot keys, `{<key>}:permit:1` ..
// `{<key>}:permit:<limit>`. One script takes the first free slot (SET PX ttl) and returns its
// number, so the server's own key expiry (server time) ends a crashed holder's permit, and
// everything after the grant is the machinery a Lock uses: the compare-and-pexpire extend, the
// Watchdog renewing the slot key, compare-and-delete release, fencing, LeaseToken. The counter
// `{<key>}:permit:fence` gives fence tokens that grow across all permits of the key. Waiters queue
// as a Lock's do (LockOptions::fair, on unless false: `{<key>}:permit:waiters` and
// `:permit:waiters:info`): a release hands its permit to the longest-waiting live waiter and
// wakes no other process; with fair = false releases are announced on `{<key>}:permit:released`
// and every waiting process retries. (A sorted set of leases scored by
// server time would need a second kind of lease for the watchdog to renew.) These names are
// reserved. Every user of a key must pass the same limit: it is stored with the permits in
// `{<key>}:permit:limit`, and an attempt with another limit throws LimitMismatchError while any
// permit is held (with none held, the new limit replaces it). Each attempt names every slot key,
// so limit * key size is bounded.
//
//   redlock::LockOptions opts;
//   opts.auto_renew = true;                               // the watchdog renews the permit
//   redlock::Semaphore sem(client, "jobs:encoders", 4, opts);
//   {
//     std::lock_guard<redlock::Semaphore> guard(sem);     // waits for one of the 4 permits
//     encode(sem.fence());                                // must stop when sem.lease() is lost
//   }                                                     // released here
//
// One Redis instance only: a Redlock semaphore (a quorum of servers agreeing on a slot) is not
// offered. What a lease can promise is in docs/safety.md; it holds for each permit.
//
// Threads: an object holds at most one permit and is shared by the threads of a process like a
// std::mutex, exactly like a Lock: the thread that acquired owns the permit and may acquire
// again (re-entrant: each acquire needs one release, the last one gives the permit back);
// other threads of the process queue on the object locally, first come, first served. For N permits
// in one process, use N objects. release() by a thread that does not own the permit does nothing
// (returns false).
//
// A permit may be owned by a handle instead: acquire_hold() and try_acquire_hold_for() return a
// Hold (redlock/hold.hpp) that any thread may use and release (its slot's lease, renewed, fenced
// and reported lost like a thread's permit). The object still holds at most one permit, of
// either kind: handle and thread acquires queue together, first come, first served.
// owns_permit(), validity(), fence(), lease(), slot() and release() concern the thread's permit.
// (These are not named acquire()/try_acquire_for(), as on a Lock, because those names already
// return void and bool here.)
#ifndef REDLOCK_SEMAPHORE_HPP
#define REDLOCK_SEMAPHORE_HPP

#include <chrono>    // std::chrono durations and time points
#include <cstddef>   // std::size_t
#include <cstdint>   // std::uint64_t
#include <memory>    // std::shared_ptr
#include <optional>  // std::optional
#include <string>    // std::string

#include <redlock/client.hpp>         // Client
#include <redlock/detail/chrono.hpp>  // saturating_ns, remaining_ns
#include <redlock/hold.hpp>           // Hold
#include <redlock/lease.hpp>          // LeaseToken
#include <redlock/options.hpp>        // LockOptions

namespace redlock {

namespace detail {
struct Access;
class SemaphoreCore;
}  // namespace detail

class Semaphore {
 public:
  // The largest limit accepted.
  static constexpr std::size_t kMaxLimit = 10'000;

  // Connects nothing yet. Throws std::invalid_argument naming the argument for limit 0 or over
  // kMaxLimit, an empty key, limit * key size over 4 MiB, and
  // every option a Lock rejects (ttl <= drift allowance, retry_delay <= 0, ...).
  Semaphore(Client client, std::string key, std::size_t limit, LockOptions options = {});
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;

  // Gives back a permit still held (best effort) and stops its renewal. Never throws; a failed
  // release is logged and the permit expires after its ttl.
  ~Semaphore();

  // Waits until the calling thread holds a permit. Throws Error if the server cannot be reached,
  // ServerError for error replies (e.g. WRONGTYPE: a reserved key holds something else;
  // LimitMismatchError: permits are held under another limit, never waited out), Error
  // after cancel_waits() (CancelledError), and Error when the calling thread owns
  // a permit that has been lost (release() it first). Thread-safe.
  void acquire();

  // One attempt, no waiting. Returns true if the calling thread now holds a permit (also when it
  // held one already: the re-entrancy count grows), false when all `limit` permits are taken or
  // after cancel_waits(). Throws like acquire() (never for cancellation). Thread-safe.
  bool try_acquire();

  // Tries until a permit is held or `timeout` has passed (steady clock). A zero or negative
  // timeout makes one attempt. Returns true if held, false on timeout or cancel_waits().
  // Throws like try_acquire(). Never leaves a taken slot behind when it gives up. Thread-safe.
  template <class Rep, class Period>
  bool try_acquire_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_acquire_for_ns(detail::saturating_ns(timeout));
  }

  // As try_acquire_for(deadline - Clock::now()). Thread-safe.
  template <class Clock, class Duration>
  bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_acquire_for_ns(detail::remaining_ns(deadline));
  }

  // Waits until a permit is held by a handle, not by the calling thread, and returns that Hold
  // (redlock/hold.hpp): any thread may use, extend or release it, and its destructor gives the
  // permit back without blocking. Waits, like acquire(), until this object's current permit (a
  // Hold's or a thread's) is given back and a permit is free. Throws as acquire() (never
  // re-entrant; CancelledError after cancel_waits()), and std::logic_error if the calling thread
  // owns this object's thread permit (it would wait for itself). Thread-safe.
  Hold acquire_hold();

  // acquire_hold() that gives up after `timeout` (steady clock): returns the Hold, or
  // std::nullopt when no permit became free by then or after cancel_waits(). A zero or negative
  // timeout makes one attempt. Throws as try_acquire(), and std::logic_error as acquire_hold().
  // Never leaves a taken slot behind when it gives up. Thread-safe.
  template <class Rep, class Period>
  std::optional<Hold> try_acquire_hold_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_acquire_hold_for_ns(detail::saturating_ns(timeout));
  }

  // As try_acquire_hold_for(deadline - Clock::now()). Thread-safe.
  template <class Clock, class Duration>
  std::optional<Hold> try_acquire_hold_until(
      const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_acquire_hold_for_ns(detail::remaining_ns(deadline));
  }

  // Drops one level of the calling thread's hold; the last level gives the permit back
  // (compare-and-delete of its slot key, announced to waiters). Returns true if the permit was
  // still ours (or one re-entrancy level was dropped), false if it had already been lost
  // (expired, deleted, taken over) or the calling thread held none; another holder's slot is
  // never touched. Throws Error if the server could not be reached (the local hold is cleared
  // anyway and the permit expires by itself). Thread-safe.
  bool release();

  // The std::mutex vocabulary, so std::lock_guard and std::unique_lock work: lock() is
  // acquire(), try_lock*() are try_acquire*(), unlock() is release() that never throws (failures
  // are logged). Thread-safe.
  void lock() { acquire(); }
  bool try_lock() { return try_acquire(); }
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_acquire_for(timeout);
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_acquire_until(deadline);
  }
  void unlock() noexcept;

  // Makes every wait on this object give up, now and from now on (sticky): waits in progress and
  // later ones return false from try_acquire*() and throw from acquire(); try_acquire() returns
  // false without asking the server. A permit already held is kept. Never throws. Thread-safe.
  void cancel_waits() noexcept;

  // True if the calling thread holds a permit, it was not lost, and validity() > 0.
  // Never throws. Thread-safe.
  bool owns_permit() const noexcept;

  // Time left on the current permit by the local steady clock, already reduced by the drift
  // allowance (ttl * clock_drift_factor + 2 ms); zero if none. Milliseconds, rounded down.
  // Never throws. Thread-safe.
  std::chrono::milliseconds validity() const noexcept;

  // The fencing token of the current permit (LockOptions::fencing): one counter per key, so it
  // grows across all permits of the key. 0 if none or not held. Never throws. Thread-safe.
  std::uint64_t fence() const noexcept;

  // The cancellation signal of the current permit; an already-lost token if none. on_lost and
  // LockOptions::on_lost fire when the permit is lost (with auto_renew: its slot key deleted or
  // taken over, or a renewal missing its deadline). Never throws. Thread-safe.
  LeaseToken lease() const noexcept;

  // Which slot the current permit occupies, 1..limit() (its key is `{<key>}:permit:<slot>`); 0 if
  // none. Never throws. Thread-safe.
  std::size_t slot() const noexcept;

  // The key, as given. Thread-safe.
  const std::string& key() const noexcept;

  // The most concurrent holders of key(). Thread-safe.
  std::size_t limit() const noexcept;

  // The options given at construction (after validation). Thread-safe.
  const LockOptions& options() const noexcept;

 private:
  bool try_acquire_for_ns(std::chrono::nanoseconds timeout);
  std::optional<Hold> try_acquire_hold_for_ns(std::chrono::nanoseconds timeout);

  friend struct detail::Access;  // the async operations reach the core (src/api/access.hpp)
  std::shared_ptr<detail::SemaphoreCore> core_;
};

}  // namespace redlock

#endif  // REDLOCK_SEMAPHORE_HPP
