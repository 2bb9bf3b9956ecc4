// examples/demo/worker.cpp: one worker process of redlock-demo (`redlock-demo --worker ...`).
//
// Its threads share one lock object (a Redlock over several nodes, a Lock for one endpoint), as
// they would share a std::mutex: the threads of one process queue locally and one at a time asks
// Redis. Each hold does a read-sleep-write increment of a counter on the checker server, passing
// the hold's fence token along, and reports the hold to the coordinator on stdout (protocol in
// demo.hpp).
#include <poll.h>       // poll
#include <signal.h>     // sigaction, SIGPIPE
#include <sys/prctl.h>  // prctl, PR_SET_PDEATHSIG
#include <time.h>       // clock_gettime
#include <unistd.h>     // read, write, getppid

#include <algorithm>    // std::max
#include <atomic>       // std::atomic
#include <cerrno>       // errno
#include <chrono>       // std::chrono
#include <cinttypes>    // PRId64, PRIu64
#include <cstdio>       // std::snprintf
#include <exception>    // std::exception
#include <functional>   // std::cref
#include <memory>       // std::shared_ptr, std::unique_ptr
#include <mutex>        // std::mutex
#include <stdexcept>    // std::runtime_error
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <thread>       // std::thread
#include <vector>       // std::vector

#include <redlock/redlock.hpp>  // Client, Lock, Redlock, Script, errors, set_log_handler

#include "demo.hpp"
#include "metrics/prometheus_observer.hpp"  // PrometheusObserver (--metrics)
#include "worker_parts.hpp"                 // Shared, increment(), hold_line(), run_async()

namespace demo {

std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

const char* const kFencedReadLua = R"(local fence = tonumber(ARGV[1])
if fence > 0 then
  if fence < tonumber(redis.call('get', KEYS[2]) or '0') then return -1 end
  redis.call('set', KEYS[2], ARGV[1])
end
return tonumber(redis.call('get', KEYS[1]) or '0'))";

const char* const kFencedWriteLua = R"(local fence = tonumber(ARGV[1])
if fence > 0 then
  if fence < tonumber(redis.call('get', KEYS[2]) or '0') then return 0 end
  redis.call('set', KEYS[2], ARGV[1])
end
redis.call('set', KEYS[1], ARGV[2])
redis.call('incr', KEYS[3])
return 1)";

namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int /*signo*/) { g_stop.store(true); }

// Writes whole lines to the coordinator. A line is far below PIPE_BUF, so each write() is atomic;
// the mutex only keeps the threads from interleaving partial writes after an EINTR.
class Channel {
 public:
  void send(std::string_view line) noexcept {
    std::string buffer(line);
    buffer.push_back('\n');
    std::lock_guard<std::mutex> guard(mutex_);
    std::size_t sent = 0;
    while (sent < buffer.size()) {
      const ssize_t n = ::write(STDOUT_FILENO, buffer.data() + sent, buffer.size() - sent);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // the coordinator is gone (EPIPE): nobody to work for
        g_stop.store(true);
        return;
      }
      sent += static_cast<std::size_t>(n);
    }
  }

 private:
  std::mutex mutex_;
};

Channel g_channel;

}  // namespace

void send_line(std::string_view line) noexcept { g_channel.send(line); }

bool stop_requested() noexcept { return g_stop.load(); }

std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

// The critical section: read the counter, "think" 1 ms, write it back plus one. Both steps carry
// the fence token, so a holder whose lease ran out meanwhile is refused by the counter itself.
// Fencing only the write would not do for a read-modify-write: a stale holder could still write
// its old value + 1 after a newer holder had read, and one of the two increments would be lost.
Outcome increment(const Shared& s, std::uint64_t fence, const redlock::LeaseToken& lease) {
  const std::string fence_text = std::to_string(fence);
  try {
    const redlock::Reply got =
        s.checker.eval(s.read, {s.keys.counter, s.keys.highest_fence}, {fence_text});
    if (got.integer() < 0) return Outcome::read_rejected;
    std::this_thread::sleep_for(1ms);
    // Cheap local check first: do not even try if the lease is known to be gone.
    if (lease.lost()) return Outcome::lease_lost;
    const std::string value = std::to_string(got.integer() + 1);
    const redlock::Reply put = s.checker.eval(
        s.write, {s.keys.counter, s.keys.highest_fence, s.keys.applied}, {fence_text, value});
    return put.integer() == 1 ? Outcome::written : Outcome::write_rejected;
  } catch (const redlock::Error& e) {
    g_channel.send("E counter: " + one_line(e.what()));
    return Outcome::error;
  }
}

std::string hold_line(const Shared& s, int thread, const Hold& h) {
  char line[160];
  std::snprintf(line, sizeof line, "H %d %d %" PRId64 " %" PRId64 " %" PRIu64 " %c %d", s.config.id,
                thread, h.start_ns, h.end_ns, h.fence, static_cast<char>(h.outcome),
                h.valid_at_end ? 1 : 0);
  return line;
}

