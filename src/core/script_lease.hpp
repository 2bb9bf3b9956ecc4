// src/core/script_lease.hpp: a lease on one Redis server whose every operation is one Lua script
// (a MultiLock's set of keys, a ReadWriteLock's writer or reader): the acquire decision (execute
// with its rollback behind it on a timeout, replicas, validity), extend, the watchdog's batched
// renewal and release are written once here; a kind of lease names its scripts.
#ifndef REDLOCK_SRC_CORE_SCRIPT_LEASE_HPP
#define REDLOCK_SRC_CORE_SCRIPT_LEASE_HPP

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <redlock/options.hpp>

#include "core/backend.hpp"
#include "protocol/multi.hpp"  // VarCommand, ScriptSend

namespace redlock {
namespace detail {

class ClientImpl;

class ScriptLease : public LeaseBackend {
 public:
  // `name` names the lease in messages (key()); `what` its scripts ("the MultiLock", ...).
  // Throws std::invalid_argument for an empty client.
  ScriptLease(std::shared_ptr<ClientImpl> node, std::string name, const char* what,
              const LockOptions& options);

  const std::string& key() const noexcept override { return name_; }
  std::size_t size() const noexcept override { return 1; }
  std::size_t quorum() const noexcept override { return 1; }
  std::chrono::milliseconds ttl() const noexcept override { return ttl_; }
  bool fair() const noexcept override { return false; }
  // Never called (not fair): returns a result that is not held.
  AcquireResult handed_over(std::uint64_t fence, SteadyClock::time_point sent) const override;
  ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl) override;
  SteadyClock::time_point extend_floor(SteadyClock::time_point start,
                                       std::chrono::milliseconds ttl) const noexcept override;
  // Shared by every ScriptLease: one round trip per server for all the leases renewed together.
  const void* batch_group() const noexcept override;
  std::size_t extend_many(RenewItem* items, std::size_t count) override;
  ReleaseResult release(const std::string& token, Announce announce) override;

 protected:
  // The extend script of `token` to `ttl_ms`: replies 1 (confirmed) or 0.
  virtual void build_extend(VarCommand& c, const std::string& token,
                            std::string_view ttl_ms) const = 0;
  // The release script of `token`: replies as a Lock's release (read_release_reply).
  virtual void build_release(VarCommand& c, const std::string& token, Announce announce,
                             ScriptSend send) const = 0;
  // The channel whose subscribers a release counts (waiting_listeners).
  virtual const std::string& release_channel() const noexcept = 0;

  // Sends one acquire script (its reply as read_multi_reply reads it, for `keys` keys) and
  // decides: held (the fences in `fences` if not null), refused (holder_pttl), or the failure;
  // a grant too late to be of use, or one too few replicas acknowledged, is given back.
  AcquireResult acquire_script(const VarCommand& command, const std::string& token,
                               std::size_t keys, std::vector<std::uint64_t>* fences);
  // Releases `token` quietly, best effort (logged at debug).
  void undo(const std::string& token) noexcept;

  ClientImpl& node() const noexcept { return *node_; }
  const std::shared_ptr<ClientImpl>& node_ptr() const noexcept { return node_; }
  const std::string& ttl_ms() const noexcept { return ttl_ms_; }
  bool fencing() const noexcept { return fencing_; }

 private:
  std::shared_ptr<ClientImpl> node_;
  std::string name_;
  const char* what_;
  std::chrono::milliseconds ttl_;
  std::string ttl_ms_;
  double drift_factor_;
  bool fencing_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_CORE_SCRIPT_LEASE_HPP
