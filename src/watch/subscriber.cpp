// src/watch/subscriber.cpp: the shared pub/sub connection behind wake-on-release.
#include "watch/subscriber.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "io/wire.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {
namespace {
std::atomic<std::int64_t> g_idle_close_ms{30'000};
}  // namespace

std::chrono::milliseconds idle_close() {
  return std::chrono::milliseconds(g_idle_close_ms.load(std::memory_order_relaxed));
}

void set_idle_close_for_test(std::chrono::milliseconds after) {
  g_idle_close_ms.store(after.count(), std::memory_order_relaxed);
}

Subscriber::Subscriber(SubscriberLink link) : link_(std::move(link)) {
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // not inherited across exec
  try {
    if (link_.follow) following_ = link_.follow([this] { news(); });
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    following_.reset();
    if (event_fd_ >= 0) ::close(event_fd_);
    throw;
  }
}

Subscriber::~Subscriber() {
  following_.reset();  // no news() from now on (one under way has ended)
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stop_ = true;
  }
  confirmed_.notify_all();  // also ends a reconnect back-off at once
  wake_thread();
  if (thread_.joinable()) thread_.join();
  if (event_fd_ >= 0) ::close(event_fd_);
}

void Subscriber::signal_event_fd() noexcept {
  const std::uint64_t one = 1;
  if (event_fd_ >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(event_fd_, &one, sizeof one);
  }
}

void Subscriber::wake_thread() noexcept {
  signal_event_fd();
  lend_cv_.notify_all();  // parked after a loan: it looks again (no system call if not)
}

void Subscriber::enqueue(Op op, const std::string& channel) {
  outgoing_.push_back(Outgoing{op, channel});
}

void Subscriber::watch(const std::string& channel, WakeSlot* slot, Hearing hearing) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (refused_) return;  // the server refuses our subscriptions: the waiter polls
    auto [it, inserted] = channels_.try_emplace(channel);
    Channel& entry = it->second;
    if (hearing == Hearing::secondary) {
      entry.waiters.push_back(slot);
      ++entry.secondaries;
    } else {
      entry.waiters.insert(entry.waiters.end() - static_cast<std::ptrdiff_t>(entry.secondaries),
                           slot);
    }
    ++registrations_;
    if (lend_ == Lend::returned) resume_thread();  // another waiter: the thread reads for both
    if (inserted && connected_) {
      try {
        enqueue(Op::subscribe, channel);
      } catch (...) {
        channels_.erase(it);  // new, so `slot` was its only waiter
        --registrations_;
        throw;
      }
    }
    // Not connected: the thread may sleep without a connection (idle); it connects now and
    // subscribes every channel.
    wake = inserted;
  }
  if (wake) wake_thread();
}

bool Subscriber::confirmed(const std::string& channel,
                           std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto subscribed = [&] {
    auto found = channels_.find(channel);
    return found != channels_.end() && found->second.state == State::subscribed;
  };
  // The node is down, or refuses subscriptions: do not wait, the timer covers it. A channel
  // gone (sharded: orphaned) will not be confirmed here either.
  if (failing_ || refused_) return subscribed();
  confirmed_.wait_until(lock, deadline, [&] {
    return stop_ || failing_ || refused_ || subscribed() || channels_.count(channel) == 0;
  });
  return !stop_ && subscribed();
}

bool Subscriber::subscribed(const std::string& channel) const {
  std::lock_guard<std::mutex> guard(mutex_);
  const auto it = channels_.find(channel);
  return connected_ && !moved_ && it != channels_.end() && it->second.state == State::subscribed;
}

bool Subscriber::lingering(const std::string& channel) const noexcept {
  try {
    std::lock_guard<std::mutex> guard(mutex_);
    const auto it = channels_.find(channel);
    return connected_ && !moved_ && it != channels_.end() && it->second.waiters.empty() &&
           it->second.state != State::subscribing;
  } catch (...) {
    return false;  // unsure: count it as a listener (the caller only pauses a little longer)
  }
}

bool Subscriber::waiting_before(const std::string& channel, const WakeSlot* slot) const noexcept {
  try {
    std::lock_guard<std::mutex> guard(mutex_);
    const auto it = channels_.find(channel);
    return it != channels_.end() && !it->second.waiters.empty() &&
           it->second.waiters.front() != slot;
  } catch (...) {
    return false;
  }
}

