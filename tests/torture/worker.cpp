// tests/torture/worker.cpp: see worker.hpp.
#include "worker.hpp"

#include <signal.h>     // signal, SIGPIPE, SIGKILL
#include <sys/prctl.h>  // prctl, PR_SET_PDEATHSIG
#include <unistd.h>     // getppid, getpid

#include <algorithm>  // std::min, std::max
#include <cstdio>     // std::fprintf
#include <exception>  // std::exception
#include <optional>   // std::optional
#include <random>     // std::mt19937_64, distributions
#include <stdexcept>  // std::invalid_argument
#include <thread>     // std::thread, std::this_thread

#include <redlock/redlock.hpp>
#ifdef REDLOCK_TORTURE_POSTGRES
#include <redlock/postgres.hpp>  // postgres::DatabaseOptions
#endif

#include "hold_log.hpp"
#include "worker_parts.hpp"  // Store, Counters, ModeLock, HoldTrack, plan_sleep

namespace redlock::torture {

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// ---------------------------------------------------------------------------------------------
// Arguments

std::string join_ports(const std::vector<int>& ports) {
  std::string out;
  for (int p : ports) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

std::int64_t to_int64(const std::string& name, const std::string& value) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(value, &used);
    if (used != value.size()) throw std::invalid_argument(name);
    return v;
  } catch (const std::exception&) {
    throw std::invalid_argument("worker: bad value for " + name + ": '" + value + "'");
  }
}

// ---------------------------------------------------------------------------------------------
// Threads

class WorkerThread {
 public:
  WorkerThread(const WorkerConfig& config, int thread, const std::vector<Client>& clients,
               PgDatabase* pg, ZooKeeperSession* zookeeper, HoldLogWriter& log, Counters& counters)
      : seat_(config, thread, clients, pg, zookeeper), log_(log), counters_(counters) {}

  void run() {
    LockBase& lock = seat_.lock->get();
    while (mono_ns() < seat_.config.until_ns) {
      const nanoseconds bound = acquire_bound(seat_.config);
      counters_.attempts.fetch_add(1);
      bool held = false;
      bool failed = true;
      const std::int64_t t_try = mono_ns();
      if (seat_.config.log_waits) log_.write_line(wait_prefix("try", t_try));
      try {
        held = lock.try_lock_for(bound);
        failed = false;
      } catch (const Error&) {
        counters_.acquire_failed(std::current_exception());
      }
      if (seat_.config.log_waits) {
        const char* result = held ? "acquired" : failed ? "error" : "contended";
        log_.write_line(wait_prefix("wait", t_try) + field("t_end", mono_ns()) +
                        " result=" + result);
      }
      if (held) {
        counters_.acquired.fetch_add(1);
        hold(lock);
        continue;
      }
      if (!failed) {
        counters_.contended.fetch_add(1);  // the bound passed while others held it
        continue;
      }
      // Every node failed: a short pause, so a dead single node does not turn this loop into a
      // busy spin.
      std::this_thread::sleep_for(
          milliseconds(std::uniform_int_distribution<int>(5, 25)(seat_.rng)));
    }
  }

 private:
  // "try p=0 t=1 t_try=<ns>" (the call starts) or the start of its "wait" record (hold_log.hpp).
  std::string wait_prefix(const char* event, std::int64_t t_try) const {
    return event + field("p", seat_.config.index) + field("t", seat_.index) + field("t_try", t_try);
  }

  void hold(LockBase& lock) {
    HoldTrack track(
        log_, seat_.config.index, seat_.index, ++seat_.seq, [&lock] { return lock.validity(); },
        lock.fence());

    read_sleep_write(seat_, track, true);

    // Release, and say how it ended.
    track.observe();
    const std::int64_t t_rel = mono_ns();
    EndKind kind = EndKind::error;
    try {
      kind = lock.release() ? EndKind::released : EndKind::lost;
    } catch (const std::exception& e) {
      kind = EndKind::error;
      counters_.sample("release", e);
    }
    track.ended(kind, t_rel);
  }

  Seat seat_;  // its number, store connection, randomness and lock
  HoldLogWriter& log_;
  Counters& counters_;
};

}  // namespace

