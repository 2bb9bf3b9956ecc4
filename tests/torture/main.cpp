// tests/torture/main.cpp: redlock-torture, a nemesis and a checker that proves mutual exclusion.
//
//   redlock-torture --mode redlock --duration 60s     # Redlock over 5 faulty nodes
//   redlock-torture --mode lock --duration 20s        # one Lock on one faulty node
//   redlock-torture --unsafe clock --duration 20s     # outside the model: fencing must hold
//   redlock-torture --self-test                       # the checker can fail
//
// One binary, three roles: the controller (default), a worker (--worker ..., started by the
// controller) and the self-test. The model and the checks are described in common.hpp,
// worker.hpp, nemesis.hpp and checker.hpp; torture.md has the whole story.
#include <cstdio>     // std::printf, std::fprintf
#include <cstdlib>    // std::strtoull
#include <exception>  // std::exception
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "common.hpp"
#include "controller.hpp"
#include "self_test.hpp"
#include "worker.hpp"

namespace {

using redlock::torture::Options;

const char kUsage[] = R"(usage: redlock-torture [options]

Starts 5 redis-server lock nodes (AOF, appendfsync always), each behind a fault proxy, and one
checker store; K worker processes x T threads take the lock and do a fenced read-sleep-write on a
counter while a nemesis breaks a minority of the nodes; then checks the hold logs: no overlapping
validity windows, no lost update, fences applied in order, every hold ended with a record.

options:
  --mode redlock|lock|sentinel|cluster|postgres|postgres-session|zookeeper
                          Redlock over the 5 nodes, a single Lock on node 0, or a Lock through
                          Sentinel (1 master, 2 replicas, 3 sentinels; the faults are
                          SENTINEL FAILOVER, kill -9 of the master, a paused replica; overlaps
                          are reported, fencing must hold) (default redlock)
                          cluster: a Lock on a Redis Cluster (3 masters, 3 replicas; the
                          faults are the lock's slot migrated, CLUSTER FAILOVER and kill -9
                          of its master; likewise reported)
                          postgres|postgres-session: a postgres::Lock (lease or session
                          mode) on one PostgreSQL 15; the faults are SIGSTOP of the server,
                          kill -9 and restart, pg_terminate_backend of every client
                          (session mode: overlaps are reported, fencing must hold)
                          zookeeper: a zookeeper::Lock on one ZooKeeper server (SIGSTOP past
                          the session timeout, kill -9 + restart)
                          (the last three when built with their component)
  --primitive lock|rwlock|multilock|election
                          what the workers take on the mode's store (default lock):
                          rwlock: a ReadWriteLock, 1 thread in 4 a writer (writers overlap
                          nobody, readers only readers, no reader enters ahead of a waiting
                          writer unless a fault was in force in between; reported only on a
                          quorum);
                          multilock: MultiLocks over 3 of 4 keys mixed with plain Locks on
                          single keys (no key held twice; in lock mode an observer MGETs the
                          keys and fails the run on a partly held set; modes lock, sentinel,
                          cluster); election: every thread a candidate of one Election, run():
                          terms grow, no two workers run at once, each stop reaches its worker
                          within 50 ms of is_leader() turning false
                          (PostgreSQL: rwlock in postgres-session mode, election in
                          postgres mode)
  --wait-replicas N       sentinel and cluster modes: Endpoint::wait_replicas of every worker
                          (default 0)
  --duration D            how long workers take the lock: 500ms, 30s, 2m (default 60s)
  --processes K           worker processes (default 3)
  --threads T             threads per worker (default 4)
  --seed N                nemesis and workload randomness (default: random, printed)
  --unsafe clock|restart  outside the fault model: 3 of 5 nodes' clocks run 2x (clock), or a
                          majority is killed -9 and restarted without persistence (restart).
                          Overlaps are then expected; the run passes if fencing held.
  --ttl MS                lock ttl in milliseconds (default 1000)
  --long-holds PCT        percent of holds that sleep up to 90% of their validity
                          (default 1; 5 with --unsafe, so that the fault hits a hold)
  --retry-delay MS        LockOptions::retry_delay (default 20)
  --wake all|none|half    which threads use LockOptions::wake_on_release (default half: the
                          even-numbered ones; the others only poll every retry delay)
  --fair                  LockOptions::fair for every thread (--mode lock or postgres)
  --no-fair               LockOptions::fair = false (lock mode's default is fair)
  --auto-renew            hold with LockOptions::auto_renew (long holds then last up to 2 ttl)
  --async                 the workers' T threads become T coroutines on one io_context
                          thread, through <redlock/asio.hpp> (async_try_acquire_for,
                          async_release); the same nemesis and checks (when built with the
                          asio component)
  --kill-clients          kill -9 a worker process every 3-6 s and start a new one in its place
                          (its open hold ends at its death; it must not let anyone in early,
                          nor block the lock for good)
  --client-faults         each worker reaches the store through proxies of its own; one worker
                          at a time is partitioned (its proxies black-holed) or paused
                          (SIGSTOP) for the lease (ttl; zookeeper: the session timeout) +
                          0.2-1 s, beside the mode's faults (modes lock, redlock, postgres,
                          zookeeper; not with --kill-clients)
  --liveness              the liveness nemesis (--mode lock, fair, threads): the lock node is
                          left alone; worker processes are SIGSTOPped or cut off (half-open,
                          their own proxies black-holed) past the ttl, killed -9 in groups (the
                          holder's process and the two waiting longest), and an old-style
                          client takes the key with SET NX (no expiry) and DELs it; check (8)
                          fails a wait that stalled past the documented bound while the lock
                          was free or held by a dead lease
  --liveness-bound MS     check (8)'s bound instead of the documented one (to see it fail)
  --data-dir DIR          where the servers keep their AOF (default /dev/shm if writable:
                          kill -9 keeps the page cache, so tmpfs is as durable as a disk here)
  --keep                  keep the run directory (always kept when the run fails)
  --self-test             check the checker on synthetic histories, then exit
  --help                  this text

exit status: 0 pass, 1 a check failed, 2 bad usage or setup failure, 128+N killed by signal N.
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "redlock-torture: %s\n(see --help)\n", message.c_str());
  return 2;
}

