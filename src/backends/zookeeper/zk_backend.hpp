// src/backends/zookeeper/zk_backend.hpp: the lease backend of a zookeeper::Lock (zk_backend.cpp),
// for the component's users other than Lock (the Election).
#ifndef REDLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_BACKEND_HPP
#define REDLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_BACKEND_HPP

#include <memory>
#include <string>

#include <redlock/options.hpp>

#include "core/backend.hpp"

namespace redlock {
namespace detail {

class ZkSession;

// The lease of a lock named `name` (a relative znode path) on `session`. Sets in `options` what
// such a lock runs with (ttl: the session timeout; auto_renew; fair: one znode per waiter; the
// Session's watchdog unless one is named, tracked by the session), then checks them. Throws
// std::invalid_argument naming what is wrong.
std::shared_ptr<LeaseBackend> make_zk_backend(const std::shared_ptr<ZkSession>& session,
                                              std::string name, LockOptions& options);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_BACKEND_HPP
