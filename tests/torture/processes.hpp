// tests/torture/processes.hpp: the controller's worker processes: spawned, reaped, stopped,
// and (--kill-clients) killed -9 and replaced.
#ifndef REDLOCK_TESTS_TORTURE_PROCESSES_HPP
#define REDLOCK_TESTS_TORTURE_PROCESSES_HPP

#include <sys/types.h>  // pid_t

#include <cstdint>  // std::int64_t
#include <cstdio>   // std::FILE
#include <map>      // std::map
#include <random>   // std::mt19937_64
#include <string>   // std::string
#include <vector>   // std::vector

#include "worker.hpp"  // WorkerConfig

namespace redlock::torture {

struct Worker {
  int index{0};
  pid_t pid{-1};
  bool done{false};
  int status{0};
};

// Starts a worker: posix_spawn of `exe` with config.to_args(). Returns its pid. Throws
// std::runtime_error if posix_spawn fails.
pid_t spawn_worker(const std::string& exe, const WorkerConfig& config);
// Reaps finished workers (WNOHANG). Returns how many are still running.
std::size_t reap(std::vector<Worker>& workers);
// Sends `sig` to every worker not yet reaped.
void kill_workers(std::vector<Worker>& workers, int sig);
// Stops every worker still running: SIGTERM, up to 2 s, then SIGKILL; reaps them all.
void stop_workers(std::vector<Worker>& workers);

// --kill-clients: every 3-6 s, until 3 s before the end, one running worker is killed (-9) and
// reaped, and a new worker with the next index takes its place. Its open hold, if any, ends when
// it was dead for sure (after waitpid): what a crashed client leaves behind (a lease, an
// ephemeral znode, a row) must not let anyone in early, and must not block everyone for good.
struct ClientKills {
  std::mt19937_64 rng;
  std::int64_t next{0};
  std::int64_t stop{0};
  std::map<int, std::int64_t> killed;  // worker index -> dead by (CLOCK_MONOTONIC ns)
};

// Kills and replaces a worker when due (see ClientKills); the replacement's log path is appended
// to log_paths, a line to `log` (may be null). Returns when to be called next (mono ns). Throws
// what spawn_worker throws.
std::int64_t kill_a_client(ClientKills& k, std::vector<Worker>& workers, const WorkerConfig& base,
                           const std::string& exe, const std::string& run_dir,
                           std::vector<std::string>& log_paths, std::FILE* log, std::int64_t now);

// Starts worker number workers.size() with `config` (its index and log path set here, in
// run_dir), appends it to `workers` and its log path to `log_paths`. Returns its index. Throws
// what spawn_worker throws (then nothing is appended).
int spawn_next_worker(std::vector<Worker>& workers, WorkerConfig config, const std::string& exe,
                      const std::string& run_dir, std::vector<std::string>& log_paths);

// "exit code 3", "killed by signal 9 (Killed)".
std::string describe_exit(int status);

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_PROCESSES_HPP
