// tools/redlock-run/guard.hpp: the command's lease guard. A small process forked per command
// that holds the lease's deadline (steady clock = CLOCK_MONOTONIC) and, when it passes, sends
// SIGTERM to the command's process group, then SIGKILL --grace later. The supervisor pushes the
// deadline forward after each renewal; a paused (SIGSTOP) or killed redlock-run pushes nothing,
// so the command never outlives its lease even when redlock-run cannot act. The guard makes only
// async-signal-safe calls, keeps redlock-run's blocked signals blocked (only SIGKILL ends it), is
// in a process group of its own (a stop of redlock-run's group does not stop it), and exits
// when told (finish()), when the command's group is gone, or once it has sent SIGKILL.
//
//   Guard guard;
//   guard.start(child, Clock::now() + lock.validity(), config.grace, "lease on " + config.key);
//   guard.push(Clock::now() + lock.validity());   // after each renewal
//   guard.stopping(kill_at);                      // redlock-run sent SIGTERM itself
//   guard.finish();                               // the group is gone: the guard exits
#ifndef REDLOCK_RUN_GUARD_HPP
#define REDLOCK_RUN_GUARD_HPP

#include <sys/types.h>  // pid_t

#include <cstdint>  // std::int64_t
#include <string>   // std::string

#include "common.hpp"  // Clock, milliseconds

namespace redlock_run {

class Guard {
 public:
  Guard() = default;
  ~Guard() { finish(); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  // Forks the guard of process group `group`, which ends at `deadline` unless pushed. `what`
  // names the lease in its message ("lease on KEY"). Returns false (errno set, nothing started)
  // if the pipe or the fork failed. Not thread-safe; call once.
  bool start(pid_t group, Clock::time_point deadline, milliseconds grace, const std::string& what);

  // The guard's pid (a child of redlock-run), or -1 before start() / after a failed one.
  pid_t pid() const noexcept { return pid_; }

  // Moves the deadline to `deadline` (earlier or later). Never blocks, never throws.
  void push(Clock::time_point deadline) noexcept { send(kPush, deadline); }

  // redlock-run sent SIGTERM to the group itself: the guard sends no SIGTERM of its own, only
  // SIGKILL at `kill_at` (if it is earlier than its own). Never blocks, never throws.
  void stopping(Clock::time_point kill_at) noexcept { send(kStopping, kill_at); }

  // The command's group is gone: the guard exits (redlock-run reaps it). Idempotent.
  void finish() noexcept;

  // The kinds of message the guard reads (with a steady-clock time).
  static constexpr std::int64_t kPush = 1;
  static constexpr std::int64_t kStopping = 2;
  static constexpr std::int64_t kFinish = 3;

 private:
  void send(std::int64_t kind, Clock::time_point at) noexcept;

  pid_t pid_{-1};
  int write_fd_{-1};
};

}  // namespace redlock_run

#endif  // REDLOCK_RUN_GUARD_HPP
