// src/core/engine.hpp: the lease engine. One implementation of acquire / extend / release for N
// nodes; a single-instance Lock is the N = 1 case. The rules come from quorum.hpp, the I/O from
// connection.hpp; nothing here knows about threads, re-entrancy or waiting (see lock.cpp).
#ifndef REDLOCK_SRC_ENGINE_HPP
#define REDLOCK_SRC_ENGINE_HPP

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <redlock/client.hpp>
#include <redlock/options.hpp>

#include "core/backend.hpp"
#include "core/quorum.hpp"
#include "io/connection.hpp"
#include "protocol/commands.hpp"
#include "protocol/replies.hpp"
#include "protocol/scripts.hpp"

namespace redlock {
namespace detail {

struct NodeBatch;

// Fair mode: the wake-one queue a release hands over to (list and info hash). Empty: the key's
// own (key + ":waiters", key + ":waiters:info"); a Semaphore's permits share the semaphore's.
struct WaiterQueue {
  std::string list;
  std::string info;
  // A Semaphore's slot keys (shared by its permits): the release passes them, so the watchers
  // are told the earliest lease end among the permits. Null: a lock's own key only.
  std::shared_ptr<const std::vector<std::string>> peers;
};

class LeaseEngine final : public LeaseBackend {
 public:
  // Releases are announced on `channel` (empty: key + ":released"); in fair mode hand-overs go to
  // the waiters of `queue`. Throws std::invalid_argument for bad options or duplicate nodes (see
  // Lock/Redlock ctors).
  LeaseEngine(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string key,
              const LockOptions& options, std::string channel = std::string(),
              WaiterQueue queue = {});

  // LeaseBackend (see core/backend.hpp).
  const std::string& key() const noexcept override { return keys_.key; }
  std::size_t size() const noexcept override { return nodes_.size(); }
  std::size_t quorum() const noexcept override { return quorum_of(nodes_.size()); }
  std::chrono::milliseconds ttl() const noexcept override { return ttl_; }
  bool fair() const noexcept override { return fair_; }
  AcquireResult acquire(const AcquireRequest& request) override;
  AcquireResult handed_over(std::uint64_t fence, SteadyClock::time_point sent) const override;
  // Compare-and-pexpire on every node (extend-many with this one lease, core/extend.hpp).
  ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl) override;
  SteadyClock::time_point extend_floor(SteadyClock::time_point start,
                                       std::chrono::milliseconds ttl) const noexcept override;
  // Shared by every LeaseEngine; the items' backends must all be LeaseEngines.
  const void* batch_group() const noexcept override;
  // One watchdog lane per set of servers: a dead server delays no other server's renewals.
  std::uintptr_t renewal_lane() const noexcept override { return lane_of_nodes(nodes_); }
  std::size_t extend_many(RenewItem* items, std::size_t count) override;
  // Compare-and-delete on every node. Announce::quietly is the rollback of a failed attempt, so
  // a split vote does not wake every waiter straight into the next split vote.
  ReleaseResult release(const std::string& token, Announce announce) override;
  ReleaseResult retry_release(const std::string& token, const std::vector<char>& owed) override;
  bool watch_live() const noexcept override;
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline,
                                      std::string token_sha1) override;

  const std::vector<std::shared_ptr<ClientImpl>>& nodes() const noexcept { return nodes_; }
  // The pub/sub channel releases are announced on (key + ":released" unless the constructor
  // named one).
  const std::string& channel() const noexcept { return keys_.channel; }
  // Fair mode: where hand-overs to this process's waiters are published,
  // channel() + ":" + the Client's waiter_id().
  const std::string& grant_channel() const noexcept { return keys_.grant_channel; }
  double drift_factor() const noexcept { return drift_factor_; }

