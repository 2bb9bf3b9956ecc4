// tools/redlock-run/supervisor.hpp: the command's process group (or, with --hold, stdin) from
// start to finish: forwarding signals, stopping the group when the lease is lost (SIGTERM, then
// SIGKILL after --grace), refreshing the holder record, and reaping. redlock-run is a child
// subreaper, so it sees the whole group end.
//
// A lease guard (guard.hpp) bounds the command's life by the lease's validity even while
// redlock-run itself cannot run (paused, killed): the supervisor pushes the validity's end to it.
//
//   const Outcome outcome = Supervisor(config, rt, &holder, &lock).run(child);
//   // outcome.status: the command's (shell convention); outcome.lost: the lease was lost.
#ifndef REDLOCK_RUN_SUPERVISOR_HPP
#define REDLOCK_RUN_SUPERVISOR_HPP

#include <sys/types.h>  // pid_t

#include <string>  // std::string
#include <vector>  // std::vector

#include "common.hpp"    // Clock
#include "guard.hpp"     // Guard
#include "holdable.hpp"  // Holdable
#include "holder.hpp"    // HolderRecord
#include "options.hpp"   // Config
#include "runtime.hpp"   // Runtime

namespace redlock_run {

// The byte on the lost pipe (otherwise a redlock::LostReason) for a term stepped down from with
// its lease not lost: the store cannot confirm it (a suspended ZooKeeper session).
constexpr unsigned char kLostUnconfirmed = 0xFF;

struct Outcome {
  int status{0};
  bool lost{false};
};

class Supervisor {
 public:
  // `holder`: the --status record to refresh with the lease, or null (--limit). `lock`: the
  // lease whose validity bounds the command's life (the guard's deadline), or null (--hold).
  Supervisor(const Config& config, const Runtime& rt, const HolderRecord* holder,
             const Holdable* lock)
      : config_(config), rt_(rt), holder_(holder), lock_(lock) {}

  // Runs until the command `child` and every process below redlock-run are gone (child <= 0:
  // --hold, until stdin closes or a stop signal). Never throws.
  Outcome run(pid_t child);

 private:
  static constexpr Clock::time_point kNever = Clock::time_point::max();

  bool holding_only() const { return child_ <= 0; }

  // Reaps every child. True once the command and everything below redlock-run are gone.
  bool finished();

  void signal_command(int signo);

  // Starts the lease guard of the command's group; if it cannot, stops the command.
  void start_guard();

  // Pushes the guard's deadline to the end of the lease's current validity.
  void push_deadline();

  // The live processes below redlock-run, but the guard.
  std::vector<pid_t> others() const;

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
  const Holdable* lock_;
  Guard guard_;
  bool guard_done_{false};
  pid_t child_{-1};
  Outcome out_;
  bool child_done_{false};
  bool done_{false};
  bool killed_{false};
  std::string last_signal_;
  Clock::time_point kill_at_{kNever};
  Clock::time_point next_refresh_{kNever};
  Clock::time_point next_push_{kNever};
};

}  // namespace redlock_run

#endif  // REDLOCK_RUN_SUPERVISOR_HPP
