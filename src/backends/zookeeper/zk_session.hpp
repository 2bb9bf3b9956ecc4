// src/backends/zookeeper/zk_session.hpp: one ZooKeeper session for the zookeeper component:
// the parsed URI, the C client's handle (ZkConn, replaced when its session expires), the
// events its watcher counts (waiters wake on them), and the znodes left to delete (orphans).
//
// Threads: the C client's multithreaded library runs its own I/O and completion threads; our
// watcher runs on the completion thread and only counts events under events_mutex_ (it never
// calls the client). Blocking zoo_* calls are made from callers' threads only.
#ifndef REDLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_SESSION_HPP
#define REDLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_SESSION_HPP

#include <zookeeper/zookeeper.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <redlock/watchdog.hpp>

#include "core/quorum.hpp"

namespace redlock {
namespace detail {

class Waker;

// What a zookeeper:// URI says.
struct ZkUri {
  std::string hosts;   // "host:port,host:port" as the C client takes it
  std::string chroot;  // "" or "/a/b": prefixes every lock's path
  std::chrono::milliseconds session_timeout{10'000};
};
// Throws std::invalid_argument naming what is wrong.
ZkUri parse_zk_uri(std::string_view uri);

class ZkSession;

// The C client resolves its host list by default (getaddrinfo with a netlink query, and a read of
// /dev/urandom to shuffle the list) each time its I/O thread polls the socket: several times per
// request, a fifth of its CPU on an uncontended lock. Each handle resolves at most once in this
// window (milliseconds) while connected, and always when it connects again, so a changed address
// is still seen. The benchmark's raw floor uses it too.
constexpr int kZkResolveDelayMs = 1000;

// One client handle: one session. Closed (zookeeper_close) when the last reference goes, which
// is never on the client's own threads.
class ZkConn {
 public:
  ZkConn(ZkSession& session, const ZkUri& uri);  // throws ConnectionError
  ~ZkConn();
  ZkConn(const ZkConn&) = delete;
  ZkConn& operator=(const ZkConn&) = delete;

  zhandle_t* handle() const noexcept { return zh_; }
  ZkSession& session() const noexcept { return session_; }
  bool expired() const noexcept { return expired_.load(std::memory_order_acquire); }
  bool connected() const noexcept { return connected_.load(std::memory_order_acquire); }
  bool ever_connected() const noexcept { return ever_connected_.load(std::memory_order_acquire); }
  // The watcher's side (completion thread): a session state change.
  void on_state(zhandle_t* zh, int state) noexcept;
  // "redlock: zookeeper <hosts>: <op> <path>", the start of an error message.
  std::string describe(const char* op, const std::string& path) const;

 private:
  ZkSession& session_;
  zhandle_t* zh_{nullptr};
  std::atomic<bool> expired_{false};
  std::atomic<bool> connected_{false};
  std::atomic<bool> ever_connected_{false};
};

class ZkSession {
 public:
  explicit ZkSession(std::string_view uri) : uri_(parse_zk_uri(uri)) {}
  ~ZkSession();

  const ZkUri& uri() const noexcept { return uri_; }
  // The negotiated timeout once connected, the requested one before.
  std::chrono::milliseconds timeout() const noexcept {
    return std::chrono::milliseconds(timeout_ms_.load(std::memory_order_acquire));
  }
  void set_timeout(std::chrono::milliseconds negotiated) noexcept {
    if (negotiated.count() > 0) timeout_ms_.store(negotiated.count(), std::memory_order_release);
  }
  bool connected() const noexcept;

  // The current connection, started (or replaced, if its session expired) when needed. A new
  // connection is waited for up to the session timeout; one that is reconnecting fails at once.
  // Throws ConnectionError.
  std::shared_ptr<ZkConn> conn();
  // True if `conn` is still this session's connection and its session has not expired.
  bool current(const ZkConn& conn) const;

  // The watchdog of this session's Locks that name none (created on first use): a confirmation
  // waiting on an unresponsive server then delays no other store's renewals. Thread-safe.
  std::shared_ptr<Watchdog> watchdog();
  // Remembers (weakly) a watchdog that renews this session's holds, so that an expiry reaches
  // it at once. Thread-safe; throws std::bad_alloc.
  void track(const std::shared_ptr<Watchdog>& watchdog);
  // The watcher's side: the session expired (or its authentication failed). Every tracked
  // watchdog renews this session's holds (batch group: this session) now, and each finds its
  // hold lost (LostReason::session_expired) and says so. Never throws; never blocks on I/O.
  void note_expired() noexcept;

