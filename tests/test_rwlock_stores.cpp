// ReadWriteLock beyond one standalone Redis: through Sentinel, on a Redis Cluster, and the
// PostgreSQL one (session mode). The ZooKeeper one is in test_zookeeper.cpp.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "cluster_fixture.hpp"
#include "rw_test_support.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_set.hpp"
#include "util/key_slot.hpp"

using namespace std::chrono_literals;
using namespace redlock::test::rw;
using redlock::detail::helper_key;
using redlock::test::key;
using Clock = std::chrono::steady_clock;

TEST_CASE("Cluster: a ReadWriteLock's keys share its slot, releases wake through sharded pub/sub",
          "[cluster][redis]") {
  using redlock::test::shared_cluster;
  auto& cluster = shared_cluster();
  redlock::Client client(cluster.uri());
  for (const std::size_t m : cluster.masters()) {
    const std::string k = cluster.key_on(m, "rw-cluster");
    INFO(k);
    redlock::ReadWriteLock w(client, k, sleepy());
    redlock::ReadWriteLock r(client, k, sleepy());
    REQUIRE(w.try_lock());
    CHECK(reader_wakes_after(w, r) < 3s);
    REQUIRE(r.try_lock_shared());
    CHECK(cluster.node(m).raw({"ZCARD", helper_key(k, ":readers")}).integer() == 1);
    auto writer = std::async(std::launch::async, [&] {
      const bool got = w.try_lock_for(20s);
      const auto when = Clock::now();
      if (got) w.unlock();
      return std::make_pair(got, when);
    });
    std::this_thread::sleep_for(300ms);
    const auto released = Clock::now();
    r.unlock_shared();
    const auto [got, when] = writer.get();
    CHECK(got);
    CHECK(when - released < 3s);
  }
}

#ifdef REDLOCK_TESTS_WITH_POSTGRES
#include <redlock/postgres.hpp>

#include "support/postgres_server.hpp"

namespace {

redlock::LockOptions pg_options() {
  redlock::LockOptions o;
  o.ttl = 10s;
  o.retry_delay = 20ms;
  return o;
}

}  // namespace

TEST_CASE("postgres::ReadWriteLock: readers share, a writer excludes, session mode only",
          "[postgres]") {
  using redlock::test::PostgresServer;
  if (!PostgresServer::available()) {
    WARN("skipped: postgresql-15 not installed");
    return;
  }
  PostgresServer server;
  redlock::postgres::Database lease_db(server.uri());
  CHECK_THROWS_WITH(redlock::postgres::ReadWriteLock(lease_db, "rw"), Catch::Contains("session"));
  redlock::postgres::Database db(server.uri() + "?mode=session");
  redlock::postgres::ReadWriteLock r1(db, "rw", pg_options());
  redlock::postgres::ReadWriteLock r2(db, "rw", pg_options());
  redlock::postgres::ReadWriteLock w(db, "rw", pg_options());
  REQUIRE(r1.try_lock_shared());
  REQUIRE(r2.try_lock_shared());
  CHECK_FALSE(w.try_lock());
  r1.unlock_shared();
  CHECK_FALSE(w.try_lock());
  r2.unlock_shared();
  REQUIRE(w.try_lock());
  CHECK(w.fence() > 0);
  CHECK_FALSE(r1.try_lock_shared());
  CHECK_THROWS_AS(w.downgrade(), std::logic_error);
  CHECK(w.owns_lock());
  w.unlock();
  {
    std::shared_lock<redlock::ReadWriteLock> read(r1);  // through the base class
    CHECK(r1.owns_shared());
  }
}

