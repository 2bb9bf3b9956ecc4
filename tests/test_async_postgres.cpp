// The async operations (redlock/detail/async.hpp) on a postgres::Lock: a waiter completed by the
// release it hears (PgWatch's waker), a timed one that gives up, a cancelled one that leaves no
// queue row.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include <redlock/postgres.hpp>

#include "support/async_outcome.hpp"
#include "support/postgres_server.hpp"

TEST_CASE("async: postgres::Lock waits, gives up and is cancelled without a thread",
          "[postgres][async]") {
  using redlock::test::PostgresServer;
  if (!PostgresServer::available()) {
    if (std::getenv("CI")) FAIL("postgresql-15 is missing in CI");
    WARN("skipped: postgresql-15 not installed in " + PostgresServer::bin_dir());
    return;
  }
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::postgres::Database other(server.uri());
  redlock::postgres::Lock holder(db, "async", redlock::test::slow_options());
  redlock::postgres::Lock waiter(other, "async", redlock::test::slow_options());
  redlock::test::waits_and_cancels(holder, waiter, [&] {
    return std::stoi(server.psql("SELECT count(*) FROM redlock_leases_waiters"));
  });
}
