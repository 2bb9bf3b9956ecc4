// redlock/lock.hpp: Lock (one Redis instance) and Redlock (a quorum of N instances).
//
// Both are leases: the key expires on the server after `ttl` unless extended, so a crashed holder
// cannot block everyone forever. Both meet the C++ TimedLockable requirements, so the standard
// guards work:
//
//   redlock::Client client(redlock::Endpoint::parse("redis://127.0.0.1:6379"));
//   redlock::Lock lock(client, "reports:nightly");
//   {
//     std::lock_guard<redlock::Lock> guard(lock);   // waits until held
//     run_report();                                 // must finish within lock.validity()
//   }                                               // released here
//
//   redlock::Redlock quorum({c1, c2, c3, c4, c5}, "billing:rollup");
//   std::unique_lock<redlock::Redlock> held(quorum, std::chrono::seconds(2));
//   if (!held) { /* someone else has it: contention is false, never an exception */ }
//
// Threads: an object is shared by the threads of a process like a std::mutex. The thread that
// acquired owns the hold; it may lock() again (re-entrant: each lock() needs one unlock(), the
// last one releases). Threads of one process waiting on the same object queue locally, first
// come, first served, so only one of them talks to Redis at a time. unlock() by a thread that does
// not own the hold does nothing but log a warning. A thread that exits while it holds releases the
// hold as it exits (best effort, logged as a warning), so a new thread with a recycled
// std::thread::id never inherits it.
//
// A hold may be owned by a handle instead of a thread: acquire() and try_acquire_for() return a
// Hold (redlock/hold.hpp), which any thread may use and release. owns_lock(), validity(), fence(),
// lease(), extend() and release() of this class concern the thread hold only; a Hold has its own.
//
// What a lease can promise, and what it cannot, is in docs/safety.md ("The model in a page"): in
// short, a holder paused for longer than validity() may still believe it holds the lock. Use
// fence() tokens where that matters.
#ifndef REDLOCK_LOCK_HPP
#define REDLOCK_LOCK_HPP

#include <chrono>    // std::chrono durations and time points
#include <cstddef>   // std::size_t
#include <cstdint>   // std::uint64_t
#include <memory>    // std::shared_ptr
#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include <redlock/client.hpp>         // Client
#include <redlock/detail/chrono.hpp>  // saturating_ns, remaining_ns
#include <redlock/hold.hpp>           // Hold
#include <redlock/lease.hpp>          // LeaseToken
#include <redlock/options.hpp>        // LockOptions

namespace redlock {

namespace detail {
struct Access;
class LockCore;
}  // namespace detail

// The members Lock and Redlock share. Not constructible by itself.
class LockBase {
 public:
  LockBase(const LockBase&) = delete;
  LockBase& operator=(const LockBase&) = delete;

  // Releases a hold still owned (best effort), stops its renewal. Never throws; a failed release
  // is logged and the lease simply expires after its ttl. Virtual, so that a Lock or a Redlock
  // may be owned through a std::unique_ptr<LockBase>.
  virtual ~LockBase();

  // Waits until the lock is held by the calling thread. Returns when held.
  // Rides out unavailability: while the servers cannot be reached (Lock: its server; Redlock:
  // fewer than quorum() nodes answer) it keeps retrying at the retry_delay pace, logging one
  // warning when that starts and one info when it recovers.
  // Throws ServerError for error replies such as WRONGTYPE (at once; state unchanged),
  // CancelledError after cancel_waits(), and Error when the calling thread already owns a hold
  // that has been lost (it cannot wait for itself; unlock() first). Thread-safe.
  void lock();

  // One attempt, no waiting. Returns true if now held by the calling thread (also when the
  // calling thread already held it: the re-entrancy count grows), false on contention (the
  // servers answered; someone else holds it). Throws ConnectionError / TimeoutError when the
  // server could not be reached (Redlock: QuorumUnavailableError when fewer than quorum() nodes
  // answered), ServerError for error replies. Not affected by cancel_waits(). Thread-safe.
  bool try_lock();

  // Tries until held or `timeout` has passed (on the steady clock). A zero or negative timeout
  // makes one attempt (try_lock()). Returns true if held, false on contention at the deadline or
  // after cancel_waits(). Rides out unavailability like lock(); if the deadline passes and the
  // last attempt failed because the servers could not be reached, throws that error
  // (ConnectionError, TimeoutError or QuorumUnavailableError). ServerError at once, as lock().
  // Never leaves a grant behind when it gives up. Thread-safe.
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_lock_for_ns(detail::saturating_ns(timeout));
  }

