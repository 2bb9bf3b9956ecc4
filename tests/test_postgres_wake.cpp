// [postgres]: postgres::Lock's waiters at scale (issue #32): a release wakes one waiting process,
// not every listening one, so the server's work per acquisition does not grow with the number of
// waiters; dead waiters, waiters that give up and crashed holders do not stall the queue. Real
// PostgreSQL 15 (tests/support/postgres_server) and real forked processes.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <redlock/postgres.hpp>

#include "support/eventually.hpp"
#include "support/postgres_server.hpp"

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::PostgresServer;

namespace {

using Clock = std::chrono::steady_clock;

const std::string kQueued = "SELECT count(*) FROM redlock_leases_waiters";

// Statements the clients sent (pg_stat_statements, top level: a function call is one), but for
// this test's own. (Not xact_commit: every NOTIFY makes each LISTEN session of the database read
// the notification queue in a transaction of its own, whoever it is for.)
long long statements(const PostgresServer& server) {
  return std::stoll(
      server.psql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE "
                  "'%pg_stat_statements%'"));
}

// Forks a child that runs `body` (returning its exit code) and never returns into Catch.
template <class Body>
pid_t spawn(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 3;
    try {
      code = body();
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }
  return pid;
}

// Forks a waiter for `name` (deadline 60 s) that unlocks at once and exits 0, or, with a
// `held_fd` >= 0, writes 'y' to it once it holds and keeps the lock until killed.
pid_t spawn_waiter(const PostgresServer& server, const std::string& name,
                   const redlock::LockOptions& options, int held_fd) {
  return spawn([&] {
    redlock::postgres::Database mine(server.uri());
    redlock::postgres::Lock lock(mine, name, options);
    if (!lock.try_lock_for(60s)) return 1;
    if (held_fd >= 0) {
      (void)!::write(held_fd, "y", 1);
      ::pause();  // until killed
    }
    lock.unlock();
    return 0;
  });
}

int exit_code(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct Contention {
  double statements_per_acquisition{0};
  int fewest{0};  // the least any process acquired
  long total{0};
};

// `processes` forked processes, each with its own Database and Lock on one name, loop
// lock / hold 1 ms / unlock for `run`. Counts the statements the server ran over the whole run
// (connecting included), per acquisition.
Contention contend(const PostgresServer& server, int processes, Clock::duration run) {
  int go[2], counts[2];
  REQUIRE(::pipe(go) == 0);
  REQUIRE(::pipe(counts) == 0);
  server.psql("SELECT pg_stat_statements_reset()");
  std::vector<pid_t> kids;
  for (int i = 0; i < processes; ++i) {
    kids.push_back(spawn([&] {
      ::close(go[1]);
      redlock::postgres::Database db(server.uri());
      redlock::LockOptions options;
      options.ttl = 10s;
      redlock::postgres::Lock lock(db, "herd", options);
      char c = 0;
      if (::read(go[0], &c, 1) != 0) return 4;  // starts when the pipe closes
      int n = 0;
      const auto until = Clock::now() + run;
      while (Clock::now() < until) {
        if (!lock.try_lock_for(30s)) return 5;
        ++n;
        std::this_thread::sleep_for(1ms);
        lock.unlock();
      }
      return ::write(counts[1], &n, sizeof n) == sizeof n ? 0 : 6;
    }));
  }
  ::close(go[0]);
  ::close(go[1]);  // go
  Contention out;
  out.fewest = 1 << 30;
  for (pid_t kid : kids) CHECK(exit_code(kid) == 0);
  ::close(counts[1]);
  int n = 0;
  int reports = 0;
  while (::read(counts[0], &n, sizeof n) == sizeof n) {
    ++reports;
    out.total += n;
    out.fewest = std::min(out.fewest, n);
  }
  ::close(counts[0]);
  CHECK(reports == processes);
  out.statements_per_acquisition =
      out.total > 0 ? static_cast<double>(statements(server)) / out.total : 0;
  return out;
}

}  // namespace

TEST_CASE("postgres::Lock: server work per acquisition does not grow with the waiters",
          "[postgres][slow]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database(server.uri()).ensure_table();
  server.psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'");
  server.restart();
  server.psql("CREATE EXTENSION pg_stat_statements");
  const Contention few = contend(server, 4, 2500ms);
  const Contention many = contend(server, 16, 2500ms);
  INFO("statements per acquisition: 4 processes "
       << few.statements_per_acquisition << " (" << few.total << " acquisitions), 16 processes "
       << many.statements_per_acquisition << " (" << many.total << ")");
  CHECK(few.fewest > 0);
  CHECK(many.fewest > 0);  // every process served
  CHECK(many.statements_per_acquisition <= 1.5 * few.statements_per_acquisition);
  CHECK(server.psql(kQueued) == "0");
}

