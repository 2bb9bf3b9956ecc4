// tools/redlock-run/locked.cpp: the lock mode (see modes.hpp): one wait for the lock, then the
// command (or --hold) under it, then the release once the command's whole group is gone.
#include <unistd.h>  // write, getpgrp

#include <cerrno>    // errno
#include <cstdio>    // std::printf, std::fflush
#include <future>    // std::async: pinging Redlock nodes in parallel
#include <memory>    // std::unique_ptr
#include <mutex>     // std::lock_guard: the signal thread's view of the wait
#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include <termios.h>  // tcsetpgrp

#include "child.hpp"     // launch
#include "holdable.hpp"  // Holdable, make_holdable
#include "holder.hpp"    // HolderRecord
#include "keys.hpp"      // stored_limit, permit_ttls: a semaphore's key
#include "modes.hpp"
#include "signals.hpp"     // SignalState
#include "supervisor.hpp"  // Supervisor

namespace redlock_run {
namespace {

enum class Acquire { held, busy, interrupted };

// The servers that do not answer a PING, named by address (pinged in parallel).
std::vector<std::string> silent_servers(const std::vector<redlock::Client>& clients) {
  std::vector<std::future<std::string>> pings;
  for (const auto& client : clients) {
    pings.push_back(std::async(std::launch::async, [&client]() -> std::string {
      try {
        client.ping();
        return {};
      } catch (const redlock::Error& e) {
        return client.endpoint().address() + ": " + in_our_words(e.what());
      }
    }));
  }
  std::vector<std::string> silent;
  for (auto& ping : pings) {
    if (auto why = ping.get(); !why.empty()) silent.push_back(std::move(why));
  }
  return silent;
}

std::string join(const std::vector<std::string>& parts) {
  std::string text;
  for (const auto& part : parts) text += (text.empty() ? "" : "; ") + part;
  return text;
}

// One wait for the lock: a single library call for the whole wait (a fair waiter keeps its
// place), cancelled by the signal thread if a stop signal comes.
Acquire acquire(Holdable& lock, const Config& config, const Runtime& rt, int& signo) {
  if (config.no_wait) return lock.try_lock() ? Acquire::held : Acquire::busy;
  if (config.verbose) {
    try {
      if (lock.try_lock()) return Acquire::held;
    } catch (const redlock::Error& e) {  // unreachable now: the wait below rides it out
      say("waiting: " + in_our_words(e.what()));
    }
    say("waiting for " + config.key +
        (config.wait ? " (at most " + format_duration(*config.wait) + ")" : std::string()));
  }
  {
    std::lock_guard<std::mutex> guard(rt.signals->mutex);
    signo = rt.signals->first_stop;
    if (signo != 0) return Acquire::interrupted;
    rt.signals->waiting = &lock;
  }
  const auto deadline = config.wait ? Clock::now() + *config.wait : Clock::time_point::max();
  bool got = false;
  try {
    got = lock.try_lock_until(deadline);
  } catch (...) {
    std::lock_guard<std::mutex> guard(rt.signals->mutex);
    rt.signals->waiting = nullptr;
    throw;
  }
  std::lock_guard<std::mutex> guard(rt.signals->mutex);
  rt.signals->waiting = nullptr;
  signo = rt.signals->first_stop;
  if (signo != 0 && !got) return Acquire::interrupted;
  return got ? Acquire::held : Acquire::busy;
}

// The keys of a repeated --key that are held now (all of them if none is: released meanwhile),
// for the message after a refused MultiLock. Never throws.
std::string held_keys(const redlock::Client& client, const Config& config) {
  std::vector<std::string> keys{config.key};
  keys.insert(keys.end(), config.more_keys.begin(), config.more_keys.end());
  std::vector<std::string> held;
  try {
    std::vector<std::vector<std::string_view>> commands;
    for (const auto& k : keys) commands.push_back({"EXISTS", k});
    const auto replies = client.pipeline(commands);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!replies.at(i).is_error() && replies.at(i).integer() == 1) held.push_back(keys[i]);
    }
  } catch (const redlock::Error&) {
  }
  if (held.empty()) held = keys;
  std::string text;
  for (const auto& k : held) text += (text.empty() ? "" : ", ") + k;
  return text + (held.size() == 1 ? " is" : " are");
}

