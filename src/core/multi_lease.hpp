// src/core/multi_lease.hpp: the lease of a MultiLock on one Redis server (standalone, TLS,
// Sentinel, or a Cluster when every key shares one slot): a LeaseBackend whose every operation is
// one script over all the keys, so the lock layer (LockCore, the acquire loop, the watchdog) runs
// it unchanged.
#ifndef REDLOCK_SRC_CORE_MULTI_LEASE_HPP
#define REDLOCK_SRC_CORE_MULTI_LEASE_HPP

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <redlock/options.hpp>

#include "core/backend.hpp"
#include "protocol/multi.hpp"

namespace redlock {
namespace detail {

class ClientImpl;

class MultiLease final : public LeaseBackend {
 public:
  // Throws std::invalid_argument for an empty set, a duplicate key, options.fair, every key or
  // option a Lock rejects, keys over 4 MiB in all, and on a cluster keys of different slots
  // (naming the first key whose slot differs from the first's).
  MultiLease(std::shared_ptr<ClientImpl> node, std::vector<std::string> keys,
             const LockOptions& options);

  // LeaseBackend (see core/backend.hpp). key() names the set for messages: its keys joined by
  // ", ".
  const std::string& key() const noexcept override { return name_; }
  std::size_t size() const noexcept override { return 1; }
  std::size_t quorum() const noexcept override { return 1; }
  std::chrono::milliseconds ttl() const noexcept override { return ttl_; }
  bool fair() const noexcept override { return false; }
  AcquireResult acquire(const AcquireRequest& request) override;
  // Never called (not fair): returns a result that is not held.
  AcquireResult handed_over(std::uint64_t fence, SteadyClock::time_point sent) const override;
  ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl) override;
  SteadyClock::time_point extend_floor(SteadyClock::time_point start,
                                       std::chrono::milliseconds ttl) const noexcept override;
  // Shared by every MultiLease: one round trip per server for all the leases renewed together.
  const void* batch_group() const noexcept override;
  std::size_t extend_many(RenewItem* items, std::size_t count) override;
  ReleaseResult release(const std::string& token, Announce announce) override;
  // A watch on every key's release channel (a Lock's release of one key wakes it too).
  bool watch_live() const noexcept override;
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline,
                                      std::string token_sha1) override;

  const std::vector<std::string>& keys() const noexcept { return keys_.keys; }
  // The fences of the grant made with `token` (one per key, in keys() order), if it is the last
  // grant; empty otherwise. Thread-safe.
  std::vector<std::uint64_t> fences_of(const std::string& token) const;

 private:
  void send_extend(const std::string& token, const std::string& ttl_ms, ExtendResult& result,
                   std::chrono::milliseconds ttl);
  void undo(const std::string& token) noexcept;

  std::shared_ptr<ClientImpl> node_;
  MultiKeys keys_;
  std::vector<std::string> more_channels_;  // every channel but the first (WatchChannels)
  std::string name_;
  std::chrono::milliseconds ttl_;
  std::string ttl_ms_;
  double drift_factor_;
  bool fencing_;
  mutable std::mutex mutex_;
  std::string granted_token_;  // the last grant and its fences; mutex_
  std::vector<std::uint64_t> granted_fences_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_CORE_MULTI_LEASE_HPP
