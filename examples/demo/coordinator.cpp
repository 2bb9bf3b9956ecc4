// examples/demo/coordinator.cpp: the main process of redlock-demo.
//
// Starts the servers (five lock nodes and a sixth for the counter, unless --redis names existing
// ones), execs the worker processes, lets them run, injects the faults on schedule, draws the
// progress line, collects every hold the workers report, and hands the record to report.cpp.
//
// Faults are injected from the main thread on purpose: the harness starts (and restarts) servers
// with PR_SET_PDEATHSIG, which fires when the *thread* that started a server exits.
#include <fcntl.h>     // O_CLOEXEC
#include <poll.h>      // poll
#include <signal.h>    // sigaction, kill
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // fork, execv, pipe2, isatty

#include <algorithm>    // std::min, std::max
#include <atomic>       // std::atomic
#include <cerrno>       // errno
#include <chrono>       // std::chrono
#include <cinttypes>    // SCNd64, SCNu64
#include <cstdint>      // std::uint64_t
#include <cstdio>       // std::printf, std::fprintf, std::sscanf
#include <cstring>      // std::strerror
#include <deque>        // std::deque
#include <exception>    // std::exception
#include <memory>       // std::unique_ptr
#include <mutex>        // std::mutex
#include <random>       // std::random_device
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <thread>       // std::thread
#include <utility>      // std::pair
#include <vector>       // std::vector

#include <redlock/redlock.hpp>  // Client, Endpoint, Redlock, errors

#include "cluster_faults.hpp"  // ClusterFaults: slot migration, failover
#include "demo.hpp"
#include "sentinel_faults.hpp"             // SentinelFaults: failover, master killed
#include "support/throwaway_cluster.hpp"   // ThrowawayCluster: --topology cluster
#include "support/throwaway_sentinel.hpp"  // ThrowawaySentinel: --topology sentinel
#include "support/throwaway_servers.hpp"   // ThrowawayServers: pause/kill/restart

namespace demo {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

constexpr std::int64_t kNsPerMs = 1'000'000;
constexpr std::int64_t kNsPerS = 1'000'000'000;
constexpr std::size_t kNodes = 5;  // lock nodes the demo starts; one more holds the counter

std::atomic<bool> g_interrupted{false};

extern "C" void on_interrupt(int /*signo*/) { g_interrupted.store(true); }

double seconds(std::int64_t ns) { return static_cast<double>(ns) / kNsPerS; }
std::int64_t ns_of(milliseconds d) { return static_cast<std::int64_t>(d.count()) * kNsPerMs; }
std::string format_seconds(std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds(ns));
  return text;
}

// "redlock-demo:<pid>:<random hex>:" so that runs against shared servers never collide.
std::string make_prefix() {
  std::random_device rd;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08x%08x", rd(), rd());
  return "redlock-demo:" + std::to_string(::getpid()) + ":" + hex + ":";
}

// ---- Terminal output --------------------------------------------------------------------------

// stderr carries the live progress line and fault events; stdout the banner and the summary.
class Console {
 public:
  Console() : tty_(::isatty(STDERR_FILENO) == 1) {}
  bool tty() const { return tty_; }