TEST_CASE("postgres::Lock: a waiter killed while queued is passed over", "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::LockOptions options;
  options.ttl = 60s;  // an expiry would come long after the waiters' 20 s deadline
  redlock::postgres::Lock holder(db, "killed", options);
  REQUIRE(holder.try_lock());
  std::vector<pid_t> kids;
  for (int i = 0; i < 3; ++i) {
    kids.push_back(spawn([&] {
      redlock::postgres::Database mine(server.uri());
      redlock::postgres::Lock lock(mine, "killed", options);
      if (!lock.try_lock_for(20s)) return 1;
      std::this_thread::sleep_for(20ms);
      lock.unlock();
      return 0;
    }));
    // In arrival order: waiter i has its place before waiter i + 1 starts.
    REQUIRE(eventually([&] { return server.psql(kQueued) == std::to_string(i + 1); }, 10s));
  }
  ::kill(kids[0], SIGKILL);  // the head
  ::kill(kids[1], SIGKILL);  // and the one behind it: the second watcher
  CHECK(exit_code(kids[0]) == -1);
  CHECK(exit_code(kids[1]) == -1);
  holder.unlock();
  CHECK(exit_code(kids[2]) == 0);
  CHECK(server.psql(kQueued) == "0");  // the dead rows went when the release passed them
}

TEST_CASE("postgres::Lock: a waiter that gives up as it is handed the lock passes it on",
          "[postgres][slow]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::DatabaseOptions slow_claims;
  slow_claims.statement_timeout = 5000ms;  // the claim window: min(ttl, 2 x 5 s)
  redlock::postgres::Database db(server.uri(), slow_claims);
  redlock::postgres::Database other(server.uri(), slow_claims);
  redlock::LockOptions options;
  options.ttl = 60s;
  redlock::postgres::Lock holder(db, "quitting", options);
  redlock::postgres::Lock quitter(db, "quitting", options);
  redlock::postgres::Lock next(other, "quitting", options);
  int passed_on = 0;
  for (int i = 0; i < 12; ++i) {
    REQUIRE(holder.try_lock());
    // Long enough for both waiters to queue before the release on a loaded machine (under ASan
    // the second one took over 300 ms to queue, after the first had given up).
    const auto release_at = Clock::now() + 1500ms;
    std::thread quitting([&] {
      // Gives up within a few ms either side of the release (and of the grant).
      const auto deadline = release_at + std::chrono::milliseconds((i % 6) * 2 - 5);
      if (quitter.try_lock_until(deadline)) quitter.unlock();
    });
    REQUIRE(eventually([&] { return server.psql(kQueued) == "1"; }, 10s));
    std::thread waiting([&] {
      const auto start = Clock::now();
      if (next.try_lock_for(30s)) {
        // A grant that lapsed unclaimed would take the 10 s claim window.
        if (Clock::now() - start < 8s) ++passed_on;
        next.unlock();
      }
    });
    REQUIRE(eventually([&] { return server.psql(kQueued) == "2"; }, 10s));
    std::this_thread::sleep_until(release_at);
    holder.unlock();
    quitting.join();
    waiting.join();
    CHECK(server.psql(kQueued) == "0");
  }
  CHECK(passed_on == 12);
  CHECK(server.psql("SELECT count(*) FROM redlock_leases WHERE token <> ''") == "0");
}

TEST_CASE("postgres::Lock: a holder killed -9 is followed within its ttl and one hand-over",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database(server.uri()).ensure_table();
  redlock::LockOptions options;
  options.ttl = 3s;
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t holder = spawn([&] {
    redlock::postgres::Database db(server.uri());
    redlock::postgres::Lock lock(db, "crashed", options);
    const char c = lock.try_lock() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    return 0;
  });
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  REQUIRE(c == 'y');
  const auto killed_at = Clock::now();
  std::vector<pid_t> kids;
  for (int i = 0; i < 4; ++i) {
    kids.push_back(spawn([&] {
      redlock::postgres::Database db(server.uri());
      redlock::postgres::Lock lock(db, "crashed", options);
      if (!lock.try_lock_for(30s)) return 1;
      // Each holds within ttl + a few hand-overs of the crash (10 s: four of them on a busy
      // sanitizer CI); a queue that did not move would keep them until their 30 s deadline.
      const bool in_time = Clock::now() - killed_at < options.ttl + 10s;
      lock.unlock();
      return in_time ? 0 : 7;
    }));
  }
  REQUIRE(eventually([&] { return server.psql(kQueued) == "4"; }, 10s));
  ::kill(holder, SIGKILL);
  CHECK(exit_code(holder) == -1);
  for (pid_t kid : kids) CHECK(exit_code(kid) == 0);
  CHECK(server.psql(kQueued) == "0");
}

