// bench/fleet_peers.cpp: section 12's rows beyond the Redis Lock: postgres::Lock and
// zookeeper::Lock (forked workers, as the Redis rows), and the peers at one size, node-redlock and
// redis-py, run by their harnesses (bench/fleet_node.js, bench/fleet_redis_py.py) when their
// runtimes are present.
#include <arpa/inet.h>   // htons, inet_pton
#include <netinet/in.h>  // sockaddr_in
#include <sys/socket.h>  // socket, connect
#include <unistd.h>      // close, write, read

#include <algorithm>  // std::min, std::max
#include <chrono>     // std::chrono::system_clock
#include <cstdio>     // popen, pclose, fgets
#include <cstdlib>    // std::system
#include <iostream>   // std::cout
#include <memory>     // std::make_shared
#include <sstream>    // std::istringstream
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <thread>     // std::this_thread
#include <vector>     // std::vector

#include <fmt/format.h>

#include <redlock/redlock.hpp>

#include "fleet.hpp"
#include "raw.hpp"
#include "support/redis_server.hpp"  // redlock::test::key
#if defined(REDLOCK_BENCH_POSTGRES)
#include <redlock/postgres.hpp>

#include "support/postgres_server.hpp"
#endif
#if defined(REDLOCK_BENCH_ZOOKEEPER)
#include <redlock/zookeeper.hpp>

#include "support/zookeeper_server.hpp"
#endif

#ifndef REDLOCK_BENCH_SOURCE_DIR
#define REDLOCK_BENCH_SOURCE_DIR "bench"
#endif

