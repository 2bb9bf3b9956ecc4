// redlock-bench: what a lock operation costs, next to what the same Redis commands cost without
// the library, both measured in the same run on the same machine.
//
// Every figure has a floor: a plain synchronous hiredis client (redisCommandArgv, no pool, no
// options) sending the very commands the library sends (SET key token NX PX ttl GET to acquire;
// EVALSHA of the library's release script, KEYS[1] = key, ARGV = token, release channel; tokens
// of 40 hex characters from getrandom). SCRIPT EXISTS confirms that the server cached the
// library's scripts under the SHA1s the floor uses before the floor loads them itself. The table
// shows library, floor and their ratio. The benchmark starts its own redis-servers (one fresh
// set per section, 127.0.0.1 TCP) through redlock_test_support.
//
// Sections:
//   1. Uncontended Lock, one server: try_lock()+unlock() and lock()+unlock() cycles, 1 and 4
//      client threads on distinct keys (one shared Client). Cycles/s, p50/p99 latency of a
//      cycle, client CPU per cycle (CLOCK_THREAD_CPUTIME_ID summed over the worker threads) and
//      C++ allocations per cycle (the benchmark counts operator new per thread). Variants run
//      interleaved (raw, lib, lib, then lib, lib, raw, ... rotating the order), several rounds;
//      the table shows the median over rounds, so machine noise hits library and floor alike.
//   2. The same with Redlock over 5 servers. Floor: 5 synchronous contexts, pipelined fan-out
//      (append the command to all 5, flush all 5, then read the 5 replies; the same for the
//      release): the best a simple client can do. A sequential fan-out (one blocking command
//      per node) is shown for context. Then node 5 is SIGSTOPped and the library's figure is
//      reported for two command timeouts (no floor: a synchronous client would hang).
//   3. Contention: N workers (threads sharing one Client, then processes each with its own)
//      each with its own Lock object on one key, hold 0 ms and 1 ms, wake_on_release on and
//      off. Acquisitions/s, wait p50/p99/max (lock() call to return), acquisitions per worker
//      (min/max), Redis commands per acquisition (INFO commandstats deltas), and handoff
//      latency: CLOCK_MONOTONIC from a holder calling unlock() to the next acquisition by
//      *another* worker. Floor: a PING round trip measured before every run (target: handoff
//      p50 within 3x the PING p50). Then the handoff path alone: two workers strictly
//      alternating, library vs a raw waiter (its own SUBSCRIBEd context, SET on each release
//      message), next to PINGs back to back and after 1 ms idle.
//   4. Watchdog: many leases (auto_renew) on distinct keys on one Watchdog, left alone for about
//      two renewal periods, then released, in 5 rounds (1 with --quick); WatchdogStats (renewals,
//      round trips, lateness) and the watchdog threads' CPU per renewal (read from
//      /proc/self/task/<tid>/schedstat at the window's edges). Floors: pipelined EVALSHA of the
//      same extend script in batches of the watchdog's mean batch size, back to back (median of
//      5 passes) and paced at the watchdog's mean batch rate (sleep_until between batches, as
//      any timer-driven renewer must), one pass after each library round; medians.
//   5. Degraded (degraded.cpp): Redlock over 5 servers with node 5 SIGSTOPped, black-holed, or
//      slowed by 5 ms each way (fault proxy), against a healthy phase just before each; the
//      first second of the fault on its own; the time until node 5 is used again after it
//      heals. Goal printed as met or missed: >= 0.8x healthy cycles/s, acquire p50 <= 1.5x.
//
//   6. Load (load.cpp): the hot-key rate with thousands of waiting channels, a lone thread after
//      contention, a thousand waiters on one key; each goal printed as met or missed.
//
//   7. TLS (bench/tls.cpp): Lock and Redlock(5) cycles over rediss:// against a raw floor doing
//      the same commands synchronously over OpenSSL with hiredis's reader; the same in plain
//      text; reconnect (handshake) cost with and without session resumption.
//
//   8. Sentinel (bench/sentinel.cpp): the Lock cycle through Sentinel against the same Lock
//      straight to the master, the cost of wait_replicas=1, and the time from kill -9 of the
//      master to the first acquire on the new one, against down-after-milliseconds.
//
//   9. Backends (bench/backends.cpp, with REDLOCK_WITH_POSTGRES): postgres::Lock's cycle against
//      a raw libpq floor running the library's statements, the Redis Lock beside it, and the
//      hand-off p50 and per-worker share with 8 contenders on each.
//  10. ZooKeeper (bench/zookeeper.cpp, when the component is built): zookeeper::Lock cycles
//      against the C client's create+delete of an ephemeral sequential znode, with the client
//      settings the library uses (goal >= 0.9x); the same with the client's default settings,
//      a Redis Lock and a Redlock(5) beside it; hand-off p50 and fairness with 8 contenders.
//   11. Redis Cluster (bench/cluster.cpp): the Lock cycle on a 3-master cluster against a
//      standalone server (1 and 4 threads), client commands per cycle, the extend right after a
//      held lock's slot migrated, and keys on 3 masters against 1.
//   12. Fleet (bench/fleet.cpp): N = 8, 32, 128, 512 forked processes on one key, each its own
//      Client and lock, try_lock_until / hold 1 ms / unlock for 4 s: acquisitions/s, server and
//      client commands per acquisition, per-process min/max, max wait, Redis CPU per
//      acquisition, for the default Lock, fair off and on, Redlock(3), Semaphore(2) (default and
//      fair = false), PostgreSQL, ZooKeeper and the peers (node-redlock, redis-py) at N = 32; the
//      goals of #32 (default Lock, default Semaphore(2)) as PASS or MISS.
//   13. Async (bench/async.cpp, built with the redlock::asio target): co_await'ed lock cycles on
//      one io_context thread against the blocking API (C = 1) and a raw hiredis client keeping 64
//      cycles in flight on one connection per node (Lock and Redlock(5)); 10,000 coroutines
//      waiting on one key (threads, heap per waiting operation against a timer, hand-off against
//      the blocking one, FIFO order); 10,000 acquires cancelled at random stages (keys and queue
//      entries left). The goals of #33 as PASS or MISS.
//   14. Primitives (bench/primitives.cpp): Election's hand-over against `etcdctl elect` (etcd 3.4)
//      and `redlock-run --elect`, crash failover, leader() against a GET; ReadWriteLock against
//      Kazoo on ZooKeeper and against a Lock on Redis, 8 readers + 1 writer; MultiLock of 4 keys.
//      Rows whose programs are not installed print "skipped: ...".
//
// Nothing here asserts timing: a benchmark is not a test. The exit status is 1 only if a
// measurement failed (an exception, a server that would not start, an uncontended attempt that
// did not get its lock).
//
// Usage: redlock-bench [--quick] [--section N]... [--seconds S] [--rounds R] [--threads 1,4]
//                      [--channels N] [--waiters N] [--fleet-sizes LIST] [--fleet-seconds S]
//                      [--async-waiters N] [--async-cancels N] [--json PATH]
#include <sched.h>        // sched_getaffinity, CPU_COUNT
#include <signal.h>       // signal, SIGPIPE
#include <sys/utsname.h>  // uname

#include <hiredis/hiredis.h>

#include <algorithm>   // std::find, std::rotate, std::min, std::max, std::binary_search
#include <atomic>      // std::atomic
#include <exception>   // std::exception
#include <fstream>     // std::ifstream, std::ofstream
#include <functional>  // std::function
#include <iostream>    // std::cout, std::cerr
#include <memory>      // std::unique_ptr, std::make_shared
#include <sstream>     // std::stringstream
#include <stdexcept>   // std::invalid_argument, std::runtime_error
#include <string>      // std::string
#include <thread>      // std::thread
#include <utility>     // std::forward, std::move
#include <vector>      // std::vector

