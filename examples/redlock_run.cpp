// examples/redlock_run.cpp: redlock-run, flock(1) for a fleet (like `etcdctl lock` and
// `consul lock`): runs a command while holding a Redis lock, and stops the command if the lock is
// lost.
//
//   # Nightly report on whichever host gets there first; the others exit 75 at once:
//   redlock-run --redis redis://:secret@10.0.0.5:6379 --key reports:nightly --no-wait
//               -- ./nightly-report --since yesterday
//   # Redlock over three independent servers (quorum 2), waiting up to two minutes:
//   redlock-run --redis redis://r1 --redis redis://r2 --redis redis://r3
//               --key deploy:web --wait 2m --fencing -- ./deploy.sh
//
// What it does, in order:
//  1. Takes the lock: one --redis is a redlock::Lock, several are a redlock::Redlock (quorum
//     N/2+1). The lease (--ttl, default 30s) is renewed in the background about every ttl/3
//     (LockOptions::auto_renew), so the command may run for longer than the ttl, while a crashed
//     host frees the lock after at most one ttl. By default it waits for the lock forever (like
//     flock); --wait D gives up after D, --no-wait after one attempt.
//  2. Runs the command (fork + execvp; stdin/stdout/stderr, the working directory and every
//     descriptor redlock-run was started with are inherited) with REDLOCK_KEY=<key> and, with
//     --fencing, REDLOCK_FENCE=<n> in its environment. A fencing token only grows from one hold
//     to the next: pass it to the storage you protect so that it can refuse a stale holder.
//  3. Forwards SIGINT, SIGTERM and SIGHUP to the command, except when the terminal already sent
//     the signal to the command's process group (Ctrl-C reaches both; forwarding it again would
//     deliver it twice).
//  4. If the lease is lost while the command runs (a renewal was refused because the key was
//     deleted or taken over, or no renewal got through before the lease ran out), prints
//       redlock-run: lease on KEY lost (REASON); sending SIGTERM to PID
//     sends SIGTERM to the command and, if it is still running after --grace (default 10s),
//     SIGKILL. Signals go to the command's process only, not to its children: a shell script
//     should `exec` its last command or pass the signal on.
//  5. When the command has exited, releases the lock and exits with the command's status. (If
//     no server answers the release, it says so; the lease then expires by its ttl.)
//
// Exit statuses (also in --help):
//   N      the command's exit status
//   128+N  the command was killed by signal N, or redlock-run got signal N while waiting
//   64     usage error: bad option, duration, URI or key (EX_USAGE)
//   69     a Redis server could not be reached or answered with an error (EX_UNAVAILABLE)
//   70     the lease was lost while the command ran (EX_SOFTWARE; chosen because the command's
//          own status no longer says whether its work was protected by the lock)
//   71     the command could not be started: fork or pipe failed (EX_OSERR)
//   75     the lock is held elsewhere: --no-wait failed or --wait expired (EX_TEMPFAIL)
//   127    the command could not be executed: not found, not executable (as in shells)
// A command that itself exits with one of these statuses is indistinguishable from redlock-run
// (as with flock and timeout).
//
// Signal safety. Before any thread exists, SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked (all
// threads the library starts later inherit the mask) and read through a signalfd; the watchdog's
// on_lost callback only write()s one byte to a pipe. The parent's loop poll()s both: no work
// happens in signal context at all. SIGPIPE is ignored (hiredis writes to sockets a server may
// have closed) and restored for the command. The child, between fork and exec, makes only
// async-signal-safe calls: glibc's execvpe searches PATH in a stack buffer, without malloc.
// Descriptors the library opened (hiredis sockets are not close-on-exec) are closed in the child,
// so the command never holds an authenticated Redis connection. The child asks for SIGTERM if
// redlock-run dies (PR_SET_PDEATHSIG): without redlock-run nobody renews the lease.
//
// Passwords in --redis URIs are never printed: the library names servers by
// Endpoint::address() and masks passwords in URI parse errors, and whatever CLI11 says about an
// argument is scrubbed of URI credentials before it is printed.
#include <dirent.h>        // opendir, readdir: the descriptors inherited at start
#include <fcntl.h>         // O_CLOEXEC, O_NONBLOCK
#include <poll.h>          // poll
#include <sys/prctl.h>     // prctl(PR_SET_PDEATHSIG)
#include <sys/signalfd.h>  // signalfd
#include <sys/wait.h>      // waitpid
#include <unistd.h>        // fork, execvpe, pipe2, close_range