  // Replaces the progress line (on a tty), or prints it as a plain line (otherwise).
  void progress(const std::string& line) {
    if (tty_) {
      std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  // A line of its own, above the progress line.
  void event(const std::string& line) {
    clear();
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
  void clear() {
    if (tty_ && drawn_) std::fprintf(stderr, "\r\x1b[K");
    drawn_ = false;
  }

 private:
  bool tty_;
  bool drawn_{false};
};

// ---- Workers ----------------------------------------------------------------------------------

struct Worker {
  int id{0};
  pid_t pid{-1};
  int to_fd{-1};    // its stdin (write end)
  int from_fd{-1};  // its stdout (read end)
  bool exited{false};
  int status{0};
};

// Forks and execs this binary in --worker mode with pipes on its stdin and stdout.
void spawn(Worker& w, std::vector<std::string> args) {
  int to_child[2];
  int from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  if (::pipe2(from_child, O_CLOEXEC) != 0) {
    ::close(to_child[0]);
    ::close(to_child[1]);
    throw std::runtime_error("pipe2 failed");
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {  // child: async-signal-safe calls only, then exec
    if (::dup2(to_child[0], STDIN_FILENO) < 0 || ::dup2(from_child[1], STDOUT_FILENO) < 0) {
      ::_exit(127);
    }
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(to_child[0]);
  ::close(from_child[1]);
  if (pid < 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(fork_errno));
  }
  w.pid = pid;
  w.to_fd = to_child[1];
  w.from_fd = from_child[0];
}

void send_line(const Worker& w, std::string_view line) {
  std::string buffer(line);
  buffer.push_back('\n');
  // A worker that died already gives EPIPE (SIGPIPE is ignored); its exit is reported anyway.
  [[maybe_unused]] const ssize_t n = ::write(w.to_fd, buffer.data(), buffer.size());
}

// What the workers report, collected by the reader thread.
struct Inbox {
  std::mutex mutex;
  std::vector<Hold> holds;              // guarded by mutex
  std::vector<bool> ready;              // guarded by mutex
  std::vector<bool> closed;             // stdout at EOF; guarded by mutex
  std::uint64_t lock_errors{0};         // guarded by mutex
  std::string last_lock_error;          // guarded by mutex
  std::string last_counter_error;       // guarded by mutex
  std::uint64_t warnings{0};            // guarded by mutex
  std::string last_warning;             // guarded by mutex
  std::vector<std::string> fatal;       // guarded by mutex
  std::atomic<std::uint64_t> count{0};  // holds so far (for the progress line)
  std::atomic<std::uint64_t> stale{0};  // holds refused by the fence
  std::atomic<int> open{0};             // workers whose stdout is still open
};

void handle_line(Inbox& inbox, std::size_t index, std::string_view line) {
  if (line.size() >= 2 && line[0] == 'H' && line[1] == ' ') {
    Hold h;
    char outcome = 0;
    int valid = 0;
    const std::string text(line);
    if (std::sscanf(text.c_str(), "H %d %d %" SCNd64 " %" SCNd64 " %" SCNu64 " %c %d", &h.process,
                    &h.thread, &h.start_ns, &h.end_ns, &h.fence, &outcome, &valid) == 7) {
      h.outcome = static_cast<Outcome>(outcome);
      h.valid_at_end = valid != 0;
      if (h.outcome == Outcome::read_rejected || h.outcome == Outcome::write_rejected)
        ++inbox.stale;
      std::lock_guard<std::mutex> guard(inbox.mutex);
      inbox.holds.push_back(h);
      ++inbox.count;
    }
    return;
  }
  std::lock_guard<std::mutex> guard(inbox.mutex);
  if (line == "ready") {
    inbox.ready[index] = true;
  } else if (line.rfind("E fatal: ", 0) == 0) {
    inbox.fatal.push_back("worker " + std::to_string(index + 1) + ": " +
                          std::string(line.substr(9)));
  } else if (line.rfind("E counter: ", 0) == 0) {  // also counted as an Outcome::error hold
    inbox.last_counter_error = std::string(line.substr(11));
  } else if (line.rfind("E ", 0) == 0) {
    ++inbox.lock_errors;
    inbox.last_lock_error = std::string(line.substr(2));
  } else if (line.rfind("L ", 0) == 0) {
    ++inbox.warnings;
    inbox.last_warning = std::string(line.substr(2));
  }
}

// Reads every worker's stdout until all of them are closed.
void reader_main(Inbox& inbox, const std::vector<Worker>& workers) {
  std::vector<std::string> partial(workers.size());
  std::vector<bool> open(workers.size(), true);
  char buffer[65536];
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> who;
    for (std::size_t i = 0; i < workers.size(); ++i) {
      if (!open[i]) continue;
      fds.push_back(pollfd{workers[i].from_fd, POLLIN, 0});
      who.push_back(i);
    }
    if (fds.empty()) return;
    const int rc = ::poll(fds.data(), fds.size(), 200);
    if (rc < 0 && errno != EINTR) return;
    for (std::size_t k = 0; rc > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const std::size_t i = who[k];
      const ssize_t n = ::read(fds[k].fd, buffer, sizeof buffer);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        open[i] = false;
        --inbox.open;
        std::lock_guard<std::mutex> guard(inbox.mutex);
        inbox.closed[i] = true;
        continue;
      }
      partial[i].append(buffer, static_cast<std::size_t>(n));
      std::size_t from = 0;
      for (std::size_t nl; (nl = partial[i].find('\n', from)) != std::string::npos; from = nl + 1) {
        handle_line(inbox, i, std::string_view(partial[i]).substr(from, nl - from));
      }
      partial[i].erase(0, from);
    }
  }
}

// Reaps the workers, waiting at most `grace` before SIGKILL. Records how each one ended.
void reap(std::vector<Worker>& workers, milliseconds grace, std::vector<std::string>& failures) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (;;) {
    bool all = true;
    for (auto& w : workers) {
      if (w.exited || w.pid <= 0) continue;
      if (::waitpid(w.pid, &w.status, WNOHANG) == w.pid) {
        w.exited = true;
        if (!WIFEXITED(w.status) || WEXITSTATUS(w.status) != 0) {
          failures.push_back("worker " + std::to_string(w.id) + " exited with " +
                             (WIFSIGNALED(w.status)
                                  ? "signal " + std::to_string(WTERMSIG(w.status))
                                  : "status " + std::to_string(WEXITSTATUS(w.status))));
        }
      } else {
        all = false;
      }
    }
    if (all) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(20ms);
  }
  for (auto& w : workers) {
    if (w.exited || w.pid <= 0) continue;
    ::kill(w.pid, SIGKILL);
    ::waitpid(w.pid, &w.status, 0);
    w.exited = true;
    failures.push_back("worker " + std::to_string(w.id) + " did not stop within " +
                       std::to_string(grace.count()) + " ms; killed");
  }
}

// ---- Faults -----------------------------------------------------------------------------------

// The schedule, in nanoseconds from the start of the run (negative: not scheduled).
struct FaultPlan {
  std::size_t pause_node{1};  // "node 2"
  std::int64_t pause_at{-1};
  std::int64_t resume_at{-1};
  std::size_t kill_node{3};  // "node 4"
  std::int64_t kill_at{-1};
  std::int64_t restart_at{-1};
  bool any() const { return pause_at >= 0 || kill_at >= 0; }
};

// Pause one node early on for up to 2 s; later kill another and restart it more than a ttl later.
// The two never overlap, so at least four nodes are up at any time (quorum 3).
FaultPlan plan_faults(milliseconds duration, milliseconds ttl) {
  FaultPlan plan;
  const std::int64_t d = ns_of(duration);
  const std::int64_t pause_len = std::min<std::int64_t>(2 * kNsPerS, d / 4);
  if (pause_len >= 200 * kNsPerMs) {
    plan.pause_at = d * 15 / 100;
    plan.resume_at = plan.pause_at + pause_len;
  }
  // Redlock's persistence caveat: a node restarted without its data may grant a lock that it had
  // granted to someone else before the crash. Waiting longer than the ttl lets every lease it
  // knew about expire first.
  const std::int64_t restart_delay = ns_of(ttl) + std::max(ns_of(ttl) / 2, 500 * kNsPerMs);
  std::int64_t kill_at = d / 2;
  if (kill_at + restart_delay > d * 9 / 10) kill_at = d * 9 / 10 - restart_delay;
  if (kill_at > std::max<std::int64_t>(plan.resume_at, 0) + 100 * kNsPerMs) {
    plan.kill_at = kill_at;
    plan.restart_at = kill_at + restart_delay;
  }
  return plan;
}

std::string node_label(std::size_t index, const redlock::Endpoint& e) {
  return "node " + std::to_string(index + 1) + " (" + e.address() + ")";
}

// Carries out a FaultPlan on the servers of `group`, one step() at a time, and records what it
// did in the run record. Runs on the main thread (see the file comment).
class FaultInjector {
 public:
  FaultInjector(example::ThrowawayServers& group, const FaultPlan& plan,
                const std::vector<redlock::Endpoint>& endpoints, Console& console, RunRecord& run)
      : group_(group), plan_(plan), endpoints_(endpoints), console_(console), run_(run) {}

