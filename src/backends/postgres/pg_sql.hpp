// src/backends/postgres/pg_sql.hpp: the lease table, its wake-one queue and the plpgsql functions
// that run them, in one place: the DDL that makes them (PgDatabase::ensure_table) and the
// statements the lease backend runs.
#ifndef REDLOCK_SRC_BACKENDS_POSTGRES_PG_SQL_HPP
#define REDLOCK_SRC_BACKENDS_POSTGRES_PG_SQL_HPP

#include <cctype>
#include <string>

namespace redlock {
namespace detail {

// The first key of the two-int advisory lock a Database's LISTEN session holds for life on its
// waiter id ("redl"): two-int keys never meet session mode's bigint ones. The second key is the
// id's low 31 bits (pg_waiter_key).
constexpr long kPgWaiterLockSpace = 0x7265646c;

// A lock's row stays when it is released (token '', expires_at the epoch): every operation on a
// name first locks its row (SELECT ... FOR UPDATE), so fences are drawn, and the queue changed,
// in the order the holds begin. One row per lock name ever used.
//
// The queue (`<table>_waiters`): one row per waiting acquire call (per token), in `seq` order,
// with its process's waiter id (`waiter`: the Database's LISTEN session, which holds the advisory
// lock (kPgWaiterLockSpace, waiter's low 31 bits) while it lives), the payload its grant carries
// (`note`: "<lock hash>:<SHA1 of the token>") and its claim window. A row needs no refresh: a
// hand-over that reaches the row of a dead process (its lock is free) deletes it and goes on.
//
// A refused attempt's reply counts the live places ahead of it (0..2, `<table>_place`).
// A hand-over (`<table>_hand`) sets the lease to the first live waiter's token for its claim
// window, draws its fence, deletes its row and sends ONE NOTIFY, "g:<note>", to that waiter's
// process channel ("redlock_w_<16 hex of the waiter id>"); the waiter claims it with an acquire
// with its token (the lease is then ours: the full ttl, the fence kept). The waiter after the new
// head is told "w:<note>": it is second, and watches the lease from its next attempt's reply.
struct PgStatements {
  // $1 name, $2 token, $3 ttl (ms), $4 join (bool), $5 waiter id, $6 note, $7 claim window (ms).
  // Takes the lease if it is ours (a claim) or free with no live waiter ahead; a free lease with
  // one is handed to it instead. Returns (fence if taken, the holder's remaining ms otherwise,
  // the number of places ahead of ours, 0..2, NULL without a place). Joins the queue if $4.
  std::string acquire;
  // $1 name, $2 token, $3 ttl (ms): token-checked, only while unexpired. One row if extended.
  std::string extend;
  // $1 name, $2 token. The holder's release hands the lease to the next live waiter (or frees
  // it); a waiter's leave deletes its place (and hands on a lapsed lease). One row: released?
  std::string release;
};

// Replaces every "T" placeholder word ("T", "T_waiters", "T_fence", ...) with the table name.
inline std::string pg_with_table(const char* text, const std::string& table) {
  std::string out;
  for (const char* p = text; *p != '\0'; ++p) {
    const bool word_start = p == text || !(std::isalnum(static_cast<unsigned char>(p[-1])) ||
                                           p[-1] == '_' || p[-1] == '$');
    if (*p == 'T' && word_start && !std::isalnum(static_cast<unsigned char>(p[1]))) {
      out += table;
    } else {
      out += *p;
    }
  }
  return out;
}

// T_next(name, after, self): the first row after seq `after` whose process lives (its LISTEN
// session holds its advisory lock; `self`, the caller, lives), deleting the dead rows it passes.
// T_place(name, token): live waiters ahead of the token's place, 0..2 (NULL: no place).
// T_notice: tells the waiter after the head that it is second (it then watches the lease).
// T_hand: hands the lease to the first live waiter (the caller holds the lease row's lock).
static_assert(kPgWaiterLockSpace == 1919247468, "the functions below spell it out");
constexpr const char* kPgFunctions = R"sql(
CREATE OR REPLACE FUNCTION T_next(p_name text, p_after bigint, p_self text) RETURNS T_waiters
LANGUAGE plpgsql AS $f$
DECLARE w T_waiters;
BEGIN
  FOR w IN SELECT * FROM T_waiters WHERE name = p_name AND seq > p_after ORDER BY seq LOOP
    IF w.token = p_self OR NOT pg_try_advisory_xact_lock_shared(1919247468,
        (w.waiter & 2147483647)::int) THEN
      RETURN w;
    END IF;
    DELETE FROM T_waiters WHERE name = p_name AND token = w.token;
  END LOOP;
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION T_place(p_name text, p_token text) RETURNS int LANGUAGE plpgsql AS $f$
DECLARE h T_waiters;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM T_waiters WHERE name = p_name AND token = p_token) THEN
    RETURN NULL;
  END IF;
  h := T_next(p_name, -1, p_token);
  IF h.token = p_token THEN RETURN 0; END IF;
  h := T_next(p_name, h.seq, p_token);
  IF h.token = p_token THEN RETURN 1; END IF;
  RETURN 2;
END $f$;
CREATE OR REPLACE FUNCTION T_notice(p_name text) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE h T_waiters; s T_waiters;
BEGIN
  h := T_next(p_name, -1, '');
  IF h.token IS NULL THEN RETURN; END IF;
  s := T_next(p_name, h.seq, '');
  IF s.token IS NOT NULL THEN
    PERFORM pg_notify('redlock_w_' || lpad(to_hex(s.waiter), 16, '0'), 'w:' || s.note);
  END IF;
END $f$;
CREATE OR REPLACE FUNCTION T_hand(p_name text) RETURNS boolean LANGUAGE plpgsql AS $f$
DECLARE w T_waiters;
BEGIN
  w := T_next(p_name, -1, '');
  IF w.token IS NULL THEN RETURN false; END IF;
  DELETE FROM T_waiters WHERE name = p_name AND token = w.token;
  UPDATE T SET token = w.token, fence = nextval('T_fence'),
    expires_at = clock_timestamp() + w.claim_ms * interval '1 millisecond' WHERE name = p_name;
  PERFORM pg_notify('redlock_w_' || lpad(to_hex(w.waiter), 16, '0'), 'g:' || w.note);
  PERFORM T_notice(p_name);
  RETURN true;
END $f$;
CREATE OR REPLACE FUNCTION T_acquire(p_name text, p_token text, p_ttl bigint, p_join boolean,
    p_waiter bigint, p_note text, p_claim bigint, OUT r_fence bigint, OUT r_holder_ms bigint,
    OUT r_place int) LANGUAGE plpgsql AS $f$
DECLARE l T; w T_waiters;
BEGIN
  INSERT INTO T (name, token, expires_at, fence) VALUES (p_name, '', to_timestamp(0), 0)
    ON CONFLICT (name) DO NOTHING;
  SELECT * INTO l FROM T WHERE name = p_name FOR UPDATE;
  IF l.token <> p_token AND l.expires_at < clock_timestamp() THEN
    w := T_next(p_name, -1, p_token);
    IF w.token IS NOT NULL AND w.token <> p_token THEN
      PERFORM T_hand(p_name);
      SELECT * INTO l FROM T WHERE name = p_name;
    END IF;
  END IF;
  IF l.token = p_token OR l.expires_at < clock_timestamp() THEN
    UPDATE T SET token = p_token,
      expires_at = clock_timestamp() + p_ttl * interval '1 millisecond',
      fence = CASE WHEN l.token = p_token THEN l.fence ELSE nextval('T_fence') END
      WHERE name = p_name RETURNING fence INTO r_fence;
    DELETE FROM T_waiters WHERE name = p_name AND token = p_token;
    IF FOUND THEN PERFORM T_notice(p_name); END IF;
    RETURN;
  END IF;
  r_holder_ms := ceil(extract(epoch FROM (l.expires_at - clock_timestamp())) * 1000)::bigint;
  IF p_join THEN
    INSERT INTO T_waiters (name, token, waiter, note, claim_ms)
      VALUES (p_name, p_token, p_waiter, p_note, p_claim)
      ON CONFLICT (name, token) DO UPDATE SET waiter = EXCLUDED.waiter, note = EXCLUDED.note;
  END IF;
  r_place := T_place(p_name, p_token);
END $f$;
CREATE OR REPLACE FUNCTION T_release(p_name text, p_token text, p_channel text) RETURNS boolean
LANGUAGE plpgsql AS $f$
DECLARE l T; ahead int;
BEGIN
  SELECT * INTO l FROM T WHERE name = p_name FOR UPDATE;
  IF NOT FOUND THEN RETURN false; END IF;
  IF l.token = p_token THEN
    DELETE FROM T_waiters WHERE name = p_name AND token = p_token;
    IF NOT T_hand(p_name) THEN
      UPDATE T SET token = '', expires_at = to_timestamp(0) WHERE name = p_name;
      PERFORM pg_notify(p_channel, '');  -- nobody waits: only observers (an Election) listen
    END IF;
    RETURN true;
  END IF;
  ahead := T_place(p_name, p_token);
  IF ahead IS NULL THEN RETURN false; END IF;
  DELETE FROM T_waiters WHERE name = p_name AND token = p_token;
  IF l.expires_at < clock_timestamp() THEN
    PERFORM T_hand(p_name);
  ELSIF ahead < 2 THEN
    PERFORM T_notice(p_name);
  END IF;
  RETURN false;
END $f$;
)sql";