#include <fmt/format.h>

#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "primitives.hpp"  // elect_leader_main
#include "raw.hpp"
#include "support/redis_server.hpp"

#ifndef REDLOCK_BENCH_BUILD_TYPE
#define REDLOCK_BENCH_BUILD_TYPE "unknown"
#endif
#ifndef REDLOCK_BENCH_DEFAULT_JSON
#define REDLOCK_BENCH_DEFAULT_JSON "bench-results.json"
#endif

namespace bench {

using redlock::test::RedisServer;
using redlock::test::ServerGroup;
using std::chrono::milliseconds;

redlock::Endpoint endpoint_of(const RedisServer& server, milliseconds timeout) {
  redlock::Endpoint e = server.endpoint();
  e.connect_timeout = timeout;
  e.command_timeout = timeout;
  return e;
}

namespace {

constexpr int kWarmupCycles = 20;

// ---- The timed loop shared by sections 1 and 2 -----------------------------------------------

struct Gate {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> stop{false};
};

struct ThreadResult {
  std::vector<std::int64_t> latency_ns;
  std::int64_t cpu_ns{0};
  CpuSplit split;
  std::int64_t wall_ns{0};
  std::uint64_t cycles{0};
  std::uint64_t misses{0};  // attempts that did not get the lock: must stay 0 (uncontended)
  std::uint64_t allocations{0};
  bool ready{false};
  std::string error;
};

// Runs `cycle.run()` until told to stop; one clock read per cycle (a cycle's latency is the
// time between consecutive reads).
template <class Cycle>
void timed_loop(Cycle& cycle, Gate& gate, ThreadResult& out, std::size_t capacity) {
  for (int i = 0; i < kWarmupCycles; ++i) cycle.run();  // connections, script cache, pools
  out.latency_ns.reserve(capacity);
  out.ready = true;
  gate.ready.fetch_add(1);
  while (!gate.go.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const std::int64_t cpu0 = thread_cpu_ns();
  const CpuSplit split0 = thread_cpu_split();
  const std::uint64_t alloc0 = thread_allocations();
  const std::int64_t t0 = now_ns();
  std::int64_t last = t0;
  while (!gate.stop.load(std::memory_order_relaxed)) {
    const bool held = cycle.run();
    const std::int64_t t = now_ns();
    out.latency_ns.push_back(t - last);
    last = t;
    ++out.cycles;
    if (!held) ++out.misses;
  }
  out.wall_ns = last - t0;
  out.cpu_ns = thread_cpu_ns() - cpu0;
  const CpuSplit split1 = thread_cpu_split();
  out.split = CpuSplit{split1.user_ns - split0.user_ns, split1.system_ns - split0.system_ns};
  out.allocations = thread_allocations() - alloc0;
}

struct RunStats {
  double cycles_per_s{0};
  double p50_ns{0};
  double p99_ns{0};
  double cpu_ns{0};          // worker-thread CPU per cycle
  double user_ns{0};         // ... of which user space (approximate split)
  double system_ns{0};       // ... of which kernel
  double process_cpu_ns{0};  // whole-process CPU per cycle (catches background threads)
  double allocations{0};     // operator new calls per cycle
  std::uint64_t cycles{0};
  std::uint64_t misses{0};
  std::string error;
};

// Starts `threads` threads, each building its cycle with make(i) (in the thread, so that
// non-movable locks work), warms up, then runs for `seconds` in step with the others.
template <class Make>
RunStats run_threads(int threads, double seconds, Make make) {
  Gate gate;
  std::vector<ThreadResult> results(static_cast<std::size_t>(threads));
  const auto capacity = static_cast<std::size_t>(seconds * 60'000) + 1024;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      ThreadResult& out = results[static_cast<std::size_t>(i)];
      try {
        auto cycle = make(i);
        timed_loop(cycle, gate, out, capacity);
      } catch (const std::exception& e) {
        out.error = e.what();
      }
      if (!out.ready) {
        out.ready = true;
        gate.ready.fetch_add(1);
      }
    });
  }
  while (gate.ready.load() < threads) std::this_thread::sleep_for(milliseconds(1));
  const std::int64_t pcpu0 = process_cpu_ns();
  gate.go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  gate.stop.store(true);
  for (auto& t : pool) t.join();
  const std::int64_t pcpu = process_cpu_ns() - pcpu0;

  RunStats s;
  std::vector<std::int64_t> all;
  std::int64_t cpu = 0;
  std::int64_t user = 0;
  std::int64_t system = 0;
  std::uint64_t allocations = 0;
  for (auto& r : results) {
    if (!r.error.empty() && s.error.empty()) s.error = r.error;
    if (r.wall_ns > 0) s.cycles_per_s += static_cast<double>(r.cycles) * 1e9 / r.wall_ns;
    s.cycles += r.cycles;
    s.misses += r.misses;
    cpu += r.cpu_ns;
    user += r.split.user_ns;
    system += r.split.system_ns;
    allocations += r.allocations;
    all.insert(all.end(), r.latency_ns.begin(), r.latency_ns.end());
  }
  const Summary lat = summarize(std::move(all));
  s.p50_ns = lat.p50_ns;
  s.p99_ns = lat.p99_ns;
  if (s.cycles > 0) {
    const auto n = static_cast<double>(s.cycles);
    s.cpu_ns = static_cast<double>(cpu) / n;
    s.user_ns = static_cast<double>(user) / n;
    s.system_ns = static_cast<double>(system) / n;
    s.process_cpu_ns = static_cast<double>(pcpu) / n;
    s.allocations = static_cast<double>(allocations) / n;
  }
  if (s.error.empty() && s.misses > 0) {
    s.error = fmt::format("{} of {} uncontended attempts did not get the lock", s.misses, s.cycles);
  }
  return s;
}

// ---- Cycles ----------------------------------------------------------------------------------

enum class Op { try_lock, lock };

// One library cycle: try_lock() (or lock()) then unlock(), on a Lock or a Redlock.
template <class L, Op kOp>
class LibCycle {
 public:
  template <class... Args>
  explicit LibCycle(Args&&... args) : lock_(std::forward<Args>(args)...) {}
  [[gnu::noinline]] bool run() {
    if constexpr (kOp == Op::try_lock) {
      if (!lock_.try_lock()) return false;
    } else {
      lock_.lock();
    }
    lock_.unlock();
    return true;
  }

 private:
  L lock_;
};

// The single-server floor.
class RawCycle {
 public:
  RawCycle(const redlock::Endpoint& endpoint, std::string key)
      : context_(raw_connect(endpoint)), lock_(context_.get(), std::move(key)) {}
  [[gnu::noinline]] bool run() {
    if (!lock_.acquire()) return false;
    lock_.release();
    return true;
  }

 private:
  RawContext context_;
  RawLock lock_;
};

std::vector<RawContext> connect_all(const std::vector<redlock::Endpoint>& endpoints) {
  std::vector<RawContext> out;
  for (const auto& e : endpoints) out.push_back(raw_connect(e));
  return out;
}

std::vector<redisContext*> pointers(const std::vector<RawContext>& contexts) {
  std::vector<redisContext*> out;
  for (const auto& c : contexts) out.push_back(c.get());
  return out;
}

// The quorum floor: pipelined or sequential fan-out over N synchronous contexts.
class RawQuorumCycle {
 public:
  RawQuorumCycle(const std::vector<redlock::Endpoint>& endpoints, std::string key, bool pipelined)
      : contexts_(connect_all(endpoints)),
        quorum_(pointers(contexts_), std::move(key), pipelined) {}
  [[gnu::noinline]] bool run() {
    if (!quorum_.acquire()) return false;
    quorum_.release();
    return true;
  }

