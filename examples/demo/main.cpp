// examples/demo/main.cpp: redlock-demo's command line.
//
//   redlock-demo [--duration 10s] [--processes 3] [--threads 4] [--ttl 1s] [--node-timeout 200ms]
//                [--no-faults] [--no-fencing] [--redis URI]... [--checker URI]
//
// With no --redis it starts its own throwaway servers and injects faults; with --redis it uses
// the given servers and injects none. `redlock-demo --worker ...` is the worker mode the demo
// execs for each of its worker processes (not meant to be typed by hand).
#include <chrono>     // std::chrono
#include <cstdio>     // std::fprintf
#include <cstdlib>    // std::strtod
#include <exception>  // std::exception
#include <string>     // std::string
#include <vector>     // std::vector

#include <CLI/CLI.hpp>

#include "demo.hpp"

namespace {

// "10s", "500ms", "1.5s", "2m" or a bare number of seconds. Throws std::invalid_argument.
std::chrono::milliseconds parse_duration(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60'000;
  }
  if (end == text.c_str() || scale == 0 || !(value > 0)) {
    throw std::invalid_argument("'" + text + "' is not a duration (try 10s, 500ms, 2m)");
  }
  return std::chrono::milliseconds(static_cast<long long>(value * scale));
}

int worker_main(int argc, char** argv) {
  demo::WorkerConfig config;
  long long ttl_ms = 1000;
  bool no_fencing = false;
  CLI::App app{"redlock-demo worker (started by redlock-demo itself)"};
  app.add_option("--worker", config.id)->required();
  app.add_option("--threads", config.threads)->required();
  app.add_option("--parent", config.parent);
  app.add_option("--node", config.nodes)->required();
  app.add_option("--checker", config.checker)->required();
  app.add_option("--prefix", config.prefix)->required();
  app.add_option("--ttl-ms", ttl_ms);
  app.add_flag("--no-fencing", no_fencing);
  CLI11_PARSE(app, argc, argv);
  config.ttl = std::chrono::milliseconds(ttl_ms);
  config.fencing = !no_fencing;
  return demo::run_worker(config);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--worker") return worker_main(argc, argv);
  }

  demo::DemoConfig config;
  std::string duration = "10s";
  std::string ttl = "1s";
  std::string node_timeout = "200ms";
  bool no_faults = false;
  bool no_fencing = false;
  CLI::App app{
      "redlock-demo: worker processes x threads increment a shared counter under one Redlock\n"
      "while nodes are paused, killed and restarted; then reports lost updates, handoff latency\n"
      "and fairness. With no --redis it starts 6 throwaway redis-servers on free loopback ports\n"
      "(5 lock nodes + 1 for the counter) and stops them on exit, also on Ctrl-C.\n"
      "Exit status: 0 if no update was lost, 1 otherwise."};
  app.add_option("--duration", duration, "How long the workers run (10s, 500ms, 2m)")
      ->capture_default_str();
  app.add_option("--processes", config.processes, "Worker processes")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--threads", config.threads, "Threads per worker process (they share its lock)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--ttl", ttl, "Lease ttl; a killed node is restarted only after longer than this")
      ->capture_default_str();
  app.add_option("--node-timeout", node_timeout,
                 "Connect/command timeout of the lock nodes the demo starts (with --redis: put "
                 "?command_timeout=N in the URI)")
      ->capture_default_str();
  app.add_option("--redis", config.redis,
                 "Use this existing server as a lock node instead of starting any (repeatable; "
                 "no faults are injected then)")
      ->expected(1)
      ->take_all();
  app.add_option("--checker", config.checker,
                 "With --redis: the server that holds the counter (default: the first --redis)");
  auto* faults = app.add_flag("--faults", "Inject faults (the default with own servers)");
  app.add_flag("--no-faults", no_faults, "Do not pause or kill any node");
  app.add_flag("--no-fencing", no_fencing,
               "Counter writes carry no fence token: only the lock protects the counter");
  CLI11_PARSE(app, argc, argv);

  try {
    config.duration = parse_duration(duration);
    config.ttl = parse_duration(ttl);
    config.node_timeout = parse_duration(node_timeout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redlock-demo: %s\n", e.what());
    return 2;
  }
  if (!config.checker.empty() && config.redis.empty()) {
    std::fprintf(stderr, "redlock-demo: --checker needs --redis (own servers have their own)\n");
    return 2;
  }
  config.faults_explicit = faults->count() > 0;
  config.faults = !no_faults;
  config.fencing = !no_fencing;
  try {
    return demo::run_demo(config);
  } catch (const std::exception& e) {  // a bad URI, a server that would not start, ...
    std::fprintf(stderr, "redlock-demo: %s\n", e.what());
    return 1;
  }
}
