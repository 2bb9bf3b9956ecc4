// src/backends/postgres/pg_listener.hpp: wake-on-release for the PostgreSQL component. One
// LISTEN connection per Database, shared by every waiting Lock; a release's statement notifies the
// lock's channel (pg_notify in the same statement, delivered when it commits).
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

class PgListener;

// One waiter's watch: woken by a notification on its channel, by the listener losing its
// connection (a notification may have been lost: the waiter tries again), or by wake().
// Registered with the listener while it lives.
class PgWatch final : public ReleaseWatch {
 public:
  // Registers with `listener` on `channel`, waiting for the LISTEN until `deadline` at most.
  PgWatch(std::shared_ptr<PgListener> listener, std::string channel,
          SteadyClock::time_point deadline) noexcept;
  ~PgWatch() override;
  PgWatch(const PgWatch&) = delete;
  PgWatch& operator=(const PgWatch&) = delete;

  bool wait_until(SteadyClock::time_point until) override;
  bool take_grant(std::uint64_t&, std::uint64_t&) noexcept override { return false; }
  void retoken(std::string) noexcept override {}
  void wake() noexcept override;

 private:
  std::shared_ptr<PgListener> listener_;
  std::string channel_;
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

 private:
  bool ensure_connected(SteadyClock::time_point deadline);                 // mutex_ held
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
  int wake_pipe_[2]{-1, -1};
  bool stopping_{false};
  std::thread thread_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_POSTGRES_PG_LISTENER_HPP
