// src/watch/subscriber.cpp: the shared pub/sub connection behind wake-on-release.
#include "watch/subscriber.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <vector>

#include "io/connection.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {

void WakeSlot::notify() noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    notified_ = true;
  }
  cv_.notify_all();
}

void WakeSlot::grant(std::uint64_t seq, std::uint64_t fence) noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    notified_ = true;
    granted_ = true;
    grant_seq_ = seq;
    grant_fence_ = fence;
  }
  cv_.notify_all();
}

bool WakeSlot::take_grant(std::uint64_t& seq, std::uint64_t& fence) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!granted_) return false;
  granted_ = false;
  notified_ = false;  // consumed: a grant is never passed on to another waiter
  seq = grant_seq_;
  fence = grant_fence_;
  return true;
}

namespace {
bool parse_number(std::string_view& rest, std::uint64_t& out) noexcept {
  const auto colon = rest.find(':');
  if (colon == 0 || colon == std::string_view::npos || colon > 19) return false;
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < colon; ++i) {
    const char c = rest[i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out = value;
  rest.remove_prefix(colon + 1);
  return true;
}
}  // namespace

bool parse_grant(std::string_view payload, std::uint64_t& seq, std::uint64_t& fence,
                 std::string_view& token_sha1) noexcept {
  constexpr std::string_view kPrefix = "grant:";
  if (payload.substr(0, kPrefix.size()) != kPrefix) return false;
  payload.remove_prefix(kPrefix.size());
  if (!parse_number(payload, seq) || !parse_number(payload, fence) || payload.empty()) {
    return false;
  }
  token_sha1 = payload;
  return true;
}

bool WakeSlot::pending() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return notified_;
}

bool WakeSlot::wait_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_until(lock, deadline, [this] { return notified_; });
  const bool was = notified_;
  notified_ = false;
  return was;
}

Subscriber::Subscriber(ClientImpl& node) : node_(node) {
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // not inherited across exec
  thread_ = std::thread([this] { run(); });
}

Subscriber::~Subscriber() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stop_ = true;
  }
  confirmed_.notify_all();  // also ends a reconnect back-off at once
  wake_thread();
  if (thread_.joinable()) thread_.join();
  if (event_fd_ >= 0) ::close(event_fd_);
}

void Subscriber::wake_thread() noexcept {
  const std::uint64_t one = 1;
  if (event_fd_ >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(event_fd_, &one, sizeof one);
  }
}

void Subscriber::enqueue(bool subscribe, const std::string& channel) {
  outgoing_.push_back(Outgoing{subscribe, channel});
}

void Subscriber::watch(const std::string& channel, WakeSlot* slot) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (refused_) return;  // the server refuses our subscriptions: the waiter polls
    auto [it, inserted] = channels_.try_emplace(channel);
    it->second.waiters.push_back(slot);
    if (inserted && connected_) {
      try {
        enqueue(true, channel);
      } catch (...) {
        it->second.waiters.pop_back();
        if (it->second.waiters.empty()) channels_.erase(it);
        throw;
      }
      wake = true;
    }
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
  // The node is down, or refuses subscriptions: do not wait, the timer covers it.
  if (failing_ || refused_) return subscribed();
  confirmed_.wait_until(lock, deadline,
                        [&] { return stop_ || failing_ || refused_ || subscribed(); });
  return !stop_ && subscribed();
}

bool Subscriber::subscribed(const std::string& channel) const {
  std::lock_guard<std::mutex> guard(mutex_);
  const auto it = channels_.find(channel);
  return connected_ && it != channels_.end() && it->second.state == State::subscribed;
}

void Subscriber::unwatch(const std::string& channel, WakeSlot* slot) noexcept {
  bool wake = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = channels_.find(channel);
    if (it == channels_.end()) return;
    auto& waiters = it->second.waiters;
    const auto at = std::find(waiters.begin(), waiters.end(), slot);
    if (at == waiters.end()) return;
    waiters.erase(at);
    // A wake-up this waiter will never act on belongs to someone else.
    if (slot->pending() && !waiters.empty()) wake_one(it->second);
    if (waiters.empty()) {
      it->second.idle_since = std::chrono::steady_clock::now();
      wake = true;  // the thread schedules the unsubscribe after kLinger
    }
  }
  if (wake) wake_thread();
}

void Subscriber::wake_one(Channel& channel) noexcept {
  // Waiters are in arrival order, and one that acquires leaves (and queues at the back when it
  // waits again): waking the first one without a pending wake-up is FIFO within this process.
  for (WakeSlot* slot : channel.waiters) {
    if (!slot->pending()) {
      slot->notify();
      return;
    }
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
    outgoing_.clear();
  }
  confirmed_.notify_all();
  logf(LogLevel::warn,
       "redlock: {} refused SUBSCRIBE ({}); waiters on this server poll at retry_delay instead "
       "of waking on release (grant the ACL user the lock channels, e.g. &<key prefix>*)",
       node_.address(), error);
}

