// tests/torture/liveness_check.cpp: see liveness_check.hpp.
#include "liveness_check.hpp"

#include <algorithm>  // std::sort, std::max, std::min, std::lower_bound
#include <cinttypes>  // PRId64
#include <limits>     // std::numeric_limits

#include "checker.hpp"  // RunInfo, Report

namespace redlock::torture {

namespace {

using Interval = std::pair<std::int64_t, std::int64_t>;
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

// The first moment in [from, to] at which process p was stopped, cut off or dead; kNever if
// none.
std::int64_t stunned_at(const RunInfo& info, int p, std::int64_t from, std::int64_t to) {
  std::int64_t first = kNever;
  for (const ProcessIntervals* map : {&info.paused, &info.liveness.partitioned}) {
    const auto it = map->find(p);
    if (it == map->end()) continue;
    for (const Interval& i : it->second) {
      // A stop not yet healed at the end of the run is open to the end.
      const std::int64_t until = i.second == 0 ? kNever : i.second;
      if (i.first <= to && until >= from) first = std::min(first, std::max(i.first, from));
    }
  }
  const auto killed = info.killed.find(p);
  if (killed != info.killed.end() && killed->second <= to) {
    first = std::min(first, std::max(killed->second, from));
  }
  return first;
}

// The live holds (liveness_check.hpp), merged into disjoint intervals sorted by start.
std::vector<Interval> live_holds(const LogContents& logs, const RunInfo& info, LivenessReport& r) {
  std::vector<Interval> live;
  for (const Hold& h : logs.holds) {
    if (!h.has_acq || h.window_empty()) continue;
    const std::int64_t stun = stunned_at(info, h.process, h.window_start(), h.window_end());
    if (stun != kNever) ++r.dead_holds;
    const std::int64_t end = std::min(h.window_end(), stun);
    if (end > h.window_start()) live.emplace_back(h.window_start(), end);
  }
  for (const OutsideHold& o : info.liveness.outside) live.emplace_back(o.from, o.to);
  std::sort(live.begin(), live.end());
  std::vector<Interval> merged;
  for (const Interval& i : live) {
    if (!merged.empty() && i.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, i.second);
    } else {
      merged.push_back(i);
    }
  }
  return merged;
}

// One wait's stalls: the longest continuous one (and where it starts) and their sum.
struct Stalls {
  std::int64_t longest{0};
  std::int64_t from{0};
  std::int64_t total{0};
};

Stalls stalls_in(const std::vector<Interval>& live, std::int64_t from, std::int64_t to) {
  Stalls s;
  auto note = [&s](std::int64_t a, std::int64_t b) {
    if (b <= a) return;
    s.total += b - a;
    if (b - a > s.longest) {
      s.longest = b - a;
      s.from = a;
    }
  };
  // The first live interval that ends after `from` (ends grow with starts: they are disjoint).
  auto it = std::lower_bound(live.begin(), live.end(), from,
                             [](const Interval& i, std::int64_t t) { return i.second <= t; });
  std::int64_t cursor = from;
  for (; it != live.end() && it->first < to; ++it) {
    note(cursor, it->first);
    cursor = std::max(cursor, it->second);
  }
  note(cursor, to);
  return s;
}

// Library holds whose window overlaps the time an old-style client surely held the key.
std::int64_t outside_overlaps(const LogContents& logs, const RunInfo& info) {
  std::int64_t n = 0;
  for (const OutsideHold& o : info.liveness.outside) {
    if (o.held_from == 0) continue;  // its SET's outcome is unknown
    for (const Hold& h : logs.holds) {
      if (!h.has_acq || h.window_empty()) continue;
      if (h.window_start() < o.held_to && h.window_end() > o.held_from) ++n;
    }
  }
  return n;
}

}  // namespace

