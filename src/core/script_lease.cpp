// src/core/script_lease.cpp: the lease whose operations are one script each (see
// script_lease.hpp): execute, tally, decide.
#include "core/script_lease.hpp"

#include <deque>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "core/tally.hpp"
#include "io/connection.hpp"
#include "protocol/replies.hpp"
#include "util/log_internal.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {
namespace {

// One extend script's outcome, from its batch (`at`: its reply's place).
ExtendResult read_extend(const NodeBatch& batch, std::size_t at, const char* what,
                         std::chrono::milliseconds ttl, double drift_factor,
                         SteadyClock::time_point started, SteadyClock::time_point done) {
  Tally tally(1);
  if (batch.error) {
    tally.failed(0, batch.error);
  } else if (is_error_reply(batch.replies[at].get())) {
    tally.server_error(0, *batch.node, fmt::format("{} extend script", what),
                       error_text(batch.replies[at].get()));
  } else {
    const bool yes = confirmed(batch.replies[at].get());
    if (!yes || batch.node->replica_wait() == nullptr ||
        tally.replicas_acknowledged(0, *batch.node, batch.replies.back().get())) {
      tally.answered(yes);
    }
  }
  ExtendResult result;
  result.confirmed = tally.yes();
  const Decision d = decide(1, result.confirmed, ttl, drift_factor, started, done);
  result.held = d.held;
  result.valid_until = d.valid_until;
  result.failure = tally.failure_if_silent();
  result.reason = extend_reason(1, result.confirmed);
  return result;
}

}  // namespace

ScriptLease::ScriptLease(std::shared_ptr<ClientImpl> node, std::string name, const char* what,
                         const LockOptions& options)
    : node_(std::move(node)),
      name_(std::move(name)),
      what_(what),
      ttl_(options.ttl),
      ttl_ms_(std::to_string(options.ttl.count())),
      drift_factor_(options.clock_drift_factor),
      fencing_(options.fencing) {
  if (!node_) throw std::invalid_argument("redlock: client is an empty Client");
}

AcquireResult ScriptLease::acquire_script(const VarCommand& command, const std::string& token,
                                          std::size_t keys, std::vector<std::uint64_t>* fences) {
  // A server too slow to answer may still run it: the rollback follows on the same connection.
  VarCommand rollback;
  build_release(rollback, token, Announce::quietly, ScriptSend::eval);
  NodeBatch batch;
  batch.node = node_.get();
  batch.commands.push_back(command.view());
  if (const CommandView* wait = node_->replica_wait()) batch.commands.push_back(*wait);
  batch.on_timeout.push_back(rollback.view());
  const auto start = SteadyClock::now();
  execute(&batch, 1);
  AcquireResult result;
  if (batch.error) {
    if (!is_timeout(batch.error)) undo(token);  // it may have run before the connection died
    result.failure = batch.error;
    return result;
  }
  const redisReply* r = batch.replies[0].get();
  MultiReply reply = read_multi_reply(r, keys);
  if (reply.problem != MultiReply::Problem::none) {
    const std::string operation = fmt::format("{} acquire script", what_);
    result.failure =
        reply.problem == MultiReply::Problem::server_error
            ? server_error(node_->address(), operation, error_text(r))
            : std::make_exception_ptr(ProtocolError(fmt::format(
                  "redlock: unexpected reply to {} from {}", operation, node_->address())));
    return result;
  }
  if (!reply.granted) {
    result.holder_pttl = reply.holder_pttl;
    return result;
  }
  Tally tally(1);
  if (node_->replica_wait() != nullptr &&
      !tally.replicas_acknowledged(0, *node_, batch.replies.back().get())) {
    undo(token);
    result.failure = tally.error(0);
    return result;
  }
  const Decision d = decide(1, 1, ttl_, drift_factor_, start, SteadyClock::now());
  if (!d.held) {  // granted too late to be of use: give it back
    undo(token);
    result.holder_pttl = std::chrono::milliseconds(0);
    return result;
  }
  result.held = true;
  result.granted = 1;
  result.fence = reply.fences[0];
  result.valid_until = d.valid_until;
  if (fences != nullptr) *fences = std::move(reply.fences);
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
  VarCommand command;
  build_extend(command, token, ttl_ms);
  NodeBatch batch;
  batch.node = node_.get();
  batch.commands.push_back(command.view());
  if (const CommandView* wait = node_->replica_wait()) batch.commands.push_back(*wait);
  const auto started = SteadyClock::now();
  execute(&batch, 1);
  return read_extend(batch, 0, what_, ttl, drift_factor_, started, SteadyClock::now());
}

