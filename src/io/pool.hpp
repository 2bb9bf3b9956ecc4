// src/io/pool.hpp: ClientImpl, what a Client shares among its copies: the endpoint, a pool of idle
// connections, the node's health (log transitions, circuit breaker), and the subscriber for
// wake-on-release (created on first use).
//
// The pool bounds the connections open for commands (checked out, idle, or being finished after
// a cut) at Endpoint::max_connections: a new one is dialed only with a slot, and a slot is freed
// when its connection closes. Callers beyond the bound wait, first come first served, for a
// connection to be checked in or closed. The subscriber's connection is not counted.
#ifndef REDLOCK_SRC_IO_POOL_HPP
#define REDLOCK_SRC_IO_POOL_HPP

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <redlock/endpoint.hpp>
#include <redlock/observer.hpp>

#include "io/command.hpp"
#include "io/dial.hpp"
#include "io/wire.hpp"

namespace redlock {
namespace detail {

class Subscriber;
class MasterLocator;
class ClusterRouter;

// Endpoints equal in everything that decides which server a connection reaches and how (host,
// port or socket, credentials, timeouts, TLS, reply caps, and through Sentinel the sentinels and
// the service) have equal keys. The database and the pool's size are not part of it.
std::string settings_key(const Endpoint& endpoint);

// The process's subscriber for `endpoint`'s server, user and connection settings and the kind
// of pub/sub: found, or created with a dialer of its own. Throws std::bad_alloc,
// std::system_error (thread).
std::shared_ptr<Subscriber> shared_subscriber(const Endpoint& endpoint, PubSub pubsub);

// Whether obtain() first checks an idle connection for a close by the server (one poll(2) per
// request). A batch whose every command may be sent twice (Resend::allowed: the library's own)
// skips it: on a connection the server closed, it fails before any reply and execute() retries
// it on a fresh one, just as when the server closes the connection right after the check.
enum class Probe : unsigned char { first, skip };

class ClientImpl {
 public:
  // `pubsub`: how this node announces releases and its subscriber hears them (sharded: a
  // cluster's master, made by its ClusterRouter). A cluster endpoint is sharded whatever is given.
  explicit ClientImpl(Endpoint endpoint, PubSub pubsub = PubSub::classic);
  ~ClientImpl();
  ClientImpl(const ClientImpl&) = delete;
  ClientImpl& operator=(const ClientImpl&) = delete;

  const Endpoint& endpoint() const noexcept { return endpoint_; }
  // "host:port" or "unix:/path": what every message names.
  const std::string& address() const noexcept { return address_; }
  // Identity of the server for duplicate detection (never the database): "run_id:<id>" from
  // INFO server when the server answers (learned once per ClientImpl), else the resolved
  // numeric address, so that 127.1, LOCALHOST and 127.0.0.1 compare equal. May do one round
  // trip (bounded by the endpoint's timeouts); never throws a transport error. Defined in
  // client.cpp.
  std::string identity();
  // 16 random hex characters naming this Client's waiters to the server: fair mode's hand-overs
  // to them are published on "<key>:released:<waiter_id>", so other processes are not woken.
  const std::string& waiter_id() const noexcept { return waiter_id_; }

