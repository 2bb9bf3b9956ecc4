// tests/torture/processes.cpp: see processes.hpp.
#include "processes.hpp"

#include <signal.h>    // kill, SIGTERM, SIGKILL
#include <spawn.h>     // posix_spawn
#include <string.h>    // strsignal
#include <sys/wait.h>  // waitpid

#include <cerrno>     // errno, ECHILD, EINTR
#include <cstring>    // std::strerror
#include <stdexcept>  // std::runtime_error
#include <thread>     // std::this_thread::sleep_for

#include "common.hpp"  // mono_ns

extern "C" char** environ;  // NOLINT(readability-redundant-declaration)

namespace redlock::torture {

namespace {
constexpr std::int64_t kMs = 1'000'000;
}  // namespace

// posix_spawn, not fork: this process has threads (one per FaultProxy), and a fork()ed copy of a
// threaded process may only call async-signal-safe functions. glibc's posix_spawn uses
// clone(CLONE_VM|CLONE_VFORK) and execs at once, which is safe here.
pid_t spawn_worker(const std::string& exe, const WorkerConfig& config) {
  std::vector<std::string> args = config.to_args();
  args.insert(args.begin(), exe);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
  return pid;
}

// Reaps finished workers. Returns how many are still running.
std::size_t reap(std::vector<Worker>& workers) {
  std::size_t running = 0;
  for (Worker& w : workers) {
    if (w.done) continue;
    int status = 0;
    const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
    if (r == w.pid || (r < 0 && errno == ECHILD)) {
      w.done = true;
      w.status = r == w.pid ? status : 0;
    } else {
      ++running;
    }
  }
  return running;
}

void kill_workers(std::vector<Worker>& workers, int sig) {
  for (Worker& w : workers) {
    if (!w.done) ::kill(w.pid, sig);
  }
}

// Stops every worker still running: SIGTERM, up to 2 s, then SIGKILL.
void stop_workers(std::vector<Worker>& workers) {
  kill_workers(workers, SIGTERM);
  const std::int64_t give_up = mono_ns() + 2000 * kMs;
  while (reap(workers) > 0 && mono_ns() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill_workers(workers, SIGKILL);
  for (Worker& w : workers) {
    if (w.done) continue;
    int status = 0;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    w.done = true;
    w.status = status;
  }
}

// Returns when to be called next.
std::int64_t kill_a_client(ClientKills& k, std::vector<Worker>& workers, const WorkerConfig& base,
                           const std::string& exe, const std::string& run_dir,
                           std::vector<std::string>& log_paths, std::FILE* log, std::int64_t now) {
  if (now < k.next || now >= k.stop) return k.next > now ? k.next : k.stop;
  k.next = now + static_cast<std::int64_t>(3000 + k.rng() % 3001) * kMs;
  std::vector<std::size_t> running;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (!workers[i].done) running.push_back(i);
  }
  if (running.empty()) return k.next;
  Worker& victim = workers[running[k.rng() % running.size()]];
  ::kill(victim.pid, SIGKILL);
  int status = 0;
  while (::waitpid(victim.pid, &status, 0) < 0 && errno == EINTR) {
  }
  victim.done = true;
  victim.status = status;
  const int victim_index = victim.index;
  const std::int64_t dead = mono_ns();
  k.killed[victim_index] = dead;
  const int next = spawn_next_worker(workers, base, exe, run_dir, log_paths);  // `victim` is stale
  if (log != nullptr) {
    std::fprintf(log, "%lld kill_worker worker=%d replaced_by=%d\n", static_cast<long long>(dead),
                 victim_index, next);
    std::fflush(log);
  }
  return k.next;
}

int spawn_next_worker(std::vector<Worker>& workers, WorkerConfig config, const std::string& exe,
                      const std::string& run_dir, std::vector<std::string>& log_paths) {
  config.index = static_cast<int>(workers.size());
  config.log_path = run_dir + "/worker-" + std::to_string(config.index) + ".log";
  const pid_t pid = spawn_worker(exe, config);
  log_paths.push_back(config.log_path);
  workers.push_back(Worker{config.index, pid});
  return config.index;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "status " + std::to_string(status);
}

}  // namespace redlock::torture