namespace bench {
namespace {

FleetRow noted(const std::string& variant, int processes, const std::string& note) {
  FleetRow row{variant, FleetResult{}, note};
  row.result.processes = processes;
  return row;
}

// Runs `make`'s workers at every size; `fits(n)` empty or a reason not to run that size.
template <class Fits>
void backend_rows(const std::string& variant, const FleetSettings& settings,
                  const MakeWorkerLock& make, const SampleServer& sample, SampleAt at, Fits fits,
                  FleetRows& rows) {
  for (const int n : settings.sizes) {
    const std::string why = fits(n);
    if (!why.empty()) {
      rows.push_back(noted(variant, n, "n/a: " + why));
      continue;
    }
    rows.push_back(measured_row(variant, n, [&] {
      FleetResult r = run_fleet(n, settings, make, sample, at);
      r.client_commands = -1;  // the workers' counter reads RESP, not these protocols
      return r;
    }));
  }
}

#if defined(REDLOCK_BENCH_POSTGRES)
void postgres_rows(const FleetSettings& settings, FleetRows& rows) {
  const std::string variant = "postgres::Lock";
  if (!redlock::test::PostgresServer::available()) {
    for (int n : settings.sizes) rows.push_back(noted(variant, n, "n/a: no PostgreSQL 15 here"));
    return;
  }
  redlock::test::PostgresServer pg;
  { redlock::postgres::Database(pg.uri()).ensure_table(); }
  pg.psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'");
  pg.restart();
  pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
  const int max_connections = std::stoi(pg.psql("SHOW max_connections"));
  const std::string uri = pg.uri();
  const MakeWorkerLock make = [uri] {
    redlock::postgres::DatabaseOptions options;
    options.pool_size = 1;
    auto db = std::make_shared<redlock::postgres::Database>(uri, options);
    WorkerLock w;
    w.make<redlock::postgres::Lock>(*db, "s12:fleet");
    w.owner = db;
    return w;
  };
  // The statements the clients sent (pg_stat_statements, top level: a function call is one;
  // counted as each ends, so a sample while the workers run is exact), but for its own queries.
  // Not xact_commit: PostgreSQL makes every LISTEN session of the database read each NOTIFY in a
  // transaction of its own, whoever it is for, a server-side term that grows with the listeners.
  const SampleServer sample = [&pg] {
    return ServerSample{{std::stod(pg.psql("SELECT coalesce(sum(calls), 0) FROM "
                                           "pg_stat_statements WHERE query NOT LIKE "
                                           "'%pg_stat_statements%'"))},
                        -1};
  };
  // Each process holds its pooled connection and its LISTEN connection.
  auto fits = [max_connections](int n) -> std::string {
    if (2 * n + 5 <= max_connections) return "";
    return fmt::format(
        "{} processes need {} connections, the harness's server allows {} "
        "(max_connections)",
        n, 2 * n, max_connections);
  };
  backend_rows(variant, settings, make, sample, SampleAt::loops_done, fits, rows);
}
#endif

#if defined(REDLOCK_BENCH_ZOOKEEPER)
// The server's "Received:" count (packets received, as mntr's zk_packets_received), from the
// srvr four-letter word (the harness whitelists ruok and srvr).
double zk_packets_received(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("srvr: socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string text;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::write(fd, "srvr", 4) == 4) {
    char buf[4096];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const std::size_t at = text.find("Received: ");
  if (at == std::string::npos) throw std::runtime_error("srvr: no Received: line");
  return std::stod(text.substr(at + 10));
}

void zookeeper_rows(const FleetSettings& settings, FleetRows& rows) {
  const std::string variant = "zookeeper::Lock";
  if (!redlock::test::ZooKeeperServer::available()) {
    for (int n : settings.sizes) rows.push_back(noted(variant, n, "n/a: no ZooKeeper here"));
    return;
  }
  redlock::test::ZooKeeperServer zk;
  const std::string uri = zk.uri("/fleet?session_timeout=4000");
  const MakeWorkerLock make = [uri] {
    auto session = std::make_shared<redlock::zookeeper::Session>(uri);
    WorkerLock w;
    w.make<redlock::zookeeper::Lock>(*session, "s12");
    w.owner = session;
    return w;
  };
  const int port = zk.port();
  const SampleServer sample = [port] { return ServerSample{{zk_packets_received(port)}, -1}; };
  backend_rows(
      variant, settings, make, sample, SampleAt::loops_done, [](int) { return std::string(); },
      rows);
}
#endif

// ---- The peers ---------------------------------------------------------------------------------

struct Anchor {
  std::string variant;
  std::string command;  // the harness's command line without its arguments; empty: missing
  std::string missing;  // why it cannot run
};

bool succeeds(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

Anchor node_anchor() {
  const std::string dir = REDLOCK_BENCH_SOURCE_DIR;
  Anchor a{"node-redlock 5.0.0-beta.2 (ioredis)", "", ""};
  if (!succeeds("node --version")) {
    a.missing = "n/a: no node";
  } else if (!succeeds("test -d " + dir + "/node/node_modules/redlock -a -d " + dir +
                       "/node/node_modules/ioredis")) {
    a.missing = "n/a: run npm install --prefix bench/node redlock@5.0.0-beta.2 ioredis";
  } else {
    a.command = "NODE_PATH=" + dir + "/node/node_modules node " + dir + "/fleet_node.js";
  }
  return a;
}

Anchor python_anchor() {
  Anchor a{"redis-py (Debian python3-redis)", "", "n/a: no python3 with the redis module"};
  for (const char* python : {"/usr/bin/python3", "python3"}) {
    if (succeeds(std::string(python) + " -c 'import redis'")) {
      a.command = std::string(python) + " " + REDLOCK_BENCH_SOURCE_DIR + "/fleet_redis_py.py";
      a.missing.clear();
      break;
    }
  }
  return a;
}

struct Pclose {
  void operator()(FILE* f) const noexcept {
    if (f != nullptr) ::pclose(f);
  }
};

// Runs a harness: it prints "start <epoch ms>" once its processes are connected (the window
// opens then) and "acq <count> <longest wait ms>" for each process. The server is sampled at the
// start and once the harness has exited.
FleetResult run_anchor(const std::string& command, int port, int n, const FleetSettings& settings,
                       const SampleServer& sample) {
  FleetResult r;
  r.processes = n;
  r.seconds = settings.seconds;
  r.min_per_process = ~std::uint64_t{0};
  const std::string line =
      fmt::format("{} {} {} {} {} {} {}", command, port, redlock::test::key("s12:peer"), n,
                  settings.seconds, settings.hold.count(), settings.warm_up_seconds);
  std::unique_ptr<FILE, Pclose> pipe(::popen(line.c_str(), "r"));
  if (!pipe) throw std::runtime_error("cannot run " + command);
  ServerSample before;
  char text[256];
  int reported = 0;
  while (std::fgets(text, sizeof text, pipe.get()) != nullptr) {
    std::istringstream in(text);
    std::string tag;
    std::uint64_t count = 0;
    double value = 0;
    if (!(in >> tag >> count)) continue;
    if (tag == "start") {
      using std::chrono::milliseconds;
      std::this_thread::sleep_until(std::chrono::system_clock::time_point(milliseconds(count)));
      before = sample();
    } else if (tag == "acq" && in >> value) {
      ++reported;
      r.acquisitions += count;
      r.min_per_process = std::min(r.min_per_process, count);
      r.max_per_process = std::max(r.max_per_process, count);
      r.max_wait_ms = std::max(r.max_wait_ms, value);
    }
  }
  const int status = ::pclose(pipe.release());
  const ServerSample after = sample();
  if (before.commands.empty()) throw std::runtime_error("the harness never started its window");
  r.server.cpu_us = after.cpu_us - before.cpu_us;
  r.server.commands = {after.commands.front() - before.commands.front()};
  if (reported != n) {
    r.error = fmt::format("{} of {} processes reported (exit status {})", reported, n, status);
  }
  return r;
}

}  // namespace

void fleet_backend_rows(const FleetSettings& settings, FleetRows& rows) {
#if defined(REDLOCK_BENCH_POSTGRES)
  postgres_rows(settings, rows);
#else
  for (int n : settings.sizes) rows.push_back(noted("postgres::Lock", n, "n/a: not built"));
#endif
#if defined(REDLOCK_BENCH_ZOOKEEPER)
  zookeeper_rows(settings, rows);
#else
  for (int n : settings.sizes) rows.push_back(noted("zookeeper::Lock", n, "n/a: not built"));
#endif
}

void fleet_anchor_rows(int processes, const FleetSettings& settings, int port,
                       const SampleServer& sample, FleetRows& rows) {
  for (const Anchor& a : {node_anchor(), python_anchor()}) {
    if (a.command.empty()) {
      rows.push_back(noted(a.variant, processes, a.missing));
      continue;
    }
    rows.push_back(measured_row(a.variant, processes, [&] {
      return run_anchor(a.command, port, processes, settings, sample);
    }));
  }
}

}  // namespace bench
