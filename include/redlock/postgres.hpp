// redlock/postgres.hpp: a lease lock on PostgreSQL (optional component, CMake target
// redlock::postgres). One table holds the leases; the server's clock decides expiry. No libpq
// types appear here.
#ifndef REDLOCK_POSTGRES_HPP
#define REDLOCK_POSTGRES_HPP

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include <redlock/lock.hpp>
#include <redlock/options.hpp>

namespace redlock {
namespace detail {
class PgDatabase;
}  // namespace detail

namespace postgres {

struct DatabaseOptions {
  // The lease table (created if missing, with its sequence `<table>_fence`). A plain SQL
  // identifier: letters, digits and '_', optionally schema-qualified with one '.'.
  std::string table{"redlock_leases"};
  // Set as statement_timeout on every connection; the client also gives up on a statement
  // after statement_timeout + 1 s (a stopped server) and throws TimeoutError.
  std::chrono::milliseconds statement_timeout{2000};
  // Most connections open at once; callers beyond it wait for a free one.
  std::size_t pool_size{4};
};

// A small pool of libpq connections to one database, shared by the Locks made from it.
class Database {
 public:
  // `uri`: a libpq connection string or URI (`postgresql://user[:password]@host:port/db?...`).
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty uri,
  // a bad table name, statement_timeout <= 0 or pool_size 0. Thread-safe once built.
  explicit Database(std::string_view uri, DatabaseOptions options = {});
  ~Database();
  Database(const Database&) = default;
  Database& operator=(const Database&) = default;

  // Creates the lease table and its sequence if missing (each Lock's first statement does it
  // too). Throws ConnectionError (unreachable), TimeoutError (statement_timeout), ServerError
  // (permission denied, a table of the wrong shape). Thread-safe.
  void ensure_table();

  // The options given (after validation). Thread-safe.
  const DatabaseOptions& options() const noexcept;

 private:
  friend class Lock;
  std::shared_ptr<detail::PgDatabase> impl_;
};

// A lease in the database's lease table: same members as redlock::Lock (TimedLockable,
// re-entrant for the owning thread, ttl, auto_renew, on_lost, fencing). Acquire is one
// INSERT ... ON CONFLICT DO UPDATE ... WHERE expires_at < now(); release a token-checked DELETE;
// extend a token-checked UPDATE; the fence comes from a sequence. Failures throw
// ConnectionError, TimeoutError or ServerError (never counted as held).
class Lock final : public LockBase {
 public:
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty name,
  // the options Lock rejects, and options.fair (not supported on PostgreSQL yet).
  Lock(Database& db, std::string name, LockOptions options = {});
};

}  // namespace postgres
}  // namespace redlock

#endif  // REDLOCK_POSTGRES_HPP