// After a failed attempt: exit status and message for contention or, if a Redlock could not
// reach a quorum because servers do not answer, unavailability.
int report_not_acquired(const std::vector<redlock::Client>& clients, const Config& config,
                        std::size_t quorum) {
  if (clients.size() > 1) {
    const auto silent = silent_servers(clients);
    if (clients.size() - silent.size() < quorum) {
      say(config.key + " is unavailable: only " + std::to_string(clients.size() - silent.size()) +
          " of " + std::to_string(clients.size()) + " servers answer, " + std::to_string(quorum) +
          " are needed (" + join(silent) + ")");
      return kExitUnavailable;
    }
  }
  if (!config.quiet) {
    const std::string when = config.no_wait ? std::string("--no-wait")
                                            : "gave up after " + format_duration(*config.wait);
    const std::string blamed =
        config.more_keys.empty() ? config.key + " is" : held_keys(clients.front(), config);
    say(blamed + " held elsewhere (" + when + ")");
  }
  return config.conflict_exit;
}

// A Redlock that works with some servers down says so once.
void warn_if_degraded(const std::vector<redlock::Client>& clients, const Config& config) {
  if (clients.size() < 2 || config.quiet) return;
  const auto silent = silent_servers(clients);
  if (silent.empty()) return;
  say("warning: " + std::to_string(silent.size()) + " of " + std::to_string(clients.size()) +
      " servers do not answer (" + join(silent) + "); " + config.key +
      " is held on the others, and one more failure would make it unavailable");
}

// Releases the lock. Returns true if the lease was still ours, or if that is unknown because no
// server answered (then says so, unless the lease is known to be lost anyway). Never throws.
bool release(Holdable& lock, const Config& config, bool report_failure) {
  try {
    return lock.release();
  } catch (const std::exception& e) {
    if (report_failure) {
      say("could not release " + config.key + " (" + in_our_words(e.what()) +
          "); it expires within " + format_duration(config.ttl));
    }
    return true;
  }
}

// Holds the lock (acquired) while the command runs, or until stdin closes with --hold.
int hold(const std::vector<redlock::Client>& clients, const Config& config, Runtime& rt,
         Holdable& lock) {
  if (config.verbose) {
    const std::string fence =
        exports_fence(config) ? "fence " + std::to_string(lock.fence()) : "no fence";
    say("acquired " + config.key + " (" + lock.kind() + ", " + fence + ", validity " +
        format_duration(lock.validity()) + ")");
  }
  const redlock::LeaseToken lease = lock.lease();
  // With --limit or --shared there are several holders: no one holder record (--status lists
  // the permits).
  std::optional<HolderRecord> holder;
  if (config.limit == 0 && !config.shared && !clients.empty()) holder.emplace(clients, config);
  if (holder) holder->write();
  pid_t child = 0;
  if (config.mode == Mode::hold) {
    std::printf("held %s fence %llu\n", config.key.c_str(),
                static_cast<unsigned long long>(lock.fence()));
    std::fflush(stdout);  // a script reads this line to know that the lock is held
  }
  if (config.mode == Mode::run) {
    start_passing_on(*rt.signals);  // SIGUSR1 and SIGUSR2 now have somewhere to go
    child = launch(config, rt, lock);
    if (child < 0) {
      if (holder) holder->erase();
      release(lock, config, /*report_failure=*/true);
      return -child;
    }
  }
  Outcome outcome = Supervisor(config, rt, holder ? &*holder : nullptr, &lock).run(child);
  if (rt.tty_handed) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());  // back to us; SIGTTOU is blocked
  if (!outcome.lost && config.mode == Mode::hold && lease.lost()) {
    // Lost just as the hold ended, before on_lost was reported.
    outcome.lost = true;
    say("lease on " + config.key + " lost (" + redlock::to_string(lease.reason()) +
        ") before the hold ended");
  }
  if (holder) holder->erase();
  if (!release(lock, config, /*report_failure=*/!outcome.lost) && !outcome.lost) {
    outcome.lost = true;
    say("lease on " + config.key + " lost (expired) before the command finished");
  }
  if (outcome.lost && config.verbose) say("released " + config.key + " after losing it");
  return outcome.lost ? kExitLost : outcome.status;
}

