// tests/torture/controller.cpp: see controller.hpp.
#include "controller.hpp"

#include <signal.h>    // sigaction, kill, SIGINT, SIGTERM, SIGKILL, SIGPIPE
#include <stdlib.h>    // mkdtemp, setenv, unsetenv, getenv
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // readlink, getpid, access

#include <algorithm>   // std::min
#include <atomic>      // std::atomic
#include <cerrno>      // errno, ESRCH
#include <cstdio>      // std::fprintf, std::fopen
#include <cstring>     // std::strerror, std::strsignal
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem
#include <map>         // std::map
#include <memory>      // std::unique_ptr
#include <optional>    // std::optional
#include <random>      // std::random_device
#include <string>      // std::string
#include <thread>      // std::this_thread::sleep_for
#include <vector>      // std::vector

#include "checker.hpp"
#include "client_nemesis.hpp"
#include "cluster_nemesis.hpp"
#include "hold_log.hpp"
#include "liveness_nemesis.hpp"
#include "nemesis.hpp"
#include "sentinel_nemesis.hpp"
#ifdef REDLOCK_TORTURE_POSTGRES
#include "pg_nemesis.hpp"
#include "support/postgres_server.hpp"
#endif
#include "processes.hpp"
#include "support/zookeeper_server.hpp"
#include "worker.hpp"
#include "zookeeper_nemesis.hpp"

namespace redlock::torture {

namespace {

namespace fs = std::filesystem;
constexpr std::int64_t kMs = 1'000'000;
// --liveness: what check (8) allows past the documented bound on a busy 2-core machine (as
// tests/support/fair_queue.hpp's kSlack).
constexpr int kLivenessSlackMs = 1500;

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_signal(int sig) { g_signal.store(sig); }

void install_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  // The harness and the proxy guard their own writes; ignore SIGPIPE for anything else.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, nullptr);
}

std::string self_exe() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return {buf.data(), static_cast<std::size_t>(n)};
}

std::string make_run_dir() {
  std::string pattern = "/tmp/redlock-torture-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  }
  return pattern;
}

