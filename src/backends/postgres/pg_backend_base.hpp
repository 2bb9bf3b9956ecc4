// src/backends/postgres/pg_backend_base.hpp: what the PostgreSQL component's two lease backends
// (lease mode's row, session mode's advisory lock) share behind the seam: one store (size and
// quorum 1), the drift allowance, renewals one by one, and wake-ups through the Database's
// LISTEN connection (session mode: a release notifies the lock's channel and every waiter of
// the lock tries pg_try_advisory_lock again; lease mode overrides fair() and the watch: a
// wake-one queue, pg_sql.hpp). Also the session backend's factory.
#ifndef REDLOCK_SRC_BACKENDS_POSTGRES_PG_BACKEND_BASE_HPP
#define REDLOCK_SRC_BACKENDS_POSTGRES_PG_BACKEND_BASE_HPP

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <redlock/options.hpp>

#include "backends/postgres/pg_database.hpp"
#include "backends/postgres/pg_listener.hpp"
#include "core/backend.hpp"
#include "core/engine.hpp"

namespace redlock {
namespace detail {

class PgBackendBase : public LeaseBackend {
 public:
  PgBackendBase(std::shared_ptr<PgDatabase> db, std::string name, const LockOptions& options)
      : db_(std::move(db)),
        name_(std::move(name)),
        ttl_(options.ttl),
        drift_(options.clock_drift_factor),
        channel_(pg_channel(db_->table(), name_)) {}

  const std::string& key() const noexcept override { return name_; }
  std::size_t size() const noexcept override { return 1; }
  std::size_t quorum() const noexcept override { return 1; }
  std::chrono::milliseconds ttl() const noexcept override { return ttl_; }
  bool fair() const noexcept override { return false; }
  AcquireResult handed_over(std::uint64_t, SteadyClock::time_point) const override { return {}; }

  SteadyClock::time_point extend_floor(SteadyClock::time_point start,
                                       std::chrono::milliseconds ttl) const noexcept override {
    return start + std::chrono::nanoseconds(ttl) - drift_of(ttl, drift_);
  }

  const void* batch_group() const noexcept override { return this; }
  // Every lease of one Database (one server) renews on one watchdog lane; other stores never
  // wait on this one's statements.
  std::uintptr_t renewal_lane() const noexcept override {
    return reinterpret_cast<std::uintptr_t>(db_.get());
  }

  std::size_t extend_many(RenewItem* items, std::size_t count) override {
    for (std::size_t i = 0; i < count; ++i) {
      if (SteadyClock::now() >= items[i].send_by) {  // an earlier statement took its time
        items[i].result = ExtendResult{};
        items[i].result.reason = LostReason::expired;
        items[i].refused = 0;
        continue;
      }
      items[i].result = items[i].backend->extend(*items[i].token, items[i].backend->ttl());
      items[i].refused = !items[i].result.held && !items[i].result.failure &&
                         items[i].result.reason == LostReason::refused;
    }
    return count;
  }

  bool watch_live() const noexcept override { return db_->listening(channel_); }
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline, std::string) override {
    return std::make_unique<PgWatch>(db_->listener(), channel_, deadline);
  }

 protected:
  std::shared_ptr<PgDatabase> db_;
  std::string name_;
  std::chrono::milliseconds ttl_;
  double drift_;
  std::string channel_;  // where session mode's releases are announced; its hash names the lock
};

// Names and ids are stored as text, which holds no NUL byte, and libpq sends them as C strings
// (`k\0a` would become `k`): throws std::invalid_argument naming `argument` if `value` has a NUL
// byte.
void check_pg_text(std::string_view value, const char* argument);

// The lease backend of a lock named `name` in `db`'s mode (lease: a row; session: an advisory
// lock). Throws std::invalid_argument for options a Lock rejects and a name with a NUL byte
// (pg_backend.cpp).
std::shared_ptr<LeaseBackend> make_pg_backend(const std::shared_ptr<PgDatabase>& db,
                                              std::string name, const LockOptions& options);
// Which advisory lock a session-mode backend takes: a Lock's, or a ReadWriteLock's writer
// (exclusive, with the writer-waiting marker row `<name>:writer-waiting`) or reader (shared).
enum class PgSessionSide { lock, writer, reader };

// Session mode's backend (pg_session.cpp).
std::shared_ptr<LeaseBackend> make_pg_session_backend(std::shared_ptr<PgDatabase> db,
                                                      std::string name, const LockOptions& options,
                                                      PgSessionSide side = PgSessionSide::lock);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_POSTGRES_PG_BACKEND_BASE_HPP
