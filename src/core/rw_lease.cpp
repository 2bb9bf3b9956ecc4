// src/core/rw_lease.cpp: a ReadWriteLock's writer and reader leases (see rw_lease.hpp): their
// scripts and the writer-preference and downgrade rules; executing and deciding are
// ScriptLease's.
#include "core/rw_lease.hpp"

#include <algorithm>
#include <exception>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/engine.hpp"  // validate_lock_options
#include "io/connection.hpp"
#include "io/executor.hpp"
#include "util/key_slot.hpp"
#include "util/log_internal.hpp"
#include "util/token.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {
namespace {

const std::string& no_channel() {
  static const std::string& none = *new std::string();
  return none;
}

// A command that confirms without touching a key: a downgraded writer's extend in flight.
void build_confirm(VarCommand& c) { c.arg("EVAL").arg("return 1").arg("0"); }

}  // namespace

RwShared::RwShared(const std::vector<std::shared_ptr<ClientImpl>>& nodes, std::string key,
                   const LockOptions& options)
    : keys((validate_lock_options(key, options), std::move(key))),
      mark(
          std::min(options.ttl, std::max(std::chrono::milliseconds(250), options.retry_delay * 5))),
      mark_ms(std::to_string(mark.count())) {
  if (options.fair.value_or(false)) {
    throw std::invalid_argument("redlock: options.fair is not supported by ReadWriteLock");
  }
  if (nodes.size() > 1 && options.fencing) {
    throw std::invalid_argument(
        "redlock: options.fencing is not supported by a ReadWriteLock on several instances");
  }
  std::set<std::string> servers;
  for (const auto& node : nodes) {
    if (!node) throw std::invalid_argument("redlock: instances contains an empty Client");
    if (node->router() != nullptr && !helpers_share_slot(keys.key)) {
      throw std::invalid_argument(
          "redlock: key has no hash tag but contains '}': on a cluster its helper keys could "
          "not share its slot; give the key a hash tag ({...})");
    }
    if (nodes.size() > 1 && !servers.insert(node->identity()).second) {
      throw std::invalid_argument("redlock: instances names one Redis server twice (" +
                                  node->address() + "); each may count only once");
    }
  }
}

// ---- both ----------------------------------------------------------------------------------

RwLease::RwLease(std::vector<std::shared_ptr<ClientImpl>> nodes,
                 std::shared_ptr<const RwShared> shared, const char* what,
                 const LockOptions& options, const std::string RwKeys::*waits_on)
    : ScriptLease(std::move(nodes), shared->keys.key, what, options),
      shared_(std::move(shared)),
      waits_on_(shared_->keys.*waits_on),
      also_(waits_on == &RwKeys::readable ? std::vector<std::string>{shared_->keys.released}
                                          : std::vector<std::string>{}) {}

bool RwLease::watch_live() const noexcept {
  for (const auto& node : nodes()) {
    if (!release_watch_live(*node, WatchChannels{waits_on_, no_channel(), key(), &also_, true}))
      return false;
  }
  return true;
}

std::unique_ptr<ReleaseWatch> RwLease::watch(SteadyClock::time_point deadline,
                                             std::string /*token_sha1*/) {
  return make_release_watch(nodes(), WatchChannels{waits_on_, no_channel(), key(), &also_, true},
                            deadline, std::string());
}

// ---- the writer ----------------------------------------------------------------------------

RwWriterLease::RwWriterLease(std::vector<std::shared_ptr<ClientImpl>> nodes,
                             std::shared_ptr<const RwShared> shared, const LockOptions& options)
    : RwLease(std::move(nodes), std::move(shared), "the ReadWriteLock writer", options,
              &RwKeys::released),
      waiter_(make_token()) {}

AcquireResult RwWriterLease::acquire(const AcquireRequest& request) {
  const bool mark = request.attempt == Attempt::contended;
  AcquireResult result = acquire_script(
      [&](VarCommand& c, const ClientImpl&) {
        build_writer_acquire(c, shared_->keys, *request.token, ttl_ms(), fencing() ? "1" : "0",
                             mark ? "1" : "0", shared_->mark_ms, waiter_);
      },
      *request.token, 1, nullptr);
  const auto refresh = shared_->mark / 3;
  if (mark && !result.held && !result.failure &&
      (result.holder_pttl.count() < 0 || result.holder_pttl > refresh)) {
    result.holder_pttl = refresh;
  }
  return result;
}

