// src/backends/zookeeper/zk_backend.cpp: the lease backend (core/backend.hpp) over ZooKeeper's
// lock recipe, and the public Session and Lock. The lock layer runs it in fair mode: a waiter
// keeps one token (one znode) for its whole wait, and a waiter that gives up releases it.
#include <map>
#include <stdexcept>

#include <redlock/errors.hpp>
#include <redlock/zookeeper.hpp>

#include "backends/zookeeper/zk_backend.hpp"
#include "backends/zookeeper/zk_names.hpp"
#include "backends/zookeeper/zk_session.hpp"
#include "core/backend.hpp"
#include "core/engine.hpp"
#include "lock/lock_core.hpp"
#include "lock/rw_sides.hpp"

namespace redlock {
namespace detail {
namespace {

// A waiter that set a watch on its predecessor trusts it this long before looking again.
constexpr auto kRecheck = std::chrono::seconds(1);

// Wakes on any event of the session's watcher (a predecessor deleted, a state change); the
// attempt that follows looks at the queue again.
class ZkWatch final : public ReleaseWatch {
 public:
  explicit ZkWatch(std::shared_ptr<ZkSession> session)
      : session_(std::move(session)), seen_(session_->events()) {}
  bool wait_until(SteadyClock::time_point until) override {
    return session_->wait_events(&seen_, &woken_, until);
  }
  bool take_grant(std::uint64_t&, std::uint64_t&) noexcept override { return false; }
  void retoken(std::string) noexcept override {}
  void wake() noexcept override { session_->wake(&woken_); }
  ~ZkWatch() override {
    if (waker_) session_->remove_waker(waker_);
  }
  ZkWatch(const ZkWatch&) = delete;
  ZkWatch& operator=(const ZkWatch&) = delete;
  bool set_waker(Waker* waker) noexcept override {
    if (waker_) session_->remove_waker(waker_);
    waker_ = nullptr;
    if (!waker) return true;
    try {
      session_->add_waker(waker, seen_);  // seen_ is only the waiter's, and it is here
    } catch (...) {
      return false;  // out of memory: the driver looks again at its timer
    }
    waker_ = waker;
    return true;
  }

 private:
  Waker* waker_{nullptr};
  std::shared_ptr<ZkSession> session_;
  std::uint64_t seen_;  // guarded by the session's events mutex while waiting
  bool woken_{false};   // guarded by the session's events mutex
};

// One waiter's or holder's znode.
struct ZkNode {
  std::string name;  // empty: a create whose reply was lost (find it by token)
  std::shared_ptr<ZkConn> conn;
  std::int64_t czxid{0};
  bool armed{false};  // a watch is set on the predecessor
  std::uint64_t armed_events{0};
  SteadyClock::time_point checked{};
};

// What a znode waits for: a lock (or a ReadWriteLock's writer) to be first in the queue; a
// reader for no writer ahead of it (Curator's InterProcessReadWriteLock).
enum class ZkKind { lock, read };

class ZkLeaseBackend final : public LeaseBackend {
 public:
  ZkLeaseBackend(std::shared_ptr<ZkSession> session, std::string name, const LockOptions& options,
                 ZkKind kind = ZkKind::lock)
      : session_(std::move(session)),
        name_(std::move(name)),
        path_(session_->uri().chroot + "/" + name_),
        drift_(options.clock_drift_factor),
        kind_(kind) {}

  const std::string& key() const noexcept override { return name_; }
  std::size_t size() const noexcept override { return 1; }
  std::size_t quorum() const noexcept override { return 1; }
  std::chrono::milliseconds ttl() const noexcept override { return session_->timeout(); }
  bool fair() const noexcept override { return true; }

  AcquireResult acquire(const AcquireRequest& request) override {
    AcquireResult out;
    const std::string& token = *request.token;
    const auto start = SteadyClock::now();
    try {
      const auto conn = session_->conn();
      session_->sweep_orphans(*conn);
      if (request.queue == Queue::join && still_armed(token, *conn)) return out;
      out = look(token, conn, request.queue, start);
    } catch (const Error&) {
      out.failure = std::current_exception();
      if (request.queue == Queue::none) abandon(token);
    }
    return out;
  }

  AcquireResult handed_over(std::uint64_t, SteadyClock::time_point) const override { return {}; }

  ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl) override;

  SteadyClock::time_point extend_floor(SteadyClock::time_point start,
                                       std::chrono::milliseconds ttl) const noexcept override {
    const auto lease = std::min(ttl, session_->timeout());
    return start + std::chrono::nanoseconds(lease) - drift_of(lease, drift_);
  }