bool parse_int(const std::string& text, int lo, int hi, int& out) {
  try {
    std::size_t used = 0;
    const long v = std::stol(text, &used);
    if (used != text.size() || v < lo || v > hi) return false;
    out = static_cast<int>(v);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "--worker") {
    try {
      return redlock::torture::run_worker(redlock::torture::parse_worker_args(args));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "redlock-torture worker: %s\n", e.what());
      return 2;
    }
  }

  Options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= args.size()) return false;
      out = args[++i];
      return true;
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--self-test") return redlock::torture::run_self_test();
    if (a == "--keep") {
      o.keep = true;
    } else if (a == "--auto-renew") {
      o.auto_renew = true;
    } else if (a == "--fair") {
      o.fair = 1;
    } else if (a == "--no-fair") {
      o.fair = -1;
    } else if (a == "--kill-clients") {
      o.kill_clients = true;
    } else if (a == "--client-faults") {
      o.client_faults = true;
    } else if (a == "--liveness") {
      o.liveness = true;
    } else if (a == "--liveness-bound") {
      if (!value(v) || !parse_int(v, 1, 600'000, o.liveness_bound_ms)) {
        return usage_error("--liveness-bound needs milliseconds in 1..600000");
      }
    } else if (a == "--async") {
#ifndef REDLOCK_TORTURE_ASYNC
      return usage_error("--async: built without the asio component or C++20 coroutines");
#endif
      o.async = true;
    } else if (a == "--wake") {
      if (!value(v) || (v != "all" && v != "none" && v != "half")) {
        return usage_error("--wake needs all, none or half");
      }
      o.wake_on_release = v == "all" ? 1 : v == "none" ? 0 : 2;
    } else if (a == "--retry-delay") {
      if (!value(v) || !parse_int(v, 1, 10'000, o.retry_delay_ms)) {
        return usage_error("--retry-delay needs milliseconds in 1..10000");
      }
    } else if (a == "--wait-replicas") {
      if (!value(v) || !parse_int(v, 0, 2, o.wait_replicas)) {
        return usage_error("--wait-replicas needs a number in 0..2 (the set has 2 replicas)");
      }
    } else if (a == "--data-dir") {
      if (!value(o.data_dir)) return usage_error("--data-dir needs a directory");
    } else if (a == "--mode") {
      if (!value(v)) return usage_error("--mode needs a value");
      const auto m = redlock::torture::parse_mode(v);
      if (!m) {
        return usage_error(
            "--mode must be redlock, lock, sentinel, cluster, postgres, postgres-session or "
            "zookeeper, not '" +
            v + "'");
      }
#ifndef REDLOCK_TORTURE_ZOOKEEPER
      if (*m == redlock::torture::Mode::zookeeper) {
        return usage_error("--mode zookeeper: built without the ZooKeeper component");
      }
#endif
      o.mode = *m;
    } else if (a == "--primitive") {
      if (!value(v)) return usage_error("--primitive needs a value");
      const auto p = redlock::torture::parse_primitive(v);
      if (!p) {
        return usage_error("--primitive must be lock, rwlock, multilock or election, not '" + v +
                           "'");
      }
      o.primitive = *p;
    } else if (a == "--unsafe") {
      if (!value(v)) return usage_error("--unsafe needs a value");
      const auto u = redlock::torture::parse_unsafe(v);
      if (!u) return usage_error("--unsafe must be clock or restart, not '" + v + "'");
      o.unsafe = *u;
    } else if (a == "--duration") {
      if (!value(v)) return usage_error("--duration needs a value");
      const auto d = redlock::torture::parse_duration(v);
      if (!d || d->count() <= 0) {
        return usage_error("--duration: '" + v + "' is not a duration like 500ms, 30s or 2m");
      }
      o.duration = *d;
    } else if (a == "--processes") {
      if (!value(v) || !parse_int(v, 1, 64, o.processes)) {
        return usage_error("--processes needs a number in 1..64");
      }
    } else if (a == "--threads") {
      if (!value(v) || !parse_int(v, 1, 64, o.threads)) {
        return usage_error("--threads needs a number in 1..64");
      }
    } else if (a == "--ttl") {
      if (!value(v) || !parse_int(v, 50, 600'000, o.ttl_ms)) {
        return usage_error("--ttl needs milliseconds in 50..600000");
      }
    } else if (a == "--long-holds") {
      if (!value(v) || !parse_int(v, 0, 100, o.long_hold_percent)) {
        return usage_error("--long-holds needs a percentage in 0..100");
      }
    } else if (a == "--seed") {
      if (!value(v)) return usage_error("--seed needs a value");
      try {
        std::size_t used = 0;
        o.seed = std::stoull(v, &used);
        if (used != v.size()) throw std::invalid_argument(v);
      } catch (const std::exception&) {
        return usage_error("--seed needs a non-negative integer");
      }
      o.seed_given = true;
    } else {
      return usage_error("unknown option '" + a + "'");
    }
  }
  if (o.wait_replicas > 1 && o.mode == redlock::torture::Mode::cluster) {
    return usage_error("--wait-replicas is 0 or 1 in cluster mode (a replica per master)");
  }
  if (o.wait_replicas != 0 && o.mode != redlock::torture::Mode::sentinel &&
      o.mode != redlock::torture::Mode::cluster) {
    return usage_error("--wait-replicas needs --mode sentinel or cluster");
  }
  if (o.mode != redlock::torture::Mode::redlock && o.unsafe != redlock::torture::Unsafe::none) {
    return usage_error("--unsafe needs --mode redlock (it breaks a majority of five nodes)");
  }
  if (o.fair > 0 && o.mode != redlock::torture::Mode::lock &&
      o.mode != redlock::torture::Mode::postgres) {
    return usage_error(
        "--fair needs --mode lock or postgres (fair mode is for a single instance or database)");
  }
  using redlock::torture::Mode;
  using redlock::torture::Primitive;
  if (o.primitive != Primitive::lock && (o.async || o.unsafe != redlock::torture::Unsafe::none)) {
    return usage_error("--primitive " + std::string(to_string(o.primitive)) +
                       " takes neither --async nor --unsafe");
  }
  // PostgreSQL's ReadWriteLock is on advisory locks (session mode only), its Election on the
  // lease table (lease mode only).
  if (o.primitive == Primitive::rwlock && o.mode == Mode::postgres) {
    return usage_error("--primitive rwlock on PostgreSQL needs --mode postgres-session");
  }
  if (o.primitive != Primitive::lock && o.primitive != Primitive::rwlock &&
      o.mode == Mode::postgres_session) {
    return usage_error("--mode postgres-session takes --primitive lock or rwlock");
  }
  if (o.primitive == Primitive::multilock && o.mode != Mode::lock && o.mode != Mode::sentinel &&
      o.mode != Mode::cluster) {
    return usage_error(
        "--primitive multilock needs --mode lock, sentinel or cluster (a MultiLock "
        "is on one Redis instance)");
  }
  if (o.client_faults && (o.kill_clients || o.mode == Mode::sentinel || o.mode == Mode::cluster)) {
    return usage_error(
        "--client-faults needs --mode lock, redlock, postgres or zookeeper (the client must reach "
        "fixed endpoints) and takes no --kill-clients");
  }
  if (o.liveness_bound_ms > 0 && !o.liveness)
    return usage_error("--liveness-bound needs --liveness");
  if (o.liveness && (o.mode != Mode::lock || o.primitive != Primitive::lock || o.async ||
                     o.fair < 0 || o.kill_clients || o.client_faults)) {
    return usage_error(
        "--liveness needs --mode lock, --primitive lock, fair mode and threads (no --async), and "
        "brings its own kills and client faults (no --kill-clients, --client-faults)");
  }
  return redlock::torture::run_controller(o);
}