#include <algorithm>    // std::sort, std::min
#include <cerrno>       // errno
#include <chrono>       // std::chrono
#include <csignal>      // sigprocmask, sigaction, kill (POSIX, declared by <signal.h>)
#include <cstdint>      // std::int64_t, std::uint64_t
#include <cstdio>       // std::fputs
#include <cstring>      // std::strerror
#include <ctime>        // nanosleep (POSIX)
#include <exception>    // std::exception
#include <optional>     // std::optional
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <CLI/CLI.hpp>  // CLI::App, CLI::Validator

#include <redlock/redlock.hpp>  // Client, Endpoint, Lock, Redlock, errors, set_log_handler
#include <redlock/version.hpp>  // REDLOCK_VERSION_STRING

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Exit statuses (sysexits.h values, spelled out so that the table above is the one reference).
constexpr int kExitUsage = 64;        // EX_USAGE
constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE
constexpr int kExitLost = 70;         // EX_SOFTWARE
constexpr int kExitOsError = 71;      // EX_OSERR
constexpr int kExitBusy = 75;         // EX_TEMPFAIL
constexpr int kExitCannotRun = 127;   // as in shells

// A wait for the lock is cut into slices this long so that SIGINT/SIGTERM/SIGHUP are noticed
// within about a slice (LockBase::lock() cannot be interrupted). Each slice starts with an
// attempt, so no release is missed between slices.
constexpr milliseconds kWaitSlice{250};

// The largest duration accepted on the command line (about 114 years): far from overflowing
// steady_clock::now() + duration.
constexpr std::int64_t kMaxDurationMs = std::int64_t{1'000'000} * 3'600'000;

const char kDurationHelp[] = "a whole number with a unit: 500ms, 30s, 2m or 1h";

// ---- Messages --------------------------------------------------------------------------------

// Writes "redlock-run: <line>\n" to stderr in one call (stdio locks the stream, so lines from the
// library's threads do not interleave with ours).
void say(const std::string& line) {
  const std::string text = "redlock-run: " + line + "\n";
  std::fputs(text.c_str(), stderr);
}

// Replaces the user-info part of anything that looks like a URI ("scheme://user:pw@host") with
// "***". For messages we do not compose ourselves (CLI11's), which may quote an argument.
std::string scrub_credentials(std::string text) {
  std::size_t from = 0;
  for (;;) {
    const std::size_t scheme = text.find("://", from);
    if (scheme == std::string::npos) return text;
    const std::size_t start = scheme + 3;
    std::size_t end = text.find_first_of(" \t\n\"'", start);
    if (end == std::string::npos) end = text.size();
    const std::size_t at = text.rfind('@', end - 1);
    if (at != std::string::npos && at >= start && end > start) {
      text.replace(start, at - start, "***");
      from = start + 4;
    } else {
      from = start;
    }
  }
}

const char* signal_name(int signo) {
  switch (signo) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

// ---- Durations -------------------------------------------------------------------------------

// Parses "500ms", "30s", "2m", "1h". Returns the duration, or nullopt with `why` set.
std::optional<milliseconds> parse_duration(std::string_view text, std::string& why) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string_view unit = text.substr(digits);
  std::int64_t scale = 0;
  if (unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1'000;
  } else if (unit == "m") {
    scale = 60'000;
  } else if (unit == "h") {
    scale = 3'600'000;
  }
  if (digits == 0 || scale == 0) {
    why = "'" + std::string(text) + "' is not a duration; use " + kDurationHelp;
    return std::nullopt;
  }
  std::int64_t value = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    value = value * 10 + (text[i] - '0');
    if (value > kMaxDurationMs) break;
  }
  if (value > kMaxDurationMs / scale) {
    why = "'" + std::string(text) + "' is too long (at most 1000000h)";
    return std::nullopt;
  }
  return milliseconds(value * scale);
}

// "300ms", "30s", "2m", "1h": the largest unit that divides it evenly.
std::string format_duration(milliseconds d) {
  const std::int64_t ms = d.count();
  if (ms != 0 && ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms != 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms != 0 && ms % 1'000 == 0) return std::to_string(ms / 1'000) + "s";
  return std::to_string(ms) + "ms";
}

