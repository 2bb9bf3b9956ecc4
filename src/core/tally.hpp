// src/core/tally.hpp: the per-node tally of one operation and every rule that turns it into an
// outcome: which failure to report, and why a lease is lost (each written once, here).
#ifndef REDLOCK_SRC_CORE_TALLY_HPP
#define REDLOCK_SRC_CORE_TALLY_HPP

#include <cstddef>
#include <exception>
#include <memory>
#include <string_view>
#include <vector>

#include <redlock/options.hpp>

#include "core/quorum.hpp"
#include "io/connection.hpp"

namespace redlock {
namespace detail {

struct NodeBatch;

// What the nodes of one operation said: counts, and each failed node's error.
class Tally {
 public:
  explicit Tally(std::size_t nodes) : errors_(nodes), is_server_(nodes, false) {}

  std::size_t nodes() const noexcept { return errors_.size(); }
  // A node that answered: `yes` (granted, confirmed, released) or not.
  void answered(bool yes) noexcept {
    ++answered_;
    yes_ += yes ? 1 : 0;
  }
  // A node that answered "not ours" (a refusal that counts towards a loss).
  void refused() noexcept { ++refused_; }
  // A node that could not answer (transport failure, timeout, protocol error).
  void failed(std::size_t node, std::exception_ptr error) noexcept { errors_[node] = error; }
  // A node that answered with an error reply to `operation`.
  void server_error(std::size_t node, const ClientImpl& client, std::string_view operation,
                    std::string_view message);

  // Endpoint::wait_replicas: checks the WAIT reply behind node's write. Returns true if enough
  // replicas acknowledged; otherwise records the node as failed (ReplicationError, or a
  // ServerError naming the option when the server refused WAIT) and returns false.
  bool replicas_acknowledged(std::size_t node, const ClientImpl& client, const redisReply* reply);

  std::size_t yes() const noexcept { return yes_; }
  std::size_t refusals() const noexcept { return refused_; }
  std::size_t answers() const noexcept { return answered_; }
  const std::exception_ptr& error(std::size_t node) const noexcept { return errors_[node]; }
  bool server_failed(std::size_t node) const noexcept { return is_server_[node]; }

  // The error to report when no node gave a usable answer: a server error reply explains more
  // than a transport failure. Null if no node failed.
  std::exception_ptr pick_failure() const;
  // pick_failure() if no node answered, else null.
  std::exception_ptr failure_if_silent() const { return answered_ == 0 ? pick_failure() : nullptr; }
  // The failure of an attempt that fewer than a quorum answered: a server error reply if there
  // was one; for one node its transport error; for several a QuorumUnavailableError naming
  // every node that failed and why.
  std::exception_ptr unavailable(const std::vector<std::shared_ptr<ClientImpl>>& nodes) const;

 private:
  PerNode<std::exception_ptr> errors_;
  PerNode<bool> is_server_;
  std::size_t yes_{0};
  std::size_t refused_{0};
  std::size_t answered_{0};
};

// The loss rules. Refusals alone leave fewer than a quorum able to confirm: lost for good.
constexpr bool refusals_lose_quorum(std::size_t nodes, std::size_t refused) noexcept {
  return nodes - refused < quorum_of(nodes);
}
// Why a lease that refusals took away is lost: the one node refused, or no quorum is left.
constexpr LostReason refusal_reason(std::size_t nodes) noexcept {
  return nodes > 1 ? LostReason::no_quorum : LostReason::refused;
}
// The rule for ReleaseResult::owed, written once: a node may not have run a release when it
// failed on its own (a transport failure, its own timeout, or not sent: in back-off, a failover
// under way); not when it answered (an error reply too), nor when an early finish cut it short
// (its release is on the wire behind a quorum's answers). Marks owed[node] if so, sizing `owed`
// to `nodes` on the first mark. Throws std::bad_alloc only.
void note_owed(std::vector<char>& owed, std::size_t nodes, std::size_t node,
               const NodeBatch& batch);
// `owed` as one flag per node of `nodes` (a release's `only` nodes).
PerNode<bool> owed_nodes(std::size_t nodes, const std::vector<char>& owed);
// Why a lease whose validity ran out while nodes stayed silent is lost.
constexpr LostReason lapse_reason(std::size_t nodes) noexcept {
  return nodes > 1 ? LostReason::no_quorum : LostReason::expired;
}
// Why an explicit extend that did not hold lost the lease: some nodes confirmed but not a
// quorum (no_quorum), or none did (refused).
constexpr LostReason extend_reason(std::size_t nodes, std::size_t confirmed) noexcept {
  return nodes > 1 && confirmed > 0 ? LostReason::no_quorum : LostReason::refused;
}

// What a watchdog renewal's outcome means for its lease.
enum class Renewal { renewed, lost, retry };
struct RenewalVerdict {
  Renewal what{Renewal::retry};
  LostReason reason{LostReason::refused};  // when lost
};
// What a watchdog renewal found out about one lease.
struct RenewalOutcome {
  std::size_t nodes{0};
  std::size_t confirmed{0};
  std::size_t refused{0};  // nodes that said "not ours"
  // Why a single store said "not ours" (its ExtendResult's reason: refused, or session_expired
  // when its session ended); a Redlock's refusals mean no_quorum.
  LostReason refusal{LostReason::refused};
  bool held_in_time{false};  // a quorum confirmed before the hold's validity ran out
  bool lapsed{false};        // the hold's validity has run out meanwhile
};
RenewalVerdict judge_renewal(const RenewalOutcome& outcome) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_CORE_TALLY_HPP
