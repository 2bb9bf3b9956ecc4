// bench/primitives_election.cpp: section 14a, Election against etcd's (Debian's etcd-server 3.4).
//   - hand-over, p50 over rounds: a leader and a standby of one election, SIGINT to the leader, the
//     time until the standby prints that it leads; `etcdctl elect NAME A` / `B` on a fresh etcd
//     (single member, loopback, temporary data dir), then `redlock-run --elect` (the standby's
//     command, `echo LEADING`, prints); then Election in process, resign() until the standby's
//     campaign() returns (goal: p50 <= 0.5x etcd's).
//   - crash failover: a leader (this binary in its --elect-leader mode, ttl 500 ms) killed -9 at
//     points spread over a renewal period, until an Election of this process campaigning for it
//     leads (goal: the worst <= ttl + 50 ms).
//   - leader() against a raw hiredis GET of the leader key, one connection each, interleaved
//     rounds (goal: leader()'s time per call <= 1.1x the GET's).
#include <signal.h>  // SIGINT, SIGKILL

#include <hiredis/hiredis.h>

#include <algorithm>   // std::swap
#include <chrono>      // std::chrono
#include <cstdio>      // std::printf, std::fflush
#include <exception>   // std::exception_ptr, std::rethrow_exception
#include <functional>  // std::function
#include <iostream>    // std::cout
#include <string>      // std::string
#include <thread>      // std::thread
#include <vector>      // std::vector

#include <redlock/election.hpp>

#include "etcd.hpp"
#include "primitives.hpp"
#include "raw.hpp"
#include "support/redis_server.hpp"  // redlock::test::key

