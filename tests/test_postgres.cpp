// [postgres]: redlock::postgres::Lock against a real PostgreSQL 15 (tests/support/postgres_server).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <redlock/client.hpp>
#include <redlock/errors.hpp>
#include <redlock/lock.hpp>
#include <redlock/postgres.hpp>

#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/postgres_server.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::PostgresServer;

namespace {

redlock::LockOptions short_ttl(std::chrono::milliseconds ttl) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.retry_delay = 20ms;
  return o;
}

}  // namespace

TEST_CASE("postgres::Lock: mutual exclusion, re-entrancy and release", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::postgres::Lock a(db, "job");
  redlock::postgres::Lock b(db, "job");
  REQUIRE(a.try_lock());
  CHECK(a.owns_lock());
  CHECK(a.try_lock());  // re-entrant for the owning thread
  CHECK_FALSE(b.try_lock());
  CHECK(server.psql("SELECT count(*) FROM redlock_leases WHERE name = 'job'") == "1");
  a.unlock();
  CHECK_FALSE(b.try_lock());  // still held once
  a.unlock();
  CHECK(server.psql("SELECT count(*) FROM redlock_leases WHERE expires_at > now()") == "0");
  CHECK(b.try_lock_for(2s));
  b.unlock();
}

TEST_CASE("postgres::Lock: mutual exclusion between threads counting a shared value",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  int counter = 0;
  int inside = 0;
  bool overlap = false;
  auto work = [&] {
    redlock::postgres::Lock lock(db, "counter", short_ttl(5000ms));
    for (int i = 0; i < 20; ++i) {
      std::lock_guard<redlock::postgres::Lock> guard(lock);
      if (++inside != 1) overlap = true;
      ++counter;
      --inside;
    }
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  CHECK_FALSE(overlap);
  CHECK(counter == 40);
}

TEST_CASE("postgres::Lock: mutual exclusion across processes (read-increment-write a file)",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database(server.uri()).ensure_table();
  std::string file = "/tmp/redlock-pg-counter-" + std::to_string(::getpid());
  std::ofstream(file) << 0;
  auto child = [&] {
    redlock::postgres::Database db(server.uri());
    redlock::postgres::Lock lock(db, "file", short_ttl(5000ms));
    for (int i = 0; i < 15; ++i) {
      std::lock_guard<redlock::postgres::Lock> guard(lock);
      int value = 0;
      std::ifstream(file) >> value;
      std::this_thread::sleep_for(1ms);
      std::ofstream(file) << value + 1;
    }
  };
  pid_t kids[2];
  for (pid_t& kid : kids) {
    kid = ::fork();
    if (kid == 0) {
      try {
        child();
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
  }
  for (pid_t kid : kids) {
    int status = 0;
    ::waitpid(kid, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  int value = 0;
  std::ifstream(file) >> value;
  ::unlink(file.c_str());
  CHECK(value == 30);
}

TEST_CASE("postgres::Lock: expiry takeover, and the old holder's release and extend are refused",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::postgres::Lock old_holder(db, "lease", short_ttl(300ms));
  redlock::postgres::Lock next(db, "lease", short_ttl(10000ms));
  REQUIRE(old_holder.try_lock());
  CHECK_FALSE(next.try_lock());
  REQUIRE(next.try_lock_for(5s));  // the server's clock lets the expired row be taken over
  CHECK_FALSE(old_holder.extend());
  CHECK_FALSE(old_holder.release());
  CHECK(server.psql("SELECT count(*) FROM redlock_leases WHERE name = 'lease'") == "1");
  CHECK(next.release());
}

TEST_CASE("postgres::Lock: auto_renew keeps a short lease past its ttl", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::LockOptions o = short_ttl(600ms);
  o.auto_renew = true;
  redlock::postgres::Lock a(db, "renewed", o);
  redlock::postgres::Lock b(db, "renewed");
  REQUIRE(a.try_lock());
  std::this_thread::sleep_for(1500ms);  // 2.5 ttls: only renewals keep it
  CHECK(a.owns_lock());
  CHECK_FALSE(b.try_lock());
  a.unlock();
  CHECK(b.try_lock());
  b.unlock();
}

TEST_CASE("postgres::Lock: fencing tokens only grow", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::LockOptions o;
  o.fencing = true;
  redlock::postgres::Lock a(db, "fenced", o);
  redlock::postgres::Lock b(db, "fenced", o);
  std::uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    auto& lock = i % 2 ? a : b;
    REQUIRE(lock.try_lock());
    CHECK(lock.fence() > last);
    last = lock.fence();
    lock.unlock();
  }
}

TEST_CASE("postgres::Lock: a terminated backend does not lose a lease", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::postgres::Lock a(db, "kept", short_ttl(10000ms));
  redlock::postgres::Lock b(db, "kept");
  REQUIRE(a.try_lock());
  server.psql(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
      "WHERE usename = 'postgres' AND pid <> pg_backend_pid() AND backend_type = "
      "'client backend'");
  CHECK_FALSE(b.try_lock());  // the lease is a row, not a connection
  CHECK(a.extend());          // a new connection replaces the dead one
  CHECK(a.release());
}

TEST_CASE("postgres::Lock: errors are redlock::Error subtypes and never held", "[postgres]") {
  REQUIRE_POSTGRES();
  SECTION("unreachable") {
    int port = 0;
    {
      PostgresServer server;
      port = server.port();
    }
    redlock::postgres::Database db("postgresql://postgres@127.0.0.1:" + std::to_string(port) +
                                   "/postgres");
    redlock::postgres::Lock lock(db, "x");
    CHECK_THROWS_AS(lock.try_lock(), redlock::ConnectionError);
    CHECK_FALSE(lock.owns_lock());
  }
  SECTION("a table of the wrong shape") {
    PostgresServer server;
    server.psql("CREATE TABLE bad_leases (name text PRIMARY KEY)");
    redlock::postgres::DatabaseOptions options;
    options.table = "bad_leases";
    redlock::postgres::Database db(server.uri(), options);
    redlock::postgres::Lock lock(db, "x");
    try {
      lock.try_lock();
      FAIL("no error");
    } catch (const redlock::ServerError& e) {
      CHECK(std::string(e.what()).find("acquire x") != std::string::npos);
      CHECK(std::string(e.what()).find("token") != std::string::npos);
    }
    CHECK_FALSE(lock.owns_lock());
  }
  SECTION("permission denied") {
    PostgresServer server;
    server.psql("CREATE ROLE guest LOGIN");
    redlock::postgres::Database db("postgresql://guest@127.0.0.1:" + std::to_string(server.port()) +
                                   "/postgres?sslmode=disable");
    server.psql("REVOKE CREATE ON SCHEMA public FROM PUBLIC");
    redlock::postgres::Lock lock(db, "x");
    CHECK_THROWS_AS(lock.try_lock(), redlock::ServerError);
    CHECK_FALSE(lock.owns_lock());
  }
  SECTION("bad arguments") {
    redlock::postgres::DatabaseOptions options;
    options.table = "x; DROP TABLE y";
    CHECK_THROWS_AS(redlock::postgres::Database("postgresql://h/db", options),
                    std::invalid_argument);
    CHECK_THROWS_AS(redlock::postgres::Database(""), std::invalid_argument);
  }
}

TEST_CASE(
    "postgres::Lock: a stopped server gives a TimeoutError within bounds, and the abandoned "
    "acquire is undone when it resumes",
    "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::DatabaseOptions options;
  options.statement_timeout = 300ms;
  redlock::postgres::Database db(server.uri(), options);
  // A long ttl: if the abandoned acquire landed and stayed, nobody could lock for 30 s.
  redlock::postgres::Lock a(db, "abandoned", short_ttl(30000ms));
  redlock::postgres::Lock b(db, "abandoned", short_ttl(30000ms));
  db.ensure_table();
  server.pause();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(a.try_lock(), redlock::TimeoutError);
  const auto took = std::chrono::steady_clock::now() - start;
  server.resume();
  CHECK(took < 10s);  // statement_timeout + 1 s client deadline, generous margin on a busy box
  CHECK_FALSE(a.owns_lock());
  CHECK(b.try_lock_for(10s));
  CHECK(b.release());
}

TEST_CASE("postgres::Lock: a server restart keeps a lease, and its holder extends and releases it",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::postgres::Lock a(db, "restarted", short_ttl(20000ms));
  redlock::postgres::Lock b(db, "restarted");
  REQUIRE(a.try_lock());
  const auto fence = a.fence();
  server.restart();  // kill -9 of every server process: the committed row survives
  CHECK_FALSE(b.try_lock());
  CHECK(a.extend());  // the pooled connections died: new ones are made
  CHECK(a.owns_lock());
  CHECK(a.release());
  REQUIRE(b.try_lock());
  CHECK(b.fence() > fence);
  b.unlock();
}

TEST_CASE("postgres::Lock: a release wakes a waiter at once (LISTEN/NOTIFY)", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database holder_db(server.uri());  // another "process": its own pool
  redlock::postgres::Database waiter_db(server.uri());
  redlock::postgres::Lock holder(holder_db, "woken", short_ttl(60000ms));
  redlock::LockOptions slow = short_ttl(60000ms);
  slow.retry_delay = 30s;  // unheard, the waiter would sleep until the 60 s lease ends
  redlock::postgres::Lock waiter(waiter_db, "woken", slow);
  REQUIRE(holder.try_lock());
  const auto waited = [&] {
    const auto start = std::chrono::steady_clock::now();
    const bool got = waiter.try_lock_for(25s);
    return std::make_pair(got, std::chrono::steady_clock::now() - start);
  };
  SECTION("a release by another Database") {
    auto result = std::async(std::launch::async, waited);
    std::this_thread::sleep_for(500ms);  // the waiter has tried once and listens
    CHECK(holder.release());
    const auto [got, took] = result.get();
    CHECK(got);
    CHECK(took < 20s);  // heard: at once; unheard: 25 s
  }
  SECTION("the listening connection is terminated while waiting: the waiter listens again") {
    auto result = std::async(std::launch::async, waited);
    std::this_thread::sleep_for(500ms);
    CHECK(server.psql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'") == "1");
    server.psql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'");
    std::this_thread::sleep_for(1000ms);  // woken, tried again, listening on a new connection
    CHECK(holder.release());
    const auto [got, took] = result.get();
    CHECK(got);
    CHECK(took < 20s);
  }
  if (waiter.owns_lock()) waiter.unlock();
}

TEST_CASE("postgres::Lock, session mode: an advisory lock held by the holder's connection",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri() + "?mode=session");
  CHECK(db.options().mode == redlock::postgres::Mode::session);
  redlock::postgres::Lock a(db, "advisory");
  redlock::postgres::Lock b(db, "advisory");
  const std::string advisory = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'";
  REQUIRE(a.try_lock());
  CHECK(a.try_lock());  // re-entrant for the owning thread
  CHECK_FALSE(b.try_lock());
  CHECK(server.psql(advisory) == "1");
  CHECK(server.psql("SELECT count(*) FROM redlock_leases") == "0");  // no row: a session lock
  const auto fence = a.fence();
  CHECK(fence > 0);
  CHECK(a.extend());  // the connection answers
  a.unlock();
  CHECK_FALSE(b.try_lock());
  a.unlock();
  CHECK(server.psql(advisory) == "0");
  REQUIRE(b.try_lock());
  CHECK(b.fence() > fence);
  CHECK(b.release());
  CHECK_FALSE(b.release());
}

TEST_CASE("postgres::Lock, session mode: a terminated backend loses the lock, and says so",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri() + "?mode=session");
  std::promise<redlock::LostReason> lost;
  redlock::LockOptions o = short_ttl(1000ms);
  o.auto_renew = true;
  o.on_lost = [&](const redlock::LostEvent& e) { lost.set_value(e.reason); };
  redlock::postgres::Lock a(db, "terminated", o);
  redlock::postgres::Lock b(db, "terminated");
  REQUIRE(a.try_lock());
  CHECK_FALSE(b.try_lock());
  server.psql(
      "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted");
  auto reason = lost.get_future();
  REQUIRE(reason.wait_for(10s) == std::future_status::ready);  // the watchdog's check saw it
  CHECK(reason.get() == redlock::LostReason::refused);
  CHECK_FALSE(a.owns_lock());
  CHECK(b.try_lock());  // free at once: no ttl to wait out
  b.unlock();
}

// Review 3, item 1: a release after the lease was lost and taken over must not say "kept".
TEST_CASE("postgres::Lock, session mode: release() after a terminated backend is false, and lost",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri() + "?mode=session");
  std::atomic<int> losses{0};
  redlock::LockOptions o = short_ttl(30000ms);  // no renewal: only the release can notice
  o.fencing = true;
  o.on_lost = [&](const redlock::LostEvent&) { ++losses; };
  redlock::postgres::Lock a(db, "taken-over", o);
  redlock::postgres::Lock b(db, "taken-over", o);
  REQUIRE(a.try_lock());
  const std::uint64_t fence = a.fence();
  server.psql(  // waits up to 5 s for the backend to exit, and free the advisory lock
      "SELECT pg_terminate_backend(pid, 5000) FROM pg_locks WHERE locktype = 'advisory' AND "
      "granted");
  REQUIRE(b.try_lock());  // the session died, and the advisory lock with it
  CHECK(b.fence() > fence);
  CHECK_FALSE(a.release());  // was true: the dead connection was taken for a kept hold
  CHECK(redlock::test::eventually([&] { return losses.load() == 1; }));
  CHECK(b.release());
}

TEST_CASE("postgres::Lock: release() of a lease an operator took over is false, and lost",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  std::atomic<int> losses{0};
  redlock::LockOptions o = short_ttl(30000ms);
  o.on_lost = [&](const redlock::LostEvent&) { ++losses; };
  redlock::postgres::Lock a(db, "edited", o);
  REQUIRE(a.try_lock());
  REQUIRE(server.psql("UPDATE redlock_leases SET token = 'someone else' WHERE name = 'edited' "
                      "RETURNING name") == "edited");
  CHECK_FALSE(a.release());  // was true: the refused release left "kept" at its default
  CHECK(redlock::test::eventually([&] { return losses.load() == 1; }));
}

TEST_CASE("postgres::Lock, session mode: a crashed holder's lock is free at once", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  const std::string uri = server.uri() + "?mode=session";
  redlock::postgres::Database(uri).ensure_table();
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    redlock::postgres::Database db(uri);
    redlock::postgres::Lock held(db, "crashed", short_ttl(60000ms));
    const char c = held.try_lock() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();  // until killed
    ::_exit(0);
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  ::close(ready[1]);
  CHECK(c == 'y');
  redlock::postgres::Database db(uri);
  redlock::postgres::Lock waiter(db, "crashed");
  CHECK_FALSE(waiter.try_lock());
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK(waiter.try_lock_for(10s));  // long before the 60 s ttl
  waiter.unlock();
}

// Review 3, item 1 (a false loss is wrong too): a release whose reply was lost is sent again on
// a new connection; that one finds the lease already gone, by its own first send.
TEST_CASE("postgres::Lock: a release resent after its reply was lost is kept, not lost",
          "[postgres][fault]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::test::FaultProxy proxy("127.0.0.1", server.port());
  redlock::postgres::Database db("postgresql://postgres@127.0.0.1:" + std::to_string(proxy.port()) +
                                 "/postgres");
  std::atomic<int> losses{0};
  redlock::LockOptions o = short_ttl(30000ms);
  o.on_lost = [&](const redlock::LostEvent&) { ++losses; };
  redlock::postgres::Lock a(db, "resent", o);
  REQUIRE(a.try_lock());
  proxy.drop_next_request();  // the release runs; its connection closes before the reply
  CHECK(a.release());
  std::this_thread::sleep_for(100ms);  // on_lost runs on the watchdog's callback thread
  CHECK(losses.load() == 0);
  CHECK(server.psql(
            "SELECT count(*) FROM redlock_leases WHERE name = 'resent' AND expires_at > now()") ==
        "0");
}

// Review 3, item 7: the statements a Database runs when it connects (SET statement_timeout),
// before its first lock (the lease table's probe and DDL) and for its LISTEN connection have a
// client deadline: a server that stops answering at that moment (the fault proxy black-holes it
// when the statement goes out) costs connect_timeout + statement_timeout + 1 s at most, also to
// a second caller queued behind the DDL mutex. On main the SET and the probe blocked until the
// connection was reset.
TEST_CASE("postgres::Database: a server silent at connect, probe or LISTEN costs a bounded wait",
          "[postgres][fault][slow]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::test::FaultProxy proxy("127.0.0.1", server.port());
  const std::string uri =
      "postgresql://postgres@127.0.0.1:" + std::to_string(proxy.port()) + "/postgres";
  redlock::postgres::DatabaseOptions options;
  options.statement_timeout = 500ms;  // connect_timeout 2 s: the bound is 3.5 s
  const auto bounded = [&](const char* pattern, auto&& operation) {
    INFO("the server stops answering at " << pattern);
    proxy.clear();
    proxy.set_blackhole_on(pattern);
    auto done = std::async(std::launch::async, operation);
    const bool in_time = done.wait_for(7s) == std::future_status::ready;  // 3.5 s + slack
    if (!in_time) proxy.reset_all();  // unblocks the stuck call, so the case can fail
    CHECK(in_time);
    CHECK_THROWS_AS(done.get(), redlock::Error);
  };
  SECTION("SET statement_timeout at connect") {
    redlock::postgres::Database db(uri, options);
    bounded("statement_timeout", [&] { db.ensure_table(); });
  }
  SECTION("the lease table's probe, and three callers queued behind the DDL mutex") {
    redlock::postgres::Database db(uri, options);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::future<bool>> queued;
    for (int i = 0; i < 3; ++i) {
      queued.push_back(std::async(std::launch::async, [&] {
        std::this_thread::sleep_for(200ms);
        redlock::postgres::Lock lock(db, "probe");
        return lock.try_lock();
      }));
    }
    bounded("to_regclass", [&] { db.ensure_table(); });
    for (auto& caller : queued) {  // each gets the failed attempt's error, not a turn of its own
      REQUIRE(caller.wait_until(start + 7s) == std::future_status::ready);
      CHECK_THROWS_AS(caller.get(), redlock::Error);
    }
  }
  SECTION("LISTEN of a waiter") {
    redlock::postgres::Database direct(server.uri(), options);
    redlock::postgres::Lock holder(direct, "listen");
    REQUIRE(holder.try_lock());
    redlock::postgres::Database db(uri, options);
    db.ensure_table();
    bounded("LISTEN", [&] {
      redlock::postgres::Lock waiter(db, "listen");
      if (!waiter.try_lock_for(1s)) throw redlock::TimeoutError("contention, as expected");
    });
    holder.unlock();
  }
}

TEST_CASE("postgres::Database: a bad mode in the URI names it", "[postgres][unit]") {
  CHECK_THROWS_WITH(redlock::postgres::Database("postgresql://h/db?mode=exclusive"),
                    Catch::Contains("mode=exclusive") && Catch::Contains("lease or session"));
  redlock::postgres::Database both(
      "postgresql://h/db?sslmode=disable&mode=session&connect_timeout=3");
  CHECK(both.options().mode == redlock::postgres::Mode::session);
  redlock::postgres::DatabaseOptions session;
  session.mode = redlock::postgres::Mode::session;
  CHECK_THROWS_WITH(redlock::postgres::Database("postgresql://h/db?mode=lease", session),
                    Catch::Contains("contradicts options.mode"));
}

TEST_CASE("postgres::Lock, fair mode: waiters are served in arrival order", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::DatabaseOptions many;
  many.pool_size = 8;
  redlock::postgres::Database db(server.uri(), many);
  redlock::LockOptions fair = short_ttl(10000ms);
  fair.fair = true;
  fair.retry_delay = 30ms;
  redlock::postgres::Lock holder(db, "queue", fair);
  REQUIRE(holder.try_lock());
  constexpr int kWaiters = 5;
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread> waiters;
  const std::string queued = "SELECT count(*) FROM redlock_leases_waiters WHERE name = 'queue'";
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      redlock::postgres::Lock lock(db, "queue", fair);
      if (!lock.try_lock_for(30s)) return;
      {
        std::lock_guard<std::mutex> guard(mutex);
        order.push_back(i);
      }
      std::this_thread::sleep_for(50ms);
      lock.unlock();
    });
    // Waiter i has its place before waiter i + 1 starts.
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (server.psql(queued) != std::to_string(i + 1) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(20ms);
  }
  holder.unlock();
  for (auto& t : waiters) t.join();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(server.psql(queued) == "0");  // every place given up with its grant
}

