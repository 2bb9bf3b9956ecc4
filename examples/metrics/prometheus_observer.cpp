// examples/metrics/prometheus_observer.cpp: see prometheus_observer.hpp.
#include "prometheus_observer.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace redlock_examples {
namespace {

// A label value escaped for the text format: backslash, double quote and newline.
std::string escaped(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string label(std::string_view name, std::string_view value) {
  return std::string(name) + "=\"" + escaped(value) + "\"";
}

std::string labels(std::string_view key) { return label("key", key); }

std::string labels(std::string_view key, std::string_view name, std::string_view value) {
  return labels(key) + "," + label(name, value);
}

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

std::string number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.9g", value);
  return buffer;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP redlock_";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE redlock_";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

// One metric family: its HELP and TYPE lines, then a sample per label set.
template <typename Map>
void family(std::string& out, const char* name, const char* type, const char* help,
            const Map& values) {
  header(out, name, type, help);
  for (const auto& [set, value] : values) {
    out += "redlock_";
    out += name;
    out += '{';
    out += set;
    out += "} ";
    out += std::to_string(value);
    out += '\n';
  }
}

}  // namespace

void PrometheusObserver::Histogram::observe(double value) noexcept {
  std::size_t i = 0;
  while (i < kBounds.size() && value > kBounds[i]) ++i;
  ++buckets[i];
  ++count;
  sum += value;
}

void PrometheusObserver::count(std::map<Labels, std::uint64_t>& counter, Labels set) noexcept {
  try {
    std::lock_guard<std::mutex> guard(mutex_);
    ++counter[std::move(set)];
  } catch (...) {  // std::bad_alloc: the event is dropped
  }
}

void PrometheusObserver::observe(std::map<Labels, Histogram>& histogram, Labels set,
                                 double value) noexcept {
  try {
    std::lock_guard<std::mutex> guard(mutex_);
    histogram[std::move(set)].observe(value);
  } catch (...) {
  }
}

void PrometheusObserver::on_acquire(const redlock::AcquireEvent& e) noexcept {
  try {
    count(acquires_, labels(e.key, "outcome", redlock::to_string(e.outcome)));
    observe(acquire_seconds_, labels(e.key), seconds(e.latency));
    std::lock_guard<std::mutex> guard(mutex_);
    attempts_[labels(e.key)] += e.attempts;
    if (e.handed_over) ++handovers_[labels(e.key)];
  } catch (...) {
  }
}

void PrometheusObserver::on_release(const redlock::ReleaseEvent& e) noexcept {
  try {
    const char* result = e.failed ? "failed" : e.kept ? "kept" : "lost";
    count(releases_, labels(e.key, "result", result));
    observe(hold_seconds_, labels(e.key), seconds(e.held));
  } catch (...) {
  }
}

void PrometheusObserver::on_extend(const redlock::ExtendEvent& e) noexcept {
  try {
    count(extends_, labels(e.key, "kind", e.renewal ? "renewal" : "extend") + "," +
                        label("result", e.held ? "held" : "lost"));
    if (e.renewal) observe(lateness_seconds_, labels(e.key), seconds(e.lateness));
  } catch (...) {
  }
}

void PrometheusObserver::on_lost(const redlock::LostEvent& e) noexcept {
  try {
    count(lost_, labels(e.key, "reason", redlock::to_string(e.reason)));
  } catch (...) {
  }
}

void PrometheusObserver::on_node(const redlock::NodeEvent& e) noexcept {
  try {
    const std::string node = label("node", e.address);
    count(node_changes_, node + "," + label("health", redlock::to_string(e.health)));
    std::lock_guard<std::mutex> guard(mutex_);
    node_up_[node] = e.health == redlock::NodeHealth::reachable ? 1 : 0;
  } catch (...) {
  }
}

void PrometheusObserver::on_wake(const redlock::WakeEvent& e) noexcept {
  try {
    const char* kind = e.kind == redlock::WakeKind::handed_over ? "handed_over" : "released";
    count(wakeups_, labels(e.key, "kind", kind));
  } catch (...) {
  }
}

std::string PrometheusObserver::text() const {
  std::string out;
  const auto histogram = [&](const char* name, const char* help,
                             const std::map<Labels, Histogram>& values) {
    header(out, name, "histogram", help);
    for (const auto& [set, h] : values) {
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i <= kBounds.size(); ++i) {
        cumulative += h.buckets[i];
        const std::string le = i < kBounds.size() ? number(kBounds[i]) : "+Inf";
        out += "redlock_" + std::string(name) + "_bucket{" + set + ",le=\"" + le + "\"} " +
               std::to_string(cumulative) + '\n';
      }
      out += "redlock_" + std::string(name) + "_sum{" + set + "} " + number(h.sum) + '\n';
      out +=
          "redlock_" + std::string(name) + "_count{" + set + "} " + std::to_string(h.count) + '\n';
    }
  };
  std::lock_guard<std::mutex> guard(mutex_);
  family(out, "acquires_total", "counter", "Acquire calls that reached the store, by outcome.",
         acquires_);
  histogram("acquire_seconds", "Acquire latency in seconds, waiting included.", acquire_seconds_);
  family(out, "acquire_attempts_total", "counter", "Acquire attempts sent to the store.",
         attempts_);
  family(out, "handovers_total", "counter", "Fair-mode hand-overs taken.", handovers_);
  family(out, "releases_total", "counter", "Holds ended, by result (kept, lost, failed).",
         releases_);
  histogram("hold_seconds", "How long holds lasted, in seconds.", hold_seconds_);
  family(out, "extends_total", "counter", "extend(ttl) calls and watchdog renewals, by result.",
         extends_);
  histogram("renewal_lateness_seconds", "How late watchdog renewals ran, in seconds.",
            lateness_seconds_);
  family(out, "lost_total", "counter", "Leases lost while held, by reason.", lost_);
  family(out, "node_health_changes_total", "counter", "Node health changes, by new health.",
         node_changes_);
  family(out, "node_up", "gauge", "1 if the node answered last, 0 if unreachable or slow.",
         node_up_);
  family(out, "wakeups_total", "counter", "Waiters woken by a release or handed the lock.",
         wakeups_);
  return out;
}

void PrometheusObserver::write_file(const std::string& path) const {
  const std::string body = text();
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(temporary.c_str(), "w");
  if (!f) {
    throw std::runtime_error("cannot write metrics to " + temporary + ": " + std::strerror(errno));
  }
  const bool written = std::fwrite(body.data(), 1, body.size(), f) == body.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot write metrics to " + path + ": " + std::strerror(error));
  }
}

}  // namespace redlock_examples