// CLI11 check for a duration option; `positive` rejects zero.
CLI::Validator duration_check(bool positive) {
  return {[positive](std::string& text) -> std::string {
            std::string why;
            const auto d = parse_duration(text, why);
            if (!d) return why;
            if (positive && d->count() == 0) return "must be longer than 0ms";
            return {};
          },
          "", "DURATION"};
}

// CLI11 check for --redis. Endpoint::parse's message quotes the URI with its password masked.
CLI::Validator redis_uri_check() {
  return {[](std::string& text) -> std::string {
            try {
              redlock::Endpoint::parse(text);
              return {};
            } catch (const std::invalid_argument& e) {
              return scrub_credentials(e.what());
            }
          },
          "", "URI"};
}

// ---- Configuration ---------------------------------------------------------------------------

struct Config {
  std::vector<std::string> uris;
  std::string key;
  milliseconds ttl{30'000};
  std::optional<milliseconds> wait;  // nullopt: forever
  bool no_wait{false};
  milliseconds grace{10'000};
  bool fencing{false};
  bool fair{false};
  bool quiet{false};
  std::vector<std::string> command;
};

const char kFooter[] = R"(Exit status:
  N        the command's exit status
  128+N    the command was killed by signal N (or redlock-run got signal N while waiting)
  64       usage error: bad option, duration, URI or key
  69       a Redis server could not be reached or answered with an error (e.g. WRONGPASS)
  70       the lease was lost while the command ran (the command got SIGTERM, then SIGKILL
           after --grace)
  71       the command could not be started (fork or pipe failed)
  75       the lock is held elsewhere (--no-wait, or --wait expired)
  127      the command could not be executed (not found, not executable)

The command inherits stdin/stdout/stderr, and gets REDLOCK_KEY=<key> and, with --fencing,
REDLOCK_FENCE=<n> in its environment. SIGINT, SIGTERM and SIGHUP are forwarded to it.
Durations are a whole number with a unit: 500ms, 30s, 2m, 1h.
Several --redis servers form a Redlock: the lock is held when N/2+1 of them grant it.

Examples:
  redlock-run --redis redis://:secret@10.0.0.5:6379 --key reports:nightly --no-wait \
      -- ./nightly-report --since yesterday
  redlock-run --redis redis://r1 --redis redis://r2 --redis redis://r3 --key deploy:web \
      --wait 2m --fencing -- sh -c './deploy.sh --fence "$REDLOCK_FENCE"')";

// Parses argv into `config`. Returns nullopt to go on, or the exit status (0 after --help).
std::optional<int> parse_command_line(int argc, char** argv, Config& config) {
  CLI::App app{"Run a command while holding a Redis lock: flock(1) for a fleet.", "redlock-run"};
  app.footer(kFooter);
  app.set_version_flag("--version", REDLOCK_VERSION_STRING);
  // The first positional ends our options: `redlock-run --key k ls -l` runs `ls -l`.
  app.positionals_at_end();

  std::string ttl = "30s";
  std::string wait;
  std::string grace = "10s";
  app.add_option("--redis", config.uris,
                 "A Redis server: redis://[user[:password]@]host[:port][/db]\n"
                 "[?command_timeout=ms&connect_timeout=ms] or unix:///path/to/sock.\n"
                 "Repeat for a Redlock over independent servers (quorum N/2+1).\n"
                 "Passwords are never printed.")
      ->required()
      ->type_name("URI")
      ->check(redis_uri_check());
  app.add_option("--key", config.key,
                 "Name of the lock (the Redis key); the command gets it as\n"
                 "REDLOCK_KEY.")
      ->required()
      ->type_name("KEY");
  app.add_option("--ttl", ttl,
                 "Lease length on the server, renewed about every ttl/3 while the\n"
                 "command runs. If this host dies, the lock frees itself after at\n"
                 "most this long.")
      ->type_name("DURATION")
      ->check(duration_check(/*positive=*/true))
      ->capture_default_str();
  CLI::Option* wait_option =
      app.add_option("--wait", wait,
                     "Give up after this long if the lock is held elsewhere (exit\n"
                     "75). Default: wait forever.")
          ->type_name("DURATION")
          ->check(duration_check(/*positive=*/false));
  app.add_flag("--no-wait", config.no_wait,
               "One attempt: exit 75 at once if the lock is held elsewhere.")
      ->excludes(wait_option);
  app.add_option("--grace", grace, "After a lost lease: time between SIGTERM and SIGKILL.")
      ->type_name("DURATION")
      ->check(duration_check(/*positive=*/false))
      ->capture_default_str();
  app.add_flag("--fencing", config.fencing,
               "Issue a fencing token (a counter in <key>:fence that grows with\n"
               "every hold); the command gets it as REDLOCK_FENCE.");
  app.add_flag("--fair", config.fair,
               "First come, first served among waiters, across machines (one\n"
               "--redis only): a queue on the server, the lock handed over on release.");
  app.add_flag("--quiet", config.quiet,
               "No message when the lock is held elsewhere (exit 75 says it),\n"
               "no library log. Errors and a lost lease are always reported.");
  app.add_option("command", config.command,
                 "The command to run and its arguments. Our options end at the\n"
                 "first word that is not one of them, or at --.")
      ->required()
      ->type_name("ARGS");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    say(scrub_credentials(e.what()));
    std::fputs("Run with --help for more information.\n", stderr);
    return kExitUsage;
  }
  std::string unused;
  config.ttl = *parse_duration(ttl, unused);  // the checks above already accepted them
  config.grace = *parse_duration(grace, unused);
  if (!wait.empty()) config.wait = *parse_duration(wait, unused);
  return std::nullopt;
}