std::vector<std::string> WorkerConfig::to_args() const {
  std::vector<std::string> args = {"--worker"};
  const auto add = [&args](const char* name, std::string value) {
    args.emplace_back(name);
    args.push_back(std::move(value));
  };
  add("--index", std::to_string(index));
  add("--threads", std::to_string(threads));
  add("--mode", to_string(mode));
  add("--primitive", to_string(primitive));
  add("--store", std::to_string(store_port));
  add("--until", std::to_string(until_ns));
  add("--log", log_path);
  add("--seed", std::to_string(seed));
  add("--ttl", std::to_string(ttl_ms));
  add("--acquire-bound", std::to_string(acquire_bound_ms));
  add("--long-holds", std::to_string(long_hold_percent));
  add("--auto-renew", auto_renew ? "1" : "0");
  add("--retry-delay", std::to_string(retry_delay_ms));
  add("--wake-on-release", std::to_string(wake_on_release));
  add("--fair", std::to_string(fair));
  add("--async", async ? "1" : "0");
  add("--log-waits", log_waits ? "1" : "0");
  add("--parent", std::to_string(parent));
  add("--wait-replicas", std::to_string(wait_replicas));
  if (!node_ports.empty()) add("--nodes", join_ports(node_ports));
  if (!sentinel_uri.empty()) add("--sentinel", sentinel_uri);
  if (!postgres_uri.empty()) add("--postgres", postgres_uri);
  if (!zookeeper_uri.empty()) add("--zookeeper", zookeeper_uri);
  return args;
}

