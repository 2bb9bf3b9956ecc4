// bench/async.cpp: section 13, the async API (<redlock/asio.hpp>; issue #33's performance goals).
// Built only with the redlock::asio target, as C++20 (the coroutines).
//
// Throughput (this file): lock cycles, acquire then release, each variant in interleaved rounds
// (the median shown), for --seconds each, on servers this section starts:
//   - C = 1: one coroutine on one io_context thread, co_await async_acquire + async_release, vs
//     the blocking acquire() + Hold::release() on one thread. Goal >= 0.95x cycles/s.
//   - C = 64 distinct keys: 64 coroutines on one io_context thread, each its own Lock, vs the
//     pipelined floor (pipelined.hpp: a raw hiredis client keeping 64 cycles in flight on one
//     connection, one thread). Goals >= 0.8x cycles/s, CPU per cycle <= 1.25x the floor's (the
//     whole process's user + system CPU, getrusage, over the window: the library's own thread
//     counts).
//   - Redlock(5), C = 64: the same with Redlocks over 5 servers, vs the floor's fan-out variant
//     (every command to all 5, a cycle's release sent once all 5 answered). Goal >= 0.8x.
// Waiters and cancellation (async_waiters.cpp):
//   - N coroutines (--async-waiters, default 10,000) waiting on one key held by another Lock, on
//     one io_context thread, each its own Lock (the default options: fair). Threads of the
//     process before and while they wait (goal: 0 added); heap in use per waiting operation
//     (mallinfo2) minus the same coroutines waiting on a steady_timer (goal <= 1 KiB); then the
//     first ones are served (hold 1 ms, async_release): hand-off p50, release -> the next
//     waiter's completion, vs the blocking hand-off of section 3 (two threads alternating, hold
//     1 ms; goal <= 1.1x); served in the order they queued (the waiters start one by one, each
//     once the previous one is in the server's queue; goal: FIFO). The rest are cancelled.
//   - Cancellation: acquires on a few contended keys, each cancelled after a random delay
//   (awaitable
//     operator || with a timer: at once, in flight, waiting, queued), until --async-cancels
//     (default 10,000) were cancelled; then the keys and queue entries left on the server (goal:
//     0 and 0).
#include "async.hpp"

#include <sys/resource.h>  // getrusage

#include <malloc.h>  // mallinfo2

#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>     // std::rotate
#include <atomic>        // std::atomic
#include <chrono>        // std::chrono
#include <functional>    // std::function
#include <iostream>      // std::cout
#include <memory>        // std::unique_ptr
#include <stdexcept>     // std::runtime_error
#include <string>        // std::string
#include <system_error>  // std::system_error
#include <thread>        // std::thread
#include <utility>       // std::pair
#include <vector>        // std::vector

#include <fmt/format.h>

#include <redlock/asio.hpp>
#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "pipelined.hpp"
#include "raw.hpp"
#include "support/redis_server.hpp"

namespace bench {
namespace async {

IoThread::IoThread() : guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}

IoThread::~IoThread() {
  guard_.reset();
  thread_.join();
}

bool aborted(const std::exception_ptr& e) noexcept {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error& error) {
    return error.code() == asio::error::operation_aborted;
  } catch (...) {
    return false;
  }
}

std::int64_t heap_in_use() noexcept {
  const struct mallinfo2 m = ::mallinfo2();
  return static_cast<std::int64_t>(m.uordblks + m.hblkhd);
}

std::int64_t process_rusage_ns() noexcept {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto ns = [](const timeval& tv) {
    return static_cast<std::int64_t>(tv.tv_sec) * 1'000'000'000 + tv.tv_usec * 1'000;
  };
  return ns(usage.ru_utime) + ns(usage.ru_stime);
}

