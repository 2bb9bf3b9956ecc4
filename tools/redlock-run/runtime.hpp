// tools/redlock-run/runtime.hpp: what redlock-run sets up before it takes the lock and what the
// later stages share: the pipes the signal thread and the watchdog's on_lost write to, the signal
// mask and SIGPIPE disposition to restore in the command, and the descriptors it was started
// with (the command inherits those, and only those).
#ifndef REDLOCK_RUN_RUNTIME_HPP
#define REDLOCK_RUN_RUNTIME_HPP

#include <csignal>  // sigset_t, struct sigaction
#include <vector>   // std::vector

namespace redlock_run {

struct SignalState;  // signals.hpp

struct Runtime {
  SignalState* signals{nullptr};
  int signal_read{-1};  // one byte (a signal number) per signal
  int lost_read{-1};    // one byte (a LostReason) per lost lease
  int lost_write{-1};   // never closed: on_lost may run on the watchdog's thread at any time
  sigset_t original_mask{};
  struct sigaction original_sigpipe {};
  std::vector<int> inherited;  // descriptors >= 3 open at start
  bool tty_handed{false};      // the command's group was made the terminal's foreground group
};

}  // namespace redlock_run

#endif  // REDLOCK_RUN_RUNTIME_HPP
