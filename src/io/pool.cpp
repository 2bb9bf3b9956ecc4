// src/io/pool.cpp: ClientImpl: the idle connection pool, connecting, and the node's health.
#include "io/pool.hpp"

#include <poll.h>

#include <algorithm>
#include <utility>

#include "io/tls.hpp"
#include "util/log_internal.hpp"
#include "util/token.hpp"
#include "watch/subscriber.hpp"

namespace redlock {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxIdle = 16;

}  // namespace

ClientImpl::ClientImpl(Endpoint endpoint)
    : endpoint_(std::move(endpoint)), waiter_id_(make_token().substr(0, 16)) {
  address_ = endpoint_.address();
  build_handshake();
}

ClientImpl::~ClientImpl() = default;

void ClientImpl::build_handshake() {
  // AUTH [user] pass, then SELECT db: pipelined in front of a new connection's first batch.
  // A username without a password still authenticates (AUTH user ""): the server decides (a
  // nopass user accepts it, any other answers WRONGPASS), and the connection never runs as
  // `default` unnoticed.
  std::vector<std::vector<std::string>> commands;
  if (!endpoint_.username.empty()) {
    commands.push_back({"AUTH", endpoint_.username, endpoint_.password});
  } else if (!endpoint_.password.empty()) {
    commands.push_back({"AUTH", endpoint_.password});
  }
  if (endpoint_.database != 0) commands.push_back({"SELECT", std::to_string(endpoint_.database)});
  std::size_t total = 0;
  for (auto& c : commands) total += c.size();
  handshake_args_.reserve(total);  // views below point into it: no reallocation after this
  for (auto& c : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (auto& a : c) {
      handshake_args_.push_back(std::move(a));
      argv.push_back(handshake_args_.back().data());
      lens.push_back(handshake_args_.back().size());
    }
    handshake_argv_.push_back(std::move(argv));
    handshake_lens_.push_back(std::move(lens));
  }
  for (std::size_t i = 0; i < handshake_argv_.size(); ++i) {
    handshake_.push_back(CommandView{static_cast<int>(handshake_argv_[i].size()),
                                     handshake_argv_[i].data(), handshake_lens_[i].data(),
                                     nullptr});
  }
}

std::unique_ptr<Connection> ClientImpl::checkout() {
  if (auto connection = take_idle()) return connection;
  Dial dialing = dial();
  if (!await(dialing.fd(), POLLOUT, Clock::now() + endpoint_.connect_timeout))
    std::rethrow_exception(accept_timeout(address_, endpoint_.connect_timeout));
  return adopt(dialing);
}

std::unique_ptr<Connection> ClientImpl::take_idle() noexcept {
  for (;;) {
    std::unique_ptr<Connection> connection;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (idle_.empty()) return nullptr;
      connection = std::move(idle_.back());
      idle_.pop_back();
    }
    // An idle connection has nothing to read unless the server closed it (restart, CLIENT KILL,
    // idle timeout): such a one is dropped before anything is sent on it.
    if (!connection->transport.readable_now()) {
      connection->reused = true;
      return connection;
    }
    logf(LogLevel::debug, "redlock: pooled connection to {} was closed by the server", address_);
  }
}

Dial ClientImpl::dial() const { return start_dial(endpoint_, address_); }

std::unique_ptr<Connection> ClientImpl::adopt(Dial& dial) const {
  Transport transport = finish_dial(dial, address_);
  transport.secure(make_secure_layer(endpoint_, address_));  // TLS: handshake in the poll loop
  logf(LogLevel::debug, "redlock: connected to {}", address_);
  auto connection = std::make_unique<Connection>(endpoint_.reply_limits);
  connection->transport = std::move(transport);
  connection->transport.allow_waiting(endpoint_.command_timeout);  // a failure costs a poll
  connection->timeout = endpoint_.command_timeout;
  connection->authenticated = handshake_.empty();
  return connection;
}

void ClientImpl::checkin(std::unique_ptr<Connection> connection) noexcept {
  if (!connection || !connection->transport) return;
  std::lock_guard<std::mutex> guard(mutex_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(connection));
}

void ClientImpl::clear_idle() noexcept {
  std::vector<std::unique_ptr<Connection>> stale;
  std::lock_guard<std::mutex> guard(mutex_);
  stale.swap(idle_);
}

std::size_t ClientImpl::idle() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return idle_.size();
}

void ClientImpl::note_health(bool reachable, std::string_view why) noexcept {
  if (reachable) {
    if (down_.exchange(false, std::memory_order_relaxed)) {
      logf(LogLevel::info, "redlock: {} answers again", address_);
    }
  } else if (!down_.exchange(true, std::memory_order_relaxed)) {
    logf(LogLevel::warn, "redlock: {} is unreachable ({}); further failures are logged at debug",
         address_, why);
  } else {
    logf(LogLevel::debug, "redlock: {} still unreachable ({})", address_, why);
  }
}

void ClientImpl::note_timeout() noexcept {
  const std::int64_t previous = backoff_ms_.load(std::memory_order_relaxed);
  const std::int64_t backoff = previous == 0 ? 250 : std::min<std::int64_t>(previous * 2, 5000);
  backoff_ms_.store(backoff, std::memory_order_relaxed);
  const auto until = Clock::now() + std::chrono::milliseconds(backoff);
  skip_until_ns_.store(until.time_since_epoch().count(), std::memory_order_relaxed);
}

void ClientImpl::note_abandoned() noexcept {
  constexpr int kAbandonsForBackoff = 3;
  // A probe that is cut again goes straight back into (a longer) back-off.
  if (suspect() ||
      abandoned_in_a_row_.fetch_add(1, std::memory_order_relaxed) + 1 >= kAbandonsForBackoff) {
    abandoned_in_a_row_.store(0, std::memory_order_relaxed);
    note_timeout();
    logf(LogLevel::debug,
         "redlock: {} answers far slower than the other nodes; acquires skip it for {} ms",
         address_, backoff_ms_.load(std::memory_order_relaxed));
  }
}

void ClientImpl::note_answer() noexcept {
  abandoned_in_a_row_.store(0, std::memory_order_relaxed);
  if (backoff_ms_.load(std::memory_order_relaxed) != 0) {
    backoff_ms_.store(0, std::memory_order_relaxed);
    skip_until_ns_.store(0, std::memory_order_relaxed);
  }
}

bool ClientImpl::skip(Clock::time_point now) noexcept {
  std::int64_t until = skip_until_ns_.load(std::memory_order_relaxed);
  const std::int64_t now_ns = now.time_since_epoch().count();
  if (until == 0) return false;
  if (now_ns < until) return true;
  // The back-off is over: one caller probes; the others skip until the probe has had its time.
  const auto probe = std::chrono::duration_cast<Clock::duration>(endpoint_.connect_timeout +
                                                                 endpoint_.command_timeout);
  return !skip_until_ns_.compare_exchange_strong(until, now_ns + probe.count(),
                                                 std::memory_order_relaxed);
}

Subscriber& ClientImpl::subscriber() {
  std::call_once(subscriber_once_, [this] {
    SubscriberLink link{address_, [this] { return connect_ready(); },
                        [this](std::string_view why) { note_health(false, why); }};
    subscriber_ = std::make_unique<Subscriber>(std::move(link));
    started_subscriber_.store(subscriber_.get(), std::memory_order_release);
  });
  return *subscriber_;
}

}  // namespace detail
}  // namespace redlock
