// src/core/multi_lease.hpp: the lease of a MultiLock on one Redis server (standalone, TLS,
// Sentinel, or a Cluster when every key shares one slot): a ScriptLease whose every operation is
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

#include "core/script_lease.hpp"
#include "protocol/multi.hpp"

namespace redlock {
namespace detail {

class MultiLease final : public ScriptLease {
 public:
  // Throws std::invalid_argument for an empty set, more than MultiLock::kMaxKeys keys, a
  // duplicate key, options.fair, every key or
  // option a Lock rejects, keys over 4 MiB in all, and on a cluster keys of different slots
  // (naming the first key whose slot differs from the first's). key() names the set for
  // messages: its keys joined by ", ".
  MultiLease(std::shared_ptr<ClientImpl> node, std::vector<std::string> keys,
             const LockOptions& options);

  // One script: every key or none (see protocol/multi.hpp).
  AcquireResult acquire(const AcquireRequest& request) override;
  // A watch on every key's release channel (a Lock's release of one key wakes it too).
  bool watch_live() const noexcept override;
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline,
                                      std::string token_sha1) override;

  const std::vector<std::string>& keys() const noexcept { return keys_.keys; }
  // The fences of the grant made with `token` (one per key, in keys() order), if it is the last
  // grant; empty otherwise. Thread-safe.
  std::vector<std::uint64_t> fences_of(const std::string& token) const;

 private:
  void build_extend(VarCommand& c, const ClientImpl& node, const std::string& token,
                    std::string_view ttl_ms) const override;
  void build_release(VarCommand& c, const ClientImpl& node, const std::string& token,
                     Announce announce, ScriptSend send) const override;
  const std::string& release_channel() const noexcept override { return keys_.channels[0]; }

  MultiKeys keys_;
  std::vector<std::string> more_channels_;  // every channel but the first (WatchChannels)
  mutable std::mutex mutex_;
  std::string granted_token_;  // the last grant and its fences; mutex_
  std::vector<std::uint64_t> granted_fences_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_CORE_MULTI_LEASE_HPP
