// src/core/permits.cpp: the Redis PermitBackend (see permits.hpp): build, execute, decide; a
// permit's lease is a LeaseEngine on its slot key.
#include "core/permits.hpp"

#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include <redlock/errors.hpp>
#include <redlock/semaphore.hpp>  // Semaphore::kMaxLimit

#include "api/access.hpp"
#include "core/engine.hpp"
#include "io/connection.hpp"
#include "protocol/permits.hpp"
#include "protocol/replies.hpp"  // is_error_reply
#include "util/key_slot.hpp"
#include "util/log_internal.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {
namespace {

class RedisPermits final : public PermitBackend {
 public:
  RedisPermits(Client client, std::string key, std::size_t limit, const LockOptions& options)
      : node_(Access::client(client)),
        key_(std::move(key)),
        keys_(key_, limit),
        options_(options),
        ttl_ms_(std::to_string(options.ttl.count())),
        limit_text_(std::to_string(limit)),
        fair_(options.fair.value_or(true)),
        grant_channel_(fair_ ? keys_.channel + ":" + node_->waiter_id() : std::string()),
        leases_(limit),
        slot_keys_(std::make_shared<const std::vector<std::string>>(keys_.slots)) {
    permit(1);  // validates the options as a Lock's engine does
    if (node_->router() != nullptr && !helpers_share_slot(key_)) {
      throw std::invalid_argument(
          "redlock: key has no hash tag but contains '}': on a cluster its permit keys could not "
          "share its slot; give the key a hash tag ({...})");
    }
  }

  const std::string& key() const noexcept override { return key_; }
  std::size_t limit() const noexcept override { return keys_.slots.size(); }
  bool fair() const noexcept override { return fair_; }
  AcquireResult acquire(const std::string& token, Queue queue) override;
  void leave(const std::string& token) override { run_leave(token); }
  std::shared_ptr<LeaseBackend> permit(std::size_t slot) override;
  bool watch_live() const noexcept override {
    return release_watch_live(*node_, WatchChannels{keys_.channel, grant_channel_, key_});
  }
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline,
                                      std::string token_sha1) override {
    return make_release_watch({node_}, WatchChannels{keys_.channel, grant_channel_, key_}, deadline,
                              fair_ ? std::move(token_sha1) : std::string());
  }

 private:
  TakeReply take(const std::string& token, Queue queue);
  TakeReply take_with(const PermitKeys& keys, const std::string& token, Queue queue);
  void run_leave(const std::string& token);
  void undo(const std::string& token) noexcept;

  std::shared_ptr<ClientImpl> node_;
  std::string key_;
  PermitKeys keys_;
  LockOptions options_;
  std::string ttl_ms_;
  std::string limit_text_;  // the limit as the take script's argument
  bool fair_;
  std::string grant_channel_;  // fair mode: channel + ":" + the Client's waiter_id (else empty)
  std::mutex mutex_;
  std::vector<std::shared_ptr<LeaseEngine>> leases_;  // per slot, made when first held; mutex_
  // keys_.slots, shared with the permits' engines (their release passes every slot key).
  std::shared_ptr<const std::vector<std::string>> slot_keys_;
};

std::shared_ptr<LeaseBackend> RedisPermits::permit(std::size_t slot) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::shared_ptr<LeaseEngine>& lease = leases_.at(slot - 1);
  if (!lease) {
    LockOptions slot_options = options_;
    slot_options.fencing = false;  // the semaphore's fence is per key, taken by acquire()
    // Fair: a permit's release hands it to the semaphore's queue (not the slot key's own).
    slot_options.fair = fair_;
    lease = std::make_shared<LeaseEngine>(std::vector<std::shared_ptr<ClientImpl>>{node_},
                                          keys_.slots[slot - 1], slot_options, keys_.channel,
                                          WaiterQueue{keys_.queue, keys_.queue_info, slot_keys_});
  }
  return lease;
}