  // One group per session: its expiry hurries the renewal of every hold on it (note_expired).
  const void* batch_group() const noexcept override { return session_.get(); }

  std::size_t extend_many(RenewItem* items, std::size_t count) override {
    for (std::size_t i = 0; i < count; ++i) {
      items[i].result = items[i].backend->extend(*items[i].token, items[i].backend->ttl());
      // Not a refusal: a confirmation that came too late (the validity ran out meanwhile).
      items[i].refused = !items[i].result.held && !items[i].result.failure &&
                                 items[i].result.reason != LostReason::expired
                             ? 1
                             : 0;
    }
    return count;
  }

  ReleaseResult release(const std::string& token, Announce announce) override;

  bool watch_live() const noexcept override { return true; }
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point, std::string) override {
    return std::make_unique<ZkWatch>(session_);
  }

 private:
  AcquireResult look(const std::string& token, const std::shared_ptr<ZkConn>& conn, Queue queue,
                     SteadyClock::time_point start);
  AcquireResult grant(const std::string& token, SteadyClock::time_point start);
  std::size_t blocked_by(const std::vector<std::string>& order, std::size_t at) const;
  bool ensure_node(const std::string& token, const std::shared_ptr<ZkConn>& conn,
                   std::vector<std::string>* children);
  bool find_node(const std::string& token, ZkNode& node);
  bool create_node(const std::string& token, ZkNode& node, std::vector<std::string>* children);
  bool still_armed(const std::string& token, const ZkConn& conn);
  void arm(const std::string& token, std::uint64_t events);
  void forget(const std::string& token);
  void abandon(const std::string& token);
  std::string node_path(const std::string& name) const { return path_ + "/" + name; }

  const std::shared_ptr<ZkSession> session_;
  const std::string name_;
  const std::string path_;  // the lock's znode: <chroot>/<name>
  const double drift_;
  const ZkKind kind_;
  std::mutex mutex_;
  std::map<std::string, ZkNode> nodes_;  // by token; guarded by mutex_
};

bool ZkLeaseBackend::still_armed(const std::string& token, const ZkConn& conn) {
  const auto events = session_->events();
  std::lock_guard<std::mutex> guard(mutex_);
  const auto it = nodes_.find(token);
  return it != nodes_.end() && it->second.conn.get() == &conn && it->second.armed &&
         it->second.armed_events == events && SteadyClock::now() - it->second.checked < kRecheck;
}

void ZkLeaseBackend::arm(const std::string& token, std::uint64_t events) {
  std::lock_guard<std::mutex> guard(mutex_);
  const auto it = nodes_.find(token);
  if (it == nodes_.end()) return;
  it->second.armed = true;
  it->second.armed_events = events;
  it->second.checked = SteadyClock::now();
}

void ZkLeaseBackend::forget(const std::string& token) {
  std::lock_guard<std::mutex> guard(mutex_);
  nodes_.erase(token);
}

// An attempt that will not be followed up (try_lock) failed: its znode, if any, is deleted by
// the session's janitor once connected (or by the session's next operation).
void ZkLeaseBackend::abandon(const std::string& token) {
  forget(token);
  try {
    session_->add_orphan(path_, token);
  } catch (...) {  // bad_alloc: the znode lives until the session ends
  }
}

// The queue as the server has it: held if ours is first; else leave (try_lock) or watch the
// predecessor. Looks again if the predecessor is gone before its watch is set.
AcquireResult ZkLeaseBackend::look(const std::string& token, const std::shared_ptr<ZkConn>& conn,
                                   Queue queue, SteadyClock::time_point start) {
  AcquireResult out;
  const auto events = session_->events();
  std::vector<std::string> children;
  bool listed = ensure_node(token, conn, &children);
  for (;;) {
    if (!listed) zk_children(*conn, path_, &children);
    listed = false;
    const auto order = zk_queue_of(children);
    const auto at = zk_find_token(order, token);
    if (at == order.size()) {  // deleted by someone else: a new token (a new place) next time
      forget(token);
      out.left_queue = true;
      return out;
    }
    const std::size_t blocker = blocked_by(order, at);
    if (blocker == order.size()) return grant(token, start);
    if (queue == Queue::none) {
      forget(token);
      out.left_queue = true;
      zk_delete(*conn, node_path(order[at]));  // ZNONODE: gone already; a lost reply throws
      return out;
    }
    if (zk_exists(*conn, node_path(order[blocker]), true).rc == ZOK) {
      arm(token, events);
      return out;
    }
  }
}

// The znode that the one at `at` waits for (order.size(): none, it holds): a lock's predecessor;
// for a reader the last writer ahead of it, whatever readers come between.
std::size_t ZkLeaseBackend::blocked_by(const std::vector<std::string>& order,
                                       std::size_t at) const {
  if (kind_ == ZkKind::lock) return at == 0 ? order.size() : at - 1;
  for (std::size_t i = at; i > 0; --i) {
    if (!zk_is_read_node(order[i - 1])) return i - 1;
  }
  return order.size();
}

AcquireResult ZkLeaseBackend::grant(const std::string& token, SteadyClock::time_point start) {
  AcquireResult out;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    out.fence = static_cast<std::uint64_t>(nodes_[token].czxid);
  }
  out.valid_until = extend_floor(start, ttl());
  out.held = out.valid_until > SteadyClock::now();
  out.granted = out.held ? 1 : 0;
  if (!out.held) {  // too slow to be of use: give the place up
    release(token, Announce::waiters);
    out.left_queue = true;
  }
  return out;
}