StoreState read_store(const test::RedisServer& store) {
  StoreState s;
  try {
    const auto timeout = std::chrono::milliseconds(30'000);
    const std::vector<Reply> r = store.raw_pipeline(
        {{"GET", kCounterKey}, {"GET", kShadowKey}, {"LRANGE", kAppliedListKey, "0", "-1"}},
        timeout);
    auto number = [](const Reply& reply) -> std::int64_t {
      return reply.is_nil() ? 0 : std::stoll(reply.str());
    };
    s.counter = number(r.at(0));
    s.shadow = number(r.at(1));
    for (const Reply& e : r.at(2).elements()) {
      const std::string& text = e.str();
      const std::size_t colon = text.find(':');
      if (colon == std::string::npos) throw std::runtime_error("bad list entry '" + text + "'");
      s.applied.emplace_back(std::stoull(text.substr(0, colon)),
                             std::stoll(text.substr(colon + 1)));
    }
    s.read = true;
  } catch (const std::exception& e) {
    s.error = e.what();
  }
  return s;
}

// Points the harness's temporary directories (its $TMPDIR) at `dir` while servers are created;
// restores the old value when destroyed. Runs before any worker exists, on the main thread.
class ScopedTmpdir {
 public:
  explicit ScopedTmpdir(const std::string& dir) {
    if (const char* old = std::getenv("TMPDIR"); old != nullptr) old_ = old;
    if (!dir.empty()) ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~ScopedTmpdir() {
    if (old_) {
      ::setenv("TMPDIR", old_->c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
  }
  ScopedTmpdir(const ScopedTmpdir&) = delete;
  ScopedTmpdir& operator=(const ScopedTmpdir&) = delete;

 private:
  std::optional<std::string> old_;
};

// A controller killed with SIGKILL (a ctest timeout) cannot remove its servers' directories, and
// under /dev/shm they hold RAM. Removes the harness's directories there ("redlock-test-<pid>-*")
// whose process no longer exists. Only for the default /dev/shm, never for a --data-dir.
void sweep_stale_server_dirs(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = "redlock-test-";
    if (name.rfind(prefix, 0) != 0 || !entry.is_directory(ec)) continue;
    const std::size_t dash = name.find('-', prefix.size());
    if (dash == std::string::npos) continue;
    const std::string pid_text = name.substr(prefix.size(), dash - prefix.size());
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    fs::remove_all(entry.path(), ec);
  }
}

std::string pick_data_dir(const std::string& wanted) {
  if (!wanted.empty()) return wanted;
  if (::access("/dev/shm", W_OK) == 0) {
    sweep_stale_server_dirs("/dev/shm");
    return "/dev/shm";
  }
  return "";
}

void copy_quietly(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
}

}  // namespace

int run_controller(const Options& o) {
  install_handlers();
  const int nodes_count = o.mode == Mode::redlock ? 5 : o.mode == Mode::lock ? 1 : 0;
  std::uint64_t seed = o.seed;
  if (!o.seed_given) {
    std::random_device rd;
    seed = (static_cast<std::uint64_t>(rd()) << 32 | rd()) % 1'000'000'000ULL;
  }

  std::string run_dir;
  std::string exe;
  try {
    run_dir = make_run_dir();
    exe = self_exe();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redlock-torture: %s\n", e.what());
    return 2;
  }
  bool keep_dir = o.keep;
  auto finish = [&](int code) {
    if (!keep_dir) {
      std::error_code ec;
      fs::remove_all(run_dir, ec);
    } else {
      std::fprintf(stdout, "run directory kept: %s\n", run_dir.c_str());
    }
    return code;
  };

  RunInfo info;
  info.mode = o.mode;
  info.primitive = o.primitive;
  // A ReadWriteLock on a quorum has no fence (it refuses fencing); a MultiLock's sets are
  // checked per key, with no fenced counter (disjoint sets hold at once).
  info.fenced = !(o.primitive == Primitive::multilock ||
                  (o.primitive == Primitive::rwlock && o.mode == Mode::redlock));
  // Enforced where one store keeps the writer's marker; a reader that entered ahead of a waiting
  // writer while a fault was in force is excused (fault_windows.hpp). On a quorum, preference is
  // per node and best effort where the nodes disagree: reported only.
  info.writer_preference_enforced = o.mode != Mode::redlock;
  info.unsafe = o.unsafe;
  info.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(o.duration).count();
  info.processes = o.processes;
  info.threads = o.threads;
  info.seed = seed;
  info.ttl_ms = o.ttl_ms;
  info.nodes = nodes_count;
  if (o.unsafe == Unsafe::clock) {
    info.notes.emplace_back(
        "nodes 0-2 (a majority) run under faketime '+0 x2': their keys expire "
        "at half the ttl in real time");
  }
  if (o.unsafe == Unsafe::restart) {
    info.notes.emplace_back(
        "nodes run without persistence; majority_restart kills -9 three of five "
        "and restarts them empty");
  }
  if (o.auto_renew) {
    info.notes.emplace_back("auto_renew on: windows end at the last renewed deadline");
  }
  if (o.fair > 0 || (o.fair == 0 && o.mode == Mode::lock)) {
    info.notes.emplace_back("fair mode: waiters queue; a release hands the lock to one of them");
  }
  if (o.liveness) {
    info.liveness.on = true;
    set_liveness_bound(info.liveness, o.ttl_ms, o.threads, kLivenessSlackMs);
    if (o.liveness_bound_ms > 0) {  // to show that check (8) fails a real run
      info.liveness.bound_ns = o.liveness_bound_ms * kMs;
      info.liveness.bound_text = "--liveness-bound, not the documented " + info.liveness.bound_text;
    }
    info.notes.emplace_back(
        "liveness: no lock node faults; worker processes stopped, cut off (half-open) and killed "
        "-9 in groups, and an old-style SET NX client; check (8) bounds every wait");
  }
  if (o.mode == Mode::zookeeper) {
    info.notes.emplace_back(
        "zookeeper: one server (tick 200 ms), session timeout 2 s; the faults are SIGSTOP of "
        "the server (0.3-3.5 s) and kill -9 + restart");
  }
  if (o.client_faults) {
    info.notes.emplace_back(
        "client faults: one worker at a time partitioned (its own proxies black-holed) or "
        "paused (SIGSTOP) for the lease + 0.2-1 s");
  }
  if (o.mode == Mode::cluster) {
    info.exclusion_enforced = false;
    info.notes.emplace_back(
        "cluster: 3 masters, 3 replicas; wait_replicas=" + std::to_string(o.wait_replicas) +
        "; a failover after kill -9 may lose a grant the replica never received, so overlaps "
        "are reported, not failed: fencing must hold");
  }
  if (o.mode == Mode::sentinel) {
    info.exclusion_enforced = false;
    info.notes.emplace_back(
        "sentinel: 1 master, 2 replicas, 3 sentinels; wait_replicas=" +
        std::to_string(o.wait_replicas) +
        "; a failover may lose a grant the new master never received, so overlaps are "
        "reported, not failed: fencing must hold");
  }

  const bool postgres = o.mode == Mode::postgres || o.mode == Mode::postgres_session;
  if (o.mode == Mode::postgres) {
    info.notes.emplace_back(
        "postgres: a lease row on one PostgreSQL 15 (statement_timeout 300 ms); faults: "
        "SIGSTOP of the server, kill -9 and restart, pg_terminate_backend of every client");
  }
  if (o.mode == Mode::postgres_session) {
    info.exclusion_enforced = false;
    info.notes.emplace_back(
        "postgres-session: pg_try_advisory_lock on a dedicated connection; a terminated "
        "backend or a restart frees the lock at once while its holder believes it holds "
        "until its next check, so overlaps are reported, not failed: fencing must hold");
  }
#ifndef REDLOCK_TORTURE_POSTGRES
  if (postgres) {
    std::fprintf(stderr, "redlock-torture: built without PostgreSQL (REDLOCK_WITH_POSTGRES)\n");
    return finish(2);
  }
#endif

  const std::string data_dir = pick_data_dir(o.data_dir);
  const int long_holds =
      o.long_hold_percent >= 0 ? o.long_hold_percent : (o.unsafe == Unsafe::none ? 1 : 5);
  std::fprintf(stdout,
               "redlock-torture: mode=%s primitive=%s unsafe=%s duration=%s processes=%d %s=%d "
               "seed=%llu long holds %d%%, run dir %s, server data under %s\n",
               to_string(o.mode), to_string(o.primitive), to_string(o.unsafe),
               format_duration(o.duration).c_str(), o.processes, o.async ? "coroutines" : "threads",
               o.threads, static_cast<unsigned long long>(seed), long_holds, run_dir.c_str(),
               data_dir.empty() ? "$TMPDIR" : data_dir.c_str());
  std::fflush(stdout);

  std::FILE* nemesis_log = std::fopen((run_dir + "/nemesis.log").c_str(), "w");
  std::vector<Worker> workers;
  int exit_code = 0;
  {
    // Servers and proxies live in this scope; everything below runs on this (the main) thread.
    std::unique_ptr<test::RedisServer> store;
    std::vector<Node> nodes;
    std::unique_ptr<test::SentinelSet> sentinels;
#ifdef REDLOCK_TORTURE_POSTGRES
    std::unique_ptr<test::PostgresServer> pg;
#endif
    std::unique_ptr<test::ZooKeeperServer> zookeeper;
    std::unique_ptr<test::RedisCluster> cluster;
    try {
      const ScopedTmpdir tmpdir(data_dir);
      store = std::make_unique<test::RedisServer>(test::ServerOptions{});
      if (o.mode == Mode::sentinel) {
        test::SentinelSetOptions so;
        so.persistence = true;
        sentinels = std::make_unique<test::SentinelSet>(so);
      }
#ifdef REDLOCK_TORTURE_POSTGRES
      if (postgres) pg = std::make_unique<test::PostgresServer>();
#endif
      if (o.mode == Mode::zookeeper) zookeeper = std::make_unique<test::ZooKeeperServer>();
      if (o.mode == Mode::cluster) cluster = std::make_unique<test::RedisCluster>();
      for (int i = 0; i < nodes_count; ++i) {
        test::ServerOptions so;
        so.persistence = o.unsafe != Unsafe::restart;
        Node node;
        if (o.unsafe == Unsafe::clock && i < 3) {
          so.faketime = "+0 x2";
          node.fake_clock = true;
        }
        node.server = std::make_unique<test::RedisServer>(so);
        node.proxy = std::make_unique<test::FaultProxy>("127.0.0.1", node.server->port());
        nodes.push_back(std::move(node));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "redlock-torture: cannot start the servers: %s\n", e.what());
      if (nemesis_log != nullptr) std::fclose(nemesis_log);
      return finish(2);
    }

    std::vector<int> ports;
    ports.reserve(nodes.size());
    for (const Node& n : nodes) ports.push_back(n.proxy->port());
    const std::int64_t start = mono_ns();
    const std::int64_t until = start + o.duration.count();
    WorkerConfig base;
    base.threads = o.threads;
    base.mode = o.mode;
    base.primitive = o.primitive;
    base.node_ports = ports;
    base.store_port = store->port();
    base.until_ns = until;
    base.seed = seed;
    base.ttl_ms = o.ttl_ms;
    base.long_hold_percent = long_holds;
    base.auto_renew = o.auto_renew;
    base.retry_delay_ms = o.retry_delay_ms;
    base.wake_on_release = o.wake_on_release;
    base.fair = o.fair;
    base.async = o.async;
    base.log_waits = o.liveness;
    // --liveness: waits long enough to show a stall past the bound (then ended by the bound).
    if (o.liveness) base.acquire_bound_ms = static_cast<int>(3 * info.liveness.bound_ns / kMs);
    base.parent = ::getpid();
    if (sentinels) {
      base.sentinel_uri = sentinels->uri();
      base.wait_replicas = o.wait_replicas;
    }
#ifdef REDLOCK_TORTURE_POSTGRES
    if (pg)
      base.postgres_uri = pg->uri() + (o.mode == Mode::postgres_session ? "?mode=session" : "");
#endif
    if (zookeeper) base.zookeeper_uri = zookeeper->uri("/torture?session_timeout=2000");
    if (cluster) {
      base.sentinel_uri = cluster->uri();
      base.wait_replicas = o.wait_replicas;
    }
    std::vector<std::string> log_paths;
    // --client-faults, --liveness: each worker through proxies of its own (client_nemesis.hpp).
    const bool own_proxies = o.client_faults || o.liveness;
    std::vector<ClientSeat> seats(own_proxies ? static_cast<std::size_t>(o.processes) : 0);
    try {
      for (int p = 0; p < o.processes; ++p) {
        WorkerConfig c = own_proxies ? route_through_own_proxies(base, seats[p]) : base;
        c.index = p;
        c.log_path = run_dir + "/worker-" + std::to_string(p) + ".log";
        log_paths.push_back(c.log_path);
        workers.push_back(Worker{p, spawn_worker(exe, c)});
        if (own_proxies) {
          seats[p].pid = workers.back().pid;
          seats[p].log_path = c.log_path;
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "redlock-torture: cannot start the workers: %s\n", e.what());
      stop_workers(workers);
      if (nemesis_log != nullptr) std::fclose(nemesis_log);
      return finish(2);
    }

    // The nemesis runs until the last worker is gone (they finish their last hold after
    // `until`). A worker still alive long after that is hung: it is killed and reported.
    std::unique_ptr<Faults> faults;
    if (sentinels) {
      faults = std::make_unique<SentinelNemesis>(*sentinels, seed, nemesis_log);
#ifdef REDLOCK_TORTURE_POSTGRES
    } else if (pg) {
      faults = std::make_unique<PgNemesis>(*pg, seed, nemesis_log);
#endif
    } else if (zookeeper) {
      faults = std::make_unique<ZooKeeperNemesis>(*zookeeper, seed, nemesis_log);
    } else if (cluster) {
      faults = std::make_unique<ClusterNemesis>(*cluster, seed, nemesis_log);
    } else if (!o.liveness) {
      faults = std::make_unique<Nemesis>(nodes, o.unsafe, seed, nemesis_log);
    }
    LivenessNemesis* liveness = nullptr;
    if (o.liveness) {
      auto own = std::make_unique<LivenessNemesis>(
          *nodes[0].server, Fleet{workers, seats, base, exe, run_dir, log_paths}, o.ttl_ms,
          start + 1000 * kMs, until - (o.ttl_ms + 1500) * kMs, seed, nemesis_log);
      liveness = own.get();
      faults = std::move(own);
    }
    ClientNemesis* client_faults = nullptr;
    if (o.client_faults) {
      const std::int64_t lease_ms = o.mode == Mode::zookeeper ? 2000 : o.ttl_ms;
      auto both =
          std::make_unique<ClientNemesis>(std::move(faults), seats, lease_ms, start + 1000 * kMs,
                                          until - (lease_ms + 1500) * kMs, seed, nemesis_log);
      client_faults = both.get();
      faults = std::move(both);
    }
    Faults& nemesis = *faults;
    ClientKills kills{
        std::mt19937_64(seed ^ 0x6b696c6cULL), start + 2000 * kMs, until - 3000 * kMs, {}};
    const std::int64_t give_up =
        until + (base.acquire_bound_ms + 2LL * o.ttl_ms) * kMs + 20'000 * kMs;
    bool hung = false;
    while (reap(workers) > 0 && g_signal.load() == 0) {
      const std::int64_t now = mono_ns();
      if (now > give_up) {
        hung = true;
        kill_workers(workers, SIGKILL);
        continue;
      }
      for (const Worker& w : workers) {  // an exited worker's pid may be reused: never signal it
        if (w.done && static_cast<std::size_t>(w.index) < seats.size()) seats[w.index].pid = -1;
      }
      std::int64_t next = nemesis.step(now);
      if (o.kill_clients) {
        try {
          next = std::min(
              next, kill_a_client(kills, workers, base, exe, run_dir, log_paths, nemesis_log, now));
        } catch (const std::exception& e) {  // no replacement: the run goes on with fewer
          info.notes.emplace_back(std::string("kill_worker: ") + e.what());
          kills.stop = now;
        }
      }
      const std::int64_t wait =
          std::min<std::int64_t>(std::max<std::int64_t>(next - mono_ns(), 0), 20 * kMs);
      std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
    }
    if (const int sig = g_signal.load(); sig != 0) {
      std::fprintf(stderr, "redlock-torture: interrupted by signal %d; cleaning up\n", sig);
      nemesis.heal_all();  // a paused worker is resumed while its pid is still its own
      stop_workers(workers);
      if (nemesis_log != nullptr) std::fclose(nemesis_log);
      return finish(128 + sig);  // servers and proxies are destroyed on the way out
    }
    nemesis.heal_all();
    if (std::getenv("TORTURE_DEBUG_STATS") != nullptr) {
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        try {
          std::fprintf(stdout, "node %zu:\n%s\n", i,
                       nodes[i].server->raw({"INFO", "commandstats"}).str().c_str());
        } catch (const std::exception&) {
        }
      }
    }
    info.faults = nemesis.injected();
    if (!kills.killed.empty()) {
      info.faults["kill_worker"] = static_cast<std::int64_t>(kills.killed.size());
    }
    info.killed = kills.killed;
    if (client_faults != nullptr) info.paused = client_faults->paused();
    if (liveness != nullptr) {
      info.killed.insert(liveness->killed().begin(), liveness->killed().end());
      info.paused = liveness->paused();
      info.liveness.partitioned = liveness->partitioned();
      info.liveness.outside = liveness->outside();
    }
    info.processes = static_cast<int>(workers.size());
    for (const std::string& p : nemesis.problems()) info.notes.push_back("nemesis: " + p);
    for (const Worker& w : workers) {
      if (info.killed.count(w.index) != 0) continue;  // killed on purpose
      if (!WIFEXITED(w.status) || WEXITSTATUS(w.status) != 0) {
        info.worker_failures.push_back("worker " + std::to_string(w.index) + ": " +
                                       describe_exit(w.status) + (hung ? " (hung, killed)" : ""));
      }
    }

    const StoreState state = read_store(*store);
    LogContents logs;
    try {
      logs = read_logs(log_paths);
    } catch (const std::exception& e) {
      info.notes.emplace_back(e.what());
    }
    if (nemesis_log != nullptr) std::fflush(nemesis_log);
    info.fault_windows = read_fault_windows(run_dir + "/nemesis.log");
    const Report report = check(logs, state, info);
    print_report(report, stdout);
    std::fprintf(stdout, "%s\n", to_json(report).c_str());
    std::fflush(stdout);
    exit_code = report.pass ? 0 : 1;
    if (!report.pass) keep_dir = true;  // the evidence
    if (keep_dir) {
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        copy_quietly(nodes[i].server->log_path(),
                     run_dir + "/node-" + std::to_string(i) + "-redis.log");
      }
      copy_quietly(store->log_path(), run_dir + "/store-redis.log");
    }
  }
  if (nemesis_log != nullptr) std::fclose(nemesis_log);
  return finish(exit_code);
}

}  // namespace redlock::torture
