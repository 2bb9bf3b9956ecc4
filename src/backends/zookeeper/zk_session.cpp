// src/backends/zookeeper/zk_session.cpp: the session, its handle and the plain zoo_* calls.
#include "backends/zookeeper/zk_session.hpp"

#include "core/backend.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include <redlock/errors.hpp>

#include "api/access.hpp"
#include "backends/zookeeper/zk_names.hpp"
#include "util/log_internal.hpp"
#include "watch/watchdog_impl.hpp"

namespace redlock {
namespace detail {
namespace {

// The C client logs to stderr at INFO by default, and an error line per reconnect attempt:
// its warnings and errors go to redlock's log handler at debug level instead.
void quiet_client_log() {
  static std::once_flag once;
  std::call_once(once, [] { zoo_set_debug_level(ZOO_LOG_LEVEL_WARN); });
}

void client_log(const char* message) {
  logf(LogLevel::debug, "redlock: zookeeper client: {}", message);
}

// Runs on the C client's completion thread: counts the event, never calls the client back.
void on_watch(zhandle_t* zh, int type, int state, const char* /*path*/, void* context) {
  auto* conn = static_cast<ZkConn*>(context);
  if (type == ZOO_SESSION_EVENT) conn->on_state(zh, state);
  conn->session().note_event();
}

}  // namespace

ZkConn::ZkConn(ZkSession& session, const ZkUri& uri) : session_(session) {
  quiet_client_log();
  zh_ = zookeeper_init2(uri.hosts.c_str(), on_watch, static_cast<int>(uri.session_timeout.count()),
                        nullptr, this, 0, client_log);
  if (zh_ == nullptr) {
    throw ConnectionError("redlock: zookeeper " + uri.hosts +
                          ": cannot start a client: " + std::strerror(errno));
  }
  zoo_set_servers_resolution_delay(zh_, kZkResolveDelayMs);  // ZOK for any delay >= -1
}

ZkConn::~ZkConn() {
  if (zh_ != nullptr) zookeeper_close(zh_);
}

void ZkConn::on_state(zhandle_t* zh, int state) noexcept {
  if (state == ZOO_CONNECTED_STATE) {
    session_.set_timeout(std::chrono::milliseconds(zoo_recv_timeout(zh)));
    ever_connected_.store(true, std::memory_order_release);
    connected_.store(true, std::memory_order_release);
  } else {
    connected_.store(false, std::memory_order_release);
    if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
      expired_.store(true, std::memory_order_release);
      session_.note_expired();
    }
  }
}

std::string ZkConn::describe(const char* op, const std::string& path) const {
  return std::string("redlock: zookeeper ") + session_.uri().hosts + ": " + op + " " + path;
}

ZkSession::~ZkSession() {
  {
    std::lock_guard<std::mutex> guard(events_mutex_);
    stopping_ = true;
  }
  events_cv_.notify_all();
  std::thread janitor;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    janitor.swap(janitor_);
  }
  if (janitor.joinable()) janitor.join();
}

// Deletes orphans while any are left, each time the session is connected; then ends.
void ZkSession::janitor() noexcept {
  for (;;) {
    std::uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> guard(events_mutex_);
      if (stopping_) return;
      seen = events_;
    }
    try {
      sweep_orphans(*conn());
    } catch (...) {  // not connected now: try again after the next event
    }
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (orphans_.empty()) {
        janitor_on_ = false;
        return;
      }
    }
    std::unique_lock<std::mutex> lock(events_mutex_);
    events_cv_.wait_for(lock, std::chrono::milliseconds(500),
                        [&] { return stopping_ || events_ != seen; });
  }
}

bool ZkSession::connected() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return conn_ && conn_->connected() && !conn_->expired();
}

std::shared_ptr<ZkConn> ZkSession::conn() {
  std::shared_ptr<ZkConn> old;  // closed outside the lock
  std::shared_ptr<ZkConn> c;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (conn_ && conn_->expired()) {
      old = std::move(conn_);
      orphans_.clear();  // ephemeral: gone with the session
      has_orphans_.store(false, std::memory_order_release);
    }
    if (!conn_) conn_ = std::make_shared<ZkConn>(*this, uri_);
    c = conn_;
  }
  old.reset();
  if (c->connected()) return c;
  if (!c->ever_connected()) {
    const auto until = SteadyClock::now() + timeout();
    std::unique_lock<std::mutex> lock(events_mutex_);
    events_cv_.wait_until(lock, until, [&] { return c->connected() || c->expired() || stopping_; });
  }
  if (c->connected()) return c;
  throw ConnectionError("redlock: zookeeper " + uri_.hosts + ": not connected (" +
                        (c->ever_connected() ? std::string("reconnecting")
                                             : "no server answered within " +
                                                   std::to_string(timeout().count()) + " ms") +
                        ")");
}

