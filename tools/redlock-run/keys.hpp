// tools/redlock-run/keys.hpp: what redlock-run reads of the keys the library keeps beside a lock,
// for --status and for the checks before a run: the helper keys' names (key layout 3), the limit
// stored with a semaphore's permits, the permits held, the live readers of a ReadWriteLock.
//
//   const std::size_t limit = stored_limit(client, "jobs");    // 0: not a semaphore
//   if (limit > 0 && held_permits(client, "jobs", limit) > 0) ...
#ifndef REDLOCK_RUN_KEYS_HPP
#define REDLOCK_RUN_KEYS_HPP

#include <cstddef>  // std::size_t
#include <cstdint>  // std::int64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include <redlock/redlock.hpp>  // Client

namespace redlock_run {

// The name of a helper key of `key` in key layout 3 (docs/operations.md, "Key layout"):
// "{KEY}SUFFIX", or "KEYSUFFIX" when the key has a hash tag of its own. Never throws (but
// std::bad_alloc).
std::string helper_key(const std::string& key, const std::string& suffix);

// The value a ReadWriteLock's readers keep in the key itself while any of them holds.
inline constexpr const char kReadersHold[] = "redlock:rw:readers";

// The limit stored with the permits of the semaphore `key` on `client` (0: none). Throws
// redlock::Error.
std::size_t stored_limit(const redlock::Client& client, const std::string& key);

// The remaining ttl of each of the permits 1..limit of `key`, milliseconds (-2: not held; -1: no
// expiry). Throws redlock::Error.
std::vector<std::int64_t> permit_ttls(const redlock::Client& client, const std::string& key,
                                      std::size_t limit);

// How many of `permit_ttls` are held.
std::size_t count_held(const std::vector<std::int64_t>& ttls);

// How many readers of the ReadWriteLock `key` hold a live lease now (on the server's clock).
// Throws redlock::Error.
std::size_t live_readers(const redlock::Client& client, const std::string& key);

}  // namespace redlock_run

#endif  // REDLOCK_RUN_KEYS_HPP