bool RwWriterLease::downgraded(const std::string& token) const {
  std::lock_guard<std::mutex> guard(mutex_);
  return !downgraded_.empty() && token == downgraded_;
}

void RwWriterLease::downgrade_started(const std::string& token) {
  std::lock_guard<std::mutex> guard(mutex_);
  downgraded_ = token;
  released_ = false;
}

bool RwWriterLease::downgrade_released() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return released_;
}

void RwWriterLease::downgrade_ended() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  downgraded_.clear();
  released_ = false;
}

ReleaseResult RwWriterLease::release(const std::string& token, Announce announce) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!downgraded_.empty() && token == downgraded_) {
      released_ = true;
      ReleaseResult kept;
      kept.released = 1;
      kept.quorum_kept = true;
      return kept;
    }
  }
  return ScriptLease::release(token, announce);
}

void RwWriterLease::unmark_waiter() noexcept {
  try {
    const VarCommands commands(nodes().size());
    std::vector<NodeBatch> batches(nodes().size());
    for (std::size_t i = 0; i < nodes().size(); ++i) {
      build_writer_unmark(commands[i], shared_->keys, waiter_, nodes()[i]->pubsub());
      batches[i].node = nodes()[i].get();
      batches[i].commands.push_back(commands[i].view());
    }
    execute(batches.data(), batches.size());
  } catch (const std::exception& e) {
    logf(LogLevel::debug, "redlock: removing the writer-waiting marker of {}: {}", key(), e.what());
  } catch (...) {
  }
}

void RwWriterLease::build_extend(VarCommand& c, const ClientImpl& /*node*/,
                                 const std::string& token, std::string_view ttl_ms) const {
  if (downgraded(token)) return build_confirm(c);
  build_writer_extend(c, shared_->keys, token, ttl_ms);
}

void RwWriterLease::build_release(VarCommand& c, const ClientImpl& node, const std::string& token,
                                  Announce /*announce*/, ScriptSend send) const {
  build_writer_release(c, shared_->keys, token, node.pubsub(), send);
}

// ---- a reader ------------------------------------------------------------------------------

RwReaderLease::RwReaderLease(std::vector<std::shared_ptr<ClientImpl>> nodes,
                             std::shared_ptr<const RwShared> shared, const LockOptions& options)
    : RwLease(std::move(nodes), std::move(shared), "the ReadWriteLock reader", options,
              &RwKeys::readable) {}

void RwReaderLease::arm_downgrade(std::string writer_token) {
  std::lock_guard<std::mutex> guard(mutex_);
  downgrader_ = std::this_thread::get_id();
  from_writer_ = std::move(writer_token);
}

void RwReaderLease::disarm_downgrade() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  downgrader_ = std::thread::id();
  from_writer_.clear();
}

AcquireResult RwReaderLease::acquire(const AcquireRequest& request) {
  std::string from_writer;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (downgrader_ == std::this_thread::get_id()) {
      from_writer.swap(from_writer_);
      downgrader_ = std::thread::id();
    }
  }
  const char* chain = request.attempt == Attempt::contended ? "1" : "0";
  return acquire_script(
      [&](VarCommand& c, const ClientImpl& node) {
        build_reader_acquire(c, shared_->keys, *request.token, ttl_ms(), fencing() ? "1" : "0",
                             chain, from_writer, node.pubsub());
      },
      *request.token, 1, nullptr);
}

void RwReaderLease::build_extend(VarCommand& c, const ClientImpl& /*node*/,
                                 const std::string& token, std::string_view ttl_ms) const {
  build_reader_extend(c, shared_->keys, token, ttl_ms);
}

void RwReaderLease::build_release(VarCommand& c, const ClientImpl& node, const std::string& token,
                                  Announce /*announce*/, ScriptSend send) const {
  build_reader_release(c, shared_->keys, token, node.pubsub(), send);
}

}  // namespace detail
}  // namespace redlock
