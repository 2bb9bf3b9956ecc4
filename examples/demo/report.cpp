// examples/demo/report.cpp: turns the holds of a redlock-demo run into the summary on stdout.
//
// Everything is derived from the holds the workers reported (CLOCK_MONOTONIC, one clock for all
// processes) and from the counter's final state:
//   lost updates      writes the counter applied minus the counter's value (each write was +1)
//   overlaps          a hold that started before an earlier one ended; a *violation* if the
//                     earlier holder's lease was still valid at its end (the lock failed), merely
//                     expected if its lease had run out (what fencing is for)
//   handoff latency   end of one hold (right before its release) to the start of the next
//   fairness          holds per worker thread and per worker process
#include <algorithm>  // std::sort, std::min_element, std::max_element
#include <cmath>      // std::ceil
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf, std::snprintf
#include <map>        // std::map
#include <string>     // std::string
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "demo.hpp"

namespace demo {
namespace {

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

// Nearest-rank percentile of sorted values (q in (0, 1]).
std::int64_t percentile(const std::vector<std::int64_t>& sorted, double q) {
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<std::size_t>(rank, 1)) - 1];
}

std::string latency_line(std::vector<std::int64_t> values) {
  if (values.empty()) return "n/a (fewer than two holds)";
  std::sort(values.begin(), values.end());
  char text[160];
  std::snprintf(text, sizeof text, "p50 %.1f ms, p99 %.1f ms, max %.1f ms (%zu handoffs)",
                ms(percentile(values, 0.50)), ms(percentile(values, 0.99)), ms(values.back()),
                values.size());
  return text;
}

// A stretch of the run: all nodes up, or one fault window.
struct Phase {
  std::string name;
  double span_s{0};
  std::size_t holds{0};
  std::vector<std::int64_t> handoffs;
};

// Phase 0 is "all nodes up"; phase i + 1 is run.windows[i].
std::vector<Phase> make_phases(const RunRecord& run) {
  std::vector<Phase> phases(1);
  phases[0].name = "all nodes up";
  phases[0].span_s = run.seconds;
  for (const auto& w : run.windows) {
    Phase p;
    p.name = w.label;
    p.span_s = static_cast<double>(w.to_ns - w.from_ns) / 1e9;
    phases[0].span_s -= p.span_s;
    phases.push_back(std::move(p));
  }
  phases[0].span_s = std::max(phases[0].span_s, 0.0);
  return phases;
}

// "failover (2.1 s)   224.4 holds/s, handoff p50 0.4 ms, p99 35.9 ms". A phase under half a
// second (a slot migration takes milliseconds) gets counts, not a rate or percentiles that
// would pretend to measure it.
std::string phase_line(const Phase& p) {
  std::vector<std::int64_t> sorted = p.handoffs;
  std::sort(sorted.begin(), sorted.end());
  char line[160];
  if (p.span_s < 0.5) {
    char name[48];
    std::snprintf(name, sizeof name, "%s (%.0f ms)", p.name.c_str(), p.span_s * 1000);
    const int n = std::snprintf(line, sizeof line, "%-24s %zu hold(s) began, %zu handoff(s)", name,
                                p.holds, sorted.size());
    if (!sorted.empty() && n > 0) {
      std::snprintf(line + n, sizeof line - static_cast<std::size_t>(n), ", longest %.1f ms",
                    ms(sorted.back()));
    }
    return line;
  }
  char handoff[96] = "no handoff";
  if (!sorted.empty()) {
    std::snprintf(handoff, sizeof handoff, "handoff p50 %.1f ms, p99 %.1f ms",
                  ms(percentile(sorted, 0.50)), ms(percentile(sorted, 0.99)));
  }
  char name[48];
  std::snprintf(name, sizeof name, "%s (%.1f s)", p.name.c_str(), p.span_s);
  std::snprintf(line, sizeof line, "%-24s %7.1f holds/s, %s", name,
                static_cast<double>(p.holds) / p.span_s, handoff);
  return line;
}

std::size_t phase_of(const RunRecord& run, std::int64_t t) {
  for (std::size_t i = 0; i < run.windows.size(); ++i) {
    if (t >= run.windows[i].from_ns && t < run.windows[i].to_ns) return i + 1;
  }
  return 0;
}

}  // namespace

