// src/backends/postgres/pg_database.cpp: libpq connections, pooled; one statement at a time,
// with a client-side deadline so a stopped server cannot block a caller forever.
#include "backends/postgres/pg_database.hpp"

#include "backends/postgres/pg_listener.hpp"
#include "backends/postgres/pg_sql.hpp"

#include <poll.h>

#include <libpq-fe.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include <redlock/errors.hpp>

namespace redlock {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

bool valid_table_name(const std::string& name) {
  if (name.empty() || name.size() > 120) return false;
  std::size_t dots = 0;
  for (char c : name) {
    if (c == '.') {
      ++dots;
    } else if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9'))) {
      return false;
    }
  }
  return dots <= 1 && name.front() != '.' && name.back() != '.';
}

// libpq's message on one line: its line breaks (and the tab that indents a hint) become "; ".
std::string trimmed(const char* text) {
  std::string s;
  for (const char* p = text ? text : ""; *p != '\0'; ++p) {
    if (*p == '\n') {
      while (p[1] == '\t' || p[1] == ' ') ++p;
      if (p[1] != '\0') s += "; ";
    } else {
      s += *p;
    }
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Throws the redlock::Error for a failed result (or none: the connection broke).
[[noreturn]] void throw_failure(const char* what, PGconn* conn, PGresult* res) {
  std::string message = trimmed(res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
  const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string code = state ? state : "";
  if (res) PQclear(res);
  std::string head = std::string("postgres: ") + what + " failed: ";
  if (code == "57014") throw TimeoutError(head + "statement_timeout passed (" + message + ")");
  if (PQstatus(conn) == CONNECTION_BAD || code.rfind("08", 0) == 0 || code.rfind("57P", 0) == 0)
    throw ConnectionError(head + "connection lost (" + message + ")");
  throw ServerError(head + message + " [SQLSTATE " + code + "]", message);
}

}  // namespace

bool pg_wait_result(PGconn* conn, Clock::time_point deadline) {
  while (PQisBusy(conn)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{PQsocket(conn), POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(left.count()) + 1);
    if (rc < 0 && errno != EINTR) return true;  // PQconsumeInput reports the failure
    if (rc > 0 && !PQconsumeInput(conn)) return true;
  }
  return true;
}

namespace {

// Takes `mode=...` out of a postgresql:// URI's query (libpq would refuse it) into `options`.
std::string without_mode(std::string uri, postgres::DatabaseOptions& options) {
  const bool is_uri = uri.rfind("postgresql://", 0) == 0 || uri.rfind("postgres://", 0) == 0;
  const auto query = uri.find('?');
  if (!is_uri || query == std::string::npos) return uri;
  std::string kept;
  std::size_t at = query + 1;
  while (at <= uri.size()) {
    const auto end = std::min(uri.find('&', at), uri.size());
    const std::string param = uri.substr(at, end - at);
    if (param.rfind("mode=", 0) == 0) {
      const std::string value = param.substr(5);
      const auto mode = value == "lease" ? postgres::Mode::lease
                        : value == "session"
                            ? postgres::Mode::session
                            : throw std::invalid_argument("uri: mode=" + value +
                                                          " is not a mode (lease or session)");
      if (mode != options.mode && options.mode != postgres::Mode::lease) {
        throw std::invalid_argument("uri: mode=" + value + " contradicts options.mode");
      }
      options.mode = mode;
    } else if (!param.empty()) {
      kept += (kept.empty() ? "" : "&") + param;
    }
    at = end + 1;
  }
  return uri.substr(0, query) + (kept.empty() ? "" : "?" + kept);
}

}  // namespace

namespace {

// One statement on `conn`. Throws as PgDatabase::exec; `broken` says the connection is unusable.
PgResult run(PGconn* conn, const std::string& what, const std::string& sql,
             const std::vector<std::string>& params, Clock::time_point deadline, bool& broken) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  broken = true;
  if (!PQsendQueryParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                         nullptr, nullptr, 0))
    throw_failure(what.c_str(), conn, nullptr);
  if (!pg_wait_result(conn, deadline))
    throw TimeoutError(std::string("postgres: ") + what +
                       " failed: no answer before the client deadline (server stopped?)");
  PgResult out;
  PGresult* res = PQgetResult(conn);
  ExecStatusType status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    broken = PQstatus(conn) != CONNECTION_OK;
    while (PGresult* more = PQgetResult(conn)) PQclear(more);
    throw_failure(what.c_str(), conn, res);
  }
  if (PQntuples(res) > 0) {
    for (int c = 0; c < PQnfields(res); ++c) {
      out.row.emplace_back(PQgetvalue(res, 0, c));
      out.null.push_back(PQgetisnull(res, 0, c) != 0);
    }
  }
  const char* tuples = PQcmdTuples(res);
  out.affected = (tuples && *tuples) ? std::atol(tuples) : 0;
  PQclear(res);
  while (PGresult* more = PQgetResult(conn)) PQclear(more);
  broken = PQstatus(conn) != CONNECTION_OK;
  return out;
}

}  // namespace

