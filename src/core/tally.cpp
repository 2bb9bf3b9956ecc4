// src/core/tally.cpp: the per-node tally's failure rules and the renewal verdict (see tally.hpp).
#include "core/tally.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "io/executor.hpp"
#include "protocol/replies.hpp"

namespace redlock {
namespace detail {

void Tally::server_error(std::size_t node, const ClientImpl& client, std::string_view operation,
                         std::string_view message) {
  errors_[node] = detail::server_error(client.address(), operation, message);
  is_server_[node] = true;
}

bool Tally::replicas_acknowledged(std::size_t node, const ClientImpl& client,
                                  const redisReply* reply) {
  if (is_error_reply(reply)) {
    server_error(node, client, "WAIT (asked for by the endpoint's wait_replicas)",
                 error_text(reply));
    return false;
  }
  const long long acknowledged = read_wait_reply(reply);
  const Endpoint& ep = client.endpoint();
  if (acknowledged >= ep.wait_replicas) return true;
  errors_[node] = std::make_exception_ptr(ReplicationError(fmt::format(
      "redlock: {}: {} of the {} replicas asked for (wait_replicas) acknowledged the write within "
      "wait_timeout ({} ms); it was rolled back",
      client.address(), std::max(acknowledged, 0LL), ep.wait_replicas, ep.wait_timeout.count())));
  return false;
}

std::exception_ptr Tally::pick_failure() const {
  std::exception_ptr first;
  for (std::size_t i = 0; i < errors_.size(); ++i) {
    if (!errors_[i]) continue;
    if (is_server_[i]) return errors_[i];
    if (!first) first = errors_[i];
  }
  return first;
}

std::exception_ptr Tally::unavailable(const std::vector<std::shared_ptr<ClientImpl>>& nodes) const {
  if (nodes.size() == 1 ||
      std::find(is_server_.begin(), is_server_.end(), true) != is_server_.end()) {
    return pick_failure();
  }
  std::string why;
  std::size_t failed = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!errors_[i]) continue;
    ++failed;
    try {
      std::rethrow_exception(errors_[i]);
    } catch (const std::exception& e) {
      why += fmt::format("; {}: {}", nodes[i]->address(), e.what());
    }
  }
  return std::make_exception_ptr(QuorumUnavailableError(
      fmt::format("redlock: only {} of {} servers answered, fewer than the quorum of {}{}",
                  nodes.size() - failed, nodes.size(), quorum_of(nodes.size()), why)));
}

RenewalVerdict judge_renewal(const RenewalOutcome& outcome) noexcept {
  RenewalVerdict verdict;
  if (outcome.held_in_time) {
    verdict.what = Renewal::renewed;
  } else if (refusals_lose_quorum(outcome.nodes, outcome.refused)) {
    // Enough nodes said "not yours" that no quorum can confirm: lost for good.
    verdict.what = Renewal::lost;
    verdict.reason = outcome.nodes > 1 ? refusal_reason(outcome.nodes) : outcome.refusal;
  } else if (outcome.lapsed) {
    verdict.what = Renewal::lost;
    verdict.reason = lapse_reason(outcome.nodes);
  }
  return verdict;
}

void note_owed(std::vector<char>& owed, std::size_t nodes, std::size_t node,
               const NodeBatch& batch) {
  if (!batch.error || batch.abandoned) return;
  if (owed.empty()) owed.assign(nodes, 0);
  owed[node] = 1;
}

PerNode<bool> owed_nodes(std::size_t nodes, const std::vector<char>& owed) {
  PerNode<bool> only;
  for (std::size_t i = 0; i < nodes; ++i) only.push_back(i < owed.size() && owed[i] != 0);
  return only;
}

}  // namespace detail
}  // namespace redlock
