// examples/demo/demo.hpp: the pieces of redlock-demo and what they exchange.
//
// redlock-demo runs as one coordinator process (coordinator.cpp) and several worker processes
// (worker.cpp): the same binary, exec'd with --worker. Workers talk to the coordinator through
// pipes, one text line per message:
//
//   coordinator -> worker stdin:   "go\n" once everyone is ready; closing the pipe means "stop"
//   worker -> coordinator stdout:  "ready"
//                                  "H <process> <thread> <start_ns> <end_ns> <fence> <outcome>
//                                     <valid>"   one hold (see Hold)
//                                  "E <message>"  an error (redlock::Error) the worker survived
//                                  "L <message>"  a library log line (warn and above)
//                                  "done"
//
// Times are CLOCK_MONOTONIC nanoseconds, one clock for every process on the machine, so holds
// of different processes can be put on one time line. report.cpp turns the holds into the final
// summary.
#ifndef REDLOCK_EXAMPLES_DEMO_DEMO_HPP
#define REDLOCK_EXAMPLES_DEMO_DEMO_HPP

#include <sys/types.h>  // pid_t

#include <chrono>    // std::chrono::milliseconds
#include <cstddef>   // std::size_t
#include <cstdint>   // std::int64_t, std::uint64_t
#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include <redlock/endpoint.hpp>  // Endpoint

namespace demo {

// CLOCK_MONOTONIC in nanoseconds: comparable across the processes of one machine.
std::int64_t monotonic_ns();

// What happened in one hold.
enum class Outcome : char {
  written = 'w',         // read and wrote the counter
  read_rejected = 'r',   // the counter refused the read: a newer fence had been seen
  write_rejected = 'x',  // the counter refused the write: a newer fence had been seen
  lease_lost = 'l',      // the lease was lost before the write, so the worker did not write
  error = 'e',           // talking to the counter failed
};

struct Hold {
  int process{0};
  int thread{0};
  std::int64_t start_ns{0};  // right after the lock was acquired
  std::int64_t end_ns{0};    // right before it was released
  std::uint64_t fence{0};
  Outcome outcome{Outcome::error};
  bool valid_at_end{false};  // the lease was still valid at end_ns (checked after it)
};

// The counter's keys on the checker server, all under one per-run prefix.
struct CounterKeys {
  explicit CounterKeys(const std::string& prefix)
      : counter(prefix + "counter"),
        highest_fence(prefix + "highest-fence"),
        applied(prefix + "applied") {}
  std::string counter;        // the shared counter itself
  std::string highest_fence;  // the highest fence token the counter has seen
  std::string applied;        // how many writes it applied (each meant as +1)
};

// Lua for the fenced counter. Fence 0 means "no fencing": always accepted.
// Read: KEYS counter, highest_fence; ARGV fence. Returns the counter, or -1 if the fence is
// older than one already seen (the caller's hold is stale).
extern const char* const kFencedReadLua;
// Write: KEYS counter, highest_fence, applied; ARGV fence, value. Returns 1 if written, 0 if
// rejected as stale.
extern const char* const kFencedWriteLua;

struct WorkerConfig {
  int id{0};
  int threads{4};
  pid_t parent{0};
  std::vector<std::string> nodes;  // URIs of the lock's instances
  std::string checker;             // URI of the counter's server
  std::string prefix;              // key prefix of this run
  std::chrono::milliseconds ttl{1000};
  bool fencing{true};
  std::string metrics;  // where to write this worker's Prometheus metrics at the end; empty: none
  bool async{false};    // acquire and release through <redlock/asio.hpp> (worker_parts.hpp)
};

// The --worker mode. Returns the process exit status.
int run_worker(const WorkerConfig& config);

struct DemoConfig {
  std::chrono::milliseconds duration{10'000};
  int processes{3};
  int threads{4};
  std::vector<std::string> redis;  // existing servers; empty: start throwaway ones
  std::string checker;             // with redis: the counter's server (default: the first)
  bool faults{true};               // inject faults (only into servers the demo started)
  bool faults_explicit{false};     // --faults was given
  std::chrono::milliseconds ttl{1000};
  bool fencing{true};
  // Connect and command timeout of each lock node the demo starts (the library's default is
  // 200 ms). A paused node costs every acquire and release this much.
  std::chrono::milliseconds node_timeout{200};
  // The servers the demo starts speak TLS (throwaway certificates; the nodes are rediss:// URIs).
  bool tls{false};
  // "redlock": five independent lock nodes (a Redlock); "sentinel": one Lock through Sentinel
  // on a master with two replicas and three sentinels, with a failover and a master killed.
  std::string topology{"redlock"};
  // A directory: each worker writes worker-<id>.prom there (Prometheus text) as it ends.
  std::string metrics;
  // The workers acquire and release through <redlock/asio.hpp>: tasks on an io_context instead
  // of threads blocked in try_lock_for() (needs the asio component).
  bool async{false};
};

// The coordinator. Returns the process exit status: 0 pass, 1 a lost update or an overlap, 69
// the given servers cannot be reached, 130 interrupted. Throws if its own servers cannot start.
int run_demo(const DemoConfig& config);

// One fault the coordinator injected, for the summary.
struct FaultEvent {
  double at_s{0};    // seconds since the start of the run
  std::string what;  // "node 2 (127.0.0.1:41234) paused (SIGSTOP)"
};

// A span of the run during which some node was paused or down.
struct FaultWindow {
  std::int64_t from_ns{0};
  std::int64_t to_ns{0};
  std::string label;  // "node 2 paused"
};

// Everything the summary needs.
struct RunRecord {
  double seconds{0};
  int processes{0};
  int threads{0};
  // The lock the workers use, as the banner and the summary name it (describe_lock()).
  std::string lock_kind;
  std::chrono::milliseconds ttl{0};
  std::chrono::milliseconds node_timeout{0};  // of the nodes the demo started; 0 with --redis
  bool fencing{true};
  bool interrupted{false};
  std::int64_t start_ns{0};
  std::vector<Hold> holds;
  std::optional<long long> counter;  // final value; empty if it could not be read
  std::optional<long long> applied;  // writes the counter applied
  std::string counter_error;         // why they could not be read
  std::vector<FaultEvent> faults;
  std::vector<FaultWindow> windows;
  std::string faults_note;  // why no faults were injected, if none were
  std::uint64_t lock_errors{0};
  std::string last_lock_error;
  std::string last_counter_error;
  std::uint64_t warnings{0};
  std::string last_warning;
  std::vector<std::string> worker_failures;  // workers that died or exited early
};

// The lock the workers use (worker.cpp: a Lock for one endpoint, else a Redlock), as the banner
// and the summary name it: "a Redlock over 5 TLS nodes (quorum 3)", "a Lock through Sentinel
// (...)". `sentinel`/`cluster`: the demo started that topology.
std::string describe_lock(const std::vector<redlock::Endpoint>& endpoints, std::size_t quorum,
                          bool sentinel, bool cluster);

// Prints the summary on stdout. Returns the exit status: 1 if an update was lost, two valid
// holds overlapped or a worker failed; else 130 if the run was interrupted (INCOMPLETE, even when
// what ran was sound); else 0.
int print_summary(const RunRecord& run);

}  // namespace demo

#endif  // REDLOCK_EXAMPLES_DEMO_DEMO_HPP