  // A connection to send on: an idle one (first checked for a close by the server, one
  // poll(2), unless `probe` is Probe::skip), or null and `slot` holding the right to dial one more
  // (the connection must keep it, Connection::pool_slot, for as long as it is open). While
  // max_connections are open and none is idle, waits in arrival order for one to be checked in
  // or closed, as long as one comes back at least every `patience` (zero: no wait). Throws
  // TimeoutError naming the node when none came back for that long.
  std::unique_ptr<Connection> obtain(std::chrono::steady_clock::duration patience,
                                     std::shared_ptr<void>& slot, Probe probe = Probe::first);
  // As obtain() without waiting, for a fan-out's node: false (nothing taken) while every one of
  // max_connections is busy or other callers wait in line (the fan-out then dials a connection
  // beyond the bound, which checkin() closes). Throws std::bad_alloc only.
  bool try_obtain(std::unique_ptr<Connection>& connection, std::shared_ptr<void>& slot,
                  Probe probe = Probe::first);
  // Starts a non-blocking connect (see io/dial.hpp). Throws ConnectionError.
  Dial dial() const;
  // Completes a connect that poll() reported writable. Throws ConnectionError.
  std::unique_ptr<Connection> adopt(Dial& dial) const;
  // Returns a healthy connection to the pool, to the first caller waiting in obtain() if any.
  void checkin(std::unique_ptr<Connection> connection) noexcept;
  std::size_t idle() const;
  // Connections open for commands (checked out, idle, or still being finished). Thread-safe.
  std::size_t open_connections() const;
  // Closes every idle connection (after one turned out stale: the others likely are too).
  void clear_idle() noexcept;

  // Opens a connection and completes the handshake synchronously (for the subscriber). Defined
  // in executor.cpp. Throws ConnectionError, TimeoutError, ProtocolError or ServerError.
  std::unique_ptr<Connection> connect_ready();

  // The handshake commands (AUTH, SELECT) for a new connection; empty if none needed.
  const std::vector<CommandView>& handshake() const noexcept { return handshake_; }

  // Through Sentinel (Endpoint::sentinel.service set): whether `error` (a reply) says the server
  // is no longer a master (READONLY, LOADING, MASTERDOWN); if so, the master is looked up again
  // and pooled connections are dropped. Always false for other endpoints. Never throws.
  bool master_moved(std::string_view error) noexcept;
  // Through Sentinel: whether `connection` was made under the master's current answer (one
  // from an older epoch may reach a former master, which stays a master until the sentinels
  // demote it). Always true for other endpoints. Never throws; one atomic load.
  bool current(const Connection& connection) const noexcept;
  // Through Sentinel: calls `news` whenever connections made so far may no longer be current,
  // or a failover under way has news (MasterLocator::follow: quick, never throws, no call
  // back into this node's locator), until the returned registration is dropped. Null for
  // other endpoints (nothing is ever called). Throws std::bad_alloc.
  std::shared_ptr<void> follow_master(std::function<void()> news);

  // Through Redis Cluster (Endpoint::cluster.seeds set): the router that sends each command to
  // its slot's master (see io/cluster.hpp); null for other endpoints.
  ClusterRouter* router() const noexcept { return router_.get(); }

  // `WAIT wait_replicas wait_timeout` for this endpoint (Endpoint::wait_replicas), to pipeline
  // behind a write; null when the endpoint asks for no replica acknowledgement.
  const CommandView* replica_wait() const noexcept { return wait_.argc != 0 ? &wait_ : nullptr; }

  // How releases on this node are announced (the scripts' PUBLISH or SPUBLISH) and heard.
  PubSub pubsub() const noexcept { return pubsub_; }

  // The subscriber for wake-on-release, found or created on first call: one per process for
  // every Client of the same server, user and connection settings (shared_subscriber). Not for
  // a cluster endpoint (use subscriber(channel)). Thread-safe.
  Subscriber& subscriber();
  // The subscriber that hears `channel`: subscriber() for a server of its own; through Redis
  // Cluster, the sharded subscriber of the master that owns the channel's slot (looked up in
  // the slot map, refreshed if stale: after subscription_moved()). Throws ConnectionError (no
  // owner known, see ClusterRouter::owner), std::bad_alloc, std::system_error. Thread-safe.
  Subscriber& subscriber(const std::string& channel);
  // The subscriber if it was created already, else null. Thread-safe, never creates one.
  Subscriber* started_subscriber() const noexcept {
    return started_subscriber_.load(std::memory_order_acquire);
  }
  // As subscriber(channel) if that one was created already (through Cluster: of the owner the
  // map names now, without a lookup), else null. Never throws.
  Subscriber* started_subscriber(const std::string& channel) const noexcept;
  // A subscription through this node was lost without being asked to end (a cluster's slot
  // moved to another master, or the master failed): through Cluster, the slot map is marked
  // stale so that the next subscriber(channel) finds the new owner. No-op otherwise. Never throws.
  void subscription_moved() noexcept;

