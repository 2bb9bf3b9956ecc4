// tools/redlock-run/supervisor.cpp: the command's process group from start to finish (see
// supervisor.hpp).
#include "supervisor.hpp"

#include <poll.h>      // poll
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // read

#include <algorithm>  // std::min, std::clamp, std::remove
#include <cerrno>     // errno
#include <csignal>    // kill
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <cstring>    // std::strerror
#include <ctime>      // nanosleep

#include <redlock/redlock.hpp>  // LostReason, to_string

#include "child.hpp"    // shell_status
#include "signals.hpp"  // asks_to_stop

namespace redlock_run {
namespace {

// Reads one byte per queued event from a non-blocking pipe; calls `each` for each.
template <typename Each>
void drain(int fd, Each each) {
  unsigned char byte = 0;
  while (::read(fd, &byte, 1) == 1) each(byte);
}

}  // namespace

Outcome Supervisor::run(pid_t child) {
  child_ = child;
  next_refresh_ = Clock::now() + config_.ttl / 3;
  if (!holding_only() && lock_ != nullptr) start_guard();
  while (!finished()) {
    poll_once();
    if (kill_at_ != kNever && Clock::now() >= kill_at_) kill_group();
  }
  if (!out_.lost && !holding_only() && lock_ != nullptr && lock_->lease().lost()) {
    // Lost just as the command ended (the guard may have ended it), before on_lost came.
    out_.lost = true;
    say("lease on " + config_.key + " lost (" + redlock::to_string(lock_->lease().reason()) +
        ") before the command finished");
  }
  return out_;
}

// Reaps every child (a subreaper also gets the command's orphans). True once the command and
// every process below redlock-run are gone: only then may the lock be released.
bool Supervisor::finished() {
  if (holding_only()) return done_;
  int wait_status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &wait_status, WNOHANG)) > 0) {
    if (pid == child_) {
      out_.status = shell_status(wait_status);
      child_done_ = true;
    }
    if (pid == guard_.pid()) guard_done_ = true;
  }
  const bool none_left = pid < 0 && errno == ECHILD;
  if (!child_done_) return false;
  if (none_left) return true;
  if (guard_.pid() > 0 && !guard_done_ && others().empty()) {
    guard_.finish();  // only the guard is left: it exits, and its SIGCHLD wakes the poll
    return false;
  }
  if (killed_) {
    signal_all(SIGKILL);  // started since the SIGKILL
  } else if (kill_at_ == kNever) {
    last_signal_ = "SIGTERM";
    say("the command exited; stopping what it left running (SIGTERM, SIGKILL after --grace " +
        format_duration(config_.grace) + ")");
    signal_command(SIGTERM);
  }
  return false;
}

// SIGUSR1 and SIGUSR2 go to the command's process group; a stop signal goes to every process
// below redlock-run too (those that left the group), and arms the SIGKILL --grace later.
void Supervisor::signal_command(int signo) {
  if (holding_only()) return;
  if (!asks_to_stop(signo)) {
    ::kill(-child_, signo);
    return;
  }
  signal_all(signo);
  if (kill_at_ == kNever && !killed_) {
    kill_at_ = Clock::now() + config_.grace;
    guard_.stopping(kill_at_);  // its SIGKILL comes then even if we cannot send ours
  }
}

void Supervisor::start_guard() {
  const auto validity = lock_->validity();
  if (guard_.start(child_, Clock::now() + validity, config_.grace, "lease on " + config_.key)) {
    // Renewals come every third of the ttl; the deadline is pushed well within the two thirds
    // of validity left after each.
    next_push_ = Clock::now();
    return;
  }
  say(std::string("cannot start the lease guard (") + std::strerror(errno) +
      "); stopping the command");
  last_signal_ = "SIGTERM";
  signal_command(SIGTERM);
}

void Supervisor::push_deadline() {
  const auto validity = lock_->validity();
  const auto now = Clock::now();
  // Zero: lost, and on_lost is on its way; the guard keeps the last deadline meanwhile.
  if (validity > milliseconds::zero()) guard_.push(now + validity);
  next_push_ = now + std::clamp<milliseconds>(validity / 6, milliseconds(10), milliseconds(500));
}