 private:
  std::vector<RawContext> contexts_;
  RawQuorum quorum_;
};

// ---- Sections 1 and 2: interleaved rounds, medians, table --------------------------------------

enum class Kind { floor, library, other_raw };

struct Variant {
  Variant(std::string name_, Kind kind_, std::string compare_to_,
          std::function<RunStats(int threads)> run_)
      : name(std::move(name_)),
        kind(kind_),
        compare_to(std::move(compare_to_)),
        run(std::move(run_)) {}
  std::string name;
  Kind kind;               // floor: what the others are compared with
  std::string compare_to;  // name of the floor variant
  std::function<RunStats(int threads)> run;
  std::vector<RunStats> rounds;
};

struct Median {
  double cycles_per_s{0}, p50_ns{0}, p99_ns{0}, cpu_ns{0}, user_ns{0}, system_ns{0},
      process_cpu_ns{0}, allocations{0};
};

Median median_of(const std::vector<RunStats>& rounds) {
  auto pick = [&](double RunStats::*field) {
    std::vector<double> v;
    for (const auto& r : rounds) {
      if (r.error.empty()) v.push_back(r.*field);
    }
    return median(std::move(v));
  };
  Median m;
  m.cycles_per_s = pick(&RunStats::cycles_per_s);
  m.p50_ns = pick(&RunStats::p50_ns);
  m.p99_ns = pick(&RunStats::p99_ns);
  m.cpu_ns = pick(&RunStats::cpu_ns);
  m.user_ns = pick(&RunStats::user_ns);
  m.system_ns = pick(&RunStats::system_ns);
  m.process_cpu_ns = pick(&RunStats::process_cpu_ns);
  m.allocations = pick(&RunStats::allocations);
  return m;
}

Json median_json(const Median& m) {
  Json j = Json::object();
  j.set("cycles_per_s", m.cycles_per_s);
  j.set("p50_us", m.p50_ns / 1e3);
  j.set("p99_us", m.p99_ns / 1e3);
  j.set("cpu_us_per_cycle", m.cpu_ns / 1e3);
  j.set("user_cpu_us_per_cycle", m.user_ns / 1e3);
  j.set("system_cpu_us_per_cycle", m.system_ns / 1e3);
  j.set("process_cpu_us_per_cycle", m.process_cpu_ns / 1e3);
  j.set("allocations_per_cycle", m.allocations);
  return j;
}

Json run_json(const RunStats& r) {
  Json j = Json::object();
  j.set("cycles_per_s", r.cycles_per_s);
  j.set("cycles", r.cycles);
  j.set("p50_us", r.p50_ns / 1e3);
  j.set("p99_us", r.p99_ns / 1e3);
  j.set("cpu_us_per_cycle", r.cpu_ns / 1e3);
  j.set("user_cpu_us_per_cycle", r.user_ns / 1e3);
  j.set("system_cpu_us_per_cycle", r.system_ns / 1e3);
  j.set("process_cpu_us_per_cycle", r.process_cpu_ns / 1e3);
  j.set("allocations_per_cycle", r.allocations);
  if (!r.error.empty()) j.set("error", r.error);
  return j;
}

// Runs every variant for every thread count, `rounds` times, rotating the order each round, then
// prints the table and returns the JSON rows.
Json run_rounds(const Config& config, std::vector<Variant>& variants, Report& report,
                const std::string& section) {
  Json rows = Json::array();
  Table table({"variant", "thr", "cycles/s", "floor", "ratio", "p50 us", "floor", "ratio", "p99 us",
               "floor", "ratio", "cpu us/cyc", "floor", "ratio", "user us", "floor", "new/cyc"});
  for (const int threads : config.threads) {
    for (auto& v : variants) v.rounds.clear();
    std::vector<std::size_t> order(variants.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (int round = 0; round < config.rounds; ++round) {
      for (const std::size_t i : order) {
        RunStats r = variants[i].run(threads);
        if (!r.error.empty()) {
          report.errors.push_back(
              fmt::format("{}: {} ({} threads): {}", section, variants[i].name, threads, r.error));
        }
        variants[i].rounds.push_back(std::move(r));
      }
      std::rotate(order.begin(), order.begin() + 1, order.end());
    }
    std::vector<Median> medians;
    for (const auto& v : variants) medians.push_back(median_of(v.rounds));
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const Variant& v = variants[i];
      const Median& m = medians[i];
      Json row = Json::object();
      row.set("variant", v.name);
      row.set("threads", threads);
      row.set("median", median_json(m));
      Json each = Json::array();
      for (const auto& r : v.rounds) each.push(run_json(r));
      row.set("rounds", std::move(each));
      if (v.kind == Kind::floor) {
        row.set("is_floor", true);
        rows.push(std::move(row));
        continue;
      }
      std::size_t f = 0;
      while (f < variants.size() && variants[f].name != v.compare_to) ++f;
      const Median& fm = medians[f];
      Json ratios = Json::object();
      ratios.set("floor", v.compare_to);
      ratios.set("cycles_per_s", ratio(m.cycles_per_s, fm.cycles_per_s));
      ratios.set("p50", ratio(m.p50_ns, fm.p50_ns));
      ratios.set("p99", ratio(m.p99_ns, fm.p99_ns));
      ratios.set("cpu", ratio(m.cpu_ns, fm.cpu_ns));
      row.set("ratio_to_floor", std::move(ratios));
      rows.push(std::move(row));
      table.row({v.name, std::to_string(threads), num(m.cycles_per_s), num(fm.cycles_per_s),
                 times(ratio(m.cycles_per_s, fm.cycles_per_s)), num(m.p50_ns / 1e3),
                 num(fm.p50_ns / 1e3), times(ratio(m.p50_ns, fm.p50_ns)), num(m.p99_ns / 1e3),
                 num(fm.p99_ns / 1e3), times(ratio(m.p99_ns, fm.p99_ns)), num(m.cpu_ns / 1e3),
                 num(fm.cpu_ns / 1e3), times(ratio(m.cpu_ns, fm.cpu_ns)), num(m.user_ns / 1e3),
                 num(fm.user_ns / 1e3), v.kind == Kind::library ? num(m.allocations) : "-"});
    }
  }
  table.print(std::cout);
  return rows;
}

std::string check_script(redisContext* c, const std::string& sha, const char* what, Report& report,
                         const std::string& section) {
  if (script_cached(c, sha)) return "identical (SCRIPT EXISTS " + sha.substr(0, 12) + "...)";
  report.errors.push_back(fmt::format(
      "{}: the floor's {} script differs from the library's; update bench/raw.cpp", section, what));
  return "DIFFERENT from the library's";
}

// ---- Section 1 ---------------------------------------------------------------------------------

void section_uncontended(const Config& config, Report& report) {
  std::cout << "\n[1] Uncontended Lock, 1 server: try_lock()/lock() + unlock() per cycle, distinct "
               "keys per thread, one shared Client\n";
  std::cout.flush();
  RedisServer server;
  const redlock::Endpoint endpoint = endpoint_of(server, config.timeout);
  redlock::Client client(endpoint);
  RawContext admin = raw_connect(endpoint);

  // The library runs first on this server, so the floor can check it uses the same script (the
  // release of fair = false: the floor's cycle is the plain one).
  {
    redlock::LockOptions plain;
    plain.fair = false;
    redlock::Lock probe(client, redlock::test::key("s1:probe"), plain);
    if (probe.try_lock()) probe.unlock();
  }
  const std::string script =
      check_script(admin.get(), release_script_sha(), "release", report, "section 1");
  load_scripts(admin.get());

  auto key = [](int i) { return redlock::test::key("s1:t" + std::to_string(i)); };
  std::vector<Variant> variants;
  variants.emplace_back("raw hiredis (floor)", Kind::floor, "", [&](int threads) {
    return run_threads(threads, config.seconds, [&](int i) { return RawCycle(endpoint, key(i)); });
  });
  variants.emplace_back("try_lock+unlock", Kind::library, "raw hiredis (floor)", [&](int threads) {
    return run_threads(threads, config.seconds, [&](int i) {
      return LibCycle<redlock::Lock, Op::try_lock>(client, key(i));
    });
  });
  variants.emplace_back("lock+unlock", Kind::library, "raw hiredis (floor)", [&](int threads) {
    return run_threads(threads, config.seconds,
                       [&](int i) { return LibCycle<redlock::Lock, Op::lock>(client, key(i)); });
  });
  // What fair mode costs when nobody contends (the question of making it the default).
  redlock::LockOptions fair;
  fair.fair = true;
  variants.emplace_back(
      "lock+unlock, fair", Kind::library, "raw hiredis (floor)", [&](int threads) {
        return run_threads(threads, config.seconds, [&](int i) {
          return LibCycle<redlock::Lock, Op::lock>(client, key(i) + ":fair", fair);
        });
      });
  // What the metrics hooks cost when an observer is set but does nothing (goal: <= 1.02x CPU).
  redlock::LockOptions observed;
  observed.observer = std::make_shared<redlock::Observer>();
  variants.emplace_back(
      "lock+unlock, no-op observer", Kind::library, "lock+unlock", [&](int threads) {
        return run_threads(threads, config.seconds, [&](int i) {
          return LibCycle<redlock::Lock, Op::lock>(client, key(i) + ":observed", observed);
        });
      });
  Json rows = run_rounds(config, variants, report, "section 1");

  Json j = Json::object();
  j.set("what", "uncontended Lock acquire+release cycles on one server");
  j.set("rounds", config.rounds);
  j.set("seconds_per_run", config.seconds);
  j.set("ttl_ms", static_cast<long long>(kTtl.count()));
  j.set("release_script", script);
  j.set("rows", std::move(rows));
  report.sections.set("1_uncontended", std::move(j));
  std::cout << "  median of " << config.rounds << " interleaved rounds of " << config.seconds
            << " s; cpu = client worker-thread CPU (user = its user-space part); new/cyc = C++ "
               "allocations per cycle; release script "
            << script << "\n";
}

// ---- Section 2 ---------------------------------------------------------------------------------

struct PausedRun {
  milliseconds timeout{0};
  int cycles{0};
  int held{0};
  double seconds{0};
  Summary acquire;
  Summary release;
  std::string error;
};

PausedRun paused_run(const std::vector<redlock::Client>& clients, milliseconds timeout, int cycles,
                     const std::string& key) {
  PausedRun out;
  out.timeout = timeout;
  redlock::Redlock lock(clients, key);
  std::vector<std::int64_t> acquire;
  std::vector<std::int64_t> release;
  const std::int64_t start = now_ns();
  try {
    for (int i = 0; i < cycles; ++i) {
      const std::int64_t t0 = now_ns();
      const bool held = lock.try_lock();
      const std::int64_t t1 = now_ns();
      acquire.push_back(t1 - t0);
      if (!held) continue;
      ++out.held;
      lock.unlock();
      release.push_back(now_ns() - t1);
    }
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  out.seconds = static_cast<double>(now_ns() - start) / 1e9;
  out.cycles = static_cast<int>(acquire.size());
  out.acquire = summarize(std::move(acquire));
  out.release = summarize(std::move(release));
  return out;
}

void section_redlock(const Config& config, Report& report) {
  std::cout
      << "\n[2] Redlock over 5 servers: try_lock()/lock() + unlock() per cycle, distinct keys "
         "per thread, one Client per node shared by the threads\n";
  std::cout.flush();
  ServerGroup group(5);
  std::vector<redlock::Endpoint> endpoints;
  std::vector<redlock::Client> clients;
  for (std::size_t i = 0; i < group.size(); ++i) {
    endpoints.push_back(endpoint_of(group[i], config.timeout));
    clients.emplace_back(endpoints.back());
  }
  std::vector<RawContext> admins = connect_all(endpoints);
  {
    // The release of fair = false (the floor's cycle is the plain one), as in section 1; the
    // rows below run the default (fair: the orderer also checks its queue).
    redlock::LockOptions plain;
    plain.fair = false;
    redlock::Redlock probe(clients, redlock::test::key("s2:probe"), plain);
    if (probe.try_lock()) probe.unlock();
  }
  std::string script;
  for (auto& a : admins) {
    script = check_script(a.get(), release_script_sha(), "release", report, "section 2");
  }
  for (auto& a : admins) load_scripts(a.get());

  auto key = [](int i) { return redlock::test::key("s2:t" + std::to_string(i)); };
  const std::string kFloor = "raw pipelined fan-out (floor)";
  std::vector<Variant> variants;
  variants.emplace_back(kFloor, Kind::floor, "", [&](int threads) {
    return run_threads(threads, config.seconds,
                       [&](int i) { return RawQuorumCycle(endpoints, key(i), true); });
  });
  variants.emplace_back("try_lock+unlock", Kind::library, kFloor, [&](int threads) {
    return run_threads(threads, config.seconds, [&](int i) {
      return LibCycle<redlock::Redlock, Op::try_lock>(clients, key(i));
    });
  });
  variants.emplace_back("lock+unlock", Kind::library, kFloor, [&](int threads) {
    return run_threads(threads, config.seconds, [&](int i) {
      return LibCycle<redlock::Redlock, Op::lock>(clients, key(i));
    });
  });
  variants.emplace_back("raw sequential fan-out", Kind::other_raw, kFloor, [&](int threads) {
    return run_threads(threads, config.seconds,
                       [&](int i) { return RawQuorumCycle(endpoints, key(i), false); });
  });
  Json rows = run_rounds(config, variants, report, "section 2");
  std::cout << "  median of " << config.rounds << " interleaved rounds of " << config.seconds
            << " s; ratios against the pipelined fan-out; release script " << script << "\n";

  // One node hung (SIGSTOP): the library alone, for two command timeouts.
  std::cout << "\n  Redlock with node 5 of 5 SIGSTOPped (try_lock+unlock, 1 thread; library only: "
               "a synchronous client would hang)\n";
  std::vector<milliseconds> timeouts{milliseconds(200), milliseconds(50)};
  std::vector<std::vector<redlock::Client>> sets;
  for (const milliseconds t : timeouts) {
    std::vector<redlock::Client> set;
    for (std::size_t i = 0; i < group.size(); ++i) set.emplace_back(endpoint_of(group[i], t));
    // Warm pools, as in a running program when a node hangs.
    redlock::Redlock warm(set, redlock::test::key("s2:paused"));
    if (warm.try_lock()) warm.unlock();
    sets.push_back(std::move(set));
  }
  Table table({"command_timeout", "cycles", "held", "cycles/s", "acquire p50 ms", "acquire max ms",
               "release p50 ms", "release max ms"});
  Json paused = Json::array();
  group[4].pause();
  for (std::size_t k = 0; k < timeouts.size(); ++k) {
    PausedRun r =
        paused_run(sets[k], timeouts[k], config.paused_cycles, redlock::test::key("s2:paused"));
    if (!r.error.empty()) {
      report.errors.push_back(
          fmt::format("section 2: paused node, timeout {} ms: {}", timeouts[k].count(), r.error));
    }
    const double rate = r.seconds > 0 ? r.cycles / r.seconds : 0;
    table.row({std::to_string(timeouts[k].count()) + " ms", std::to_string(r.cycles),
               std::to_string(r.held), num(rate), num(r.acquire.p50_ns / 1e6),
               num(r.acquire.max_ns / 1e6), num(r.release.p50_ns / 1e6),
               num(r.release.max_ns / 1e6)});
    Json j = Json::object();
    j.set("command_timeout_ms", static_cast<long long>(timeouts[k].count()));
    j.set("connect_timeout_ms", static_cast<long long>(timeouts[k].count()));
    j.set("cycles", r.cycles);
    j.set("held", r.held);
    j.set("cycles_per_s", rate);
    j.set("acquire_p50_ms", r.acquire.p50_ns / 1e6);
    j.set("acquire_max_ms", r.acquire.max_ns / 1e6);
    j.set("release_p50_ms", r.release.p50_ns / 1e6);
    j.set("release_max_ms", r.release.max_ns / 1e6);
    if (!r.error.empty()) j.set("error", r.error);
    paused.push(std::move(j));
  }
  group[4].resume();
  table.print(std::cout);

  Json j = Json::object();
  j.set("what", "Redlock acquire+release cycles over 5 servers");
  j.set("rounds", config.rounds);
  j.set("seconds_per_run", config.seconds);
  j.set("ttl_ms", static_cast<long long>(kTtl.count()));
  j.set("release_script", script);
  j.set("rows", std::move(rows));
  j.set("one_node_sigstopped", std::move(paused));
  report.sections.set("2_redlock", std::move(j));
}

// ---- Section 4 ---------------------------------------------------------------------------------

// The floor of a renewal: EVALSHA of the extend script on `n` keys the floor holds itself,
// pipelined in batches of `batch` on one synchronous context, back to back or, with a non-zero
// `pace`, one batch every `pace` (sleep_until in between, as a timer-driven renewer must).
// Returns the client CPU per renewal of each pass (ns); the keys are set again, untimed, before
// every pass.
std::vector<double> extend_floor(redisContext* c, std::size_t n, std::size_t batch,
                                 milliseconds ttl, int passes, std::chrono::nanoseconds pace,
                                 std::size_t& confirmed, double& wall_ns) {
  std::vector<std::string> keys;
  std::vector<std::string> tokens;
  const std::string ttl_ms = std::to_string(ttl.count());
  for (std::size_t i = 0; i < n; ++i) {
    keys.push_back(redlock::test::key("s4:raw:" + std::to_string(i)));
    tokens.push_back(raw_token());
  }
  auto pipeline = [&](auto&& append_one, std::size_t per, std::chrono::nanoseconds every) {
    std::size_t yes = 0;
    auto next = std::chrono::steady_clock::now();
    for (std::size_t at = 0; at < n; at += per) {
      if (every.count() > 0) {
        std::this_thread::sleep_until(next);
        next += every;
      }
      const std::size_t end = std::min(n, at + per);
      for (std::size_t i = at; i < end; ++i) append_one(i);
      for (std::size_t i = at; i < end; ++i) {
        void* reply = nullptr;
        if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) {
          throw std::runtime_error(std::string("raw hiredis: pipelined read: ") + c->errstr);
        }
        RawReply r(static_cast<redisReply*>(reply));
        yes += r->type == REDIS_REPLY_INTEGER && r->integer == 1;
      }
    }
    return yes;
  };
  const std::string& sha = extend_script_sha();
  std::vector<double> cpu;
  confirmed = 0;
  wall_ns = 0;
  for (int pass = 0; pass < passes; ++pass) {
    pipeline(
        [&](std::size_t i) {
          const char* argv[] = {"SET", keys[i].data(), tokens[i].data(), "PX", ttl_ms.data()};
          const std::size_t lens[] = {3, keys[i].size(), tokens[i].size(), 2, ttl_ms.size()};
          redisAppendCommandArgv(c, 5, argv, lens);
        },
        1000, std::chrono::nanoseconds(0));
    const std::int64_t c0 = thread_cpu_ns();
    const std::int64_t w0 = now_ns();
    confirmed += pipeline(
        [&](std::size_t i) {
          const char* argv[] = {"EVALSHA",      sha.data(),       "1",
                                keys[i].data(), tokens[i].data(), ttl_ms.data()};
          const std::size_t lens[] = {
              7, sha.size(), 1, keys[i].size(), tokens[i].size(), ttl_ms.size()};
          redisAppendCommandArgv(c, 6, argv, lens);
        },
        batch, pace);
    wall_ns += static_cast<double>(now_ns() - w0) / static_cast<double>(n * passes);
    cpu.push_back(static_cast<double>(thread_cpu_ns() - c0) / static_cast<double>(n));
  }
  return cpu;
}

// One round of the library in section 4: the leases added, a window of about two renewal
// periods, the leases released.
struct DogRound {
  double acquire_s{0};
  int refused{0};
  std::uint64_t renewals_while_adding{0};
  double watch_cpu_us{0};  // the watchdog's CPU while the leases were added, per lease
  redlock::WatchdogStats s0;
  redlock::WatchdogStats s1;
  double window_s{0};
  std::int64_t dcpu{0};  // the watchdog threads' CPU in the window (/proc)
  std::int64_t pcpu{0};  // the whole process's
  std::uint64_t evalsha{0};
  double release_s{0};
  double cpu_us() const {
    return s1.renewals > 0 ? static_cast<double>(dcpu) / 1e3 / static_cast<double>(s1.renewals) : 0;
  }
};

void section_watchdog(const Config& config, Report& report) {
  const milliseconds ttl = config.watchdog_ttl;
  std::cout << "\n[4] Watchdog: " << config.leases << " leases (auto_renew, ttl " << ttl.count()
            << " ms, distinct keys, one server) on one redlock::Watchdog\n";
  std::cout.flush();
  RedisServer server;
  const redlock::Endpoint endpoint = endpoint_of(server, config.timeout);
  redlock::Client client(endpoint);
  RawContext admin = raw_connect(endpoint);
  auto dog = std::make_shared<redlock::Watchdog>();
  redlock::LockOptions options;
  options.ttl = ttl;
  options.auto_renew = true;
  options.watchdog = dog;

  // The watchdog's threads start with its first lease: whatever threads appear then are its own.
  // Their CPU is read from /proc (schedstat), exactly at the window's edges.
  const std::vector<int> before = thread_ids();
  std::vector<int> dog_threads;
  auto dog_cpu_ns = [&] {
    std::int64_t sum = 0;
    for (const int tid : dog_threads) sum += std::max<std::int64_t>(task_cpu_ns(tid), 0);
    return sum;
  };
  auto library_round = [&] {
    DogRound r;
    std::vector<std::unique_ptr<redlock::Lock>> locks;
    locks.reserve(static_cast<std::size_t>(config.leases));
    const std::int64_t c0 = dog_cpu_ns();
    const std::int64_t a0 = now_ns();
    for (int i = 0; i < config.leases; ++i) {
      locks.push_back(std::make_unique<redlock::Lock>(
          client, redlock::test::key("s4:lease:" + std::to_string(i)), options));
      if (!locks.back()->try_lock()) ++r.refused;
    }
    r.acquire_s = static_cast<double>(now_ns() - a0) / 1e9;
    if (dog_threads.empty()) {
      for (const int tid : thread_ids()) {
        if (!std::binary_search(before.begin(), before.end(), tid)) dog_threads.push_back(tid);
      }
    }
    r.renewals_while_adding = dog->stats().renewals;  // reset by the previous round
    dog->reset_stats();
    r.s0 = dog->stats();
    const std::int64_t dcpu0 = dog_cpu_ns();
    r.watch_cpu_us = static_cast<double>(dcpu0 - c0) / 1e3 / config.leases;
    const auto calls0 = command_calls(admin.get());
    const std::int64_t pcpu0 = process_cpu_ns();
    const std::int64_t w0 = now_ns();
    std::this_thread::sleep_for(2 * ttl / 3 + ttl / 10);
    r.s1 = dog->stats();
    r.dcpu = dog_cpu_ns() - dcpu0;
    r.window_s = static_cast<double>(now_ns() - w0) / 1e9;
    r.pcpu = process_cpu_ns() - pcpu0;
    const auto calls1 = command_calls(admin.get());
    const auto a = calls1.find("evalsha");
    const auto b = calls0.find("evalsha");
    r.evalsha = (a == calls1.end() ? 0 : a->second) - (b == calls0.end() ? 0 : b->second);
    const std::int64_t d0 = now_ns();
    locks.clear();  // releases every lease
    r.release_s = static_cast<double>(now_ns() - d0) / 1e9;
    dog->reset_stats();
    return r;
  };

  // Rounds: the library (leases added, a window, released), then one pass of the floor paced
  // like it (its mean batch size at its mean batch rate) on the quiet server; medians of the
  // rounds. Interleaved, as in sections 1-2, so that a slow stretch of the machine falls on
  // both sides.
  const int rounds = config.quick ? 1 : 5;
  const auto n = static_cast<std::size_t>(config.leases);
  std::vector<DogRound> library;
  std::vector<double> paced_cpu;
  std::size_t batch = 1;
  std::size_t paced_confirmed = 0;
  double paced_wall_ns = 0;
  std::chrono::nanoseconds pace{0};
  std::string script;
  load_scripts(admin.get());
  for (int round = 0; round < rounds; ++round) {
    library.push_back(library_round());
    const DogRound& r = library.back();
    if (r.refused > 0) {
      report.errors.push_back(fmt::format("section 4: {} leases were refused", r.refused));
    }
    if (round == 0) {
      script = check_script(admin.get(), extend_script_sha(), "extend", report, "section 4");
    }
    const double per_round_batch = r.s1.round_trips > 0 ? static_cast<double>(r.s1.renewals) /
                                                              static_cast<double>(r.s1.round_trips)
                                                        : 1;
    batch = static_cast<std::size_t>(std::max(1.0, per_round_batch + 0.5));
    pace = std::chrono::nanoseconds(
        r.s1.round_trips > 0 ? static_cast<std::int64_t>(r.window_s * 1e9 / r.s1.round_trips) : 0);
    std::size_t confirmed = 0;
    double wall_ns = 0;
    paced_cpu.push_back(extend_floor(admin.get(), n, batch, ttl, 1, pace, confirmed, wall_ns)[0]);
    paced_confirmed += confirmed;
    paced_wall_ns += wall_ns / rounds;
  }
  // The median round of the library (by CPU per renewal) gives the table's figures.
  std::vector<DogRound> by_cpu = library;
  std::sort(by_cpu.begin(), by_cpu.end(),
            [](const DogRound& x, const DogRound& y) { return x.cpu_us() < y.cpu_us(); });
  const DogRound& mid = by_cpu[by_cpu.size() / 2];
  const redlock::WatchdogStats& s1 = mid.s1;
  const double window_s = mid.window_s;
  const double acquire_s = library.front().acquire_s;
  const double release_s = library.front().release_s;
  const double renewals = static_cast<double>(s1.renewals);
  const double stats_cpu_us = static_cast<double>((s1.thread_cpu - mid.s0.thread_cpu).count());
  const double per_batch = s1.round_trips > 0 ? renewals / static_cast<double>(s1.round_trips) : 1;
  const double lib_cpu_us = mid.cpu_us();
  const double lib_stats_us = renewals > 0 ? stats_cpu_us / renewals : 0;
  const double lib_pcpu_us = renewals > 0 ? static_cast<double>(mid.pcpu) / 1e3 / renewals : 0;
  const double paced_cpu_us = median(paced_cpu) / 1e3;
  // While leases were being added: CPU per watch() call (it also covers the renewals that fell
  // due before the last lease was added, reported next to it).
  const double watch_cpu_us = library.front().watch_cpu_us;
  const std::uint64_t renewals_while_adding = library.front().renewals_while_adding;
  const std::int64_t dcpu = mid.dcpu;

  // The floor back to back, on the quiet server: median of 5 passes.
  const int passes = 5;
  const int paced_passes = rounds;
  std::size_t confirmed = 0;
  double raw_wall_ns = 0;
  const double raw_cpu_us =
      median(extend_floor(admin.get(), n, batch, ttl, passes, std::chrono::nanoseconds(0),
                          confirmed, raw_wall_ns)) /
      1e3;
  if (confirmed != n * passes || paced_confirmed != n * paced_passes) {
    report.errors.push_back(fmt::format("section 4: floor confirmed {} of {} extends",
                                        confirmed + paced_confirmed, n * (passes + paced_passes)));
  }

  auto ms = [](std::chrono::microseconds us) { return static_cast<double>(us.count()) / 1e3; };
  const double p99_ms = ms(s1.lateness_p99);
  const double tenth_ms = static_cast<double>(ttl.count()) / 10;
  Table table({"figure", "library", "floor", "ratio"});
  table.row({"leases watched", std::to_string(s1.leases), "-", "-"});
  table.row({"window s", num(window_s), "-", "-"});
  table.row({"renewals", std::to_string(s1.renewals), "-", "-"});
  table.row({"renewals/s", num(renewals / window_s), "-", "-"});
  table.row({"round trips (batches)", std::to_string(s1.round_trips), "-", "-"});
  table.row({"renewals per round trip", num(per_batch), num(static_cast<double>(batch)), "-"});
  table.row({"lost", std::to_string(s1.lost), "-", "-"});
  table.row({"lateness p50 ms", num(ms(s1.lateness_p50)), "-", "-"});
  table.row({"lateness p99 ms", num(p99_ms), num(tenth_ms) + " (ttl/10)",
             times(ratio(p99_ms, tenth_ms))});
  table.row({"lateness max ms", num(ms(s1.lateness_max)), "-", "-"});
  table.row({"watchdog threads CPU ms", num(static_cast<double>(dcpu) / 1e6), "-", "-"});
  table.row({"CPU us per renewal", num(lib_cpu_us), num(raw_cpu_us),
             times(ratio(lib_cpu_us, raw_cpu_us))});
  table.row({"CPU us per renewal, floor paced like the watchdog", num(lib_cpu_us),
             num(paced_cpu_us), times(ratio(lib_cpu_us, paced_cpu_us))});
  table.row({"  per WatchdogStats::thread_cpu", num(lib_stats_us), "-", "-"});
  table.row({"  per whole-process CPU", num(lib_pcpu_us), "-", "-"});
  table.row({"EVALSHA calls per renewal", num(ratio(static_cast<double>(mid.evalsha), renewals)),
             "1.00", "-"});
  table.row({"watchdog CPU us per lease added", num(watch_cpu_us), "-", "-"});
  table.print(std::cout);
  std::cout << "  adding the " << config.leases << " leases (try_lock, one thread) took "
            << num(acquire_s) << " s (" << renewals_while_adding
            << " renewals fell due meanwhile); releasing them " << num(release_s)
            << " s\n  floor: pipelined EVALSHA of the same extend script (" << script
            << ") in batches of " << batch << ", median of " << passes << " passes, "
            << num(raw_wall_ns / 1e3) << " us wall per renewal; paced: one batch every "
            << num(static_cast<double>(pace.count()) / 1e6) << " ms (the watchdog's mean), "
            << paced_passes << (paced_passes == 1 ? " pass" : " passes")
            << ", one after each library round\n";
  std::cout << "  rounds, CPU us per renewal (library / paced floor):";
  Json round_rows = Json::array();
  for (std::size_t k = 0; k < library.size(); ++k) {
    std::cout << (k == 0 ? " " : ", ") << num(library[k].cpu_us()) << " / "
              << num(paced_cpu[k] / 1e3);
    Json row = Json::object();
    row.set("library_cpu_us_per_renewal", library[k].cpu_us());
    row.set("paced_floor_cpu_us_per_renewal", paced_cpu[k] / 1e3);
    round_rows.push(std::move(row));
  }
  std::cout << "; the table shows the library's median round and the floor's median\n";

  Json j = Json::object();
  j.set("what", "one Watchdog renewing many leases on one server");
  j.set("leases", config.leases);
  j.set("ttl_ms", static_cast<long long>(ttl.count()));
  j.set("acquire_seconds", acquire_s);
  j.set("renewals_while_adding", renewals_while_adding);
  j.set("release_seconds", release_s);
  j.set("window_seconds", window_s);
  j.set("leases_watched", s1.leases);
  j.set("renewals", s1.renewals);
  j.set("round_trips", s1.round_trips);
  j.set("renewals_per_round_trip", per_batch);
  j.set("lost", s1.lost);
  j.set("lateness_p50_ms", ms(s1.lateness_p50));
  j.set("lateness_p99_ms", p99_ms);
  j.set("lateness_max_ms", ms(s1.lateness_max));
  j.set("lateness_p99_over_ttl_tenth", ratio(p99_ms, tenth_ms));
  j.set("watchdog_threads_cpu_ms", static_cast<double>(dcpu) / 1e6);
  j.set("stats_thread_cpu_ms", stats_cpu_us / 1e3);
  j.set("cpu_us_per_renewal", lib_cpu_us);
  j.set("cpu_us_per_renewal_by_stats_thread_cpu", lib_stats_us);
  j.set("cpu_us_per_renewal_by_process_cpu", lib_pcpu_us);
  j.set("watchdog_cpu_us_per_lease_added", watch_cpu_us);
  j.set("evalsha_calls", mid.evalsha);
  Json floor = Json::object();
  floor.set("batch", batch);
  floor.set("passes", passes);
  floor.set("cpu_us_per_renewal", raw_cpu_us);
  floor.set("wall_us_per_renewal", raw_wall_ns / 1e3);
  floor.set("paced_cpu_us_per_renewal", paced_cpu_us);
  floor.set("paced_batch_interval_ms", static_cast<double>(pace.count()) / 1e6);
  floor.set("paced_passes", paced_passes);
  floor.set("extend_script", script);
  j.set("floor", std::move(floor));
  j.set("ratio_cpu", ratio(lib_cpu_us, raw_cpu_us));
  j.set("ratio_cpu_paced", ratio(lib_cpu_us, paced_cpu_us));
  j.set("rounds", std::move(round_rows));
  report.sections.set("4_watchdog", std::move(j));
}

// ---- Machine info, arguments, main
// ---------------------------------------------------------------

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

// The 1-minute load average: other work on the machine shows up as noise in every figure.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  std::string five;
  in >> one >> five;
  return one.empty() ? "unknown" : one + " (1 min), " + five + " (5 min)";
}