  // Events seen by the watcher (node watches fired, state changes), for waiters.
  std::uint64_t events() const;
  // Blocks until events() differs from `*seen`, `*woken` is set (by wake()), or `until`.
  // Returns true if woken by either before `until`; sets `*seen` to events() and clears
  // `*woken` (both guarded by the events mutex).
  bool wait_events(std::uint64_t* seen, bool* woken, SteadyClock::time_point until);
  // Sets `*woken` under the events mutex and wakes every waiter.
  void wake(bool* woken) noexcept;
  // An async waiter's waker (lock/async_driver): told of every event and wake() from now on,
  // until remove_waker(); at once if events() already differs from `seen`. Never throws except
  // std::bad_alloc (add).
  void add_waker(Waker* waker, std::uint64_t seen);
  void remove_waker(Waker* waker) noexcept;
  // The watcher's side: one event.
  void note_event() noexcept;

  // A znode of `token` under `parent` whose fate is unknown (a create or delete whose reply was
  // lost): the session's janitor thread (started here if needed) deletes it once connected, and
  // so does the next operation on the session (protected mode finds it by token). Throws
  // std::bad_alloc or std::system_error (no thread); the znode then lives as long as the session.
  void add_orphan(std::string parent, std::string token);
  // Deletes the orphans it can on `conn`; keeps the rest. Never throws.
  void sweep_orphans(ZkConn& conn) noexcept;

 private:
  const ZkUri uri_;
  std::atomic<long long> timeout_ms_{uri_.session_timeout.count()};

  std::mutex tracked_mutex_;                      // declared before conn_: outlives every handle
  std::vector<std::weak_ptr<Watchdog>> tracked_;  // guarded by tracked_mutex_

  mutable std::mutex events_mutex_;  // declared before conn_: outlives every handle
  std::condition_variable events_cv_;
  std::uint64_t events_{0};
  std::vector<Waker*> wakers_;  // guarded by events_mutex_

  mutable std::mutex mutex_;  // guards conn_ and orphans_
  std::shared_ptr<ZkConn> conn_;
  struct Orphan {
    std::string parent, token;
  };
  std::vector<Orphan> orphans_;
  std::atomic<bool> has_orphans_{false};
  bool stopping_{false};                // guarded by events_mutex_
  bool janitor_on_{false};              // guarded by mutex_
  std::thread janitor_;                 // guarded by mutex_; joined by the destructor
  std::shared_ptr<Watchdog> watchdog_;  // guarded by mutex_

  void janitor() noexcept;
};

// Maps a zoo_* result that is not ZOK (nor an expected ZNONODE / ZNODEEXISTS) to the exception
// to throw: ConnectionError for connection and session failures, ServerError otherwise.
[[noreturn]] void throw_zk_error(int rc, const std::string& what);

// Plain calls over the C client, each one round trip. Return the zoo_* code for ZOK and the
// codes listed; throw (throw_zk_error) for the others.
struct ZkStatResult {
  int rc{0};
  std::int64_t czxid{0};
};
ZkStatResult zk_exists(ZkConn& conn, const std::string& path, bool watch);  // ZNONODE
// As zk_exists without a watch, waiting for the reply only until `deadline` (then it throws
// TimeoutError; the reply is dropped when it comes). Returns ZOK or ZNONODE.
int zk_exists_until(ZkConn& conn, const std::string& path, SteadyClock::time_point deadline);
int zk_delete(ZkConn& conn, const std::string& path);  // ZNONODE
// ZNONODE (a parent is missing); on ZOK `created` is the full path and `czxid` its czxid.
int zk_create(ZkConn& conn, const std::string& path, int mode, std::string* created,
              std::int64_t* czxid);
// An acquire's first round trip: creates `path` (as zk_create) and, pipelined behind it, lists
// `parent`. Returns ZNONODE (a parent of `path` is missing), ZOK (created, `children` listed
// after the create) or ZNOTHING (created, but the list failed: list again). Throws as
// zk_create for the create's failures; a create whose reply is lost throws ConnectionError.
int zk_create_and_list(ZkConn& conn, const std::string& path, int mode, std::string* created,
                       std::int64_t* czxid, const std::string& parent,
                       std::vector<std::string>* children);
// ZNONODE (`out` emptied); on ZOK the children's names.
int zk_children(ZkConn& conn, const std::string& path, std::vector<std::string>* out);
// Creates `path` and its ancestors as containers / persistent nodes if missing.
void zk_ensure_path(ZkConn& conn, const std::string& path);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_SESSION_HPP