PgDatabase::PgDatabase(std::string uri, postgres::DatabaseOptions options)
    : uri_(without_mode(std::move(uri), options)), options_(std::move(options)) {
  if (uri_.empty()) throw std::invalid_argument("uri: empty");
  if (!valid_table_name(options_.table))
    throw std::invalid_argument("options.table: not a plain SQL identifier: " + options_.table);
  if (options_.statement_timeout.count() <= 0)
    throw std::invalid_argument("options.statement_timeout: must be > 0");
  if (options_.pool_size == 0) throw std::invalid_argument("options.pool_size: must be > 0");
}

PgDatabase::~PgDatabase() {
  for (PGconn* conn : idle_) PQfinish(conn);
  for (PGconn* conn : idle_dedicated_) PQfinish(conn);
}

Clock::time_point PgDatabase::client_deadline() const {
  return Clock::now() + options_.statement_timeout + std::chrono::seconds(1);
}

PGconn* PgDatabase::connect() {
  auto seconds = std::max<long long>(
      2, std::chrono::duration_cast<std::chrono::seconds>(options_.statement_timeout).count() + 1);
  std::string timeout = std::to_string(seconds);
  const char* keys[] = {"dbname", "connect_timeout", nullptr};
  const char* values[] = {uri_.c_str(), timeout.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, 1);
  if (!conn) throw std::bad_alloc();
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = trimmed(PQerrorMessage(conn));
    PQfinish(conn);
    if (message.find("timeout expired") != std::string::npos)
      throw TimeoutError("postgres: connect timed out: " + message);
    throw ConnectionError("postgres: could not connect: " + message);
  }
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);  // "already exists, skipping"
  // With the client deadline of any statement: a server that stops answering now must not
  // block the caller (review 3, item 7: a blocking PQexec waited for ever).
  const std::string set =
      "SET statement_timeout = " + std::to_string(options_.statement_timeout.count());
  bool broken = true;
  try {
    run(conn, "SET statement_timeout", set, {}, client_deadline(), broken);
  } catch (...) {
    PQfinish(conn);
    throw;
  }
  return conn;
}

PGconn* PgDatabase::take(Clock::time_point deadline) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!freed_.wait_until(lock, deadline,
                           [&] { return !idle_.empty() || open_ < options_.pool_size; })) {
      throw TimeoutError("postgres: all " + std::to_string(options_.pool_size) +
                         " pooled connections (DatabaseOptions::pool_size) stayed busy for "
                         "statement_timeout + 1 s; the statement was not sent");
    }
    if (!idle_.empty()) {
      PGconn* conn = idle_.back();
      idle_.pop_back();
      return conn;
    }
    ++open_;
  }
  try {
    return connect();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    --open_;
    freed_.notify_one();
    throw;
  }
}

void PgDatabase::give_back(PGconn* conn, bool healthy) noexcept {
  if (!healthy || PQstatus(conn) != CONNECTION_OK) {
    PQfinish(conn);
    std::lock_guard<std::mutex> lock(mutex_);
    --open_;
  } else {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(conn);
  }
  freed_.notify_one();
}

namespace {

// Runs on its own thread: waits for the abandoned statement's answer, sends `undo` on the same
// connection (so it runs after the statement, whenever that is), and closes the connection.
// Best effort: a connection that breaks is closed (the server then ends the statement's
// transaction, or the statement already ran and nothing can undo it but its ttl).
void finish_abandoned(PGconn* conn, PgUndo undo, Clock::time_point deadline) noexcept {
  if (pg_wait_result(conn, deadline)) {
    while (PGresult* res = PQgetResult(conn)) PQclear(res);
    std::vector<const char*> values;
    for (const auto& p : undo.params) values.push_back(p.c_str());
    if (PQsendQueryParams(conn, undo.sql.c_str(), static_cast<int>(values.size()), nullptr,
                          values.data(), nullptr, nullptr, 0) &&
        pg_wait_result(conn, deadline)) {
      while (PGresult* res = PQgetResult(conn)) PQclear(res);
    }
  }
  PQfinish(conn);
}

}  // namespace

