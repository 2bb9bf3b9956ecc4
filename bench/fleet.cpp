// bench/fleet.cpp: section 12, a fleet of processes on one key (issue #32's performance section).
//
// For N = 8, 32, 128 and 512 (--fleet-sizes), N forked processes, each with its own Client and
// lock on one key, loop try_lock_until(the window's end) / hold 1 ms / unlock() for a warm-up of
// 1 s (not counted: every process meets contention, subscribes and queues once) and a window of
// 4 s (--fleet-seconds), against redis-servers this section starts. Rows: the default Lock options,
// fair = false, fair = true, a Redlock over 3 servers, a Semaphore(2) on one server with the
// default options (its permits' fair wake-one queue) and with fair = false (a release wakes every
// waiter), postgres::Lock and zookeeper::Lock
// (fleet_peers.cpp), and node-redlock and redis-py at N = 32 (their harnesses in bench/). Per row:
// acquisitions/s; server commands per acquisition (INFO commandstats delta: every call, those
// run inside scripts included, but INFO's); client commands per acquisition (the RESP commands
// the workers wrote, counted in the workers: sent_commands.hpp); per-process min/max
// acquisitions; the longest single wait; Redis's CPU per acquisition (INFO cpu delta). Then the
// goals of #32 for the default Lock and the default Semaphore(2), as ratios to their first
// (smallest) N of the same run.
#include <algorithm>   // std::max
#include <chrono>      // std::chrono::seconds
#include <cstddef>     // std::size_t
#include <functional>  // std::function
#include <iostream>    // std::cout
#include <memory>      // std::make_shared
#include <string>      // std::string
#include <utility>     // std::move
#include <vector>      // std::vector

#include <fmt/format.h>

#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "fleet.hpp"
#include "raw.hpp"
#include "support/redis_server.hpp"

