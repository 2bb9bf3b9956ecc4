// tools/redlock-run/signals.cpp: the signal thread and the signal mask (see signals.hpp).
#include "signals.hpp"

#include <fcntl.h>   // O_CLOEXEC, O_NONBLOCK
#include <unistd.h>  // pipe2, write

#include <cerrno>   // errno
#include <csignal>  // sigprocmask, sigaction, sigwaitinfo
#include <thread>   // std::thread: the signal thread

#include "holdable.hpp"  // Holdable::cancel_waits

namespace redlock_run {
namespace {

// Every signal whose default action ends a process and that someone may send on purpose. The
// synchronous ones (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS) are crashes, and
// SIGKILL cannot be caught. SIGPIPE is ignored (see block_signals).
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (const int s : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM,
                      SIGPROF, SIGXCPU, SIGXFSZ, SIGIO, SIGPWR, SIGSTKFLT}) {
    sigaddset(&set, s);
  }
  for (int s = SIGRTMIN; s <= SIGRTMAX; ++s) sigaddset(&set, s);
  return set;
}

// The stop signals and SIGCHLD: what the signal thread takes.
sigset_t handled_signals() {
  sigset_t set = stop_signals();
  sigaddset(&set, SIGCHLD);
  return set;
}

// Whether to report `signo` to the main loop. A stop signal is recorded and cancels the wait in
// progress; SIGUSR1 and SIGUSR2 before the command starts have no one to go to.
bool note(SignalState& state, int signo) {
  if (signo == SIGCHLD) return true;
  std::lock_guard<std::mutex> guard(state.mutex);
  if (!asks_to_stop(signo)) return state.passing_on;
  if (state.first_stop == 0) state.first_stop = signo;
  if (state.waiting != nullptr) state.waiting->cancel_waits();
  return true;
}

void signal_loop(SignalState* state, sigset_t set) {
  for (;;) {
    siginfo_t info;
    const int signo = ::sigwaitinfo(&set, &info);
    if (signo < 0 || !note(*state, signo)) continue;
    const auto byte = static_cast<unsigned char>(signo);
    while (::write(state->write_fd, &byte, 1) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace

bool asks_to_stop(int signo) { return signo != SIGUSR1 && signo != SIGUSR2; }

void start_passing_on(SignalState& state) {
  std::lock_guard<std::mutex> guard(state.mutex);
  state.passing_on = true;
}

void block_signals(Runtime& rt) {
  sigset_t blocked = handled_signals();
  sigaddset(&blocked, SIGTTOU);  // tcsetpgrp from the background must not stop us
  ::sigprocmask(SIG_BLOCK, &blocked, &rt.original_mask);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &rt.original_sigpipe);
}

bool start_signal_thread(Runtime& rt) {
  int signal_pipe[2];
  int lost_pipe[2];
  if (::pipe2(signal_pipe, O_NONBLOCK | O_CLOEXEC) != 0 ||
      ::pipe2(lost_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
    return false;
  }
  rt.signal_read = signal_pipe[0];
  rt.lost_read = lost_pipe[0];
  rt.lost_write = lost_pipe[1];
  rt.signals = new SignalState;  // never deleted: the detached thread uses it until exit
  rt.signals->write_fd = signal_pipe[1];
  std::thread(signal_loop, rt.signals, handled_signals()).detach();
  return true;
}

}  // namespace redlock_run
