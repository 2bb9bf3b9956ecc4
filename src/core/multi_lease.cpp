// src/core/multi_lease.cpp: the MultiLock's lease (see multi_lease.hpp): build one script over
// every key, execute, decide.
#include "core/multi_lease.hpp"

#include <deque>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "core/engine.hpp"  // validate_lock_options, kMaxKeyBytes
#include "core/tally.hpp"
#include "io/connection.hpp"
#include "protocol/replies.hpp"
#include "util/key_slot.hpp"
#include "util/log_internal.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {
namespace {

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& key : keys) out += (out.empty() ? "" : ", ") + key;
  return out;
}

// Every rule of the constructor but the node's: the set, each key, the options.
void check_set(const std::vector<std::string>& keys, const LockOptions& options) {
  if (keys.empty()) throw std::invalid_argument("redlock: keys must not be empty");
  if (options.fair) {
    throw std::invalid_argument("redlock: options.fair is not supported by MultiLock");
  }
  std::set<std::string> seen;
  std::size_t bytes = 0;
  for (const auto& key : keys) {
    validate_lock_options(key, options);
    if (!seen.insert(key).second) {
      throw std::invalid_argument("redlock: keys names '" + key + "' twice");
    }
    bytes += key.size();
  }
  if (bytes > kMaxKeyBytes) {
    throw std::invalid_argument(fmt::format(
        "redlock: keys are {} bytes in all; the maximum is {} bytes", bytes, kMaxKeyBytes));
  }
}

// On a cluster one script reaches one master: every key (and so every helper key and channel)
// must hash to the first key's slot.
void check_slots(const std::vector<std::string>& keys) {
  const std::uint16_t slot = key_slot(keys[0]);
  for (const auto& key : keys) {
    if (!helpers_share_slot(key) || key_slot(key) != slot) {
      throw std::invalid_argument("redlock: keys: on a cluster every key must share one slot; '" +
                                  key + "' does not hash like '" + keys[0] +
                                  "' (give them one hash tag, e.g. {orders}:a)");
    }
  }
}

}  // namespace

MultiLease::MultiLease(std::shared_ptr<ClientImpl> node, std::vector<std::string> keys,
                       const LockOptions& options)
    : node_(std::move(node)),
      keys_((check_set(keys, options), std::move(keys))),
      more_channels_(keys_.channels.begin() + 1, keys_.channels.end()),
      name_(joined(keys_.keys)),
      ttl_(options.ttl),
      ttl_ms_(std::to_string(options.ttl.count())),
      drift_factor_(options.clock_drift_factor),
      fencing_(options.fencing) {
  if (!node_) throw std::invalid_argument("redlock: client is an empty Client");
  if (node_->router() != nullptr) check_slots(keys_.keys);
}

