// src/lock/async_acquire.cpp: the asynchronous operations of redlock/detail/async.hpp as tasks of
// the library's async thread (lock/async_driver): an acquire is the local gate (FIFO, entered
// without blocking), then the one AcquireLoop every waiting primitive runs, stepped; release and
// extend are one blocking step each.
#include <redlock/detail/async.hpp>

#include <atomic>
#include <mutex>
#include <optional>
#include <utility>

#include <redlock/errors.hpp>
#include <redlock/lock.hpp>

#include "api/access.hpp"
#include "lock/acquire_loop.hpp"
#include "lock/async_acquire.hpp"
#include "lock/async_driver.hpp"
#include "lock/hold_owner.hpp"
#include "lock/lock_core.hpp"
#include "lock/observed.hpp"
#include "util/observe.hpp"

namespace redlock {
namespace detail {
namespace {

// A task that completes exactly once: by its own steps on the driver's thread, or (a cancelled
// acquire) first, from whichever thread cancels, while its steps clean up behind it.
class CompletingTask : public AsyncTask, public AsyncOperation {
 public:
  explicit CompletingTask(AsyncCompletionPtr completion) : completion_(completion.release()) {}
  ~CompletingTask() override {
    AsyncCompletionPtr(completion_.exchange(nullptr, std::memory_order_acq_rel));
  }

 protected:
  // Completes the operation unless it completed already. Any thread.
  void complete_once(AsyncResult&& result) noexcept {
    AsyncCompletionPtr completion(completion_.exchange(nullptr, std::memory_order_acq_rel));
    if (completion) completion->complete(std::move(result));
  }
  // The driver's thread: completes (unless done already) and ends the task's adoption; the
  // driver's own reference keeps it until run() returns.
  void finish(AsyncResult&& result) noexcept {
    complete_once(std::move(result));
    const std::shared_ptr<AsyncTask> adopted = AsyncDriver::instance().forget(this);
  }
  // Only an acquire can be cancelled (AcquireTask).
  void cancel_unsent() noexcept override {}
  void fail() noexcept {
    AsyncResult result;
    result.error = std::current_exception();
    finish(std::move(result));
  }

 private:
  std::atomic<AsyncCompletion*> completion_;  // owned; null once completed (the first wins)
};

// An acquire of a Lock's or a Semaphore's hold. Its states: entering the local gate (queued
// behind this process's other waiters of the object), the courtesy pause after this object's own
// release, then the acquire loop's steps.
class AcquireTask final : public CompletingTask, private LocalWaiter, private AcquireLoop::Taker {
 public:
  AcquireTask(std::shared_ptr<HoldOwner> owner, TimedCall timed, AsyncCompletionPtr completion)
      : CompletingTask(std::move(completion)),
        owner_(std::move(owner)),
        call_(timed.call),
        deadline_(timed.deadline) {}
  ~AcquireTask() override {
    if (phase_ == Phase::queued && !owner_->gate().leave_queue(*this)) owner_->gate().open_gate();
  }

  // The operation completes as cancelled at once, on the calling thread (unless a grant
  // completed it first): it waits neither for a step in flight on the driver's thread nor for
  // any other thread's work. The task's next step then gives back what it may have won (its
  // queue place, a grant that crossed the cancel).
  void cancel() noexcept override {
    if (stop_.exchange(true, std::memory_order_acq_rel)) return;
    const auto keep = weak_from_this().lock();  // the completion may drop the last other one
    complete_cancelled();
    wake_up();
  }
  // Its first attempt starts in begin_loop(), which marks sent_ under the same mutex.
  void cancel_unsent() noexcept override {
    std::lock_guard<std::mutex> guard(send_mutex_);
    if (!sent_) cancel();
  }
  void run() noexcept override;

 private:
  enum class Phase : unsigned char { start, queued, courtesy, looping, done };

  void gate_opened() noexcept override { wake_up(); }
  bool take(const AcquireResult& result, std::string token, SteadyClock::time_point sent) override {
    held_ = owner_->start_hold(result, std::move(token), sent);
    if (held_.hold) held_.hold->await_delivery();  // until hold_delivered()
    return true;
  }
  bool stopped() const noexcept { return stop_.load(std::memory_order_acquire); }
  void complete_cancelled() noexcept {
    AsyncResult result;
    result.cancelled = true;
    complete_once(std::move(result));
  }
  void step();
  void enter();
  void queued();
  void begin_loop();
  void apply(AcquireLoop::Step step);
  void resume_loop();
  void arm(SteadyClock::time_point at) { AsyncDriver::instance().wake_at(shared_from_this(), at); }
  void end(bool held);
  void end_empty();

