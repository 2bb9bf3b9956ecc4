// tools/redlock-run/holdable.cpp: make_holdable(), the one place that chooses what a run holds
// (see holdable.hpp).
#include "holdable.hpp"

#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#ifdef REDLOCK_RUN_WITH_POSTGRES
#include <redlock/postgres.hpp>  // --postgres
#endif
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
#include <redlock/zookeeper.hpp>  // zookeeper::Session, zookeeper::Lock (--zookeeper)
#endif

namespace redlock_run {
namespace {

// The lock of the store `config` names; parse_command_line() has refused a store this build
// lacks.
std::unique_ptr<Holdable> choose(const Config& config, const std::vector<redlock::Client>& clients,
                                 const redlock::LockOptions& options) {
  if (!config.postgres.empty()) {
#ifdef REDLOCK_RUN_WITH_POSTGRES
    auto database = std::make_shared<redlock::postgres::Database>(config.postgres);
    return std::make_unique<HoldableOf<redlock::postgres::Lock>>("PostgreSQL lease", database,
                                                                 *database, config.key, options);
#endif
  } else if (!config.zookeeper.empty()) {
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
    auto session = std::make_shared<redlock::zookeeper::Session>(config.zookeeper);
    if (config.shared) {
      return std::make_unique<HoldableOf<ReadSide<redlock::zookeeper::ReadWriteLock>>>(
          "ZooKeeper read lock", session, 1, *session, config.key, options);
    }
    if (config.exclusive) {
      return std::make_unique<HoldableOf<WriteSide<redlock::zookeeper::ReadWriteLock>>>(
          "ZooKeeper write lock", session, 1, *session, config.key, options);
    }
    return std::make_unique<HoldableOf<redlock::zookeeper::Lock>>("ZooKeeper lock", session,
                                                                  *session, config.key, options);
#endif
  } else if (!config.more_keys.empty()) {
    std::vector<std::string> keys{config.key};
    keys.insert(keys.end(), config.more_keys.begin(), config.more_keys.end());
    return std::make_unique<HoldableOf<redlock::MultiLock>>(
        "MultiLock of " + std::to_string(keys.size()) + " keys", nullptr, clients.front(),
        std::move(keys), options);
  } else if (config.shared || config.exclusive) {
    const std::size_t quorum = clients.size() / 2 + 1;
    const std::string kind =
        std::string("ReadWriteLock, ") + (config.shared ? "read side" : "write side") +
        (clients.size() == 1
             ? std::string()
             : ", quorum " + std::to_string(quorum) + " of " + std::to_string(clients.size()));
    if (config.exclusive) {
      return std::make_unique<HoldableOf<WriteSide<redlock::ReadWriteLock>>>(
          kind, nullptr, quorum, clients, config.key, options);
    }
    return std::make_unique<HoldableOf<ReadSide<redlock::ReadWriteLock>>>(
        kind, nullptr, quorum, clients, config.key, options);
  } else if (config.limit > 0) {
    return std::make_unique<HoldableOf<redlock::Semaphore>>(
        "Semaphore, limit " + std::to_string(config.limit), nullptr, clients.front(), config.key,
        config.limit, options);
  } else if (clients.size() == 1) {
    return std::make_unique<HoldableOf<redlock::Lock>>("Lock", nullptr, clients.front(), config.key,
                                                       options);
  } else {
    auto lock = std::make_unique<HoldableOf<redlock::Redlock>>("Redlock", nullptr, clients,
                                                               config.key, options);
    lock->set_kind("Redlock, quorum " + std::to_string(lock->quorum()) + " of " +
                   std::to_string(clients.size()));
    return lock;
  }
  throw UsageError("this redlock-run was built without the store the options name");
}

}  // namespace

std::unique_ptr<Holdable> make_holdable(const Config& config,
                                        const std::vector<redlock::Client>& clients,
                                        const redlock::LockOptions& options) {
  try {
    return choose(config, clients, options);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.find("already in the list") != std::string::npos) {
      throw UsageError("the same server is given twice (--redis, --redis-file or REDLOCK_REDIS)");
    }
    throw UsageError("--key or --ttl: " + in_our_words(what));
  }
}

}  // namespace redlock_run
