// src/core/permits.hpp: the Redis PermitBackend: a Semaphore's `limit` slot keys on one server,
// the script that takes the first free one, the rollback of an attempt whose outcome is unknown,
// and each slot's lease (a LeaseEngine announcing releases on the semaphore's channel).
#ifndef REDLOCK_SRC_CORE_PERMITS_HPP
#define REDLOCK_SRC_CORE_PERMITS_HPP

#include <memory>
#include <string>

#include <redlock/client.hpp>
#include <redlock/options.hpp>

#include "core/backend.hpp"

namespace redlock {
namespace detail {

// The permits of semaphore `key` on `client`'s server: slot keys `<key>:permit:1..limit`, the
// fence counter `<key>:permit:fence`, releases announced on `<key>:permit:released`. `options`
// are the semaphore's (fencing applies to the semaphore as a whole; never fair). Throws
// std::invalid_argument for options a lease engine rejects.
std::unique_ptr<PermitBackend> make_redis_permits(Client client, std::string key, std::size_t limit,
                                                  const LockOptions& options);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_CORE_PERMITS_HPP
