// tests/torture/controller.hpp: the controller of a redlock-torture run.
//
// It owns everything with a lifetime: the run directory, the servers and proxies, the worker
// processes. In order: start the checker store and the lock nodes (with their proxies), spawn K
// workers, drive the nemesis from the main thread until every worker has exited (or the run is
// interrupted), heal every fault, read the checker store, parse the hold logs, check, report.
//
// Cleanup: servers are killed by their RedisServer destructors (and by PR_SET_PDEATHSIG if this
// process dies); workers die with PR_SET_PDEATHSIG too, and on SIGINT/SIGTERM the controller
// kills them itself, tears everything down and exits 128+signal. The run directory
// (/tmp/redlock-torture-XXXXXX) is removed at the end unless --keep is given or the run failed
// (then it holds the evidence: hold logs, nemesis log, the nodes' redis logs).
#ifndef REDLOCK_TESTS_TORTURE_CONTROLLER_HPP
#define REDLOCK_TESTS_TORTURE_CONTROLLER_HPP

#include <chrono>   // std::chrono::nanoseconds
#include <cstdint>  // std::uint64_t
#include <string>   // std::string

#include "common.hpp"  // Mode, Unsafe

namespace redlock::torture {

struct Options {
  Mode mode{Mode::redlock};
  Primitive primitive{Primitive::lock};  // what the workers take (worker.hpp)
  Unsafe unsafe{Unsafe::none};
  std::chrono::nanoseconds duration{std::chrono::seconds(60)};
  int processes{3};
  int threads{4};
  std::uint64_t seed{0};
  bool seed_given{false};
  bool keep{false};
  int ttl_ms{1000};
  // Percent of holds that sleep up to 90% of their validity. -1: 1 in the fault model, 5 with
  // --unsafe (a majority restart or a fast clock must hit a hold in progress to show anything).
  int long_hold_percent{-1};
  bool auto_renew{false};
  int retry_delay_ms{20};
  int wake_on_release{2};    // 1 every thread, 0 none, 2 even-numbered threads (see worker.hpp)
  int fair{0};               // LockOptions::fair: 1 on, -1 off, 0 the default (lock: on)
  bool kill_clients{false};  // kill -9 a worker every 3-6 s and start a new one in its place
  // Partition (black-hole its own proxies) or SIGSTOP one worker at a time (client_nemesis.hpp).
  bool client_faults{false};
  bool async{false};  // the workers are coroutines on an io_context (worker.hpp)
  // The liveness nemesis and check (8) (liveness_nemesis.hpp): lock mode, fair, threads only.
  bool liveness{false};
  int liveness_bound_ms{0};  // > 0: check (8)'s bound instead of the documented one
  int wait_replicas{0};      // sentinel mode: Endpoint::wait_replicas of every worker
  // Where the servers keep their directories (AOF). Empty: /dev/shm if writable, else $TMPDIR.
  // A kill -9 never loses the page cache, so an AOF with appendfsync always on tmpfs keeps every
  // acknowledged grant across kill -9 + restart exactly as a disk does, without the disk's
  // fsync latency (1-12 ms here, paid on every grant, raise and release of five nodes).
  std::string data_dir;
};

// Runs the whole torture. Returns the process exit code: 0 pass, 1 a check failed, 2 the run
// could not be set up, 128+signal when interrupted.
int run_controller(const Options& options);

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_CONTROLLER_HPP
