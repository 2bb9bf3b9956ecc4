// src/backends/postgres/pg_backend.cpp: the lease backend (core/backend.hpp) over one
// PostgreSQL lease table and its wake-one queue, and the public Database and Lock. Each
// operation is one statement; expiry is decided by the server's now().
#include <algorithm>
#include <stdexcept>

#include <redlock/errors.hpp>
#include <redlock/postgres.hpp>

#include "backends/postgres/pg_backend_base.hpp"
#include "backends/postgres/pg_sql.hpp"
#include "core/backend.hpp"
#include "core/engine.hpp"
#include "lock/lock_core.hpp"
#include "lock/rw_sides.hpp"
#include "util/sha1.hpp"

namespace redlock {
namespace detail {
namespace {

// The claim window of a hand-over: min(ttl, max(250 ms, 2 x statement_timeout)). A grant that
// is not claimed within it lapses, and the queue's head takes the lease on.
std::chrono::milliseconds claim_window(std::chrono::milliseconds ttl,
                                       std::chrono::milliseconds statement_timeout) {
  return std::min(ttl, std::max(std::chrono::milliseconds(250), 2 * statement_timeout));
}

// Every waiter queues (fair() is true whatever LockOptions::fair says): a release hands the
// lease to the oldest live waiter with one NOTIFY to its process (and tells the waiter after it
// that it is now second), and the other waiters sleep (pg_sql.hpp). The claim is an attempt
// with the granted token.
class PgLeaseBackend final : public PgBackendBase {
 public:
  PgLeaseBackend(std::shared_ptr<PgDatabase> db, std::string name, const LockOptions& options)
      : PgBackendBase(std::move(db), std::move(name), options),
        sql_(pg_statements(db_->table())),
        hears_grants_(options.wake_on_release),
        claim_(claim_window(options.ttl, db_->options().statement_timeout)),
        tag_prefix_(channel_.substr(channel_.size() - 16) + ":") {}

  bool fair() const noexcept override { return true; }

  AcquireResult acquire(const AcquireRequest& request) override {
    AcquireResult out;
    auto start = SteadyClock::now();
    const bool join = request.queue == Queue::join;
    try {
      // A place is of use once this process has a waiter id a hand-over can reach.
      const std::uint64_t id =
          join ? db_->listener()->identity(start + db_->options().statement_timeout) : 0;
      const PgUndo undo{sql_.release, {name_, *request.token, channel_}};
      const std::vector<std::string> params = {name_,
                                               *request.token,
                                               std::to_string(ttl_.count()),
                                               join ? "true" : "false",
                                               std::to_string(static_cast<long long>(id)),
                                               tag_prefix_ + sha1_hex(*request.token),
                                               std::to_string(claim_.count())};
      PgResult r = db_->exec("acquire " + name_, sql_.acquire, params, &undo);
      if (r.row.size() != 3) throw ProtocolError("postgres: acquire " + name_ + ": not 3 columns");
      if (!r.null[0]) {
        out.fence = std::stoull(r.row[0]);
        out.valid_until = extend_floor(start, ttl_);
        out.held = out.valid_until > SteadyClock::now();
        out.granted = out.held ? 1 : 0;
        if (!out.held) release(*request.token, Announce::quietly);
        return out;
      }
      if (!r.null[1])
        out.holder_pttl = std::chrono::milliseconds(std::max(0LL, std::stoll(r.row[1])));
      if (!r.null[2]) place(out, std::stoi(r.row[2]), id);
    } catch (const TimeoutError&) {
      // The attempt's undo (which also leaves the queue) may be queued behind it, and would take
      // a later place of the same token with it: the waiter takes a new token.
      out.left_queue = true;
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
          db_->exec("extend " + name_, sql_.extend, {name_, token, std::to_string(ttl.count())});
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
      PgResult r = db_->exec("release " + name_, sql_.release, {name_, token, channel_});
      // False also for a waiter's leave (its place was all the token had).
      const bool released = r.row.size() == 1 && r.row[0] == "t";
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

  bool watch_live() const noexcept override { return db_->waiter_id() != 0; }
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline,
                                      std::string token_sha1) override {
    return std::make_unique<PgWatch>(db_->listener(), tag_prefix_, token_sha1, deadline);
  }

 private:
  // A refused attempt with a place, `ahead` (0..2) places behind the head. The head and the
  // second watch the lease (the second one claim window longer: the head, or its grantee, goes
  // first); the others sleep until their grant. Only a place a grant can reach is `queued`.
  void place(AcquireResult& out, int ahead, std::uint64_t id) const noexcept {
    const bool queued = hears_grants_ && id != 0 && id == db_->waiter_id();
    out.watcher = !queued ? 0 : ahead <= 1 ? 1 : 3;  // the second's delay is in holder_pttl
    if (ahead == 1 && out.holder_pttl.count() >= 0) out.holder_pttl += claim_;
  }

  PgStatements sql_;
  bool hears_grants_;  // LockOptions::wake_on_release: waiters sleep until their grant
  std::chrono::milliseconds claim_;
  std::string tag_prefix_;  // "<the lock's 16 hex digits>:", before a token's SHA1
};

}  // namespace

void check_pg_text(std::string_view value, const char* argument) {
  if (value.find('\0') == std::string_view::npos) return;
  throw std::invalid_argument(std::string("redlock: ") + argument + " must not contain a NUL byte");
}

std::shared_ptr<LeaseBackend> make_pg_backend(const std::shared_ptr<PgDatabase>& db,
                                              std::string name, const LockOptions& options) {
  validate_lock_options(name, options);
  check_pg_text(name, "name");
  if (options.fair.value_or(false) && db->options().mode == postgres::Mode::session) {
    throw std::invalid_argument("options.fair: not supported in session mode (advisory locks)");
  }
  if (db->options().mode == postgres::Mode::session) {
    return make_pg_session_backend(db, std::move(name), options);
  }
  return std::make_shared<PgLeaseBackend>(db, std::move(name), options);
}

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
  std::shared_ptr<detail::LeaseBackend> backend = detail::make_pg_backend(db, name, options);
  return std::make_shared<detail::LockCore>(std::move(backend), std::move(options));
}
}  // namespace

Lock::Lock(Database& db, std::string name, LockOptions options)
    : LockBase(make_core(db.impl_, std::move(name), std::move(options))) {}

namespace {
std::unique_ptr<detail::RwSides> make_sides(const std::shared_ptr<detail::PgDatabase>& db,
                                            const std::string& name, const LockOptions& options) {
  detail::validate_lock_options(name, options);
  detail::check_pg_text(name, "name");
  if (options.fair.value_or(false)) {
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