TEST_CASE(
    "postgres::ReadWriteLock: while a writer waits no new reader enters, a killed reader "
    "frees it at once",
    "[postgres]") {
  using redlock::test::PostgresServer;
  if (!PostgresServer::available()) {
    WARN("skipped: postgresql-15 not installed");
    return;
  }
  PostgresServer server;
  const std::string uri = server.uri() + "?mode=session";
  constexpr int kReaders = 4;
  std::atomic<long> entries{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      redlock::postgres::Database own(uri);
      redlock::postgres::ReadWriteLock rw(own, "pref", pg_options());
      while (!stop) {
        if (!rw.try_lock_shared_for(200ms)) continue;
        ++entries;
        std::this_thread::sleep_for(10ms);
        rw.unlock_shared();
      }
    });
  }
  redlock::postgres::Database db(uri);
  redlock::postgres::ReadWriteLock w(db, "pref", pg_options());
  redlock::postgres::ReadWriteLock blocker(db, "pref", pg_options());
  while (entries < 20) std::this_thread::sleep_for(5ms);
  REQUIRE(blocker.try_lock_shared_for(5s));  // the writer must wait: it marks
  std::atomic<long> at_hold{-1};
  std::thread writer([&] {
    w.lock();
    at_hold = entries.load();
    w.unlock();
  });
  long at_mark = -1;
  const auto end = Clock::now() + 30s;
  while (at_hold < 0 && Clock::now() < end) {
    const bool live = server.psql(
                          "SELECT count(*) FROM redlock_leases WHERE name = "
                          "'pref:writer-waiting' AND expires_at > now()") == "1";
    if (at_mark < 0 && live) {
      at_mark = entries;
      std::this_thread::sleep_for(300ms);  // readers keep trying meanwhile
      blocker.unlock_shared();
    }
  }
  if (blocker.owns_shared()) blocker.unlock_shared();  // no marker seen: let the writer finish
  writer.join();
  stop = true;
  for (auto& t : readers) t.join();
  INFO("entries when the marker was seen " << at_mark << ", when the writer held " << at_hold);
  REQUIRE(at_hold >= 0);
  REQUIRE(at_mark >= 0);
  CHECK(at_hold - at_mark <= kReaders);
  // A reader process killed while it holds: its session ends, and the lock is free at once.
  const pid_t child = fork_holder([&](auto&& wait_killed) {
    redlock::postgres::Database own(uri);
    redlock::postgres::ReadWriteLock rw(own, "pref", pg_options());
    rw.lock_shared();
    wait_killed();
  });
  REQUIRE(child > 0);
  CHECK_FALSE(w.try_lock());
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  const auto killed = Clock::now();
  CHECK(w.try_lock_for(10s));
  CHECK(Clock::now() - killed < 5s);  // the session's end, not a ttl
  w.unlock();
}
// As on Redis (test_rwlock.cpp): a writer that gives up its wait (a timeout) takes its
// writer-waiting marker row out at once, so a reader arriving after the give-up is not kept
// out for the rest of the marker's life (1 s here: max(250 ms, 5 * retry_delay)).
TEST_CASE("postgres::ReadWriteLock: a writer that gives up its wait removes its marker",
          "[postgres]") {
  REQUIRE_POSTGRES();
  redlock::test::PostgresServer server;
  redlock::postgres::Database db(server.uri() + "?mode=session");
  redlock::LockOptions o = pg_options();
  o.retry_delay = 200ms;
  redlock::postgres::ReadWriteLock r(db, "give-up", o);
  redlock::postgres::ReadWriteLock w(db, "give-up", o);
  redlock::postgres::ReadWriteLock late(db, "give-up", o);
  const auto live_markers = [&] {
    return server.psql(
        "SELECT count(*) FROM redlock_leases WHERE name = "
        "'give-up:writer-waiting' AND expires_at > clock_timestamp()");
  };
  REQUIRE(r.try_lock_shared());
  CHECK_FALSE(w.try_lock_for(500ms));  // refused by the reader: it marked, then gave up
  CHECK(live_markers() == "0");
  CHECK(late.try_lock_shared());  // the marker kept it out for up to 1 s more before
  late.unlock_shared();
  r.unlock_shared();
}
#endif  // REDLOCK_TESTS_WITH_POSTGRES