redlock::LockOptions lock_options(const Config& config, const Runtime& rt) {
  redlock::LockOptions options;
  options.ttl = config.ttl;
  options.fencing = config.fencing;
  if (config.fair) options.fair = true;  // unset: the lock's default (fair on one Redis server)
  options.max_unavailable = config.unavailable;
  options.auto_renew = true;
  options.on_lost = [fd = rt.lost_write](const redlock::LostEvent& event) {
    const auto byte = static_cast<unsigned char>(event.reason);
    while (::write(fd, &byte, 1) < 0 && errno == EINTR) {
    }
  };
  return options;
}

// The wait's outcome when the lock was not acquired, or -1 if it was (and no stop signal came
// with it).
int after_acquire(const std::vector<redlock::Client>& clients, const Config& config,
                  const Runtime& rt, Holdable& lock) {
  int signo = 0;
  Acquire got = Acquire::busy;
  try {
    got = acquire(lock, config, rt, signo);
  } catch (const redlock::LimitMismatchError& e) {
    say(limit_mismatch(config.key, e.limit(), e.server_limit()));
    return kExitUsage;
  } catch (const redlock::Error& e) {
    say("cannot lock " + config.key + ": " + in_our_words(e.what()));
    return kExitUnavailable;
  }
  if (got == Acquire::busy) return report_not_acquired(clients, config, lock.quorum());
  if (got == Acquire::interrupted) {
    if (!config.quiet) say(signal_name(signo) + " while waiting for " + config.key);
    return 128 + signo;
  }
  warn_if_degraded(clients, config);
  {
    std::lock_guard<std::mutex> guard(rt.signals->mutex);
    signo = rt.signals->first_stop;  // one that came with the lock
  }
  if (signo != 0) {
    release(lock, config, /*report_failure=*/true);
    return 128 + signo;
  }
  return -1;
}

// A run without --limit on the key of a semaphore whose permits are held would hold the key as
// a plain lock beside them: refused (64), naming the limit stored with the permits. A server
// that does not answer skips the check (the wait rides it out). Throws UsageError.
void refuse_semaphore_key(const Config& config, const std::vector<redlock::Client>& clients) {
  if (config.limit > 0 || config.shared || config.exclusive || clients.size() != 1) return;
  std::vector<std::string> keys{config.key};
  keys.insert(keys.end(), config.more_keys.begin(), config.more_keys.end());
  for (const auto& k : keys) {
    std::size_t limit = 0;
    std::size_t held = 0;
    try {
      limit = stored_limit(clients.front(), k);
      if (limit > 0) held = count_held(permit_ttls(clients.front(), k, limit));
    } catch (const redlock::Error&) {
      return;
    }
    if (held > 0) {
      throw UsageError(k + " is a semaphore: " + std::to_string(held) + " of its " +
                       std::to_string(limit) + " permits are held; without --limit this run " +
                       "would hold it beside them: give --limit " + std::to_string(limit));
    }
  }
}

}  // namespace

int run_locked(const Config& config, const std::vector<redlock::Client>& clients, Runtime& rt) {
  refuse_semaphore_key(config, clients);
  const std::unique_ptr<Holdable> lock = make_holdable(config, clients, lock_options(config, rt));
  const int status = after_acquire(clients, config, rt, *lock);
  if (status >= 0) return status;
  return hold(clients, config, rt, *lock);
}

}  // namespace redlock_run