int online_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

std::string quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t'\"\\$") == std::string::npos) return arg;
  std::string out = "'";
  for (const char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void usage(std::ostream& out) {
  out << "usage: redlock-bench [--quick] [--section N]... [--seconds S] [--rounds R]\n"
         "                     [--threads LIST] [--json PATH]\n"
         "  --quick        short runs (smoke test): 0.25 s, 2 rounds, 1,000 leases\n"
         "  --section N    run section N only (1 uncontended, 2 redlock, 3 contended,\n"
         "                 4 watchdog, 5 degraded, 6 load, 7 tls, 8 sentinel, 9 backends,\n"
         "                 10 zookeeper, 11 cluster, 12 fleet, 13 async, 14 primitives);\n"
         "                 repeatable\n"
         "  --seconds S    length of each timed measurement (default 1.0)\n"
         "  --rounds R     interleaved rounds in sections 1, 2 and 13 (default 7)\n"
         "  --threads LIST client threads in sections 1, 2 and 5 (default 1,4)\n"
         "  --channels N   section 6: largest number of waiting threads on distinct keys\n"
         "                 (default 15000; 0, N/3 and N are measured)\n"
         "  --waiters N    section 6: threads waiting on one key (default 1000)\n"
         "  --fleet-sizes LIST  section 12: worker processes per run (default 8,32,128,512;\n"
         "                 --quick: 4,8)\n"
         "  --fleet-seconds S   section 12: window of each run, after a 1 s warm-up (default 4; "
         "--quick: 0.5, warm-up 0.25)\n"
         "  --async-waiters N  section 13: coroutines waiting on one key (default 10000;\n"
         "                 --quick: 200)\n"
         "  --async-cancels N  section 13: acquires to cancel (default 10000; --quick: 500)\n"
         "  --json PATH    where to write the figures (default " REDLOCK_BENCH_DEFAULT_JSON ")\n";
}

// "8,32,128": ascending worker counts for section 12.
std::vector<int> fleet_sizes(const std::string& text) {
  std::vector<int> out;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    const int n = std::stoi(item);
    if (n < 1 || n > 1024) throw std::invalid_argument("--fleet-sizes: each must be 1..1024");
    if (!out.empty() && n <= out.back()) throw std::invalid_argument("--fleet-sizes: ascending");
    out.push_back(n);
  }
  if (out.empty()) throw std::invalid_argument("--fleet-sizes: empty");
  return out;
}

