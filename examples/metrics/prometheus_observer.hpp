// examples/metrics/prometheus_observer.hpp: a redlock::Observer that keeps Prometheus counters
// and histograms and renders them in the text exposition format (version 0.0.4), for a
// node_exporter textfile collector or any scraper that reads a file.
//
//   auto metrics = std::make_shared<redlock_examples::PrometheusObserver>();
//   redlock::set_observer(metrics);            // every lock and node of the process
//   ...
//   metrics->write_file("/var/lib/node_exporter/textfile/redlock.prom");
//
// Metrics (all prefixed redlock_):
//   acquires_total{key,outcome}             counter  acquire calls by outcome
//   acquire_seconds{key}                    histogram acquire latency, waiting included
//   acquire_attempts_total{key}             counter  attempts sent to the store
//   handovers_total{key}                    counter  fair-mode hand-overs taken
//   releases_total{key,result}              counter  kept | lost | failed
//   hold_seconds{key}                       histogram how long holds lasted
//   extends_total{key,kind,result}          counter  kind extend|renewal, result held|lost
//   renewal_lateness_seconds{key}           histogram how late the watchdog's renewals ran
//   lost_total{key,reason}                  counter  leases lost, by LostReason
//   node_health_changes_total{node,health}  counter  reachable | unreachable | slow
//   node_up{node}                           gauge    1 reachable, 0 unreachable or slow
//   wakeups_total{key,kind}                 counter  released | handed_over
// Label values are escaped as the format requires (backslash, quote, newline). Keys are the
// lock keys: a service with unbounded key names should aggregate them first (cardinality).
#ifndef REDLOCK_EXAMPLES_PROMETHEUS_OBSERVER_HPP
#define REDLOCK_EXAMPLES_PROMETHEUS_OBSERVER_HPP

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <redlock/observer.hpp>

namespace redlock_examples {

class PrometheusObserver : public redlock::Observer {
 public:
  void on_acquire(const redlock::AcquireEvent& event) noexcept override;
  void on_release(const redlock::ReleaseEvent& event) noexcept override;
  void on_extend(const redlock::ExtendEvent& event) noexcept override;
  void on_lost(const redlock::LostEvent& event) noexcept override;
  void on_node(const redlock::NodeEvent& event) noexcept override;
  void on_wake(const redlock::WakeEvent& event) noexcept override;

  // The metrics in Prometheus text format. Thread-safe. Throws std::bad_alloc.
  std::string text() const;
  // Writes text() to `path` atomically (a temporary file beside it, then rename), so a scraper
  // never reads half a file. Throws std::runtime_error naming the path and the OS error.
  void write_file(const std::string& path) const;

 private:
  // Bucket upper bounds in seconds: 100 us .. 60 s, then +Inf.
  static constexpr std::array<double, 14> kBounds{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                  0.05,   0.1,    0.25,  0.5,    1,     10,   60};
  struct Histogram {
    std::array<std::uint64_t, kBounds.size() + 1> buckets{};  // the last one: +Inf only
    std::uint64_t count{0};
    double sum{0};
    void observe(double seconds) noexcept;
  };
  using Labels = std::string;  // rendered label set, e.g. key="a",outcome="acquired"

  void count(std::map<Labels, std::uint64_t>& counter, Labels labels) noexcept;
  void observe(std::map<Labels, Histogram>& histogram, Labels labels, double seconds) noexcept;

  mutable std::mutex mutex_;
  std::map<Labels, std::uint64_t> acquires_, attempts_, handovers_, releases_, extends_, lost_,
      node_changes_, wakeups_;
  std::map<Labels, int> node_up_;
  std::map<Labels, Histogram> acquire_seconds_, hold_seconds_, lateness_seconds_;
};

}  // namespace redlock_examples

#endif  // REDLOCK_EXAMPLES_PROMETHEUS_OBSERVER_HPP
