// tools/redlock-run/supervisor.hpp: the command's process group (or, with --hold, stdin) from
// start to finish: forwarding signals, stopping the group when the lease is lost (SIGTERM, then
// SIGKILL after --grace), refreshing the holder record, and reaping. redlock-run is a child
// subreaper, so it sees the whole group end.
//
//   const Outcome outcome = Supervisor(config, rt, &holder).run(child);
//   // outcome.status: the command's (shell convention); outcome.lost: the lease was lost.
#ifndef REDLOCK_RUN_SUPERVISOR_HPP
#define REDLOCK_RUN_SUPERVISOR_HPP

#include <sys/types.h>  // pid_t

#include <string>  // std::string

#include "common.hpp"   // Clock
#include "holder.hpp"   // HolderRecord
#include "options.hpp"  // Config
#include "runtime.hpp"  // Runtime

namespace redlock_run {

struct Outcome {
  int status{0};
  bool lost{false};
};

class Supervisor {
 public:
  // `holder`: the --status record to refresh with the lease, or null (--limit).
  Supervisor(const Config& config, const Runtime& rt, const HolderRecord* holder)
      : config_(config), rt_(rt), holder_(holder) {}

  // Runs until the command `child` and every process below redlock-run are gone (child <= 0:
  // --hold, until stdin closes or a stop signal). Never throws.
  Outcome run(pid_t child);

 private:
  static constexpr Clock::time_point kNever = Clock::time_point::max();

  bool holding_only() const { return child_ <= 0; }

  // Reaps every child. True once the command and everything below redlock-run are gone.
  bool finished();

  void signal_command(int signo);

  std::size_t signal_all(int signo);

  void kill_group();

  void poll_once();

  void on_signal(int signo);

  void on_lost(int byte);

  // --hold: stdin data is read and dropped; end of file ends the hold.
  void on_stdin();

  void finish_hold(int status);

  const Config& config_;
  const Runtime& rt_;
  const HolderRecord* holder_;
  pid_t child_{-1};
  Outcome out_;
  bool child_done_{false};
  bool done_{false};
  bool killed_{false};
  std::string last_signal_;
  Clock::time_point kill_at_{kNever};
  Clock::time_point next_refresh_{kNever};
};

}  // namespace redlock_run

#endif  // REDLOCK_RUN_SUPERVISOR_HPP