// The second watcher: the waiter after the head is told when a grant makes it second, so a
// holder and the head that die together are followed by it, within the holder's ttl and a claim
// window, not at its own deadline.
TEST_CASE("postgres::Lock: a holder and the head killed -9 together: the second follows",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::LockOptions options;
  options.ttl = 3s;  // the claim window is min(ttl, 2 x statement_timeout (2 s)) = 3 s
  redlock::postgres::Lock first(db, "pair", options);
  REQUIRE(first.try_lock());
  int held[2];
  REQUIRE(::pipe(held) == 0);
  const auto waiter = [&](bool holds) {
    return spawn_waiter(server, "pair", options, holds ? held[1] : -1);
  };
  const pid_t holder = waiter(true);  // the head, then the holder
  REQUIRE(eventually([&] { return server.psql(kQueued) == "1"; }, 10s));
  const pid_t head = waiter(false);  // the second, then the head
  REQUIRE(eventually([&] { return server.psql(kQueued) == "2"; }, 10s));
  const pid_t second = waiter(false);  // told it is second when `holder` is granted
  REQUIRE(eventually([&] { return server.psql(kQueued) == "3"; }, 10s));
  first.unlock();
  char c = 0;
  REQUIRE(::read(held[0], &c, 1) == 1);
  std::this_thread::sleep_for(200ms);  // the notice reaches `second`, which asks once
  ::kill(holder, SIGKILL);
  ::kill(head, SIGKILL);
  const auto killed = Clock::now();
  CHECK(exit_code(holder) == -1);
  CHECK(exit_code(head) == -1);
  CHECK(exit_code(second) == 0);
  // ttl + claim window + a bound for a busy machine; without the notice: its 60 s deadline.
  CHECK(Clock::now() - killed < options.ttl + 3s + 10s);
  CHECK(server.psql(kQueued) == "0");
}

// A waiter whose LISTEN session breaks is passed over (its advisory lock went with the session);
// it is woken when the listener connects again and takes a place again.
TEST_CASE("postgres::Lock: waiters whose LISTEN sessions are terminated queue again",
          "[postgres]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database db(server.uri());
  redlock::LockOptions options;
  options.ttl = 60s;
  redlock::postgres::Lock holder(db, "relisten", options);
  REQUIRE(holder.try_lock());
  std::vector<std::thread> waiters;
  std::atomic<int> served{0};
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&] {
      redlock::postgres::Database mine(server.uri());  // a LISTEN session of its own
      redlock::postgres::Lock lock(mine, "relisten", options);
      if (!lock.try_lock_for(30s)) return;
      ++served;
      lock.unlock();
    });
    REQUIRE(eventually([&] { return server.psql(kQueued) == std::to_string(i + 1); }, 10s));
  }
  const std::string listeners =
      "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1919247468";
  CHECK(server.psql(listeners) == "2");  // the waiters' (the holder's Database never waited)
  server.psql(
      "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = "
      "1919247468");
  // Each listener connects again, takes an identity again, and wakes its waiter, which queues.
  CHECK(eventually([&] { return server.psql(listeners) == "2"; }, 10s));
  // Both places belong to a live identity again (kept, or taken again at the tail).
  const std::string live_places =
      "SELECT count(*) FROM redlock_leases_waiters w JOIN pg_locks l ON l.locktype = 'advisory' "
      "AND l.classid = 1919247468 AND l.objid::bigint = (w.waiter & 2147483647) AND l.granted";
  CHECK(eventually([&] { return server.psql(live_places) == "2"; }, 10s));
  const auto released = Clock::now();
  holder.unlock();
  for (auto& t : waiters) t.join();
  CHECK(served == 2);
  CHECK(Clock::now() - released < 20s);  // not at the 30 s deadline
  CHECK(server.psql(kQueued) == "0");
}

// #41: a paused process keeps its sessions (its place looks alive). The holder and the head
// SIGSTOPped together: the holder's lease ends unrenewed, the grant to the paused head is not
// claimed within its claim window, and the next waiter is served, not at its deadline.
TEST_CASE("postgres::Lock: a holder and the head paused (SIGSTOP) together: the next follows",
          "[postgres][liveness][fault][slow]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::Database(server.uri()).ensure_table();
  redlock::LockOptions options;
  options.ttl = 2s;  // the claim window is min(ttl, 2 x statement_timeout (2 s)) = 2 s
  int held[2];
  REQUIRE(::pipe(held) == 0);
  const auto waiter = [&](bool holds) {
    return spawn_waiter(server, "paused", options, holds ? held[1] : -1);
  };
  const pid_t holder = waiter(true);
  char c = 0;
  REQUIRE(::read(held[0], &c, 1) == 1);
  const pid_t head = waiter(false);
  REQUIRE(eventually([&] { return server.psql(kQueued) == "1"; }, 10s));
  const pid_t next = waiter(false);
  REQUIRE(eventually([&] { return server.psql(kQueued) == "2"; }, 10s));
  ::kill(holder, SIGSTOP);
  ::kill(head, SIGSTOP);
  const auto paused = Clock::now();
  CHECK(exit_code(next) == 0);
  const auto took = Clock::now() - paused;
  WARN("served " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                 << " ms after the holder and the head were paused (ttl 2 s)");
  // ttl + a claim window + a bound for a busy machine; unserved, it would wait 60 s.
  CHECK(took < options.ttl + 2s + 6s);
  ::kill(holder, SIGKILL);
  ::kill(head, SIGKILL);
  CHECK(exit_code(holder) == -1);
  CHECK(exit_code(head) == -1);
}