void Subscriber::run() noexcept {
  std::unique_ptr<Connection> connection;
  auto backoff = std::chrono::milliseconds(10);
  std::deque<Outgoing> sent;  // commands sent whose confirmation has not arrived, in order
  for (;;) {
    try {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (stop_) return;
        if (drop_requested_) {
          drop_requested_ = false;
          connection.reset();
          connected_ = false;
        }
      }
      if (!connection) {
        try {
          connection = node_.connect_ready();
        } catch (const std::exception& e) {
          node_.note_health(false, e.what());
          std::unique_lock<std::mutex> lock(mutex_);
          failing_ = true;
          confirmed_.notify_all();
          confirmed_.wait_for(lock, backoff, [this] { return stop_; });
          backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
          continue;
        }
        backoff = std::chrono::milliseconds(10);
        sent.clear();
        {
          // (Re)subscribe every channel that has waiters; waiters may have missed a release
          // while the connection was down, so wake them all to retry.
          std::lock_guard<std::mutex> guard(mutex_);
          ++stats_.reconnects;
          connected_ = true;
          failing_ = false;
          outgoing_.clear();
          for (auto it = channels_.begin(); it != channels_.end();) {
            if (it->second.waiters.empty()) {
              it = channels_.erase(it);
              continue;
            }
            it->second.state = State::subscribing;
            // Releases while the connection was down were missed: once the subscription is
            // confirmed again (not before, or a release in between would be missed too), every
            // waiter of the channel retries.
            it->second.wake_all_on_confirm = stats_.reconnects > 1;
            enqueue(true, it->first);
            ++it;
          }
        }
      }
      redisContext* context = connection->context.get();

      // Send what watch()/unwatch() queued, in order.
      {
        std::lock_guard<std::mutex> guard(mutex_);
        while (!outgoing_.empty()) {
          const Outgoing& out = outgoing_.front();
          const char* argv[2] = {out.subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE", out.channel.data()};
          const std::size_t lens[2] = {out.subscribe ? 9u : 11u, out.channel.size()};
          redisAppendCommandArgv(context, 2, argv, lens);
          sent.push_back(std::move(outgoing_.front()));
          outgoing_.pop_front();
        }
      }
      if (!write_all(context)) throw std::runtime_error(context->errstr);

      // Unsubscribe channels that have had no waiter for kLinger; sleep until the next one is due.
      int timeout_ms = 1000;
      {
        std::lock_guard<std::mutex> guard(mutex_);
        const auto now = std::chrono::steady_clock::now();
        for (auto& [name, ch] : channels_) {
          if (!ch.waiters.empty() || ch.state != State::subscribed) continue;
          const auto due = ch.idle_since + kLinger;
          if (due <= now) {
            ch.state = State::unsubscribing;
            enqueue(false, name);
            timeout_ms = 0;
          } else {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(due - now).count();
            timeout_ms = std::min(timeout_ms, static_cast<int>(left));
          }
        }
      }
      if (timeout_ms == 0) continue;  // send the UNSUBSCRIBEs first

      pollfd fds[2] = {{context->fd, POLLIN, 0}, {event_fd_, POLLIN, 0}};
      const int rc = ::poll(fds, 2, timeout_ms);
      if (rc < 0 && errno != EINTR) throw std::runtime_error("poll failed");
      if ((fds[1].revents & POLLIN) != 0) {
        std::uint64_t value = 0;
        [[maybe_unused]] const ssize_t n = ::read(event_fd_, &value, sizeof value);
      }
      if (fds[0].revents == 0) continue;
      if (redisBufferRead(context) == REDIS_ERR) throw std::runtime_error(context->errstr);
      for (;;) {
        void* raw = nullptr;
        if (redisGetReplyFromReader(context, &raw) == REDIS_ERR) {
          throw std::runtime_error(context->errstr);
        }
        if (raw == nullptr) break;
        ReplyPtr reply(static_cast<redisReply*>(raw));
        if (reply->type == REDIS_REPLY_ERROR) {
          // The answer to the oldest command without one (e.g. NOPERM from an ACL user without
          // channel permissions).
          if (!sent.empty() && sent.front().subscribe) refuse(text(reply.get()));
          if (!sent.empty()) sent.pop_front();
          continue;
        }
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3) continue;
        const std::string_view kind = text(reply->element[0]);
        if ((kind == "subscribe" || kind == "unsubscribe") && !sent.empty()) sent.pop_front();
        const std::string channel(text(reply->element[1]));
        std::lock_guard<std::mutex> guard(mutex_);
        auto it = channels_.find(channel);
        if (kind == "message") {
          ++stats_.messages;
          if (it == channels_.end()) continue;
          std::uint64_t seq = 0;
          std::uint64_t fence = 0;
          std::string_view named;  // SHA1 of the waiter's token
          if (parse_grant(text(reply->element[2]), seq, fence, named)) {
            // A hand-over is for one waiter only (possibly in another process): nobody else
            // here could take the lock, so nobody else is woken.
            for (WakeSlot* slot : it->second.waiters) {
              if (!slot->token_sha1().empty() && slot->token_sha1() == named)
                slot->grant(seq, fence);
            }
          } else {
            wake_one(it->second);
          }
        } else if (kind == "subscribe") {
          if (it == channels_.end()) continue;
          it->second.state = State::subscribed;
          if (it->second.waiters.empty()) it->second.idle_since = std::chrono::steady_clock::now();
          if (it->second.wake_all_on_confirm) {
            it->second.wake_all_on_confirm = false;
            for (WakeSlot* slot : it->second.waiters) slot->notify();
          }
          confirmed_.notify_all();
        } else if (kind == "unsubscribe") {
          if (it == channels_.end()) continue;
          if (it->second.waiters.empty()) {
            channels_.erase(it);
          } else {
            it->second.state = State::subscribing;
            enqueue(true, channel);
          }
        }
      }
    } catch (const std::exception& e) {
      logf(LogLevel::info, "redlock: subscriber connection to {} lost ({}); reconnecting",
           node_.address(), e.what());
      connection.reset();
      std::lock_guard<std::mutex> guard(mutex_);
      connected_ = false;
    } catch (...) {
      connection.reset();
      std::lock_guard<std::mutex> guard(mutex_);
      connected_ = false;
    }
  }
}

}  // namespace detail
}  // namespace redlock