TEST_CASE("postgres::Lock, fair mode: a waiter that gives up leaves the queue", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::LockOptions fair = short_ttl(10000ms);
  fair.fair = true;
  redlock::postgres::Lock holder(db, "leaving", fair);
  redlock::postgres::Lock quitter(db, "leaving", fair);
  redlock::postgres::Lock next(db, "leaving", fair);
  REQUIRE(holder.try_lock());
  CHECK_FALSE(quitter.try_lock_for(300ms));  // joined, then left
  const std::string queued = "SELECT count(*) FROM redlock_leases_waiters";
  CHECK(server.psql(queued) == "0");
  holder.unlock();
  CHECK(next.try_lock());  // nobody's place is ahead of it
  next.unlock();
  redlock::postgres::DatabaseOptions session;
  session.mode = redlock::postgres::Mode::session;
  redlock::postgres::Database sdb(server.uri(), session);
  CHECK_THROWS_WITH(redlock::postgres::Lock(sdb, "x", fair), Catch::Contains("options.fair"));
}

TEST_CASE("postgres::Lock and redlock::Lock under one std::scoped_lock", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer pg;
  redlock::test::RedisServer redis;
  redlock::Client client(redis.endpoint());
  redlock::postgres::Database db(pg.uri());
  redlock::Lock r(client, "both");
  redlock::postgres::Lock p(db, "both");
  {
    std::scoped_lock both(r, p);
    CHECK(r.owns_lock());
    CHECK(p.owns_lock());
  }
  CHECK_FALSE(r.owns_lock());
  CHECK_FALSE(p.owns_lock());
  CHECK(pg.psql("SELECT count(*) FROM redlock_leases WHERE expires_at > now()") == "0");
}
