// tests/torture/worker.cpp: see worker.hpp.
#include "worker.hpp"

#include <signal.h>     // signal, SIGPIPE, SIGKILL
#include <sys/prctl.h>  // prctl, PR_SET_PDEATHSIG
#include <sys/time.h>   // timeval
#include <unistd.h>     // getppid, getpid

#include <hiredis/hiredis.h>

#include <algorithm>  // std::min, std::max
#include <atomic>     // std::atomic
#include <cstdio>     // std::fprintf
#include <exception>  // std::exception
#include <map>        // std::map
#include <memory>     // std::unique_ptr
#include <mutex>      // std::mutex, std::lock_guard
#include <optional>   // std::optional
#include <random>     // std::mt19937_64, distributions
#include <stdexcept>  // std::invalid_argument
#include <thread>     // std::thread, std::this_thread

#include <redlock/redlock.hpp>
#ifdef REDLOCK_TORTURE_POSTGRES
#include <redlock/postgres.hpp>
#endif
#ifdef REDLOCK_TORTURE_ZOOKEEPER
#include <redlock/zookeeper.hpp>
#endif

#include "hold_log.hpp"

namespace redlock::torture {

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

#ifdef REDLOCK_TORTURE_ZOOKEEPER
using ZooKeeperSession = redlock::zookeeper::Session;
using ZooKeeperLock = redlock::zookeeper::Lock;
#else
struct ZooKeeperSession {};  // --mode zookeeper is refused by main() without the component
using ZooKeeperLock = Lock;
#endif

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
// The checker store, over plain hiredis.

struct ContextDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval to_timeval(milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

class Store {
 public:
  explicit Store(int port) : port_(port) {}

  struct Values {
    std::int64_t counter{0};
    std::int64_t shadow{0};
  };

  // The fenced read. nullopt on any failure (then the hold skips its write).
  std::optional<Values> read(std::uint64_t fence) {
    const std::string f = std::to_string(fence);
    ReplyPtr r = run({"EVAL", kFencedReadLua, "3", kCounterKey, kShadowKey, kMaxSeenKey, f});
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
      return std::nullopt;
    }
    return Values{r->element[0]->integer, r->element[1]->integer};
  }

  // The fenced write.
  WriteResult write(std::uint64_t fence, std::int64_t value, std::int64_t shadow) {
    ReplyPtr r = run({"EVAL", kFencedWriteLua, "5", kCounterKey, kShadowKey, kLastAppliedKey,
                      kMaxSeenKey, kAppliedListKey, std::to_string(fence), std::to_string(value),
                      std::to_string(shadow)});
    if (!r || r->type != REDIS_REPLY_INTEGER) return WriteResult::write_error;
    return r->integer == 1 ? WriteResult::applied : WriteResult::rejected;
  }

 private:
  ReplyPtr run(const std::vector<std::string>& argv) {
    if (!context_) {
      context_.reset(redisConnectWithTimeout("127.0.0.1", port_, to_timeval(milliseconds(1000))));
      if (!context_ || context_->err != 0 ||
          redisSetTimeout(context_.get(), to_timeval(milliseconds(3000))) != REDIS_OK) {
        context_.reset();
        return nullptr;
      }
    }
    std::vector<const char*> ptrs;
    std::vector<std::size_t> lens;
    for (const std::string& a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    ReplyPtr reply(static_cast<redisReply*>(
        redisCommandArgv(context_.get(), static_cast<int>(argv.size()), ptrs.data(), lens.data())));
    if (!reply) context_.reset();  // a context that reported an error is dead
    if (reply && reply->type == REDIS_REPLY_ERROR) {
      std::fprintf(stderr, "redlock-torture worker: checker store error: %.*s\n",
                   static_cast<int>(reply->len), reply->str);
      return nullptr;
    }
    return reply;
  }

  int port_;
  ContextPtr context_;
};

// ---------------------------------------------------------------------------------------------
// Threads

struct Counters {
  std::atomic<std::int64_t> attempts{0};
  std::atomic<std::int64_t> acquired{0};
  std::atomic<std::int64_t> contended{0};
  std::atomic<std::int64_t> err_timeout{0};
  std::atomic<std::int64_t> err_connection{0};
  std::atomic<std::int64_t> err_server{0};
  std::atomic<std::int64_t> err_protocol{0};
  std::atomic<std::int64_t> err_other{0};
  std::atomic<int> fatal{0};

  // A few distinct error messages, with counts, for the report.
  void sample(const std::string& kind, const std::exception& e) {
    std::lock_guard<std::mutex> guard(mutex);
    const std::string key = kind + ": " + e.what();
    auto it = samples.find(key);
    if (it != samples.end()) {
      ++it->second;
    } else if (samples.size() < 12) {
      samples.emplace(key, 1);
    }
  }
  std::mutex mutex;
  std::map<std::string, std::int64_t> samples;  // guarded by mutex
};

std::string field(const char* key, std::int64_t value) {
  return std::string(" ") + key + "=" + std::to_string(value);
}

std::string hold_prefix(const char* event, int p, int t, std::int64_t n) {
  return event + field("p", p) + field("t", t) + field("n", n);
}

#ifdef REDLOCK_TORTURE_POSTGRES
using PgDatabase = redlock::postgres::Database;
using PgLock = redlock::postgres::Lock;
#else
struct PgDatabase {};
struct PgLock final : LockBase {
  PgLock(PgDatabase&, const char*, const LockOptions&) : LockBase(nullptr) {}
};
#endif

class WorkerThread {
 public:
  // `pg`: the process's Database in the postgres modes (null otherwise).
  WorkerThread(const WorkerConfig& config, int thread, const std::vector<Client>& clients,
               PgDatabase* pg, ZooKeeperSession* zookeeper, HoldLogWriter& log, Counters& counters)
      : config_(config),
        thread_(thread),
        log_(log),
        counters_(counters),
        store_(config.store_port),
        rng_(config.seed * 1'000'003ULL + static_cast<std::uint64_t>(config.index) * 1'009ULL +
             static_cast<std::uint64_t>(thread)) {
    LockOptions options;
    options.ttl = milliseconds(config.ttl_ms);
    options.retry_delay = milliseconds(config.retry_delay_ms);
    // wake_on_release: 1 = every thread, 0 = none, 2 = even-numbered threads only.
    options.wake_on_release =
        config.wake_on_release == 1 || (config.wake_on_release == 2 && thread % 2 == 0);
    options.fencing = true;
    options.auto_renew = config.auto_renew;
    if (config.fair != 0) options.fair = config.fair > 0;  // 0: the lock's default
    if (pg != nullptr) {
      pg_.emplace(*pg, kLockKey, options);
    } else if (config.mode == Mode::zookeeper) {
      zookeeper_lock(zookeeper, options);
    } else if (config.mode != Mode::redlock) {
      single_.emplace(clients.at(0), kLockKey, options);
    } else {
      quorum_.emplace(clients, kLockKey, options);
    }
  }

  void run() {
    LockBase& lock = pg_       ? static_cast<LockBase&>(*pg_)
                     : zk_     ? static_cast<LockBase&>(*zk_)
                     : single_ ? static_cast<LockBase&>(*single_)
                               : static_cast<LockBase&>(*quorum_);
    while (mono_ns() < config_.until_ns) {
      const std::int64_t left = config_.until_ns - mono_ns();
      const nanoseconds bound(std::max<std::int64_t>(
          1'000'000, std::min<std::int64_t>(left, config_.acquire_bound_ms * 1'000'000LL)));
      counters_.attempts.fetch_add(1);
      bool held = false;
      bool failed = true;
      try {
        held = lock.try_lock_for(bound);
        failed = false;
      } catch (const TimeoutError& e) {
        counters_.err_timeout.fetch_add(1);
        counters_.sample("acquire", e);
      } catch (const ConnectionError& e) {
        counters_.err_connection.fetch_add(1);
        counters_.sample("acquire", e);
      } catch (const ServerError& e) {
        counters_.err_server.fetch_add(1);
        counters_.sample("acquire", e);
      } catch (const ProtocolError& e) {
        counters_.err_protocol.fetch_add(1);
        counters_.sample("acquire", e);
      } catch (const Error& e) {
        counters_.err_other.fetch_add(1);
        counters_.sample("acquire", e);
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
      std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution<int>(5, 25)(rng_)));
    }
  }

 private:
  void hold(LockBase& lock) {
    // Take the time *before* asking for validity(): t + validity() is then never later than the
    // library's own deadline (validity() is "deadline - its now", rounded down).
    const std::int64_t t_acq = mono_ns();
    const std::int64_t validity_ms = lock.validity().count();
    const std::uint64_t fence = lock.fence();
    const std::int64_t deadline = t_acq + validity_ms * 1'000'000;
    std::int64_t observed = deadline;
    const std::int64_t n = ++seq_;
    const int p = config_.index;
    log_.write_line(hold_prefix("acq", p, thread_, n) + " fence=" + std::to_string(fence) +
                    field("t_acq", t_acq) + field("deadline", deadline) +
                    field("validity_ms", validity_ms));
    auto observe = [&] {
      const std::int64_t t = mono_ns();
      const std::int64_t v = lock.validity().count();
      if (v > 0) observed = std::max(observed, t + v * 1'000'000);
    };

    // Read, sleep, write.
    const std::int64_t t_read = mono_ns();
    const std::optional<Store::Values> read = store_.read(fence);
    if (!read) {
      log_.write_line(hold_prefix("write", p, thread_, n) + " result=read_error" +
                      field("t_read", t_read));
    } else {
      sleep_in_hold(validity_ms, observe);
      const std::int64_t value = read->counter + 1;
      const WriteResult result = store_.write(fence, value, read->shadow + 1);
      const std::int64_t t_write_end = mono_ns();
      log_.write_line(hold_prefix("write", p, thread_, n) + " result=" + to_string(result) +
                      field("t_read", t_read) + field("t_write_end", t_write_end) +
                      field("value", value));
    }

    // Release, and say how it ended.
    observe();
    const std::int64_t t_rel = mono_ns();
    EndKind kind = EndKind::error;
    try {
      kind = lock.release() ? EndKind::released : EndKind::lost;
    } catch (const std::exception& e) {
      kind = EndKind::error;
      counters_.sample("release", e);
    }
    const std::int64_t t_rel_end = mono_ns();
    log_.write_line(hold_prefix("end", p, thread_, n) + " kind=" + to_string(kind) +
                    field("t_rel", t_rel) + field("t_rel_end", t_rel_end) +
                    field("deadline", observed));
  }

  template <class Observe>
  void sleep_in_hold(std::int64_t validity_ms, Observe& observe) {
    std::uniform_int_distribution<int> percent(0, 99);
    if (percent(rng_) >= config_.long_hold_percent) {
      std::this_thread::sleep_for(
          std::chrono::microseconds(std::uniform_int_distribution<int>(0, 5000)(rng_)));
      return;
    }
    // A long hold: up to 90% of the validity (with auto-renew: up to two ttl), in short steps that
    // also record the validity deadline the holder sees (it grows with each renewal).
    const std::int64_t cap_ms =
        config_.auto_renew ? 2LL * config_.ttl_ms : std::max<std::int64_t>(0, validity_ms * 9 / 10);
    const std::int64_t total_us =
        std::uniform_int_distribution<std::int64_t>(0, cap_ms * 1000)(rng_);
    const std::int64_t until = mono_ns() + total_us * 1000;
    for (;;) {
      observe();
      const std::int64_t left = until - mono_ns();
      if (left <= 0) break;
      std::this_thread::sleep_for(nanoseconds(std::min<std::int64_t>(left, 20'000'000)));
    }
  }

  const WorkerConfig& config_;
  const int thread_;
  HoldLogWriter& log_;
  Counters& counters_;
  Store store_;
  std::mt19937_64 rng_;  // workload randomness only (sleeps); the library draws its own tokens
  std::optional<Lock> single_;
  std::optional<PgLock> pg_;
  std::optional<Redlock> quorum_;
  std::optional<ZooKeeperLock> zk_;
  std::int64_t seq_{0};

  // Zookeeper mode: one Lock per thread (its own znode) over the process's session.
  void zookeeper_lock(ZooKeeperSession* session, const LockOptions& options) {
#ifdef REDLOCK_TORTURE_ZOOKEEPER
    zk_.emplace(*session, kLockKey, options);
#else
    (void)session;
    (void)options;
    throw std::invalid_argument("built without the ZooKeeper component");
#endif
  }
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
