// redlock/rwlock.hpp: ReadWriteLock, a shared (reader) / exclusive (writer) lease on one Redis
// instance, with writer preference, a lease per reader, wake-up on release and downgrade.
//
//   redlock::Client client(redlock::Endpoint::parse("redis://127.0.0.1:6379"));
//   redlock::ReadWriteLock config(client, "config:pricing");
//   {
//     std::shared_lock<redlock::ReadWriteLock> read(config);  // many readers at once
//     use(load_pricing());
//   }
//   {
//     std::unique_lock<redlock::ReadWriteLock> write(config);  // alone; waits for the readers
//     store_pricing(config.fence());                           // fence grows with every writer
//   }
//
// Design (names as in docs/operations.md, "Key layout"): the writer's lease is the key itself
// (a string holding its token, PX ttl). Each reader has a lease of its own: an entry in the
// sorted set `<key>:readers`, scored by its end on the server's clock (TIME), and every script
// first drops the entries that have ended, so a crashed reader's entry ends after its own ttl
// while live readers keep renewing theirs; while any reader holds, the key itself holds
// `redlock:rw:readers` until the longest reader lease ends, so a plain Lock on the key is a
// writer (without preference). A writer enters when no writer holds the key and no reader's
// entry is live; a reader when no writer holds it and no writer waits.
//
// Writer preference: a writer that waits (lock(), try_lock_for(); not try_lock()) sets
// `<key>:writer-waiting` (its token, PX max(250 ms, 5 * retry_delay) capped at ttl) and refreshes
// it with every retry, so no new reader enters while it waits: the writer's wait is bounded by
// the longest read hold in progress. A writer that gives up (its timeout, cancel_waits()) takes
// its marker away and wakes the readers it held back, on Redis (one round trip per instance,
// bounded by the command timeout); one that crashes, or whose removal fails, holds new readers
// back for at most that marker's life.
//
// Wake-up: a writer's release is announced to the waiting readers (`<key>:readable`) and writers
// (`<key>:released`); the last reader's release to the waiting writers; a reader that entered
// after a wait announces its entry to the next waiting reader (one message per reader, not a
// herd). Waits subscribe before their attempt, as a Lock's do, so no release is missed.
//
// Downgrade, no upgrade: downgrade() turns the calling thread's writer hold into a reader hold
// in one script, with no moment where neither is held. An upgrade (reader to writer) is not
// offered: two readers that both ask to upgrade each wait for the other to leave, forever (the
// deadlock of Redisson #4796); release the read hold and take the write side instead.
//
// Fencing (LockOptions::fencing): a writer's fence() comes from `<key>:fence` and grows strictly
// from one writer to the next; a reader's fence_shared() is that counter as it stood when the
// reader entered (the last writer's fence: the generation it reads). auto_renew, on_lost,
// max_renewals and max_hold cover the writer's hold and the reader's, each its own lease.
//
// Threads: like a Lock, the writer side of an object is owned by one thread at a time
// (re-entrant), and so is its reader side, separately: a thread may hold both only through
// downgrade(). Other threads of the process queue on each side locally. So that several threads
// of one process read at once, give each its own ReadWriteLock object (objects are cheap; they
// share the Client's connections). One Redis instance; on a Cluster every key shares the key's
// slot; or N independent instances with a quorum (the second constructor). Not offered: fair
// mode.
#ifndef REDLOCK_RWLOCK_HPP
#define REDLOCK_RWLOCK_HPP

#include <chrono>   // std::chrono durations and time points
#include <cstdint>  // std::uint64_t
#include <memory>   // std::unique_ptr, std::shared_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include <redlock/client.hpp>             // Client
#include <redlock/detail/chrono.hpp>      // saturating_ns, remaining_ns
#include <redlock/detail/visibility.hpp>  // REDLOCK_LOCAL
#include <redlock/lease.hpp>              // LeaseToken
#include <redlock/options.hpp>            // LockOptions

namespace redlock {

namespace detail {
class RwSides;
}  // namespace detail

class ReadWriteLock {
 public:
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty key, a
  // key over 4 MiB, options.fair (not supported), and every option a Lock rejects (ttl <= drift
  // allowance, retry_delay <= 0, ...).
  ReadWriteLock(Client client, std::string key, LockOptions options = {});
  // The same over N independent instances (a quorum, as Redlock): every operation runs its
  // script on each node at once; the writer or a reader holds when at least N/2 + 1 nodes
  // granted it in time (partial grants are rolled back). What the quorum guarantees: any two
  // majorities share a node, and no node grants a writer while another writer or a live reader
  // holds there, nor a reader while a writer holds there, so (within the drift allowance, as
  // for Redlock) a writer never overlaps another writer or any reader, while readers hold
  // together. Writer preference holds on each node that has the waiting writer's marker: best
  // effort when nodes disagree. Throws std::invalid_argument as the one-instance constructor,
  // and for no instance, options.fencing (no fence is agreed across nodes) or one server named
  // twice (by run_id: one round trip per instance). downgrade() converts on each node and holds
  // the reader when a quorum converted.
  ReadWriteLock(std::vector<Client> instances, std::string key, LockOptions options = {});
  ReadWriteLock(const ReadWriteLock&) = delete;
  ReadWriteLock& operator=(const ReadWriteLock&) = delete;
  // Releases the holds still owned (best effort), stops their renewal. Never throws; a failed
  // release is logged and the lease expires after its ttl. Virtual, so that a read-write lock
  // of another store may be owned through a std::unique_ptr<ReadWriteLock>.
  virtual ~ReadWriteLock();