  const std::shared_ptr<HoldOwner> owner_;
  const Call call_;
  const SteadyClock::time_point deadline_;
  std::atomic<bool> stop_{false};
  std::mutex send_mutex_;  // orders cancel_unsent() and the first attempt
  bool sent_{false};       // guarded by send_mutex_: the first attempt has started
  Phase phase_{Phase::start};
  bool gate_{false};             // this task has the object's local gate
  bool waking_{false};           // the strategy's watch has this task as its waker
  AcquireLoop::Step pending_{};  // the loop's step in progress
  Held held_;
  // Destroyed in this order: the loop, then its strategy, then the waiter it refers to.
  std::optional<AcquireLoop::Waiter> waiter_;
  std::unique_ptr<WaitStrategy> wait_;
  std::optional<AcquireLoop> loop_;
  std::unique_ptr<ObservedCall> observed_;  // with an Observer: told how the loop ended
};

void AcquireTask::run() noexcept {
  try {
    step();
  } catch (...) {
    if (observed_) observed_->failed();
    observed_.reset();
    if (gate_ && !held_.hold) owner_->gate().open_gate();
    gate_ = false;
    phase_ = Phase::done;
    fail();
  }
  if (phase_ == Phase::done) {
    loop_.reset();  // a fair waiter's strategy leaves the queue here, on this thread
    wait_.reset();
  }
}

void AcquireTask::step() {
  switch (phase_) {
    case Phase::start:
      return enter();
    case Phase::queued:
      return queued();
    case Phase::courtesy: {  // as the blocking call's courtesy pause (LockCore::gated_acquire)
      if (stopped()) return end_empty();  // nothing sent yet; the gate is passed on
      const auto until = std::min(owner_->courtesy_until(), deadline_);
      if (call_ != Call::try_lock && SteadyClock::now() < until) return arm(until);
      return begin_loop();
    }
    case Phase::looping:
      return resume_loop();
    case Phase::done:
      return;
  }
}

void AcquireTask::enter() {
  if (stopped()) return end_empty();  // before the send: nothing was sent
  const Ownership::Entry entry = owner_->gate().enter_async(call_, *this);
  if (entry == Ownership::Entry::queued) {
    phase_ = Phase::queued;
    return arm(deadline_);
  }
  if (entry != Ownership::Entry::entered) {
    const AcquireLoop::Waiter who = owner_->handle_waiter();
    (void)entry_result(entry, call_, who.key, who.words);  // throws what the blocking call throws
    return end_empty();
  }
  gate_ = true;
  phase_ = Phase::courtesy;
  step();
}

// In the local queue: the gate handed over, or a stop, a cancel_waits() or the deadline.
void AcquireTask::queued() {
  Ownership& gate = owner_->gate();
  if (!gate.granted(*this)) {
    const bool late =
        deadline_ != SteadyClock::time_point::max() && SteadyClock::now() >= deadline_;
    if (!stopped() && !gate.cancelled() && !late) return arm(deadline_);
    if (gate.leave_queue(*this)) {
      phase_ = Phase::start;  // out of the queue: nothing to undo
      if (stopped() || late) return end_empty();
      const AcquireLoop::Waiter who = owner_->handle_waiter();
      (void)cancelled_result(call_, who.key, who.words);  // CancelledError for acquire()
      return end_empty();
    }
  }
  gate_ = true;  // handed over (perhaps just now): go on, or pass it on if stopped
  phase_ = Phase::courtesy;
  step();
}

void AcquireTask::begin_loop() {
  {
    std::lock_guard<std::mutex> guard(send_mutex_);
    sent_ = true;  // a total cancellation is ignored from here on
  }
  if (stopped()) return end_empty();  // cancelled before the send: nothing was sent
  phase_ = Phase::looping;
  waiter_.emplace(owner_->handle_waiter());
  wait_ = owner_->new_wait();
  AcquireLoop::Taker& taker = *this;
  if (Observer* const observer = observer_of(waiter_->options)) {
    observed_ = std::make_unique<ObservedCall>(*observer, waiter_->key, owner_->observed_nodes());
  }
  loop_.emplace(*waiter_, taker, *wait_, call_, deadline_, observed_ ? observed_->event() : nullptr,
                owner_->crowded());
  loop_->stop_on(&stop_);
  apply(loop_->begin());
}

void AcquireTask::apply(AcquireLoop::Step step) {
  pending_ = step;
  if (step.kind == AcquireLoop::Step::Kind::done) return end(step.held);
  SteadyClock::time_point at = step.until;
  if (step.kind == AcquireLoop::Step::Kind::wait) {
    if (!waking_) waking_ = wait_->set_waker(this);
    at = wait_->due(at);
    // A watch that cannot wake this task is looked at every 50 ms (none of the library's).
    if (!waking_) at = std::min(at, SteadyClock::now() + std::chrono::milliseconds(50));
  }
  arm(at);
}

void AcquireTask::resume_loop() {
  const auto now = SteadyClock::now();
  if (pending_.kind == AcquireLoop::Step::Kind::pause) {
    if (now < pending_.until && !stopped()) return arm(pending_.until);
    return apply(loop_->resume(false));
  }
  const bool woken = wait_->poll(pending_.until);
  apply(loop_->resume(woken));
}

// The loop ended: a hold to hand out (unless stopped meanwhile: then it is released in the
// background, as a Hold dropped at once), or not held.
void AcquireTask::end(bool held) {
  if (observed_) {
    if (held) {
      observed_->held(held_.hold->fence());
    } else {
      observed_->contended();
    }
    observed_.reset();
  }
  if (!held) {
    owner_->gate().open_gate();
    gate_ = false;
    return end_empty();
  }
  Hold hold = Access::hold(owner_, std::move(held_.hold), held_.slot);
  gate_ = false;  // the Hold has it now
  phase_ = Phase::done;
  AsyncResult result;
  if (stopped()) {
    result.cancelled = true;  // `hold` goes out of scope: the finisher releases it
  } else {
    result.hold.emplace(std::move(hold));
  }
  finish(std::move(result));
}

// Ends with nothing held: timed out, or stopped (a grant goes through end()).
void AcquireTask::end_empty() {
  if (gate_) owner_->gate().open_gate();  // handed the gate, but stopped before the loop
  gate_ = false;
  phase_ = Phase::done;
  AsyncResult result;
  result.cancelled = stopped();
  finish(std::move(result));
}

// A release: one blocking step on the driver's thread.
class ReleaseTask final : public CompletingTask {
 public:
  ReleaseTask(Hold hold, AsyncCompletionPtr completion)
      : CompletingTask(std::move(completion)), hold_(std::move(hold)) {}
  void cancel() noexcept override {}  // a release runs to its end
  void run() noexcept override {
    try {
      AsyncResult result;
      result.value = hold_.release();
      finish(std::move(result));
    } catch (...) {
      fail();
    }
  }

