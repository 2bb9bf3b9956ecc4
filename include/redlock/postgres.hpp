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

#include <redlock/election.hpp>  // redlock::Election
#include <redlock/errors.hpp>    // what Database and Lock throw
#include <redlock/lock.hpp>
#include <redlock/options.hpp>
#include <redlock/rwlock.hpp>  // ReadWriteLock (postgres::ReadWriteLock's members)

namespace redlock {
namespace detail {
class PgDatabase;
}  // namespace detail

namespace postgres {

// How a Lock holds its lock (see docs/backends.md: "PostgreSQL" and "Redis, Redlock or
// ZooKeeper?").
enum class Mode {
  // A row in the lease table with an expiry by the server's clock: it survives its holder's
  // connection (and a server restart); a crashed holder blocks others until the ttl passes.
  lease,
  // pg_try_advisory_lock on a 64-bit hash of the table and name, held by one connection of the
  // holder's own: released the moment that connection dies (a crash frees it at once), and lost
  // with it; the watchdog's check of the connection (auto_renew) tells on_lost. The fence
  // still comes from the table's sequence.
  session,
};

struct DatabaseOptions {
  // Also `mode=lease` or `mode=session` in the URI's query (taken out before libpq sees it).
  Mode mode{Mode::lease};
  // The lease table (created if missing, with its sequence `<table>_fence`). A plain SQL
  // identifier: letters, digits and '_', optionally schema-qualified with one '.'.
  std::string table{"redlock_leases"};
  // Set as statement_timeout on every connection; the client also gives up on a statement
  // after statement_timeout + 1 s (a stopped server) and throws TimeoutError.
  std::chrono::milliseconds statement_timeout{2000};
  // Most connections open at once; callers beyond it wait for a free one, at most
  // statement_timeout + 1 s (then TimeoutError, nothing sent).
  std::size_t pool_size{4};
};

// A small pool of libpq connections to one database, shared by the Locks made from it.
class Database {
 public:
  // `uri`: a libpq connection string or URI (`postgresql://user[:password]@host:port/db?...`).
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty uri,
  // a `mode` in the URI other than lease or session (or one that contradicts options.mode), a
  // bad table name, statement_timeout <= 0 or pool_size 0. Thread-safe once built.
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
  friend class Election;
  friend class ReadWriteLock;
  std::shared_ptr<detail::PgDatabase> impl_;
};

// A lease in the database's lease table: same members as redlock::Lock (TimedLockable,
// re-entrant for the owning thread, ttl, auto_renew, on_lost, fencing, fair). Acquire is one
// INSERT ... ON CONFLICT DO UPDATE ... WHERE expires_at < now(); release a token-checked UPDATE
// that frees the row; extend a token-checked UPDATE; the fence comes from a sequence. Failures
// throw ConnectionError, TimeoutError or ServerError (never counted as held).
class Lock final : public LockBase {
 public:
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty name, a
  // name with a NUL byte (a text column cannot hold it), the options Lock rejects, and
  // options.fair in session mode.
  Lock(Database& db, std::string name, LockOptions options = {});
};

// Leader election (redlock/election.hpp) on the lease table: the leader's lease is the row
// `<name>:leader` (the term is its fence, from the table's sequence), its id the row
// `<name>:leader:id`; observe() listens on the lock's channel (LISTEN, no polling). The lease
// outlives its connection: a killed session is reconnected and the term goes on; a leader
// whose renewals fail steps down when its validity runs out. leader() is one statement.
class Election final : public redlock::Election {
 public:
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty name
  // or id, a name or id with a NUL byte (a text column cannot hold it), options outside their
  // ranges, and a Database in session mode.
  Election(Database& db, std::string name, std::string id, ElectionOptions options = {});
};

// Shared readers and an exclusive writer, in session mode only (DatabaseOptions::mode or
// `mode=session`): the writer holds pg_try_advisory_lock on the name's 64-bit hash, each reader
// pg_try_advisory_lock_shared on it, each on a dedicated connection, so a crashed holder frees
// it at once. Writer preference: a writer that waits (not try_lock()) keeps a row
// `<name>:writer-waiting` in the lease table (expiring by the server's clock after max(250 ms,
// 5 * retry_delay), at most ttl; refreshed by each retry, removed by its grant) and no new
// reader enters while it is live. The writer's fence comes from the table's sequence; a reader's
// fence_shared() is 0. Every release is announced on the name's channel (LISTEN), which waiting
// readers and writers hear. Members are redlock::ReadWriteLock's (one reader hold per object,
// re-entrant per side), except downgrade(), which throws std::logic_error (an advisory lock held
// exclusive cannot become shared on another connection without a gap).
class ReadWriteLock final : public redlock::ReadWriteLock {
 public:
  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty name, a
  // name with a NUL byte, the options Lock rejects, options.fair, and a Database in lease mode.
  ReadWriteLock(Database& db, std::string name, LockOptions options = {});
};

}  // namespace postgres
}  // namespace redlock

#endif  // REDLOCK_POSTGRES_HPP