 private:
  struct Round;  // one acquire attempt's commands and per-node outcome (engine.cpp)
  // Compare-and-delete on the nodes where only[i] is true (every node if null).
  ReleaseResult release_on(const std::string& token, const bool* only, Announce announce);
  ReleaseResult read_releases(const PerNode<NodeBatch>& batches, const PerNode<std::size_t>& index);
  void build(Round& a) const;
  // Fair mode: node i keeps the queue of waiters (the orderer; every node runs the lock).
  bool orders(std::size_t i) const noexcept { return fair_ && i == orderer_; }
  bool kept_turn(const Round& a, std::size_t i) const noexcept;
  void read(Round& a, AcquireResult& result) const;
  void read_node(Round& a, std::size_t i, AcquireResult& result) const;
  bool jumped_queue(const Round& a, std::size_t i) const noexcept;
  bool queue_check_vetoes(Round& a, std::size_t i, Answer answer) const;
  // Fair mode's quiet cycle (one server, the key's own queue): see quiet_ below.
  bool quiet_attempt(const AcquireRequest& request) const noexcept;
  void learn_from_attempt(const Round& a, bool held);
  void learn_from_release(const ReleaseResult& result);
  std::uint64_t raise_fence(const Round& a, Decision& decision);
  void roll_back(const Round& a, AcquireResult& result);
  void report(const Round& a, AcquireResult& result) const;
  void remember_unsent(const Round& a, bool skipped);

  std::vector<std::shared_ptr<ClientImpl>> nodes_;
  LockKeys keys_;
  std::shared_ptr<const std::vector<std::string>> peers_;  // WaiterQueue::peers
  std::chrono::milliseconds ttl_;
  std::string ttl_ms_;
  double drift_factor_;
  bool fencing_;
  bool fair_;
  // Fair mode: the node that orders the waiters; over several nodes, the same one for every
  // client of the key (engine_setup.cpp: by server identity, rotated by the key's slot).
  std::size_t orderer_{0};
  // The last grant made while nodes in back-off were skipped, and which nodes its token never
  // reached: its release leaves them out (a paused node would otherwise get a new connection
  // per release). A lock has one hold at a time; another token's release asks every node.
  struct Unsent {
    std::string token;
    PerNode<bool> nodes;
  };
  // Fair mode on one server with the key's own queue (a Lock; not a Semaphore's permit): while
  // quiet, this engine's last grant found no queue and its release no listener, so its next
  // first attempt is the default mode's plain SET NX PX, without the EXISTS on the queue (the
  // release still checks the queue and hands over). A refusal, a contended attempt, a listener
  // or a failed release ends it. What quiet gives up: a free key with a queue (a holder that
  // died with waiters, before the head advances the queue) can be taken by a quiet client's
  // plain attempt, once; its release then hands the key to the head.
  bool quiet_capable_{false};
  std::atomic<bool> quiet_{false};
  std::atomic<bool> clear_grant_{false};  // the last grant found no queue (or was quiet)
  std::mutex unsent_mutex_;
  Unsent unsent_;
  std::atomic<bool> has_unsent_{false};
};

// Checks what LeaseEngine's constructor accepts (key, options). Throws std::invalid_argument.
void validate_lock_options(const std::string& key, const LockOptions& options);

// The lease backend of a Lock or Redlock on `nodes` (a standalone server is N = 1). Throws
// std::invalid_argument for bad options or duplicate nodes.
inline std::shared_ptr<LeaseEngine> make_lease_engine(
    std::vector<std::shared_ptr<ClientImpl>> nodes, std::string key, const LockOptions& options) {
  return std::make_shared<LeaseEngine>(std::move(nodes), std::move(key), options);
}

// The documented maximum key length. Redis would take up to 512 MB, but a lock name that large
// is a bug, and every operation sends the key (and the release channel) again.
constexpr std::size_t kMaxKeyBytes = 4u * 1024u * 1024u;

// The longest ttl, retry delay or timeout accepted (200 years): far inside what steady_clock's
// nanoseconds can add without overflow (292 years) and what Redis accepts for PX.
constexpr std::chrono::milliseconds kMaxTtl = std::chrono::hours(24 * 365 * 200);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_ENGINE_HPP