namespace {

using std::chrono::milliseconds;
using Locks = std::vector<std::unique_ptr<redlock::LockBase>>;

// A load for one measurement: runs on a thread of its own until `stop`, adding every completed
// cycle to `cycles`; returns once its work in flight is done.
using Body = std::function<void(const std::atomic<bool>& stop, std::atomic<std::uint64_t>& cycles)>;

struct Rate {
  double cycles_per_s{0};
  double cpu_ns{0};       // the process's user + system CPU per cycle
  double server_cmds{0};  // commands the servers ran per cycle (INFO commandstats, INFO's aside)
};

// The commands the servers of a group ran so far (the sum of INFO commandstats, INFO's aside).
using Commands = std::function<double()>;

Commands commands_of(const std::vector<RawContext>& admins) {
  return [&admins] {
    double calls = 0;
    for (const RawContext& c : admins) {
      for (const auto& [name, n] : command_calls(c.get())) {
        if (name != "info") calls += static_cast<double>(n);
      }
    }
    return calls;
  };
}

// Runs `body` on a thread, lets it warm up, then counts its cycles, the process's CPU and the
// servers' commands for `seconds`. Rethrows what the body threw.
Rate measure(double seconds, const Body& body, const Commands& commands) {
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> cycles{0};
  std::exception_ptr error;
  std::thread worker([&] {
    try {
      body(stop, cycles);
    } catch (...) {
      error = std::current_exception();
    }
  });
  std::this_thread::sleep_for(milliseconds(200));  // connections, script cache, first waits
  const double cmds0 = commands();  // outside the CPU window (a few cycles' commands too many)
  const std::uint64_t c0 = cycles.load();
  const std::int64_t t0 = now_ns();
  const std::int64_t cpu0 = process_rusage_ns();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const std::uint64_t c1 = cycles.load();
  const std::int64_t t1 = now_ns();
  const std::int64_t cpu1 = process_rusage_ns();
  const double cmds1 = commands();
  stop.store(true);
  worker.join();
  if (error) std::rethrow_exception(error);
  if (c1 == c0) throw std::runtime_error("no cycle completed in the window");
  const auto n = static_cast<double>(c1 - c0);
  return Rate{n * 1e9 / static_cast<double>(t1 - t0), static_cast<double>(cpu1 - cpu0) / n,
              (cmds1 - cmds0) / n};
}

// Median over `rounds` rounds of each body, the bodies interleaved (the order rotating).
std::vector<Rate> interleave(int rounds, double seconds, const std::vector<Body>& bodies,
                             const Commands& commands) {
  std::vector<std::vector<double>> rate(bodies.size());
  std::vector<std::vector<double>> cpu(bodies.size());
  std::vector<std::vector<double>> cmds(bodies.size());
  std::vector<std::size_t> order(bodies.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int round = 0; round < rounds; ++round) {
    for (const std::size_t i : order) {
      const Rate r = measure(seconds, bodies[i], commands);
      rate[i].push_back(r.cycles_per_s);
      cpu[i].push_back(r.cpu_ns);
      cmds[i].push_back(r.server_cmds);
    }
    std::rotate(order.begin(), order.begin() + 1, order.end());
  }
  std::vector<Rate> out;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    out.push_back(Rate{median(rate[i]), median(cpu[i]), median(cmds[i])});
  }
  return out;
}

asio::awaitable<void> cycle_loop(redlock::LockBase& lock, const std::atomic<bool>& stop,
                                 std::atomic<std::uint64_t>& cycles) {
  while (!stop.load(std::memory_order_relaxed)) {
    redlock::Hold hold = co_await redlock::async_acquire(lock, asio::use_awaitable);
    co_await redlock::async_release(hold, asio::use_awaitable);
    cycles.fetch_add(1, std::memory_order_relaxed);
  }
}

// One coroutine per lock, all on one io_context run by the measuring thread.
Body async_body(Locks& locks) {
  return [&locks](const std::atomic<bool>& stop, std::atomic<std::uint64_t>& cycles) {
    asio::io_context io(1);
    std::exception_ptr error;
    for (auto& lock : locks) {
      asio::co_spawn(io, cycle_loop(*lock, stop, cycles), [&error](std::exception_ptr e) {
        if (e && !error) error = e;
      });
    }
    io.run();
    if (error) std::rethrow_exception(error);
  };
}

Body blocking_body(redlock::LockBase& lock) {
  return [&lock](const std::atomic<bool>& stop, std::atomic<std::uint64_t>& cycles) {
    while (!stop.load(std::memory_order_relaxed)) {
      redlock::Hold hold = lock.acquire();
      hold.release();
      cycles.fetch_add(1, std::memory_order_relaxed);
    }
  };
}