  // Takes every step that is due at `t` (nanoseconds since the start of the run).
  void step(std::int64_t t) {
    if (plan_.pause_at >= 0 && t >= plan_.pause_at && paused_since_ == 0) {
      group_[plan_.pause_node].pause();
      paused_since_ = monotonic_ns();
      event(paused_since_, label(plan_.pause_node) + " paused (SIGSTOP)");
    }
    if (paused_since_ > 0 && !resumed_ && t >= plan_.resume_at) {
      group_[plan_.pause_node].resume();
      resumed_ = true;
      const std::int64_t now = close_window(paused_since_, plan_.pause_node, "paused");
      event(now, label(plan_.pause_node) + " resumed after " + format_seconds(now - paused_since_));
    }
    if (plan_.kill_at >= 0 && t >= plan_.kill_at && killed_since_ == 0) {
      group_[plan_.kill_node].kill9();
      killed_since_ = monotonic_ns();
      event(killed_since_, label(plan_.kill_node) + " killed (kill -9); restart in " +
                               format_seconds(plan_.restart_at - plan_.kill_at) + " (> ttl)");
    }
    if (killed_since_ > 0 && !restarted_ && t >= plan_.restart_at) {
      std::string what;
      try {
        group_[plan_.kill_node].restart();  // same port, empty (no persistence)
        what = label(plan_.kill_node) + " restarted, empty (no persistence), " +
               format_seconds(monotonic_ns() - killed_since_) + " after the kill";
      } catch (const std::exception& e) {
        what = label(plan_.kill_node) + " could not be restarted: " + e.what();
      }
      restarted_ = true;
      event(close_window(killed_since_, plan_.kill_node, "down"), what);
    }
  }