AcquireResult MultiLease::acquire(const AcquireRequest& request) {
  const std::string& token = *request.token;
  VarCommand command;
  build_multi_acquire(command, keys_, token, ttl_ms_, fencing_ ? "1" : "0");
  // A server too slow to answer may still run it: the rollback follows on the same connection.
  VarCommand rollback;
  build_multi_release(rollback, keys_, token, false, node_->pubsub(), MultiSend::eval);
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
  const MultiReply reply = read_multi_reply(r, keys_.keys.size());
  if (reply.problem != MultiReply::Problem::none) {
    result.failure =
        reply.problem == MultiReply::Problem::server_error
            ? server_error(node_->address(), "the MultiLock acquire script", error_text(r))
            : std::make_exception_ptr(ProtocolError(
                  fmt::format("redlock: unexpected reply to the MultiLock acquire script from {}",
                              node_->address())));
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
  {
    std::lock_guard<std::mutex> guard(mutex_);
    granted_token_ = token;
    granted_fences_ = reply.fences;
  }
  result.held = true;
  result.granted = 1;
  result.fence = reply.fences[0];
  result.valid_until = d.valid_until;
  return result;
}

std::vector<std::uint64_t> MultiLease::fences_of(const std::string& token) const {
  std::lock_guard<std::mutex> guard(mutex_);
  if (token != granted_token_) return {};
  return granted_fences_;
}

// Never fair, so never handed over: nothing is held this way.
AcquireResult MultiLease::handed_over(std::uint64_t /*fence*/,
                                      SteadyClock::time_point /*sent*/) const {
  return AcquireResult{};
}

SteadyClock::time_point MultiLease::extend_floor(SteadyClock::time_point start,
                                                 std::chrono::milliseconds ttl) const noexcept {
  return start + std::chrono::nanoseconds(ttl) - drift_of(ttl, drift_factor_);
}

namespace {

// One extend script's outcome, from its batch (`at`: its reply's place).
ExtendResult read_extend(const NodeBatch& batch, std::size_t at, std::chrono::milliseconds ttl,
                         double drift_factor, SteadyClock::time_point started,
                         SteadyClock::time_point done) {
  Tally tally(1);
  if (batch.error) {
    tally.failed(0, batch.error);
  } else if (is_error_reply(batch.replies[at].get())) {
    tally.server_error(0, *batch.node, "the MultiLock extend script",
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

ExtendResult MultiLease::extend(const std::string& token, std::chrono::milliseconds ttl) {
  const std::string ttl_ms = std::to_string(ttl.count());
  VarCommand command;
  build_multi_extend(command, keys_, token, ttl_ms);
  NodeBatch batch;
  batch.node = node_.get();
  batch.commands.push_back(command.view());
  if (const CommandView* wait = node_->replica_wait()) batch.commands.push_back(*wait);
  const auto started = SteadyClock::now();
  execute(&batch, 1);
  return read_extend(batch, 0, ttl, drift_factor_, started, SteadyClock::now());
}

const void* MultiLease::batch_group() const noexcept {
  static const char group = 0;
  return &group;
}

// One pipelined round trip per server for every lease of the batch.
std::size_t MultiLease::extend_many(RenewItem* items, std::size_t count) {
  std::deque<VarCommand> commands;  // never moved: the batches point into them
  std::vector<NodeBatch> batches;
  std::vector<std::pair<std::size_t, std::size_t>> places(count);
  std::unordered_map<ClientImpl*, std::size_t> index;
  for (std::size_t k = 0; k < count; ++k) {
    const auto& lease = static_cast<const MultiLease&>(*items[k].backend);
    const auto [at, fresh] = index.try_emplace(lease.node_.get(), batches.size());
    if (fresh) {
      batches.emplace_back();
      batches.back().node = lease.node_.get();
    }
    commands.emplace_back();
    build_multi_extend(commands.back(), lease.keys_, *items[k].token, lease.ttl_ms_);
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
    const auto& lease = static_cast<const MultiLease&>(*items[k].backend);
    items[k].result = read_extend(batches[places[k].first], places[k].second, lease.ttl_,
                                  lease.drift_factor_, started, done);
    const bool refused = !items[k].result.failure && items[k].result.confirmed == 0 &&
                         !batches[places[k].first].error;
    items[k].refused = refused ? 1 : 0;
  }
  return batches.size();
}

ReleaseResult MultiLease::release(const std::string& token, Announce announce) {
  VarCommand command;
  build_multi_release(command, keys_, token, announce == Announce::waiters, node_->pubsub(),
                      MultiSend::evalsha);
  NodeBatch batch;
  batch.node = node_.get();
  batch.commands.push_back(command.view());
  execute(&batch, 1);
  ReleaseResult result;
  Tally tally(1);
  if (batch.error) {
    tally.failed(0, batch.error);
  } else if (is_error_reply(batch.replies[0].get())) {
    tally.server_error(0, *node_, "the MultiLock release script",
                       error_text(batch.replies[0].get()));
  } else {
    const ReleaseReply reply = read_release_reply(batch.replies[0].get());
    tally.answered(reply.kind == ReleaseReply::Kind::released);
    if (reply.kind == ReleaseReply::Kind::refused && !batch.retried) tally.refused();
    result.listeners = waiting_listeners(*node_, keys_.channels[0], reply.listeners);
  }
  result.released = tally.yes();
  result.refused = tally.refusals();
  result.failure = tally.failure_if_silent();
  result.quorum_kept = !refusals_lose_quorum(1, result.refused);
  result.reason = refusal_reason(1);
  return result;
}

void MultiLease::undo(const std::string& token) noexcept {
  try {
    const ReleaseResult r = release(token, Announce::quietly);
    if (r.failure) std::rethrow_exception(r.failure);
  } catch (const std::exception& e) {
    logf(LogLevel::debug, "redlock: rollback of an attempt on {}: {}", name_, e.what());
  } catch (...) {
  }
}

bool MultiLease::watch_live() const noexcept {
  static const std::string no_grants;
  return release_watch_live(*node_,
                            WatchChannels{keys_.channels[0], no_grants, name_, &more_channels_});
}

std::unique_ptr<ReleaseWatch> MultiLease::watch(SteadyClock::time_point deadline,
                                                std::string /*token_sha1*/) {
  static const std::string no_grants;
  return make_release_watch({node_},
                            WatchChannels{keys_.channels[0], no_grants, name_, &more_channels_},
                            deadline, std::string());
}

}  // namespace detail
}  // namespace redlock
