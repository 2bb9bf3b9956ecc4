// bench/backends.cpp: section 9, the other backends next to Redis in one run. PostgreSQL's
// uncontended Lock cycle against a raw libpq floor running the library's very statements
// (src/backends/postgres/pg_sql.hpp) synchronously on one connection; the Redis Lock cycle on a
// server on the same machine, for scale; and the hand-off with 8 contenders on one lock (from
// a release to the next holder's return from lock(): LISTEN/NOTIFY for PostgreSQL, pub/sub for
// Redis), with each worker's share of the acquisitions (fairness: min/max).
#include <libpq-fe.h>

#include <atomic>      // std::atomic
#include <chrono>      // std::chrono
#include <functional>  // std::function
#include <iostream>    // std::cout
#include <memory>      // std::unique_ptr
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string
#include <thread>      // std::thread
#include <vector>      // std::vector

#include <redlock/postgres.hpp>
#include <redlock/redlock.hpp>

#include "backends/postgres/pg_listener.hpp"  // pg_channel
#include "backends/postgres/pg_sql.hpp"
#include "bench.hpp"
#include "common.hpp"
#include "support/postgres_server.hpp"
#include "support/redis_server.hpp"

namespace bench {
namespace {

// The floor: one libpq connection, PQexecParams of the acquire and the release, text results.
class PgFloor {
 public:
  explicit PgFloor(const std::string& uri) : conn_(PQconnectdb(uri.c_str())) {
    if (PQstatus(conn_) != CONNECTION_OK) {
      throw std::runtime_error(std::string("floor: ") + PQerrorMessage(conn_));
    }
    exec("SET statement_timeout = 2000", {});
  }
  ~PgFloor() { PQfinish(conn_); }
  PgFloor(const PgFloor&) = delete;
  PgFloor& operator=(const PgFloor&) = delete;

  bool cycle() {
    const std::string token = std::to_string(++n_) + "-floor-token-of-22-chars";
    // No place in the queue (join false), so no waiter id, note or claim window.
    const bool got = exec(sql_.acquire, {name_, token, "30000", "false", "0", "", "0"});
    // The lock's channel, as the library names it (notified when nobody waits: a NOTIFY to no
    // listener, as in the library's cycle).
    return exec(sql_.release, {name_, token, channel_}) && got;
  }

 private:
  // True if the statement succeeded and returned or touched a row.
  bool exec(const std::string& sql, const std::vector<std::string>& params) {
    std::vector<const char*> values;
    for (const auto& p : params) values.push_back(p.c_str());
    PGresult* r = PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0);
    const ExecStatusType status = PQresultStatus(r);
    const bool ok = (status == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0)) ||
                    status == PGRES_COMMAND_OK;
    PQclear(r);
    return ok;
  }

  PGconn* conn_;
  redlock::detail::PgStatements sql_ = redlock::detail::pg_statements("redlock_leases");
  std::string name_ = "s9:floor";
  std::string channel_ = redlock::detail::pg_channel("redlock_leases", name_);
  std::uint64_t n_{0};
};

struct Handoff {
  Summary gap;  // release to the next holder's return from lock()
  std::size_t total{0};
  std::size_t min_per_worker{0};
  std::size_t max_per_worker{0};
};

