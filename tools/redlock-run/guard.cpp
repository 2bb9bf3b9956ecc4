// tools/redlock-run/guard.cpp: the command's lease guard (see guard.hpp).
#include "guard.hpp"

#include <fcntl.h>   // O_CLOEXEC, O_NONBLOCK
#include <poll.h>    // poll
#include <time.h>    // clock_gettime(CLOCK_MONOTONIC)
#include <unistd.h>  // fork, pipe2, read, write, close_range, _exit

#include <algorithm>  // std::min, std::clamp
#include <cerrno>     // errno
#include <climits>    // PIPE_BUF
#include <csignal>    // kill
#include <cstdint>    // INT64_MAX
#include <vector>     // std::vector

#include "child.hpp"  // open_descriptors

namespace redlock_run {
namespace {

// One message from redlock-run to its guard: a kind and a steady-clock time in nanoseconds.
struct Message {
  std::int64_t kind;
  std::int64_t at_ns;
};
static_assert(sizeof(Message) <= PIPE_BUF, "one write, one message");

constexpr std::int64_t kNever = INT64_MAX;

// What the guard needs after fork, prepared before it (no allocation in the guard).
struct GuardPlan {
  pid_t group{0};
  int read_fd{-1};
  std::int64_t term_at{kNever};
  std::int64_t grace_ns{0};
  std::string term_line;  // "redlock-run: ... sending SIGTERM ...\n"
  std::string gone_line;  // the same when redlock-run itself is gone
  std::string kill_line;  // "redlock-run: ... sending SIGKILL\n"
  std::vector<int> close_list;
};

std::int64_t ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::int64_t monotonic_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);  // steady_clock's clock on Linux
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

void put(const std::string& line) noexcept {
  ssize_t n;
  do {
    n = ::write(STDERR_FILENO, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
}

bool group_gone(pid_t group) noexcept { return ::kill(-group, 0) != 0 && errno == ESRCH; }

// The guard's side of the fork: async-signal-safe calls only. Never returns.
[[noreturn]] void guard_main(const GuardPlan& plan) noexcept {
  ::setpgid(0, 0);  // a stop of redlock-run's group (Ctrl-Z) does not stop the guard
  const auto read_fd = static_cast<unsigned int>(plan.read_fd);
  if ((read_fd > STDERR_FILENO + 1 && ::close_range(STDERR_FILENO + 1, read_fd - 1, 0) != 0) ||
      ::close_range(read_fd + 1, ~0U, 0) != 0) {
    for (const int fd : plan.close_list) ::close(fd);
  }
  ::close(STDIN_FILENO);
  ::close(STDOUT_FILENO);  // a reader of redlock-run's stdout sees its end with redlock-run's
  std::int64_t term_at = plan.term_at;
  std::int64_t kill_at = kNever;
  bool fired = false;  // SIGTERM sent (by the guard or by redlock-run)
  int fd = plan.read_fd;
  for (;;) {
    const std::int64_t now = monotonic_ns();
    if (!fired && now >= term_at) {
      put(fd >= 0 ? plan.term_line : plan.gone_line);
      ::kill(-plan.group, SIGTERM);
      fired = true;
      kill_at = std::min(kill_at, now + plan.grace_ns);
    }
    if (fired && now >= kill_at) {
      if (!group_gone(plan.group)) {
        put(plan.kill_line);
        ::kill(-plan.group, SIGKILL);
      }
      ::_exit(0);
    }
    if (group_gone(plan.group)) ::_exit(0);
    const std::int64_t wake = fired ? kill_at : term_at;
    const std::int64_t cap = fired ? 50'000'000 : 1'000'000'000;  // checks that the group lives
    const std::int64_t left = std::clamp<std::int64_t>(wake - now, 0, cap);
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>((left + 999'999) / 1'000'000));
    if (fd < 0 || (p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    Message m{};
    const ssize_t got = ::read(fd, &m, sizeof m);
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
      fd = -1;  // redlock-run is gone: nothing renews the lease any more
      term_at = std::min(term_at, monotonic_ns());
    } else if (got == static_cast<ssize_t>(sizeof m)) {
      if (m.kind == Guard::kFinish) ::_exit(0);
      if (m.kind == Guard::kPush && !fired) term_at = m.at_ns;
      if (m.kind == Guard::kStopping) {
        fired = true;
        kill_at = std::min(kill_at, m.at_ns);
      }
    }
  }
}

}  // namespace

bool Guard::start(pid_t group, Clock::time_point deadline, milliseconds grace,
                  const std::string& what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);  // a stopped guard never blocks redlock-run
  GuardPlan plan;
  plan.group = group;
  plan.read_fd = fds[0];
  plan.term_at = ns(deadline);
  plan.grace_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(grace).count();
  const std::string pg = "process group " + std::to_string(group);
  plan.term_line = "redlock-run: " + what +
                   " ran out with no renewal; lease guard sending SIGTERM to " + pg + "\n";
  plan.gone_line = "redlock-run: redlock-run ended while holding the " + what +
                   "; lease guard sending SIGTERM to " + pg + "\n";
  plan.kill_line = "redlock-run: " + pg + " still running " + format_duration(grace) +
                   " after SIGTERM; lease guard sending SIGKILL\n";
  for (const int fd : open_descriptors()) {
    if (fd > STDERR_FILENO && fd != fds[0]) plan.close_list.push_back(fd);
  }
  const pid_t pid = ::fork();
  if (pid == 0) guard_main(plan);
  const int fork_errno = errno;
  ::close(fds[0]);
  if (pid < 0) {
    ::close(fds[1]);
    errno = fork_errno;
    return false;
  }
  pid_ = pid;
  write_fd_ = fds[1];
  return true;
}

void Guard::send(std::int64_t kind, Clock::time_point at) noexcept {
  if (write_fd_ < 0) return;
  const Message m{kind, ns(at)};
  ssize_t n;
  do {
    n = ::write(write_fd_, &m, sizeof m);  // EAGAIN: a guard that reads nothing; it acts anyway
  } while (n < 0 && errno == EINTR);
}

void Guard::finish() noexcept {
  if (write_fd_ < 0) return;
  send(kFinish, Clock::now());
  ::close(write_fd_);
  write_fd_ = -1;
}

}  // namespace redlock_run
