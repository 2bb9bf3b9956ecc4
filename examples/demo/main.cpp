// examples/demo/main.cpp: redlock-demo's command line.
//
//   redlock-demo [--duration 10s] [--processes 3] [--threads 4] [--ttl 1s] [--node-timeout 200ms]
//                [--no-faults] [--no-fencing] [--async] [--redis URI]... [--checker URI]
//
// With no --redis it starts its own throwaway servers and injects faults; with --redis it uses
// the given servers and injects none. `redlock-demo --worker ...` is the worker mode the demo
// execs for each of its worker processes (not meant to be typed by hand).
#include <chrono>      // std::chrono
#include <cstdio>      // std::fprintf
#include <cstdlib>     // std::strtod
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem::is_directory
#include <string>      // std::string
#include <vector>      // std::vector

#include <stdexcept>  // std::runtime_error, std::invalid_argument

#include <CLI/CLI.hpp>

#include "demo.hpp"
#include "duration.hpp"  // redlock_examples::parse_duration: redlock-run's syntax

namespace {

// Exit statuses, as the help says.
constexpr int kExitUsage = 64;        // EX_USAGE
constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE: servers cannot start or be reached

// A usage error: the message names the flag.
class UsageError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A positive duration, as redlock-run takes them (tools/redlock-run/duration.hpp). Throws
// UsageError.
std::chrono::milliseconds parse_duration(const char* flag, const std::string& text) {
  const auto d = redlock_examples::parse_duration(text);
  if (!d) {
    throw UsageError(std::string(flag) + " '" + text + "' is not a duration; use " +
                     redlock_examples::kDurationHelp);
  }
  if (d->count() == 0) throw UsageError(std::string(flag) + " must be longer than 0 (e.g. 10s)");
  return *d;
}

// A whole number in [1, 64]. Throws UsageError.
int parse_count(const char* flag, const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 2 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  const int n = digits ? std::stoi(text) : 0;
  if (n < 1 || n > 64) throw UsageError(std::string(flag) + " '" + text + "': use 1 to 64");
  return n;
}

// CLI11's own words for a bad command line, in ours.
std::string usage_message(const CLI::ParseError& e) {
  const std::string what = e.what();
  const std::string extras = "not expected: ";  // "The following argument(s) was/were ..."
  const std::size_t at = what.find(extras);
  if (at == std::string::npos) return what;
  return "unknown option or argument: " + what.substr(at + extras.size());
}

const char kDescription[] =
    "redlock-demo: worker processes x threads increment a shared counter under one lock (a\n"
    "Redlock; a Lock with --topology sentinel or cluster) while nodes are paused, killed and\n"
    "restarted; then reports lost updates, handoff latency and fairness. With no --redis it\n"
    "starts 6 throwaway redis-servers on free loopback ports (5 lock nodes + 1 for the counter)\n"
    "and stops them on exit, also on Ctrl-C.";

const char kFooter[] = R"(
The live line: seconds, holds so far, holds per second, lock nodes up, and "stale": holds
whose counter update the fence refused because a newer holder had already written (the
holder had lost its lease, e.g. while its node was paused or restarted, without knowing it
yet). Stale holds are the fence doing its job, not errors; with --no-fencing they would be
lost updates instead.

Durations: 250ms, 0.5s, 30s, 1m30s, 2h; a bare number is seconds.

Exit status:
  0    pass: no update was lost and no two holders overlapped
  1    a lost update or an overlap
  64   usage error: bad option or value
  69   the servers could not be started or reached
  130  interrupted (Ctrl-C))";

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
  app.add_option("--metrics", config.metrics);
  app.add_flag("--async", config.async);
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
  std::string processes = std::to_string(config.processes);
  std::string threads = std::to_string(config.threads);
  bool no_faults = false;
  bool no_fencing = false;
  CLI::App app{kDescription, "redlock-demo"};
  app.footer(kFooter);
  app.add_option("--duration", duration, "How long the workers run (10s, 0.5m, 1m30s, 90)")
      ->type_name("DURATION")
      ->capture_default_str();
  app.add_option("--processes", processes, "Worker processes, 1 to 64")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--threads", threads, "Threads per worker process (they share its lock), 1 to 64")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--ttl", ttl, "Lease ttl; a killed node is restarted only after longer than this")
      ->type_name("DURATION")
      ->capture_default_str();
  app.add_option("--node-timeout", node_timeout,
                 "Connect/command timeout of the lock nodes the demo starts (with --redis: put "
                 "?command_timeout=N in the URI)")
      ->type_name("DURATION")
      ->capture_default_str();
  app.add_option("--redis", config.redis,
                 "Use this existing server as a lock node instead of starting any (repeatable; "
                 "no faults are injected then)")
      ->type_name("URI")
      ->expected(1)
      ->take_all();
  app.add_option("--checker", config.checker,
                 "With --redis: the server that holds the counter (default: the first --redis)")
      ->type_name("URI");
  auto* faults = app.add_flag("--faults", "Inject faults (the default with own servers)");
  app.add_flag("--no-faults", no_faults, "Do not pause or kill any node");
  app.add_flag("--tls", config.tls,
               "Start the servers with TLS (throwaway CA and certificates made with openssl) and "
               "connect over rediss://, verified");
  app.add_option("--topology", config.topology,
                 "redlock: a Redlock over 5 independent servers; sentinel: a Lock through "
                 "Sentinel (a master, 2 replicas, 3 sentinels) with a live failover and the "
                 "master killed; cluster: a Lock on a Redis Cluster (3 masters, 3 replicas) "
                 "whose slot migrates, then fails over")
      ->type_name("redlock|sentinel|cluster")
      ->check(CLI::IsMember({"redlock", "sentinel", "cluster"}))
      ->capture_default_str();
  app.add_flag("--no-fencing", no_fencing,
               "Counter writes carry no fence token: only the lock protects the counter");
  app.add_option("--metrics", config.metrics,
                 "Each worker writes its lock metrics (Prometheus text) to DIR/worker-N.prom as "
                 "it ends")
      ->type_name("DIR");
  app.add_flag("--async", config.async,
               "The workers' tasks acquire and release through <redlock/asio.hpp> on an "
               "io_context (asio's async operations) instead of threads blocked in try_lock_for()"
#ifndef REDLOCK_DEMO_ASYNC
               " (this build has no asio component: refused)"
#endif
  );
  try {
    app.parse(argc, argv);
    config.duration = parse_duration("--duration", duration);
    config.ttl = parse_duration("--ttl", ttl);
    config.node_timeout = parse_duration("--node-timeout", node_timeout);
    config.processes = parse_count("--processes", processes);
    config.threads = parse_count("--threads", threads);
    if (!config.metrics.empty() && !std::filesystem::is_directory(config.metrics)) {
      throw UsageError("--metrics '" + config.metrics + "' is not a directory");
    }
    if (config.topology != "redlock" && (config.tls || !config.redis.empty())) {
      throw UsageError("--topology " + config.topology +
                       " starts its own servers, without TLS (drop --tls and --redis; --redis "
                       "takes a redis-sentinel:// or redis-cluster:// URI too)");
    }
#ifndef REDLOCK_DEMO_ASYNC
    if (config.async) {
      throw UsageError(
          "--async needs the asio component (redlock::asio): install libasio-dev "
          "and rebuild");
    }
#endif
    if (!config.checker.empty() && config.redis.empty()) {
      throw UsageError("--checker needs --redis (own servers have their own)");
    }
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "redlock-demo: %s\nTry 'redlock-demo --help'.\n",
                 usage_message(e).c_str());
    return kExitUsage;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "redlock-demo: %s\nTry 'redlock-demo --help'.\n", e.what());
    return kExitUsage;
  }
  config.faults_explicit = faults->count() > 0;
  config.faults = !no_faults;
  config.fencing = !no_fencing;
  try {
    return demo::run_demo(config);            // 0 pass, 1 lost update, kExitUnavailable, 130
  } catch (const std::invalid_argument& e) {  // a bad URI, the same server twice
    std::fprintf(stderr, "redlock-demo: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {  // a server that would not start or cannot be reached
    std::fprintf(stderr, "redlock-demo: %s\n", e.what());
    return kExitUnavailable;
  }
}
