// src/lock/engine_backend.hpp: TEMPORARY adapter that presents today's LeaseEngine as a
// LeaseBackend, and the one helper that derives the loss reasons from its results. The
// integrator deletes this file once LeaseEngine implements LeaseBackend itself (issue 12, HB).
#ifndef REDLOCK_SRC_LOCK_ENGINE_BACKEND_HPP
#define REDLOCK_SRC_LOCK_ENGINE_BACKEND_HPP

#include <memory>
#include <string>
#include <vector>

#include <redlock/options.hpp>

#include "core/backend.hpp"

namespace redlock {
namespace detail {

class ClientImpl;
class LeaseEngine;

// Makes the lease backend of a Lock/Redlock on `nodes`. Throws std::invalid_argument for bad
// options or duplicate nodes (as LeaseEngine's constructor).
std::shared_ptr<LeaseBackend> make_lease_backend(std::vector<std::shared_ptr<ClientImpl>> nodes,
                                                 std::string key, const LockOptions& options);

// The engine the watchdog renews with (its interface still takes a LeaseEngine). TEMPORARY, as
// this file. `backend` must come from make_lease_backend.
std::shared_ptr<LeaseEngine> engine_of(const LeaseBackend& backend) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_ENGINE_BACKEND_HPP
