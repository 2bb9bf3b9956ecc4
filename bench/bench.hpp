// bench/bench.hpp: what the sections of redlock-bench share (settings, the report being built).
// The sections themselves are described at the top of bench.cpp.
#ifndef REDLOCK_BENCH_BENCH_HPP
#define REDLOCK_BENCH_BENCH_HPP

#include <chrono>   // std::chrono::milliseconds
#include <cstdint>  // std::int64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include <redlock/endpoint.hpp>  // Endpoint

#include "common.hpp"  // Json

namespace redlock::test {
class RedisServer;
}  // namespace redlock::test

namespace bench {

struct Config {
  bool quick{false};
  // Length of every timed measurement, seconds.
  double seconds{1.0};
  // Sections 1 and 2: interleaved rounds per variant; the table shows their median.
  int rounds{7};
  // Sections to run (1..14); empty: all.
  std::vector<int> sections;
  // Sections 1, 2 and 5: client thread counts.
  std::vector<int> threads{1, 4};
  // Section 2: cycles measured with one node SIGSTOPped, per command timeout.
  int paused_cycles{10};
  // Section 3: contending workers.
  int workers{8};
  // Section 4: leases on one watchdog, and their ttl.
  int leases{10'000};
  std::chrono::milliseconds watchdog_ttl{3'000};
  // Section 6: waiting threads on distinct keys (6a's largest W), and waiters on one key (6c).
  int load_channels{15'000};
  int load_waiters{1'000};
  // Section 12: fleet sizes (worker processes on one key) and the window of each run, seconds.
  std::vector<int> fleet_sizes{8, 32, 128, 512};
  double fleet_seconds{4.0};
  // Section 13: coroutines waiting on one key, and acquires to cancel.
  int async_waiters{10'000};
  int async_cancels{10'000};
  // connect and command timeout of every endpoint (library and floor) outside the SIGSTOP run:
  // generous, so that a loaded CI machine never turns a slow reply into an error.
  std::chrono::milliseconds timeout{1'000};
  std::string json_path;
  std::string command_line;
};

// What the sections fill in: the JSON document, and failures (the exit status is 1 if any).
struct Report {
  Json sections = Json::object();
  std::vector<std::string> errors;
};

// server.endpoint() with both timeouts set to `timeout`.
redlock::Endpoint endpoint_of(const redlock::test::RedisServer& server,
                              std::chrono::milliseconds timeout);

// Section 5 (degraded.cpp).
void section_degraded(const Config& config, Report& report);

// Section 7 (tls.cpp).
void section_tls(const Config& config, Report& report);
void section_sentinel(const Config& config, Report& report);
// 9. The other backends (bench/backends.cpp; built with REDLOCK_WITH_POSTGRES).
void section_backends(const Config& config, Report& report);
// Section 10 (zookeeper.cpp), when the ZooKeeper component is built.
void section_zookeeper(const Config& config, Report& report);
void section_cluster(const Config& config, Report& report);
// Section 3 (contended.cpp).
void section_contended(const Config& config, Report& report);
// Section 6 (load.cpp).
void section_load(const Config& config, Report& report);
// Section 12 (fleet.cpp).
void section_fleet(const Config& config, Report& report);
// Section 13 (async.cpp, built with the redlock::asio target).
void section_async(const Config& config, Report& report);
// Section 14 (primitives.cpp, primitives_election.cpp).
void section_primitives(const Config& config, Report& report);
// Section 3's hand-off path alone (contended.cpp): 2 workers strictly alternating on `key`, each
// with its own Client and a Lock with wake_on_release (fair = false), or in fair mode, hold 1 ms;
// each hand-off (a release to the other's acquire) in nanoseconds.
enum class HandoffMode { wake, fair };
std::vector<std::int64_t> handoff_ping_pong(const redlock::Endpoint& endpoint,
                                            const std::string& key, double seconds,
                                            HandoffMode mode = HandoffMode::wake);
// The hidden worker mode of section 3's process variant: `redlock-bench --contended-worker ...`.
int contended_worker_main(int argc, char** argv);

}  // namespace bench

#endif  // REDLOCK_BENCH_BENCH_HPP