Body floor_body(PipelinedFloor& floor) {
  return [&floor](const std::atomic<bool>& stop, std::atomic<std::uint64_t>& cycles) {
    floor.run(stop, cycles);
  };
}

std::vector<std::string> keys(const std::string& name, int count) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back(redlock::test::key(name + std::to_string(i)));
  return out;
}

// What one comparison measured: a baseline and a variant, in interleaved rounds.
struct Pair {
  std::string baseline;
  std::string variant;
  int concurrency{1};
  Rate base;
  Rate mine;
  // Rows for context (no goal), measured in the same rounds, compared with the baseline too.
  std::vector<std::pair<std::string, Rate>> context;
};

Json pair_json(const Pair& p) {
  auto rate = [](const Rate& r) {
    return Json::object()
        .set("cycles_per_s", r.cycles_per_s)
        .set("cpu_us_per_cycle", r.cpu_ns / 1e3)
        .set("server_commands_per_cycle", r.server_cmds);
  };
  Json j = Json::object();
  j.set("concurrency", p.concurrency);
  j.set("baseline", p.baseline).set("baseline_figures", rate(p.base));
  j.set("variant", p.variant).set("variant_figures", rate(p.mine));
  j.set("ratio_cycles_per_s", ratio(p.mine.cycles_per_s, p.base.cycles_per_s));
  j.set("ratio_cpu_per_cycle", ratio(p.mine.cpu_ns, p.base.cpu_ns));
  Json context = Json::array();
  for (const auto& [name, r] : p.context) {
    context.push(Json::object()
                     .set("variant", name)
                     .set("figures", rate(r))
                     .set("ratio_cycles_per_s", ratio(r.cycles_per_s, p.base.cycles_per_s))
                     .set("ratio_cpu_per_cycle", ratio(r.cpu_ns, p.base.cpu_ns)));
  }
  if (!p.context.empty()) j.set("context", std::move(context));
  return j;
}

void add_rows(Table& table, const Pair& p) {
  const std::string c = std::to_string(p.concurrency);
  table.row({p.baseline, c, num(p.base.cycles_per_s), "-", num(p.base.cpu_ns / 1e3), "-",
             num(p.base.server_cmds)});
  auto row = [&](const std::string& name, const Rate& r) {
    table.row({name, c, num(r.cycles_per_s), times(ratio(r.cycles_per_s, p.base.cycles_per_s)),
               num(r.cpu_ns / 1e3), times(ratio(r.cpu_ns, p.base.cpu_ns)), num(r.server_cmds)});
  };
  row(p.variant, p.mine);
  for (const auto& [name, r] : p.context) row("  " + name, r);
}

constexpr int kConcurrency = 64;

// C = 1 and C = 64 on one server.
std::vector<Pair> one_server(const Config& config) {
  redlock::test::RedisServer server;
  const redlock::Endpoint endpoint = endpoint_of(server, config.timeout);
  redlock::Client client(endpoint);
  std::vector<RawContext> admins;
  admins.push_back(raw_connect(endpoint));
  const Commands commands = commands_of(admins);
  std::vector<Pair> out;

  redlock::Lock blocking(client, redlock::test::key("s13:c1:blocking"));
  Locks single;
  single.push_back(std::make_unique<redlock::Lock>(client, redlock::test::key("s13:c1:async")));
  std::vector<Rate> r = interleave(config.rounds, config.seconds,
                                   {blocking_body(blocking), async_body(single)}, commands);
  out.push_back(Pair{"blocking acquire() + Hold::release()",
                     "co_await async_acquire + async_release",
                     1,
                     r[0],
                     r[1],
                     {}});

  // The default options (fair), and for context fair = false: the floor's very commands.
  PipelinedFloor floor({endpoint}, keys("s13:floor:", kConcurrency));
  redlock::LockOptions plain;
  plain.fair = false;
  Locks many;
  Locks many_plain;
  for (const std::string& k : keys("s13:c64:", kConcurrency)) {
    many.push_back(std::make_unique<redlock::Lock>(client, k));
    many_plain.push_back(std::make_unique<redlock::Lock>(client, k + ":plain", plain));
  }
  r = interleave(config.rounds, config.seconds,
                 {floor_body(floor), async_body(many), async_body(many_plain)}, commands);
  out.push_back(Pair{"raw pipelined floor, 1 connection",
                     "async Lock cycles",
                     kConcurrency,
                     r[0],
                     r[1],
                     {{"fair = false (context, no goal)", r[2]}}});
  return out;
}

