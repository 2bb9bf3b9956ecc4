// src/lock/acquire_loop.hpp: the one acquire loop of every waiting primitive: a Lock or Redlock
// (lock/lock_core), a lock on another backend, and a Semaphore's permits (lock/semaphore). It
// makes the attempts of one acquire call through a wait strategy (lock/wait.hpp), sleeps between
// them until a release is announced, a hand-over comes (fair mode), the holder's lease would end
// or retry_delay, and applies the unavailability rule (max_unavailable) to every attempt. What
// a grant becomes (a hold, a permit) is the caller's, through AcquireLoop::Taker.
//
// An AcquireLoop is one call's object on the caller's stack; it is not thread-safe, except that
// cancel_waits() (Ownership::cancel) may end its wait from any thread.
#ifndef REDLOCK_SRC_LOCK_ACQUIRE_LOOP_HPP
#define REDLOCK_SRC_LOCK_ACQUIRE_LOOP_HPP

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include <redlock/observer.hpp>
#include <redlock/options.hpp>

#include "lock/ownership.hpp"
#include "lock/wait.hpp"

namespace redlock {
namespace detail {

// About as long as a woken waiter needs to answer a release: 4 round trips, 250 us .. 5 ms.
SteadyClock::duration answer_time(SteadyClock::duration round_trip);

class AcquireLoop {
 public:
  // What a granted attempt becomes: returns true if the caller now holds it (false: it was
  // given back, e.g. renewal could not start). May throw; the loop then leaves the queue.
  class Taker {
   public:
    virtual bool take(const AcquireResult& result, std::string token,
                      SteadyClock::time_point sent) = 0;

   protected:
    ~Taker() = default;
  };

  // How waiters of several processes share a release among them.
  enum class Order {
    // The elder-first pause (elders_pause): a lock with wake-on-release whose releaser also
    // holds back its next acquire (LockCore::hold_back_after).
    elder_first,
    // Nothing: the server's queue orders them (fair mode), or nothing holds the releaser back
    // (a Semaphore's permits with fair = false, a polling lock).
    none,
  };

  // The waiting object: its ownership (cancellation, the watch's registration), options
  // (retry_delay, max_unavailable, observer), key and words for errors, and how its waiters
  // share a release. All must outlive the loop.
  struct Waiter {
    Ownership& ownership;
    const LockOptions& options;
    const std::string& key;
    const CallWords& words;
    Order order;
  };

  // `deadline` max(): no deadline. `crowded`: other processes are known to wait for the same
  // lock (the elder-first order, elders_pause). `event` counts attempts for an observer, or
  // nullptr.
  AcquireLoop(const Waiter& waiter, Taker& taker, WaitStrategy& wait, Call call,
              SteadyClock::time_point deadline, AcquireEvent* event, bool crowded);

  // Runs the call on the calling thread: true if held; false for contention (try_lock, a
  // deadline), a cancelled try_lock_for or a stop (stop_on); throws CancelledError for a
  // cancelled lock(), the attempt's failure once the unavailability rule gives up (try_lock: at
  // once), and ServerError at once.
  bool run();

  // The same call as steps, for a driver that does not block (lock/async_driver): begin(), then
  // resume(woken) after each wait until a step is done. A `wait` step ends early when the
  // strategy's watch is woken (WaitStrategy::wait_until, or its waker and poll); a `pause` step
  // is a plain timer. Each step throws as run() does (the queue left first).
  struct Step {
    enum class Kind : unsigned char { done, wait, pause };
    Kind kind{Kind::done};
    bool held{false};                 // done: held (see run())
    SteadyClock::time_point until{};  // wait, pause: until when
  };
  Step begin();
  Step resume(bool woken);
  // This call alone ends (not held, the queue left) once `*flag` is true; the driver wakes the
  // watch after setting it. `flag` outlives the loop.
  void stop_on(const std::atomic<bool>* flag) noexcept { stop_ = flag; }

 private:
  static Step done(bool held) noexcept { return Step{Step::Kind::done, held, {}}; }
  Step next();
  Step attempt_after(bool woken);
  bool stopped() const noexcept { return stop_ && stop_->load(std::memory_order_acquire); }
  bool cancelled() const noexcept { return stopped() || who_.ownership.cancelled(); }
  bool settle(Try attempt);
  bool take_hand_over();
  void observe_wake(WakeKind kind) const noexcept;
  SteadyClock::time_point next_wake(SteadyClock::time_point now) const;
  SteadyClock::time_point turn_wake(SteadyClock::time_point now) const;
  bool took_notice();
  std::optional<SteadyClock::time_point> elders_pause() const;

  const Waiter& who_;
  Taker& taker_;
  WaitStrategy& wait_;
  const Call call_;
  const SteadyClock::time_point deadline_;
  Unavailability unavailable_;
  std::chrono::milliseconds holder_pttl_{-1};  // from the last attempt (-1: unknown)
  unsigned char watcher_{0};  // fair mode: the place in the server's queue (AcquireResult)
  AcquireEvent* const event_;
  // Elder-first wake order (elders_pause): attempts the servers refused in this call, and
  // whether other processes are known to wait for the lock too.
  unsigned refused_{0};
  bool crowded_;
  SteadyClock::duration round_trip_{};  // of the last attempt
  SteadyClock::time_point wake_at_{};   // of the current wait
  bool paused_{false};                  // in the elder-first pause (a pause step)
  const std::atomic<bool>* stop_{nullptr};
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_ACQUIRE_LOOP_HPP
