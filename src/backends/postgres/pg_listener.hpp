// src/backends/postgres/pg_listener.hpp: wake-ups for the PostgreSQL component. One LISTEN
// connection per Database, shared by every waiting Lock. Lease mode: the connection is a waiter
// process's identity (a random id; the session holds an advisory lock on it, which is how a
// hand-over knows the process lives) and LISTENs to its own channel, where a hand-over notifies
// one waiter by its token's SHA1 (pg_sql.hpp). Session mode: a release notifies the lock's
// channel (pg_notify in the same statement, delivered when it commits).
#ifndef REDLOCK_SRC_BACKENDS_POSTGRES_PG_LISTENER_HPP
#define REDLOCK_SRC_BACKENDS_POSTGRES_PG_LISTENER_HPP

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.hpp"

struct pg_conn;

namespace redlock {
namespace detail {

// FNV-1a (64 bits) of the table and the name: the session mode's advisory lock key and the
// channel's suffix.
std::uint64_t pg_hash64(const std::string& table, const std::string& name) noexcept;

// The channel a lock's releases are announced on: "redlock_" and 16 hex digits of a hash of the
// table and the name (a channel is an identifier of at most 63 bytes; names may be longer).
std::string pg_channel(const std::string& table, const std::string& name);

// A waiter id's channel ("redlock_w_" and its 16 hex digits) and the second key of the advisory
// lock its LISTEN session holds (the id's low 31 bits; the first is kPgWaiterLockSpace).
std::string pg_waiter_channel(std::uint64_t id);
int pg_waiter_key(std::uint64_t id) noexcept;

class PgListener;

// One waiter's watch: woken by a notification on its channel (session mode) or by a hand-over
// naming its tag (lease mode: "<prefix><SHA1 of the token>"), by the listener losing its
// connection (a notification may have been lost: the waiter tries again), or by wake().
// Registered with the listener while it lives.
class PgWatch final : public ReleaseWatch {
 public:
  // Registers with `listener` on `channel`, waiting for the LISTEN until `deadline` at most.
  PgWatch(std::shared_ptr<PgListener> listener, std::string channel,
          SteadyClock::time_point deadline) noexcept;
  // Registers with `listener` for the hand-overs tagged `prefix` + `token_sha1`.
  PgWatch(std::shared_ptr<PgListener> listener, std::string prefix, const std::string& token_sha1,
          SteadyClock::time_point deadline) noexcept;
  ~PgWatch() override;
  PgWatch(const PgWatch&) = delete;
  PgWatch& operator=(const PgWatch&) = delete;

  bool wait_until(SteadyClock::time_point until) override;
  bool take_grant(std::uint64_t&, std::uint64_t&) noexcept override { return false; }
  void retoken(std::string token_sha1) noexcept override;
  void wake() noexcept override;
  bool set_waker(Waker* waker) noexcept override;

 private:
  Waker* waker_{nullptr};  // guarded by mutex_
  std::shared_ptr<PgListener> listener_;
  std::string channel_;  // or the tag, with a prefix
  std::string prefix_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool woken_{false};
};

class PgListener {
 public:
  // `uri` as PgDatabase's; `timeout` bounds connecting and each LISTEN / UNLISTEN.
  PgListener(std::string uri, std::chrono::milliseconds timeout);
  // Stops the thread and closes the connection. Never throws.
  ~PgListener();
  PgListener(const PgListener&) = delete;
  PgListener& operator=(const PgListener&) = delete;

  // Registers `watch` on `channel`; returns once the LISTEN is confirmed, or at `deadline`, or
  // when the server cannot be reached (then the watch is left to its timer: the caller's
  // retry_delay and the holder's lease end). Never throws.
  void add(const std::string& channel, PgWatch* watch, SteadyClock::time_point deadline) noexcept;
  // Unregisters `watch` (UNLISTEN when it was the channel's last). Never throws.
  void remove(const std::string& channel, PgWatch* watch) noexcept;
  // True if `channel` is listened to already (a watch costs no round trip).
  bool live(const std::string& channel) const noexcept;

  // Lease mode: registers `watch` for the hand-overs tagged `tag` (connecting, taking the
  // identity and LISTENing to its channel first, until `deadline` at most); unregisters it;
  // moves it to another tag. Never throw.
  void add_tagged(const std::string& tag, PgWatch* watch,
                  SteadyClock::time_point deadline) noexcept;
  void remove_tagged(const std::string& tag, PgWatch* watch) noexcept;
  void retag(const std::string& from, const std::string& to, PgWatch* watch) noexcept;
  // The waiter id this process's hand-overs are sent to, connecting first if needed (until
  // `deadline` at most); 0 without a connection that holds it. Never throws.
  std::uint64_t identity(SteadyClock::time_point deadline) noexcept;
  // The id now (0 if not connected and identified): a waiter placed now can be handed the lock.
  std::uint64_t identified() const noexcept;

 private:
  bool ensure_connected(SteadyClock::time_point deadline);  // mutex_ held
  bool take_identity(SteadyClock::time_point deadline);     // mutex_ held
  void wake_all() noexcept;                                 // mutex_ held
  bool query(const std::string& sql, SteadyClock::time_point deadline,
             std::string* value);                                          // mutex_ held
  bool command(const std::string& sql, SteadyClock::time_point deadline);  // mutex_ held
  void drop_connection() noexcept;                                         // mutex_ held
  void dispatch() noexcept;                                                // mutex_ held
  void run() noexcept;

  std::string uri_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  pg_conn* conn_{nullptr};
  std::map<std::string, std::vector<PgWatch*>> channels_;
  std::map<std::string, bool> listening_;  // channels the current connection LISTENs to
  std::map<std::string, std::vector<PgWatch*>> tagged_;  // lease mode's watches, by tag
  std::uint64_t id_;                                     // the waiter id, while identified_
  bool identified_{false};  // the current connection holds the id's advisory lock
  int wake_pipe_[2]{-1, -1};
  bool stopping_{false};
  std::thread thread_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_POSTGRES_PG_LISTENER_HPP
