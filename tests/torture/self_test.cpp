// tests/torture/self_test.cpp: see self_test.hpp.
#include "self_test.hpp"

#include <algorithm>  // std::sort
#include <cstdio>     // std::printf
#include <exception>  // std::exception
#include <string>     // std::string
#include <vector>     // std::vector

#include "checker.hpp"
#include "common.hpp"
#include "hold_log.hpp"
#include "support/redis_server.hpp"

namespace redlock::torture {

namespace {

constexpr std::int64_t kMs = 1'000'000;

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("  %-4s %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

// A complete hold: acquired at `start` ms with `validity` ms, applied write, released at `rel` ms.
Hold hold(int p, int t, std::int64_t n, std::uint64_t fence, std::int64_t start,
          std::int64_t validity, std::int64_t rel, WriteResult write = WriteResult::applied) {
  Hold h;
  h.process = p;
  h.thread = t;
  h.seq = n;
  h.has_acq = true;
  h.fence = fence;
  h.t_acq = start * kMs;
  h.deadline = (start + validity) * kMs;
  h.validity_ms = validity;
  h.write = write;
  h.t_read = h.t_acq + kMs / 10;
  h.t_write_end = rel * kMs - kMs / 10;
  h.end = EndKind::released;
  h.t_rel = rel * kMs;
  h.t_rel_end = h.t_rel + kMs / 10;
  h.deadline_final = h.deadline;
  return h;
}

struct Case {
  LogContents logs;
  StoreState store;
  RunInfo info;
};

// Two workers with stats, a store that matches the applied writes of `holds` in fence order.
Case make_case(std::vector<Hold> holds, Unsafe unsafe = Unsafe::none) {
  Case c;
  c.info.processes = 2;
  c.info.threads = 1;
  c.info.unsafe = unsafe;
  for (int p = 0; p < 2; ++p) {
    WorkerStats s;
    s.process = p;
    s.present = true;
    c.logs.stats[p] = s;
  }
  c.logs.holds = std::move(holds);
  std::vector<std::uint64_t> fences;
  for (const Hold& h : c.logs.holds) {
    if (h.write == WriteResult::applied) fences.push_back(h.fence);
  }
  std::sort(fences.begin(), fences.end());
  c.store.read = true;
  for (std::size_t i = 0; i < fences.size(); ++i) {
    c.store.applied.emplace_back(fences[i], static_cast<std::int64_t>(i) + 1);
  }
  c.store.counter = static_cast<std::int64_t>(fences.size());
  c.store.shadow = c.store.counter;
  return c;
}

Report run(const Case& c) { return check(c.logs, c.store, c.info); }

void checker_cases() {
  std::printf("checker verdicts on synthetic histories\n");
  {
    const Report r = run(make_case({hold(0, 0, 1, 1, 0, 990, 10), hold(1, 0, 1, 2, 20, 990, 30),
                                    hold(0, 0, 2, 3, 40, 990, 50)}));
    expect(r.pass && r.violations == 0 && r.holds == 3, "clean history passes");
  }
  {
    // B acquires at 500 ms while A (validity to 990 ms) has not started its release (600 ms).
    const Report r =
        run(make_case({hold(0, 0, 1, 1, 0, 990, 600), hold(1, 0, 1, 2, 500, 990, 510)}));
    expect(!r.pass && r.violations == 1 && r.violation_examples.size() == 1,
           "overlapping windows are a violation");
  }
  {
    // Same, but A's release started (at 400 ms) before B acquired: its window ended there.
    const Report r =
        run(make_case({hold(0, 0, 1, 1, 0, 990, 400), hold(1, 0, 1, 2, 500, 990, 510)}));
    expect(r.pass && r.violations == 0, "the window ends at the release start");
  }
  {
    // A's validity ended at 300 ms; its late release (at 600) does not extend the window.
    const Report r = run(make_case(
        {hold(0, 0, 1, 1, 0, 300, 600, WriteResult::rejected), hold(1, 0, 1, 2, 500, 990, 510)}));
    expect(r.pass && r.violations == 0 && r.late_writes == 1,
           "the window ends at the validity deadline; a late write is counted, not a violation");
  }
  {
    // One long hold overrun by three later ones: three violations, one incident.
    const Report r = run(make_case(
        {hold(0, 0, 1, 1, 0, 990, 900, WriteResult::rejected), hold(1, 0, 1, 2, 500, 990, 510),
         hold(1, 0, 2, 3, 600, 990, 610), hold(1, 0, 3, 4, 700, 990, 710)}));
    expect(!r.pass && r.violations == 3 && r.overlap_incidents == 1 &&
               r.violation_examples.size() == 1,
           "holds overrunning one long hold: one incident, one example");
  }
  {
    // Hold ordering: later hold, lower fence, windows apart.
    const Report r = run(make_case({hold(0, 0, 1, 7, 0, 990, 10), hold(1, 0, 1, 5, 20, 990, 30)}));
    expect(!r.pass && r.fence_inversions == 1, "a fence that does not grow in hold order fails");
  }
  {
    Case c = make_case({hold(0, 0, 1, 1, 0, 990, 10), hold(1, 0, 1, 2, 20, 990, 30)});
    c.store.counter = 1;  // two applied writes, the counter says one
    c.store.applied[1].second = 1;
    const Report r = run(c);
    expect(!r.pass && r.lost_updates == 1, "a lost update fails");
  }
  {
    Case c = make_case({hold(0, 0, 1, 1, 0, 990, 10), hold(1, 0, 1, 2, 20, 990, 30)});
    std::swap(c.store.applied[0].first, c.store.applied[1].first);
    const Report r = run(c);
    expect(!r.pass && r.fence_order_violations == 1, "fences applied out of order fail");
  }
  {
    Case c = make_case({hold(0, 0, 1, 1, 0, 990, 10), hold(1, 0, 1, 2, 20, 990, 30)});
    c.logs.holds[1].end = EndKind::none;
    const Report r = run(c);
    expect(!r.pass && r.missing_end == 1, "a hold without an end record fails");
  }
  {
    // A worker killed on purpose at 400 ms mid-hold (no end, no stats): its window ends at the
    // kill, and its write applied without a log line is its own.
    Case c = make_case({hold(0, 0, 1, 1, 0, 990, 10), hold(1, 0, 1, 2, 20, 990, 30),
                        hold(0, 0, 2, 3, 40, 990, 50)});
    c.logs.holds[2].end = EndKind::none;
    c.logs.holds[2].write = WriteResult::none;  // applied in the store, its line never written
    c.logs.stats.erase(0);
    c.info.killed[0] = 400 * kMs;
    c.logs.holds.push_back(hold(1, 0, 2, 4, 500, 990, 510));
    c.store.applied.emplace_back(4, 4);
    c.store.counter = c.store.shadow = 4;
    const Report r = run(c);
    expect(r.pass && r.killed_holds == 1 && r.violations == 0,
           "a killed holder's hold ends at its death; its unlogged write is accounted");
    // The next holder inside the killed one's life is still a violation.
    c.logs.holds[3] = hold(1, 0, 2, 4, 300, 990, 310);
    const Report v = run(c);
    expect(!v.pass && v.violations == 1, "a hold granted before the killed holder died fails");
  }
  {
    Case c = make_case({hold(0, 0, 1, 1, 0, 990, 10)});
    c.logs.stats.erase(1);
    const Report r = run(c);
    expect(!r.pass && r.missing_stats == 1, "a worker without stats (crashed) fails");
  }
  {
    Case c = make_case({hold(0, 0, 1, 1, 0, 990, 10), hold(1, 0, 1, 2, 20, 990, 30)});
    c.logs.holds[1].write = WriteResult::write_error;
    c.store.applied.pop_back();
    c.store.counter = 1;
    const Report r = run(c);
    expect(!r.pass && r.accounting_errors > 0, "a write with an unknown outcome fails");
  }
  {
    // Unsafe mode: an overlap whose stale write fencing rejected passes (fencing held) ...
    const Report r = run(make_case(
        {hold(0, 0, 1, 1, 0, 990, 600, WriteResult::rejected), hold(1, 0, 1, 2, 500, 990, 510)},
        Unsafe::clock));
    expect(r.pass && r.violations == 1 && r.overlaps_caught == 1 && r.overlap_incidents == 1,
           "unsafe mode: an overlap caught by fencing passes and is reported");
    // ... but not in the fault model.
    const Report m = run(make_case(
        {hold(0, 0, 1, 1, 0, 990, 600, WriteResult::rejected), hold(1, 0, 1, 2, 500, 990, 510)}));
    expect(!m.pass, "the same history fails in the fault model");
  }
  {
    Case c = make_case({hold(0, 0, 1, 1, 0, 990, 10)}, Unsafe::restart);
    c.store.counter = 0;
    const Report r = run(c);
    expect(!r.pass, "unsafe mode: a lost update still fails");
  }
  {
    const Report r = run(make_case({}));
    expect(!r.pass, "a run without holds fails");
  }
}

// --primitive rwlock|multilock|election: the same checker with each primitive's rule; a seeded
// violation of each must fail the run.
void primitive_cases() {
  std::printf("the primitives' checks (--primitive)\n");
  const auto reader = [](int p, std::int64_t n, std::int64_t start, std::int64_t rel) {
    Hold h = hold(p, 1, n, 1, start, 990, rel, WriteResult::none);
    h.shared = true;
    h.t_req = h.t_acq;
    return h;
  };
  {
    Case c =
        make_case({hold(0, 0, 1, 1, 0, 990, 100), reader(1, 1, 200, 600), reader(0, 2, 300, 700)});
    c.info.primitive = Primitive::rwlock;
    expect(run(c).pass, "rwlock: readers overlapping readers pass");
    c.logs.holds.push_back(reader(1, 3, 50, 60));  // a reader inside the writer's window
    const Report r = run(c);
    expect(!r.pass && r.violations == 1, "rwlock: a reader inside a writer's window fails");
  }
  {
    Hold writer = hold(0, 0, 2, 1, 500, 990, 510);  // its thread's 2nd hold (the 1st connects)
    writer.t_req = 100 * kMs;                       // waiting since 100 ms
    Hold late = reader(1, 1, 300, 400);             // asked at 300 ms, entered before the writer
    late.t_req = 300 * kMs;
    Case c = make_case({writer, late});
    c.info.primitive = Primitive::rwlock;
    const Report r = run(c);
    expect(!r.pass && r.writer_passes == 1, "rwlock: a reader passing a waiting writer fails");
    c.info.fault_windows = parse_fault_windows(
        "200000000 inject pause node 0\n250000000 healing pause\n260000000 heal pause\n");
    const Report excused = run(c);
    expect(excused.pass && excused.writer_passes == 0 && excused.writer_passes_in_faults == 1,
           "rwlock: a pass with a store fault in force between the two is excused");
    c.info.fault_windows = parse_fault_windows(
        "50000000 SIGSTOP of the server\n"
        "90000000 SIGCONT of the server\n"
        "450000000 slot 1 migrated\n");
    expect(!run(c).pass, "rwlock: faults outside the writer's wait excuse nothing");
    c.info.fault_windows.clear();
    c.logs.holds[0].seq = 1;
    expect(run(c).pass, "rwlock: a thread's first hold (its call connected first) is not judged");
    c.logs.holds[0].seq = 2;
    c.info.writer_preference_enforced = false;
    expect(run(c).pass, "rwlock on a quorum: a pass is reported, not a failure");
  }
  {
    Hold a = hold(0, 0, 1, 1, 0, 990, 600, WriteResult::none);
    a.keys = 0b0111;
    Hold b = hold(1, 0, 1, 1, 100, 990, 200, WriteResult::none);
    b.keys = 0b1000;
    Case c = make_case({a, b});
    c.info.primitive = Primitive::multilock;
    c.info.fenced = false;
    expect(run(c).pass, "multilock: disjoint sets hold at once");
    c.logs.holds[1].keys = 0b1100;  // shares key 2
    expect(!run(c).pass, "multilock: sets sharing a key overlapping fail");
    c.logs.holds[1].keys = 0b1000;
    c.logs.partial_sets = 1;
    expect(!run(c).pass, "multilock: a partly held set seen by the observer fails");
  }
  // Term 1 of process 0, from 0 ms, believed valid for `validity` ms, lost (is_leader() false
  // at `unled`, stopped at `stop`, its window ending there), then term 2 from `next` ms.
  const auto two_terms = [](std::int64_t validity, std::int64_t unled, std::int64_t stop,
                            std::int64_t next) {
    Hold term = hold(0, 0, 1, 1, 0, validity, stop);
    term.end = EndKind::lost;
    term.t_unled = unled * kMs;
    term.t_stop = stop * kMs;
    Case c = make_case({term, hold(1, 0, 1, 2, next, 990, next + 100)});
    c.info.primitive = Primitive::election;
    return c;
  };
  {
    Case c = two_terms(990, 400, 420, 600);
    Report r = run(c);
    expect(r.pass && r.stops == 1, "election: a stop 20 ms after is_leader() false passes");
    c.logs.holds[0].t_stop = 560 * kMs;
    r = run(c);
    expect(!r.pass && r.late_stops == 1, "election: a stop 160 ms late fails");
    c.logs.holds[0].t_stop = 420 * kMs;
    c.logs.holds[1].fence = 1;  // a term that did not grow
    expect(!run(c).pass, "election: a term that does not grow fails");
  }
  {
    // Term 1 believed valid until 600 ms, but its worker ran until 700 ms (its stop), and
    // term 2 started at 650 ms: the windows do not overlap, the runs do.
    Case c = two_terms(600, 690, 700, 650);
    Report r = run(c);
    expect(!r.pass && r.violations == 0 && r.run_overlaps == 1,
           "election: a term started while the last term's worker still ran fails");
    // The same worker SIGSTOPped from 300 to 680 ms: it did nothing while stopped, and after
    // SIGCONT it was outside the term it believed in (fencing's part).
    c.info.paused[0] = {{300 * kMs, 680 * kMs}};
    r = run(c);
    expect(r.pass && r.paused_runs == 1,
           "election: a paused worker's run counts up to its believed deadline");
  }
}

// --liveness, check (8): a wait stalled longer than the bound while the lock was free or held by
// a dead lease fails; time held by a live holder, or by the old-style client, does not count.
void liveness_cases() {
  std::printf("liveness (--liveness)\n");
  const auto wait = [](int p, std::int64_t from, std::int64_t to) {
    Wait w;
    w.process = p;
    w.t_try = from * kMs;
    w.t_end = to * kMs;
    return w;
  };
  // p0 holds from 300 ms (valid to 1290 ms, released at 2500 ms); p1 waits from 305 ms and is
  // served at 2600 ms. Bound 2000 ms.
  Case c = make_case({hold(0, 0, 1, 1, 0, 990, 100),
                      hold(0, 0, 2, 2, 300, 990, 2500, WriteResult::rejected),
                      hold(1, 0, 1, 3, 2600, 990, 2700)});
  c.logs.holds[1].end = EndKind::lost;
  c.logs.waits = {wait(1, 50, 2600)};
  c.info.liveness.on = true;
  c.info.liveness.bound_ns = 2000 * kMs;
  Report r = run(c);
  expect(r.pass && r.liveness.waits == 1 && r.liveness.longest_ns == 1310 * kMs,
         "liveness: a stall after a live holder's lease (1310 ms) passes");
  c.info.paused[0] = {{310 * kMs, 2400 * kMs}};
  r = run(c);
  expect(!r.pass && r.liveness.over_bound == 1 && r.liveness.longest_ns == 2290 * kMs &&
             r.liveness.dead_holds == 1,
         "liveness: the holder stopped at 310 ms, the waiter served at 2600 ms fails");
  c.info.paused.clear();
  c.info.killed[0] = 310 * kMs;
  c.logs.holds[1].end = EndKind::none;  // killed mid-hold: no end record, no stats
  c.logs.stats.erase(0);
  r = run(c);
  expect(!r.pass && r.liveness.over_bound == 1, "liveness: the holder killed at 310 ms fails");
  c.info.liveness.outside = {{OutsideHold{400 * kMs, 2000 * kMs, 410 * kMs, 1990 * kMs}}};
  r = run(c);
  expect(r.pass && r.liveness.longest_ns == 600 * kMs,
         "liveness: an old-style client's SET NX hold counts as held");
  c.info.liveness.partitioned[1] = {{1000 * kMs, 1200 * kMs}};
  c.info.liveness.outside.clear();
  r = run(c);
  expect(!r.pass && r.liveness.waits == 0 && r.liveness.waits_skipped == 1,
         "liveness: a wait of a process cut off meanwhile is skipped (none left: fails)");
  c.info.liveness.partitioned.clear();
  c.info.liveness.outside = {{OutsideHold{2550 * kMs, 2650 * kMs, 2560 * kMs, 2640 * kMs}}};
  r = run(c);
  expect(!r.pass && r.liveness.outside_overlaps == 1,
         "liveness: a library hold inside an old-style client's hold fails");
}

void parser_cases() {
  std::printf("hold log parser\n");
  LogContents logs;
  parse_log_text(
      "start p=0 pid=1 threads=1\n"
      "acq p=0 t=0 n=1 fence=5 t_acq=100 deadline=900 validity_ms=0\n"
      "write p=0 t=0 n=1 result=applied t_read=110 t_write_end=120 value=1\n"
      "end p=0 t=0 n=1 kind=lost t_rel=130 t_rel_end=140 deadline=950\n"
      "acq p=0 t=0 n=2 fence=6 t_acq=200 deadline=800 validity_ms=0\n"
      "stats p=0 pid=1 attempts=2 acquired=2 contended=0 err_timeout=1\n"
      "try p=0 t=0 t_try=300\n"
      "wait p=0 t=0 t_try=300 t_end=400 result=contended\n"
      "garbage here\n",
      logs);
  finish_log_contents(logs);
  expect(logs.holds.size() == 2, "two holds parsed");
  expect(logs.holds.size() == 2 && logs.holds[0].end == EndKind::lost &&
             logs.holds[0].deadline_final == 950 && logs.holds[0].window_end() == 130,
         "end record: kind, deadline, window end = release start");
  expect(logs.holds.size() == 2 && logs.holds[1].end == EndKind::none &&
             logs.holds[1].window_end() == 800,
         "a hold without end keeps its validity deadline as window end");
  expect(logs.stats.count(0) == 1 && logs.stats[0].err_timeout == 1, "stats parsed");
  expect(logs.malformed_lines == 1, "a malformed line is counted");
  expect(logs.waits.size() == 1 && logs.waits[0].t_end == 400 &&
             logs.waits[0].result == Wait::Result::contended,
         "a wait record parsed, its try record skipped");
}

void store_cases() {
  std::printf("fenced scripts on a real redis-server\n");
  try {
    test::RedisServer server;
    auto read = [&](std::uint64_t fence) {
      return server.raw({"EVAL", kFencedReadLua, "3", kCounterKey, kShadowKey, kMaxSeenKey,
                         std::to_string(fence)});
    };
    auto write = [&](std::uint64_t fence, std::int64_t value) {
      return server
          .raw({"EVAL", kFencedWriteLua, "5", kCounterKey, kShadowKey, kLastAppliedKey, kMaxSeenKey,
                kAppliedListKey, std::to_string(fence), std::to_string(value),
                std::to_string(value)})
          .integer();
    };
    // A (fence 10) and B (fence 11) overlap: A reads, B reads, A writes, B writes.
    const Reply a = read(10);
    const Reply b = read(11);
    expect(a.elements().size() == 2 && a.elements()[0].integer() == 0, "A reads 0");
    expect(b.elements().size() == 2 && b.elements()[0].integer() == 0, "B reads 0");
    expect(write(10, 1) == 0, "A's write (fence 10 < seen 11) is rejected");
    expect(write(11, 1) == 1, "B's write (fence 11) is applied");
    expect(write(11, 2) == 0, "a second write with the same fence is rejected");
    read(9);
    expect(write(9, 2) == 0, "an older fence is rejected after a newer one applied");
    const Reply counter = server.raw({"GET", kCounterKey});
    const Reply list = server.raw({"LRANGE", kAppliedListKey, "0", "-1"});
    expect(
        counter.str() == "1" && list.elements().size() == 1 && list.elements()[0].str() == "11:1",
        "counter 1, applied list [11:1]");
    const Reply shadow = server.raw({"GET", kShadowKey});
    expect(shadow.str() == "2", "the unfenced shadow took every write (lost updates)");
  } catch (const std::exception& e) {
    expect(false, std::string("redis-server: ") + e.what());
  }
}

void duration_cases() {
  std::printf("durations\n");
  expect(parse_duration("500ms") == std::chrono::milliseconds(500), "500ms");
  expect(parse_duration("30s") == std::chrono::seconds(30), "30s");
  expect(parse_duration("2m") == std::chrono::minutes(2), "2m");
  expect(parse_duration("60") == std::chrono::seconds(60), "60 (seconds)");
  expect(!parse_duration("") && !parse_duration("s") && !parse_duration("5x") &&
             !parse_duration("-5s") && !parse_duration("99999h"),
         "malformed durations are refused");
  expect(format_duration(std::chrono::minutes(30)) == "30m" &&
             format_duration(std::chrono::milliseconds(1500)) == "1500ms",
         "format_duration");
}

}  // namespace

int run_self_test() {
  checker_cases();
  primitive_cases();
  liveness_cases();
  parser_cases();
  duration_cases();
  store_cases();
  std::printf("%s (%d failure%s)\n", g_failures == 0 ? "SELF-TEST PASS" : "SELF-TEST FAIL",
              g_failures, g_failures == 1 ? "" : "s");
  return g_failures == 0 ? 0 : 1;
}

}  // namespace redlock::torture
