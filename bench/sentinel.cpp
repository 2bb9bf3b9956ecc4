// bench/sentinel.cpp: section 8, Sentinel. On a set of 1 master, 2 replicas and 3 sentinels:
// the Lock cycle through Sentinel against the same Lock pointed straight at the master (steady
// state must cost nothing for discovery), the cost of wait_replicas=1 (cycles/s and p50 against
// no WAIT), and the unavailability after kill -9 of the master (from the kill to the first
// successful try_lock) against the sentinels' down-after-milliseconds.
#include <chrono>      // std::chrono
#include <functional>  // std::function
#include <iostream>    // std::cout
#include <string>      // std::string
#include <thread>      // std::this_thread

#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "support/sentinel_set.hpp"

namespace bench {
namespace {

redlock::Endpoint with_timeouts(redlock::Endpoint e, std::chrono::milliseconds timeout) {
  e.connect_timeout = timeout;
  e.command_timeout = timeout;
  for (auto& s : e.sentinel.sentinels) {
    s.connect_timeout = timeout;
    s.command_timeout = timeout;
  }
  return e;
}

Json report_cycles(const Config& config, redlock::test::SentinelSet& set) {
  const std::string k = redlock::test::key("s8:lock");
  redlock::Client direct(with_timeouts(set.data_endpoint(set.master_index()), config.timeout));
  const redlock::Endpoint through_ep = with_timeouts(set.endpoint(), config.timeout);
  redlock::Client through(through_ep);
  redlock::Endpoint waiting_ep = through_ep;
  waiting_ep.wait_replicas = 1;
  waiting_ep.wait_timeout = config.timeout / 2;
  redlock::Client waiting(waiting_ep);
  redlock::Lock a(direct, k + ":direct"), b(through, k + ":sentinel"), c(waiting, k + ":wait");
  // Two groups: WAIT keeps the replicas busier (acknowledgements on demand), which on a small
  // machine slows every client of the set for a while; the steady-state comparison runs first.
  // Short rounds, many of them: on a small machine the set's six processes make the master
  // alternate between fast and slow phases of a second or so, whichever client is running.
  const int rounds = config.rounds * 3;
  const double seconds = config.seconds / 3;
  const std::vector<Timed> ab = interleaved(rounds, seconds, {cycle_of(a), cycle_of(b)});
  const std::vector<Timed> bc = interleaved(rounds, seconds, {cycle_of(b), cycle_of(c)});
  const std::vector<Timed> t = {ab[0], ab[1], bc[1]};
  const double rate = ratio(t[1].cycles_per_s, t[0].cycles_per_s);
  const bool met = rate >= 0.97;
  Table table({"Lock try_lock+unlock", "cycles/s", "p50 us", "cpu us/cyc", "vs direct"});
  table.row({"straight to the master", num(t[0].cycles_per_s), num(t[0].p50_ns / 1e3),
             num(t[0].cpu_ns / 1e3), "1.00x"});
  table.row({"through Sentinel", num(t[1].cycles_per_s), num(t[1].p50_ns / 1e3),
             num(t[1].cpu_ns / 1e3),
             times(rate) + (met ? " (goal >=0.97x met)" : " (goal >=0.97x MISSED)")});
  table.row({"through Sentinel, wait_replicas=1", num(t[2].cycles_per_s), num(t[2].p50_ns / 1e3),
             num(t[2].cpu_ns / 1e3),
             times(ratio(t[2].cycles_per_s, bc[0].cycles_per_s)) + " of through Sentinel (" +
                 num(bc[0].cycles_per_s) + "/s in its group)"});
  table.print(std::cout);
  Json j = Json::object();
  const char* names[] = {"direct", "sentinel", "sentinel_wait_replicas_1"};
  for (int i = 0; i < 3; ++i) {
    j.set(names[i], timed_json(t[i]));
  }
  j.set("sentinel_vs_direct", rate);
  j.set("goal_met", met);
  j.set("wait_p50_vs_no_wait", ratio(t[2].p50_ns, bc[0].p50_ns));
  j.set("wait_rate_vs_no_wait", ratio(t[2].cycles_per_s, bc[0].cycles_per_s));
  return j;
}

// kill -9 of the master, then try_lock every 10 ms until one succeeds (on the new master).
Json report_failover(redlock::test::SentinelSet& set) {
  redlock::LockOptions o;
  o.ttl = std::chrono::seconds(10);
  redlock::Client client(set.endpoint());
  redlock::Lock lock(client, redlock::test::key("s8:failover"), o);
  if (lock.try_lock()) lock.unlock();  // the master is known
  const std::size_t old = set.master_index();
  set.data(old).kill9();
  const std::int64_t killed = now_ns();
  std::int64_t acquired = 0;
  int errors = 0;
  while (acquired == 0 && now_ns() - killed < 60'000'000'000LL) {
    try {
      if (lock.try_lock()) {
        acquired = now_ns();
        lock.unlock();
        break;
      }
    } catch (const redlock::Error&) {
      ++errors;  // the master is down, or not yet replaced
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double ms = acquired == 0 ? -1 : static_cast<double>(acquired - killed) / 1e6;
  const int down_after = set.options().down_after_ms;
  Table table({"kill -9 of the master", "ms to the first acquire", "down-after-ms", "ratio",
               "failed attempts meanwhile"});
  table.row({"through Sentinel", ms < 0 ? "none in 60 s" : num(ms), std::to_string(down_after),
             times(ms / down_after), std::to_string(errors)});
  table.print(std::cout);
  set.data(old).restart();  // leave a full set behind
  Json j = Json::object();
  j.set("kill_to_acquire_ms", ms);
  j.set("down_after_ms", down_after);
  j.set("failed_attempts", errors);
  return j;
}

}  // namespace

void section_sentinel(const Config& config, Report& report) {
  std::cout << "\n[8] Sentinel (1 master, 2 replicas, 3 sentinels, down-after-milliseconds "
               "500): the Lock cycle through Sentinel vs straight to the master; wait_replicas=1; "
               "kill -9 of the master to the first acquire\n";
  redlock::test::SentinelSet set;
  Json j = Json::object();
  j.set("cycles", report_cycles(config, set));
  j.set("failover", report_failover(set));
  report.sections.set("8_sentinel", std::move(j));
  std::cout << "  median of " << config.rounds * 3 << " interleaved rounds of "
            << config.seconds / 3 << " s, one thread; p50 = the median cycle\n";
}

}  // namespace bench
