// src/backends/postgres/pg_backend.cpp: the lease backend (core/backend.hpp) over one
// PostgreSQL lease table, and the public Database and Lock. Each operation is one statement;
// expiry is decided by the server's now().
#include <stdexcept>

#include <redlock/errors.hpp>
#include <redlock/postgres.hpp>

#include "backends/postgres/pg_backend_base.hpp"
#include "backends/postgres/pg_sql.hpp"
#include "core/backend.hpp"
#include "core/engine.hpp"
#include "lock/lock_core.hpp"
#include "lock/rw_sides.hpp"

namespace redlock {
namespace detail {
namespace {

class PgLeaseBackend final : public PgBackendBase {
 public:
  PgLeaseBackend(std::shared_ptr<PgDatabase> db, std::string name, const LockOptions& options)
      : PgBackendBase(std::move(db), std::move(name), options),
        fair_(options.fair),
        queue_ms_(std::to_string(3 * options.ttl.count())) {
    PgStatements sql = pg_statements(db_->table());
    acquire_sql_ = std::move(fair_ ? sql.fair_acquire : sql.acquire);
    extend_sql_ = std::move(sql.extend);
    release_sql_ = std::move(fair_ ? sql.fair_release : sql.release);
  }

  bool fair() const noexcept override { return fair_; }

  AcquireResult acquire(const AcquireRequest& request) override {
    AcquireResult out;
    auto start = SteadyClock::now();
    try {
      const PgUndo undo{release_sql_, {name_, *request.token, channel_}};
      std::vector<std::string> params = {name_, *request.token, std::to_string(ttl_.count())};
      if (fair_) {
        params.push_back(request.queue == Queue::join ? "true" : "false");
        params.push_back(queue_ms_);
      }
      PgResult r = db_->exec("acquire " + name_, acquire_sql_, params, &undo);
      if (r.row.size() == 2 && !r.null[0]) {
        out.fence = std::stoull(r.row[0]);
        out.valid_until = extend_floor(start, ttl_);
        out.held = out.valid_until > SteadyClock::now();
        out.granted = out.held ? 1 : 0;
        if (!out.held) release(*request.token, Announce::quietly);
      } else if (r.row.size() == 2 && !r.null[1]) {
        out.holder_pttl = std::chrono::milliseconds(std::max(0LL, std::stoll(r.row[1])));
      }
    } catch (const TimeoutError&) {
      // Fair: the attempt's undo (which also leaves the queue) may be queued behind it, and
      // would take a later place of the same token with it: the waiter takes a new token.
      out.left_queue = fair_;
      out.failure = std::current_exception();
    } catch (const Error&) {
      out.failure = std::current_exception();
    }
    return out;
  }

  ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl) override {
    ExtendResult out;
    auto start = SteadyClock::now();
    try {
      PgResult r =
          db_->exec("extend " + name_, extend_sql_, {name_, token, std::to_string(ttl.count())});
      out.valid_until = extend_floor(start, ttl);
      out.held = r.affected == 1 && out.valid_until > SteadyClock::now();
      out.confirmed = r.affected == 1 ? 1 : 0;
      out.reason = r.affected == 1 ? LostReason::expired : LostReason::refused;
    } catch (const Error&) {
      out.failure = std::current_exception();
    }
    return out;
  }

  ReleaseResult release(const std::string& token, Announce) override {
    ReleaseResult out;
    try {
      PgResult r = db_->exec("release " + name_, release_sql_, {name_, token, channel_});
      // Fair: a row that says whether the lease was ours (the queue place may be all it left).
      const bool released = fair_ ? r.row.size() == 2 && r.row[0] == "t" : r.affected == 1;
      // A resent release that finds nothing may have followed its own first send: unknown,
      // not a loss (nobody else is known to have taken the lease).
      out.released = released ? 1 : 0;
      out.refused = released || r.resent ? 0 : 1;
      out.quorum_kept = released || r.resent;
    } catch (const Error&) {
      out.failure = std::current_exception();
    }
    return out;
  }

 private:
  bool fair_;
  std::string queue_ms_;  // a waiter's place lives 3 ttl past its last attempt
  std::string acquire_sql_, extend_sql_, release_sql_;
};

}  // namespace
}  // namespace detail

namespace postgres {

Database::Database(std::string_view uri, DatabaseOptions options)
    : impl_(std::make_shared<detail::PgDatabase>(std::string(uri), std::move(options))) {}
Database::~Database() = default;

void Database::ensure_table() { impl_->ensure_table(); }
const DatabaseOptions& Database::options() const noexcept { return impl_->options(); }

namespace {
std::shared_ptr<detail::LockCore> make_core(const std::shared_ptr<detail::PgDatabase>& db,
                                            std::string name, LockOptions options) {
  detail::validate_lock_options(name, options);
  if (options.fair && db->options().mode == Mode::session) {
    throw std::invalid_argument("options.fair: not supported in session mode (advisory locks)");
  }
  std::shared_ptr<detail::LeaseBackend> backend =
      db->options().mode == Mode::session
          ? detail::make_pg_session_backend(db, std::move(name), options)
          : std::make_shared<detail::PgLeaseBackend>(db, std::move(name), options);
  return std::make_shared<detail::LockCore>(std::move(backend), std::move(options));
}
}  // namespace

Lock::Lock(Database& db, std::string name, LockOptions options)
    : LockBase(make_core(db.impl_, std::move(name), std::move(options))) {}

namespace {
std::unique_ptr<detail::RwSides> make_sides(const std::shared_ptr<detail::PgDatabase>& db,
                                            const std::string& name, const LockOptions& options) {
  detail::validate_lock_options(name, options);
  if (options.fair) {
    throw std::invalid_argument("options.fair: not supported by postgres::ReadWriteLock");
  }
  if (db->options().mode != Mode::session) {
    throw std::invalid_argument(
        "db: postgres::ReadWriteLock needs session mode (DatabaseOptions::mode or mode=session)");
  }
  return std::make_unique<detail::RwSides>(
      detail::make_pg_session_backend(db, name, options, detail::PgSessionSide::writer),
      detail::make_pg_session_backend(db, name, options, detail::PgSessionSide::reader), options);
}
}  // namespace

ReadWriteLock::ReadWriteLock(Database& db, std::string name, LockOptions options)
    : redlock::ReadWriteLock(make_sides(db.impl_, name, options)) {}

}  // namespace postgres
}  // namespace redlock
