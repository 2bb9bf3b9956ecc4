// tools/redlock-run/child.cpp: fork and exec of the command (see child.hpp).
#include "child.hpp"

#include <dirent.h>     // opendir, readdir: the descriptors inherited at start
#include <fcntl.h>      // O_CLOEXEC
#include <sys/prctl.h>  // prctl(PR_SET_PDEATHSIG)
#include <sys/wait.h>   // waitpid
#include <termios.h>    // tcgetpgrp, tcsetpgrp
#include <unistd.h>     // fork, execvpe, pipe2, close_range

#include <algorithm>    // std::sort, std::upper_bound, std::binary_search
#include <cerrno>       // errno
#include <csignal>      // sigprocmask, sigaction
#include <cstring>      // std::strerror
#include <fstream>      // std::ifstream: /proc/<pid>/stat
#include <sstream>      // std::istringstream
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair

namespace redlock_run {
namespace {

// What the child needs between fork and exec, prepared before fork (no allocation after it).
struct ChildPlan {
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<int> keep;        // descriptors >= 3 to keep open (inherited at start), sorted
  std::vector<int> close_list;  // fallback for kernels without close_range: open now, not kept
  sigset_t mask{};              // signal mask to restore
  struct sigaction sigpipe {};  // SIGPIPE disposition to restore
  pid_t parent{0};
  int report_fd{-1};  // write end of the exec-error pipe (close-on-exec)
  int tty_fd{-1};     // >= 0: make the command's group the foreground group of this terminal
};

void finish_plan(ChildPlan& plan) {
  // The exec-error pipe must survive until exec (which closes it: it is close-on-exec).
  plan.keep.insert(std::upper_bound(plan.keep.begin(), plan.keep.end(), plan.report_fd),
                   plan.report_fd);
  for (auto& a : plan.args) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  for (auto& e : plan.env) plan.envp.push_back(e.data());
  plan.envp.push_back(nullptr);
  for (const int fd : open_descriptors()) {
    if (fd > STDERR_FILENO && !std::binary_search(plan.keep.begin(), plan.keep.end(), fd)) {
      plan.close_list.push_back(fd);
    }
  }
}

// Child side of fork(): only async-signal-safe calls from here to exec.
[[noreturn]] void exec_child(const ChildPlan& plan) noexcept {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != plan.parent) ::_exit(kExitNotFound);  // redlock-run died already
  ::setpgid(0, 0);  // its own process group: lease loss and signals reach all of it
  if (plan.tty_fd >= 0) ::tcsetpgrp(plan.tty_fd, ::getpid());  // SIGTTOU is still blocked
  ::sigaction(SIGPIPE, &plan.sigpipe, nullptr);
  ::sigprocmask(SIG_SETMASK, &plan.mask, nullptr);
  // Close what the library opened (Redis sockets), keep what we were started with.
  unsigned int low = STDERR_FILENO + 1;
  bool ranges_ok = true;
  for (const int fd : plan.keep) {
    const auto keep = static_cast<unsigned int>(fd);
    if (keep > low && ::close_range(low, keep - 1, 0) != 0) ranges_ok = false;
    low = keep + 1;
  }
  if (::close_range(low, ~0U, 0) != 0) ranges_ok = false;
  if (!ranges_ok) {
    for (const int fd : plan.close_list) ::close(fd);
  }
  ::execvpe(plan.argv[0], plan.argv.data(), plan.envp.data());
  const int error = errno;
  ssize_t written;
  do {
    written = ::write(plan.report_fd, &error, sizeof error);
  } while (written < 0 && errno == EINTR);
  ::_exit(kExitNotFound);
}

// Forks and execs. Returns the child's pid, or -1 with `exec_error` set (errno of the failed
// exec; the child has been reaped) or `fork_error` set.
pid_t start_child(ChildPlan& plan, int& exec_error, std::string& fork_error) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    fork_error = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  plan.report_fd = report[1];
  finish_plan(plan);
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(plan);
  const int fork_errno = errno;
  if (pid > 0) ::setpgid(pid, pid);  // also here: no signal may find it still in our group
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    fork_error = std::string("fork: ") + std::strerror(fork_errno);
    return -1;
  }
  // EOF: exec succeeded (the write end was close-on-exec). Otherwise the child sent errno.
  int error = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &error, sizeof error);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof error)) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    exec_error = error;
    return -1;
  }
  return pid;
}