 private:
  Hold hold_;
};

// An extend: one blocking step; it shares the hold's state, so a Hold ended meanwhile reports
// false (as Hold::extend on an ended hold).
class ExtendTask final : public CompletingTask {
 public:
  ExtendTask(std::shared_ptr<HoldOwner> owner, Held held, std::chrono::milliseconds ttl,
             AsyncCompletionPtr completion)
      : CompletingTask(std::move(completion)),
        owner_(std::move(owner)),
        held_(std::move(held)),
        ttl_(ttl) {}
  void cancel() noexcept override {}  // an extend runs to its end
  void run() noexcept override {
    try {
      AsyncResult result;
      if (held_.hold && !held_.hold->released()) {
        result.value = owner_->extend_handle(held_, ttl_.count() > 0 ? ttl_ : owner_->ttl());
      }
      finish(std::move(result));
    } catch (...) {
      fail();
    }
  }

 private:
  std::shared_ptr<HoldOwner> owner_;
  Held held_;
  std::chrono::milliseconds ttl_;
};

template <class Task, class... Args>
std::shared_ptr<AsyncOperation> start(Args&&... args) {
  auto task = std::make_shared<Task>(std::forward<Args>(args)...);
  AsyncDriver& driver = AsyncDriver::instance();
  driver.adopt(task);  // lives until it completes
  driver.schedule(task);
  return task;
}

TimedCall async_call(std::optional<std::chrono::nanoseconds> timeout) noexcept {
  if (!timeout) return TimedCall{Call::lock, SteadyClock::time_point::max()};
  return timed_call(*timeout);
}

}  // namespace

void hold_delivered(const Hold& hold) noexcept {
  if (const std::shared_ptr<HoldState>& state = Access::hold_state(hold)) state->delivered();
}

std::shared_ptr<AsyncOperation> start_async_acquire(std::shared_ptr<HoldOwner> owner,
                                                    std::optional<std::chrono::nanoseconds> timeout,
                                                    AsyncCompletionPtr completion) {
  return start<AcquireTask>(std::move(owner), async_call(timeout), std::move(completion));
}

std::shared_ptr<AsyncOperation> async_acquire(LockBase& lock,
                                              std::optional<std::chrono::nanoseconds> timeout,
                                              AsyncCompletionPtr completion) {
  return start_async_acquire(Access::core(lock), timeout, std::move(completion));
}

std::shared_ptr<AsyncOperation> async_release(Hold&& hold, AsyncCompletionPtr completion) {
  return start<ReleaseTask>(std::move(hold), std::move(completion));
}

std::shared_ptr<AsyncOperation> async_extend(const Hold& hold, std::chrono::milliseconds ttl,
                                             AsyncCompletionPtr completion) {
  return start<ExtendTask>(Access::hold_owner(hold),
                           Held{Access::hold_state(hold), Access::hold_slot(hold)}, ttl,
                           std::move(completion));
}

}  // namespace detail
}  // namespace redlock