std::vector<pid_t> Supervisor::others() const {
  std::vector<pid_t> found = descendants();
  found.erase(std::remove(found.begin(), found.end(), guard_.pid()), found.end());
  return found;
}

// The command's process group and every process below redlock-run outside it.
std::size_t Supervisor::signal_all(int signo) {
  std::size_t sent = ::kill(-child_, signo) == 0 ? 1 : 0;
  for (const pid_t pid : others()) {
    if (::getpgid(pid) != child_ && ::kill(pid, signo) == 0) ++sent;
  }
  return sent;
}

void Supervisor::kill_group() {
  kill_at_ = kNever;
  killed_ = true;
  if (holding_only()) return;
  const bool group = ::kill(-child_, 0) == 0;
  if (group || !others().empty()) {
    say((group ? "process group " + std::to_string(child_)
               : std::string("what the command started")) +
        " still running " + format_duration(config_.grace) + " after " + last_signal_ +
        "; sending SIGKILL");
    signal_all(SIGKILL);
  }
}

void Supervisor::poll_once() {
  const auto wake = std::min({kill_at_, next_refresh_, next_push_});
  const auto left = std::chrono::ceil<milliseconds>(wake - Clock::now()).count();
  const int timeout = static_cast<int>(std::clamp<std::int64_t>(left, 0, 1'000));
  pollfd fds[3] = {{rt_.signal_read, POLLIN, 0},
                   {rt_.lost_read, POLLIN, 0},
                   {holding_only() ? STDIN_FILENO : -1, POLLIN, 0}};
  if (::poll(fds, 3, timeout) < 0 && errno != EINTR) {
    const timespec pause{0, 10'000'000};  // only ENOMEM: wait a little rather than spin
    ::nanosleep(&pause, nullptr);
  }
  if ((fds[0].revents & POLLIN) != 0) drain(rt_.signal_read, [this](int s) { on_signal(s); });
  if ((fds[1].revents & POLLIN) != 0) drain(rt_.lost_read, [this](int r) { on_lost(r); });
  if ((fds[2].revents & (POLLIN | POLLHUP)) != 0) on_stdin();
  if (Clock::now() >= next_push_ && !out_.lost && kill_at_ == kNever && !killed_) {
    push_deadline();
  }
  if (Clock::now() >= next_refresh_ && !out_.lost) {
    if (holder_ != nullptr) holder_->refresh();
    next_refresh_ = Clock::now() + config_.ttl / 3;
  }
}

void Supervisor::on_signal(int signo) {
  if (signo == SIGCHLD) return;
  if (holding_only()) {
    if (asks_to_stop(signo)) finish_hold(128 + signo);
    return;
  }
  if (config_.verbose) say("forwarding " + signal_name(signo) + " to the command's process group");
  if (asks_to_stop(signo) && last_signal_.empty()) last_signal_ = signal_name(signo);
  signal_command(signo);
}

void Supervisor::on_lost(int byte) {
  if (out_.lost) return;
  out_.lost = true;
  const std::string reason =
      byte == kLostUnconfirmed
          ? std::string("disconnected: the store cannot confirm it")
          : std::string(redlock::to_string(static_cast<redlock::LostReason>(byte)));
  if (holding_only()) {
    say("lease on " + config_.key + " lost (" + reason + ")");
    finish_hold(kExitLost);
    return;
  }
  say("lease on " + config_.key + " lost (" + reason + "); sending SIGTERM to process group " +
      std::to_string(child_));
  last_signal_ = "SIGTERM";
  signal_command(SIGTERM);
}

// --hold: stdin data is read and dropped; end of file ends the hold.
void Supervisor::on_stdin() {
  char buffer[4096];
  const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) finish_hold(0);
}

void Supervisor::finish_hold(int status) {
  if (done_) return;
  done_ = true;
  if (!out_.lost) out_.status = status;
}
}  // namespace redlock_run
