// bench/fleet_idle.cpp: section 12's two figures of issue 41 (a wait always ends):
//
// - Guard traffic. N idle waiters (the largest fleet size, 512 by default), each a forked
//   process in lock() with the default options, behind a lock the parent holds (renewed) for the
//   whole run. Once every waiter is queued, the server's commands per second over a window: the
//   stall guards (one script per waiter per 1.125-1.375 ttl), the watchers' checks, the
//   subscribers' PINGs, the holder's renewals. The default options (ttl 30 s; 2 s with --quick),
//   a window of 40 s (3 s), more than one stall guard. Goal: <= 3% of the busy default-Lock
//   run's commands per second at the same N.
// - A release behind 100,000 dead entries. The parent holds the lock, 100,000 queue entries of
//   processes that are gone are written (nobody subscribes to their channels), and the release's
//   script time is read from the server's SLOWLOG (its own microseconds, no round trip). Five
//   rounds; goal: the longest <= 1 ms (each call examines at most 32 entries).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>  // std::max_element
#include <chrono>     // std::chrono
#include <cstdint>    // std::int64_t
#include <iostream>   // std::cout
#include <map>        // std::map
#include <string>     // std::string
#include <thread>     // std::this_thread
#include <utility>    // std::pair
#include <vector>     // std::vector

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "fleet.hpp"
#include "raw.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of the queue's keys

