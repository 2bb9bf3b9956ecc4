// tests/torture/worker.hpp: one worker process of redlock-torture.
//
// The controller starts each worker with posix_spawn() of its own executable (never fork()
// without exec: the controller has threads) and `--worker` plus the arguments below. A worker
// runs T threads; each thread owns its own Lock/Redlock object (over Clients shared by the
// process), so threads of one process contend through Redis, not through the object's local
// queue. Each thread loops until --until:
//
//   try_lock_for(bound) -> t_acq = now, validity(), fence()        log "acq"
//   fenced read of the counter (checker store, plain hiredis)
//   sleep 0-5 ms (sometimes longer: --long-holds, see below)
//   fenced write of counter+1                                     log "write"
//   t_rel = now, release() -> released / lost / threw             log "end"
//
// redlock::Error from try_lock_for() (every node failed) is counted by type, then the thread backs
// off briefly and tries again. The checker store is reached with hiredis directly, never through
// the library under test, so a library bug cannot hide in the checker's own I/O.
//
// --async: the same loop as T coroutines on one io_context thread instead of T threads, through
// <redlock/asio.hpp> (async_try_acquire_for, async_release); the store's blocking calls run on a
// small thread pool, so no coroutine's I/O stalls the others' (async_worker.cpp).
//
// Long holds: with probability --long-holds percent, a hold sleeps for a random part (up to 90%)
// of its remaining validity instead of 0-5 ms (with --auto-renew, up to 2 ttl). They keep the
// lock busy across faults, and they are what makes a broken clock or a lost key visible in the
// unsafe modes, where a lease can vanish on a majority of nodes in the middle of a hold.
#ifndef REDLOCK_TESTS_TORTURE_WORKER_HPP
#define REDLOCK_TESTS_TORTURE_WORKER_HPP

#include <sys/types.h>  // pid_t

#include <cstdint>  // std::int64_t, std::uint64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include "common.hpp"  // Mode, Primitive

namespace redlock::torture {

struct WorkerConfig {
  int index{0};                          // process number p, 0-based
  int threads{4};                        // T
  Mode mode{Mode::redlock};              // redlock: all node_ports; lock: node_ports[0] only
  Primitive primitive{Primitive::lock};  // what the threads take (primitive_worker.cpp)
  std::vector<int> node_ports;           // the proxies in front of the lock nodes
  int store_port{0};                     // the checker store (direct, no proxy)
  std::int64_t until_ns{0};              // CLOCK_MONOTONIC deadline: no new acquire after it
  std::string log_path;                  // this process's hold log
  std::uint64_t seed{0};                 // workload randomness (sleeps), not tokens
  int ttl_ms{1000};                      // LockOptions::ttl
  int acquire_bound_ms{2000};            // try_lock_for bound
  int long_hold_percent{1};              // see above
  bool auto_renew{false};                // LockOptions::auto_renew
  int retry_delay_ms{20};                // LockOptions::retry_delay
  int wake_on_release{2};     // LockOptions::wake_on_release: 1 all, 0 none, 2 even threads
  int fair{0};                // LockOptions::fair: 1 on, -1 off, 0 the lock's default
  bool async{false};          // T coroutines on one io_context, through <redlock/asio.hpp>
  bool log_waits{false};      // --liveness: "try" and "wait" records around every acquire call
  std::string sentinel_uri;   // sentinel (cluster) mode: the redis-sentinel:// (redis-cluster://)
                              // URI (node_ports unused)
  int wait_replicas{0};       // sentinel mode: Endpoint::wait_replicas
  std::string postgres_uri;   // postgres modes: the database (node_ports unused)
  std::string zookeeper_uri;  // zookeeper mode: the zookeeper:// URI (node_ports unused)
  pid_t parent{0};            // the controller; the worker exits if it is gone

  // The arguments after the executable name (starting with "--worker").
  std::vector<std::string> to_args() const;
};

// Parses what to_args() produced (argv without the program name, starting at "--worker").
// Throws std::invalid_argument naming the bad argument.
WorkerConfig parse_worker_args(const std::vector<std::string>& args);

// Runs the worker to completion. Returns the process exit code (0 unless setup failed).
int run_worker(const WorkerConfig& config);

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_WORKER_HPP