// ---- Process plumbing ------------------------------------------------------------------------

// Open descriptors, sorted, from /proc/self/fd. Empty if /proc is not mounted.
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
  if (::getppid() != plan.parent) ::_exit(kExitCannotRun);  // redlock-run died already
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
  ::_exit(kExitCannotRun);
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

// Shell convention: the exit code, or 128 + the signal that killed it.
int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kExitOsError;
}

bool reap(pid_t pid, int& wait_status) {
  for (;;) {
    const pid_t r = ::waitpid(pid, &wait_status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno == EINTR) continue;
    return false;
  }
}

// Reads every queued signal from the signalfd. Returns the last SIGINT/SIGTERM/SIGHUP read
// (0 if none); `from_terminal` tells whether the kernel (the tty driver) sent it.
int drain_signals(int sigfd, bool& from_terminal) {
  int last = 0;
  signalfd_siginfo info;
  for (;;) {
    const ssize_t n = ::read(sigfd, &info, sizeof info);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof info)) return last;
    const int signo = static_cast<int>(info.ssi_signo);
    if (signo == SIGINT || signo == SIGTERM || signo == SIGHUP) {
      last = signo;
      from_terminal = info.ssi_code == SI_KERNEL;
    }
  }
}

// ---- The run ---------------------------------------------------------------------------------

struct Runtime {
  int sigfd{-1};       // SIGINT, SIGTERM, SIGHUP, SIGCHLD
  int lost_read{-1};   // one byte (a LostReason) per lost lease
  int lost_write{-1};  // never closed: on_lost may run on the watchdog's thread at any time
  sigset_t original_mask{};
  struct sigaction original_sigpipe {};
  std::vector<int> inherited;  // descriptors >= 3 open at start
};

enum class Acquire { held, busy, interrupted };

Acquire acquire(redlock::LockBase& lock, const Config& config, const Runtime& rt, int& signo) {
  const bool forever = !config.no_wait && !config.wait;
  const auto deadline = Clock::now() + (config.wait ? *config.wait : milliseconds(0));
  for (;;) {
    bool from_terminal = false;
    signo = drain_signals(rt.sigfd, from_terminal);
    if (signo != 0) return Acquire::interrupted;
    if (config.no_wait) return lock.try_lock() ? Acquire::held : Acquire::busy;
    auto slice = kWaitSlice;
    if (!forever) {
      const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
      slice = std::min(slice, std::max(left, milliseconds(0)));
    }
    if (lock.try_lock_for(slice)) return Acquire::held;
    if (!forever && Clock::now() >= deadline) return Acquire::busy;
  }
}

struct Outcome {
  int status{0};
  bool lost{false};
};