void PgDatabase::abandon(PGconn* conn, const PgUndo& undo) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --open_;  // no longer the pool's
  }
  freed_.notify_one();
  const auto deadline = Clock::now() + options_.statement_timeout * 10 + std::chrono::seconds(30);
  try {
    std::thread(finish_abandoned, conn, undo, deadline).detach();
  } catch (...) {  // no thread: close it here; the statement may still land (one ttl)
    PQfinish(conn);
  }
}

PgResult PgDatabase::exec(const std::string& what, const std::string& sql,
                          const std::vector<std::string>& params, const PgUndo* undo) {
  if (!table_ready_.load(std::memory_order_acquire)) ensure_table();
  for (int tries = 0;; ++tries) {
    PGconn* conn = take(client_deadline());
    auto deadline = client_deadline();
    bool broken = true;
    try {
      PgResult out = run(conn, what, sql, params, deadline, broken);
      give_back(conn, !broken);
      out.resent = tries > 0;
      return out;
    } catch (const TimeoutError&) {
      // `broken`: no answer before the client deadline, the statement may still run.
      if (broken && undo != nullptr && PQstatus(conn) == CONNECTION_OK) {
        abandon(conn, *undo);
      } else {
        give_back(conn, !broken);
      }
      throw;
    } catch (const ConnectionError&) {
      give_back(conn, false);
      // A pooled connection may have died while idle (server restart, terminated backend):
      // once more on a new one. Every statement is idempotent for its token.
      if (tries > 0) throw;
    } catch (...) {
      give_back(conn, !broken);
      throw;
    }
  }
}

std::shared_ptr<PgListener> PgDatabase::listener() {
  std::lock_guard<std::mutex> lock(listener_mutex_);
  if (!listener_) {
    listener_ =
        std::make_shared<PgListener>(uri_, options_.statement_timeout + std::chrono::seconds(1));
  }
  return listener_;
}

bool PgDatabase::listening(const std::string& channel) const noexcept {
  std::lock_guard<std::mutex> lock(listener_mutex_);
  return listener_ && listener_->live(channel);
}

std::uint64_t PgDatabase::waiter_id() const noexcept {
  std::lock_guard<std::mutex> lock(listener_mutex_);
  return listener_ ? listener_->identified() : 0;
}

PGconn* PgDatabase::dedicated() {
  if (!table_ready_.load(std::memory_order_acquire)) ensure_table();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_dedicated_.empty()) {
      PGconn* conn = idle_dedicated_.back();
      idle_dedicated_.pop_back();
      return conn;
    }
  }
  return connect();
}

PgResult PgDatabase::exec_on(PGconn* conn, const std::string& what, const std::string& sql,
                             const std::vector<std::string>& params, bool& broken) {
  const auto deadline = client_deadline();
  return run(conn, what, sql, params, deadline, broken);
}

void PgDatabase::retire(PGconn* conn, bool healthy) noexcept {
  if (healthy && PQstatus(conn) == CONNECTION_OK) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_dedicated_.size() < options_.pool_size) {
      idle_dedicated_.push_back(conn);
      return;
    }
  }
  PQfinish(conn);
}

// One attempt at a time. A caller that waited while an attempt failed gets that failure: the
// server just did not answer, and a turn of its own for each queued caller would make the wait
// grow with their number. So a silent server costs every caller one attempt's bound at most.
void PgDatabase::ensure_table() {
  const std::uint64_t failures_seen = ddl_failures_.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> once(ddl_mutex_);
  if (table_ready_.load(std::memory_order_acquire)) return;
  if (ddl_failures_.load(std::memory_order_relaxed) != failures_seen) {
    std::rethrow_exception(ddl_failure_);
  }
  try {
    create_table();
  } catch (...) {
    ddl_failure_ = std::current_exception();
    ddl_failures_.fetch_add(1, std::memory_order_release);
    throw;
  }
}

// Runs on a pooled connection with the client deadline of any statement (connect_timeout, then
// statement_timeout + 1 s a statement). ddl_mutex_ is held.
void PgDatabase::create_table() {
  const std::string& t = options_.table;
  // One statement each. An existing table and its functions need no DDL (and a user without
  // CREATE on the schema may use them).
  const std::string ddl = pg_schema(t);
  const std::string probe = pg_schema_probe(t);
  PGconn* conn = take(client_deadline());
  bool broken = true;
  try {
    const PgResult exists =
        run(conn, "probing the lease table " + t, probe, {}, client_deadline(), broken);
    if (exists.row.empty() || exists.row[0] != "t") {
      run(conn, "creating the lease table " + t, ddl, {}, client_deadline(), broken);
    }
  } catch (...) {
    give_back(conn, !broken);
    throw;
  }
  give_back(conn, !broken);
  table_ready_.store(true, std::memory_order_release);
}

}  // namespace detail
}  // namespace redlock
