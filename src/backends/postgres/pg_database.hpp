// src/backends/postgres/pg_database.hpp: the PostgreSQL component's connection pool (libpq).
// Only src/backends/postgres/ sees libpq; the lease backend (pg_backend.cpp) sends statements
// through PgDatabase::exec and gets rows as strings, or a redlock::Error.
#ifndef REDLOCK_SRC_BACKENDS_POSTGRES_PG_DATABASE_HPP
#define REDLOCK_SRC_BACKENDS_POSTGRES_PG_DATABASE_HPP

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <redlock/postgres.hpp>

struct pg_conn;

namespace redlock {
namespace detail {

class PgListener;

// One statement's answer: the first row's columns (empty strings for NULL) and the number of
// rows it touched.
struct PgResult {
  std::vector<std::string> row;
  std::vector<bool> null;
  long affected{0};
  // Sent a second time on a new connection (the first one broke): the first send may have run,
  // so a "not ours" answer may be our own earlier effect (as a resent Redis release).
  bool resent{false};
};

// A statement that undoes another for its token (the release of the lease an acquire may take).
struct PgUndo {
  std::string sql;
  std::vector<std::string> params;
};

// Waits until `conn` has a whole result (PQisBusy false) or `deadline`. Returns false on
// timeout; true also when the connection failed (PQgetResult then says so).
bool pg_wait_result(pg_conn* conn, std::chrono::steady_clock::time_point deadline);

class PgDatabase {
 public:
  PgDatabase(std::string uri, postgres::DatabaseOptions options);
  ~PgDatabase();
  PgDatabase(const PgDatabase&) = delete;
  PgDatabase& operator=(const PgDatabase&) = delete;

  // Runs one statement with text parameters on a pooled connection. Throws ConnectionError,
  // TimeoutError (the connection is dropped) or ServerError; `what` names the operation.
  // With `undo`: a statement the client gave up on (no answer before its deadline: a stopped
  // server) may still run when the server resumes, so `undo` is queued behind it on the same
  // connection, by a thread of its own that waits up to 10 statement timeouts + 30 s for the
  // first answer and then closes the connection.
  PgResult exec(const std::string& what, const std::string& sql,
                const std::vector<std::string>& params, const PgUndo* undo = nullptr);
  void ensure_table();

  // Session mode: a connection of the caller's own (outside the pool's limit) that it keeps
  // while it holds an advisory lock. Throws ConnectionError or TimeoutError.
  pg_conn* dedicated();
  // One statement on a dedicated connection; throws as exec. `broken`: the connection is
  // unusable afterwards (closed by the server, or abandoned at the client deadline).
  PgResult exec_on(pg_conn* conn, const std::string& what, const std::string& sql,
                   const std::vector<std::string>& params, bool& broken);
  // Takes a dedicated connection back (kept for reuse if `healthy`, up to pool_size idle).
  void retire(pg_conn* conn, bool healthy) noexcept;

  // The Database's LISTEN connection and its thread, made on first use. Throws std::bad_alloc
  // or std::system_error (no thread).
  std::shared_ptr<PgListener> listener();
  // True if `channel` is listened to already (false before the listener exists).
  bool listening(const std::string& channel) const noexcept;
  // Lease mode: the listener's waiter id while it is connected and holds it (0 otherwise, and
  // before the listener exists).
  std::uint64_t waiter_id() const noexcept;

  const postgres::DatabaseOptions& options() const noexcept { return options_; }
  const std::string& table() const noexcept { return options_.table; }

 private:
  // A pooled connection: an idle one, or a new one while fewer than pool_size are open; else
  // waits for one to be given back, until `deadline` (the caller's own, never the statements'
  // ahead of it), then throws TimeoutError. Throws connect()'s errors.
  pg_conn* take(std::chrono::steady_clock::time_point deadline);
  void give_back(pg_conn* conn, bool healthy) noexcept;
  pg_conn* connect();
  // When the client gives up on a statement sent now: statement_timeout + 1 s (a stopped
  // server never answers, and the server-side timeout cannot fire).
  std::chrono::steady_clock::time_point client_deadline() const;
  void create_table();
  void abandon(pg_conn* conn, const PgUndo& undo) noexcept;

  std::string uri_;
  postgres::DatabaseOptions options_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<pg_conn*> idle_;
  std::vector<pg_conn*> idle_dedicated_;  // guarded by mutex_
  std::size_t open_{0};
  mutable std::mutex listener_mutex_;
  std::shared_ptr<PgListener> listener_;
  std::mutex ddl_mutex_;
  std::atomic<bool> table_ready_{false};
  // ensure_table's attempts that failed, and the last one's failure (guarded by ddl_mutex_): a
  // caller that waited while an attempt failed gets that failure instead of a turn of its own.
  std::atomic<std::uint64_t> ddl_failures_{0};
  std::exception_ptr ddl_failure_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_POSTGRES_PG_DATABASE_HPP