// Waits for the child; forwards signals; on a lost lease, SIGTERM then SIGKILL after the grace.
Outcome supervise(pid_t child, const Config& config, const Runtime& rt) {
  Outcome out;
  constexpr auto kNever = Clock::time_point::max();
  auto kill_at = kNever;  // when to send SIGKILL
  for (;;) {
    int wait_status = 0;
    if (reap(child, wait_status)) {
      out.status = shell_status(wait_status);
      return out;
    }
    int timeout = -1;
    if (kill_at != kNever) {
      const auto left = std::chrono::ceil<milliseconds>(kill_at - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<std::int64_t>(left, 0, 60'000));
    }
    pollfd fds[2] = {{rt.sigfd, POLLIN, 0}, {rt.lost_read, POLLIN, 0}};
    const int ready = ::poll(fds, 2, timeout);
    if (ready < 0 && errno != EINTR) {
      // Only ENOMEM is possible here: wait a little and look again rather than spin.
      const timespec pause{0, 10'000'000};
      ::nanosleep(&pause, nullptr);
    }
    if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
      bool from_terminal = false;
      const int signo = drain_signals(rt.sigfd, from_terminal);
      // The tty driver signals the whole foreground process group; the child got it already if
      // it is still in ours.
      const bool child_got_it = from_terminal && ::getpgid(child) == ::getpgrp();
      if (signo != 0 && !child_got_it) ::kill(child, signo);
    }
    if (ready > 0 && (fds[1].revents & POLLIN) != 0) {
      unsigned char byte = 0;
      while (::read(rt.lost_read, &byte, 1) == 1) {
        if (out.lost) continue;
        out.lost = true;
        const auto reason = static_cast<redlock::LostReason>(byte);
        say("lease on " + config.key + " lost (" + redlock::to_string(reason) +
            "); sending SIGTERM to " + std::to_string(child));
        ::kill(child, SIGTERM);
        kill_at = Clock::now() + config.grace;
      }
    }
    if (kill_at != kNever && Clock::now() >= kill_at) {
      if (!reap(child, wait_status)) {
        say(std::to_string(child) + " still running " + format_duration(config.grace) +
            " after SIGTERM; sending SIGKILL");
        ::kill(child, SIGKILL);
      } else {
        out.status = shell_status(wait_status);
        return out;
      }
      kill_at = kNever;
    }
  }
}

std::vector<std::string> child_environment(const Config& config, std::uint64_t fence) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    // Drop values inherited from an outer redlock-run: they describe another lock.
    if (entry.rfind("REDLOCK_KEY=", 0) == 0 || entry.rfind("REDLOCK_FENCE=", 0) == 0) continue;
    env.emplace_back(entry);
  }
  env.push_back("REDLOCK_KEY=" + config.key);
  if (config.fencing) env.push_back("REDLOCK_FENCE=" + std::to_string(fence));
  return env;
}

// Releases the lock. Returns true if the lease was still ours, or if that is unknown because no
// server answered (then says so, unless the lease is known to be lost anyway). Never throws.
bool release(redlock::LockBase& lock, const Config& config, bool report_failure) {
  try {
    return lock.release();
  } catch (const std::exception& e) {
    if (report_failure) {
      say("could not release " + config.key + " (" + e.what() + "); it expires within " +
          format_duration(config.ttl));
    }
    return true;
  }
}

