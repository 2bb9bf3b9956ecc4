// src/lock/ownership.hpp: which thread of this process owns a Lock, Redlock or Semaphore object,
// how often it re-entered, the first come, first served queue of this process's threads waiting
// for the object, and cancel_waits(). Shared by lock_core.cpp and semaphore.cpp.
//
// Lock order: Ownership::mutex_ is taken alone; nothing is called under it except notifying
// condition variables and ReleaseWatch::wake().
#ifndef REDLOCK_SRC_LOCK_OWNERSHIP_HPP
#define REDLOCK_SRC_LOCK_OWNERSHIP_HPP

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.hpp"
#include "core/hold.hpp"

namespace redlock {
namespace detail {

// How a caller waits: try_lock() once, try_lock_for/until() until a deadline, or lock().
enum class Call { try_lock, try_lock_for, lock };
// Who will own what an acquire gets: the calling thread (lock(), re-entrant) or a Hold
// (acquire(), redlock/hold.hpp). Both queue in the same local queue; only a thread re-enters.
enum class Claim { thread, handle };

// A timed acquire (try_lock_for, try_acquire_for, ...): one attempt for a zero or negative
// `timeout`, else until now + timeout on the steady clock (max(), no deadline, where that would
// overflow; cancel_waits() still ends it).
struct TimedCall {
  Call call;
  SteadyClock::time_point deadline;
};
inline TimedCall timed_call(std::chrono::nanoseconds timeout) noexcept {
  const auto now = SteadyClock::now();
  if (timeout <= std::chrono::nanoseconds::zero()) return {Call::try_lock, now};
  if (timeout >= SteadyClock::time_point::max() - now) {
    return {Call::try_lock_for, SteadyClock::time_point::max()};
  }
  return {Call::try_lock_for, now + timeout};
}

// What the owner thread holds: the hold and, for a Semaphore, the permit's slot (0 for a lock).
struct Held {
  std::shared_ptr<HoldState> hold;
  std::size_t slot{0};
};

// A handle acquire that does not block (lock/async_driver) waiting in the local queue: told when
// the gate is handed to it, or when the object's waits are cancelled; it then calls
// Ownership::leave_queue or goes on. gate_opened() is called under the ownership's lock: it only
// schedules. Never throws.
class LocalWaiter {
 public:
  virtual void gate_opened() noexcept = 0;

 protected:
  ~LocalWaiter() = default;
};

class Ownership {
 public:
  // What enter() decided.
  enum class Entry {
    reentered,  // the caller owns a valid hold: its depth was counted, it holds the object
    lost,       // the caller owns a hold that was lost (lock() must not wait for itself)
    entered,    // the caller has the gate: it alone of this process may now acquire
    busy,       // try_lock(): another thread has the gate
    timed_out,  // the deadline passed in the local queue
    cancelled,  // cancel_waits() (not for try_lock(), which never waits)
    self,       // a handle acquire by the thread that owns the thread hold: it would wait for
                // itself
    queued,     // enter_async(): in the local queue; LocalWaiter::gate_opened() tells when
  };
  // What exit() did.
  enum class Exit { not_owner, nested_valid, nested_lost, last };

  // Re-entry (Claim::thread), else a place in the local queue until the gate is free (FIFO), the
  // deadline (max(): none) or cancel_waits(). After `entered`, call own() (Claim::thread) or
  // open_gate(); a handle hold keeps the gate until it ends, then opens it. Thread-safe.
  Entry enter(Call call, SteadyClock::time_point deadline, Claim claim = Claim::thread);
  // enter() for a handle acquire that must not block: `entered`, `busy` (try_lock), `cancelled`,
  // or `queued` (then `waiter` is told by gate_opened(), and calls granted() to learn whether it
  // has the gate, or leave_queue() to give up). Thread-safe.
  Entry enter_async(Call call, LocalWaiter& waiter);
  // True if the gate was handed to `waiter` (it is out of the queue then). Thread-safe.
  bool granted(LocalWaiter& waiter) noexcept;
  // `waiter` gives up its place: true if it left the queue, false if the gate was handed to it
  // meanwhile (the caller has the gate and must pass it on with open_gate()). Thread-safe.
  bool leave_queue(LocalWaiter& waiter) noexcept;
  // The gate's holder gives the gate to the next queued waiter (or frees it). Any thread: a
  // handle hold may end on another thread than the one that acquired it. Thread-safe.
  void open_gate() noexcept;
  // The gate's holder (the calling thread) now owns `held`, at depth 1.
  void own(Held held) noexcept;
  // Clears the ownership and returns what was held (null hold if none). The gate stays closed.
  Held disown() noexcept;
  // As disown(), only if the calling thread is the owner.
  Held disown_caller() noexcept;
  // The caller's release: not_owner, a nested level (the hold stays), or the last level (`last`
  // gets the hold; the gate stays closed until open_gate()).
  Exit exit(Held& last) noexcept;

  std::shared_ptr<HoldState> hold() const noexcept;
  std::shared_ptr<HoldState> hold_of_caller() const noexcept;
  std::size_t slot() const noexcept;
  // The calling thread owns a hold that is not lost.
  bool owns() const noexcept;

  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }
  // Sticky: every wait in progress or to come ends (queued threads and registered watches).
  void cancel() noexcept;

  // Registers a wait's watch for its lifetime, so that cancel() wakes it.
  class Watching {
   public:
    Watching(Ownership& ownership, ReleaseWatch& watch);
    ~Watching();
    Watching(const Watching&) = delete;
    Watching& operator=(const Watching&) = delete;

   private:
    Ownership& ownership_;
    ReleaseWatch& watch_;
  };

 private:
  struct Queued {
    std::condition_variable cv;
    bool granted{false};
    LocalWaiter* async{nullptr};  // a handle acquire that does not block (cv unused)
  };
  Entry reenter() noexcept;  // mutex_ held, caller is the owner
  Entry queue(std::unique_lock<std::mutex>& lock, SteadyClock::time_point deadline);
  std::list<Queued>::iterator async_entry(LocalWaiter& waiter) noexcept;

  mutable std::mutex mutex_;
  bool busy_{false};           // a thread of this process has the gate (acquiring or holding)
  std::deque<Queued*> queue_;  // threads waiting for the gate, in arrival order
  std::thread::id owner_{};
  std::size_t depth_{0};
  Held held_;
  std::atomic<bool> cancelled_{false};
  std::vector<ReleaseWatch*> waiting_;  // watches of the waits in progress
  // Non-blocking waiters: queued (their Queued in queue_) or handed the gate, not yet told.
  std::list<Queued> async_;  // a list: the Queued addresses in queue_ stay valid
};

// How an object's messages name a call: "redlock: " + call + key + lost.
struct CallWords {
  const char* call;  // e.g. "lock() of "
  const char* lost;  // e.g. " by the thread that owns it, but its hold was lost; unlock() it first"
};

// What an acquire call returns when enter() gave anything but Entry::entered: true (re-entered)
// or false; throws Error for lock() of a lost hold (it must not return without the lock, and
// the thread cannot wait for itself), CancelledError for a cancelled lock(), and
// std::logic_error for Entry::self.
bool entry_result(Ownership::Entry entry, Call call, const std::string& key,
                  const CallWords& words);
// A wait ended by cancel_waits(): false, or CancelledError for lock().
bool cancelled_result(Call call, const std::string& key, const CallWords& words);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_OWNERSHIP_HPP