std::shared_ptr<Watchdog> ZkSession::watchdog() {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!watchdog_) watchdog_ = std::make_shared<Watchdog>();
  return watchdog_;
}

void ZkSession::track(const std::shared_ptr<Watchdog>& watchdog) {
  std::lock_guard<std::mutex> guard(tracked_mutex_);
  tracked_.erase(std::remove_if(tracked_.begin(), tracked_.end(),
                                [](const std::weak_ptr<Watchdog>& w) { return w.expired(); }),
                 tracked_.end());
  for (const auto& known : tracked_) {
    if (known.lock() == watchdog) return;
  }
  tracked_.push_back(watchdog);
}

void ZkSession::note_expired() noexcept {
  std::vector<std::shared_ptr<Watchdog>> watchdogs;
  try {
    std::lock_guard<std::mutex> guard(tracked_mutex_);
    for (const auto& weak : tracked_) {
      if (auto watchdog = weak.lock()) watchdogs.push_back(std::move(watchdog));
    }
  } catch (...) {  // no memory: each hold learns it at its next confirmation
  }
  for (const auto& watchdog : watchdogs) Access::watchdog(*watchdog).hurry(this);
}

bool ZkSession::current(const ZkConn& conn) const {
  std::lock_guard<std::mutex> guard(mutex_);
  return conn_.get() == &conn && !conn.expired();
}

std::uint64_t ZkSession::events() const {
  std::lock_guard<std::mutex> guard(events_mutex_);
  return events_;
}

bool ZkSession::wait_events(std::uint64_t* seen, bool* woken, SteadyClock::time_point until) {
  std::unique_lock<std::mutex> lock(events_mutex_);
  const bool got = events_cv_.wait_until(lock, until, [&] { return events_ != *seen || *woken; });
  *seen = events_;
  *woken = false;
  return got;
}

void ZkSession::wake(bool* woken) noexcept {
  {
    std::lock_guard<std::mutex> guard(events_mutex_);
    *woken = true;
    for (Waker* waker : wakers_) waker->wake_up();
  }
  events_cv_.notify_all();
}

void ZkSession::note_event() noexcept {
  {
    std::lock_guard<std::mutex> guard(events_mutex_);
    ++events_;
    for (Waker* waker : wakers_) waker->wake_up();
  }
  events_cv_.notify_all();
}

void ZkSession::add_waker(Waker* waker, std::uint64_t seen) {
  std::lock_guard<std::mutex> guard(events_mutex_);
  wakers_.push_back(waker);
  if (events_ != seen) waker->wake_up();
}

void ZkSession::remove_waker(Waker* waker) noexcept {
  std::lock_guard<std::mutex> guard(events_mutex_);
  wakers_.erase(std::remove(wakers_.begin(), wakers_.end(), waker), wakers_.end());
}

void ZkSession::add_orphan(std::string parent, std::string token) {
  std::lock_guard<std::mutex> guard(mutex_);
  orphans_.push_back(Orphan{std::move(parent), std::move(token)});
  has_orphans_.store(true, std::memory_order_release);
  if (janitor_on_) return;
  if (janitor_.joinable()) janitor_.join();  // it ended (janitor_on_ false): returns at once
  janitor_ = std::thread([this] { janitor(); });
  janitor_on_ = true;
}

void ZkSession::sweep_orphans(ZkConn& conn) noexcept {
  if (!has_orphans_.load(std::memory_order_acquire)) return;
  std::vector<Orphan> todo;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    todo.swap(orphans_);
    has_orphans_.store(false, std::memory_order_release);
  }
  std::vector<Orphan> kept;
  for (auto& orphan : todo) {
    try {
      delete_by_token(conn, orphan.parent, orphan.token);
    } catch (const std::exception& e) {
      logf(LogLevel::debug, "redlock: zookeeper: orphan of {} not deleted yet: {}", orphan.parent,
           e.what());
      kept.push_back(std::move(orphan));
    }
  }
  if (kept.empty()) return;
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto& orphan : kept) orphans_.push_back(std::move(orphan));
  has_orphans_.store(true, std::memory_order_release);
}

}  // namespace detail
}  // namespace redlock