std::vector<std::string> child_environment(const Config& config, const Holdable& lock) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    // Drop values inherited from an outer redlock-run: they describe another lock.
    if (entry.rfind("REDLOCK_KEY=", 0) == 0 || entry.rfind("REDLOCK_FENCE=", 0) == 0 ||
        entry.rfind("REDLOCK_TTL_MS=", 0) == 0 || entry.rfind("REDLOCK_VALIDITY_MS=", 0) == 0 ||
        entry.rfind("REDLOCK_TERM=", 0) == 0) {
      continue;
    }
    env.emplace_back(entry);
  }
  env.push_back("REDLOCK_KEY=" + config.key);
  env.push_back("REDLOCK_TTL_MS=" + std::to_string(config.ttl.count()));
  env.push_back("REDLOCK_VALIDITY_MS=" + std::to_string(lock.validity().count()));
  if (exports_fence(config)) env.push_back("REDLOCK_FENCE=" + std::to_string(lock.fence()));
  if (config.mode == Mode::elect) env.push_back("REDLOCK_TERM=" + std::to_string(lock.fence()));
  return env;
}

// The terminal whose foreground group redlock-run is, if stdin is one: the command's group takes
// its place there (so that it can read the terminal, and Ctrl-C reaches it directly).
int foreground_tty() {
  return ::isatty(STDIN_FILENO) == 1 && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp() ? STDIN_FILENO
                                                                                 : -1;
}

// From /proc/<pid>/stat: the parent of `pid`, or 0 if it is gone or a zombie. The command name
// (2nd field) may hold spaces and parentheses: the fields after it follow the last ')'.
pid_t parent_of(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/stat");
  std::string stat;
  std::getline(in, stat);
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 1));
  char state = 'Z';
  long parent = 0;
  fields >> state >> parent;
  return state == 'Z' || !fields ? 0 : static_cast<pid_t>(parent);
}

}  // namespace

std::vector<pid_t> descendants() {
  std::vector<std::pair<pid_t, pid_t>> parents;  // (pid, parent) of every live process
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return {};
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (const pid_t parent = parent_of(name)) parents.emplace_back(std::stoi(name), parent);
  }
  ::closedir(dir);
  std::vector<pid_t> found{::getpid()};
  for (std::size_t at = 0; at < found.size(); ++at) {  // breadth first from this process
    for (const auto& [pid, parent] : parents) {
      if (parent == found[at]) found.push_back(pid);
    }
  }
  found.erase(found.begin());
  return found;
}

std::vector<int> open_descriptors() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const int fd = std::stoi(entry->d_name);
    if (fd != own) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

pid_t launch(const Config& config, Runtime& rt, const Holdable& lock) {
  ChildPlan plan;
  plan.args = config.command;
  plan.env = child_environment(config, lock);
  plan.keep = rt.inherited;
  plan.mask = rt.original_mask;
  plan.sigpipe = rt.original_sigpipe;
  plan.parent = ::getpid();
  plan.tty_fd = foreground_tty();
  rt.tty_handed = plan.tty_fd >= 0;
  int exec_error = 0;
  std::string fork_error;
  const pid_t child = start_child(plan, exec_error, fork_error);
  if (child > 0) return child;
  const std::string& name = config.command.front();
  if (!fork_error.empty()) {
    say("cannot start " + name + ": " + fork_error);
    return -kExitOsError;
  }
  if (exec_error == ENOENT || exec_error == ENOTDIR) {
    say("cannot run " + name + ": not found (check the name, or PATH)");
    return -kExitNotFound;
  }
  say("cannot run " + name + ": " + std::strerror(exec_error) +
      (exec_error == EACCES ? " (is it executable? chmod +x)" : ""));
  return -kExitNotExecutable;
}

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kExitOsError;
}

}  // namespace redlock_run
