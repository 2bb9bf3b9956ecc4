// src/lock/multilock.cpp: the public MultiLock: a LockCore (lock/lock_core.hpp) over the
// multi-key lease (core/multi_lease.hpp); everything else is LockBase's.
#include <redlock/multilock.hpp>

#include "api/access.hpp"
#include "core/multi_lease.hpp"
#include "lock/lock_core.hpp"

namespace redlock {

struct MultiLock::Parts {
  std::shared_ptr<detail::MultiLease> lease;
  std::shared_ptr<detail::LockCore> core;
};

MultiLock::Parts MultiLock::make_parts(Client client, std::vector<std::string> keys,
                                       LockOptions options) {
  auto lease = std::make_shared<detail::MultiLease>(detail::Access::client(client), std::move(keys),
                                                    options);
  auto core = std::make_shared<detail::LockCore>(lease, std::move(options));
  return Parts{std::move(lease), std::move(core)};
}

MultiLock::MultiLock(Client client, std::vector<std::string> keys, LockOptions options)
    : MultiLock(make_parts(std::move(client), std::move(keys), std::move(options))) {}

MultiLock::MultiLock(Parts parts)
    : LockBase(parts.core), lease_(std::move(parts.lease)), core_(std::move(parts.core)) {}

const std::vector<std::string>& MultiLock::keys() const noexcept { return lease_->keys(); }

std::vector<std::uint64_t> MultiLock::fences() const {
  const auto hold = core_->ownership().hold_of_caller();
  if (!hold || hold->lost(detail::SteadyClock::now()) || !core_->options().fencing) return {};
  return lease_->fences_of(hold->token());
}

}  // namespace redlock