AcquireResult RedisPermits::acquire(const std::string& token, Queue queue) {
  const auto start = SteadyClock::now();
  const TakeReply reply = take(token, fair_ ? queue : Queue::none);
  AcquireResult result;
  if (reply.slot == 0) {
    result.holder_pttl = reply.holder_pttl;
    result.watcher = reply.watcher;
    return result;
  }
  const Decision d =
      decide(1, 1, options_.ttl, options_.clock_drift_factor, start, SteadyClock::now());
  if (!d.held) {  // granted too late to be of use: give the slot back
    try {
      permit(reply.slot)->release(token, Announce::waiters);
    } catch (...) {  // best effort; it expires by its ttl
    }
    result.holder_pttl = std::chrono::milliseconds(0);
    return result;
  }
  result.held = true;
  result.granted = 1;
  result.slot = reply.slot;
  result.fence = reply.fence;
  result.valid_until = d.valid_until;
  return result;
}

// The take script with `keys` (this semaphore's, or more slots to check a larger stored limit).
TakeReply RedisPermits::take_with(const PermitKeys& keys, const std::string& token, Queue queue) {
  VarCommand command;
  const TakeArgs args{ttl_ms_,
                      limit_text_,
                      options_.fencing ? "1" : "0",
                      queue == Queue::join ? "1" : "0",
                      grant_channel_,
                      node_->pubsub()};
  build_take_permit(command, keys, token, args);
  // A server too slow to answer may still run it: the rollback follows on the same connection.
  VarCommand rollback;
  build_leave_permits(rollback, keys_, token, node_->pubsub(), Send::eval);
  NodeBatch batch;
  batch.node = node_.get();
  batch.commands.push_back(command.view());
  batch.on_timeout.push_back(rollback.view());
  execute(&batch, 1);
  if (batch.error) {
    // The request may have run before the connection died (a timeout sent the rollback).
    if (!is_timeout(batch.error)) undo(token);
    std::rethrow_exception(batch.error);
  }
  const redisReply* r = batch.replies[0].get();
  const TakeReply reply = read_take_reply(r, limit());
  if (reply.problem == TakeReply::Problem::server_error) {
    std::rethrow_exception(server_error(node_->address(), "the semaphore acquire script", text(r)));
  }
  if (reply.problem == TakeReply::Problem::unexpected) {
    throw ProtocolError(fmt::format(
        "redlock: unexpected reply to the semaphore acquire script from {}", node_->address()));
  }
  return reply;
}

// Another limit stored with the permits: checked over its slots too when it is larger (one more
// round trip), refused while any permit is held.
TakeReply RedisPermits::take(const std::string& token, Queue queue) {
  TakeReply reply = take_with(keys_, token, queue);
  if (reply.problem == TakeReply::Problem::limit_unchecked &&
      reply.other_limit <= Semaphore::kMaxLimit) {
    reply = take_with(PermitKeys(key_, reply.other_limit), token, queue);
  }
  if (reply.problem == TakeReply::Problem::none) return reply;
  throw LimitMismatchError(
      fmt::format("redlock: semaphore {} on {} has permits held with limit {}, but this one has "
                  "limit {}: every user of a semaphore key must give the same limit (it can change "
                  "only while no permit is held)",
                  key_, node_->address(), reply.other_limit, limit()),
      "REDLOCK_LIMIT " + std::to_string(reply.other_limit), limit(), reply.other_limit);
}

// The leave script: a slot the token holds is handed on, its queue place is left.
void RedisPermits::run_leave(const std::string& token) {
  VarCommand command;
  build_leave_permits(command, keys_, token, node_->pubsub(), Send::evalsha);
  NodeBatch batch;
  batch.node = node_.get();
  batch.commands.push_back(command.view());
  execute(&batch, 1);
  if (batch.error) std::rethrow_exception(batch.error);
  const redisReply* r = batch.replies[0].get();
  if (is_error_reply(r)) {
    std::rethrow_exception(server_error(node_->address(), "the semaphore leave script", text(r)));
  }
}

void RedisPermits::undo(const std::string& token) noexcept {
  try {
    run_leave(token);
  } catch (const std::exception& e) {
    logf(LogLevel::debug, "redlock: rollback of an attempt on {}: {}", key_, e.what());
  } catch (...) {
  }
}

}  // namespace

std::unique_ptr<PermitBackend> make_redis_permits(Client client, std::string key, std::size_t limit,
                                                  const LockOptions& options) {
  return std::make_unique<RedisPermits>(std::move(client), std::move(key), limit, options);
}

}  // namespace detail
}  // namespace redlock
