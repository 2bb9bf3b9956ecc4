// src/backends/postgres/pg_sql.hpp: the lease table's statements, in one place: the backend
// runs them, and redlock-bench's raw libpq floor runs the very same text.
#ifndef REDLOCK_SRC_BACKENDS_POSTGRES_PG_SQL_HPP
#define REDLOCK_SRC_BACKENDS_POSTGRES_PG_SQL_HPP

#include <string>

namespace redlock {
namespace detail {

// A lock's row stays when it is released (token '', expires_at the epoch): every later acquire
// then takes it over with UPDATE, which waits for the row's lock, so fences are drawn in the
// order the holds begin. (With a DELETE on release, an acquire that drew its fence in VALUES and
// was then descheduled could insert the row after a later-drawn fence's hold had ended: the
// torture run saw 3 such inversions in 20 s.) One row per lock name ever used.
struct PgStatements {
  // $1 name, $2 token, $3 ttl (ms). Takes the row if it is new, free, expired (by the server's
  // clock) or already ours; returns (fence if taken, the holder's remaining ms otherwise).
  std::string acquire;
  // $1 name, $2 token, $3 ttl (ms): token-checked, only while unexpired. One row if extended.
  std::string extend;
  // $1 name, $2 token, $3 channel: token-checked; frees the row and notifies the lock's channel
  // (when it commits). One row if released.
  std::string release;
  // Fair mode, with the queue table `<table>_queue` (name, token, seq, expires_at). $1 name,
  // $2 token, $3 ttl (ms), $4 join (bool), $5 the queue place's life (ms). Takes the row only
  // for the queue's head (the oldest live place but ours, if any, came after us); otherwise
  // joins or refreshes our place if $4. A grant gives the place up; expired places of crashed
  // waiters are swept. Returns as `acquire`.
  std::string fair_acquire;
  // $1 name, $2 token, $3 channel: frees the row if ours and leaves the queue; notifies if
  // either happened (a head that leaves lets the next one in). One row (released?) if it did
  // anything.
  std::string fair_release;
};

// The holder's remaining ms: NULL if the row is free or expired (nothing to wait out).
inline std::string holder_ms(const std::string& t) {
  return "(SELECT ceil(extract(epoch FROM (expires_at - clock_timestamp())) * 1000)::bigint FROM " +
         t + " WHERE name = $1 AND expires_at > clock_timestamp())";
}

// `table` is a validated identifier (PgDatabase checks it).
inline PgStatements pg_statements(const std::string& t) {
  const std::string seq = "nextval('" + t + "_fence')";
  PgStatements s;
  s.acquire = "WITH got AS (INSERT INTO " + t +
              " AS l (name, token, expires_at, fence) VALUES ($1, $2, clock_timestamp() + "
              "$3::bigint * interval '1 millisecond', " +
              seq +
              ") ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, expires_at = "
              "EXCLUDED.expires_at, fence = CASE WHEN l.token = EXCLUDED.token THEN l.fence "
              "ELSE " +
              seq +
              " END WHERE l.expires_at < clock_timestamp() OR l.token = EXCLUDED.token "
              "RETURNING l.fence) SELECT (SELECT fence FROM got), " +
              holder_ms(t);
  s.extend = "UPDATE " + t +
             " SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' "
             "WHERE name = $1 AND token = $2 AND expires_at >= clock_timestamp()";
  s.release = "WITH gone AS (UPDATE " + t +
              " SET token = '', expires_at = to_timestamp(0) WHERE name = $1 AND token = $2 "
              "RETURNING name) SELECT pg_notify($3, name) FROM gone";
  const std::string q = t + "_queue";
  const std::string expiry = "clock_timestamp() + $3::bigint * interval '1 millisecond'";
  s.fair_acquire =
      "WITH mine AS (SELECT seq FROM " + q + " WHERE name = $1 AND token = $2), head AS (SELECT " +
      "NOT EXISTS (SELECT 1 FROM " + q + " WHERE name = $1 AND token <> $2 AND expires_at > " +
      "clock_timestamp() AND seq < COALESCE((SELECT seq FROM mine), 9223372036854775807)) AS " +
      "ok), got AS (INSERT INTO " + t + " AS l (name, token, expires_at, fence) SELECT $1, $2, " +
      expiry + ", " + seq + " FROM head WHERE head.ok ON CONFLICT (name) DO UPDATE SET token = " +
      "EXCLUDED.token, expires_at = EXCLUDED.expires_at, fence = CASE WHEN l.token = " +
      "EXCLUDED.token THEN l.fence ELSE " + seq + " END WHERE l.expires_at < clock_timestamp() " +
      "OR l.token = EXCLUDED.token RETURNING l.fence), joined AS (INSERT INTO " + q +
      " (name, token, expires_at) SELECT $1, $2, clock_timestamp() + $5::bigint * interval '1 " +
      "millisecond' WHERE $4::boolean AND NOT EXISTS (SELECT 1 FROM got) ON CONFLICT (name, " +
      "token) DO UPDATE SET expires_at = EXCLUDED.expires_at), swept AS (DELETE FROM " + q +
      " WHERE name = $1 AND ((token = $2 AND EXISTS (SELECT 1 FROM got)) OR expires_at < " +
      "clock_timestamp())) SELECT (SELECT fence FROM got), " + holder_ms(t);
  s.fair_release =
      "WITH gone AS (UPDATE " + t +
      " SET token = '', expires_at = to_timestamp(0) WHERE name = $1 AND token = $2 "
      "RETURNING name), left_queue AS (DELETE FROM " +
      q + " WHERE name = $1 AND token = $2 RETURNING name) SELECT EXISTS (SELECT 1 FROM gone), " +
      "pg_notify($3, $1) WHERE EXISTS (SELECT 1 FROM gone) OR EXISTS (SELECT 1 FROM left_queue)";
  return s;
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_POSTGRES_PG_SQL_HPP
