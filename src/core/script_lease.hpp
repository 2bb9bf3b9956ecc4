// src/core/script_lease.hpp: a lease whose every operation is one Lua script on each of its
// nodes (a MultiLock's set of keys on one server, a ReadWriteLock's writer or reader on one
// server or a quorum of N): the acquire decision (execute with the rollback behind it on a
// timeout, tally, replicas, validity, the rollback of a failed attempt), extend, the watchdog's
// batched renewal and release are written once here; a kind of lease names its scripts.
#ifndef REDLOCK_SRC_CORE_SCRIPT_LEASE_HPP
#define REDLOCK_SRC_CORE_SCRIPT_LEASE_HPP

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <redlock/options.hpp>

#include "core/backend.hpp"
#include "core/quorum.hpp"
#include "protocol/multi.hpp"  // VarCommand, ScriptSend

namespace redlock {
namespace detail {

class ClientImpl;
class Tally;
struct NodeBatch;

class ScriptLease : public LeaseBackend {
 public:
  // `name` names the lease in messages (key()); `what` its scripts ("the MultiLock", ...).
  // Held when a quorum of `nodes` granted (N = 1: the one server). Throws std::invalid_argument
  // for no node or an empty client.
  ScriptLease(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string name, const char* what,
              const LockOptions& options);

  const std::string& key() const noexcept override { return name_; }
  std::size_t size() const noexcept override { return nodes_.size(); }
  std::size_t quorum() const noexcept override { return quorum_of(nodes_.size()); }
  std::chrono::milliseconds ttl() const noexcept override { return ttl_; }
  bool fair() const noexcept override { return false; }
  // Never called (not fair): returns a result that is not held.
  AcquireResult handed_over(std::uint64_t fence, SteadyClock::time_point sent) const override;
  ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl) override;
  SteadyClock::time_point extend_floor(SteadyClock::time_point start,
                                       std::chrono::milliseconds ttl) const noexcept override;
  // Shared by every ScriptLease: one round trip per server for all the leases renewed together.
  const void* batch_group() const noexcept override;
  // One watchdog lane per set of servers: a dead server delays no other server's renewals.
  std::uintptr_t renewal_lane() const noexcept override { return lane_of_nodes(nodes_); }
  std::size_t extend_many(RenewItem* items, std::size_t count) override;
  ReleaseResult release(const std::string& token, Announce announce) override;
  ReleaseResult retry_release(const std::string& token, const std::vector<char>& owed) override;

 protected:
  // The extend script of `token` to `ttl_ms` for `node`: replies 1 (confirmed) or 0.
  virtual void build_extend(VarCommand& c, const ClientImpl& node, const std::string& token,
                            std::string_view ttl_ms) const = 0;
  // The release script of `token` for `node`: replies as a Lock's release (read_release_reply).
  virtual void build_release(VarCommand& c, const ClientImpl& node, const std::string& token,
                             Announce announce, ScriptSend send) const = 0;
  // The channel whose subscribers a release counts (waiting_listeners).
  virtual const std::string& release_channel() const noexcept = 0;

  // Builds one node's acquire command.
  using BuildAcquire = std::function<void(VarCommand&, const ClientImpl&)>;
  // Sends the acquire script to every node (each reply as read_multi_reply reads it, for `keys`
  // keys) and decides: held when a quorum granted in time (the fences in `fences` if not null,
  // each the largest a granting node gave), refused (holder_pttl: the smallest a node gave), or
  // the failure when fewer than a quorum answered; a grant not held is rolled back.
  AcquireResult acquire_script(const BuildAcquire& build, const std::string& token,
                               std::size_t keys, std::vector<std::uint64_t>* fences);

  const std::vector<std::shared_ptr<ClientImpl>>& nodes() const noexcept { return nodes_; }
  ClientImpl& node() const noexcept { return *nodes_[0]; }  // a one-server lease's server
  const std::string& ttl_ms() const noexcept { return ttl_ms_; }
  bool fencing() const noexcept { return fencing_; }

 private:
  bool read_acquire(Tally& tally, std::size_t i, const NodeBatch& batch, std::size_t keys,
                    AcquireResult& result, std::vector<std::uint64_t>& fences) const;
  std::size_t extend_items(RenewItem* items, std::size_t count,
                           const std::chrono::milliseconds* ttl, const std::string* ttl_ms);
  ReleaseResult release_on(const std::string& token, const bool* only, Announce announce);

  std::vector<std::shared_ptr<ClientImpl>> nodes_;
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