// The token's znode on `conn`: known, found again by token (a create whose reply was lost),
// or created. Returns true if `children` was listed after the create (in the same round trip).
bool ZkLeaseBackend::ensure_node(const std::string& token, const std::shared_ptr<ZkConn>& conn,
                                 std::vector<std::string>* children) {
  bool uncertain = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    const auto it = nodes_.find(token);
    if (it != nodes_.end() && it->second.conn == conn) {
      if (!it->second.name.empty()) return false;
      uncertain = true;
    }
  }
  ZkNode node;
  node.conn = conn;
  bool listed = false;
  if (!uncertain || !find_node(token, node)) listed = create_node(token, node, children);
  std::lock_guard<std::mutex> guard(mutex_);
  nodes_[token] = node;
  return listed;
}

// Protected mode: looks for the token's znode among the lock's children.
bool ZkLeaseBackend::find_node(const std::string& token, ZkNode& node) {
  std::vector<std::string> children;
  if (zk_children(*node.conn, path_, &children) != ZOK) return false;
  const auto order = zk_queue_of(children);
  const auto at = zk_find_token(order, token);
  if (at == order.size()) return false;
  const auto stat = zk_exists(*node.conn, node_path(order[at]), false);
  if (stat.rc != ZOK) return false;
  node.name = order[at];
  node.czxid = stat.czxid;
  return true;
}

// Creates the token's znode and lists the queue behind it. Until the reply is in, the token's
// record has no name: if the reply is lost, the next attempt (or release) finds the znode by
// token. Returns true if `children` was listed.
bool ZkLeaseBackend::create_node(const std::string& token, ZkNode& node,
                                 std::vector<std::string>* children) {
  ZkConn& conn = *node.conn;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    nodes_[token] = node;
  }
  std::string created;
  for (int round = 0; round < 3; ++round) {
    const int rc = zk_create_and_list(
        conn, node_path(kind_ == ZkKind::read ? zk_read_prefix(token) : zk_node_prefix(token)),
        ZOO_EPHEMERAL_SEQUENTIAL, &created, &node.czxid, path_, children);
    if (rc != ZNONODE) {
      node.name = created.substr(path_.size() + 1);
      return rc == ZOK;
    }
    zk_ensure_path(conn, path_);  // ZNONODE: the lock's container is missing
  }
  throw ServerError(conn.describe("create under", path_) + ": the parent keeps vanishing",
                    "ZNONODE");
}

ExtendResult ZkLeaseBackend::extend(const std::string& token, std::chrono::milliseconds ttl) {
  ExtendResult out;
  const auto start = SteadyClock::now();
  ZkNode node;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    const auto it = nodes_.find(token);
    if (it == nodes_.end()) return out;  // refused
    node = it->second;
  }
  if (!session_->current(*node.conn)) {
    out.reason = LostReason::session_expired;
    return out;
  }
  try {
    if (!node.conn->connected()) {
      throw ConnectionError(node.conn->describe("confirm", path_) + ": disconnected");
    }
    // Bounded, so that a server that does not answer holds the watchdog up for at most a third
    // of the lease (the C client itself notices only after two thirds).
    const auto bound = start + std::chrono::nanoseconds(std::min(ttl, session_->timeout())) / 3;
    if (zk_exists_until(*node.conn, node_path(node.name), bound) == ZOK) {
      out.valid_until = extend_floor(start, ttl);
      out.held = out.valid_until > SteadyClock::now();
      out.confirmed = 1;
      out.reason = LostReason::expired;
    }
  } catch (const Error&) {
    if (node.conn->expired()) {
      out.reason = LostReason::session_expired;
    } else {
      out.failure = std::current_exception();
    }
  }
  return out;
}