WorkerConfig parse_worker_args(const std::vector<std::string>& args) {
  WorkerConfig c;
  if (args.empty() || args[0] != "--worker") throw std::invalid_argument("worker: no --worker");
  for (std::size_t i = 1; i < args.size(); i += 2) {
    const std::string& name = args[i];
    if (i + 1 >= args.size()) throw std::invalid_argument("worker: " + name + " needs a value");
    const std::string& value = args[i + 1];
    if (name == "--index") {
      c.index = static_cast<int>(to_int64(name, value));
    } else if (name == "--threads") {
      c.threads = static_cast<int>(to_int64(name, value));
    } else if (name == "--mode") {
      const auto m = parse_mode(value);
      if (!m) throw std::invalid_argument("worker: bad --mode " + value);
      c.mode = *m;
    } else if (name == "--primitive") {
      const auto p = parse_primitive(value);
      if (!p) throw std::invalid_argument("worker: bad --primitive " + value);
      c.primitive = *p;
    } else if (name == "--nodes") {
      std::size_t start = 0;
      while (start <= value.size()) {
        const std::size_t comma = value.find(',', start);
        const std::string part =
            value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        c.node_ports.push_back(static_cast<int>(to_int64(name, part)));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (name == "--store") {
      c.store_port = static_cast<int>(to_int64(name, value));
    } else if (name == "--until") {
      c.until_ns = to_int64(name, value);
    } else if (name == "--log") {
      c.log_path = value;
    } else if (name == "--seed") {
      c.seed = static_cast<std::uint64_t>(to_int64(name, value));
    } else if (name == "--ttl") {
      c.ttl_ms = static_cast<int>(to_int64(name, value));
    } else if (name == "--acquire-bound") {
      c.acquire_bound_ms = static_cast<int>(to_int64(name, value));
    } else if (name == "--long-holds") {
      c.long_hold_percent = static_cast<int>(to_int64(name, value));
    } else if (name == "--auto-renew") {
      c.auto_renew = to_int64(name, value) != 0;
    } else if (name == "--retry-delay") {
      c.retry_delay_ms = static_cast<int>(to_int64(name, value));
    } else if (name == "--wake-on-release") {
      c.wake_on_release = static_cast<int>(to_int64(name, value));
    } else if (name == "--async") {
      c.async = to_int64(name, value) != 0;
    } else if (name == "--log-waits") {
      c.log_waits = to_int64(name, value) != 0;
    } else if (name == "--fair") {
      c.fair = static_cast<int>(to_int64(name, value));
    } else if (name == "--parent") {
      c.parent = static_cast<pid_t>(to_int64(name, value));
    } else if (name == "--sentinel") {
      c.sentinel_uri = value;
    } else if (name == "--postgres") {
      c.postgres_uri = value;
    } else if (name == "--zookeeper") {
      c.zookeeper_uri = value;
    } else if (name == "--wait-replicas") {
      c.wait_replicas = static_cast<int>(to_int64(name, value));
    } else {
      throw std::invalid_argument("worker: unknown argument " + name);
    }
  }
  if ((c.node_ports.empty() && c.sentinel_uri.empty() && c.postgres_uri.empty() &&
       c.zookeeper_uri.empty()) ||
      c.store_port <= 0 || c.log_path.empty() || c.threads <= 0) {
    throw std::invalid_argument(
        "worker: --nodes (or --sentinel, --postgres or --zookeeper), --store, --log and "
        "--threads are "
        "required");
  }
  return c;
}

#ifndef REDLOCK_TORTURE_ASYNC  // built without redlock::asio: main() refuses --async
void run_async_workers(const WorkerConfig&, const std::vector<Client>&, PgDatabase*,
                       ZooKeeperSession*, HoldLogWriter&, Counters&) {
  throw std::invalid_argument("worker: built without the asio component (redlock::asio)");
}
#endif

int run_worker(const WorkerConfig& config) {
  // Die with the controller (its main thread spawned us and lives until the end), and close the
  // race where it died before the prctl.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (config.parent != 0 && ::getppid() != config.parent) return 3;
  // hiredis writes with write(2), not send(MSG_NOSIGNAL). The library drops a connection after its
  // first error, so a second write to a reset socket (the one that raises SIGPIPE) should not
  // happen, and 40 s of faults without this line killed no worker; ignoring it anyway keeps a
  // SIGPIPE from masquerading as a crash of the library under test.
  ::signal(SIGPIPE, SIG_IGN);

  HoldLogWriter log(config.log_path);
  log.write_line("start" + field("p", config.index) + field("pid", ::getpid()) +
                 field("threads", config.threads));

  // Lock mode uses node 0 only.
  std::vector<int> ports = config.node_ports;
  if (config.mode == Mode::lock) ports.resize(1);
  std::vector<Client> clients;
  if (config.mode == Mode::sentinel || config.mode == Mode::cluster) {
    Endpoint e = Endpoint::parse(config.sentinel_uri);  // redis-sentinel:// or redis-cluster://
    e.wait_replicas = config.wait_replicas;
    e.wait_timeout = milliseconds(100);
    clients.emplace_back(e);
    ports.clear();
  }
  std::optional<ZooKeeperSession> zookeeper;
  if (config.mode == Mode::zookeeper) {
#ifdef REDLOCK_TORTURE_ZOOKEEPER
    zookeeper.emplace(config.zookeeper_uri);
#endif
    ports.clear();
  }
  for (int port : ports) {
    Endpoint e;
    e.host = "127.0.0.1";
    e.port = port;
    e.connect_timeout = milliseconds(200);
    e.command_timeout = milliseconds(200);
    clients.emplace_back(e);
  }

  // The postgres modes: one Database (a pool) per process, statements cut off at 300 ms (the
  // command timeout of the Redis modes' 200 ms, plus the statement's own work).
  std::optional<PgDatabase> pg;
  if (!config.postgres_uri.empty()) {
#ifdef REDLOCK_TORTURE_POSTGRES
    redlock::postgres::DatabaseOptions o;
    o.statement_timeout = milliseconds(300);
    o.pool_size = static_cast<std::size_t>(config.threads) + 1;
    pg.emplace(config.postgres_uri, o);
#else
    throw std::invalid_argument("worker: built without PostgreSQL (REDLOCK_WITH_POSTGRES=OFF)");
#endif
  }

  Counters counters;
  if (config.primitive != Primitive::lock) {
    run_primitive_workers(config, clients, pg ? &*pg : nullptr, zookeeper ? &*zookeeper : nullptr,
                          log, counters);
  } else if (config.async) {
    run_async_workers(config, clients, pg ? &*pg : nullptr, zookeeper ? &*zookeeper : nullptr, log,
                      counters);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(config.threads));
    for (int t = 0; t < config.threads; ++t) {
      threads.emplace_back([&, t] {
        try {
          WorkerThread worker(config, t, clients, pg ? &*pg : nullptr,
                              zookeeper ? &*zookeeper : nullptr, log, counters);
          worker.run();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "redlock-torture worker %d thread %d: %s\n", config.index, t,
                       e.what());
          counters.fatal.fetch_add(1);
        }
      });
    }
    for (auto& th : threads) th.join();
  }

  for (const auto& [message, count] : counters.samples) {
    std::string flat = message;
    for (char& ch : flat) {
      if (ch == '\n') ch = ' ';
    }
    log.write_line("errsample" + field("p", config.index) + field("count", count) + " msg=" + flat);
  }
  log.write_line("stats" + field("p", config.index) + field("pid", ::getpid()) +
                 field("attempts", counters.attempts.load()) +
                 field("acquired", counters.acquired.load()) +
                 field("contended", counters.contended.load()) +
                 field("err_timeout", counters.err_timeout.load()) +
                 field("err_connection", counters.err_connection.load()) +
                 field("err_server", counters.err_server.load()) +
                 field("err_protocol", counters.err_protocol.load()) +
                 field("err_other", counters.err_other.load()));
  return counters.fatal.load() == 0 ? 0 : 1;
}

}  // namespace redlock::torture
