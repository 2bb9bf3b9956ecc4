// src/backends/postgres/pg_session.cpp: session mode's backend (postgres::Mode::session). A
// hold is pg_try_advisory_lock on a dedicated connection; it lasts while that connection does.
// "Extend" checks the connection (the watchdog's renewal: a dead connection is a lost lock),
// release unlocks and announces it on the lock's channel, like the lease mode's release. A
// ReadWriteLock's writer takes the same advisory lock and, while it waits, keeps a marker row
// (`<name>:writer-waiting`, expiring by the server's clock) that stops new readers; a reader
// takes it shared (pg_try_advisory_lock_shared) when no live marker is there. A writer that
// gives up its wait takes its marker out (unmark_waiter).
#include "backends/postgres/pg_backend_base.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <map>
#include <mutex>

#include <redlock/errors.hpp>

#include "util/log_internal.hpp"
#include "util/token.hpp"

namespace redlock {
namespace detail {
namespace {

// One hold's connection. Its mutex orders the watchdog's check and the owner's release.
struct Held {
  std::mutex mutex;
  PGconn* conn{nullptr};
};

// The statements of one side. $1 is always the advisory lock's key; a writer's $2 the marker's
// name, $3 the waiter's id, $4 the marker's life (ms), $5 whether to mark (a retry); a reader's
// $2 the marker's name. Each returns one column: the fence when taken, NULL when refused.
std::string acquire_sql(PgSessionSide side, const std::string& t) {
  const std::string fence = "nextval('" + t + "_fence')";
  switch (side) {
    case PgSessionSide::lock:
      break;
    case PgSessionSide::writer:
      return "WITH got AS (SELECT CASE WHEN pg_try_advisory_lock($1::bigint) THEN " + fence +
             " END AS fence), marked AS (INSERT INTO " + t +
             " AS l (name, token, expires_at, fence) SELECT $2, $3, clock_timestamp() + "
             "$4::bigint * interval '1 millisecond', 0 FROM got WHERE got.fence IS NULL AND "
             "$5::boolean ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, expires_at = "
             "EXCLUDED.expires_at WHERE l.expires_at < clock_timestamp() OR l.token = "
             "EXCLUDED.token RETURNING 1), unmarked AS (UPDATE " +
             t +
             " SET token = '', expires_at = to_timestamp(0) WHERE name = $2 AND token = $3 AND "
             "EXISTS (SELECT 1 FROM got WHERE got.fence IS NOT NULL) RETURNING 1) SELECT fence "
             "FROM got";
    case PgSessionSide::reader:
      return "SELECT CASE WHEN EXISTS (SELECT 1 FROM " + t +
             " WHERE name = $2 AND expires_at > clock_timestamp()) THEN NULL WHEN "
             "pg_try_advisory_lock_shared($1::bigint) THEN 0 END";
  }
  return "SELECT CASE WHEN pg_try_advisory_lock($1::bigint) THEN " + fence + " END";
}

class PgSessionBackend final : public PgBackendBase {
 public:
  PgSessionBackend(std::shared_ptr<PgDatabase> db, std::string name, const LockOptions& options,
                   PgSessionSide side)
      : PgBackendBase(std::move(db), std::move(name), options),
        side_(side),
        lock_key_(std::to_string(static_cast<long long>(pg_hash64(db_->table(), name_)))),
        acquire_sql_(acquire_sql(side, db_->table())),
        unlock_sql_(side == PgSessionSide::reader
                        ? "SELECT pg_advisory_unlock_shared($1::bigint), pg_notify($2, '')"
                        : "SELECT pg_advisory_unlock($1::bigint), pg_notify($2, '')"),
        marker_(name_ + ":writer-waiting"),
        waiter_(make_token()),
        mark_ms_(std::to_string(
            std::min(options.ttl, std::max(std::chrono::milliseconds(250), options.retry_delay * 5))
                .count())) {}

  ~PgSessionBackend() override {
    for (auto& entry : holds_) db_->retire(entry.second->conn, false);  // frees the locks
  }

  AcquireResult acquire(const AcquireRequest& request) override {
    AcquireResult out;
    const auto start = SteadyClock::now();
    PGconn* conn = nullptr;
    bool broken = true;
    try {
      conn = db_->dedicated();
      PgResult r = db_->exec_on(conn, "acquire " + name_, acquire_sql_, params(request), broken);
      if (r.row.size() != 1 || r.null[0]) {
        db_->retire(conn, !broken);
        return out;  // held by another session; how long is unknown
      }
      out.fence = std::stoull(r.row[0]);
      auto held = std::make_shared<Held>();
      held->conn = conn;
      conn = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        holds_[*request.token] = std::move(held);
      }
      out.valid_until = extend_floor(start, ttl_);
      out.held = out.valid_until > SteadyClock::now();
      out.granted = out.held ? 1 : 0;
      if (!out.held) release(*request.token, Announce::quietly);
    } catch (const Error&) {
      // Abandoned or broken: closing the connection frees whatever it may have taken.
      if (conn != nullptr) db_->retire(conn, false);
      out.failure = std::current_exception();
    }
    return out;
  }