ReleaseResult ZkLeaseBackend::release(const std::string& token, Announce /*announce*/) {
  ReleaseResult out;
  ZkNode node;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    const auto it = nodes_.find(token);
    if (it != nodes_.end()) {
      node = std::move(it->second);
      nodes_.erase(it);
    }
  }
  try {
    const auto conn = session_->conn();
    if (node.conn && node.conn != conn) {  // its session ended, and the znode with it
      out.refused = 1;
      out.quorum_kept = false;
      out.reason = LostReason::session_expired;
      return out;
    }
    const bool deleted = node.name.empty() ? delete_by_token(*conn, path_, token) > 0
                                           : zk_delete(*conn, node_path(node.name)) == ZOK;
    out.released = deleted ? 1 : 0;
    out.refused = deleted ? 0 : 1;
    out.quorum_kept = deleted;
  } catch (const Error&) {
    out.failure = std::current_exception();
    abandon(token);
  }
  return out;
}

// A lock name is a relative znode path.
void check_zk_name(const std::string& name) {
  if (name.empty()) throw std::invalid_argument("redlock: zookeeper::Lock: name must not be empty");
  const auto bad = [&](const char* why) {
    throw std::invalid_argument("redlock: zookeeper::Lock: name '" + name + "' " + why);
  };
  if (name.find('\0') != std::string::npos) bad("contains NUL");
  if (name.front() == '/' || name.back() == '/') bad("must not start or end with '/'");
  std::size_t start = 0;
  for (;;) {
    const auto slash = name.find('/', start);
    const auto part = name.substr(start, slash == std::string::npos ? slash : slash - start);
    if (part.empty() || part == "." || part == "..") bad("has an empty, '.' or '..' part");
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
}

}  // namespace

// The options a ZooKeeper lock runs with (checked): the session's timeout as ttl, renewal (the
// hold is confirmed every session_timeout/3) by the session's watchdog, fair (the lock layer
// keeps one znode per waiter for its whole wait).
LockOptions zk_options(const std::shared_ptr<ZkSession>& session, const std::string& name,
                       LockOptions options) {
  check_zk_name(name);
  options.ttl = session->uri().session_timeout;
  options.auto_renew = true;
  if (!options.watchdog) options.watchdog = session->watchdog();
  session->track(options.watchdog);
  options.fair = true;
  validate_lock_options(name, options);
  return options;
}

std::shared_ptr<LeaseBackend> make_zk_backend(const std::shared_ptr<ZkSession>& session,
                                              std::string name, LockOptions& options) {
  options = zk_options(session, name, std::move(options));
  return std::make_shared<ZkLeaseBackend>(session, std::move(name), options);
}

}  // namespace detail

namespace zookeeper {

Session::Session(std::string_view uri) : impl_(std::make_shared<detail::ZkSession>(uri)) {}
Session::~Session() = default;

std::chrono::milliseconds Session::session_timeout() const noexcept { return impl_->timeout(); }
bool Session::connected() const noexcept { return impl_->connected(); }

namespace {
std::shared_ptr<detail::LockCore> make_core(const std::shared_ptr<detail::ZkSession>& session,
                                            std::string name, LockOptions options) {
  auto backend = detail::make_zk_backend(session, std::move(name), options);
  return std::make_shared<detail::LockCore>(std::move(backend), std::move(options));
}

std::unique_ptr<detail::RwSides> make_sides(const std::shared_ptr<detail::ZkSession>& session,
                                            const std::string& name, LockOptions options) {
  options = detail::zk_options(session, name, std::move(options));
  return std::make_unique<detail::RwSides>(
      std::make_shared<detail::ZkLeaseBackend>(session, name, options, detail::ZkKind::lock),
      std::make_shared<detail::ZkLeaseBackend>(session, name, options, detail::ZkKind::read),
      options);
}
}  // namespace

Lock::Lock(Session& session, std::string name, LockOptions options)
    : LockBase(make_core(session.impl_, std::move(name), std::move(options))) {}

ReadWriteLock::ReadWriteLock(Session& session, std::string name, LockOptions options)
    : redlock::ReadWriteLock(make_sides(session.impl_, name, std::move(options))) {}

}  // namespace zookeeper
}  // namespace redlock
