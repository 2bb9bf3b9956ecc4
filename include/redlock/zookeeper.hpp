// redlock/zookeeper.hpp: a lock on ZooKeeper (optional component, CMake target
// redlock::zookeeper), the recipe of Curator's InterProcessMutex behind the same std vocabulary
// as redlock::Lock. No libzookeeper types appear here.
//
//   redlock::zookeeper::Session zk("zookeeper://127.0.0.1:2181/locks?session_timeout=4000");
//   redlock::zookeeper::Lock lock(zk, "reports-nightly");
//   {
//     std::lock_guard<redlock::zookeeper::Lock> guard(lock);  // waits its turn (FIFO)
//     write_report(lock.fence());  // the holder znode's czxid: only ever grows
//   }
//
// Each acquire creates an ephemeral sequential znode `<chroot>/<name>/_c_<token>-lock-<seq>`;
// the lowest sequence holds the lock, and every waiter watches only its predecessor. The hold
// lives as long as the session: it is confirmed every session_timeout/3 in the background, and
// validity() counts down to the session timeout from the last confirmation, so a client cut off
// from the servers stops believing it holds the lock before the servers can expire its session
// and let another client in. A hold whose session expired is lost with
// LostReason::session_expired (or LostReason::expired if its validity ran out first).
#ifndef REDLOCK_ZOOKEEPER_HPP
#define REDLOCK_ZOOKEEPER_HPP

#include <chrono>       // std::chrono::milliseconds
#include <memory>       // std::shared_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view

#include <redlock/election.hpp>  // redlock::Election
#include <redlock/errors.hpp>    // Error, ConnectionError, ServerError (what Lock throws)
#include <redlock/lock.hpp>      // LockBase
#include <redlock/options.hpp>   // LockOptions
#include <redlock/rwlock.hpp>    // ReadWriteLock (zookeeper::ReadWriteLock's members)

namespace redlock {
namespace detail {
class ZkSession;
struct Access;
}  // namespace detail

namespace zookeeper {

// One ZooKeeper session (one client handle, with the C client's two threads), shared by the
// Locks made from it. Copies share the session; all members are thread-safe. If the session
// expires, the next operation starts a new one (the holds of the old one are lost). The handle
// is closed when the last copy and the last Lock made from it are gone.
class Session {
 public:
  // `uri`: `zookeeper://host:port[,host:port...][/chroot][?session_timeout=ms]`. The port
  // defaults to 2181; the chroot (a znode path, created when needed) prefixes every lock's
  // path; session_timeout (milliseconds, default 10000, 1..2^31-1) is what is asked of the
  // server, which may clamp it to its own [2, 20] ticks. Connects nothing yet.
  // Throws std::invalid_argument naming what is wrong (scheme, host, port, chroot, parameter).
  explicit Session(std::string_view uri);
  ~Session();
  Session(const Session&) = default;
  Session& operator=(const Session&) = default;

  // The session timeout in milliseconds: the server's answer once connected, the requested one
  // before. Never throws. Thread-safe.
  std::chrono::milliseconds session_timeout() const noexcept;

  // True if the client is connected to a server now. Never throws. Thread-safe.
  bool connected() const noexcept;

 private:
  friend class Lock;
  friend class Election;
  friend class ReadWriteLock;
  friend struct detail::Access;
  std::shared_ptr<detail::ZkSession> impl_;
};

// A lock on ZooKeeper with the members of redlock::Lock (TimedLockable, re-entrant for the
// owning thread, threads of one process queue locally, on_lost, LeaseToken). Service is first
// come, first served across processes. What differs from a Redis lease:
// - options.ttl, auto_renew and fair are not used: the session timeout is the lease, holds are
//   always confirmed in the background, and waiting is always in order. An empty
//   options.watchdog means the Session's own watchdog (not Watchdog::shared()), so that a
//   confirmation waiting on an unresponsive server delays no Redis lock's renewal;
// - fence() is the holder znode's czxid, with or without options.fencing;
// - extend(ttl) confirms the hold now (one round trip): validity becomes min(ttl, session
//   timeout) minus the drift allowance, counted from before the request;
// - try_lock() that finds the lock taken leaves no znode behind; a wait that gives up deletes
//   its znode (if the server cannot be reached then, or a create's reply was lost, the
//   session's janitor thread deletes it once connected again);
// - failures throw ConnectionError (no server reachable, reconnecting, session lost),
//   ServerError (an error code from ZooKeeper, e.g. no permission on the chroot), and from
//   extend(), TimeoutError (no answer within a third of the session timeout).
class Lock final : public LockBase {
 public:
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty name,
  // a name that is not a relative znode path (no leading, trailing or doubled '/', no "." or
  // ".." part, no NUL), retry_delay <= 0 and clock_drift_factor outside [0, 1).
  Lock(Session& session, std::string name, LockOptions options = {});
};

// Leader election (redlock/election.hpp) on ZooKeeper: Curator's LeaderLatch over this Lock's
// queue. The term is the leader znode's czxid (it grows from each leader to the next); the
// claim writes the id as the znode's data and counts only if the server says our session owns
// the znode (CURATOR-696). The session is the lease: options.ttl is not used (the session
// timeout is), and an expired session's leader is gone at once. A leader whose session is
// disconnected (suspended) steps down: is_leader() and term() say no, and run() stops its worker
// at once, resigns and campaigns again once reconnected (Curator's LeaderLatch does the same). A
// leader that only campaign()ed keeps its term if it reconnects while the lease's validity,
// counted from its last confirmation, lasts (the znode is confirmed again); the validity runs out
// before the server can expire the session. leader() is two round trips
// (list the queue, read the head); observe() uses watches, no polling.
class Election final : public redlock::Election {
 public:
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty id, a
  // name Lock rejects, and options outside their ranges.
  Election(Session& session, std::string name, std::string id, ElectionOptions options = {});
};

// Shared readers and an exclusive writer on ZooKeeper (Curator's InterProcessReadWriteLock
// recipe), with the members of redlock::ReadWriteLock (one reader hold per object, re-entrant
// per side) and what differs for a ZooKeeper Lock above. The writer's znode is a lock znode
// (`_c_<token>-lock-<seq>`, so a zookeeper::Lock on the same name is a writer too), a reader's
// `_c_<token>-read-<seq>`. A writer holds when its znode is first and watches its predecessor;
// a reader holds when no writer's znode is ahead of its own and watches the last one that is.
// So a waiting writer is ahead of every reader that comes after it (writer preference), all
// waiters are served in arrival order, and a crashed holder's znode goes with its session.
// fence() is the writer znode's czxid; fence_shared() the reader znode's (not ordered with
// writers'). downgrade() throws std::logic_error (not offered: the recipe has no conversion).
class ReadWriteLock final : public redlock::ReadWriteLock {
 public:
  // Connects nothing yet. Throws std::invalid_argument as Lock's constructor.
  ReadWriteLock(Session& session, std::string name, LockOptions options = {});
};

}  // namespace zookeeper
}  // namespace redlock

#endif  // REDLOCK_ZOOKEEPER_HPP
