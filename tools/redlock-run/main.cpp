// tools/redlock-run/main.cpp: redlock-run, flock(1) for a fleet (like `etcdctl lock` and
// `consul lock`): runs a command while holding a Redis lock, and stops the command if the lock is
// lost.
//
//   # Nightly report on whichever host gets there first; the others exit 75 at once:
//   REDLOCK_REDIS=redis://:secret@10.0.0.5:6379 redlock-run --key reports:nightly -n
//               -- ./nightly-report --since yesterday
//   # Redlock over three independent servers (quorum 2), waiting up to two minutes:
//   redlock-run --redis redis://r1 --redis redis://r2 --redis redis://r3
//               --key deploy:web --wait 2m --fencing -- ./deploy.sh
//
// What it does, in order:
//  1. Takes the lock: one server is a redlock::Lock, several are a redlock::Redlock (quorum
//     N/2+1). Servers come from --redis (repeatable), --redis-file, or REDLOCK_REDIS; with
//     --zookeeper URI it is a redlock::zookeeper::Lock instead (the session is the lease, the
//     fence is the holder znode's czxid and always exported). The lease
//     (--ttl, default 30s) is renewed in the background about every ttl/3, so the command may run
//     for longer than the ttl, while a crashed host frees the lock after at most one ttl. By
//     default it waits for the lock forever (like flock); --wait D gives up after D, --no-wait
//     after one attempt. A wait is ONE library call (try_lock_until): a fair waiter keeps its
//     place in the queue for the whole wait. A signal during the wait is taken by a dedicated
//     thread, which cancels the wait (cancel_waits()).
//  2. Runs the command in its own process group (fork + setpgid + execvp; stdin/stdout/stderr,
//     the working directory and every descriptor redlock-run was started with are inherited; on a
//     terminal the group becomes the foreground group) with REDLOCK_KEY, REDLOCK_TTL_MS,
//     REDLOCK_VALIDITY_MS and, with --fencing, REDLOCK_FENCE in its environment. A side key
//     <key>:holder with the same ttl records host, pid and command for --status.
//  3. Forwards every terminating signal (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
//     SIGALRM, ...) to the command's process group. All but SIGUSR1/SIGUSR2 are stop requests:
//     they also reach every process below redlock-run outside the group, and what is still
//     there after --grace gets SIGKILL. SIGUSR1/SIGUSR2 before the command starts are ignored.
//  4. If the lease is lost while the command runs, sends SIGTERM to the group and every other
//     descendant, and SIGKILL after --grace. redlock-run is a child subreaper: the command's
//     orphans (set -m jobs, setsid children) are reparented to it, so none escapes.
//  5. When the command has exited, stops what it left running (SIGTERM, SIGKILL after --grace),
//     releases the lock only once no descendant is left, and exits with the command's status.
//
// Exit statuses: see kFooter (the --help text, help.cpp); it is the one reference.
//
// Signal safety. Before any thread exists, the handled signals (and SIGTTOU, for tcsetpgrp) are
// blocked; every thread the library starts later inherits the mask. One thread reads them with
// sigwaitinfo() and writes the signal number to a pipe; the watchdog's on_lost callback writes
// one byte to another pipe. The main loop poll()s both: no work happens in signal context at all.
// SIGPIPE is ignored (hiredis writes to sockets a server may have closed) and restored for the
// command. The child, between fork and exec, makes only async-signal-safe calls. Descriptors the
// library opened are closed in the child, so the command never holds a Redis connection.
//
//
// The parts: options.cpp and help.cpp (the command line), modes.hpp (what a run does: status.cpp,
// locked.cpp), holdable.cpp (what is locked), keys.cpp (the library's helper keys that --status
// and the checks read), child.cpp (fork and exec), supervisor.cpp (the command's process group
// while it runs), signals.cpp, holder.hpp (<key>:holder), common.cpp.
#include <sys/prctl.h>  // prctl(PR_SET_CHILD_SUBREAPER)

#include <cerrno>     // errno
#include <cstdio>     // std::fputs
#include <cstring>    // std::strerror
#include <exception>  // std::exception
#include <iterator>   // std::next
#include <map>        // std::map: RecentLines
#include <memory>     // std::make_shared
#include <mutex>      // std::mutex: RecentLines
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <vector>     // std::vector

#include <redlock/redlock.hpp>  // Client, Endpoint, set_log_handler, set_observer

#include "child.hpp"                        // open_descriptors
#include "common.hpp"                       // say, UsageError, exit statuses
#include "keys.hpp"                         // helper_key: an election's lock
#include "metrics/prometheus_observer.hpp"  // PrometheusObserver (examples/metrics/)
#include "modes.hpp"                        // run_status, run_locked
#include "options.hpp"                      // Config, parse_command_line
#include "signals.hpp"                      // block_signals, start_signal_thread

