// bench/degraded.cpp: section 5, a Redlock over 5 servers while node 5 is sick: SIGSTOPped,
// black-holed by the fault proxy, or slow (+5 ms each way). Each phase runs the same try_lock()
// + unlock() loop as a healthy phase measured just before it, with node 5 behind the proxy in
// both, so the ratio isolates the fault. The first second of a fault is reported on its own (the
// goal must hold from the start, not once a back-off has settled), and after each fault the time
// until node 5 runs lock commands again. Goals (issue: degraded performance): at least 0.80x the
// healthy cycles/s and acquire p50 at most 1.5x healthy.
#include <algorithm>  // std::max
#include <atomic>     // std::atomic
#include <iostream>   // std::cout
#include <sstream>    // std::istringstream
#include <string>     // std::string
#include <thread>     // std::thread
#include <vector>     // std::vector

#include <fmt/format.h>

#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

namespace bench {
namespace {

using std::chrono::milliseconds;

constexpr double kGoalRate = 0.80;
constexpr double kGoalP50 = 1.50;

enum class Fault { none, paused, blackholed, slow };

const char* name_of(Fault fault) {
  switch (fault) {
    case Fault::none:
      return "healthy";
    case Fault::paused:
      return "node 5 SIGSTOPped";
    case Fault::blackholed:
      return "node 5 black-holed";
    case Fault::slow:
      return "node 5 +5 ms each way";
  }
  return "?";
}

struct Phase {
  double seconds{0};
  long cycles{0};
  long held{0};
  long errors{0};
  long first_second{0};  // cycles that ended in the first second
  Summary acquire;
  std::string error;  // the first exception's message
};

// `threads` threads, each with its own Redlock on its own key, loop try_lock()/unlock() for
// `seconds`.
Phase run_phase(const std::vector<redlock::Client>& clients, int threads, double seconds,
                const std::string& tag) {
  std::atomic<long> cycles{0};
  std::atomic<long> held{0};
  std::atomic<long> errors{0};
  std::atomic<long> first{0};
  std::vector<std::vector<std::int64_t>> samples(static_cast<std::size_t>(threads));
  std::vector<std::string> failures(static_cast<std::size_t>(threads));
  const std::int64_t start = now_ns();
  const std::int64_t end = start + static_cast<std::int64_t>(seconds * 1e9);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      redlock::Redlock lock(clients, redlock::test::key(fmt::format("s5:{}:{}", tag, t)));
      auto& mine = samples[static_cast<std::size_t>(t)];
      for (std::int64_t now = now_ns(); now < end; now = now_ns()) {
        try {
          const bool got = lock.try_lock();
          const std::int64_t t1 = now_ns();
          mine.push_back(t1 - now);
          if (got) {
            lock.unlock();
            held.fetch_add(1, std::memory_order_relaxed);
          }
          if (t1 - start < 1'000'000'000) first.fetch_add(1, std::memory_order_relaxed);
        } catch (const std::exception& e) {
          if (errors.fetch_add(1, std::memory_order_relaxed) == 0) {
            failures[static_cast<std::size_t>(t)] = e.what();
          }
        }
        cycles.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& th : pool) th.join();
  Phase out;
  out.seconds = static_cast<double>(now_ns() - start) / 1e9;
  out.cycles = cycles;
  out.held = held;
  out.errors = errors;
  out.first_second = first;
  std::vector<std::int64_t> all;
  for (auto& s : samples) all.insert(all.end(), s.begin(), s.end());
  out.acquire = summarize(std::move(all));
  for (const auto& f : failures) {
    if (!f.empty()) out.error = f;
  }
  return out;
}

// Calls of the lock's commands (SET, EVALSHA, EVAL) that `server` has run; -1 if it does not
// answer within 2 s (a resumed server may first work through its backlog).
long long lock_calls(const redlock::test::RedisServer& server) {
  redlock::Reply info;
  try {
    info = server.raw({"INFO", "commandstats"}, milliseconds(2'000));
  } catch (const std::exception&) {
    return -1;
  }
  std::istringstream lines(info.str());
  long long calls = 0;
  for (std::string line; std::getline(lines, line);) {
    for (const char* name : {"cmdstat_set:", "cmdstat_evalsha:", "cmdstat_eval:"}) {
      if (line.rfind(name, 0) != 0) continue;
      const auto at = line.find("calls=");
      if (at != std::string::npos) calls += std::stoll(line.substr(at + 6));
    }
  }
  return calls;
}

// Milliseconds from `healed` until node 5 runs lock commands again while one thread keeps
// cycling; -1 if not within 5 s.
double recovery_ms(const std::vector<redlock::Client>& clients,
                   const redlock::test::RedisServer& node5, std::int64_t healed) {
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    redlock::Redlock lock(clients, redlock::test::key("s5:recovery"));
    while (!stop) {
      try {
        if (lock.try_lock()) lock.unlock();
      } catch (const std::exception&) {
      }
    }
  });
  struct Join {  // also when INFO fails
    std::atomic<bool>& stop;
    std::thread& worker;
    ~Join() {
      stop = true;
      worker.join();
    }
  } join{stop, worker};
  long long before = -1;
  while (before < 0 && now_ns() - healed < 5'000'000'000LL) before = lock_calls(node5);
  while (before >= 0 && now_ns() - healed < 5'000'000'000LL) {
    if (lock_calls(node5) > before) return static_cast<double>(now_ns() - healed) / 1e6;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return -1;
}

void apply(Fault fault, bool on, redlock::test::RedisServer& node5,
           redlock::test::FaultProxy& proxy) {
  switch (fault) {
    case Fault::none:
      return;
    case Fault::paused:
      on ? node5.pause() : node5.resume();
      return;
    case Fault::blackholed:
      proxy.set_blackhole(on);
      return;
    case Fault::slow:
      proxy.set_delay(on ? milliseconds(5) : milliseconds(0));
      return;
  }
}

Json row_json(Fault fault, int threads, const Phase& p, const Phase& healthy, double recovery) {
  const double rate = ratio(p.cycles, p.seconds);
  const double healthy_rate = ratio(healthy.cycles, healthy.seconds);
  Json j = Json::object();
  j.set("fault", name_of(fault));
  j.set("threads", threads);
  j.set("cycles_per_s", rate);
  j.set("held", p.held);
  j.set("errors", p.errors);
  j.set("rate_ratio", ratio(rate, healthy_rate));
  j.set("first_second_ratio", ratio(static_cast<double>(p.first_second), healthy_rate));
  j.set("acquire_p50_ms", p.acquire.p50_ns / 1e6);
  j.set("acquire_p99_ms", p.acquire.p99_ns / 1e6);
  j.set("p50_ratio", ratio(p.acquire.p50_ns, healthy.acquire.p50_ns));
  j.set("recovery_ms", recovery);
  if (!p.error.empty()) j.set("error", p.error);
  return j;
}

}  // namespace

void section_degraded(const Config& config, Report& report) {
  std::cout << "\n[5] Degraded: Redlock over 5 servers, try_lock()+unlock() per cycle, distinct "
               "keys per thread, node 5 behind the fault proxy in every phase\n";
  std::cout.flush();
  redlock::test::ServerGroup group(5);
  redlock::test::FaultProxy proxy("127.0.0.1", group[4].port());
  std::vector<redlock::Client> clients;
  for (std::size_t i = 0; i < group.size(); ++i) {
    redlock::Endpoint ep = endpoint_of(group[i], config.timeout);
    if (i == 4) ep.port = proxy.port();
    clients.emplace_back(ep);
  }
  const double seconds = config.quick ? 0.5 : std::max(2.0, 2 * config.seconds);
  Table table({"fault", "threads", "cycles/s", "vs healthy", "first second", "acquire p50 ms",
               "p50 vs healthy", "errors", "back in ms", "goal"});
  Json rows = Json::array();
  for (const int threads : config.threads) {
    for (const Fault fault : {Fault::paused, Fault::blackholed, Fault::slow}) {
      const Phase healthy = run_phase(clients, threads, seconds, "healthy");
      apply(fault, true, group[4], proxy);
      const Phase sick = run_phase(clients, threads, seconds, name_of(fault));
      apply(fault, false, group[4], proxy);
      const double back = recovery_ms(clients, group[4], now_ns());
      Json full = row_json(fault, threads, sick, healthy, back);
      const double rate =
          ratio(ratio(sick.cycles, sick.seconds), ratio(healthy.cycles, healthy.seconds));
      const double first =
          ratio(static_cast<double>(sick.first_second), ratio(healthy.cycles, healthy.seconds));
      const double p50 = ratio(sick.acquire.p50_ns, healthy.acquire.p50_ns);
      const bool met = rate >= kGoalRate && first >= kGoalRate && p50 <= kGoalP50;
      table.row({name_of(fault), std::to_string(threads), num(ratio(sick.cycles, sick.seconds)),
                 times(rate), times(first), num(sick.acquire.p50_ns / 1e6), times(p50),
                 std::to_string(sick.errors), back < 0 ? "> 5000" : num(back),
                 met ? "met" : "missed"});
      if (!sick.error.empty() && sick.held == 0) {
        report.errors.push_back(fmt::format("section 5: {}, {} threads: no cycle held ({})",
                                            name_of(fault), threads, sick.error));
      }
      full.set("healthy_cycles_per_s", ratio(healthy.cycles, healthy.seconds));
      full.set("healthy_acquire_p50_ms", healthy.acquire.p50_ns / 1e6);
      full.set("goal_met", met);
      rows.push(std::move(full));
    }
  }
  table.print(std::cout);
  std::cout << fmt::format(
      "  goal: cycles/s (whole phase and first second) >= {:.2f}x the healthy phase just before, "
      "acquire p50 <= {:.2f}x; {} s per phase; endpoint timeouts {} ms\n",
      kGoalRate, kGoalP50, seconds, config.timeout.count());
  Json j = Json::object();
  j.set("what", "Redlock(5) cycles with node 5 sick, against a healthy phase just before");
  j.set("seconds_per_phase", seconds);
  j.set("goal_rate_ratio", kGoalRate);
  j.set("goal_p50_ratio", kGoalP50);
  j.set("rows", std::move(rows));
  report.sections.set("5_degraded", std::move(j));
}

}  // namespace bench