  // Ends a fault the run was interrupted in (a paused node is resumed; a killed one stays down
  // until the harness cleans up).
  void finish() {
    if (paused_since_ > 0 && !resumed_) {
      group_[plan_.pause_node].resume();
      resumed_ = true;
      close_window(paused_since_, plan_.pause_node, "paused");
    }
    if (killed_since_ > 0 && !restarted_) {
      restarted_ = true;
      close_window(killed_since_, plan_.kill_node, "down");
    }
  }

  // For the progress line: how many nodes are up, and " (node 2 paused)" or "".
  std::pair<std::size_t, std::string> status() const {
    std::size_t up = endpoints_.size();
    std::string why;
    if (paused_since_ > 0 && !resumed_) {
      --up;
      why = " (node " + std::to_string(plan_.pause_node + 1) + " paused)";
    }
    if (killed_since_ > 0 && !restarted_) {
      --up;
      why = " (node " + std::to_string(plan_.kill_node + 1) + " killed)";
    }
    return {up, why};
  }

 private:
  std::string label(std::size_t node) const { return node_label(node, endpoints_[node]); }
  void event(std::int64_t at, const std::string& what) {
    run_.faults.push_back(FaultEvent{seconds(at - run_.start_ns), what});
    console_.event("  t=" + format_seconds(at - run_.start_ns) + "  " + what);
  }
  std::int64_t close_window(std::int64_t since, std::size_t node, const char* how) {
    const std::int64_t now = monotonic_ns();
    run_.windows.push_back(FaultWindow{since, now, "node " + std::to_string(node + 1) + " " + how});
    return now;
  }

  example::ThrowawayServers& group_;
  const FaultPlan plan_;
  const std::vector<redlock::Endpoint>& endpoints_;
  Console& console_;
  RunRecord& run_;
  std::int64_t paused_since_{0};
  bool resumed_{false};
  std::int64_t killed_since_{0};
  bool restarted_{false};
};

// ---- Monitor for --redis mode -----------------------------------------------------------------

// Pings the nodes a few times a second (servers the demo did not start: it cannot know their
// state otherwise).
class Monitor {
 public:
  explicit Monitor(const std::vector<std::string>& uris) : up_(uris.size()) {
    for (const auto& uri : uris) {
      redlock::Endpoint e = redlock::Endpoint::parse(uri);
      e.connect_timeout = std::min(e.connect_timeout, milliseconds(200));
      e.command_timeout = std::min(e.command_timeout, milliseconds(200));
      clients_.emplace_back(e);
    }
    thread_ = std::thread([this] { run(); });
  }
  ~Monitor() {
    stop_.store(true);
    thread_.join();
  }
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;
  std::size_t up() const { return up_.load(); }

