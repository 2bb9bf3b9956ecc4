// src/election/settings.hpp: what every backend's Election checks and the lock options it runs
// its lease with (one place: fencing on, renewal on, wake on release).
#ifndef REDLOCK_SRC_ELECTION_SETTINGS_HPP
#define REDLOCK_SRC_ELECTION_SETTINGS_HPP

#include <cstddef>
#include <stdexcept>
#include <string>

#include <redlock/election.hpp>
#include <redlock/options.hpp>

#include "core/engine.hpp"  // kMaxKeyBytes

namespace redlock {
namespace detail {

// The key of election `name`'s lease on Redis: the name is always wrapped as a hash tag, so that
// `x` and `{x}` are two elections (`{x}:leader`, `{{x}}:leader`) and every helper key
// (`:leader:id`, `:leader:fence`, ...) shares the key's cluster slot.
inline std::string election_key(const std::string& name) { return "{" + name + "}:leader"; }

// The longest name: its lease's key, election_key(name), is 9 bytes longer and at most
// kMaxKeyBytes (4 MiB). The same on every store.
constexpr std::size_t kMaxElectionName = kMaxKeyBytes - (sizeof("{}:leader") - 1);

// Throws std::invalid_argument for an empty name or id, or a name over kMaxElectionName.
inline void check_election_names(const std::string& name, const std::string& id) {
  if (name.empty()) throw std::invalid_argument("redlock: Election: name must not be empty");
  if (id.empty()) throw std::invalid_argument("redlock: Election: id must not be empty");
  if (name.size() > kMaxElectionName) {
    throw std::invalid_argument("redlock: Election: name is " + std::to_string(name.size()) +
                                " bytes; the maximum is " + std::to_string(kMaxElectionName) +
                                " bytes (4 MiB less the 9 of the lease's key, {name}:leader)");
  }
}

// The lease of an election: the term is its fence, renewed while leading. Checked by the
// backend's maker (as a lock's options are), and backoff here.
inline LockOptions election_lock_options(const ElectionOptions& options) {
  if (options.backoff.count() < 0) {
    throw std::invalid_argument("redlock: Election: options.backoff must not be negative");
  }
  LockOptions lock;
  lock.ttl = options.ttl;
  lock.retry_delay = options.retry_delay;
  lock.clock_drift_factor = options.clock_drift_factor;
  lock.max_unavailable = options.max_unavailable;
  lock.watchdog = options.watchdog;
  lock.fencing = true;
  lock.auto_renew = true;
  lock.wake_on_release = true;
  return lock;
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_ELECTION_SETTINGS_HPP
