// tools/redlock-run/signals.hpp: how redlock-run takes signals. No signal handlers at all: before
// any thread exists, the handled signals (and SIGTTOU, for tcsetpgrp) are blocked, so every thread
// the library starts later inherits the mask; one thread reads them with sigwaitinfo() and writes
// each signal number to a pipe that the main loop poll()s. While a wait for the lock is in
// progress, that thread also cancels it (Holdable::cancel_waits()).
//
//   block_signals(rt);                 // first thing, before any thread
//   if (!start_signal_thread(rt)) ...  // once the options are read
#ifndef REDLOCK_RUN_SIGNALS_HPP
#define REDLOCK_RUN_SIGNALS_HPP

#include <mutex>  // std::mutex

#include "runtime.hpp"  // Runtime

namespace redlock_run {

class Holdable;  // holdable.hpp

// Shared with the signal thread and never destroyed: the thread is detached and runs until exit.
struct SignalState {
  std::mutex mutex;
  Holdable* waiting{nullptr};  // set while a wait is in progress
  int first_stop{0};           // the first stop signal seen while waiting
  // SIGUSR1 and SIGUSR2 are passed on to the command only: before it starts they are ignored.
  bool passing_on{false};
  int write_fd{-1};
};

// SIGUSR1 and SIGUSR2 are passed on only (they often mean "reload" or "report"); every other
// forwarded signal asks the command to stop, and --grace later the group gets SIGKILL.
bool asks_to_stop(int signo);

// From now on SIGUSR1 and SIGUSR2 are reported to the main loop, which passes them on to the
// command (call it just before the command starts).
void start_passing_on(SignalState& state);

// Blocks the handled signals in this (the only) thread, so that every thread started later
// inherits the mask, and ignores SIGPIPE (hiredis writes to sockets a server may have closed).
// Keeps what it replaced in `rt`, for the command.
void block_signals(Runtime& rt);

// Creates the signal and lost-lease pipes and starts the signal thread. Returns false, with
// errno set, if a pipe cannot be made.
bool start_signal_thread(Runtime& rt);

}  // namespace redlock_run

#endif  // REDLOCK_RUN_SIGNALS_HPP
