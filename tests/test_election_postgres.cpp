// [postgres][election]: redlock::postgres::Election against a real PostgreSQL 15: hand-over on
// resign with a higher term, leader() from a non-candidate, observe() over LISTEN, a killed
// session (the lease row outlives it) and run() stopping its worker when the lease is taken.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <redlock/election.hpp>
#include <redlock/postgres.hpp>

#include "election_worker.hpp"
#include "support/eventually.hpp"
#include "support/postgres_server.hpp"

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::PostgresServer;
using redlock::test::with_ttl;
using Clock = std::chrono::steady_clock;

TEST_CASE("postgres::Election: resign hands over at once, the term grows, leader() and observe()",
          "[postgres][election]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::postgres::Election watcher(db, "svc", "watcher", with_ttl(60s));
  redlock::postgres::Election a(db, "svc", "a", with_ttl(60s));
  redlock::postgres::Election b(db, "svc", "b", with_ttl(60s));
  redlock::test::check_hand_over(a, b, watcher);
}

TEST_CASE(
    "postgres::Election: a killed session keeps the lease, a taken lease stops run()'s worker",
    "[postgres][election]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::postgres::Election election(db, "runner", "r", with_ttl(900ms));
  redlock::postgres::Election watcher(db, "runner", "watcher");
  redlock::test::RecordingWorker worker(election);
  REQUIRE(eventually([&] { return worker.started() == 1; }));

  // pg_terminate_backend of every client session: the lease is a row, renewed over a new
  // connection; the term goes on.
  server.psql(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'postgres' AND pid "
      "<> pg_backend_pid() AND backend_type = 'client backend'");
  std::this_thread::sleep_for(1500ms);  // more than one ttl: renewals went on
  CHECK(worker.stopped() == 0);
  CHECK(election.is_leader());
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->term == election.term());

  // Another client takes the row over: the next renewal is refused and the worker stopped.
  server.psql(
      "UPDATE redlock_leases SET token = 'intruder', expires_at = clock_timestamp() + "
      "interval '1500 milliseconds' WHERE name = 'runner:leader'");
  CHECK(eventually([&] { return worker.stopped() == 1; }));
  CHECK_FALSE(watcher.leader());  // the intruder never claimed
  REQUIRE(eventually([&] { return worker.started() == 2; }));
  CHECK(worker.terms()[1] > worker.terms()[0]);
  worker.stop_and_join();
  CHECK(worker.stopped() == 2);
  CHECK_FALSE(watcher.leader());
}

TEST_CASE("postgres::Election: a Database in session mode is refused", "[postgres][election]") {
  redlock::postgres::DatabaseOptions options;
  options.mode = redlock::postgres::Mode::session;
  redlock::postgres::Database db("postgresql://127.0.0.1:1/none", options);
  CHECK_THROWS_AS(redlock::postgres::Election(db, "x", "id"), std::invalid_argument);
}
