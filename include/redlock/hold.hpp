// redlock/hold.hpp: Hold, one held lease owned by a handle instead of a thread.
//
// LockBase::acquire() (Lock, Redlock, and the optional backends' locks) and
// Semaphore::acquire_hold() return a Hold. Unlike lock()/unlock(), the hold belongs to the Hold
// object, not to the calling thread: a job acquired on one thread may be finished and released on
// another, and the Hold may be moved between threads.
//
//   redlock::Lock lock(client, "jobs:42");
//   redlock::Hold hold = lock.acquire();                // waits until held
//   pool.submit([hold = std::move(hold)]() mutable {    // a worker thread finishes the job
//     run_job(hold.fence());
//     hold.release();                                   // or let the destructor release it
//   });
//
// The destructor releases without blocking: the release goes to the library's background
// thread (the one that also finishes abandoned requests), so destroying a Hold never delays the
// caller. release() releases now
// and reports, as LockBase::release() does.
//
// How handle holds and thread holds share one object: each object holds at most one hold at a
// time, of either kind. Acquires of both kinds queue in one first come, first served local
// queue, so a second acquire() waits until the first Hold is released, as a second lock() waits
// for unlock(). Re-entrancy exists only for thread holds. A handle acquire by the thread that
// owns the object's thread hold throws std::logic_error (it would wait for itself). The reverse
// cannot be detected: a thread that keeps a Hold of an object and calls lock() or acquire() on
// the same object waits for itself (until its deadline, with try_lock_for()/try_acquire_for()).
//
// auto_renew, on_lost, fencing, fair mode and wake-on-release work for a Hold exactly as for a
// thread hold. A Hold may outlive the object that made it.
//
// Threads: any thread may use a Hold. Its const members and extend() may run concurrently on
// several threads; release(), assignment and destruction must not run concurrently with any
// other call on the same Hold (as for any object).
#ifndef REDLOCK_HOLD_HPP
#define REDLOCK_HOLD_HPP

#include <chrono>   // std::chrono::milliseconds
#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <memory>   // std::shared_ptr

#include <redlock/detail/visibility.hpp>  // REDLOCK_LOCAL
#include <redlock/lease.hpp>              // LeaseToken

namespace redlock {

namespace detail {
class HoldOwner;
class HoldState;
struct Access;
}  // namespace detail

class Hold {
 public:
  // A Hold of nothing: holds() is false, release() returns false.
  Hold() noexcept = default;

  // Moves the hold; `other` then holds nothing. Never throws.
  Hold(Hold&& other) noexcept = default;
  // Releases what this Hold held (in the background, as the destructor), then takes `other`'s
  // hold. Never throws.
  Hold& operator=(Hold&& other) noexcept;
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;

  // Releases the hold, if any, without blocking: renewal stops and the release (announced to
  // waiters) runs on the library's background thread; the object's next local waiter proceeds
  // once it is done. Never throws; a failed release is logged and the lease expires by its ttl.
  // A process that exits right after may end before the release is sent (the lease then
  // expires by its ttl): call release() where that matters.
  ~Hold();

  // True if this Hold holds a lease that was not lost and validity() > 0. A lost Hold is still
  // this object's hold until release() or destruction (as a lost thread hold is until unlock()).
  // Never throws. Thread-safe.
  bool holds() const noexcept;
  explicit operator bool() const noexcept { return holds(); }

  // Time left on the hold by the local steady clock, already reduced by the drift allowance;
  // zero if none or lost. Milliseconds, rounded down. Never throws. Thread-safe.
  std::chrono::milliseconds validity() const noexcept;

  // The fencing token of the hold (LockOptions::fencing); 0 without fencing, if none, or if
  // lost. Never throws. Thread-safe.
  std::uint64_t fence() const noexcept;

  // The cancellation signal of the hold (see redlock/lease.hpp); an already-lost token if none.
  // It stays valid after the Hold is released or destroyed. Never throws. Thread-safe.
  LeaseToken lease() const noexcept;

  // Resets the lease to `ttl` (default: the object's options().ttl) from now, as
  // LockBase::extend(ttl). Returns true if renewed, false if this Hold holds nothing or the
  // lease was already lost (the hold is then marked lost and on_lost told; release() is still
  // due). Throws std::invalid_argument if ttl is not longer than the drift allowance or over 200
  // years, Error if no node could be reached. Thread-safe.
  bool extend();
  bool extend(std::chrono::milliseconds ttl);

  // Releases the hold now, on the calling thread, and reports like LockBase::release(): true if
  // it was still ours when released, false if the lease had already been lost (expired, taken
  // over; the loss is reported to on_lost and the LeaseToken) or this Hold holds nothing.
  // Another holder's key is never touched. Afterwards this Hold holds nothing. Throws Error if no
  // node could be reached (the hold is ended anyway and the lease expires by itself).
  // Not to be called concurrently with another call on the same Hold.
  bool release();

 private:
  friend struct detail::Access;  // locks and semaphores make Holds (src/api/access.hpp)
  REDLOCK_LOCAL Hold(std::shared_ptr<detail::HoldOwner> owner,
                     std::shared_ptr<detail::HoldState> state, std::size_t slot) noexcept;
  // Hands the hold, if any, to the background release; this Hold then holds nothing.
  void release_in_background() noexcept;

  std::shared_ptr<detail::HoldOwner> owner_;  // the Lock's or Semaphore's shared state
  std::shared_ptr<detail::HoldState> state_;  // null: holds nothing
  std::size_t slot_{0};                       // a Semaphore's permit, 1..limit (0: a lock)
};

}  // namespace redlock

#endif  // REDLOCK_HOLD_HPP
