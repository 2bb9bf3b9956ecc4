// src/watch/subscriber_lend.cpp: a lone waiter reads the subscriber's connection itself
// (Subscriber::wait_lent, declared in watch/subscriber.hpp).
//
// Without it a release reaches a waiter in two steps: the subscriber thread reads the message and
// wakes the waiting thread, which the scheduler must then run. With one waiter in the process
// (the common case across processes) the waiter can read the message itself, as a raw client
// blocked on its subscribed socket does. The hand-over of the connection happens before the
// release, while the waiter waits anyway:
//
//   waiter: borrow()  -> lend_ = requested, event fd written
//   thread: obey()    -> answer_lend(): lend_ = lent (or none: declined), parks on lend_cv_
//   waiter: polls the connection and the event fd; reads and handles what arrives (the same
//           read_replies the thread runs), until its slot is woken or its deadline
//   anyone who needs the thread (watch of a new channel, stop, drop, an unsubscribe or a PING
//   falling due) writes the event fd: the waiter gives the connection back (a write that only
//   woke the waiter's own slot is not a recall)
//
// The loan lasts one wait. At its end the connection goes back without waking the thread
// (Lend::returned: a wake-up would compete with the waiter's attempt for the CPU), unless the
// thread is needed now (thread_needed); the thread stays parked until something needs it
// (resume_thread: another waiter, a command to send, an unsubscribe due, stop, drop), and a
// waiter that waits again is lent it at once. News that the connection may no longer reach
// the master (Sentinel: news()) recalls it like the thread's own work. Nothing but that waiter
// can need the connection while it is returned; a fair waiter whose deadline passed reads what
// came meanwhile (drain_returned) before it gives up, so a hand-over sent in time is not missed.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "io/connection.hpp"
#include "watch/subscriber.hpp"

namespace redlock {
namespace detail {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kAnswerWait{10};
constexpr std::chrono::milliseconds kShortestLoan{2};  // a shorter wait is not worth asking

struct Ready {
  bool data{false};      // the connection is readable (or has decrypted bytes buffered)
  bool recalled{false};  // the event fd was written (now drained): the thread may be needed
  bool failed{false};    // poll itself failed: the thread takes over (and reconnects)
};

// Waits until `connection` has data, the event fd is written, or `until`; both may be set.
Ready await(const Connection& connection, int event_fd, SteadyClock::time_point until) noexcept {
  Ready ready;
  pollfd fds[2] = {{event_fd, POLLIN, 0}, {connection.transport.fd(), POLLIN, 0}};
  timespec limit{};
  const timespec* timeout = nullptr;
  if (connection.transport.buffered()) {
    timeout = &limit;  // only a look at the event fd
  } else if (until != SteadyClock::time_point::max()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::nanoseconds>(until - SteadyClock::now());
    if (left.count() <= 0) return ready;
    limit.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
    limit.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
    timeout = &limit;
  }
  const int rc = ::ppoll(fds, 2, timeout, nullptr);
  ready.failed = rc < 0 && errno != EINTR;
  ready.data = connection.transport.buffered() || (rc > 0 && fds[1].revents != 0);
  if (rc > 0 && (fds[0].revents & POLLIN) != 0) {
    std::uint64_t value = 0;
    [[maybe_unused]] const ssize_t n = ::read(event_fd, &value, sizeof value);
    ready.recalled = true;
  }
  return ready;
}

// Copies `what` into `out` (truncated, never allocating); returns out.
const char* copy_reason(const char* what, char (&out)[Subscriber::kReasonSize]) noexcept {
  std::snprintf(out, sizeof out, "%s", what);
  return out;
}

}  // namespace

std::optional<bool> Subscriber::wait_lent(WakeSlot& slot, std::size_t registrations,
                                          SteadyClock::time_point until) noexcept {
  const bool worth_asking = until - SteadyClock::now() >= kShortestLoan;
  Connection* const connection = borrow(slot, registrations, until, worth_asking);
  if (connection == nullptr) return std::nullopt;
  char reason[kReasonSize];
  const char* failure = nullptr;
  bool recalled = false;
  while (failure == nullptr && !recalled && !slot.ready() && SteadyClock::now() < until) {
    const Ready ready = await(*connection, event_fd_, until);
    if (ready.failed) failure = copy_reason("poll failed", reason);
    if (ready.data) failure = read_lent(*connection, slot, reason);
    // After the data it came with is read. The write may only have woken this waiter's slot
    // (cancel_waits, a wake-up passed on): the state says whether the thread is needed.
    recalled = ready.recalled && recall_needed();
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    give_back(slot, failure);
  }
  if (failure != nullptr || (recalled && !slot.ready() && SteadyClock::now() < until)) {
    return std::nullopt;  // the rest of the wait on the slot
  }
  return slot.take();
}

void Subscriber::drain_returned(WakeSlot& slot) noexcept {
  Connection* connection = nullptr;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (lend_ != Lend::returned) return;  // the thread reads (or nothing is lent)
    lend_ = Lend::lent;
    borrower_ = &slot;
    connection = lent_;
  }
  char reason[kReasonSize];
  const char* failure = nullptr;
  pollfd fd{connection->transport.fd(), POLLIN, 0};
  if (connection->transport.buffered() || ::poll(&fd, 1, 0) > 0) {
    failure = read_lent(*connection, slot, reason);
  }
  std::lock_guard<std::mutex> guard(mutex_);
  give_back(slot, failure);
}

bool Subscriber::recall_needed() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return thread_needed(SteadyClock::now());
}

bool Subscriber::thread_needed(SteadyClock::time_point now) noexcept {
  return thread_work_due(now) || registrations_ != borrower_registrations_;
}