  // As try_lock_for(deadline - Clock::now()). Thread-safe.
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_lock_for_ns(detail::remaining_ns(deadline));
  }

  // Waits until the lock is held by a handle, not by the calling thread, and returns that Hold
  // (redlock/hold.hpp): any thread may use, extend or release it, and its destructor releases
  // without blocking. Handle and thread holds of one object queue together, first come, first
  // served: this waits until the object's current hold (a Hold, or a thread's lock()) ends.
  // Rides out unavailability and throws as lock() does: the last ConnectionError, TimeoutError or
  // QuorumUnavailableError once max_unavailable has passed, ServerError for error replies (at
  // once), CancelledError after cancel_waits(); and std::logic_error if the calling thread owns
  // this object's thread hold (lock()): the Hold would wait for that thread's unlock(). Never
  // re-entrant: a thread that keeps a Hold of this object and calls acquire() waits for itself.
  // Thread-safe.
  Hold acquire();

  // acquire() that gives up after `timeout` (steady clock): returns the Hold, or std::nullopt on
  // contention at the deadline or after cancel_waits(). A zero or negative timeout makes one
  // attempt, as try_lock(). Throws as try_lock_for() does, and std::logic_error as acquire().
  // Never leaves a grant behind when it gives up. Thread-safe.
  template <class Rep, class Period>
  std::optional<Hold> try_acquire_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_acquire_for_ns(detail::saturating_ns(timeout));
  }

  // As try_acquire_for(deadline - Clock::now()). Thread-safe.
  template <class Clock, class Duration>
  std::optional<Hold> try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_acquire_for_ns(detail::remaining_ns(deadline));
  }

  // Cancels every wait on this object, now and later (sticky, like std::stop_source): lock(),
  // try_lock_for() and try_lock_until() in progress on any thread give up promptly, and so does
  // every wait started afterwards, and so do acquire() and try_acquire_*(). try_lock_for()/
  // try_lock_until() then return false and try_acquire_*() std::nullopt (a fair waiter first
  // leaves the server's queue); lock() and acquire() throw CancelledError. try_lock() and a hold
  // already held (a Hold too) are not affected. Never throws. Thread-safe, but not
  // async-signal-safe: call it from a signal-handling thread or after a self-pipe wake-up, not from
  // a signal handler.
  void cancel_waits() noexcept;

  // Drops one level of the calling thread's hold; the last level releases the lease (release
  // script: compare token, delete, notify waiters). Never throws: failures are logged and the
  // lease expires by itself. From a thread that does not own the hold: does nothing, logs a
  // warning. Thread-safe.
  void unlock() noexcept;

  // unlock() that reports. Returns true if the hold was still ours when released (or when one
  // re-entrancy level was dropped), false if the lease had already been lost (expired, taken
  // over) or the calling thread did not own it; another holder's key is never touched.
  // Throws Error if no node could be reached (the local hold is cleared anyway and the lease
  // expires by itself). Thread-safe.
  bool release();

  // Resets the lease to `ttl` (default: options().ttl) from now if the calling thread still owns
  // it. With auto_renew the watchdog's next renewal (with options().ttl) moves up to a third of
  // the new validity; an extend and a renewal in flight together leave validity() at the lesser
  // of the two. Returns true if renewed (validity() set from `ttl`), false if not held or the lease
  // was already lost: the hold is then marked lost (owns_lock() false, LeaseToken raised); the
  // owning thread still calls unlock() to balance its lock(); another holder's key is left intact.
  // Throws std::invalid_argument if ttl is not longer than the drift allowance or over 200
  // years, Error if no node could be reached. Thread-safe.
  bool extend();
  bool extend(std::chrono::milliseconds ttl);

  // True if the calling thread holds the lock, it was not lost, and validity() > 0.
  // Never throws. Thread-safe.
  bool owns_lock() const noexcept;

  // Time left on the calling thread's hold by the local steady clock, already reduced by the
  // drift allowance; zero if the calling thread does not hold it or the hold was lost.
  // Milliseconds, rounded down. Never throws. Thread-safe.
  std::chrono::milliseconds validity() const noexcept;

  // The fencing token of the calling thread's hold (LockOptions::fencing); 0 without fencing,
  // when the calling thread does not hold it, or when the hold was lost. Never throws.
  // Thread-safe.
  std::uint64_t fence() const noexcept;

  // The cancellation signal of the current hold; an already-lost token if not held.
  // Never throws. Thread-safe.
  LeaseToken lease() const noexcept;

  // The key this lock guards. Thread-safe.
  const std::string& key() const noexcept;

  // The options given at construction (after validation). Thread-safe.
  const LockOptions& options() const noexcept;

  // Number of instances (1 for Lock). Thread-safe.
  std::size_t size() const noexcept;

  // How many nodes must grant a lease: size()/2 + 1. Thread-safe.
  std::size_t quorum() const noexcept;

 protected:
  LockBase(std::vector<Client> instances, std::string key, LockOptions options);
  // For a lock on another store (the optional backends): `core` is built by that component
  // over its own lease backend. Never throws; `core` must not be null.
  explicit LockBase(std::shared_ptr<detail::LockCore> core) noexcept;

 private:
  bool try_lock_for_ns(std::chrono::nanoseconds timeout);
  std::optional<Hold> try_acquire_for_ns(std::chrono::nanoseconds timeout);

  friend struct detail::Access;  // the async operations reach the core (src/api/access.hpp)
  std::shared_ptr<detail::LockCore> core_;
};

// A lease on one Redis instance: SET key token NX PX ttl to acquire, Lua compare-and-delete to
// release, Lua compare-and-pexpire to extend.
class Lock final : public LockBase {
 public:
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty key,
  // a key over 4 MiB, ttl <= 0, retry_delay <= 0, clock_drift_factor outside [0, 1).
  Lock(Client client, std::string key, LockOptions options = {});
};

// The same lease on N independent instances (Redlock): requests go to all nodes at once, each
// with its own deadline; held when at least quorum() nodes granted it and
// validity = ttl - elapsed - (ttl * drift + 2 ms) > 0. Partial grants are rolled back on every
// node. With fencing, the token is max+1 over the granting nodes' counters, written back to them
// before the lock is reported held.
class Redlock final : public LockBase {
 public:
  // Throws std::invalid_argument for zero instances, two instances naming the same server
  // (the same run_id, asked with INFO server once per Client, or when a server does not answer,
  // the same resolved address; another database is the same server), and everything Lock's
  // constructor rejects. Costs one round trip per instance on a Client's first Redlock.
  Redlock(std::vector<Client> instances, std::string key, LockOptions options = {});
};

}  // namespace redlock

#endif  // REDLOCK_LOCK_HPP