namespace {

void thread_main(const Shared& s, int thread) {
  while (!g_stop.load()) {
    bool held = false;
    try {
      // Not lock(): a bounded wait lets the thread notice the stop request.
      held = s.lock.try_lock_for(250ms);
    } catch (const redlock::Error& e) {  // no node answered at all
      g_channel.send("E lock: " + one_line(e.what()));
      std::this_thread::sleep_for(100ms);
      continue;
    }
    if (!held) continue;  // contention: try again
    Hold h;
    h.start_ns = monotonic_ns();
    h.fence = s.lock.fence();
    const redlock::LeaseToken lease = s.lock.lease();
    h.outcome = increment(s, h.fence, lease);
    h.end_ns = monotonic_ns();
    h.valid_at_end = !lease.lost();  // checked after end_ns: valid then means valid at end_ns
    s.lock.unlock();
    g_channel.send(hold_line(s, thread, h));
  }
}

// Reads stdin until a line "go" (true) or EOF/stop (false).
bool wait_for_go() {
  std::string got;
  char c = 0;
  while (!g_stop.load()) {
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return got == "go";
    got.push_back(c);
  }
  return false;
}

}  // namespace

void wait_for_stop() {
  while (!g_stop.load()) {
    pollfd fd{STDIN_FILENO, POLLIN, 0};
    const int rc = ::poll(&fd, 1, 100);
    if (rc <= 0) continue;  // timeout or EINTR: look at g_stop again
    char buffer[64];
    const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
  }
  g_stop.store(true);
}

#ifndef REDLOCK_DEMO_ASYNC  // built without redlock::asio: main() refuses --async
void run_async(const Shared&) {
  throw std::runtime_error("built without the asio component (redlock::asio): no --async");
}
#endif

int run_worker(const WorkerConfig& config) {
  // hiredis writes with write(), not send(MSG_NOSIGNAL), and redlock does not block SIGPIPE: a
  // write to a connection the server has reset would kill this process. Any program that may
  // outlive a Redis server wants this line.
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction stop {};
  stop.sa_handler = on_stop_signal;
  ::sigemptyset(&stop.sa_mask);
  ::sigaction(SIGINT, &stop, nullptr);
  ::sigaction(SIGTERM, &stop, nullptr);
  // If the coordinator dies, stop too (stdin's EOF says the same, this is the belt and braces).
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (config.parent > 0 && ::getppid() != config.parent) return 1;

  redlock::set_log_handler(
      [](redlock::LogLevel, std::string_view message) { g_channel.send("L " + one_line(message)); },
      redlock::LogLevel::warn);

  try {
    std::vector<redlock::Client> nodes;
    for (const auto& uri : config.nodes) nodes.emplace_back(redlock::Endpoint::parse(uri));
    redlock::Endpoint checker_endpoint = redlock::Endpoint::parse(config.checker);
    // The counter is not what this demo puts under stress: give it room.
    checker_endpoint.command_timeout = std::max(checker_endpoint.command_timeout, 2000ms);
    const redlock::Client checker(checker_endpoint);

    redlock::LockOptions options;
    options.ttl = config.ttl;
    options.fencing = config.fencing;
    // One endpoint (a server, a Sentinel set, a Cluster): a Lock; several: a Redlock over them.
    std::unique_ptr<redlock::LockBase> lock;
    if (nodes.size() == 1) {
      lock = std::make_unique<redlock::Lock>(nodes.front(), config.prefix + "lock", options);
    } else {
      lock = std::make_unique<redlock::Redlock>(nodes, config.prefix + "lock", options);
    }

    // Connect before the clock starts, so the first holds do not pay for it.
    checker.ping();
    for (const auto& node : nodes) {
      try {
        node.ping();
      } catch (const redlock::Error& e) {
        g_channel.send("L " + one_line(e.what()));
      }
    }
    // --metrics: this process's lock metrics, written as the worker ends.
    std::shared_ptr<redlock_examples::PrometheusObserver> metrics;
    if (!config.metrics.empty()) {
      metrics = std::make_shared<redlock_examples::PrometheusObserver>();
      redlock::set_observer(metrics);
    }
    g_channel.send("ready");
    if (!wait_for_go()) return 0;

    Shared shared{config, *lock, checker, CounterKeys(config.prefix)};
    if (config.async) {
      run_async(shared);  // the same holds, acquired and released on an io_context
    } else {
      std::vector<std::thread> threads;
      threads.reserve(static_cast<std::size_t>(config.threads));
      for (int t = 0; t < config.threads; ++t) {
        threads.emplace_back(thread_main, std::cref(shared), t);
      }
      wait_for_stop();
      for (auto& t : threads) t.join();
    }
    if (metrics) metrics->write_file(config.metrics);
  } catch (const std::exception& e) {
    g_channel.send("E fatal: " + one_line(e.what()));
    return 1;
  }
  g_channel.send("done");
  return 0;
}

}  // namespace demo
