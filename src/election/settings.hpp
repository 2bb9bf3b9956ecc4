// src/election/settings.hpp: what every backend's Election checks and the lock options it runs
// its lease with (one place: fencing on, renewal on, wake on release).
#ifndef REDLOCK_SRC_ELECTION_SETTINGS_HPP
#define REDLOCK_SRC_ELECTION_SETTINGS_HPP

#include <stdexcept>
#include <string>

#include <redlock/election.hpp>
#include <redlock/options.hpp>

namespace redlock {
namespace detail {

// Throws std::invalid_argument for an empty name or id.
inline void check_election_names(const std::string& name, const std::string& id) {
  if (name.empty()) throw std::invalid_argument("redlock: Election: name must not be empty");
  if (id.empty()) throw std::invalid_argument("redlock: Election: id must not be empty");
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
