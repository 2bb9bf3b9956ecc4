// src/backends/postgres/pg_backend.cpp: the lease backend (core/backend.hpp) over one
// PostgreSQL lease table, and the public Database and Lock. Each operation is one statement;
// expiry is decided by the server's now().
#include <stdexcept>

#include <redlock/errors.hpp>
#include <redlock/postgres.hpp>

#include "backends/postgres/pg_database.hpp"
#include "backends/postgres/pg_listener.hpp"
#include "backends/postgres/pg_sql.hpp"
#include "core/backend.hpp"
#include "core/engine.hpp"
#include "lock/lock_core.hpp"

namespace redlock {
namespace detail {
namespace {

class PgLeaseBackend final : public LeaseBackend {
 public:
  PgLeaseBackend(std::shared_ptr<PgDatabase> db, std::string name, const LockOptions& options)
      : db_(std::move(db)),
        name_(std::move(name)),
        ttl_(options.ttl),
        drift_(options.clock_drift_factor),
        channel_(pg_channel(db_->table(), name_)) {
    PgStatements sql = pg_statements(db_->table());
    acquire_sql_ = std::move(sql.acquire);
    extend_sql_ = std::move(sql.extend);
    release_sql_ = std::move(sql.release);
  }

  const std::string& key() const noexcept override { return name_; }
  std::size_t size() const noexcept override { return 1; }
  std::size_t quorum() const noexcept override { return 1; }
  std::chrono::milliseconds ttl() const noexcept override { return ttl_; }
  bool fair() const noexcept override { return false; }

  AcquireResult acquire(const AcquireRequest& request) override {
    AcquireResult out;
    auto start = SteadyClock::now();
    try {
      const PgUndo undo{release_sql_, {name_, *request.token, channel_}};
      PgResult r = db_->exec("acquire " + name_, acquire_sql_,
                             {name_, *request.token, std::to_string(ttl_.count())}, &undo);
      if (r.row.size() == 2 && !r.null[0]) {
        out.fence = std::stoull(r.row[0]);
        out.valid_until = extend_floor(start, ttl_);
        out.held = out.valid_until > SteadyClock::now();
        out.granted = out.held ? 1 : 0;
        if (!out.held) release(*request.token, Announce::quietly);
      } else if (r.row.size() == 2 && !r.null[1]) {
        out.holder_pttl = std::chrono::milliseconds(std::max(0LL, std::stoll(r.row[1])));
      }
    } catch (const Error&) {
      out.failure = std::current_exception();
    }
    return out;
  }

  AcquireResult handed_over(std::uint64_t, SteadyClock::time_point) const override { return {}; }

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

  SteadyClock::time_point extend_floor(SteadyClock::time_point start,
                                       std::chrono::milliseconds ttl) const noexcept override {
    return start + std::chrono::nanoseconds(ttl) - drift_of(ttl, drift_);
  }

  const void* batch_group() const noexcept override { return this; }

  std::size_t extend_many(RenewItem* items, std::size_t count) override {
    for (std::size_t i = 0; i < count; ++i) {
      items[i].result = items[i].backend->extend(*items[i].token, items[i].backend->ttl());
      items[i].refused = !items[i].result.held && !items[i].result.failure &&
                         items[i].result.reason == LostReason::refused;
    }
    return count;
  }

  ReleaseResult release(const std::string& token, Announce) override {
    ReleaseResult out;
    try {
      PgResult r = db_->exec("release " + name_, release_sql_, {name_, token, channel_});
      out.released = r.affected == 1 ? 1 : 0;
      out.refused = r.affected == 1 ? 0 : 1;
    } catch (const Error&) {
      out.failure = std::current_exception();
    }
    return out;
  }

  bool watch_live() const noexcept override { return db_->listening(channel_); }
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline, std::string) override {
    return std::make_unique<PgWatch>(db_->listener(), channel_, deadline);
  }

 private:
  std::shared_ptr<PgDatabase> db_;
  std::string name_;
  std::chrono::milliseconds ttl_;
  double drift_;
  std::string channel_;
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
  if (options.fair) throw std::invalid_argument("options.fair: not supported by postgres::Lock");
  auto backend = std::make_shared<detail::PgLeaseBackend>(db, std::move(name), options);
  return std::make_shared<detail::LockCore>(std::move(backend), std::move(options));
}
}  // namespace

Lock::Lock(Database& db, std::string name, LockOptions options)
    : LockBase(make_core(db.impl_, std::move(name), std::move(options))) {}

}  // namespace postgres
}  // namespace redlock
