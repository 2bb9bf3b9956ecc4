// src/io/pool.cpp: ClientImpl: the idle connection pool, connecting, and the node's health.
#include "io/pool.hpp"

#include <algorithm>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "io/cluster.hpp"
#include "io/sentinel.hpp"
#include "io/tls.hpp"
#include "util/key_slot.hpp"
#include "util/log_internal.hpp"
#include "util/shared_registry.hpp"
#include "util/token.hpp"
#include "watch/subscriber.hpp"

namespace redlock {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

struct ClientImpl::Slots {
  explicit Slots(std::size_t bound) : max(bound) {}
  struct Waiter {
    std::condition_variable cv;
    bool turn{false};
  };
  // The first waiter may go (a connection was checked in, or one closed). mutex held.
  void next() noexcept {
    moved = Clock::now();
    if (waiters.empty()) return;
    Waiter* first = waiters.front();
    waiters.pop_front();
    first->turn = true;
    first->cv.notify_one();
  }
  // A connection holding a slot closed.
  void release() noexcept {
    std::lock_guard<std::mutex> guard(mutex);
    --open;
    next();
  }

  std::mutex mutex;
  std::vector<std::unique_ptr<Connection>> idle;  // guarded by mutex; most recent last
  std::size_t open{0};                            // guarded by mutex: connections with a slot
  const std::size_t max;
  std::deque<Waiter*> waiters;            // guarded by mutex: in arrival order
  Clock::time_point moved{Clock::now()};  // guarded by mutex: a connection last came back
};

ClientImpl::ClientImpl(Endpoint endpoint, PubSub pubsub)
    : endpoint_(std::move(endpoint)),
      waiter_id_(make_token().substr(0, 16)),
      slots_(std::make_shared<Slots>(endpoint_.max_connections)),
      pubsub_(endpoint_.cluster.seeds.empty() ? pubsub : PubSub::sharded) {
  address_ = endpoint_.address();
  build_handshake();
  if (endpoint_.wait_replicas > 0) {
    wait_args_[0] = "WAIT";
    wait_args_[1] = std::to_string(endpoint_.wait_replicas);
    wait_args_[2] = std::to_string(endpoint_.wait_timeout.count());
    for (int i = 0; i < 3; ++i) {
      wait_argv_[i] = wait_args_[i].data();
      wait_lens_[i] = wait_args_[i].size();
    }
    wait_ = CommandView{3, wait_argv_, wait_lens_};
  }
  if (!endpoint_.sentinel.service.empty()) locator_ = shared_locator(endpoint_);
  if (!endpoint_.cluster.seeds.empty()) router_ = shared_router(endpoint_);
}

ClientImpl::~ClientImpl() { clear_idle(); }  // their slots refer to slots_

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

std::shared_ptr<void> ClientImpl::take_slot(Slots& slots) {
  ++slots.open;
  try {
    return std::shared_ptr<void>(&slots, [keep = slots_](void*) { keep->release(); });
  } catch (...) {
    --slots.open;
    throw;
  }
}

// Idle connections go to the callers in arrival order: none is taken past a waiting caller.
std::unique_ptr<Connection> ClientImpl::obtain(Clock::duration patience,
                                               std::shared_ptr<void>& slot, Probe probe) {
  Slots& slots = *slots_;
  for (;;) {
    std::unique_ptr<Connection> connection;
    {
      std::unique_lock<std::mutex> lock(slots.mutex);
      if (!slots.waiters.empty() || (slots.idle.empty() && slots.open >= slots.max)) {
        wait_turn(lock, patience);
      }
      if (slots.idle.empty()) {
        if (slots.open >= slots.max) continue;  // taken by a caller that came meanwhile
        slot = take_slot(slots);
        return nullptr;
      }
      connection = std::move(slots.idle.back());
      slots.idle.pop_back();
    }
    if (fresh(*connection, probe)) return connection;
  }
}

// Waits in line until this caller's turn; gives up only when no connection has come back for
// `patience` (a long line that moves is waited out: a burst never becomes an error).
void ClientImpl::wait_turn(std::unique_lock<std::mutex>& lock, Clock::duration patience) {
  Slots& slots = *slots_;
  Slots::Waiter me;
  slots.waiters.push_back(&me);
  for (;;) {
    const auto moved = slots.moved;
    if (me.cv.wait_until(lock, moved + patience, [&] { return me.turn; })) return;
    if (slots.moved != moved) continue;  // the line moved meanwhile: keep waiting
    slots.waiters.erase(std::find(slots.waiters.begin(), slots.waiters.end(), &me));
    std::rethrow_exception(busy_error(patience));
  }
}

std::exception_ptr ClientImpl::busy_error(Clock::duration waited) const {
  return std::make_exception_ptr(TimeoutError(
      fmt::format("redlock: all {} connections to {} stayed busy for {} ms (a slow server, or "
                  "Endpoint::max_connections too small for the load)",
                  slots_->max, address_,
                  std::chrono::duration_cast<std::chrono::milliseconds>(waited).count())));
}

bool ClientImpl::try_obtain(std::unique_ptr<Connection>& connection, std::shared_ptr<void>& slot,
                            Probe probe) {
  Slots& slots = *slots_;
  for (;;) {
    {
      std::lock_guard<std::mutex> guard(slots.mutex);
      if (!slots.waiters.empty()) return false;  // they came first
      if (slots.idle.empty()) {
        if (slots.open >= slots.max) return false;
        slot = take_slot(slots);
        return true;
      }
      connection = std::move(slots.idle.back());
      slots.idle.pop_back();
    }
    if (fresh(*connection, probe)) return true;
    connection.reset();  // closed by the server: its slot is given back
  }
}

bool ClientImpl::fresh(Connection& connection, Probe probe) const noexcept {
  if (!current(connection)) return false;  // to a former master
  // An idle connection has nothing to read unless the server closed it (restart, CLIENT KILL,
  // idle timeout): such a one is dropped (by the caller) before anything is sent on it.
  const bool closed =
      probe == Probe::first ? connection.transport.readable_now() : connection.transport.buffered();
  if (!closed) {
    connection.reused = true;
    return true;
  }
  logf(LogLevel::debug, "redlock: pooled connection to {} was closed by the server", address_);
  return false;
}

Dial ClientImpl::dial() const {
  if (router_) {  // a connection of the cluster endpoint's own (not a slot's): to some master
    const ClientImpl* const master = router_->any_master();
    Dial dial = master->dial();
    dial.target = std::make_shared<const Endpoint>(master->endpoint());
    return dial;
  }
  if (!locator_) return start_dial(endpoint_, address_);
  MasterLocator::Answer master = locator_->master();
  Dial dial = start_dial(*master.endpoint, address_ + " at " + master.endpoint->address());
  dial.target = std::move(master.endpoint);
  dial.epoch = master.epoch;
  return dial;
}

bool ClientImpl::master_moved(std::string_view error) noexcept {
  if (!locator_ || !says_not_master(error)) return false;
  locator_->stale(error);
  clear_idle();
  return true;
}

bool ClientImpl::current(const Connection& connection) const noexcept {
  return !locator_ || connection.epoch == locator_->epoch();
}

std::shared_ptr<void> ClientImpl::follow_master(std::function<void()> news) {
  return locator_ ? locator_->follow(std::move(news)) : nullptr;
}

std::unique_ptr<Connection> ClientImpl::adopt(Dial& dial) const {
  Transport transport = finish_dial(dial, address_);
  const Endpoint& target = dial.target ? *dial.target : endpoint_;
  transport.secure(make_secure_layer(target, address_));  // TLS: handshake in the poll loop
  logf(LogLevel::debug, "redlock: connected to {}", address_);
  auto connection = std::make_unique<Connection>(endpoint_.reply_limits);
  connection->transport = std::move(transport);
  // Plain sockets wait briefly (a fan-out's lead wait, see kWaitingRead); a failure costs a poll.
  const auto limit = connection->transport.secured()
                         ? endpoint_.command_timeout
                         : std::min(endpoint_.command_timeout, kWaitingRead);
  connection->transport.allow_waiting(limit);
  connection->timeout = endpoint_.command_timeout;
  connection->authenticated = handshake_.empty();
  connection->epoch = dial.epoch;
  return connection;
}

void ClientImpl::checkin(std::unique_ptr<Connection> connection) noexcept {
  if (!connection || !connection->transport) return;
  if (!connection->pool_slot) return;  // one beyond the bound (a fan-out's): closed, not pooled
  std::lock_guard<std::mutex> guard(slots_->mutex);
  try {
    slots_->idle.push_back(std::move(connection));
  } catch (...) {
    return;  // out of memory: `connection` is closed on return, after the guard is released
  }
  slots_->next();
}

void ClientImpl::clear_idle() noexcept {
  std::vector<std::unique_ptr<Connection>> stale;  // closed after the guard is released
  std::lock_guard<std::mutex> guard(slots_->mutex);
  stale.swap(slots_->idle);
}

std::size_t ClientImpl::idle() const {
  std::lock_guard<std::mutex> guard(slots_->mutex);
  return slots_->idle.size();
}

std::size_t ClientImpl::open_connections() const {
  std::lock_guard<std::mutex> guard(slots_->mutex);
  return slots_->open;
}

void ClientImpl::observe(NodeHealth health, std::string_view why) const noexcept {
  if (Observer* const observer = redlock::observer()) {
    observer->on_node(NodeEvent{address_, health, why});
  }
}

void ClientImpl::note_health(bool reachable, std::string_view why) noexcept {
  if (!reachable && locator_) locator_->stale(why);  // the master may have moved: ask again
  if (!reachable && router_) router_->stale();       // a failover may have moved slots
  if (reachable) {
    if (down_.exchange(false, std::memory_order_relaxed)) {
      logf(LogLevel::info, "redlock: {} answers again", address_);
      observe(NodeHealth::reachable, {});
    }
  } else if (!down_.exchange(true, std::memory_order_relaxed)) {
    logf(LogLevel::warn, "redlock: {} is unreachable ({}); further failures are logged at debug",
         address_, why);
    observe(NodeHealth::unreachable, why);
  } else {
    logf(LogLevel::debug, "redlock: {} still unreachable ({})", address_, why);
  }
}

void ClientImpl::note_timeout() noexcept {
  const std::int64_t previous = backoff_ms_.load(std::memory_order_relaxed);
  const std::int64_t backoff = previous == 0 ? 250 : std::min<std::int64_t>(previous * 2, 1000);
  backoff_ms_.store(backoff, std::memory_order_relaxed);
  const auto until = Clock::now() + std::chrono::milliseconds(backoff);
  skip_until_ns_.store(until.time_since_epoch().count(), std::memory_order_relaxed);
  if (previous == 0) observe(NodeHealth::slow, "timed out; acquires skip it for a back-off");
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
  if (backoff_ms_.load(std::memory_order_relaxed) != 0 &&
      backoff_ms_.exchange(0, std::memory_order_relaxed) != 0) {
    skip_until_ns_.store(0, std::memory_order_relaxed);
    if (!down_.load(std::memory_order_relaxed)) observe(NodeHealth::reachable, {});
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

namespace {}  // namespace

std::string settings_key(const Endpoint& e) {
  const TlsOptions& t = e.tls;
  std::string key =
      fmt::format("{}|{}|{}|{}:{}|{}:{}|{}|{}|{}|{}:{}|{}:{}|{}:{}|{}:{}|{}:{}|{}|{}|{}|{}|{}",
                  e.host, e.port, e.unix_socket, e.username.size(), e.username, e.password.size(),
                  e.password, e.connect_timeout.count(), e.command_timeout.count(), t.enabled,
                  t.ca_file.size(), t.ca_file, t.ca_dir.size(), t.ca_dir, t.cert_file.size(),
                  t.cert_file, t.key_file.size(), t.key_file, t.server_name.size(), t.server_name,
                  t.verify, e.reply_limits.max_bulk_bytes, e.reply_limits.max_elements,
                  e.reply_limits.max_reply_elements, e.reply_limits.max_reply_bytes);
  for (const Endpoint& s : e.cluster.seeds) key += "|cluster:" + s.address();
  if (e.sentinel.service.empty()) return key;
  key += fmt::format("|sentinel:{}:{}", e.sentinel.service.size(), e.sentinel.service);
  for (const Endpoint& s : e.sentinel.sentinels) key += "|{" + settings_key(s) + "}";
  return key;
}

std::shared_ptr<Subscriber> shared_subscriber(const Endpoint& endpoint, PubSub pubsub) {
  static auto& registry = *new SharedRegistry<Subscriber>;  // never destroyed
  // Subscriptions of one server reached the same way as the same user can share a connection:
  // pub/sub channels are global, so the database does not matter.
  const bool sharded = pubsub == PubSub::sharded;
  return registry.get(settings_key(endpoint) + (sharded ? "|sharded" : ""), [&endpoint, pubsub] {
    // Its own pool, only to connect: no Client's lifetime holds the shared subscriber up.
    auto dialer = std::make_shared<ClientImpl>(endpoint, pubsub);
    SubscriberLink link{
        dialer->address(),
        [dialer] { return dialer->connect_ready(); },
        [dialer](std::string_view why) { dialer->note_health(false, why); },
        pubsub,
        [dialer](const Connection& connection) { return dialer->current(connection); },
        [dialer](std::function<void()> news) { return dialer->follow_master(std::move(news)); }};
    return std::make_shared<Subscriber>(std::move(link));
  });
}

Subscriber& ClientImpl::subscriber() {
  std::call_once(subscriber_once_, [this] {
    subscriber_ = shared_subscriber(endpoint_, pubsub_);
    started_subscriber_.store(subscriber_.get(), std::memory_order_release);
  });
  return *subscriber_;
}

Subscriber& ClientImpl::subscriber(const std::string& channel) {
  if (!router_) return subscriber();
  return router_->owner(key_slot(channel))->subscriber();
}

Subscriber* ClientImpl::started_subscriber(const std::string& channel) const noexcept {
  if (!router_) return started_subscriber();
  const ClientImpl* const owner = router_->known_owner(key_slot(channel));
  return owner != nullptr ? owner->started_subscriber() : nullptr;
}

void ClientImpl::subscription_moved() noexcept {
  if (router_) router_->stale();
}

}  // namespace detail
}  // namespace redlock