const void* ScriptLease::batch_group() const noexcept {
  static const char group = 0;
  return &group;
}

// One pipelined round trip per server for every lease of the batch.
std::size_t ScriptLease::extend_many(RenewItem* items, std::size_t count) {
  std::deque<VarCommand> commands;  // never moved: the batches point into them
  std::vector<NodeBatch> batches;
  std::vector<std::pair<std::size_t, std::size_t>> places(count);
  std::unordered_map<ClientImpl*, std::size_t> index;
  for (std::size_t k = 0; k < count; ++k) {
    const auto& lease = static_cast<const ScriptLease&>(*items[k].backend);
    const auto [at, fresh] = index.try_emplace(lease.node_.get(), batches.size());
    if (fresh) {
      batches.emplace_back();
      batches.back().node = lease.node_.get();
    }
    commands.emplace_back();
    lease.build_extend(commands.back(), *items[k].token, lease.ttl_ms_);
    batches[at->second].commands.push_back(commands.back().view());
    places[k] = {at->second, batches[at->second].commands.size() - 1};
  }
  for (NodeBatch& batch : batches) {
    if (const CommandView* wait = batch.node->replica_wait()) batch.commands.push_back(*wait);
  }
  const auto started = SteadyClock::now();
  execute(batches.data(), batches.size());
  const auto done = SteadyClock::now();
  for (std::size_t k = 0; k < count; ++k) {
    const auto& lease = static_cast<const ScriptLease&>(*items[k].backend);
    const NodeBatch& batch = batches[places[k].first];
    items[k].result = read_extend(batch, places[k].second, lease.what_, lease.ttl_,
                                  lease.drift_factor_, started, done);
    const bool refused = !batch.error && !items[k].result.failure &&
                         items[k].result.confirmed == 0 &&
                         !is_error_reply(batch.replies[places[k].second].get());
    items[k].refused = refused ? 1 : 0;
  }
  return batches.size();
}

ReleaseResult ScriptLease::release(const std::string& token, Announce announce) {
  VarCommand command;
  build_release(command, token, announce, ScriptSend::evalsha);
  NodeBatch batch;
  batch.node = node_.get();
  batch.commands.push_back(command.view());
  execute(&batch, 1);
  ReleaseResult result;
  Tally tally(1);
  if (batch.error) {
    tally.failed(0, batch.error);
  } else if (is_error_reply(batch.replies[0].get())) {
    tally.server_error(0, *node_, fmt::format("{} release script", what_),
                       error_text(batch.replies[0].get()));
  } else {
    const ReleaseReply reply = read_release_reply(batch.replies[0].get());
    tally.answered(reply.kind == ReleaseReply::Kind::released);
    if (reply.kind == ReleaseReply::Kind::refused && !batch.retried) tally.refused();
    result.listeners = waiting_listeners(*node_, release_channel(), reply.listeners);
  }
  result.released = tally.yes();
  result.refused = tally.refusals();
  result.failure = tally.failure_if_silent();
  result.quorum_kept = !refusals_lose_quorum(1, result.refused);
  result.reason = refusal_reason(1);
  return result;
}

void ScriptLease::undo(const std::string& token) noexcept {
  try {
    const ReleaseResult r = release(token, Announce::quietly);
    if (r.failure) std::rethrow_exception(r.failure);
  } catch (const std::exception& e) {
    logf(LogLevel::debug, "redlock: rollback of an attempt on {}: {}", name_, e.what());
  } catch (...) {
  }
}

}  // namespace detail
}  // namespace redlock
