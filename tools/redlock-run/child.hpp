// tools/redlock-run/child.hpp: starting the command: fork, a process group of its own (the
// terminal's foreground group if redlock-run had it), the lock's environment, and exec. Between
// fork and exec the child makes only async-signal-safe calls; the descriptors the library opened
// are closed in it, so the command never holds a Redis connection.
//
//   const pid_t child = launch(config, rt, lock);   // < 0: -(exit status), already reported
#ifndef REDLOCK_RUN_CHILD_HPP
#define REDLOCK_RUN_CHILD_HPP

#include <sys/types.h>  // pid_t

#include <vector>  // std::vector

#include "holdable.hpp"  // Holdable
#include "options.hpp"   // Config
#include "runtime.hpp"   // Runtime

namespace redlock_run {

// Open descriptors, sorted, from /proc/self/fd. Empty if /proc is not mounted.
std::vector<int> open_descriptors();

// Starts the command with REDLOCK_KEY, REDLOCK_TTL_MS, REDLOCK_VALIDITY_MS and (with --fencing)
// REDLOCK_FENCE from `lock`. Returns its pid (the leader of its process group), or -exit status
// (71, 126, 127) after saying why it could not start.
pid_t launch(const Config& config, Runtime& rt, const Holdable& lock);

// The live processes below this one (its children, theirs, ...), from /proc/<pid>/stat; zombies
// are left out. redlock-run is a child subreaper, so an orphan of the command's (a job a `set -m`
// shell left, a `setsid` child whose parent exited) is reparented to it and stays in the tree.
// Empty if /proc is not mounted.
std::vector<pid_t> descendants();

// Shell convention: the exit code, or 128 + the signal that killed it.
int shell_status(int wait_status);

}  // namespace redlock_run

#endif  // REDLOCK_RUN_CHILD_HPP
