// src/core/multi_lease.cpp: the MultiLock's lease (see multi_lease.hpp): the set's rules and its
// scripts; executing and deciding are ScriptLease's.
#include "core/multi_lease.hpp"

#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include <redlock/multilock.hpp>  // MultiLock::kMaxKeys

#include "core/engine.hpp"  // validate_lock_options, kMaxKeyBytes
#include "io/connection.hpp"
#include "util/key_slot.hpp"
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
  if (keys.size() > MultiLock::kMaxKeys) {
    throw std::invalid_argument(
        fmt::format("redlock: keys has {} keys; a MultiLock takes at most {}", keys.size(),
                    MultiLock::kMaxKeys));
  }
  if (options.fair.value_or(false)) {
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
    : ScriptLease({std::move(node)}, (check_set(keys, options), joined(keys)), "the MultiLock",
                  options),
      keys_(std::move(keys)),
      more_channels_(keys_.channels.begin() + 1, keys_.channels.end()) {
  if (this->node().router() != nullptr) check_slots(keys_.keys);
}

AcquireResult MultiLease::acquire(const AcquireRequest& request) {
  const std::string& token = *request.token;
  std::vector<std::uint64_t> fences;
  AcquireResult result = acquire_script(
      [&](VarCommand& c, const ClientImpl&) {
        build_multi_acquire(c, keys_, token, ttl_ms(), fencing() ? "1" : "0");
      },
      token, keys_.keys.size(), &fences);
  if (result.held) {
    std::lock_guard<std::mutex> guard(mutex_);
    granted_token_ = token;
    granted_fences_ = std::move(fences);
  }
  return result;
}

std::vector<std::uint64_t> MultiLease::fences_of(const std::string& token) const {
  std::lock_guard<std::mutex> guard(mutex_);
  if (token != granted_token_) return {};
  return granted_fences_;
}

void MultiLease::build_extend(VarCommand& c, const ClientImpl& /*node*/, const std::string& token,
                              std::string_view ttl_ms) const {
  build_multi_extend(c, keys_, token, ttl_ms);
}

void MultiLease::build_release(VarCommand& c, const ClientImpl& node, const std::string& token,
                               Announce announce, ScriptSend send) const {
  build_multi_release(c, keys_, token, announce == Announce::waiters, node.pubsub(), send);
}

bool MultiLease::watch_live() const noexcept {
  static const std::string no_grants;
  return release_watch_live(node(),
                            WatchChannels{keys_.channels[0], no_grants, key(), &more_channels_});
}

std::unique_ptr<ReleaseWatch> MultiLease::watch(SteadyClock::time_point deadline,
                                                std::string /*token_sha1*/) {
  static const std::string no_grants;
  return make_release_watch(nodes(),
                            WatchChannels{keys_.channels[0], no_grants, key(), &more_channels_},
                            deadline, std::string());
}

}  // namespace detail
}  // namespace redlock