// Returns 0 to run, 1 on a bad argument, 2 after --help.
int parse(int argc, char** argv, Config& config) {
  config.json_path = REDLOCK_BENCH_DEFAULT_JSON;
  double seconds = -1;
  int rounds = -1;
  double fleet_seconds = -1;
  bool fleet_sizes_given = false;
  int async_waiters = -1;
  int async_cancels = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--quick") {
      config.quick = true;
    } else if (arg == "--section") {
      const int n = std::stoi(value());
      if (n < 1 || n > 14) throw std::invalid_argument("--section must be 1..14");
      config.sections.push_back(n);
    } else if (arg == "--seconds") {
      seconds = std::stod(value());
      if (!(seconds > 0)) throw std::invalid_argument("--seconds must be > 0");
    } else if (arg == "--rounds") {
      rounds = std::stoi(value());
      if (rounds < 1) throw std::invalid_argument("--rounds must be >= 1");
    } else if (arg == "--threads") {
      config.threads.clear();
      std::stringstream list(value());
      std::string item;
      while (std::getline(list, item, ',')) {
        const int t = std::stoi(item);
        if (t < 1 || t > 64) throw std::invalid_argument("--threads: each count must be 1..64");
        config.threads.push_back(t);
      }
    } else if (arg == "--channels") {
      config.load_channels = std::stoi(value());
      if (config.load_channels < 3) throw std::invalid_argument("--channels must be >= 3");
    } else if (arg == "--waiters") {
      config.load_waiters = std::stoi(value());
      if (config.load_waiters < 2) throw std::invalid_argument("--waiters must be >= 2");
    } else if (arg == "--fleet-sizes") {
      config.fleet_sizes = fleet_sizes(value());
      fleet_sizes_given = true;
    } else if (arg == "--fleet-seconds") {
      fleet_seconds = std::stod(value());
      if (!(fleet_seconds > 0)) throw std::invalid_argument("--fleet-seconds must be > 0");
    } else if (arg == "--async-waiters") {
      async_waiters = std::stoi(value());
      if (async_waiters < 2) throw std::invalid_argument("--async-waiters must be >= 2");
    } else if (arg == "--async-cancels") {
      async_cancels = std::stoi(value());
      if (async_cancels < 1) throw std::invalid_argument("--async-cancels must be >= 1");
    } else if (arg == "--json") {
      config.json_path = value();
    } else if (arg == "--help" || arg == "-h") {
      usage(std::cout);
      return 2;
    } else {
      throw std::invalid_argument("unknown argument " + arg);
    }
  }
  if (config.quick) {
    config.seconds = 0.25;
    config.rounds = 2;
    config.paused_cycles = 3;
    config.leases = 1'000;
    config.watchdog_ttl = milliseconds(1'500);
    config.fleet_seconds = 0.5;
    if (!fleet_sizes_given) config.fleet_sizes = {4, 8};
    config.async_waiters = 200;
    config.async_cancels = 500;
  }
  if (async_waiters > 0) config.async_waiters = async_waiters;
  if (async_cancels > 0) config.async_cancels = async_cancels;
  if (fleet_seconds > 0) config.fleet_seconds = fleet_seconds;
  if (seconds > 0) config.seconds = seconds;
  if (rounds > 0) config.rounds = rounds;
  for (int i = 0; i < argc; ++i) config.command_line += (i ? " " : "") + quote(argv[i]);
  return 0;
}

