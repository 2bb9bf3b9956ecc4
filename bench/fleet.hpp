// bench/fleet.hpp: what the files of section 12 ("fleet": N processes on one key) share.
//
// run_fleet() forks N worker processes. Each builds its own lock after the fork (a Client and a
// Lock or a Semaphore, a Redlock over three Clients, a postgres::Lock, a zookeeper::Lock) and loops
// try_lock_until(the window's end) / hold / unlock() from the warm-up's start until the window
// ends. The parent samples the servers' counters as the window opens (the workers loop already)
// and once every worker has finished its loop (before any tears its connections down), and
// returns the figures: acquisitions, waits and client commands inside the window.
//
//   bench::FleetResult r = bench::run_fleet(32, settings, make_lock, sample, SampleAt::loops_done);
#ifndef REDLOCK_BENCH_FLEET_HPP
#define REDLOCK_BENCH_FLEET_HPP

#include <chrono>      // std::chrono::milliseconds, steady_clock
#include <cstdint>     // std::uint64_t, std::int64_t
#include <functional>  // std::function
#include <memory>      // std::shared_ptr, std::unique_ptr
#include <string>      // std::string
#include <utility>     // std::move, std::forward
#include <vector>      // std::vector

#include "bench.hpp"   // Config, Report
#include "common.hpp"  // Json, Table

struct redisContext;  // hiredis
namespace redlock {
struct Endpoint;
}

namespace bench {

struct FleetSettings {
  std::vector<int> sizes;       // N, the worker processes of each run
  double seconds{4.0};          // the window of each run
  double warm_up_seconds{1.0};  // the workers loop this long before the window opens
  std::chrono::milliseconds hold{1};
};

// What a worker loops on: a lock or a semaphore's permit. try_until() tries until the deadline
// (one attempt when it has passed) and says whether it holds; release() gives it back.
class WorkerMutex {
 public:
  virtual ~WorkerMutex() = default;
  virtual bool try_until(std::chrono::steady_clock::time_point deadline) = 0;
  virtual void release() = 0;
};

// A WorkerMutex over anything with try_lock_until() and unlock(): a LockBase, a Semaphore.
template <class M>
class WorkerMutexOf final : public WorkerMutex {
 public:
  explicit WorkerMutexOf(std::unique_ptr<M> m) : m_(std::move(m)) {}
  bool try_until(std::chrono::steady_clock::time_point deadline) override {
    return m_->try_lock_until(deadline);
  }
  void release() override { m_->unlock(); }

 private:
  std::unique_ptr<M> m_;
};

// The lock a worker process builds after the fork; `owner` (its Client, Database or Session)
// outlives `lock` (members are destroyed in reverse order).
struct WorkerLock {
  std::shared_ptr<void> owner;
  std::unique_ptr<WorkerMutex> lock;

  // Builds M from `args` and wraps it.
  template <class M, class... Args>
  void make(Args&&... args) {
    lock = std::make_unique<WorkerMutexOf<M>>(std::make_unique<M>(std::forward<Args>(args)...));
  }
};
using MakeWorkerLock = std::function<WorkerLock()>;

// Server-side counters: commands (or statements, packets) of each node, and the servers' CPU in
// microseconds (negative: not measured).
struct ServerSample {
  std::vector<double> commands;
  double cpu_us{-1};
};
using SampleServer = std::function<ServerSample()>;

// When the parent takes its second sample: as soon as every worker has left its loop (their
// connections still open), or once every worker process has exited (PostgreSQL's backends
// publish their statistics when they exit).
enum class SampleAt { loops_done, workers_exited };

struct FleetResult {
  int processes{0};
  double seconds{0};
  std::uint64_t acquisitions{0};  // inside the window
  std::uint64_t min_per_process{0};
  std::uint64_t max_per_process{0};
  double max_wait_ms{0};       // the longest single try_lock_until() call, ended or not
  double client_commands{-1};  // commands the workers sent (RESP, counted by them), total
  ServerSample server;         // after - before
  std::string error;
};

FleetResult run_fleet(int processes, const FleetSettings& settings, const MakeWorkerLock& make,
                      const SampleServer& sample, SampleAt at);

// One row of the section's table, as printed and as JSON.
struct FleetRow {
  std::string variant;  // "default Lock", "fair = false", ...
  FleetResult result;
  std::string note;  // "n/a: ..." when the row could not be measured
};

// A row for every size in `settings`: the ones that could not run carry a note.
using FleetRows = std::vector<FleetRow>;

// The row of one run: says which is starting, runs it, and keeps an exception as its error.
FleetRow measured_row(const std::string& variant, int processes,
                      const std::function<FleetResult()>& run);

// The backends' rows (fleet_peers.cpp): postgres::Lock and zookeeper::Lock, when built and
// available; a row with a note otherwise.
void fleet_backend_rows(const FleetSettings& settings, FleetRows& rows);
// The peers at one size (fleet_peers.cpp): node-redlock and redis-py against the redis-server on
// `port` (sampled by `sample`), each run by its harness in bench/ when its runtime is present; a
// row with the reason otherwise.
void fleet_anchor_rows(int processes, const FleetSettings& settings, int port,
                       const SampleServer& sample, FleetRows& rows);
// Issue 41's figures (fleet_idle.cpp): the server's commands per second with the largest size's
// waiters idle behind a held lock, against `busy_commands_per_s` (the busy default Lock at that
// size; 0: not measured), and the release script's server time behind 100,000 dead queue
// entries. Prints them with their goals; returns them as JSON.
Json fleet_liveness_figures(const Config& config, const FleetSettings& settings,
                            const redlock::Endpoint& endpoint, const SampleServer& sample,
                            double busy_commands_per_s);
// INFO commandstats (all calls but INFO's) and INFO cpu of each context.
SampleServer redis_sampler(std::vector<redisContext*> admins);

}  // namespace bench

#endif  // REDLOCK_BENCH_FLEET_HPP
