// examples/metrics.cpp: lock metrics for Prometheus, through the redlock::Observer hooks.
//
//   example_metrics [--redis URI] [--self-test]
//
// One PrometheusObserver (examples/metrics/) is set process-wide; a few locks then acquire,
// contend, extend and release, and the metrics are written to a file in the text exposition
// format (point node_exporter's textfile collector at its directory) and printed. The observer
// costs nothing when unset, and about nothing when set (bench section 1: the no-op row).
#include <chrono>      // std::chrono
#include <cstdio>      // std::printf, std::fprintf
#include <filesystem>  // std::filesystem::temp_directory_path
#include <memory>      // std::make_shared
#include <mutex>       // std::lock_guard
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string
#include <thread>      // std::thread

#include <redlock/redlock.hpp>  // Client, Endpoint, Lock, set_observer

#include "example_main.hpp"                 // main(): --redis URI, --self-test
#include "metrics/prometheus_observer.hpp"  // PrometheusObserver

namespace {

using namespace std::chrono_literals;

int run(const redlock::Endpoint& endpoint) {
  auto metrics = std::make_shared<redlock_examples::PrometheusObserver>();
  redlock::set_observer(metrics);  // every lock of the process, and node health

  redlock::Client client(endpoint);
  redlock::LockOptions options;
  options.ttl = 10s;
  options.fencing = true;
  redlock::Lock lock(client, "examples:metrics", options);
  redlock::Lock other(client, "examples:metrics", options);
  for (int i = 0; i < 5; ++i) {
    std::lock_guard<redlock::Lock> guard(lock);
    if (other.try_lock()) throw std::runtime_error("two holders of examples:metrics");
    lock.extend(10s);
  }
  // A waiter woken by a release.
  lock.lock();
  std::thread waiter([&] {
    if (other.try_lock_for(5s)) other.unlock();
  });
  std::this_thread::sleep_for(100ms);
  lock.unlock();
  waiter.join();

  // A service writes where its collector reads; this example writes to the temp directory.
  const std::string path =
      (std::filesystem::temp_directory_path() / "redlock_example_metrics.prom").string();
  metrics->write_file(path);
  const std::string text = metrics->text();
  std::printf("%s\nwritten to %s (removed again)\n", text.c_str(), path.c_str());
  std::filesystem::remove(path);
  redlock::set_observer(nullptr);
  // The figures the run must show: 7 acquires, 6 of them acquired, and a contended try_lock.
  const bool ok =
      text.find("redlock_acquires_total{key=\"examples:metrics\",outcome=\"acquired\"} 7") !=
          std::string::npos &&
      text.find("outcome=\"contended\"} 5") != std::string::npos &&
      text.find("redlock_releases_total{key=\"examples:metrics\",result=\"kept\"} 7") !=
          std::string::npos;
  if (!ok) std::fprintf(stderr, "the metrics miss an expected figure\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_with(
      argc, argv, nullptr, 0,
      [](const redlock::Endpoint& endpoint, std::uint64_t) { return run(endpoint); });
}