bool Subscriber::watches(const std::string& channel, const WakeSlot* slot) const noexcept {
  try {
    std::lock_guard<std::mutex> guard(mutex_);
    const auto it = channels_.find(channel);
    if (it == channels_.end()) return false;
    const auto& w = it->second.waiters;
    return std::find(w.begin(), w.end(), slot) != w.end();
  } catch (...) {
    return false;
  }
}

void Subscriber::unwatch(const std::string& channel, WakeSlot* slot) noexcept {
  bool wake = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    wake = remove_waiter(channel, slot);
    if (lend_ == Lend::returned) {
      resume_thread();  // it runs its whole loop (the unsubscribe schedule too) before sleeping
      wake = false;
    }
  }
  if (wake) wake_thread();
}

bool Subscriber::remove_waiter(const std::string& channel, WakeSlot* slot) noexcept {
  auto it = channels_.find(channel);
  if (it == channels_.end()) return false;
  auto& waiters = it->second.waiters;
  const auto at = std::find(waiters.begin(), waiters.end(), slot);
  if (at == waiters.end()) return false;
  if (waiters.end() - at <= static_cast<std::ptrdiff_t>(it->second.secondaries)) {
    --it->second.secondaries;
  }
  waiters.erase(at);
  --registrations_;
  // A wake-up this waiter will never act on belongs to someone else.
  if (slot->pending() && !waiters.empty()) wake_one(it->second);
  if (!waiters.empty()) return false;
  became_idle(it->first, it->second, slot->waited() ? Contended::yes : Contended::no);
  // The thread schedules the unsubscribe after kLinger; it needs waking only if it may be
  // sleeping past that (nothing else was due sooner).
  return idle_.size() == 1;
}

void Subscriber::became_idle(const std::string& name, Channel& channel, Contended contended) {
  if (contended == Contended::yes) channel.idle_since = std::chrono::steady_clock::now();
  try {
    idle_.push_back(Idle{name, channel.idle_since});
  } catch (...) {
    // Out of memory: the channel stays subscribed until the next reconnect; waiters are safe.
  }
}

void Subscriber::wake_one(Channel& channel) noexcept {
  // Waiters are in arrival order, and one that acquires leaves (and queues at the back when it
  // waits again): waking the first one without a pending wake-up is FIFO within this process.
  // The secondary waiters are last (Hearing): one is woken only when no primary waiter can be.
  for (WakeSlot* slot : channel.waiters) {
    if (!slot->pending() && slot->offer_release()) return;
  }
}

SubscriberStats Subscriber::stats() const {
  std::lock_guard<std::mutex> guard(mutex_);
  SubscriberStats out = stats_;
  out.channels = channels_.size();
  return out;
}

void Subscriber::drop_connection_for_test() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    drop_requested_ = true;
  }
  wake_thread();
}

void Subscriber::refuse(std::string_view error) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (refused_) return;
    // Every channel fails alike (the permission is the user's): no entry is kept, and every
    // waiter falls back to its timer (polling at retry_delay).
    refused_ = true;
    channels_.clear();
    registrations_ = 0;
    outgoing_.clear();
    idle_.clear();
  }
  confirmed_.notify_all();
  logf(LogLevel::warn,
       "redlock: {} refused {} ({}); waiters on this server poll at retry_delay instead of "
       "waking on release (grant the ACL user the lock channels, e.g. &<key prefix>*; a cluster "
       "needs Redis >= 7.0 for sharded pub/sub)",
       link_.address, link_.pubsub == PubSub::sharded ? "SSUBSCRIBE" : "SUBSCRIBE", error);
}

void Subscriber::run() noexcept {
  std::unique_ptr<Connection> connection;
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    try {
      if (!obey(connection)) return;
      if (!connection && !has_channels()) {
        wait_readable(nullptr, -1);  // idle, without a connection: until a watch() (or stop)
        continue;
      }
      if (!connection && !(connection = reconnect(backoff))) continue;
      send_outgoing(*connection);
      int timeout_ms = schedule_unsubscribes();
      if (timeout_ms == 0) continue;  // send the UNSUBSCRIBEs first
      timeout_ms = close_if_idle(connection, timeout_ms);
      if (!connection) continue;
      timeout_ms = probe(*connection, timeout_ms);
      if (wait_readable(connection.get(), timeout_ms)) read_replies(*connection);
    } catch (const std::exception& e) {
      lost(connection, e.what());
    } catch (...) {
      lost(connection, nullptr);
    }
  }
}