void check_liveness(const LogContents& logs, const RunInfo& info, Report& report) {
  LivenessReport& r = report.liveness;
  const std::vector<Interval> live = live_holds(logs, info, r);
  r.outside_holds = static_cast<std::int64_t>(info.liveness.outside.size());
  for (const Wait& w : logs.waits) {
    if (w.t_end <= w.t_try) continue;
    if (stunned_at(info, w.process, w.t_try, w.t_end) != kNever) {
      ++r.waits_skipped;
      continue;
    }
    ++r.waits;
    const Stalls s = stalls_in(live, w.t_try, w.t_end);
    r.longest_total_ns = std::max(r.longest_total_ns, s.total);
    r.longest_wait_ns = std::max(r.longest_wait_ns, w.t_end - w.t_try);
    if (s.longest > info.liveness.bound_ns) ++r.over_bound;
    if (s.longest > r.longest_ns) {
      r.longest_ns = s.longest;
      r.longest_wait = w;
      r.longest_from = s.from;
    }
  }
  r.outside_overlaps = outside_overlaps(logs, info);
  auto require = [&report](bool ok, const std::string& what) {
    if (!ok) report.failures.push_back(what);
  };
  require(r.waits > 0, "liveness: no wait measured");
  require(r.over_bound == 0,
          "liveness: " + std::to_string(r.over_bound) + " waits stalled longer than the bound (" +
              std::to_string(info.liveness.bound_ns / 1'000'000) + " ms) while the lock was " +
              "free or held by a dead lease; the longest " +
              std::to_string(r.longest_ns / 1'000'000) + " ms");
  require(r.outside_overlaps == 0,
          "liveness: library holds overlapping an old-style client's "
          "SET NX hold: " +
              std::to_string(r.outside_overlaps));
}

void print_liveness(const Report& report, std::FILE* out) {
  const LivenessSetup& setup = report.info.liveness;
  if (!setup.on) return;
  const LivenessReport& r = report.liveness;
  auto row = [out](const char* label, std::int64_t value, const char* note = "") {
    std::fprintf(out, "  %-44s %10" PRId64 "  %s\n", label, value, note);
  };
  std::fprintf(out, "(8) liveness: bound %.0f ms = %s\n", ms(setup.bound_ns),
               setup.bound_text.c_str());
  row("waits measured", r.waits);
  row("  skipped (own process stopped, cut, killed)", r.waits_skipped);
  row("holds whose holder stopped, was cut, died", r.dead_holds);
  row("old-style client SET NX holds", r.outside_holds);
  row("longest stall inside one wait (ms)", r.longest_ns / 1'000'000,
      r.longest_ns > setup.bound_ns ? "FAIL" : "ok");
  if (r.longest_ns > 0) {
    std::fprintf(out, "    p%d/t%d wait [%.3f, %.3f] ms, stalled from %.3f ms\n",
                 r.longest_wait.process, r.longest_wait.thread, ms(r.longest_wait.t_try),
                 ms(r.longest_wait.t_end), ms(r.longest_from));
  }
  row("waits over the bound", r.over_bound, r.over_bound == 0 ? "ok" : "FAIL");
  row("most stalled time in one wait, summed (ms)", r.longest_total_ns / 1'000'000,
      "informational");
  row("longest wait, stalled or not (ms)", r.longest_wait_ns / 1'000'000, "informational");
  row("library holds inside an old client's hold", r.outside_overlaps,
      r.outside_overlaps == 0 ? "ok" : "FAIL");
}

std::string liveness_json(const Report& report) {
  if (!report.info.liveness.on) return "";
  const LivenessReport& r = report.liveness;
  return ",\"liveness\":{\"bound_ns\":" + std::to_string(report.info.liveness.bound_ns) +
         ",\"waits\":" + std::to_string(r.waits) +
         ",\"waits_skipped\":" + std::to_string(r.waits_skipped) +
         ",\"dead_holds\":" + std::to_string(r.dead_holds) +
         ",\"outside_holds\":" + std::to_string(r.outside_holds) +
         ",\"longest_stall_ns\":" + std::to_string(r.longest_ns) +
         ",\"longest_summed_ns\":" + std::to_string(r.longest_total_ns) +
         ",\"longest_wait_ns\":" + std::to_string(r.longest_wait_ns) +
         ",\"over_bound\":" + std::to_string(r.over_bound) +
         ",\"outside_overlaps\":" + std::to_string(r.outside_overlaps) + "}";
}

}  // namespace redlock::torture