namespace bench {

FleetRow measured_row(const std::string& variant, int processes,
                      const std::function<FleetResult()>& run) {
  std::cout << "  running " << variant << ", N = " << processes << " ...\n";
  std::cout.flush();
  FleetRow row{variant, FleetResult{}, ""};
  row.result.processes = processes;
  try {
    row.result = run();
  } catch (const std::exception& e) {
    row.result.error = e.what();
  }
  return row;
}

SampleServer redis_sampler(std::vector<redisContext*> admins) {
  return [admins] {
    ServerSample s;
    s.cpu_us = 0;
    for (redisContext* c : admins) {
      double calls = 0;
      for (const auto& [name, n] : command_calls(c)) {
        if (name != "info") calls += static_cast<double>(n);
      }
      s.commands.push_back(calls);
      const std::string sys = info_field(c, "cpu", "used_cpu_sys");
      const std::string user = info_field(c, "cpu", "used_cpu_user");
      s.cpu_us += (std::stod(sys.empty() ? "0" : sys) + std::stod(user.empty() ? "0" : user)) * 1e6;
    }
    return s;
  };
}

namespace {

// What the workers of a row build: a Lock or a Semaphore on the first server, or a Redlock over
// the 3 servers.
enum class Kind { lock, redlock, semaphore };

// The permits of the Semaphore rows.
constexpr std::size_t kPermits = 2;
const char* const kDefaultSemaphore = "Semaphore(2), default options";

struct Variant {
  std::string name;
  redlock::LockOptions options;
  Kind kind{Kind::lock};
};

std::vector<Variant> variants() {
  redlock::LockOptions unfair;
  unfair.fair = false;
  redlock::LockOptions fair;
  fair.fair = true;
  return {{"default Lock", redlock::LockOptions{}, Kind::lock},
          {"fair = false", unfair, Kind::lock},
          {"fair = true", fair, Kind::lock},
          {"Redlock(3), default options", redlock::LockOptions{}, Kind::redlock},
          {kDefaultSemaphore, redlock::LockOptions{}, Kind::semaphore},
          {"Semaphore(2), fair = false", unfair, Kind::semaphore}};
}

MakeWorkerLock redis_maker(const std::vector<redlock::Endpoint>& endpoints, const Variant& v,
                           const std::string& key) {
  return [endpoints, v, key] {
    auto clients = std::make_shared<std::vector<redlock::Client>>();
    WorkerLock w;
    if (v.kind == Kind::redlock) {
      for (const auto& e : endpoints) clients->emplace_back(e);
      w.make<redlock::Redlock>(*clients, key, v.options);
    } else if (v.kind == Kind::semaphore) {
      clients->emplace_back(endpoints.front());
      w.make<redlock::Semaphore>(clients->front(), key, kPermits, v.options);
    } else {
      clients->emplace_back(endpoints.front());
      w.make<redlock::Lock>(clients->front(), key, v.options);
    }
    w.owner = clients;
    return w;
  };
}

double per_acq(double value, const FleetResult& r) {
  return ratio(value, static_cast<double>(r.acquisitions));
}

std::string server_cell(const FleetResult& r) {
  std::string cell;
  for (double c : r.server.commands) cell += (cell.empty() ? "" : " / ") + num(per_acq(c, r));
  return cell.empty() ? "n/a" : cell;
}

Json row_json(const FleetRow& row) {
  const FleetResult& r = row.result;
  Json j = Json::object();
  j.set("variant", row.variant).set("processes", r.processes).set("seconds", r.seconds);
  if (!row.note.empty()) return j.set("note", row.note);
  j.set("acquisitions", r.acquisitions)
      .set("acquisitions_per_s", ratio(static_cast<double>(r.acquisitions), r.seconds))
      .set("per_process_min", r.min_per_process)
      .set("per_process_max", r.max_per_process)
      .set("max_wait_ms", r.max_wait_ms);
  Json nodes = Json::array();
  for (double c : r.server.commands) nodes.push(per_acq(c, r));
  j.set("server_commands_per_acquisition", std::move(nodes));
  if (r.client_commands >= 0)
    j.set("client_commands_per_acquisition", per_acq(r.client_commands, r));
  if (r.server.cpu_us >= 0) j.set("server_cpu_us_per_acquisition", per_acq(r.server.cpu_us, r));
  if (!r.error.empty()) j.set("error", r.error);
  return j;
}

void print_rows(const FleetRows& rows) {
  Table table({"variant", "N", "acq/s", "server cmds/acq", "client cmds/acq", "min/max per proc",
               "max wait ms", "Redis CPU us/acq"});
  std::string notes;
  for (const FleetRow& row : rows) {
    const FleetResult& r = row.result;
    if (!row.note.empty()) {
      notes += fmt::format("  {}, N = {}: {}\n", row.variant, r.processes, row.note);
      continue;
    }
    table.row({row.variant, std::to_string(r.processes),
               num(ratio(static_cast<double>(r.acquisitions), r.seconds)), server_cell(r),
               r.client_commands >= 0 ? num(per_acq(r.client_commands, r)) : "-",
               fmt::format("{}/{} ({})", r.min_per_process, r.max_per_process,
                           num(ratio(static_cast<double>(r.min_per_process),
                                     static_cast<double>(r.max_per_process)))),
               num(r.max_wait_ms), r.server.cpu_us >= 0 ? num(per_acq(r.server.cpu_us, r)) : "-"});
  }
  table.print(std::cout);
  std::cout << notes;
}

// The measured rows of `variant`, smallest N first.
std::vector<const FleetResult*> measured(const FleetRows& rows, const std::string& variant) {
  std::vector<const FleetResult*> mine;
  for (const FleetRow& row : rows) {
    if (row.variant == variant && row.note.empty()) mine.push_back(&row.result);
  }
  return mine;
}

// The scaling goals of #32 for one variant's rows `mine` (smallest N first), against its smallest
// N: acq/s and server commands per acquisition at the largest N, min/max at every N.
void scaling_goals(const std::vector<const FleetResult*>& mine, Goals& goals) {
  const FleetResult& base = *mine.front();
  const FleetResult& top = *mine.back();
  auto rate = [](const FleetResult& r) {
    return ratio(static_cast<double>(r.acquisitions), r.seconds);
  };
  auto cmds = [](const FleetResult& r) {
    return r.server.commands.empty() ? 0.0 : per_acq(r.server.commands.front(), r);
  };
  const double r1 = ratio(rate(top), rate(base));
  goals.verdict(fmt::format("acq/s at N = {} >= 0.9x N = {}", top.processes, base.processes), r1,
                times(r1), r1 >= 0.9);
  const double r2 = ratio(cmds(top), cmds(base));
  goals.verdict(
      fmt::format("server cmds/acq at N = {} <= 1.2x N = {}", top.processes, base.processes), r2,
      times(r2), r2 <= 1.2);
  for (const FleetResult* r : mine) {
    const double share =
        ratio(static_cast<double>(r->min_per_process), static_cast<double>(r->max_per_process));
    goals.verdict(fmt::format("min/max >= 0.8 at N = {}", r->processes), share, num(share),
                  share >= 0.8);
  }
}

// The default Lock's goals (#32), against its smallest N of this run.
Json print_goals(const FleetRows& rows, double handoff_p50_ms, double hold_ms) {
  const std::vector<const FleetResult*> mine = measured(rows, "default Lock");
  if (mine.empty()) return Json::array();
  std::cout << fmt::format("  goals of #32, default Lock, against N = {} of this run:\n",
                           mine.front()->processes);
  Goals goals;
  scaling_goals(mine, goals);
  for (const FleetResult* r : mine) {
    const double bound = 1.5 * r->processes * (hold_ms + handoff_p50_ms);
    goals.verdict(fmt::format("max wait at N = {} <= 1.5 x N x (hold + hand-off p50) = {} ms",
                              r->processes, num(bound)),
                  r->max_wait_ms, num(r->max_wait_ms) + " ms", r->max_wait_ms <= bound);
  }
  return goals.take();
}

// The default Semaphore's goals (#32: a released permit wakes one waiter), against its smallest
// N of this run.
Json print_semaphore_goals(const FleetRows& rows) {
  const std::vector<const FleetResult*> mine = measured(rows, kDefaultSemaphore);
  if (mine.empty()) return Json::array();
  std::cout << fmt::format("  goals of #32, {}, against N = {} of this run:\n", kDefaultSemaphore,
                           mine.front()->processes);
  Goals goals;
  scaling_goals(mine, goals);
  return goals.take();
}

// The busy default Lock's server commands per second at its largest N of this run (0: none).
double busy_commands_per_s(const FleetRows& rows) {
  const std::vector<const FleetResult*> mine = measured(rows, "default Lock");
  if (mine.empty() || mine.back()->server.commands.empty()) return 0;
  return ratio(mine.back()->server.commands.front(), mine.back()->seconds);
}

FleetSettings settings_of(const Config& config) {
  FleetSettings s;
  s.sizes = config.fleet_sizes;
  s.seconds = config.fleet_seconds;
  if (config.quick) s.warm_up_seconds = 0.25;
  return s;
}

double measure_handoff_p50_ms(const Config& config, const redlock::Endpoint& endpoint) {
  std::vector<std::int64_t> all;
  const int rounds = config.quick ? 1 : 3;
  for (int i = 0; i < rounds; ++i) {
    const auto h = handoff_ping_pong(
        endpoint, redlock::test::key("s12:handoff" + std::to_string(i)), config.quick ? 0.25 : 1.0);
    all.insert(all.end(), h.begin(), h.end());
  }
  return summarize(all).p50_ns / 1e6;
}

void redis_rows(const FleetSettings& settings, const std::vector<redlock::Endpoint>& endpoints,
                const SampleServer& one, const SampleServer& three, FleetRows& rows) {
  int index = 0;
  for (const Variant& v : variants()) {
    for (const int n : settings.sizes) {
      const std::string key = redlock::test::key("s12:" + std::to_string(index++));
      rows.push_back(measured_row(v.name, n, [&] {
        return run_fleet(n, settings, redis_maker(endpoints, v, key),
                         v.kind == Kind::redlock ? three : one, SampleAt::loops_done);
      }));
    }
  }
}

}  // namespace

void section_fleet(const Config& config, Report& report) {
  const FleetSettings settings = settings_of(config);
  std::cout << "\n[12] Fleet: N processes (fork), each its own Client and lock on one key, loop "
               "try_lock_until(end) / hold 1 ms / unlock() for "
            << settings.seconds << " s per run, after a warm-up of " << settings.warm_up_seconds
            << " s (every process has queued once; not counted)\n";
  redlock::test::ServerGroup group(3);  // a Lock uses the first; the Redlock rows all three
  std::vector<redlock::Endpoint> endpoints;
  std::vector<RawContext> admins;
  for (std::size_t i = 0; i < group.size(); ++i) {
    endpoints.push_back(endpoint_of(group[i], config.timeout));
    // The samplers' own connections wait long: a hiredis context that timed out once (INFO on
    // a server 512 processes keep busy) fails every later command, and every later row.
    admins.push_back(raw_connect(endpoint_of(group[i], std::chrono::seconds(60))));
  }
  const SampleServer one = redis_sampler({admins.front().get()});
  const SampleServer three = redis_sampler({admins[0].get(), admins[1].get(), admins[2].get()});
  const double handoff_p50_ms = measure_handoff_p50_ms(config, endpoints.front());
  if (thread_ids().size() > 1) {
    std::cout << "  note: forking from a process with " << thread_ids().size() << " threads\n";
  }
  FleetRows rows;
  redis_rows(settings, endpoints, one, three, rows);
  fleet_backend_rows(settings, rows);
  const int anchor_n = config.quick ? settings.sizes.back() : 32;
  fleet_anchor_rows(anchor_n, settings, group[0].port(), one, rows);
  print_rows(rows);
  std::cout << "  server cmds/acq: INFO commandstats delta per acquisition (every call, those "
               "inside scripts included, INFO's excluded);\n"
               "    Redlock: each node's (Redis CPU: the 3 servers' sum); PostgreSQL: statements "
               "the clients sent (pg_stat_statements); ZooKeeper: packets received (srvr)\n"
               "  client cmds/acq: RESP commands the workers wrote, counted in each worker (its "
               "send() calls); Redis rows only\n"
               "  max wait: the longest single try_lock_until() call (or peer acquire loop), one "
               "cut by the end of the window included\n"
               "  hand-off p50 (section 3's path: 2 workers alternating, own Client each, hold "
               "1 ms): "
            << num(handoff_p50_ms) << " ms\n";
  Json goals = print_goals(rows, handoff_p50_ms, static_cast<double>(settings.hold.count()));
  Json semaphore_goals = print_semaphore_goals(rows);
  Json liveness =
      fleet_liveness_figures(config, settings, endpoints.front(), one, busy_commands_per_s(rows));
  Json j = Json::object();
  j.set("what", "N processes on one key, try_lock_until / hold 1 ms / unlock");
  j.set("seconds_per_run", settings.seconds);
  j.set("warm_up_seconds", settings.warm_up_seconds);
  j.set("handoff_p50_ms", handoff_p50_ms);
  Json list = Json::array();
  for (const FleetRow& row : rows) {
    list.push(row_json(row));
    if (!row.result.error.empty()) {
      report.errors.push_back(fmt::format("section 12: {} N = {}: {}", row.variant,
                                          row.result.processes, row.result.error));
    }
  }
  j.set("rows", std::move(list));
  j.set("goals", std::move(goals));
  j.set("semaphore_goals", std::move(semaphore_goals));
  j.set("liveness", std::move(liveness));
  report.sections.set("12_fleet", std::move(j));
}

}  // namespace bench