bool Subscriber::obey(std::unique_ptr<Connection>& connection) {
  bool broken = false;
  bool moved = false;
  char reason[kReasonSize];
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (lend_ == Lend::requested) answer_lend(connection.get());
    broken = park_while_lent(lock);
    if (broken) std::memcpy(reason, lent_reason_, sizeof reason);
    if (stop_) return false;
    moved = std::exchange(moved_, false) && connection && !current(*connection);
    if (drop_requested_ || moved) {
      drop_requested_ = false;
      connection.reset();  // reconnect() subscribes again and wakes the waiters once confirmed
      connected_ = false;
    }
  }
  if (moved) {
    logf(LogLevel::info,
         "redlock: subscriber to {}: the master's address was asked again; moving the "
         "subscriptions to the master now",
         link_.address);
  }
  if (broken) lost(connection, reason);
  return true;
}

bool Subscriber::current(const Connection& connection) const noexcept {
  return !link_.current || link_.current(connection);
}

void Subscriber::news() noexcept {
  try {
    std::lock_guard<std::mutex> guard(mutex_);
    moved_ = true;
  } catch (...) {
    return;  // the mutex could not be taken (never seen): the next failure moves the connection
  }
  confirmed_.notify_all();  // ends a reconnect's back-off: the gate may have opened
  wake_thread();            // a borrower hears it too (thread_work_due) and gives it back
}

std::unique_ptr<Connection> Subscriber::reconnect(std::chrono::milliseconds& backoff) {
  std::unique_ptr<Connection> connection;
  try {
    connection = link_.connect();
  } catch (const std::exception& e) {
    link_.unreachable(e.what());
    std::unique_lock<std::mutex> lock(mutex_);
    moved_ = false;  // news made by this very failure (the master asked again) is not news
    failing_ = true;
    orphan_all();  // sharded: the master may have failed, its waiters look for the new one
    confirmed_.notify_all();
    // Through Sentinel, news (a promotion done, a gate opened) ends the back-off at once.
    confirmed_.wait_for(lock, backoff, [this] { return stop_ || moved_; });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    return nullptr;
  }
  backoff = std::chrono::milliseconds(10);
  sent_.clear();
  ping_sent_.reset();
  heard();  // the handshake's answer
  connection->transport.keep_alive(kKeepAliveIdle, kKeepAliveInterval, kKeepAliveProbes);
  std::lock_guard<std::mutex> guard(mutex_);
  resubscribe_all();
  return connection;
}

void Subscriber::resubscribe_all() {
  // (Re)subscribe every channel that has waiters; waiters may have missed a release while the
  // connection was down, so wake them all to retry.
  ++stats_.reconnects;
  connected_ = true;
  failing_ = false;
  outgoing_.clear();
  idle_.clear();  // channels without a waiter are dropped below
  for (auto it = channels_.begin(); it != channels_.end();) {
    if (it->second.waiters.empty()) {
      it = channels_.erase(it);
      continue;
    }
    it->second.state = State::subscribing;
    // Releases while the connection was down were missed: once the subscription is confirmed
    // again (not before, or a release in between would be missed too), every waiter of the
    // channel retries.
    it->second.wake_all_on_confirm = stats_.reconnects > 1;
    enqueue(Op::subscribe, it->first);
    ++it;
  }
}

void Subscriber::send_outgoing(Connection& connection) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    while (!outgoing_.empty()) {
      const Outgoing& out = outgoing_.front();
      const bool subscribe = out.op == Op::subscribe;
      const bool sharded = link_.pubsub == PubSub::sharded;
      const std::string_view verb = subscribe ? (sharded ? "SSUBSCRIBE" : "SUBSCRIBE")
                                              : (sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE");
      const char* argv[2] = {verb.data(), out.channel.data()};
      const std::size_t lens[2] = {verb.size(), out.channel.size()};
      append(connection, CommandView{2, argv, lens, nullptr}, Dialect::as_given);
      sent_.push_back(std::move(outgoing_.front()));
      outgoing_.pop_front();
    }
  }
  write_all(connection, link_.address);
}

void Subscriber::heard() noexcept {
  heard_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
               std::memory_order_relaxed);
}