namespace redlock_run {
namespace {

// --metrics PATH: the process-wide observer, its file written once before `body` (a path that
// cannot be written is a usage error) and again after it, whatever it returns.
template <typename Body>
int with_metrics(const Config& config, Body body) {
  if (config.metrics.empty()) return body();
  auto metrics = std::make_shared<redlock_examples::PrometheusObserver>();
  try {
    metrics->write_file(config.metrics);
  } catch (const std::runtime_error& e) {
    throw UsageError(std::string("--metrics: ") + e.what());
  }
  redlock::set_observer(metrics);
  const int status = body();
  try {
    metrics->write_file(config.metrics);
  } catch (const std::runtime_error& e) {
    say(e.what());
  }
  return status;
}

// The mode the options ask for (see modes.hpp).
int run_mode(const Config& config, Runtime& rt) {
  std::vector<redlock::Client> clients;
  for (const auto& uri : config.uris) clients.emplace_back(redlock::Endpoint::parse(uri));
  if (config.mode == Mode::status) return run_status(config, clients);
  if (config.mode == Mode::leader) return run_leader(config, clients);
  if (config.mode == Mode::elect) return run_elect(config, clients, rt);
  return run_locked(config, clients, rt);
}

// The library's lines said in the last minute: one that comes again within it (the same server
// found unreachable by the lock's connections and by its release watch) is not repeated.
class RecentLines {
 public:
  // True if `line` was not said in the last minute (and records it). Thread-safe.
  bool first(const std::string& line) {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> guard(mutex_);
    for (auto it = said_.begin(); it != said_.end();) {
      it = now - it->second >= kWindow ? said_.erase(it) : std::next(it);
    }
    return said_.emplace(line, now).second;
  }

 private:
  static constexpr std::chrono::seconds kWindow{60};
  std::mutex mutex_;
  std::map<std::string, Clock::time_point> said_;
};

// Library messages on stderr, in our words (warnings; with -v also info), each at most once a
// minute. None with -q.
void route_library_messages(const Config& config) {
  if (config.quiet) return;
  const auto shown = config.verbose ? redlock::LogLevel::info : redlock::LogLevel::warn;
  // An election's lock is the helper key {KEY}:leader: the user named KEY.
  const std::string leader_key = helper_key(config.key, ":leader");
  auto recent = std::make_shared<RecentLines>();
  redlock::set_log_handler(
      [leader_key, key = config.key, recent](redlock::LogLevel, std::string_view message) {
        // A lost lease is reported by the Supervisor, with what it does about it.
        const bool ours = message.find(" lost (") != std::string_view::npos;
        if (ours) return;
        std::string text = in_our_words(std::string(message));
        for (auto at = text.find(leader_key); at != std::string::npos;
             at = text.find(leader_key, at + key.size())) {
          text.replace(at, leader_key.size(), key);
        }
        if (recent->first(text)) say(text);
      },
      shown);
}

void warn_if_password_inline(const Config& config) {
  if (!config.password_inline || config.quiet) return;
  say(config.postgres.empty()
          ? "warning: a password in --redis shows in ps; put the URI in REDLOCK_REDIS or "
            "--redis-file PATH instead"
          : "warning: a password in --postgres shows in ps; use PGPASSWORD or ~/.pgpass "
            "instead");
}

}  // namespace

// Everything main() does; main() only adds the last-resort catch.
int redlock_run(int argc, char** argv) {
  Runtime rt;
  // Before anything opens a descriptor or starts a thread: what we inherited, and the mask.
  for (const int fd : open_descriptors()) {
    if (fd > STDERR_FILENO) rt.inherited.push_back(fd);
  }
  block_signals(rt);

  Config config;
  try {
    if (const auto status = parse_command_line(argc, argv, config)) return *status;
    warn_if_password_inline(config);
    if (!start_signal_thread(rt)) {
      say(std::string("cannot set up signal handling: ") + std::strerror(errno));
      return kExitOsError;
    }
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // the command's orphans are ours to wait for
    route_library_messages(config);
    return with_metrics(config, [&] { return run_mode(config, rt); });
  } catch (const UsageError& e) {
    say(e.what());
    std::fputs("Try 'redlock-run --help'.\n", stderr);
    return kExitUsage;
  } catch (const redlock::Error& e) {
    say(in_our_words(e.what()));
    return kExitUnavailable;
  }
}

}  // namespace redlock_run

int main(int argc, char** argv) {
  try {
    return redlock_run::redlock_run(argc, argv);
  } catch (const std::exception& e) {  // out of memory, a thread that could not start, ...
    redlock_run::say(redlock_run::in_our_words(e.what()));
    return redlock_run::kExitOsError;
  } catch (...) {
    return redlock_run::kExitOsError;
  }
}