namespace bench {
namespace {

using std::chrono::milliseconds;
constexpr std::int64_t kRoundLimitNs = 30'000'000'000;  // any one round, however loaded
constexpr milliseconds kCrashTtl{500};

std::int64_t deadline() { return now_ns() + kRoundLimitNs; }

// Candidates (keys under NAME/) etcd holds for the election.
int etcd_candidates(const EtcdServer& etcd, const std::string& name) {
  Child get(etcd.ctl({"get", "--prefix", "--keys-only", name + "/"}));
  const std::string out = get.read_all(deadline());
  int count = 0;
  for (std::size_t at = out.find(name + "/"); at != std::string::npos;
       at = out.find(name + "/", at + 1)) {
    ++count;
  }
  return count;
}

std::int64_t etcd_round(const EtcdServer& etcd, const std::string& name) {
  const std::int64_t until = deadline();
  Child leader(etcd.ctl({"elect", name, "A"}));
  leader.read_line(until);  // NAME/<lease>: it leads
  Child standby(etcd.ctl({"elect", name, "B"}));
  while (etcd_candidates(etcd, name) < 2) {
    if (now_ns() > until) throw std::runtime_error("etcdctl elect: the standby never campaigned");
    std::this_thread::sleep_for(milliseconds(10));
  }
  const std::int64_t t0 = now_ns();
  leader.signal(SIGINT);
  standby.read_line(until);
  const std::int64_t took = now_ns() - t0;
  standby.signal(SIGINT);
  leader.wait(until);
  standby.wait(until);
  return took;
}

std::int64_t redlock_run_round(const std::string& run, const std::string& uri,
                               const std::string& name) {
  const std::int64_t until = deadline();
  auto argv = [&](const char* id) {
    return std::vector<std::string>{run,  "--redis", uri,       "--key",
                                    name, "-v",      "--elect", id,
                                    "--", "/bin/sh", "-c",      "echo LEADING; exec sleep 600"};
  };
  Child leader(argv("A"), Child::Stderr::merged);
  leader.read_until("LEADING", until);
  Child standby(argv("B"), Child::Stderr::merged);
  standby.read_until("waiting for leadership", until);
  std::this_thread::sleep_for(milliseconds(50));  // its subscription, after the line
  const std::int64_t t0 = now_ns();
  leader.signal(SIGINT);
  standby.read_until("LEADING", until);
  const std::int64_t took = now_ns() - t0;
  standby.signal(SIGINT);
  leader.wait(until);
  standby.wait(until);
  return took;
}

// A campaign on a thread of its own; led() joins it and returns when it led (now_ns()), or
// rethrows what campaign() threw.
class Campaign {
 public:
  explicit Campaign(redlock::Election& e)
      : thread_([this, &e] {
          try {
            e.campaign();
            led_ = now_ns();
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~Campaign() {
    if (thread_.joinable()) thread_.join();
  }
  Campaign(const Campaign&) = delete;
  Campaign& operator=(const Campaign&) = delete;
  std::int64_t led() {
    thread_.join();
    if (error_) std::rethrow_exception(error_);
    return led_;
  }

 private:
  std::int64_t led_{0};
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members it writes exist
};

// resign() of one Election until another's campaign() returns; the roles alternate. The first
// round (connections, scripts, subscriptions) is not counted.
std::vector<std::int64_t> graceful(const redlock::Endpoint& endpoint, const std::string& name,
                                   int rounds) {
  redlock::ElectionOptions options;
  options.ttl = milliseconds(2'000);
  redlock::Election a(redlock::Client(endpoint), name, "A", options);
  redlock::Election b(redlock::Client(endpoint), name, "B", options);
  redlock::Election* lead = &a;
  redlock::Election* next = &b;
  lead->campaign();
  std::vector<std::int64_t> out;
  for (int r = -1; r < rounds; ++r) {
    Campaign standby(*next);
    std::this_thread::sleep_for(milliseconds(50));  // it waits, subscribed
    const std::int64_t t0 = now_ns();
    lead->resign();
    const std::int64_t led = standby.led();
    if (r >= 0) out.push_back(led - t0);
    std::swap(lead, next);
  }
  lead->resign();
  return out;
}

// kill -9 of a leader (another process) until this process's candidate leads. The kill falls at
// points spread over one renewal period (ttl / 3), after the leader's first 50 ms.
std::vector<std::int64_t> crash(const redlock::Endpoint& endpoint, const std::string& uri,
                                const std::string& name, int rounds) {
  redlock::ElectionOptions options;
  options.ttl = kCrashTtl;
  redlock::Election b(redlock::Client(endpoint), name, "B", options);
  std::vector<std::int64_t> out;
  for (int r = 0; r < rounds; ++r) {
    const std::int64_t until = deadline();
    Child leader(
        {"/proc/self/exe", "--elect-leader", uri, name, std::to_string(kCrashTtl.count())});
    leader.read_until("leading", until);
    Campaign standby(b);
    std::this_thread::sleep_for(milliseconds(50) + kCrashTtl / 3 * r / rounds);
    const std::int64_t t0 = now_ns();
    leader.signal(SIGKILL);
    out.push_back(standby.led() - t0);
    leader.wait(until);
    b.resign();
  }
  return out;
}

struct Handover {
  std::string name;
  std::string key;
  Summary s;
  std::string skipped_why;  // non-empty: not measured
};

Handover measure(const std::string& name, const std::string& key, const std::string& why,
                 const std::function<std::vector<std::int64_t>()>& run) {
  if (!why.empty()) return {name, key, {}, why};
  return {name, key, summarize(run()), ""};
}

template <class Round>
std::vector<std::int64_t> repeat(int rounds, Round round) {
  std::vector<std::int64_t> out;
  for (int r = 0; r < rounds; ++r) out.push_back(round());
  return out;
}

std::string run_path() {
#if defined(REDLOCK_BENCH_RUN_PATH)
  return REDLOCK_BENCH_RUN_PATH;
#else
  return "";
#endif
}

std::vector<Handover> handovers(const Config& config, const redlock::test::RedisServer& server) {
  const redlock::Endpoint endpoint = endpoint_of(server, config.timeout);
  const std::string uri = "redis://127.0.0.1:" + std::to_string(server.port());
  const int rounds = config.quick ? 2 : 15;
  const std::string name = redlock::test::key("s14-elect");
  std::vector<Handover> rows;
  rows.push_back(measure("etcdctl elect (etcd 3.4)", "etcdctl_elect",
                         etcd_available() ? "" : "etcd-server or etcd-client not installed", [&] {
                           EtcdServer etcd;
                           return repeat(rounds, [&] { return etcd_round(etcd, "s14"); });
                         }));
  const std::string run = run_path();
  rows.push_back(measure(
      "redlock-run --elect", "redlock_run_elect", run.empty() ? "redlock-run not built" : "",
      [&] { return repeat(rounds, [&] { return redlock_run_round(run, uri, name + ":run"); }); }));
  rows.push_back(measure("Election resign -> campaign()", "election_graceful", "",
                         [&] { return graceful(endpoint, name + ":graceful", rounds); }));
  rows.push_back(
      measure("Election crash failover (kill -9, ttl 500 ms)", "election_crash", "",
              [&] { return crash(endpoint, uri, name + ":crash", config.quick ? 1 : 6); }));
  return rows;
}

// leader() of an Election that leads, against a GET of its leader key on a raw connection.
Json leader_vs_get(const Config& config, const redlock::Endpoint& endpoint, Goals& goals) {
  const std::string name = redlock::test::key("s14-leader");
  redlock::Election election(redlock::Client(endpoint), name, "A");
  election.campaign();
  RawContext raw = raw_connect(endpoint);
  const std::vector<std::string> get{"GET", "{" + name + "}:leader"};
  const std::vector<Timed> t =
      interleaved(config.rounds, config.seconds,
                  {[&] {
                     const RawReply reply = raw_command(raw.get(), get);
                     return reply != nullptr && reply->type == REDIS_REPLY_STRING;
                   },
                   [&] { return election.leader().has_value(); }});
  const double cost = ratio(t[0].cycles_per_s, t[1].cycles_per_s);  // leader()'s time / GET's
  Table table({"who leads, 1 thread", "calls/s", "p50 us", "cpu us/call", "time vs GET"});
  table.row({"raw GET of the leader key", num(t[0].cycles_per_s), num(t[0].p50_ns / 1e3),
             num(t[0].cpu_ns / 1e3), "1.00x"});
  table.row({"Election::leader()", num(t[1].cycles_per_s), num(t[1].p50_ns / 1e3),
             num(t[1].cpu_ns / 1e3), times(cost)});
  table.print(std::cout);
  goals.verdict("leader() time per call <= 1.1x a raw GET's", cost, times(cost), cost <= 1.1);
  election.resign();
  return Json::object()
      .set("raw_get", timed_json(t[0]))
      .set("leader", timed_json(t[1]))
      .set("leader_time_vs_get", cost);
}

}  // namespace

Json election_part(const Config& config, const redlock::test::RedisServer& server, Goals& goals) {
  const std::vector<Handover> rows = handovers(config, server);
  const double etcd_p50 = rows[0].s.p50_ns;
  Table table(
      {"hand-over: leader stops -> standby leads", "rounds", "p50 ms", "max ms", "vs etcd"});
  Json j = Json::object();
  for (const Handover& h : rows) {
    if (!h.skipped_why.empty()) {
      table.row({h.name, skipped(h.skipped_why)});
      j.set(h.key, Json::object().set("skipped", h.skipped_why));
      continue;
    }
    const bool crash_row = h.key == "election_crash";  // not a hand-over: bounded by the ttl
    table.row({h.name, std::to_string(h.s.count), num(h.s.p50_ns / 1e6), num(h.s.max_ns / 1e6),
               crash_row ? "" : times(ratio(h.s.p50_ns, etcd_p50))});
    j.set(h.key, Json::object()
                     .set("rounds", static_cast<unsigned long long>(h.s.count))
                     .set("p50_ms", h.s.p50_ns / 1e6)
                     .set("max_ms", h.s.max_ns / 1e6));
  }
  table.print(std::cout);
  if (etcd_p50 > 0) {
    const double g = ratio(rows[2].s.p50_ns, etcd_p50);
    goals.verdict("Election graceful hand-over p50 <= 0.5x etcdctl elect's", g, times(g), g <= 0.5);
  } else {
    std::cout << "    Election graceful hand-over p50 <= 0.5x etcdctl elect's: "
              << skipped(rows[0].skipped_why) << "\n";
  }
  const double worst_ms = rows[3].s.max_ns / 1e6;
  const double bound = static_cast<double>(kCrashTtl.count()) + 50;
  goals.verdict("Election crash failover, worst <= ttl + 50 ms (" + num(bound) + " ms)", worst_ms,
                num(worst_ms) + " ms", worst_ms <= bound);
  j.set("leader_vs_get", leader_vs_get(config, endpoint_of(server, config.timeout), goals));
  return j;
}

int elect_leader_main(int argc, char** argv) {
  if (argc != 5) return 1;
  try {
    redlock::ElectionOptions options;
    options.ttl = milliseconds(std::stoi(argv[4]));
    redlock::Election e(redlock::Client(argv[2]), argv[3], "crashing-leader", options);
    e.campaign();
    std::printf("leading\n");
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "--elect-leader: %s\n", e.what());
    return 1;
  }
}

}  // namespace bench