 private:
  void run() {
    while (!stop_.load()) {
      std::size_t up = 0;
      for (const auto& c : clients_) {
        try {
          c.ping();
          ++up;
        } catch (const std::exception&) {
        }
      }
      up_.store(up);
      for (int i = 0; i < 3 && !stop_.load(); ++i) std::this_thread::sleep_for(100ms);
    }
  }
  std::vector<redlock::Client> clients_;
  std::atomic<std::size_t> up_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---- Progress ---------------------------------------------------------------------------------

// Holds per second over the last second or so, from samples of the running total.
class Rate {
 public:
  double update(std::int64_t now, std::uint64_t total) {
    samples_.emplace_back(now, total);
    // Keep one sample at least a second old.
    while (samples_.size() > 2 && now - samples_[1].first >= kNsPerS) samples_.pop_front();
    const auto& [then, count] = samples_.front();
    return now > then ? static_cast<double>(total - count) / seconds(now - then) : 0.0;
  }

 private:
  std::deque<std::pair<std::int64_t, std::uint64_t>> samples_;
};

// ---- Counter and keys -------------------------------------------------------------------------

// Reads the counter and the applied-writes count into `run` (or the reason it cannot).
void read_counter(const std::string& uri, const CounterKeys& keys, RunRecord& run) {
  try {
    redlock::Endpoint e = redlock::Endpoint::parse(uri);
    e.command_timeout = std::max(e.command_timeout, milliseconds(1000));
    const redlock::Client checker(e);
    const auto replies = checker.pipeline({{"GET", keys.counter}, {"GET", keys.applied}});
    auto value = [](const redlock::Reply& r) { return r.is_nil() ? 0LL : std::stoll(r.str()); };
    run.counter = value(replies.at(0));
    run.applied = value(replies.at(1));
  } catch (const std::exception& e) {
    run.counter_error = e.what();
  }
}

// Deletes this run's keys from servers the demo did not start. Best effort.
void clean_up_keys(const std::vector<std::string>& nodes, const std::string& checker,
                   const std::string& prefix) {
  const CounterKeys keys(prefix);
  const std::string lock_key = prefix + "lock";
  try {
    redlock::Client(redlock::Endpoint::parse(checker))
        .command({"DEL", keys.counter, keys.highest_fence, keys.applied});
  } catch (const std::exception&) {
  }
  for (const auto& uri : nodes) {
    try {  // the lock key is gone after its last release; its fence counter is not
      redlock::Client(redlock::Endpoint::parse(uri))
          .command({"DEL", lock_key, lock_key + ":fence"});
    } catch (const std::exception&) {
    }
  }
}

// Existing servers: fails early, and clearly, if too few of them answer.
bool check_servers(const std::vector<redlock::Client>& nodes, std::size_t quorum,
                   const std::string& checker_uri) {
  std::size_t up = 0;
  for (const auto& c : nodes) {
    try {
      c.ping();
      ++up;
    } catch (const redlock::Error& e) {
      std::fprintf(stderr, "redlock-demo: %s\n", e.what());
    }
  }
  if (up < quorum) {
    std::fprintf(stderr, "redlock-demo: only %zu of %zu nodes answer; a lock needs %zu\n", up,
                 nodes.size(), quorum);
    return false;
  }
  try {
    redlock::Client(redlock::Endpoint::parse(checker_uri)).ping();
  } catch (const redlock::Error& e) {
    std::fprintf(stderr, "redlock-demo: the counter's server: %s\n", e.what());
    return false;
  }
  return true;
}

void print_banner(const DemoConfig& config, const std::vector<redlock::Endpoint>& endpoints,
                  const RunRecord& run, const std::string& checker_uri, bool own_servers,
                  const FaultPlan& plan, const std::string& faults_note) {
  std::printf("redlock-demo: %d process(es) x %d thread(s) increment one counter under %s\n",
              config.processes, config.threads, run.lock_kind.c_str());
  std::string addresses;
  for (const auto& e : endpoints) addresses += (addresses.empty() ? "" : ", ") + e.address();
  std::printf("  lock      [%s], ttl %lld ms, fencing %s\n", addresses.c_str(),
              static_cast<long long>(config.ttl.count()), config.fencing ? "on" : "OFF");
  if (own_servers) {
    std::printf("            node timeouts %lld ms (connect and command; --node-timeout)\n",
                static_cast<long long>(config.node_timeout.count()));
  }
  std::printf("  counter   on %s%s: each hold reads it, sleeps 1 ms, writes it + 1%s\n",
              redlock::Endpoint::parse(checker_uri).address().c_str(),
              !own_servers           ? ""
              : endpoints.size() > 1 ? " (a 6th server)"
                                     : " (a server of its own)",
              config.fencing ? " (both with the fence token)" : "");
  const char* label = "  faults    ";
  if (plan.pause_at >= 0) {
    std::printf("%snode %zu paused (SIGSTOP) at %s for %s\n", label, plan.pause_node + 1,
                format_seconds(plan.pause_at).c_str(),
                format_seconds(plan.resume_at - plan.pause_at).c_str());
    label = "            ";
  }
  if (plan.kill_at >= 0) {
    std::printf(
        "%snode %zu killed (kill -9) at %s, restarted %s later: longer than the ttl, so\n"
        "            that a node which forgot its keys cannot rejoin while a lease it "
        "granted may still be valid\n",
        label, plan.kill_node + 1, format_seconds(plan.kill_at).c_str(),
        format_seconds(plan.restart_at - plan.kill_at).c_str());
  }
  if (!plan.any()) std::printf("%s%s\n", label, faults_note.c_str());
  std::printf("  running for %.1f s; Ctrl-C stops early and cleans up\n",
              static_cast<double>(config.duration.count()) / 1000.0);
  std::fflush(stdout);
}

}  // namespace

int run_demo(const DemoConfig& config) {
  // Ctrl-C / SIGTERM: stop the workers, print what we have, clean up (the harness's destructors
  // kill the servers). SA_RESETHAND: a second Ctrl-C ends the process at once.
  struct sigaction interrupt {};
  interrupt.sa_handler = on_interrupt;
  interrupt.sa_flags = SA_RESETHAND;
  ::sigemptyset(&interrupt.sa_mask);
  ::sigaction(SIGINT, &interrupt, nullptr);
  ::sigaction(SIGTERM, &interrupt, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a worker that died must not take us down with it

  Console console;
  const bool own_servers = config.redis.empty();
  const std::string prefix = make_prefix();
  RunRecord run;

  // Servers: five lock nodes and the counter's server, or the ones given.
  std::unique_ptr<example::ThrowawayServers> group;  // its destructor stops every server
  std::unique_ptr<example::ThrowawaySentinel> sentinel_set;
  std::unique_ptr<example::ThrowawayCluster> cluster_set;
  std::vector<std::string> node_uris;
  std::string checker_uri;
  const bool sentinel = own_servers && config.topology == "sentinel";
  const bool cluster = own_servers && config.topology == "cluster";
  if (cluster) {
    std::printf(
        "redlock-demo: starting a Redis Cluster (3 masters, 3 replicas) and a redis-server for "
        "the counter...\n");
    std::fflush(stdout);
    cluster_set = std::make_unique<example::ThrowawayCluster>();
    group = std::make_unique<example::ThrowawayServers>(1);
    const std::string timeout = std::to_string(config.node_timeout.count());
    node_uris.push_back(cluster_set->uri() + "?connect_timeout=" + timeout +
                        "&command_timeout=" + timeout);
    checker_uri = (*group)[0].endpoint().to_string();
  } else if (sentinel) {
    std::printf(
        "redlock-demo: starting a Sentinel set (a master, 2 replicas, 3 sentinels) and a "
        "redis-server for the counter...\n");
    std::fflush(stdout);
    sentinel_set = std::make_unique<example::ThrowawaySentinel>();
    group = std::make_unique<example::ThrowawayServers>(1);
    std::string uri = sentinel_set->uri();
    const std::string timeout = std::to_string(config.node_timeout.count());
    uri.insert(uri.find('#'), "?connect_timeout=" + timeout + "&command_timeout=" + timeout);
    node_uris.push_back(uri);
    checker_uri = (*group)[0].endpoint().to_string();
  } else if (own_servers) {
    std::printf(
        "redlock-demo: starting %zu throwaway redis-servers (%zu lock nodes + 1 for the "
        "counter)...\n",
        kNodes + 1, kNodes);
    std::fflush(stdout);
    // With --tls: throwaway certificates (examples/support), rediss:// nodes.
    group = std::make_unique<example::ThrowawayServers>(
        kNodes + 1, config.tls ? example::Tls::on : example::Tls::off);
    for (std::size_t i = 0; i < kNodes; ++i) {
      redlock::Endpoint node = (*group)[i].endpoint();  // rediss:// with its CA when --tls
      node.connect_timeout = config.node_timeout;
      node.command_timeout = config.node_timeout;
      node_uris.push_back(node.to_string());
    }
    checker_uri = (*group)[kNodes].endpoint().to_string();
  } else {
    node_uris = config.redis;
    checker_uri = config.checker.empty() ? config.redis.front() : config.checker;
  }
  std::vector<redlock::Endpoint> endpoints;
  std::vector<redlock::Client> clients;
  for (const auto& uri : node_uris) {
    endpoints.push_back(redlock::Endpoint::parse(uri));
    clients.emplace_back(endpoints.back());
  }
  // Validates the node list as the workers will use it (e.g. the same server twice throws).
  const redlock::Redlock probe(clients, prefix + "lock");
  if (!own_servers && !check_servers(clients, probe.quorum(), checker_uri))
    return 69;  // EX_UNAVAILABLE, as the help says

  FaultPlan plan;
  std::string faults_note;
  if (!own_servers) {
    faults_note = config.faults_explicit
                      ? "--faults ignored: faults are injected only into servers the demo "
                        "started itself (it pauses and kills their processes)"
                      : "none: these are servers the demo did not start";
  } else if (!config.faults) {
    faults_note = "none (--no-faults)";
  } else if (sentinel) {
    faults_note = SentinelFaults(*sentinel_set, config.duration, run, nullptr).describe();
  } else if (cluster) {
    faults_note =
        ClusterFaults(*cluster_set, prefix + "lock", config.duration, run, nullptr).describe();
  } else {
    plan = plan_faults(config.duration, config.ttl);
    if (!plan.any()) faults_note = "none: the run is too short to fit them";
  }
  run.lock_kind = describe_lock(endpoints, probe.quorum(), sentinel, cluster);
  if (config.async) run.lock_kind += ", acquired through asio (--async)";
  print_banner(config, endpoints, run, checker_uri, own_servers, plan, faults_note);

  // Workers: this binary again, in --worker mode.
  std::vector<Worker> workers(static_cast<std::size_t>(config.processes));
  Inbox inbox;
  inbox.ready.assign(workers.size(), false);
  inbox.closed.assign(workers.size(), false);
  for (std::size_t i = 0; i < workers.size(); ++i) {
    std::vector<std::string> args = {"redlock-demo",
                                     "--worker",
                                     std::to_string(i + 1),
                                     "--threads",
                                     std::to_string(config.threads),
                                     "--parent",
                                     std::to_string(::getpid()),
                                     "--checker",
                                     checker_uri,
                                     "--prefix",
                                     prefix,
                                     "--ttl-ms",
                                     std::to_string(config.ttl.count())};
    for (const auto& uri : node_uris) args.insert(args.end(), {"--node", uri});
    if (!config.fencing) args.emplace_back("--no-fencing");
    if (config.async) args.emplace_back("--async");
    if (!config.metrics.empty()) {
      args.insert(args.end(),
                  {"--metrics", config.metrics + "/worker-" + std::to_string(i + 1) + ".prom"});
    }
    workers[i].id = static_cast<int>(i + 1);
    try {
      spawn(workers[i], std::move(args));
      ++inbox.open;
    } catch (const std::exception& e) {
      run.worker_failures.push_back("cannot start worker " + std::to_string(i + 1) + ": " +
                                    e.what());
      workers.resize(i);
      break;
    }
  }
  std::thread reader(reader_main, std::ref(inbox), std::cref(workers));
  std::unique_ptr<Monitor> monitor;
  if (!own_servers) monitor = std::make_unique<Monitor>(node_uris);

  // Wait until every worker has connected, then start them all at once.
  bool all_ready = false;
  const auto ready_deadline = std::chrono::steady_clock::now() + 30s;
  while (!all_ready && !g_interrupted.load() && std::chrono::steady_clock::now() < ready_deadline) {
    {
      std::lock_guard<std::mutex> guard(inbox.mutex);
      if (!inbox.fatal.empty()) break;
      if (std::find(inbox.closed.begin(), inbox.closed.end(), true) != inbox.closed.end()) break;
      all_ready = !workers.empty() &&
                  std::find(inbox.ready.begin(), inbox.ready.end(), false) == inbox.ready.end();
    }
    if (!all_ready) std::this_thread::sleep_for(10ms);
  }

  if (all_ready) {
    run.start_ns = monotonic_ns();
    for (const auto& w : workers) send_line(w, "go");
    std::unique_ptr<FaultInjector> faults;
    if (plan.any()) faults = std::make_unique<FaultInjector>(*group, plan, endpoints, console, run);
    std::unique_ptr<TopologyFaults> topology_faults;  // a Sentinel set's or a cluster's
    const auto print = [&console](const std::string& line) { console.event(line); };
    if (cluster && config.faults) {
      topology_faults = std::make_unique<ClusterFaults>(*cluster_set, prefix + "lock",
                                                        config.duration, run, print);
    }
    if (sentinel && config.faults) {
      topology_faults =
          std::make_unique<SentinelFaults>(*sentinel_set, config.duration, run, print);
    }
    Rate rate;
    std::int64_t next_progress = 0;
    for (;;) {
      const std::int64_t now = monotonic_ns();
      const std::int64_t t = now - run.start_ns;
      if (g_interrupted.load() || t >= ns_of(config.duration) || inbox.open.load() == 0) break;
      if (faults) faults->step(t);
      if (topology_faults) topology_faults->step(t);
      // The progress line: every 200 ms on a terminal, every second otherwise.
      if (now >= next_progress) {
        const std::uint64_t count = inbox.count.load();
        std::pair<std::size_t, std::string> status{endpoints.size(), ""};
        if (faults) status = faults->status();
        if (topology_faults) status.second = topology_faults->status();
        if (monitor) status.first = monitor->up();
        char line[200];
        std::snprintf(line, sizeof line,
                      "  %5.1f s | %6llu holds | %6.1f/s | nodes up %zu/%zu%s | stale %llu",
                      seconds(t), static_cast<unsigned long long>(count), rate.update(now, count),
                      status.first, endpoints.size(), status.second.c_str(),
                      static_cast<unsigned long long>(inbox.stale.load()));
        console.progress(line);
        next_progress = now + (console.tty() ? 200 : 1000) * kNsPerMs;
      }
      std::this_thread::sleep_for(20ms);
    }
    run.seconds = seconds(monotonic_ns() - run.start_ns);
    if (faults) faults->finish();
    if (topology_faults) topology_faults->finish();
  }
  console.clear();
  run.interrupted = g_interrupted.load();
  if (run.interrupted) std::fprintf(stderr, "redlock-demo: interrupted, stopping...\n");

  // Stop: closing a worker's stdin tells it to finish its current hold and exit.
  for (auto& w : workers) {
    ::close(w.to_fd);
    w.to_fd = -1;
  }
  reap(workers, milliseconds(10'000) + 2 * config.ttl, run.worker_failures);
  reader.join();
  monitor.reset();
  for (const auto& w : workers) ::close(w.from_fd);

  {
    std::lock_guard<std::mutex> guard(inbox.mutex);
    run.holds = std::move(inbox.holds);
    run.lock_errors = inbox.lock_errors;
    run.last_lock_error = inbox.last_lock_error;
    run.last_counter_error = inbox.last_counter_error;
    run.warnings = inbox.warnings;
    run.last_warning = inbox.last_warning;
    run.worker_failures.insert(run.worker_failures.begin(), inbox.fatal.begin(), inbox.fatal.end());
  }
  if (!all_ready) {
    if (run.interrupted) {
      std::fprintf(stderr, "redlock-demo: interrupted before the run started\n");
      return 130;
    }
    run.worker_failures.emplace_back("the workers did not all get ready");
  }
  read_counter(checker_uri, CounterKeys(prefix), run);
  if (!own_servers) clean_up_keys(node_uris, checker_uri, prefix);

  run.processes = config.processes;
  run.threads = config.threads;
  run.ttl = config.ttl;
  if (own_servers) run.node_timeout = config.node_timeout;
  run.fencing = config.fencing;
  run.faults_note = faults_note;
  const int status = print_summary(run);
  if (!config.metrics.empty()) {
    std::printf("metrics: %s/worker-1..%zu.prom (Prometheus text, one file per worker)\n",
                config.metrics.c_str(), workers.size());
  }
  return status;
  // `group` goes out of scope here: every server the demo started is killed and its dir removed.
}

}  // namespace demo
