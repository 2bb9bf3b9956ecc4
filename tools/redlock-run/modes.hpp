// tools/redlock-run/modes.hpp: the modes, what redlock-run does once the options are read. Each
// mode is one function here, chosen by Config::mode in main.cpp (run_mode): a new mode (a leader
// election, an observer that prints the leader) is a new Mode value, its options in options.cpp,
// and one function here. What is locked (a Lock, a Redlock, a Semaphore permit...) is a separate
// choice, made in holdable.cpp.
//
//   --status            run_status: who holds KEY, or leads the election KEY (status.cpp)
//   COMMAND, --hold     run_locked: take the lock, then run the command or hold until stdin
//                       closes, and release (locked.cpp)
//   --leader            run_leader: the leader of the election KEY (elect.cpp)
//   --elect ID COMMAND  run_elect: a hot standby that runs the command whenever elected
//                       (elect.cpp)
#ifndef REDLOCK_RUN_MODES_HPP
#define REDLOCK_RUN_MODES_HPP

#include <optional>  // std::optional
#include <vector>    // std::vector

#include <redlock/election.hpp>  // Leader
#include <redlock/redlock.hpp>   // Client

#include "options.hpp"  // Config
#include "runtime.hpp"  // Runtime

namespace redlock_run {

// --status: one line per server on stdout (a semaphore: its permits; an election: its leader and
// term), or one JSON object with --format json. Returns 0 if held (on a quorum), 1 if not, 69 if
// too few servers answer, 64 for a --limit other than the stored one.
int run_status(const Config& config, const std::vector<redlock::Client>& clients);

// Takes the lock on `clients` (or the --postgres / --zookeeper store), runs the command (or
// --hold), releases. Returns the exit status (the command's, 70 if the lease was lost, 75 if the
// lock is held elsewhere, 69, ...). Throws UsageError, redlock::Error.
int run_locked(const Config& config, const std::vector<redlock::Client>& clients, Runtime& rt);

// --leader: the election KEY's leader on stdout as print_leader() (redlock::Election::leader(),
// on --redis, --zookeeper or --postgres). Returns 0 if there is a leader, 1 if not. Throws
// redlock::Error (exit 69 in main).
int run_leader(const Config& config, const std::vector<redlock::Client>& clients);

// Prints the leader of the election KEY as --leader does: "ID TERM" (ID as quoted_word()), or
// a JSON object with --format json; says "nobody leads KEY" on stderr (not with -q) if there is
// none. Returns 0 if there is a leader, 1 if not (status.cpp).
int print_leader(const Config& config, const std::optional<redlock::Leader>& leader);

// --elect ID: campaigns for the election KEY, runs the command while leading, stops it when
// leadership is lost and campaigns again. Returns the command's status once it exits by itself,
// or 128+N after stop signal N. Throws UsageError, redlock::Error.
int run_elect(const Config& config, const std::vector<redlock::Client>& clients, Runtime& rt);

}  // namespace redlock_run

#endif  // REDLOCK_RUN_MODES_HPP