bool wanted(const Config& config, int section) {
  return config.sections.empty() || std::find(config.sections.begin(), config.sections.end(),
                                              section) != config.sections.end();
}

int run(int argc, char** argv) {
  Config config;
  try {
    const int rc = parse(argc, argv, config);
    if (rc == 2) return 0;
  } catch (const std::exception& e) {
    std::cerr << "redlock-bench: " << e.what() << "\n";
    usage(std::cerr);
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a server that goes away must be an error, not a dead benchmark

  std::string redis_version;
  {
    RedisServer probe;
    RawContext c = raw_connect(endpoint_of(probe, config.timeout));
    redis_version = info_field(c.get(), "server", "redis_version");
  }
  utsname uts{};
  uname(&uts);
  const std::string build = REDLOCK_BENCH_BUILD_TYPE;
  std::cout << "redlock-bench (redlock " << REDLOCK_VERSION_STRING << ", " << build << " build, "
            << "g++ " << __VERSION__ << ", hiredis " << HIREDIS_MAJOR << "." << HIREDIS_MINOR << "."
            << HIREDIS_PATCH << ")\n"
            << "command:  " << config.command_line << "\n"
            << "machine:  nproc " << online_cpus() << ", " << cpu_model() << ", " << uts.sysname
            << " " << uts.release << " " << uts.machine << "\n"
            << "load:     " << load_average() << " at start\n"
            << "redis:    redis-server " << redis_version
            << " (fresh servers per section, 127.0.0.1 TCP, no persistence)\n"
            << "settings: " << config.seconds << " s per measurement, " << config.rounds
            << " interleaved rounds in sections 1-2 (median shown), endpoint timeouts "
            << config.timeout.count() << " ms, lock ttl " << kTtl.count() << " ms\n"
            << "floor:    raw sync hiredis, same commands and scripts; ratio = library / floor\n";
  if (build != "Release" && build != "RelWithDebInfo") {
    std::cout << "WARNING:  not an optimized build; figures are not representative\n";
  }

  Report report;
  struct Section {
    int number;
    void (*run)(const Config&, Report&);
  };
  const Section sections[] = {
    {1, section_uncontended},
    {2, section_redlock},
    {3, section_contended},
    {4, section_watchdog},
    {5, section_degraded},
    {6, section_load},
#if defined(REDLOCK_BENCH_TLS)
    {7, section_tls},
#endif
    {8, section_sentinel},
#if defined(REDLOCK_BENCH_POSTGRES)
    {9, section_backends},
#endif
#if defined(REDLOCK_BENCH_ZOOKEEPER)
    {10, section_zookeeper},
#endif
    {11, section_cluster},
    {12, section_fleet},
#if defined(REDLOCK_BENCH_ASYNC)
    {13, section_async},
#endif
    {14, section_primitives},
  };
  const std::string load_at_start = load_average();
  const std::int64_t start = now_ns();
  for (const Section& s : sections) {
    if (!wanted(config, s.number)) continue;
    try {
      s.run(config, report);
    } catch (const std::exception& e) {
      report.errors.push_back(fmt::format("section {} failed: {}", s.number, e.what()));
      std::cout << "  section " << s.number << " failed: " << e.what() << "\n";
    }
  }
  const double total_s = static_cast<double>(now_ns() - start) / 1e9;

  Json meta = Json::object();
  meta.set("command_line", config.command_line);
  meta.set("redlock_version", REDLOCK_VERSION_STRING);
  meta.set("build_type", build);
  meta.set("compiler", std::string("g++ ") + __VERSION__);
  meta.set("hiredis_version", fmt::format("{}.{}.{}", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH));
  meta.set("nproc", online_cpus());
  meta.set("cpu_model", cpu_model());
  meta.set("kernel", std::string(uts.sysname) + " " + uts.release + " " + uts.machine);
  meta.set("redis_version", redis_version);
  meta.set("quick", config.quick);
  meta.set("seconds_per_run", config.seconds);
  meta.set("rounds", config.rounds);
  meta.set("endpoint_timeout_ms", static_cast<long long>(config.timeout.count()));
  meta.set("total_seconds", total_s);
  meta.set("load_average_at_start", load_at_start);
  meta.set("load_average_at_end", load_average());
  Json errors = Json::array();
  for (const auto& e : report.errors) errors.push(e);
  Json root = Json::object();
  root.set("meta", std::move(meta));
  root.set("sections", std::move(report.sections));
  root.set("errors", std::move(errors));
  std::ofstream out(config.json_path);
  root.write(out);
  out << "\n";
  out.close();
  if (!out) {
    std::cerr << "redlock-bench: cannot write " << config.json_path << "\n";
    return 1;
  }
  std::cout << "\ntotal " << num(total_s) << " s; load " << load_average()
            << " at the end; figures written to " << config.json_path << "\n";
  for (const auto& e : report.errors) std::cout << "ERROR: " << e << "\n";
  return report.errors.empty() ? 0 : 1;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--contended-worker") {
    return bench::contended_worker_main(argc, argv);
  }
  if (argc > 1 && std::string(argv[1]) == "--elect-leader") {
    return bench::elect_leader_main(argc, argv);
  }
  try {
    return bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "redlock-bench: " << e.what() << "\n";
    return 1;
  }
}