  // The connection's check: it answers, so its session and the advisory lock live.
  ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl) override {
    ExtendResult out;
    const auto start = SteadyClock::now();
    const std::shared_ptr<Held> held = find(token);
    if (!held) return out;  // not ours (released, or lost before)
    std::lock_guard<std::mutex> lock(held->mutex);
    if (held->conn == nullptr) return out;
    bool broken = true;
    try {
      db_->exec_on(held->conn, "check " + name_, "SELECT 1", {}, broken);
      out.valid_until = extend_floor(start, ttl);
      out.held = out.valid_until > SteadyClock::now();
      out.confirmed = 1;
      out.reason = LostReason::expired;
    } catch (const ConnectionError&) {
      forget(token, held);  // the session is gone, and its lock with it
      out.reason = LostReason::refused;
    } catch (const Error&) {
      if (broken) forget(token, held);  // abandoned: closed, so the lock is freed
      out.failure = std::current_exception();
    }
    return out;
  }

  ReleaseResult release(const std::string& token, Announce) override {
    ReleaseResult out;
    const std::shared_ptr<Held> held = find(token);
    if (!held) {
      out.refused = 1;
      return out;
    }
    std::lock_guard<std::mutex> lock(held->mutex);
    if (held->conn == nullptr) {
      out.refused = 1;
      return out;
    }
    bool broken = true;
    try {
      PgResult r =
          db_->exec_on(held->conn, "release " + name_, unlock_sql_, {lock_key_, channel_}, broken);
      out.released = r.row.size() == 2 && r.row[0] == "t" ? 1 : 0;
      out.refused = 1 - out.released;
      out.quorum_kept = out.released == 1;  // only an unlock that found our lock confirms it
      broken = broken || out.released == 0;
    } catch (const ConnectionError&) {
      out.refused = 1;  // the session died: the lock went with it
    } catch (const Error&) {
      out.failure = std::current_exception();
    }
    forget(token, held, !broken);
    return out;
  }

  // A writer's contended attempts keep the marker row (params(): $5).
  bool attempt_marks_waiter() const noexcept override { return side_ == PgSessionSide::writer; }

  // A writer that gives up its wait takes its marker row out (only its own: the waiter id is
  // the row's token) and wakes the readers it held back on the lock's channel; best effort, on a
  // pooled connection within the statement timeout. Otherwise the row keeps new readers out
  // for the rest of its life.
  void unmark_waiter() noexcept override {
    if (side_ != PgSessionSide::writer) return;
    try {
      db_->exec("unmark " + name_,
                "WITH gone AS (UPDATE " + db_->table() +
                    " SET token = '', expires_at = to_timestamp(0) WHERE name = $1 AND token = "
                    "$2 AND expires_at > clock_timestamp() RETURNING 1) SELECT pg_notify($3, '') "
                    "FROM gone",
                {marker_, waiter_, channel_});
    } catch (const std::exception& e) {
      logf(LogLevel::debug, "redlock: removing the writer-waiting marker of {}: {}", name_,
           e.what());
    }
  }

 private:
  // A writer's retry (the call waits) marks; its first attempt and a try_lock do not.
  std::vector<std::string> params(const AcquireRequest& request) const {
    switch (side_) {
      case PgSessionSide::lock:
        break;
      case PgSessionSide::writer:
        return {lock_key_, marker_, waiter_, mark_ms_,
                request.attempt == Attempt::contended ? "true" : "false"};
      case PgSessionSide::reader:
        return {lock_key_, marker_};
    }
    return {lock_key_};
  }

  std::shared_ptr<Held> find(const std::string& token) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = holds_.find(token);
    return found == holds_.end() ? nullptr : found->second;
  }

  // `held->mutex` is held by the caller. The connection is closed (frees a lock it may hold)
  // unless `reusable`.
  void forget(const std::string& token, const std::shared_ptr<Held>& held, bool reusable = false) {
    db_->retire(held->conn, reusable);
    held->conn = nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    holds_.erase(token);
  }

  PgSessionSide side_;
  std::string lock_key_;  // the advisory lock's bigint, as text
  std::string acquire_sql_;
  std::string unlock_sql_;
  std::string marker_;   // the writer-waiting marker's row name
  std::string waiter_;   // a writer's id in its marker (the same for every attempt)
  std::string mark_ms_;  // the marker's life: max(250 ms, 5 * retry_delay), at most ttl
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Held>> holds_;  // token -> its connection
};

}  // namespace

std::shared_ptr<LeaseBackend> make_pg_session_backend(std::shared_ptr<PgDatabase> db,
                                                      std::string name, const LockOptions& options,
                                                      PgSessionSide side) {
  return std::make_shared<PgSessionBackend>(std::move(db), std::move(name), options, side);
}

}  // namespace detail
}  // namespace redlock