bool Subscriber::thread_work_due(SteadyClock::time_point now) noexcept {
  drop_stale_idle(now);
  const bool due = !idle_.empty() && idle_.front().since + kLinger <= now;
  return due || now >= ping_due() || stop_ || drop_requested_ || moved_ || !outgoing_.empty();
}

const char* Subscriber::read_lent(Connection& connection, WakeSlot& slot,
                                  char (&reason)[kReasonSize]) noexcept {
  slot.interrupt_with(-1);  // its own wake-up, below, need not write the event fd
  const char* failure = nullptr;
  try {
    read_replies(connection);
  } catch (const std::exception& e) {
    failure = copy_reason(e.what(), reason);
  } catch (...) {
    failure = "read failed";
  }
  slot.interrupt_with(event_fd_);
  return failure;
}

Connection* Subscriber::borrow(WakeSlot& slot, std::size_t registrations,
                               SteadyClock::time_point until, bool ask) noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool lendable =
      link_.pubsub == PubSub::classic && connected_ && !refused_ && registrations_ == registrations;
  if (lend_ == Lend::returned) {  // the thread is still parked: lent again at once
    borrower_registrations_ = registrations;
    if (!lendable || thread_needed(SteadyClock::now())) {
      resume_thread();
      return nullptr;
    }
    lend_ = Lend::lent;
    borrower_ = &slot;
    ++stats_.loans;
    slot.interrupt_with(event_fd_);
    return lent_;
  }
  if (lend_ != Lend::none || !lendable || stop_ || !ask) return nullptr;
  lend_ = Lend::requested;
  borrower_ = &slot;
  borrower_registrations_ = registrations;
  // A wake-up of the slot meanwhile writes the event fd too, so the thread answers at once.
  slot.interrupt_with(event_fd_);
  wake_thread();
  // The thread answers at the top of its loop, at once unless it is writing.
  const auto answer_by = std::min(until, SteadyClock::now() + kAnswerWait);
  try {
    lend_cv_.wait_until(lock, answer_by, [this] { return lend_ != Lend::requested; });
  } catch (...) {
  }
  if (lend_ == Lend::requested) {  // no answer in time: withdrawn
    lend_ = Lend::none;
    borrower_ = nullptr;
  }
  if (lend_ != Lend::lent || borrower_ != &slot) {
    slot.interrupt_with(-1);
    return nullptr;
  }
  return lent_;
}

void Subscriber::give_back(WakeSlot& slot, const char* failure) noexcept {
  slot.interrupt_with(-1);
  borrower_ = nullptr;
  if (failure != nullptr) {
    lent_broken_ = true;
    copy_reason(failure, lent_reason_);
    resume_thread();
    return;
  }
  if (thread_needed(SteadyClock::now())) {
    resume_thread();
    return;
  }
  // Every reason to write the event fd was just checked from the state; what is left in it
  // (a write that woke this waiter's slot) would only cut the next loan short.
  std::uint64_t value = 0;
  [[maybe_unused]] const ssize_t n = ::read(event_fd_, &value, sizeof value);
  lend_ = Lend::returned;
}

void Subscriber::resume_thread() noexcept {
  lend_ = Lend::none;
  lent_ = nullptr;
  borrower_ = nullptr;
  lend_cv_.notify_all();
}

void Subscriber::answer_lend(Connection* connection) {
  // Nothing in flight (a reply to the thread's commands would be handled by the borrower), no
  // command waiting to be sent, no decrypted bytes the borrower's poll would not see, and still
  // one waiter.
  const bool lend = connection != nullptr && connected_ && !stop_ && !drop_requested_ && !moved_ &&
                    !refused_ && outgoing_.empty() && sent_.empty() &&
                    !connection->transport.buffered() && SteadyClock::now() < ping_due() &&
                    registrations_ == borrower_registrations_;
  lend_ = lend ? Lend::lent : Lend::none;
  lent_ = lend ? connection : nullptr;
  if (lend) ++stats_.loans;
  if (!lend) borrower_ = nullptr;
  lend_cv_.notify_all();
}

bool Subscriber::park_while_lent(std::unique_lock<std::mutex>& lock) {
  bool recalled = false;
  while (lend_ == Lend::lent || lend_ == Lend::returned) {
    // While lent, the borrower reads for every waiter: only work of the thread's own recalls it.
    const bool needed = thread_work_due(SteadyClock::now());
    if (lend_ == Lend::returned && (needed || registrations_ != borrower_registrations_)) {
      resume_thread();
      break;
    }
    if (lend_ == Lend::lent && needed && !recalled) {
      signal_event_fd();  // the borrower's poll hears it and gives the connection back
      recalled = true;
    }
    if (recalled && lend_ == Lend::lent) {
      lend_cv_.wait(lock);
    } else {
      auto look_at = ping_due();  // the PING is the thread's work too
      if (!idle_.empty()) look_at = std::min(look_at, idle_.front().since + kLinger);
      lend_cv_.wait_until(lock, look_at);
    }
  }
  return std::exchange(lent_broken_, false);
}

void Subscriber::drop_stale_idle(SteadyClock::time_point now) noexcept {
  // Every waiter that leaves a channel queues an entry; most are stale by the time they are due
  // (the channel has a waiter again, or became idle later). Only a live one needs the thread.
  while (!idle_.empty() && idle_.front().since + kLinger <= now) {
    const auto it = channels_.find(idle_.front().channel);
    if (it != channels_.end() && it->second.waiters.empty() &&
        it->second.state == State::subscribed && it->second.idle_since == idle_.front().since) {
      return;
    }
    idle_.pop_front();
  }
}

}  // namespace detail
}  // namespace redlock
