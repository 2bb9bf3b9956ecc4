// src/core/script_lease.cpp: the lease whose operations are one script each on every node (see
// script_lease.hpp): build, execute, tally, decide.
#include "core/script_lease.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "core/tally.hpp"
#include "io/connection.hpp"
#include "protocol/replies.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {
namespace {

// Where one (lease, node) command went: its node's batch and its place in that batch.
using Place = std::pair<std::size_t, std::size_t>;

// One node's answer to an extend script, into `tally` as node `i`.
void tally_extend(Tally& tally, std::size_t i, const NodeBatch& batch, std::size_t at,
                  const char* what) {
  if (batch.error) {
    tally.failed(i, batch.error);
    return;
  }
  const redisReply* reply = batch.replies[at].get();
  if (is_error_reply(reply)) {
    tally.server_error(i, *batch.node, fmt::format("{} extend script", what), error_text(reply));
    return;
  }
  const bool yes = confirmed(reply);
  if (yes && batch.node->replica_wait() != nullptr &&
      !tally.replicas_acknowledged(i, *batch.node, batch.replies.back().get())) {
    return;  // too few replicas have the new expiry: not confirmed
  }
  tally.answered(yes);
  if (!yes) tally.refused();
}

}  // namespace

ScriptLease::ScriptLease(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string name,
                         const char* what, const LockOptions& options)
    : nodes_(std::move(nodes)),
      name_(std::move(name)),
      what_(what),
      ttl_(options.ttl),
      ttl_ms_(std::to_string(options.ttl.count())),
      drift_factor_(options.clock_drift_factor),
      fencing_(options.fencing) {
  if (nodes_.empty()) throw std::invalid_argument("redlock: instances must not be empty");
  for (const auto& node : nodes_) {
    if (!node) throw std::invalid_argument("redlock: client is an empty Client");
  }
}

// One node's answer to the acquire script, into `tally` as node `i`. Returns whether the node
// may hold our token (granted, or its outcome unknown): the rollback goes there.
bool ScriptLease::read_acquire(Tally& tally, std::size_t i, const NodeBatch& batch,
                               std::size_t keys, AcquireResult& result,
                               std::vector<std::uint64_t>& fences) const {
  if (batch.error) {
    tally.failed(i, batch.error);
    return !is_timeout(batch.error);  // a timed-out node got the rollback behind the request
  }
  const redisReply* r = batch.replies[0].get();
  const MultiReply reply = read_multi_reply(r, keys);
  if (reply.problem == MultiReply::Problem::server_error) {
    tally.server_error(i, *batch.node, fmt::format("{} acquire script", what_), error_text(r));
    return false;
  }
  if (reply.problem != MultiReply::Problem::none) {
    tally.failed(i, std::make_exception_ptr(ProtocolError(
                        fmt::format("redlock: unexpected reply to {} acquire script from {}", what_,
                                    batch.node->address()))));
    return true;
  }
  if (!reply.granted) {
    tally.answered(false);
    if (reply.holder_pttl.count() >= 0 &&
        (result.holder_pttl.count() < 0 || reply.holder_pttl < result.holder_pttl)) {
      result.holder_pttl = reply.holder_pttl;
    }
    return false;
  }
  if (batch.node->replica_wait() != nullptr &&
      !tally.replicas_acknowledged(i, *batch.node, batch.replies.back().get())) {
    return true;
  }
  tally.answered(true);
  fences.resize(reply.fences.size(), 0);
  for (std::size_t k = 0; k < reply.fences.size(); ++k) {
    fences[k] = std::max(fences[k], reply.fences[k]);
  }
  return true;
}

AcquireResult ScriptLease::acquire_script(const BuildAcquire& build, const std::string& token,
                                          std::size_t keys, std::vector<std::uint64_t>* fences) {
  const std::size_t n = nodes_.size();
  const VarCommands commands(2 * n);  // never moved: the batches point into them
  std::vector<NodeBatch> batches(n);
  for (std::size_t i = 0; i < n; ++i) {
    build(commands[2 * i], *nodes_[i]);
    // A node too slow to answer may still run it: the rollback follows on the same connection.
    build_release(commands[2 * i + 1], *nodes_[i], token, Announce::quietly, ScriptSend::eval);
    batches[i].node = nodes_[i].get();
    batches[i].commands.push_back(commands[2 * i].view());
    if (const CommandView* wait = nodes_[i]->replica_wait()) batches[i].commands.push_back(*wait);
    batches[i].on_timeout.push_back(commands[2 * i + 1].view());
  }
  const auto start = SteadyClock::now();
  execute(batches.data(), n);
  AcquireResult result;
  Tally tally(n);
  PerNode<bool> undo_on(n, false);
  std::vector<std::uint64_t> granted_fences;
  for (std::size_t i = 0; i < n; ++i) {
    undo_on[i] = read_acquire(tally, i, batches[i], keys, result, granted_fences);
  }
  result.granted = tally.yes();
  const Decision d = decide(n, tally.yes(), ttl_, drift_factor_, start, SteadyClock::now());
  if (d.held) {
    result.held = true;
    result.fence = granted_fences.empty() ? 0 : granted_fences[0];
    result.valid_until = d.valid_until;
    if (fences != nullptr) *fences = std::move(granted_fences);
    return result;
  }
  try {
    release_on(token, undo_on.data(), Announce::quietly);
  } catch (...) {  // best effort; the grants expire by their ttl
  }
  if (tally.answers() < quorum()) {
    result.failure = tally.unavailable(nodes_);
  } else if (tally.yes() >= quorum()) {
    result.holder_pttl = std::chrono::milliseconds(0);  // granted too late to be of use
  }
  result.fence = 0;
  return result;
}