// Redlock(5), C = 64.
Pair five_servers(const Config& config) {
  redlock::test::ServerGroup group(5);
  std::vector<redlock::Endpoint> endpoints;
  std::vector<redlock::Client> clients;
  std::vector<RawContext> admins;
  for (std::size_t i = 0; i < group.size(); ++i) {
    endpoints.push_back(endpoint_of(group[i], config.timeout));
    clients.emplace_back(endpoints.back());
    admins.push_back(raw_connect(endpoints.back()));
  }
  PipelinedFloor floor(endpoints, keys("s13:fan:", kConcurrency));
  Locks many;
  for (const std::string& k : keys("s13:r5:", kConcurrency)) {
    many.push_back(std::make_unique<redlock::Redlock>(clients, k));
  }
  const std::vector<Rate> r = interleave(
      config.rounds, config.seconds, {floor_body(floor), async_body(many)}, commands_of(admins));
  return Pair{"raw pipelined fan-out floor, 5 connections",
              "async Redlock(5) cycles",
              kConcurrency,
              r[0],
              r[1],
              {}};
}

void throughput_part(const Config& config, Json& out, Goals& goals) {
  std::vector<Pair> pairs = one_server(config);
  pairs.push_back(five_servers(config));
  Table table({"variant", "C", "cycles/s", "ratio", "cpu us/cycle", "ratio", "server cmds/cycle"});
  Json rows = Json::array();
  for (const Pair& p : pairs) {
    add_rows(table, p);
    rows.push(pair_json(p));
  }
  table.print(std::cout);
  std::cout << "  median of " << config.rounds << " interleaved rounds of " << config.seconds
            << " s; cpu = the whole process's user + system CPU per cycle (getrusage); ratio: "
               "against the group's first row; server cmds/cycle: INFO commandstats, every "
               "server's, those inside scripts included\n";
  out.set("throughput", std::move(rows));
  std::cout << "  goals (#33), cycles:\n";
  auto rate = [](const Pair& p) { return ratio(p.mine.cycles_per_s, p.base.cycles_per_s); };
  const double c1 = rate(pairs[0]);
  goals.verdict("C = 1: async cycles/s >= 0.95x blocking", c1, times(c1), c1 >= 0.95);
  const double c64 = rate(pairs[1]);
  goals.verdict("C = 64: async Lock cycles/s >= 0.8x the pipelined floor", c64, times(c64),
                c64 >= 0.8);
  const double cpu = ratio(pairs[1].mine.cpu_ns, pairs[1].base.cpu_ns);
  goals.verdict("C = 64: CPU per cycle <= 1.25x the floor's", cpu, times(cpu), cpu <= 1.25);
  const double r5 = rate(pairs[2]);
  goals.verdict("C = 64: async Redlock(5) cycles/s >= 0.8x the fan-out floor", r5, times(r5),
                r5 >= 0.8);
}

}  // namespace
}  // namespace async

void section_async(const Config& config, Report& report) {
  std::cout << "\n[13] Async (<redlock/asio.hpp>): lock cycles on one io_context thread against "
               "the blocking API and a pipelined raw floor; waiters, hand-off and cancellation\n";
  std::cout.flush();
  Json j = Json::object();
  j.set("what", "the async API: cycles, waiting coroutines, cancellation");
  j.set("rounds", config.rounds);
  j.set("seconds_per_run", config.seconds);
  Goals goals;
  using Part = void (*)(const Config&, Json&, Goals&, Report&);
  const std::pair<const char*, Part> parts[] = {
      {"throughput",
       [](const Config& c, Json& out, Goals& g, Report&) { async::throughput_part(c, out, g); }},
      {"waiters", async::waiters_part},
      {"cancellation", async::cancellation_part},
  };
  for (const auto& [name, part] : parts) {
    try {
      part(config, j, goals, report);
    } catch (const std::exception& e) {
      report.errors.push_back(fmt::format("section 13: {}: {}", name, e.what()));
      std::cout << "  " << name << " failed: " << e.what() << "\n";
    }
  }
  j.set("goals", goals.take());
  report.sections.set("13_async", std::move(j));
}

}  // namespace bench