std::chrono::steady_clock::time_point Subscriber::ping_due() const noexcept {
  const std::chrono::steady_clock::duration since(heard_.load(std::memory_order_relaxed));
  return std::chrono::steady_clock::time_point(since) + kPingAfter;
}

int Subscriber::probe(Connection& connection, int timeout_ms) {
  const auto now = std::chrono::steady_clock::now();
  const auto due = ping_due();
  auto look_at = due;
  if (ping_sent_ && *ping_sent_ >= due - kPingAfter) {  // nothing read since the PING
    look_at = *ping_sent_ + kPingAnswer;
    if (now >= look_at) {
      // What came meanwhile (the process may have been stopped) is read before judging.
      if (connection.transport.readable_now()) return 0;
      throw TimeoutError(fmt::format("no answer to PING within {} ms", kPingAnswer.count()));
    }
  } else if (now >= due) {
    static const char* const kPing[] = {"PING"};
    static const std::size_t kPingLen[] = {4};
    append(connection, CommandView{1, kPing, kPingLen, nullptr}, Dialect::as_given);
    sent_.push_back(Outgoing{Op::ping, {}});
    ping_sent_ = now;
    write_all(connection, link_.address);
    look_at = now + kPingAnswer;
  }
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(look_at - now).count();
  const int wait = static_cast<int>(std::max<std::int64_t>(left, 0));
  return timeout_ms < 0 ? wait : std::min(timeout_ms, wait);
}

bool Subscriber::has_channels() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return !channels_.empty();
}

int Subscriber::close_if_idle(std::unique_ptr<Connection>& connection, int timeout_ms) {
  std::lock_guard<std::mutex> guard(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (!channels_.empty() || !outgoing_.empty() || !sent_.empty()) {
    empty_since_.reset();
    return timeout_ms;
  }
  if (!empty_since_) empty_since_ = now;
  const auto close_at = *empty_since_ + idle_close();
  if (now >= close_at) {
    connection.reset();  // reopened by the next watch()
    connected_ = false;
    empty_since_.reset();
    ++stats_.idle_closes;
    return -1;
  }
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(close_at - now).count();
  return timeout_ms < 0 ? static_cast<int>(left) : std::min(timeout_ms, static_cast<int>(left));
}

int Subscriber::schedule_unsubscribes() {
  std::lock_guard<std::mutex> guard(mutex_);
  const auto now = std::chrono::steady_clock::now();
  int timeout_ms = -1;  // nothing due: sleep until woken
  bool queued = false;
  while (!idle_.empty()) {
    const Idle& front = idle_.front();
    const auto due = front.since + kLinger;
    if (due > now) {
      timeout_ms =
          static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(due - now).count());
      break;
    }
    const auto it = channels_.find(front.channel);
    if (it != channels_.end()) {
      Channel& ch = it->second;
      if (ch.waiters.empty() && ch.state == State::subscribed && ch.idle_since == front.since) {
        ch.state = State::unsubscribing;
        enqueue(Op::unsubscribe, it->first);
        queued = true;
      }
    }
    idle_.pop_front();
  }
  return queued ? 0 : timeout_ms;
}

bool Subscriber::wait_readable(const Connection* connection, int timeout_ms) {
  if (connection && connection->transport.buffered()) return true;
  pollfd fds[2] = {{event_fd_, POLLIN, 0},
                   {connection ? connection->transport.fd() : -1, POLLIN, 0}};
  const int rc = ::poll(fds, connection ? 2 : 1, timeout_ms);
  if (rc < 0 && errno != EINTR) {
    throw ConnectionError(fmt::format("redlock: poll failed: {}", std::strerror(errno)));
  }
  if ((fds[0].revents & POLLIN) != 0) {
    std::uint64_t value = 0;
    [[maybe_unused]] const ssize_t n = ::read(event_fd_, &value, sizeof value);
  }
  return connection && rc > 0 && fds[1].revents != 0;
}

void Subscriber::lost(std::unique_ptr<Connection>& connection, const char* why) noexcept {
  if (why != nullptr) {
    logf(LogLevel::info, "redlock: subscriber connection to {} lost ({}); reconnecting",
         link_.address, why);
  }
  connection.reset();
  std::lock_guard<std::mutex> guard(mutex_);
  connected_ = false;
  orphan_all();  // sharded: a failover may have moved the slots
}

}  // namespace detail
}  // namespace redlock