std::string describe_lock(const std::vector<redlock::Endpoint>& endpoints, std::size_t quorum,
                          bool sentinel, bool cluster) {
  const char* tls = endpoints.front().tls.enabled ? "TLS " : "";
  if (sentinel)
    return std::string("a Lock through Sentinel (") + tls + "a master, 2 replicas, 3 sentinels)";
  if (cluster) return std::string("a Lock on a Redis Cluster (") + tls + "3 masters, 3 replicas)";
  if (endpoints.size() == 1) return std::string("a Lock on one ") + tls + "server";
  return "a Redlock over " + std::to_string(endpoints.size()) + " " + tls + "nodes (quorum " +
         std::to_string(quorum) + ")";
}

int print_summary(const RunRecord& run) {
  std::vector<Hold> holds = run.holds;
  std::sort(holds.begin(), holds.end(),
            [](const Hold& a, const Hold& b) { return a.start_ns < b.start_ns; });

  std::map<Outcome, std::size_t> outcomes;
  for (const auto& h : holds) ++outcomes[h.outcome];
  const std::size_t written = outcomes[Outcome::written];
  const std::size_t stale = outcomes[Outcome::read_rejected] + outcomes[Outcome::write_rejected];

  // Overlaps and handoffs, on the shared monotonic time line.
  std::size_t overlaps = 0;
  std::size_t violations = 0;
  std::int64_t max_end = INT64_MIN;
  std::int64_t max_valid_end = INT64_MIN;
  std::vector<std::int64_t> handoffs;
  std::vector<Phase> phases = make_phases(run);
  for (std::size_t i = 0; i < holds.size(); ++i) {
    const Hold& h = holds[i];
    ++phases[phase_of(run, h.start_ns)].holds;
    if (i > 0) {
      if (h.start_ns < max_end) ++overlaps;
      if (h.start_ns < max_valid_end) ++violations;
      const std::int64_t gap = h.start_ns - holds[i - 1].end_ns;
      if (gap >= 0) {  // a handoff belongs to the phase its release happened in
        handoffs.push_back(gap);
        phases[phase_of(run, holds[i - 1].end_ns)].handoffs.push_back(gap);
      }
    }
    max_end = std::max(max_end, h.end_ns);
    if (h.valid_at_end) max_valid_end = std::max(max_valid_end, h.end_ns);
  }

  // Fairness: every worker thread counts, also one that never got the lock.
  std::map<std::pair<int, int>, std::size_t> per_thread;
  std::map<int, std::size_t> per_process;
  for (int p = 1; p <= run.processes; ++p) {
    per_process[p] = 0;
    for (int t = 0; t < run.threads; ++t) per_thread[{p, t}] = 0;
  }
  for (const auto& h : holds) {
    ++per_thread[{h.process, h.thread}];
    ++per_process[h.process];
  }
  auto min_max = [](const auto& counts) {
    std::size_t lo = SIZE_MAX;
    std::size_t hi = 0;
    for (const auto& [who, n] : counts) {
      lo = std::min(lo, n);
      hi = std::max(hi, n);
    }
    return std::pair<std::size_t, std::size_t>(counts.empty() ? 0 : lo, hi);
  };
  const auto [thread_min, thread_max] = min_max(per_thread);
  const auto [process_min, process_max] = min_max(per_process);

  const bool counted = run.counter.has_value() && run.applied.has_value();
  const long long lost = counted ? *run.applied - *run.counter : 0;

  // ---- Print ----
  std::printf(
      "\nredlock-demo summary%s: %.1f s, %d process(es) x %d thread(s), %s, ttl %lld ms, "
      "fencing %s\n",
      run.interrupted ? " (interrupted)" : "", run.seconds, run.processes, run.threads,
      run.lock_kind.c_str(), static_cast<long long>(run.ttl.count()), run.fencing ? "on" : "off");
  std::printf("  acquisitions      %zu (%.1f/s)\n", holds.size(),
              run.seconds > 0 ? static_cast<double>(holds.size()) / run.seconds : 0.0);
  std::printf("  increments        %zu written", written);
  if (stale > 0) std::printf(", %zu refused by the fence (stale holder)", stale);
  if (outcomes[Outcome::lease_lost] > 0) {
    std::printf(", %zu skipped (lease lost before the write)", outcomes[Outcome::lease_lost]);
  }
  if (outcomes[Outcome::error] > 0) {
    std::printf(", %zu failed (counter unreachable)", outcomes[Outcome::error]);
  }
  std::printf("\n");
  if (counted) {
    std::printf("  lost updates      %lld  (counter is %lld; writes applied %lld)\n", lost,
                *run.counter, *run.applied);
    if (static_cast<long long>(written) != *run.applied) {
      std::printf(
          "                    note: workers saw %zu writes succeed, the counter applied "
          "%lld (a reply was lost)\n",
          written, *run.applied);
    }
  } else {
    std::printf("  lost updates      unknown: the counter could not be read (%s)\n",
                run.counter_error.c_str());
  }
  if (violations > 0) {
    std::printf(
        "  mutual exclusion  VIOLATED: %zu hold(s) began while an earlier holder's "
        "lease was still valid\n",
        violations);
  } else {
    std::printf(
        "  mutual exclusion  held: no hold began while another valid one was running "
        "(one CLOCK_MONOTONIC for all processes)\n");
  }
  if (overlaps > violations) {
    std::printf(
        "                    %zu overlap(s) with a holder whose lease had already "
        "expired: the case fencing is for\n",
        overlaps - violations);
  }
  std::printf("  handoff latency   %s\n", latency_line(handoffs).c_str());
  std::printf(
      "                    (from right before a release to right after the next acquire)\n");
  if (!run.windows.empty()) {
    const char* label = "  by phase         ";
    bool paused = false;
    for (const auto& p : phases) {
      std::printf("%s %s\n", label, phase_line(p).c_str());
      label = "                   ";
      paused = paused || p.name.find("paused") != std::string::npos;
    }
    if (paused && run.node_timeout.count() > 0) {
      std::printf(
          "                    a paused node answers nothing: after its first %lld ms timeout "
          "it is skipped\n                    (probed again after a back-off); operations "
          "finish once a quorum answered\n",
          static_cast<long long>(run.node_timeout.count()));
    }
  }
  std::printf(
      "  fairness          per thread min %zu / max %zu holds; per process min %zu / max "
      "%zu\n",
      thread_min, thread_max, process_min, process_max);
  if (run.faults.empty()) {
    std::printf("  faults            %s\n",
                run.faults_note.empty() ? "none" : run.faults_note.c_str());
  } else {
    const char* label = "  faults            ";
    for (const auto& f : run.faults) {
      std::printf("%st=%.1f s  %s\n", label, f.at_s, f.what.c_str());
      label = "                    ";
    }
  }
  std::printf(
      "  errors            %llu lock error(s) (attempts that failed, not contention), %llu "
      "library warning(s)\n",
      static_cast<unsigned long long>(run.lock_errors),
      static_cast<unsigned long long>(run.warnings));
  if (!run.last_lock_error.empty()) {
    std::printf("                    last lock error: %s\n", run.last_lock_error.c_str());
  }
  if (!run.last_counter_error.empty()) {
    std::printf("                    last counter error: %s\n", run.last_counter_error.c_str());
  }
  if (!run.last_warning.empty()) {
    std::printf("                    last warning: %s\n", run.last_warning.c_str());
  }
  for (const auto& f : run.worker_failures) std::printf("  worker failure    %s\n", f.c_str());

  // ---- Verdict ----
  int status = 0;
  std::string verdict;
  if (!run.worker_failures.empty()) {
    verdict = "FAIL: a worker failed (see above)";
    status = 1;
  } else if (!counted) {
    // Ctrl-C in a terminal reaches the redis-servers too (same process group): they shut down.
    verdict = run.interrupted ? "INCOMPLETE: interrupted, and the counter's server stopped too "
                                "(a terminal's Ctrl-C reaches the redis-servers as well), so lost "
                                "updates could not be checked"
                              : "FAIL: the counter could not be checked";
    status = run.interrupted ? 130 : 1;
  } else if (lost != 0) {
    verdict = "FAIL: " + std::to_string(lost) + " update(s) lost";
    status = 1;
  } else if (violations > 0) {
    verdict = "FAIL: two holders overlapped while both leases were valid";
    status = 1;
  } else if (run.interrupted) {
    // Cut short: what ran was checked and found sound, but the run promised more than that.
    char text[160];
    std::snprintf(text, sizeof text,
                  "INCOMPLETE: interrupted after %.1f s; until then %llu increments, none lost, "
                  "no overlapping valid holds",
                  run.seconds, static_cast<unsigned long long>(written));
    verdict = text;
    status = 130;
  } else if (holds.empty()) {
    verdict = "FAIL: no worker ever got the lock";
    status = 1;
  } else {
    verdict = "PASS: " + std::to_string(written) + " increments, none lost, no overlapping " +
              "valid holds" + (run.faults.empty() ? "" : ", through every fault");
  }
  std::printf("verdict: %s\n", verdict.c_str());
  std::fflush(stdout);
  return status;
}

}  // namespace demo