int run(const Config& config, Runtime& rt) {
  std::vector<redlock::Client> clients;
  for (const auto& uri : config.uris) clients.emplace_back(redlock::Endpoint::parse(uri));

  redlock::LockOptions options;
  options.ttl = config.ttl;
  options.fencing = config.fencing;
  options.fair = config.fair;
  options.auto_renew = true;
  options.on_lost = [fd = rt.lost_write](const redlock::LostEvent& event) {
    const auto byte = static_cast<unsigned char>(event.reason);
    ssize_t written;
    do {
      written = ::write(fd, &byte, 1);
    } while (written < 0 && errno == EINTR);
  };
  // LockBase has no virtual destructor: hold the concrete type, use it through the base.
  std::optional<redlock::Lock> single;
  std::optional<redlock::Redlock> quorum;
  redlock::LockBase& lock =
      clients.size() == 1
          ? static_cast<redlock::LockBase&>(single.emplace(clients.front(), config.key, options))
          : quorum.emplace(clients, config.key, options);

  int signo = 0;
  Acquire got = Acquire::busy;
  try {
    got = acquire(lock, config, rt, signo);
  } catch (const redlock::Error& e) {
    say("cannot lock " + config.key + ": " + e.what());
    return kExitUnavailable;
  }
  if (got == Acquire::busy) {
    if (!config.quiet) {
      // A Redlock cannot tell contention from too few live servers: both are "no quorum".
      const std::string who =
          lock.size() == 1 ? std::string("another holder")
                           : "another holder, or fewer than " + std::to_string(lock.quorum()) +
                                 " of " + std::to_string(lock.size()) + " servers answered";
      const std::string when = config.no_wait ? std::string("--no-wait")
                                              : "gave up after " + format_duration(*config.wait);
      say(config.key + " is held by " + who + " (" + when + ")");
    }
    return kExitBusy;
  }
  if (got == Acquire::interrupted) {
    if (!config.quiet) say(std::string(signal_name(signo)) + " while waiting for " + config.key);
    return 128 + signo;
  }
  {
    bool from_terminal = false;
    signo = drain_signals(rt.sigfd, from_terminal);  // one that came with the lock
    if (signo != 0) {
      release(lock, config, /*report_failure=*/true);
      return 128 + signo;
    }
  }
  const redlock::LeaseToken lease = lock.lease();

  ChildPlan plan;
  plan.args = config.command;
  plan.env = child_environment(config, lock.fence());
  plan.keep = rt.inherited;
  plan.mask = rt.original_mask;
  plan.sigpipe = rt.original_sigpipe;
  plan.parent = ::getpid();
  int exec_error = 0;
  std::string fork_error;
  const pid_t child = start_child(plan, exec_error, fork_error);
  if (child < 0) {
    release(lock, config, /*report_failure=*/true);
    if (!fork_error.empty()) {
      say("cannot start " + config.command.front() + ": " + fork_error);
      return kExitOsError;
    }
    say("cannot run " + config.command.front() + ": " + std::strerror(exec_error));
    return kExitCannotRun;
  }

  Outcome outcome = supervise(child, config, rt);
  if (!outcome.lost && lease.lost()) {
    // Lost just as the command ended, before on_lost was reported.
    outcome.lost = true;
    say("lease on " + config.key + " lost (" + redlock::to_string(lease.reason()) +
        ") before the command finished");
  }
  if (!release(lock, config, /*report_failure=*/!outcome.lost) && !outcome.lost) {
    outcome.lost = true;
    say("lease on " + config.key + " lost (expired) before the command finished");
  }
  return outcome.lost ? kExitLost : outcome.status;
}

// Everything main() does; main() only adds the last-resort catch.
int redlock_run(int argc, char** argv) {
  Runtime rt;
  // Before anything opens a descriptor or starts a thread: what we inherited, and the mask.
  for (const int fd : open_descriptors()) {
    if (fd > STDERR_FILENO) rt.inherited.push_back(fd);
  }
  sigset_t handled;
  sigemptyset(&handled);
  for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&handled, s);
  ::sigprocmask(SIG_BLOCK, &handled, &rt.original_mask);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &rt.original_sigpipe);

  Config config;
  if (const auto status = parse_command_line(argc, argv, config)) return *status;

  rt.sigfd = ::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  int lost_pipe[2];
  if (rt.sigfd < 0 || ::pipe2(lost_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
    say(std::string("cannot set up signal handling: ") + std::strerror(errno));
    return kExitOsError;
  }
  rt.lost_read = lost_pipe[0];
  rt.lost_write = lost_pipe[1];

  const bool quiet = config.quiet;
  redlock::set_log_handler([quiet](redlock::LogLevel level, std::string_view message) {
    if (!quiet && level >= redlock::LogLevel::error) say(std::string(message));
  });

  try {
    return run(config, rt);
  } catch (const std::invalid_argument& e) {  // bad key, ttl too short, duplicate servers, --fair
                                              // with several servers
    say(scrub_credentials(e.what()));
    return kExitUsage;
  } catch (const redlock::Error& e) {
    say(e.what());
    return kExitUnavailable;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return redlock_run(argc, argv);
  } catch (const std::exception& e) {  // out of memory, a thread that could not start, ...
    say(scrub_credentials(e.what()));
    return kExitOsError;
  } catch (...) {
    return kExitOsError;
  }
}