  // The server's run_id once identity() has learned it (empty before). Guarded by run_id_mutex.
  std::mutex run_id_mutex;
  std::string run_id;

  // Whether SET ... NX ... GET works on this server (Redis >= 7.0); learned on first use.
  std::atomic<bool> set_nx_get{true};

  // Records whether the node just answered; logs only transitions (down: warn, back: info), so
  // a dead node costs one log line, not one per operation. Never throws.
  void note_health(bool reachable, std::string_view why = {}) noexcept;
  // Tells the process-wide observer (if any) of a health change. Never throws.
  void observe(NodeHealth health, std::string_view why) const noexcept;

  // Circuit breaker for multi-node batches. After a timeout, or after being abandoned (cut after
  // an early finish's grace) three times in a row, the node is skipped by Redlock acquires (it
  // simply does not grant) for a back-off that starts at 250 ms and doubles up to 1 s, so a node
  // that heals is used again within about a second; then one acquire probes it (the others keep
  // skipping until that probe is done). A paused server would otherwise cost every acquire a wait
  // and a new connection. Releases, extends and rollbacks
  // never skip (see SkipPolicy); single-node operations and the watchdog never skip.
  void note_timeout() noexcept;
  void note_abandoned() noexcept;
  void note_answer() noexcept;
  // True if an acquire should skip this node now; when the back-off has just ended, false for
  // exactly one caller (the probe). Thread-safe.
  bool skip(std::chrono::steady_clock::time_point now) noexcept;
  // True while the node has timed out and not answered since. Thread-safe.
  bool suspect() const noexcept { return backoff_ms_.load(std::memory_order_relaxed) != 0; }
  // True while the node is suspect, or its last fan-out cut it after the grace (and it has not
  // answered one in time since). Thread-safe.
  bool lagging() const noexcept {
    return suspect() || abandoned_in_a_row_.load(std::memory_order_relaxed) != 0;
  }

 private:
  void build_handshake();

  Endpoint endpoint_;
  std::string address_;
  std::string waiter_id_;
  // Storage behind handshake_ views.
  std::vector<std::string> handshake_args_;
  std::vector<std::vector<const char*>> handshake_argv_;
  std::vector<std::vector<std::size_t>> handshake_lens_;
  std::vector<CommandView> handshake_;
  std::string wait_args_[3];
  const char* wait_argv_[3]{};
  std::size_t wait_lens_[3]{};
  CommandView wait_;

  // Shared with every connection's slot: a connection may be closed after its ClientImpl is
  // gone (the finisher). Defined in pool.cpp.
  struct Slots;
  std::shared_ptr<void> take_slot(Slots& slots);  // slots.mutex held
  void wait_turn(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::duration patience);
  // False (after a debug log) if the server has closed this idle connection. Marks it reused.
  bool fresh(Connection& connection, Probe probe) const noexcept;
  // The TimeoutError of a request that found every connection busy for `waited`.
  std::exception_ptr busy_error(std::chrono::steady_clock::duration waited) const;
  std::shared_ptr<Slots> slots_;
  std::atomic<bool> down_{false};
  std::atomic<std::int64_t> skip_until_ns_{0};  // steady_clock, 0: not skipping
  std::atomic<std::int64_t> backoff_ms_{0};
  std::atomic<int> abandoned_in_a_row_{0};
  PubSub pubsub_;
  std::once_flag subscriber_once_;
  std::shared_ptr<Subscriber> subscriber_;  // shared with Clients of the same endpoint
  std::atomic<Subscriber*> started_subscriber_{nullptr};
  std::shared_ptr<MasterLocator> locator_;  // through Sentinel only
  std::shared_ptr<ClusterRouter> router_;   // through Cluster only
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_POOL_HPP