  // ---- the writer (exclusive): as Lock's members of the same names (redlock/lock.hpp) ----

  // Waits until the calling thread holds the writer side. Returns when held. Throws as
  // Lock::lock(): ServerError (e.g. WRONGTYPE), CancelledError after cancel_waits(), the
  // transport failure once max_unavailable has passed. Thread-safe.
  void lock();
  // One attempt, no waiting (and no writer-waiting marker): true if held, false on contention (a
  // writer or a live reader holds it). Throws as Lock::try_lock(). Thread-safe.
  bool try_lock();
  // Tries until held or `timeout` (steady clock); true if held, false at the deadline or after
  // cancel_waits(). Throws as Lock::try_lock_for(). Thread-safe.
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_lock_for_ns(detail::saturating_ns(timeout));
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_lock_for_ns(detail::remaining_ns(deadline));
  }
  // Drops one level of the calling thread's writer hold; the last releases it and wakes waiting
  // readers and writers. Never throws (failures are logged). Thread-safe.
  void unlock() noexcept;
  // unlock() that reports: true if the hold was still ours, false if it had been lost or the
  // calling thread did not own it. Throws Error if the server could not be reached. Thread-safe.
  bool release();
  // Resets the writer's lease to options().ttl from now: true if renewed, false if not held or
  // lost. Throws Error if the server could not be reached. Thread-safe.
  bool extend();
  // True if the calling thread holds the writer side and it was not lost. Never throws.
  bool owns_lock() const noexcept;
  // Time left on the calling thread's writer hold (drift allowance deducted), milliseconds,
  // zero if none. Never throws. Thread-safe.
  std::chrono::milliseconds validity() const noexcept;
  // The writer hold's fencing token (strictly greater than every earlier writer's), 0 without
  // fencing or without a valid writer hold of the calling thread. Never throws.
  std::uint64_t fence() const noexcept;
  // The writer hold's cancellation signal; an already-lost token if not held. Never throws.
  LeaseToken lease() const noexcept;

  // Turns the calling thread's writer hold (at its last level: one lock()) into a reader hold,
  // in one script: other readers may enter at once, no writer can come in between. Returns true
  // if the calling thread now holds the reader side and no longer the writer side. False if
  // another thread of this process holds the reader side (nothing changed), or if the writer's
  // lease had been lost meanwhile or another thread of this process was waiting on the reader
  // side: then neither is held (the writer's key is released). Throws
  // std::logic_error if the calling thread does not own the writer side, owns the reader side
  // already, or has re-entered the writer side (unlock() the inner levels first); Error if the
  // server could not be reached (the writer's key is released if the conversion did not run,
  // else the lease expires by its ttl). Thread-safe.
  bool downgrade();

  // ---- readers (shared): each object holds at most one reader lease at a time ----

  // Waits until the calling thread holds the reader side: no writer holds the key and none
  // waits. Throws as lock(). Thread-safe.
  void lock_shared();
  // One attempt, no waiting: true if now a reader, false on contention (a writer holds the key
  // or waits). Throws as try_lock(). Thread-safe.
  bool try_lock_shared();
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_lock_shared_for_ns(detail::saturating_ns(timeout));
  }
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_lock_shared_for_ns(detail::remaining_ns(deadline));
  }
  // Drops one level of the calling thread's reader hold; the last removes its entry (the last
  // reader's release wakes a waiting writer). Never throws. Thread-safe.
  void unlock_shared() noexcept;
  // unlock_shared() that reports, as release(). Thread-safe.
  bool release_shared();
  // Moves the reader's lease end to options().ttl from now (the server's clock), as extend().
  bool extend_shared();
  // As owns_lock(), validity(), lease() for the reader side. Never throw. Thread-safe.
  bool owns_shared() const noexcept;
  std::chrono::milliseconds validity_shared() const noexcept;
  LeaseToken lease_shared() const noexcept;
  // The writers' fence counter as it stood when this reader entered (0 without fencing, or
  // without a valid reader hold of the calling thread). Never throws. Thread-safe.
  std::uint64_t fence_shared() const noexcept;

  // Cancels every wait of this object, either side, now and later (as Lock::cancel_waits()).
  // Never throws. Thread-safe.
  void cancel_waits() noexcept;
  // The key, and the options given at construction (after validation). Thread-safe.
  const std::string& key() const noexcept;
  const LockOptions& options() const noexcept;

 protected:
  // For a read-write lock on another store (postgres::ReadWriteLock): its two sides, built by
  // that component. Never throws; `sides` must not be null.
  REDLOCK_LOCAL explicit ReadWriteLock(std::unique_ptr<detail::RwSides> sides) noexcept;

 private:
  bool try_lock_for_ns(std::chrono::nanoseconds timeout);
  bool try_lock_shared_for_ns(std::chrono::nanoseconds timeout);

  std::unique_ptr<detail::RwSides> sides_;
};

}  // namespace redlock

#endif  // REDLOCK_RWLOCK_HPP
