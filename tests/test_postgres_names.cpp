// [postgres]: names and ids the PostgreSQL component cannot store whole (issue 42, defect 6).
// libpq sends text parameters as C strings and a text column holds no NUL byte, so "k\0a" and
// "k\0b" would both be stored as "k": two locks that exclude each other, two elections that
// overwrite each other's lease. Such a lock name, election name or candidate id is refused with
// std::invalid_argument naming the argument, before anything reaches the server.
#include <chrono>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

#include <redlock/election.hpp>
#include <redlock/postgres.hpp>

#include "support/postgres_server.hpp"

using namespace std::chrono_literals;
using redlock::test::PostgresServer;

namespace {
const std::string kNulA("k\0a", 3);
const std::string kNulB("k\0b", 3);
}  // namespace

TEST_CASE(
    "postgres: a lock name, an election name or a candidate id with a NUL byte is refused, "
    "naming the argument",
    "[postgres][election]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  for (const auto mode : {redlock::postgres::Mode::lease, redlock::postgres::Mode::session}) {
    redlock::postgres::DatabaseOptions options;
    options.mode = mode;
    redlock::postgres::Database db(server.uri(), options);
    redlock::postgres::Lock k(db, "k");  // what both names would have become
    REQUIRE(k.try_lock());
    CHECK_THROWS_MATCHES(redlock::postgres::Lock(db, kNulA), std::invalid_argument,
                         Catch::Matchers::Message("redlock: name must not contain a NUL byte"));
    CHECK_THROWS_AS(redlock::postgres::Lock(db, kNulB), std::invalid_argument);
    if (mode == redlock::postgres::Mode::session) {
      CHECK_THROWS_WITH(redlock::postgres::ReadWriteLock(db, kNulA), Catch::Contains("name"));
    }
    k.unlock();
  }

  redlock::postgres::Database db(server.uri());
  redlock::ElectionOptions options;
  options.ttl = 5s;
  redlock::postgres::Election n(db, "n", "a", options);  // what `n\0a` would have become
  REQUIRE(n.try_campaign_for(2s));
  CHECK_THROWS_MATCHES(redlock::postgres::Election(db, std::string("n\0a", 3), "a", options),
                       std::invalid_argument,
                       Catch::Matchers::Message("redlock: name must not contain a NUL byte"));
  CHECK_THROWS_MATCHES(redlock::postgres::Election(db, "m", kNulB, options), std::invalid_argument,
                       Catch::Matchers::Message("redlock: id must not contain a NUL byte"));
  CHECK(n.is_leader());
  REQUIRE(n.leader());
  CHECK(n.leader()->id == "a");
  CHECK(n.resign());
}
