// src/backends/postgres/pg_sql.hpp: the lease table's statements, in one place: the backend
// runs them, and redlock-bench's raw libpq floor runs the very same text.
#ifndef REDLOCK_SRC_BACKENDS_POSTGRES_PG_SQL_HPP
#define REDLOCK_SRC_BACKENDS_POSTGRES_PG_SQL_HPP

#include <string>

namespace redlock {
namespace detail {

struct PgStatements {
  // $1 name, $2 token, $3 ttl (ms). Takes the row if it is free, expired (by the server's
  // clock) or already ours; returns (fence if taken, the holder's remaining ms otherwise).
  std::string acquire;
  // $1 name, $2 token, $3 ttl (ms): token-checked, only while unexpired. One row if extended.
  std::string extend;
  // $1 name, $2 token, $3 channel: token-checked DELETE that notifies the lock's channel (when
  // it commits). One row if released.
  std::string release;
};

// `table` is a validated identifier (PgDatabase checks it).
inline PgStatements pg_statements(const std::string& t) {
  PgStatements s;
  s.acquire = "WITH got AS (INSERT INTO " + t +
              " AS l (name, token, expires_at, fence) VALUES ($1, $2, clock_timestamp() + "
              "$3::bigint * interval '1 millisecond', nextval('" +
              t +
              "_fence')) ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, expires_at = "
              "EXCLUDED.expires_at, fence = EXCLUDED.fence WHERE l.expires_at < "
              "clock_timestamp() OR l.token = EXCLUDED.token RETURNING l.fence) SELECT (SELECT "
              "fence FROM got), (SELECT ceil(extract(epoch FROM (expires_at - "
              "clock_timestamp())) * 1000)::bigint FROM " +
              t + " WHERE name = $1)";
  s.extend = "UPDATE " + t +
             " SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' "
             "WHERE name = $1 AND token = $2 AND expires_at >= clock_timestamp()";
  s.release = "WITH gone AS (DELETE FROM " + t +
              " WHERE name = $1 AND token = $2 RETURNING name) SELECT pg_notify($3, name) FROM "
              "gone";
  return s;
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_POSTGRES_PG_SQL_HPP