// `workers` threads, each with its own lock object from `make`, take the lock in turn for
// `seconds`; each holds it for 1 ms.
template <class L>
Handoff handoff(int workers, double seconds, const std::function<std::unique_ptr<L>()>& make) {
  std::vector<std::unique_ptr<L>> locks;
  for (int i = 0; i < workers; ++i) locks.push_back(make());
  std::atomic<std::int64_t> released_at{0};
  std::atomic<bool> stop{false};
  std::vector<std::vector<std::int64_t>> gaps(workers);
  std::vector<std::size_t> counts(workers, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&, i] {
      while (!stop.load()) {
        if (!locks[i]->try_lock_for(std::chrono::seconds(2))) continue;
        const std::int64_t got = now_ns();
        const std::int64_t last = released_at.load();
        if (last != 0) gaps[i].push_back(got - last);
        ++counts[i];
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        released_at.store(now_ns());
        locks[i]->unlock();
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (auto& t : threads) t.join();
  Handoff h;
  std::vector<std::int64_t> all;
  for (const auto& g : gaps) all.insert(all.end(), g.begin(), g.end());
  h.gap = summarize(all);
  h.min_per_worker = counts.front();
  for (std::size_t c : counts) {
    h.total += c;
    h.min_per_worker = std::min(h.min_per_worker, c);
    h.max_per_worker = std::max(h.max_per_worker, c);
  }
  return h;
}

Json handoff_json(const Handoff& h) {
  Json j = Json::object();
  j.set("p50_us", h.gap.p50_ns / 1e3);
  j.set("p99_us", h.gap.p99_ns / 1e3);
  j.set("acquisitions", static_cast<double>(h.total));
  j.set("min_per_worker", static_cast<double>(h.min_per_worker));
  j.set("max_per_worker", static_cast<double>(h.max_per_worker));
  return j;
}

}  // namespace

void section_backends(const Config& config, Report& report) {
  std::cout << "\n[9] Backends: PostgreSQL 15 next to its raw libpq floor and to Redis; hand-off "
               "with "
            << config.workers << " contenders\n";
  redlock::test::PostgresServer pg;
  redlock::test::RedisServer redis;
  redlock::postgres::Database db(pg.uri());
  db.ensure_table();
  redlock::postgres::Lock pg_lock(db, "s9:lock");
  redlock::Client client(redis.endpoint());
  redlock::Lock redis_lock(client, redlock::test::key("s9:lock"));
  PgFloor floor(pg.uri());
  const std::vector<Timed> t =
      interleaved(config.rounds, config.seconds,
                  {[&] { return floor.cycle(); }, cycle_of(pg_lock), cycle_of(redis_lock)});
  const double rate = ratio(t[1].cycles_per_s, t[0].cycles_per_s);
  const bool met = rate >= 0.9;
  Table table({"uncontended lock+unlock", "cycles/s", "p50 us", "cpu us/cyc", "ratio"});
  table.row({"PostgreSQL floor (raw libpq)", num(t[0].cycles_per_s), num(t[0].p50_ns / 1e3),
             num(t[0].cpu_ns / 1e3), "1.00x"});
  table.row({"postgres::Lock", num(t[1].cycles_per_s), num(t[1].p50_ns / 1e3),
             num(t[1].cpu_ns / 1e3),
             times(rate) + (met ? " of the floor (goal >=0.9x met)" : " (goal >=0.9x MISSED)")});
  table.row({"redis Lock", num(t[2].cycles_per_s), num(t[2].p50_ns / 1e3), num(t[2].cpu_ns / 1e3),
             times(ratio(t[2].cycles_per_s, t[1].cycles_per_s)) + " of postgres::Lock"});
  table.print(std::cout);

  const int workers = config.workers;
  const double seconds = config.quick ? 1.0 : 3.0;
  redlock::postgres::DatabaseOptions many;
  many.pool_size = static_cast<std::size_t>(workers) + 1;
  redlock::postgres::Database contended_db(pg.uri(), many);
  const Handoff ph = handoff<redlock::postgres::Lock>(workers, seconds, [&] {
    return std::make_unique<redlock::postgres::Lock>(contended_db, "s9:contended");
  });
  const std::string rk = redlock::test::key("s9:contended");
  const Handoff rh = handoff<redlock::Lock>(
      workers, seconds, [&] { return std::make_unique<redlock::Lock>(client, rk); });
  Table hand({"hand-off, " + std::to_string(workers) + " contenders", "p50 us", "p99 us",
              "acquired", "min/max per worker"});
  for (const auto& [name, h] : {std::make_pair("postgres::Lock (LISTEN/NOTIFY)", ph),
                                std::make_pair("redis Lock (pub/sub)", rh)}) {
    hand.row({name, num(h.gap.p50_ns / 1e3), num(h.gap.p99_ns / 1e3), std::to_string(h.total),
              std::to_string(h.min_per_worker) + "/" + std::to_string(h.max_per_worker)});
  }
  hand.print(std::cout);
  std::cout << "  median of " << config.rounds << " interleaved rounds of " << config.seconds
            << " s, one thread; hand-off: each holder keeps the lock 1 ms, " << seconds
            << " s per backend\n";

  Json j = Json::object();
  const char* names[] = {"postgres_floor", "postgres_lock", "redis_lock"};
  for (int i = 0; i < 3; ++i) {
    j.set(names[i], timed_json(t[i]));
  }
  j.set("postgres_vs_floor", rate);
  j.set("goal_met", met);
  j.set("handoff_postgres", handoff_json(ph));
  j.set("handoff_redis", handoff_json(rh));
  report.sections.set("9_backends", std::move(j));
}

}  // namespace bench
