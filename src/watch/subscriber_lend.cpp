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
//   anyone who needs the thread (watch of a new channel, stop, drop, an unsubscribe falling due,
//   the slot woken by someone else) writes the event fd: the waiter gives the connection back
//
// The loan outlives one wait (the waiter's attempt comes between two), and ends at unwatch().
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
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

constexpr std::chrono::milliseconds kAnswerWait{50};

enum class Ready : unsigned char { data, recalled, timeout };

// Waits until `connection` has data (first, if both), the event fd is written (drained: the
// loan is recalled), or `until`.
Ready await(const Connection& connection, int event_fd, SteadyClock::time_point until) noexcept {
  if (connection.transport.buffered()) return Ready::data;
  pollfd fds[2] = {{event_fd, POLLIN, 0}, {connection.transport.fd(), POLLIN, 0}};
  timespec limit{};
  timespec* timeout = nullptr;
  if (until != SteadyClock::time_point::max()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::nanoseconds>(until - SteadyClock::now());
    if (left.count() <= 0) return Ready::timeout;
    limit.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
    limit.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
    timeout = &limit;
  }
  const int rc = ::ppoll(fds, 2, timeout, nullptr);
  if (rc < 0) return errno == EINTR ? Ready::timeout : Ready::recalled;  // the thread copes
  if (fds[1].revents != 0) return Ready::data;
  if ((fds[0].revents & POLLIN) != 0) {
    std::uint64_t value = 0;
    [[maybe_unused]] const ssize_t n = ::read(event_fd, &value, sizeof value);
    return Ready::recalled;
  }
  return Ready::timeout;
}

}  // namespace

std::optional<bool> Subscriber::wait_lent(WakeSlot& slot, std::size_t registrations,
                                          SteadyClock::time_point until) noexcept {
  Connection* connection = nullptr;
  try {
    connection = borrow(slot, registrations, until);
  } catch (...) {
    return std::nullopt;
  }
  if (connection == nullptr) return std::nullopt;
  for (;;) {
    if (slot.pending() || SteadyClock::now() >= until) return slot.take();
    const Ready ready = await(*connection, event_fd_, until);
    if (ready == Ready::timeout) continue;
    std::string failure;
    if (ready == Ready::data) {
      slot.interrupt_with(-1);  // its own wake-up, below, need not write the event fd
      try {
        read_replies(*connection);
        slot.interrupt_with(event_fd_);
        continue;
      } catch (const std::exception& e) {
        failure = e.what();
      } catch (...) {
        failure = "read failed";
      }
    }
    std::lock_guard<std::mutex> guard(mutex_);
    give_back(slot, std::move(failure));
    return std::nullopt;
  }
}

Connection* Subscriber::borrow(WakeSlot& slot, std::size_t registrations,
                               SteadyClock::time_point until) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (lend_ == Lend::lent && borrower_ == &slot) return lent_;
  if (lend_ != Lend::none || link_.pubsub != PubSub::classic || !connected_ || refused_ || stop_ ||
      registrations_ != registrations) {
    return nullptr;
  }
  lend_ = Lend::requested;
  borrower_ = &slot;
  borrower_registrations_ = registrations;
  wake_thread();
  // The thread answers at the top of its loop, at once unless it is reconnecting; meanwhile the
  // waiter does not hear its slot, so it waits for the answer only briefly.
  const auto answer_by = std::min(until, SteadyClock::now() + kAnswerWait);
  lend_cv_.wait_until(lock, answer_by, [this] { return lend_ != Lend::requested; });
  if (lend_ == Lend::requested) {  // no answer in time: withdrawn
    lend_ = Lend::none;
    borrower_ = nullptr;
    return nullptr;
  }
  if (lend_ != Lend::lent || borrower_ != &slot) return nullptr;
  slot.interrupt_with(event_fd_);
  return lent_;
}

void Subscriber::give_back(WakeSlot& slot, std::string failure) noexcept {
  slot.interrupt_with(-1);
  lend_ = Lend::none;
  borrower_ = nullptr;
  lent_ = nullptr;
  if (!failure.empty()) lent_failure_ = std::move(failure);
  lend_cv_.notify_all();
}

void Subscriber::answer_lend(Connection* connection) {
  // Nothing in flight (a reply to the thread's commands would be handled by the borrower), no
  // command waiting to be sent, no decrypted bytes the borrower's poll would not see, and still
  // one waiter.
  const bool lend = connection != nullptr && connected_ && !stop_ && !drop_requested_ &&
                    !refused_ && outgoing_.empty() && sent_.empty() &&
                    !connection->transport.buffered() && registrations_ == borrower_registrations_;
  lend_ = lend ? Lend::lent : Lend::none;
  lent_ = lend ? connection : nullptr;
  if (lend) ++stats_.loans;
  if (!lend) borrower_ = nullptr;
  lend_cv_.notify_all();
}

std::string Subscriber::park_while_lent(std::unique_lock<std::mutex>& lock) {
  bool recalled = false;
  while (lend_ == Lend::lent) {
    const auto now = SteadyClock::now();
    drop_stale_idle(now);
    const bool due = !idle_.empty() && idle_.front().since + kLinger <= now;
    if (!recalled && (due || stop_ || drop_requested_ || !outgoing_.empty())) {
      wake_thread();  // the borrower's poll hears it and gives the connection back
      recalled = true;
    }
    if (recalled || idle_.empty()) {
      lend_cv_.wait(lock);
    } else {
      lend_cv_.wait_until(lock, idle_.front().since + kLinger);
    }
  }
  return std::exchange(lent_failure_, std::string());
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
