// tools/redlock-run/supervisor.cpp: the command's process group from start to finish (see
// supervisor.hpp).
#include "supervisor.hpp"

#include <poll.h>      // poll
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // read

#include <algorithm>  // std::min, std::clamp
#include <cerrno>     // errno
#include <csignal>    // kill
#include <cstdint>    // std::int64_t
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

// Runs until the group `child` leads is gone (child <= 0: --hold, until stdin closes or a
// stop signal). Never throws.
Outcome Supervisor::run(pid_t child) {
  child_ = child;
  next_refresh_ = Clock::now() + config_.ttl / 3;
  while (!finished()) {
    poll_once();
    if (kill_at_ != kNever && Clock::now() >= kill_at_) kill_group();
  }
  return out_;
}

// Reaps every child (a subreaper also gets the group's orphans). True once the group is gone.
bool Supervisor::finished() {
  if (holding_only()) return done_;
  int wait_status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &wait_status, WNOHANG)) > 0) {
    if (pid == child_) {
      out_.status = shell_status(wait_status);
      child_done_ = true;
    }
  }
  if (!child_done_) return false;
  if (::kill(-child_, 0) != 0 && errno == ESRCH) return true;
  if (kill_at_ == kNever && !killed_) {
    last_signal_ = "SIGTERM";
    say("the command exited; stopping what it left running in its process group (SIGTERM, "
        "SIGKILL after --grace " +
        format_duration(config_.grace) + ")");
    signal_group(SIGTERM);
  }
  return false;
}

void Supervisor::signal_group(int signo) {
  if (!holding_only()) ::kill(-child_, signo);
  if (asks_to_stop(signo) && kill_at_ == kNever && !killed_)
    kill_at_ = Clock::now() + config_.grace;
}

void Supervisor::kill_group() {
  kill_at_ = kNever;
  killed_ = true;
  if (holding_only()) return;
  if (::kill(-child_, 0) == 0) {
    say("process group " + std::to_string(child_) + " still running " +
        format_duration(config_.grace) + " after " + last_signal_ + "; sending SIGKILL");
    ::kill(-child_, SIGKILL);
  }
}

void Supervisor::poll_once() {
  const auto wake = std::min(kill_at_, next_refresh_);
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
  signal_group(signo);
}

void Supervisor::on_lost(int byte) {
  if (out_.lost) return;
  out_.lost = true;
  const auto reason = static_cast<redlock::LostReason>(byte);
  if (holding_only()) {
    say("lease on " + config_.key + " lost (" + redlock::to_string(reason) + ")");
    finish_hold(kExitLost);
    return;
  }
  say("lease on " + config_.key + " lost (" + redlock::to_string(reason) +
      "); sending SIGTERM to process group " + std::to_string(child_));
  last_signal_ = "SIGTERM";
  signal_group(SIGTERM);
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