TEST_CASE("Sentinel: a ReadWriteLock and a MultiLock on the master, with wake-ups", "[sentinel]") {
  redlock::test::SentinelSet set;
  redlock::Client client(set.uri());
  const auto k = key("rw-sentinel");
  const std::size_t master = set.master_index();
  redlock::ReadWriteLock w(client, k, sleepy());
  redlock::ReadWriteLock r(client, k, sleepy());
  REQUIRE(w.try_lock());
  CHECK(set.data(master).raw({"EXISTS", k}).integer() == 1);
  CHECK(reader_wakes_after(w, r) < 3s);  // retry_delay is 10 s: the release woke it
  const std::vector<std::string> keys{k + ":a", k + ":b"};
  redlock::MultiLock both(client, keys, sleepy());
  REQUIRE(both.try_lock());
  CHECK(set.data(master).raw({"EXISTS", keys[0], keys[1]}).integer() == 2);
  CHECK(both.release());
  CHECK(set.data(master).raw({"EXISTS", keys[0], keys[1]}).integer() == 0);
}

namespace {

std::vector<redlock::Client> clients_of(const redlock::test::ServerGroup& group) {
  std::vector<redlock::Client> clients;
  for (const auto& endpoint : group.endpoints()) clients.emplace_back(endpoint);
  return clients;
}

// A reader entry nobody holds, live for a minute, on one node only.
void plant_reader(const redlock::test::RedisServer& server, const std::string& k) {
  const auto t = server.raw({"TIME"});
  const long long now_ms =
      std::stoll(t.elements()[0].str()) * 1000 + std::stoll(t.elements()[1].str()) / 1000;
  server.raw({"ZADD", helper_key(k, ":readers"), std::to_string(now_ms + 60'000), "planted"});
}

}  // namespace

TEST_CASE("ReadWriteLock on 3 instances: quorum grants, minority grants rolled back",
          "[redis][rwlock][redlock]") {
  redlock::test::ServerGroup group(3);
  const auto clients = clients_of(group);
  const auto k = key("rw-quorum");
  auto fenced = fast();
  fenced.fencing = true;
  CHECK_THROWS_WITH(redlock::ReadWriteLock(clients, k, fenced), Catch::Contains("fencing"));
  CHECK_THROWS_WITH(redlock::ReadWriteLock({clients[0], redlock::Client(group[0].endpoint())}, k),
                    Catch::Contains("twice"));
  redlock::ReadWriteLock r1(clients, k, fast()), r2(clients, k, fast()), w(clients, k, fast());
  CHECK(w.options().ttl == fast().ttl);
  REQUIRE(r1.try_lock_shared());
  REQUIRE(r2.try_lock_shared());  // readers share on every node
  CHECK_FALSE(w.try_lock());
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(group[i].raw({"GET", k}).str() == "redlock:rw:readers");  // the readers', no writer's
  }
  r1.unlock_shared();
  r2.unlock_shared();
  // A reader entry on one node only: the writer still gets a majority, readers then none.
  plant_reader(group[0], k);
  REQUIRE(w.try_lock());
  CHECK(group[1].raw({"EXISTS", k}).integer() == 1);
  CHECK(group[2].raw({"EXISTS", k}).integer() == 1);
  CHECK_FALSE(r1.try_lock_shared());
  CHECK(group[0].raw({"ZCARD", helper_key(k, ":readers")}).integer() == 1);  // only the planted
  CHECK(w.release());
  // Entries on two nodes: the writer is refused, and its grant on the third is rolled back.
  plant_reader(group[1], k);
  CHECK_FALSE(w.try_lock());
  CHECK(group[2].raw({"EXISTS", k}).integer() == 0);
  // A paused node: a quorum still answers.
  group[0].raw({"DEL", helper_key(k, ":readers")});
  group[1].raw({"DEL", helper_key(k, ":readers")});
  group[2].pause();
  REQUIRE(w.try_lock());
  CHECK_FALSE(r1.try_lock_shared());
  CHECK(w.release());
  REQUIRE(r1.try_lock_shared());
  CHECK(r1.release_shared());
  group[2].resume();
}

TEST_CASE("ReadWriteLock on 3 instances: the writer's release wakes a waiting reader",
          "[redis][rwlock][redlock][wake]") {
  redlock::test::ServerGroup group(3);
  const auto clients = clients_of(group);
  const auto k = key("rw-quorum-wake");
  redlock::ReadWriteLock w(clients, k, sleepy()), r(clients, k, sleepy());
  REQUIRE(w.try_lock());
  CHECK(reader_wakes_after(w, r) < 3s);  // retry_delay is 10 s: the release woke it
}