namespace bench {
namespace {

using namespace std::chrono_literals;

constexpr long long kDeadEntries = 100000;
constexpr int kDeadRounds = 5;

long long integer_of(redisContext* c, const std::vector<std::string>& argv) {
  const RawReply r = raw_command(c, argv);
  return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

// Forks `n` processes that each wait in lock() on `key` until killed. Returns their pids.
std::vector<pid_t> fork_idle_waiters(int n, const redlock::Endpoint& endpoint,
                                     const std::string& key, const redlock::LockOptions& options) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) break;
    if (pid == 0) {
      try {
        redlock::Client client(endpoint);
        redlock::Lock lock(client, key, options);
        lock.lock();
      } catch (...) {
      }
      ::pause();
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  return pids;
}

// The waiters' processes, killed and reaped however the measurement ends.
struct Children {
  std::vector<pid_t> pids;
  ~Children() {
    for (const pid_t pid : pids) ::kill(pid, SIGKILL);
    for (const pid_t pid : pids) ::waitpid(pid, nullptr, 0);
  }
};

// A connection of its own with a long timeout: 512 processes joining make a 2-core machine slow.
RawContext patient_connect(const redlock::Endpoint& endpoint) {
  redlock::Endpoint patient = endpoint;
  patient.command_timeout = 60s;
  return raw_connect(patient);
}

struct IdleFigure {
  int waiters{0};
  int queued{0};
  double window_s{0};
  double commands_per_s{-1};
  std::string by_command;  // "ping 256/s, evalsha 51/s, ...", the largest first
};

// The commands per second of each command between two INFO commandstats samples.
std::string by_command(const std::map<std::string, std::uint64_t>& before,
                       const std::map<std::string, std::uint64_t>& after, double seconds) {
  std::vector<std::pair<double, std::string>> rates;
  for (const auto& [name, n] : after) {
    const auto it = before.find(name);
    const double delta = static_cast<double>(n - (it == before.end() ? 0 : it->second));
    if (delta > 0 && name != "info") rates.emplace_back(delta / seconds, name);
  }
  std::sort(rates.rbegin(), rates.rend());
  std::string out;
  for (const auto& [rate, name] : rates) {
    out += fmt::format("{}{} {}/s", out.empty() ? "" : ", ", name, num(rate));
  }
  return out;
}

IdleFigure measure_idle(const Config& config, int n, const redlock::Endpoint& endpoint,
                        const SampleServer& sample) {
  const RawContext context = patient_connect(endpoint);
  redisContext* const admin = context.get();
  IdleFigure out;
  out.waiters = n;
  redlock::LockOptions options;  // the waiters': the defaults (ttl 30 s)
  if (config.quick) options.ttl = 2s;
  const std::string key = redlock::test::key("s12:idle");
  const std::string list = redlock::detail::helper_key(key, ":waiters");
  redlock::Client client(endpoint);
  redlock::LockOptions renewed = options;
  renewed.auto_renew = true;
  redlock::Lock holder(client, key, renewed);  // held through the window
  holder.lock();
  const Children waiters{fork_idle_waiters(n, endpoint, key, options)};
  const auto settle_until = std::chrono::steady_clock::now() + (config.quick ? 20s : 60s);
  while (integer_of(admin, {"LLEN", list}) < n && std::chrono::steady_clock::now() < settle_until) {
    std::this_thread::sleep_for(100ms);
  }
  out.queued = static_cast<int>(integer_of(admin, {"LLEN", list}));
  std::this_thread::sleep_for(config.quick ? 500ms : 2s);  // the last joins' own traffic ends
  out.window_s = config.quick ? 3.0 : 40.0;                // more than one stall guard (1.375 ttl)
  const ServerSample before = sample();
  const auto calls_before = command_calls(admin);
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(out.window_s));
  const ServerSample after = sample();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.by_command = by_command(calls_before, command_calls(admin), seconds);
  if (!before.commands.empty() && !after.commands.empty()) {
    out.commands_per_s = (after.commands.front() - before.commands.front()) / seconds;
  }
  return out;
}

// The server's time for each release of a lock behind kDeadEntries dead entries (SLOWLOG, us).
std::vector<std::int64_t> measure_dead_release(const redlock::Endpoint& endpoint) {
  const RawContext context = patient_connect(endpoint);  // writing the entries takes a while
  redisContext* const admin = context.get();
  const std::string key = redlock::test::key("s12:dead");
  const std::string list = redlock::detail::helper_key(key, ":waiters");
  const std::string info = redlock::detail::helper_key(key, ":waiters:info");
  redlock::Client client(endpoint);
  redlock::Lock holder(client, key, redlock::LockOptions{});
  raw_command(admin, {"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  std::vector<std::int64_t> us;
  for (int round = 0; round < kDeadRounds; ++round) {
    raw_command(admin, {"DEL", list, info});
    holder.lock();
    raw_command(admin, {"EVAL",
                        "for i = 1, tonumber(ARGV[1]) do\n"
                        "  redis.call('rpush', KEYS[1], 'dead' .. i)\n"
                        "  redis.call('hset', KEYS[2], 'dead' .. i, '1000:1:0:gone-' .. i)\n"
                        "end",
                        "2", list, info, std::to_string(kDeadEntries)});
    raw_command(admin, {"SLOWLOG", "RESET"});
    holder.unlock();
    const RawReply log = raw_command(admin, {"SLOWLOG", "GET", "16"});
    for (std::size_t i = 0; log && i < log->elements; ++i) {
      const redisReply* entry = log->element[i];
      if (entry->elements < 4 || entry->element[3]->elements == 0) continue;
      const std::string name(entry->element[3]->element[0]->str,
                             entry->element[3]->element[0]->len);
      if (name == "EVALSHA" || name == "evalsha" || name == "EVAL" || name == "eval") {
        us.push_back(entry->element[2]->integer);
      }
    }
  }
  raw_command(admin, {"CONFIG", "SET", "slowlog-log-slower-than", "10000"});
  raw_command(admin, {"DEL", list, info});
  return us;
}

}  // namespace

Json fleet_liveness_figures(const Config& config, const FleetSettings& settings,
                            const redlock::Endpoint& endpoint, const SampleServer& sample,
                            double busy_commands_per_s) {
  const int n = settings.sizes.back();
  std::cout << fmt::format(
      "  issue 41: {} idle waiters behind a held lock, then a release "
      "behind {} dead entries ...\n",
      n, kDeadEntries);
  std::cout.flush();
  const IdleFigure idle = measure_idle(config, n, endpoint, sample);
  const std::vector<std::int64_t> dead = measure_dead_release(endpoint);
  const double share = ratio(idle.commands_per_s, busy_commands_per_s);
  const std::int64_t longest = dead.empty() ? -1 : *std::max_element(dead.begin(), dead.end());
  std::cout << fmt::format(
      "  idle: {} of {} waiters queued; {} server cmds/s over {} s (guards, watchers, PINGs, "
      "renewals; ttl {} s); the busy default Lock at N = {}: {} cmds/s\n",
      idle.queued, n, num(idle.commands_per_s), num(idle.window_s), config.quick ? 2 : 30, n,
      num(busy_commands_per_s));
  std::cout << "  idle, by command: " << idle.by_command << "\n";
  std::string each;
  for (const std::int64_t v : dead) each += (each.empty() ? "" : ", ") + std::to_string(v);
  std::cout << "  release behind " << kDeadEntries << " dead entries, server time (us): " << each
            << "\n  goals of #41:\n";
  Goals goals;
  goals.verdict(fmt::format("guard traffic at {} idle waiters <= 3% of the busy run", n), share,
                num(100 * share) + "%", busy_commands_per_s > 0 && share <= 0.03);
  goals.verdict(fmt::format("release script behind {} dead entries <= 1 ms", kDeadEntries),
                static_cast<double>(longest), num(static_cast<double>(longest) / 1000) + " ms",
                longest >= 0 && longest <= 1000);
  Json j = Json::object();
  j.set("idle_waiters", n);
  j.set("idle_queued", idle.queued);
  j.set("idle_window_s", idle.window_s);
  j.set("idle_commands_per_s", idle.commands_per_s);
  j.set("busy_commands_per_s", busy_commands_per_s);
  j.set("idle_by_command", idle.by_command);
  Json rounds = Json::array();
  for (const std::int64_t v : dead) rounds.push(static_cast<double>(v));
  j.set("dead_release_us", std::move(rounds));
  j.set("goals", goals.take());
  return j;
}

}  // namespace bench