AcquireResult ScriptLease::handed_over(std::uint64_t /*fence*/,
                                       SteadyClock::time_point /*sent*/) const {
  return AcquireResult{};
}

SteadyClock::time_point ScriptLease::extend_floor(SteadyClock::time_point start,
                                                  std::chrono::milliseconds ttl) const noexcept {
  return start + std::chrono::nanoseconds(ttl) - drift_of(ttl, drift_factor_);
}

ExtendResult ScriptLease::extend(const std::string& token, std::chrono::milliseconds ttl) {
  const std::string ttl_ms = std::to_string(ttl.count());
  RenewItem item;
  item.backend = this;
  item.token = &token;
  extend_items(&item, 1, &ttl, &ttl_ms);
  return item.result;
}

const void* ScriptLease::batch_group() const noexcept {
  static const char group = 0;
  return &group;
}

std::size_t ScriptLease::extend_many(RenewItem* items, std::size_t count) {
  return extend_items(items, count, nullptr, nullptr);
}

// One pipelined round trip per server for every lease of the batch; each item at `ttl` (null:
// its lease's ttl).
std::size_t ScriptLease::extend_items(RenewItem* items, std::size_t count,
                                      const std::chrono::milliseconds* ttl,
                                      const std::string* ttl_ms) {
  std::size_t total = 0;
  for (std::size_t k = 0; k < count; ++k) {
    total += static_cast<const ScriptLease&>(*items[k].backend).nodes_.size();
  }
  const VarCommands commands(total);  // never moved: the batches point into them
  std::size_t used = 0;
  std::vector<NodeBatch> batches;
  std::vector<std::vector<Place>> places(count);
  std::unordered_map<ClientImpl*, std::size_t> index;
  for (std::size_t k = 0; k < count; ++k) {
    const auto& lease = static_cast<const ScriptLease&>(*items[k].backend);
    for (const auto& node : lease.nodes_) {
      const auto [at, fresh] = index.try_emplace(node.get(), batches.size());
      if (fresh) {
        batches.emplace_back();
        batches.back().node = node.get();
      }
      VarCommand& command = commands[used++];
      lease.build_extend(command, *node, *items[k].token,
                         ttl_ms != nullptr ? *ttl_ms : lease.ttl_ms_);
      batches[at->second].commands.push_back(command.view());
      places[k].emplace_back(at->second, batches[at->second].commands.size() - 1);
    }
  }
  for (NodeBatch& batch : batches) {
    if (const CommandView* wait = batch.node->replica_wait()) batch.commands.push_back(*wait);
  }
  const auto started = SteadyClock::now();
  execute(batches.data(), batches.size());
  const auto done = SteadyClock::now();
  for (std::size_t k = 0; k < count; ++k) {
    const auto& lease = static_cast<const ScriptLease&>(*items[k].backend);
    const std::size_t n = lease.nodes_.size();
    Tally tally(n);
    for (std::size_t i = 0; i < n; ++i) {
      tally_extend(tally, i, batches[places[k][i].first], places[k][i].second, lease.what_);
    }
    ExtendResult& result = items[k].result;
    result.confirmed = tally.yes();
    const auto lease_ttl = ttl != nullptr ? *ttl : lease.ttl_;
    const Decision d = decide(n, result.confirmed, lease_ttl, lease.drift_factor_, started, done);
    result.held = d.held;
    result.valid_until = d.valid_until;
    result.failure = tally.failure_if_silent();
    result.reason = extend_reason(n, result.confirmed);
    items[k].refused = tally.refusals();
  }
  return batches.size();
}

ReleaseResult ScriptLease::release(const std::string& token, Announce announce) {
  return release_on(token, nullptr, announce);
}

ReleaseResult ScriptLease::retry_release(const std::string& token, const std::vector<char>& owed) {
  const PerNode<bool> only = owed_nodes(nodes_.size(), owed);
  return release_on(token, only.data(), Announce::waiters);
}

// The release script on the nodes where only[i] is true (every node if null).
ReleaseResult ScriptLease::release_on(const std::string& token, const bool* only,
                                      Announce announce) {
  const VarCommands commands(nodes_.size());
  std::vector<NodeBatch> batches;
  PerNode<std::size_t> index;  // batch k went to node index[k]
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (only != nullptr && !only[i]) continue;
    VarCommand& command = commands[batches.size()];
    build_release(command, *nodes_[i], token, announce, ScriptSend::evalsha);
    batches.emplace_back();
    batches.back().node = nodes_[i].get();
    batches.back().commands.push_back(command.view());
    index.push_back(i);
  }
  ReleaseResult result;
  if (batches.empty()) return result;
  execute(batches.data(), batches.size());
  Tally tally(batches.size());
  for (std::size_t k = 0; k < batches.size(); ++k) {
    const NodeBatch& batch = batches[k];
    if (batch.error) {
      tally.failed(k, batch.error);
      note_owed(result.owed, nodes_.size(), index[k], batch);
      continue;
    }
    const redisReply* r = batch.replies[0].get();
    if (is_error_reply(r)) {
      tally.server_error(k, *batch.node, fmt::format("{} release script", what_), error_text(r));
      continue;
    }
    const ReleaseReply reply = read_release_reply(r);
    tally.answered(reply.kind == ReleaseReply::Kind::released);
    if (reply.kind == ReleaseReply::Kind::refused && !batch.retried) tally.refused();
    result.listeners = std::max(result.listeners,
                                waiting_listeners(*batch.node, release_channel(), reply.listeners));
  }
  result.released = tally.yes();
  result.refused = tally.refusals();
  result.failure = tally.failure_if_silent();
  result.quorum_kept = !refusals_lose_quorum(nodes_.size(), result.refused);
  result.reason = refusal_reason(nodes_.size());
  return result;
}

}  // namespace detail
}  // namespace redlock