// The DDL, one plpgsql block (idempotent; the advisory lock serialises concurrent creators).
inline std::string pg_schema(const std::string& t) {
  const std::string base = t.substr(t.find('.') + 1);  // an index is named without its schema
  return "DO $redlock$ BEGIN PERFORM pg_advisory_xact_lock(7270451); CREATE SEQUENCE IF NOT "
         "EXISTS " +
         t + "_fence; CREATE TABLE IF NOT EXISTS " + t +
         " (name text PRIMARY KEY, token text NOT NULL, expires_at timestamptz NOT NULL, fence "
         "bigint NOT NULL); CREATE TABLE IF NOT EXISTS " +
         t +
         "_waiters (name text NOT NULL, token text NOT NULL, seq bigserial, waiter bigint NOT "
         "NULL, note text NOT NULL, claim_ms bigint NOT NULL, PRIMARY KEY (name, token)); "
         "CREATE INDEX IF NOT EXISTS " +
         base + "_waiters_order ON " + t + "_waiters (name, seq);" +
         pg_with_table(kPgFunctions, t) + " END $redlock$";
}

// True (one row, "t") if every object of pg_schema exists.
inline std::string pg_schema_probe(const std::string& t) {
  return "SELECT to_regclass('" + t + "') IS NOT NULL AND to_regclass('" + t +
         "_fence') IS NOT NULL AND to_regclass('" + t +
         "_waiters') IS NOT NULL AND to_regprocedure('" + t +
         "_acquire(text,text,bigint,boolean,bigint,text,bigint)') IS NOT NULL AND "
         "to_regprocedure('" +
         t + "_release(text,text,text)') IS NOT NULL";
}

// `table` is a validated identifier (PgDatabase checks it).
inline PgStatements pg_statements(const std::string& t) {
  PgStatements s;
  s.acquire = "SELECT * FROM " + t + "_acquire($1, $2, $3, $4, $5, $6, $7)";
  s.extend = "UPDATE " + t +
             " SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' "
             "WHERE name = $1 AND token = $2 AND expires_at >= clock_timestamp()";
  s.release = "SELECT " + t + "_release($1, $2, $3)";
  return s;
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_POSTGRES_PG_SQL_HPP
