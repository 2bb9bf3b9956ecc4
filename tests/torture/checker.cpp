// tests/torture/checker.cpp: see checker.hpp.
#include "checker.hpp"

#include <algorithm>  // std::sort, std::max, std::min
#include <cinttypes>  // PRId64
#include <set>        // std::multiset

namespace redlock::torture {

namespace {

constexpr std::size_t kMaxExamples = 10;

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

// Two holds exclude each other: any two of one lock or election; a writer and anyone (rwlock);
// two that share a key (multilock).
bool conflict(const Hold& a, const Hold& b, Primitive primitive) {
  if (primitive == Primitive::rwlock) return !(a.shared && b.shared);
  if (primitive == Primitive::multilock) return (a.keys & b.keys) != 0;
  return true;
}

// (1): sweep the windows in start order, keeping those still open. A hold that starts inside an
// open window it conflicts with is a violation; the earliest such window names the incident.
void check_overlaps(const std::vector<const Hold*>& windows, Primitive primitive, Report& r) {
  std::vector<const Hold*> open;
  const Hold* last_incident = nullptr;
  for (const Hold* h : windows) {
    open.erase(std::remove_if(open.begin(), open.end(),
                              [h](const Hold* w) { return w->window_end() <= h->window_start(); }),
               open.end());
    const Hold* first = nullptr;
    for (const Hold* w : open) {
      if (conflict(*w, *h, primitive) && (first == nullptr || w->t_acq < first->t_acq)) first = w;
    }
    open.push_back(h);
    if (first == nullptr) continue;
    ++r.violations;
    if (first->write == WriteResult::rejected || h->write == WriteResult::rejected) {
      ++r.overlaps_caught;
    }
    if (first == last_incident) continue;
    last_incident = first;
    ++r.overlap_incidents;
    if (r.violation_examples.size() < kMaxExamples) {
      const std::int64_t overlap =
          std::min(first->window_end(), h->window_end()) - h->window_start();
      r.violation_examples.push_back(HoldPair{*first, *h, overlap});
    }
  }
}

// (5): a reader that asked well after a writer started waiting, and entered before it. A fault
// in force between the writer's request and the reader's entry excuses it (fault_windows.hpp).
// A thread's first hold is left out: its call first connected (a ZooKeeper session, the
// recipe's parent nodes), so when its request reached the store is not known.
void check_writer_preference(const std::vector<const Hold*>& windows,
                             const std::vector<FaultWindow>& faults, Report& r) {
  for (const Hold* w : windows) {
    if (w->shared || w->seq == 1) continue;
    if (w->t_acq > w->t_req + kPreferenceSlackNs && !fault_in(faults, w->t_req, w->t_acq)) {
      ++r.writer_waits_clear;
    }
    for (const Hold* reader : windows) {
      if (!reader->shared || reader->t_req <= w->t_req + kPreferenceSlackNs ||
          reader->t_acq >= w->t_acq) {
        continue;
      }
      if (fault_in(faults, w->t_req, reader->t_acq)) {
        ++r.writer_passes_in_faults;
        continue;
      }
      ++r.writer_passes;
      if (r.pass_examples.size() < kMaxExamples)
        r.pass_examples.push_back(HoldPair{*w, *reader, 0});
    }
  }
}

// (7): how long after is_leader() turned false the library stopped the worker.
void check_stops(const std::vector<Hold>& holds, Report& r) {
  for (const Hold& h : holds) {
    if (h.t_stop == 0) continue;
    ++r.stops;
    if (h.t_unled == 0) continue;
    const std::int64_t late = h.t_stop - h.t_unled;
    r.max_stop_late_ns = std::max(r.max_stop_late_ns, late);
    if (late > kStopSlackNs) ++r.late_stops;
  }
}

// (7): whether process p was paused at some time in [from, to].
bool paused_during(const RunInfo& info, int p, std::int64_t from, std::int64_t to) {
  const auto it = info.paused.find(p);
  if (it == info.paused.end()) return false;
  for (const auto& [stop, cont] : it->second) {
    if (stop <= to && (cont == 0 || cont >= from)) return true;
  }
  return false;
}

// (7): no term starts while an earlier term's worker still runs (see checker.hpp).
void check_runs(const std::vector<const Hold*>& windows, const RunInfo& info, Report& r) {
  std::vector<std::pair<const Hold*, std::int64_t>> running;  // hold, end of its run
  for (const Hold* h : windows) {
    std::int64_t end = h->end == EndKind::none ? h->window_end() : h->t_rel;
    if (paused_during(info, h->process, h->t_acq, end)) {
      ++r.paused_runs;
      end = h->window_end();
    }
    for (const auto& [w, w_end] : running) {
      if (w_end <= h->t_acq) continue;
      ++r.run_overlaps;
      r.max_run_overlap_ns = std::max(r.max_run_overlap_ns, w_end - h->t_acq);
      if (r.run_examples.size() < kMaxExamples) {
        r.run_examples.push_back(HoldPair{*w, *h, std::min(w_end, end) - h->t_acq});
      }
      break;
    }
    running.erase(std::remove_if(running.begin(), running.end(),
                                 [h](const auto& w) { return w.second <= h->t_acq; }),
                  running.end());
    running.emplace_back(h, end);
  }
}

// Fences must grow in hold order (see checker.hpp).
void check_fence_order_of_holds(const std::vector<const Hold*>& windows, Report& r) {
  for (std::size_t i = 1; i < windows.size(); ++i) {
    const Hold* a = windows[i - 1];
    const Hold* b = windows[i];
    if (b->fence <= a->fence) {
      ++r.fence_inversions;
      if (r.inversion_examples.size() < kMaxExamples) {
        r.inversion_examples.push_back(
            HoldPair{*a, *b, std::min(a->window_end(), b->window_end()) - b->window_start()});
      }
    }
  }
}

void check_store(const LogContents& logs, const StoreState& store, Report& r) {
  r.store_read = store.read;
  if (!store.read) {
    ++r.accounting_errors;
    r.accounting_notes.push_back("checker store could not be read: " + store.error);
    return;
  }
  r.counter = store.counter;
  r.shadow = store.shadow;
  r.applied_in_store = static_cast<std::int64_t>(store.applied.size());
  // (2) lost updates: each applied write wrote (value read) + 1; the counter only grows through
  // applied writes, so counter < applied writes means some write overwrote another's update.
  r.lost_updates = std::max<std::int64_t>(0, r.applied_in_store - r.counter);
  if (r.counter > r.applied_in_store) {
    ++r.accounting_errors;
    r.accounting_notes.push_back("counter " + std::to_string(r.counter) + " exceeds the " +
                                 std::to_string(r.applied_in_store) + " applied writes");
  }
  for (std::size_t i = 0; i < store.applied.size(); ++i) {
    if (store.applied[i].second != static_cast<std::int64_t>(i) + 1) ++r.value_breaks;
    // (3) fence order.
    if (i > 0 && store.applied[i].first <= store.applied[i - 1].first) {
      ++r.fence_order_violations;
    }
  }
  // Logs and store must agree on which fences were applied.
  if (r.applied != r.applied_in_store) {
    ++r.accounting_errors;
    r.accounting_notes.push_back("logs report " + std::to_string(r.applied) +
                                 " applied writes, the store lists " +
                                 std::to_string(r.applied_in_store));
  }
  std::multiset<std::uint64_t> logged;
  for (const Hold& h : logs.holds) {
    if (h.write == WriteResult::applied) logged.insert(h.fence);
  }
  std::int64_t unmatched = 0;
  for (const auto& [fence, value] : store.applied) {
    auto it = logged.find(fence);
    if (it == logged.end()) {
      ++unmatched;
    } else {
      logged.erase(it);
    }
  }
  if (unmatched > 0 || !logged.empty()) {
    ++r.accounting_errors;
    r.accounting_notes.push_back(
        std::to_string(unmatched) +
        " applied fences in the store have no applied write in the logs, " +
        std::to_string(logged.size()) + " logged ones are not in the store");
  }
  // The unfenced shadow counter: each write of it is (value read) + 1 as well.
  r.shadow_lost = std::max<std::int64_t>(0, r.reached_write - r.write_errors - r.shadow);
}

// Ends the open holds of processes killed on purpose at the moment they were dead for sure: a
// dead process acts no more. A fenced write it sent before dying may have been applied without
// its "write" line: the store's list says so (its fence is there).
LogContents with_kills(const LogContents& logs, const StoreState& store, const RunInfo& info) {
  LogContents out = logs;
  if (info.killed.empty()) return out;
  std::multiset<std::uint64_t> applied;
  for (const auto& entry : store.applied) applied.insert(entry.first);
  for (const Hold& h : logs.holds) {
    if (h.write == WriteResult::applied) {
      const auto it = applied.find(h.fence);
      if (it != applied.end()) applied.erase(it);
    }
  }
  for (Hold& h : out.holds) {
    const auto killed = info.killed.find(h.process);
    if (killed == info.killed.end() || !h.has_acq || h.end != EndKind::none) continue;
    h.end = EndKind::killed;
    h.t_rel = h.t_rel_end = killed->second;
    const auto it = applied.find(h.fence);
    if (h.write == WriteResult::none && it != applied.end()) {
      h.write = WriteResult::applied;
      applied.erase(it);
    }
  }
  return out;
}

}  // namespace

Report check(const LogContents& given, const StoreState& store, const RunInfo& info) {
  const LogContents logs = with_kills(given, store, info);
  Report r;
  r.info = info;
  r.malformed_lines = logs.malformed_lines + logs.duplicate_records;
  r.error_samples = logs.error_samples;

  std::vector<const Hold*> windows;
  for (const Hold& h : logs.holds) {
    if (!h.has_acq) {
      ++r.orphan_records;
      continue;
    }
    ++r.holds;
    // A reader before any writer reads generation 0; a hold whose validity was already 0 when
    // measured (an empty window: never used) may show a fence of 0 (a lost hold's fence()).
    if (h.fence == 0 && !h.shared && !h.window_empty()) ++r.zero_fences;
    switch (h.end) {
      case EndKind::released:
        ++r.released;
        break;
      case EndKind::lost:
        ++r.lost;
        break;
      case EndKind::error:
        ++r.release_errors;
        break;
      case EndKind::none:
        ++r.missing_end;
        break;
      case EndKind::killed:
        ++r.killed_holds;
        break;
    }
    switch (h.write) {
      case WriteResult::applied:
        ++r.applied;
        ++r.reached_write;
        break;
      case WriteResult::rejected:
        ++r.rejected;
        ++r.reached_write;
        break;
      case WriteResult::write_error:
        ++r.write_errors;
        ++r.reached_write;
        break;
      case WriteResult::read_error:
        ++r.read_errors;
        break;
      case WriteResult::none:
        break;
    }
    if (h.write == WriteResult::applied || h.write == WriteResult::rejected) {
      const bool late = h.t_write_end > h.window_end();
      if (late) {
        ++r.late_writes;
        if (h.write == WriteResult::applied) ++r.late_writes_applied;
      } else if (h.write == WriteResult::rejected) {
        ++r.rejected_in_window;
      }
    }
    if (h.window_empty()) {
      ++r.empty_windows;
    } else {
      windows.push_back(&h);
    }
  }
  std::sort(windows.begin(), windows.end(),
            [](const Hold* a, const Hold* b) { return a->window_start() < b->window_start(); });
  check_overlaps(windows, info.primitive, r);
  if (info.primitive == Primitive::rwlock) {
    check_writer_preference(windows, info.fault_windows, r);
    // Fences grow from writer to writer; a reader's is the generation it reads.
    windows.erase(
        std::remove_if(windows.begin(), windows.end(), [](const Hold* h) { return h->shared; }),
        windows.end());
  }
  if (info.fenced) check_fence_order_of_holds(windows, r);
  check_stops(logs.holds, r);
  if (info.primitive == Primitive::election) check_runs(windows, info, r);
  r.observer_reads = logs.observer_reads;
  r.partial_sets = logs.partial_sets;

  if (r.applied + r.rejected != r.reached_write) {
    ++r.accounting_errors;
    r.accounting_notes.push_back(std::to_string(r.write_errors) +
                                 " fenced writes ended in an unknown state (store error)");
  }
  check_store(logs, store, r);

  for (int p = 0; p < info.processes; ++p) {
    if (info.killed.count(p) != 0) continue;  // killed on purpose: no stats line
    auto it = logs.stats.find(p);
    if (it == logs.stats.end() || !it->second.present) {
      ++r.missing_stats;
      continue;
    }
    const WorkerStats& s = it->second;
    r.attempts += s.attempts;
    r.contended += s.contended;
    r.acquisition_errors += s.errors();
    r.errors_by_kind["timeout"] += s.err_timeout;
    r.errors_by_kind["connection"] += s.err_connection;
    r.errors_by_kind["server"] += s.err_server;
    r.errors_by_kind["protocol"] += s.err_protocol;
    r.errors_by_kind["other"] += s.err_other;
  }

  // Verdict. Always required: the bookkeeping that makes the proof complete, and fencing.
  auto require = [&r](bool ok, const std::string& what) {
    if (!ok) r.failures.push_back(what);
  };
  require(r.holds > 0, "no hold at all: the run proves nothing");
  require(r.lost_updates == 0 && r.value_breaks == 0,
          "lost updates: " + std::to_string(r.lost_updates) + " (value breaks " +
              std::to_string(r.value_breaks) + ")");
  require(r.fence_order_violations == 0,
          "fence order violations: " + std::to_string(r.fence_order_violations));
  require(r.missing_end == 0 && r.orphan_records == 0,
          "holds without end record: " + std::to_string(r.missing_end) +
              ", records without acquire: " + std::to_string(r.orphan_records));
  require(r.accounting_errors == 0, "accounting errors: " + std::to_string(r.accounting_errors));
  require(
      r.missing_stats == 0 && info.worker_failures.empty(),
      "workers that did not finish cleanly: " +
          std::to_string(r.missing_stats + static_cast<std::int64_t>(info.worker_failures.size())));
  require(r.malformed_lines == 0,
          "malformed or duplicate log records: " + std::to_string(r.malformed_lines));
  // Within the fault model the library itself must hold: exclusion and growing fences.
  if (info.unsafe == Unsafe::none && info.exclusion_enforced) {
    require(r.violations == 0, "mutual exclusion violations: " + std::to_string(r.violations));
    require(r.fence_inversions == 0, "fence inversions (fence not growing in hold order): " +
                                         std::to_string(r.fence_inversions));
    if (info.fenced) {
      require(r.zero_fences == 0, "holds without a fence: " + std::to_string(r.zero_fences));
    }
    require(r.partial_sets == 0, "observer reads that showed a MultiLock set partly held: " +
                                     std::to_string(r.partial_sets));
    require(r.run_overlaps == 0, "terms started while another term's worker still ran: " +
                                     std::to_string(r.run_overlaps));
    require(r.late_stops == 0,
            "worker stops later than " + std::to_string(kStopSlackNs / 1'000'000) +
                " ms after is_leader() turned false: " + std::to_string(r.late_stops));
    if (info.writer_preference_enforced) {
      require(r.writer_passes == 0,
              "readers that entered ahead of a waiting writer: " + std::to_string(r.writer_passes));
    }
  }
  if (info.liveness.on) check_liveness(logs, info, r);
  r.pass = r.failures.empty();
  return r;
}

void print_report(const Report& r, std::FILE* out) {
  const RunInfo& i = r.info;
  auto row = [out](const char* label, std::int64_t value, const char* note = "") {
    std::fprintf(out, "  %-44s %10" PRId64 "  %s\n", label, value, note);
  };
  auto check_row = [out](const char* label, std::int64_t value, bool enforced) {
    const char* verdict = value == 0 ? "ok" : (enforced ? "FAIL" : "seen (outside fault model)");
    std::fprintf(out, "  %-44s %10" PRId64 "  %s\n", label, value, verdict);
  };
  const bool model = i.unsafe == Unsafe::none && i.exclusion_enforced;
  std::fprintf(out,
               "\nredlock-torture: mode=%s primitive=%s unsafe=%s duration=%s processes=%d "
               "threads=%d nodes=%d ttl=%dms seed=%" PRIu64 "\n",
               to_string(i.mode), to_string(i.primitive), to_string(i.unsafe),
               format_duration(std::chrono::milliseconds(i.duration_ms)).c_str(), i.processes,
               i.threads, i.nodes, i.ttl_ms, i.seed);
  for (const std::string& n : i.notes) std::fprintf(out, "  note: %s\n", n.c_str());
  std::fprintf(out, "holds\n");
  row("holds", r.holds);
  row("  released (release() true)", r.released);
  row("  lost (release() false: library said so)", r.lost);
  row("  error (release() threw)", r.release_errors);
  row("  empty window (validity 0 when measured)", r.empty_windows);
  std::fprintf(out, "acquisition\n");
  row("try_lock_for calls", r.attempts);
  row("  contended (bound reached)", r.contended);
  row("  acquisition errors (redlock::Error)", r.acquisition_errors);
  for (const auto& [kind, n] : r.errors_by_kind) {
    if (n > 0) row(("    " + kind).c_str(), n);
  }
  for (const auto& [message, n] : r.error_samples) {
    std::fprintf(out, "    %6" PRId64 " x %s\n", n, message.substr(0, 160).c_str());
  }
  std::fprintf(out, "fenced read-sleep-write on the checker store\n");
  row("holds that reached the write", r.reached_write);
  row("  applied", r.applied);
  row("  rejected by fencing", r.rejected);
  row("    rejected although inside the window", r.rejected_in_window);
  row("  write errors (unknown outcome)", r.write_errors);
  row("read errors (write skipped)", r.read_errors);
  row("late writes (after the window ended)", r.late_writes);
  row("  late writes applied", r.late_writes_applied);
  row("final counter", r.counter);
  row("applied writes in the store list", r.applied_in_store);
  row("unfenced shadow counter", r.shadow);
  row("  shadow updates lost (no fencing)", r.shadow_lost, "informational");
  std::fprintf(out, "faults injected\n");
  std::int64_t total_faults = 0;
  for (const auto& [kind, n] : i.faults) {
    row(("  " + kind).c_str(), n);
    total_faults += n;
  }
  row("  total", total_faults);
  std::fprintf(out, "checks\n");
  check_row("(1) mutual exclusion violations", r.violations, model);
  if (r.violations > 0) {
    row("    incidents (distinct holders overrun)", r.overlap_incidents);
    row("    overlaps where fencing rejected a write", r.overlaps_caught);
  }
  check_row("(2) lost updates", r.lost_updates + r.value_breaks, true);
  check_row("(2) accounting errors", r.accounting_errors, true);
  check_row("(3) fence order violations", r.fence_order_violations, true);
  check_row("(4) holds without end record", r.missing_end + r.orphan_records, true);
  if (!i.killed.empty()) row("    holders killed mid-hold", r.killed_holds);
  check_row("    workers without stats", r.missing_stats, true);
  check_row("    malformed log records", r.malformed_lines, true);
  check_row("fence inversions in hold order", r.fence_inversions, model);
  check_row("holds without fence", r.zero_fences, model && i.fenced);
  if (i.primitive == Primitive::rwlock) {
    row("(5) writers that waited, no fault in force", r.writer_waits_clear);
    check_row("    readers ahead of such a waiting writer", r.writer_passes,
              model && i.writer_preference_enforced);
    row("    readers ahead of one, a fault in force", r.writer_passes_in_faults, "excused");
  }
  if (i.primitive == Primitive::multilock) {
    row("(6) observer reads of every key", r.observer_reads);
    check_row("    reads showing a set partly held", r.partial_sets, model);
  }
  if (i.primitive == Primitive::election) {
    row("(7) terms stopped by the library", r.stops);
    check_row("    stops late after is_leader() turned false", r.late_stops, model);
    row("    latest stop after is_leader() false (us)", r.max_stop_late_ns / 1000);
    check_row("    terms started while a worker still ran", r.run_overlaps, model);
    row("    longest such overlap (us)", r.max_run_overlap_ns / 1000);
    row("    terms whose process was paused (SIGSTOP)", r.paused_runs);
  }
  print_liveness(r, out);
  for (const std::string& note : r.accounting_notes)
    std::fprintf(out, "  note: %s\n", note.c_str());
  for (const std::string& f : i.worker_failures) std::fprintf(out, "  worker: %s\n", f.c_str());
  auto print_pairs = [out](const char* title, const std::vector<HoldPair>& pairs) {
    if (pairs.empty()) return;
    std::fprintf(out, "%s (first %zu)\n", title, pairs.size());
    for (const HoldPair& p : pairs) {
      for (const Hold* h : {&p.first, &p.second}) {
        std::fprintf(
            out, "    %-28s window [%.3f, %.3f] ms  validity %" PRId64 " ms  write %s  end %s\n",
            h->name().c_str(), ms(h->window_start()), ms(h->window_end()), h->validity_ms,
            to_string(h->write), to_string(h->end));
      }
      std::fprintf(out, "    -> overlap %.3f ms\n", ms(p.overlap_ns));
    }
  };
  print_pairs("overlapping holds, one pair per incident", r.violation_examples);
  print_pairs("fence inversions", r.inversion_examples);
  print_pairs("terms started while a worker still ran (its window shown)", r.run_examples);
  print_pairs("readers ahead of a waiting writer (writer, reader)", r.pass_examples);
  std::fprintf(out,
               "summary: holds = %" PRId64 ", violations = %" PRId64 ", lost updates = %" PRId64
               ", fence order violations = %" PRId64 ", acquisition errors = %" PRId64 "\n",
               r.holds, r.violations, r.lost_updates + r.value_breaks, r.fence_order_violations,
               r.acquisition_errors);
  if (r.pass) {
    std::fprintf(out, "RESULT: PASS%s\n",
                 model ? "" : " (fencing held; overlaps above are the expected damage)");
  } else {
    std::fprintf(out, "RESULT: FAIL\n");
    for (const std::string& f : r.failures) std::fprintf(out, "  - %s\n", f.c_str());
  }
  std::fflush(out);
}

std::string to_json(const Report& r) {
  const RunInfo& i = r.info;
  std::string j = "{";
  auto num = [&j](const char* key, std::int64_t v) {
    if (j.size() > 1) j += ",";
    j += "\"" + std::string(key) + "\":" + std::to_string(v);
  };
  auto str = [&j](const char* key, const std::string& v) {
    if (j.size() > 1) j += ",";
    j += "\"" + std::string(key) + "\":" + json_string(v);
  };
  str("mode", to_string(i.mode));
  str("primitive", to_string(i.primitive));
  str("unsafe", to_string(i.unsafe));
  num("duration_ms", i.duration_ms);
  num("processes", i.processes);
  num("threads", i.threads);
  num("nodes", i.nodes);
  num("ttl_ms", i.ttl_ms);
  j += ",\"seed\":" + std::to_string(i.seed);
  num("holds", r.holds);
  j += ",\"holds_by_end\":{\"released\":" + std::to_string(r.released) +
       ",\"lost\":" + std::to_string(r.lost) + ",\"error\":" + std::to_string(r.release_errors) +
       ",\"none\":" + std::to_string(r.missing_end) +
       ",\"killed\":" + std::to_string(r.killed_holds) + "}";
  num("empty_windows", r.empty_windows);
  num("attempts", r.attempts);
  num("contended", r.contended);
  num("acquisition_errors", r.acquisition_errors);
  auto counts = [&j](const char* name, const std::map<std::string, std::int64_t>& m) {
    j += std::string(",\"") + name + "\":{";
    for (const auto& [kind, n] : m)
      j += (j.back() == '{' ? "" : ",") + json_string(kind) + ":" + std::to_string(n);
    j += "}";
  };
  counts("acquisition_errors_by_kind", r.errors_by_kind);
  counts("faults", i.faults);
  num("reached_write", r.reached_write);
  num("applied", r.applied);
  num("rejected", r.rejected);
  num("rejected_in_window", r.rejected_in_window);
  num("write_errors", r.write_errors);
  num("read_errors", r.read_errors);
  num("late_writes", r.late_writes);
  num("late_writes_applied", r.late_writes_applied);
  num("writer_passes", r.writer_passes);
  num("writer_passes_in_faults", r.writer_passes_in_faults);
  num("writer_waits_clear", r.writer_waits_clear);
  num("observer_reads", r.observer_reads);
  num("partial_sets", r.partial_sets);
  num("stops", r.stops);
  num("late_stops", r.late_stops);
  num("max_stop_late_ns", r.max_stop_late_ns);
  num("run_overlaps", r.run_overlaps);
  num("max_run_overlap_ns", r.max_run_overlap_ns);
  num("paused_runs", r.paused_runs);
  num("counter", r.counter);
  num("applied_in_store", r.applied_in_store);
  num("shadow", r.shadow);
  num("shadow_lost", r.shadow_lost);
  num("violations", r.violations);
  num("overlap_incidents", r.overlap_incidents);
  num("overlaps_caught_by_fencing", r.overlaps_caught);
  num("lost_updates", r.lost_updates + r.value_breaks);
  num("accounting_errors", r.accounting_errors);
  num("fence_order_violations", r.fence_order_violations);
  num("missing_end_records", r.missing_end + r.orphan_records);
  num("missing_worker_stats", r.missing_stats);
  num("malformed_records", r.malformed_lines);
  num("fence_inversions", r.fence_inversions);
  num("zero_fences", r.zero_fences);
  num("worker_failures", static_cast<std::int64_t>(i.worker_failures.size()));
  j += liveness_json(r) + ",\"pass\":" + (r.pass ? "true" : "false");
  return j + "}";
}

}  // namespace redlock::torture
