// src/core/engine_setup.cpp: what a lease engine accepts (nodes, key, options) and the names it
// derives from the key.
#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "core/engine.hpp"
#include "util/key_slot.hpp"

namespace redlock {
namespace detail {
namespace {

// Several nodes: none may be another Client for a server already in the list (identity() asks
// the server for its run_id; a single-instance Lock connects nothing here).
void check_nodes(const std::vector<std::shared_ptr<ClientImpl>>& nodes) {
  if (nodes.empty()) throw std::invalid_argument("redlock: instances must not be empty");
  std::map<std::string, std::size_t> identities;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i]) throw std::invalid_argument("redlock: instances contains an empty Client");
    if (nodes.size() == 1) break;
    const auto [at, fresh] = identities.try_emplace(nodes[i]->identity(), i);
    if (!fresh) {
      throw std::invalid_argument(fmt::format(
          "redlock: instances[{}] ({}) and instances[{}] ({}) are the same Redis server; each "
          "server may count only once towards the quorum",
          at->second, nodes[at->second]->address(), i, nodes[i]->address()));
    }
  }
}

void check_key(const std::string& key) {
  if (key.empty()) throw std::invalid_argument("redlock: key must not be empty");
  if (key.size() > kMaxKeyBytes) {
    throw std::invalid_argument(
        fmt::format("redlock: key is {} bytes; the maximum is {} bytes", key.size(), kMaxKeyBytes));
  }
}

void check_durations(const LockOptions& options) {
  const auto ttl = options.ttl;
  if (ttl.count() <= 0) {
    throw std::invalid_argument(
        fmt::format("redlock: options.ttl must be > 0 ms (got {} ms)", ttl.count()));
  }
  if (ttl > kMaxTtl) {
    throw std::invalid_argument(fmt::format(
        "redlock: options.ttl is too large ({} ms; the maximum is 200 years)", ttl.count()));
  }
  if (options.max_unavailable.count() < 0 || options.max_unavailable > kMaxTtl) {
    throw std::invalid_argument(fmt::format(
        "redlock: options.max_unavailable must be >= 0 ms and at most 200 years (got {} ms)",
        options.max_unavailable.count()));
  }
  if (options.retry_delay.count() <= 0 || options.retry_delay > kMaxTtl) {
    throw std::invalid_argument(
        fmt::format("redlock: options.retry_delay must be > 0 ms and at most 200 years (got {} ms)",
                    options.retry_delay.count()));
  }
  if (options.max_hold > kMaxTtl) {
    throw std::invalid_argument("redlock: options.max_hold must be at most 200 years");
  }
}

void check_drift(const LockOptions& options) {
  const double factor = options.clock_drift_factor;
  if (!(factor >= 0.0 && factor < 1.0)) {
    throw std::invalid_argument(
        fmt::format("redlock: options.clock_drift_factor must be in [0, 1) (got {})", factor));
  }
  if (drift_of(options.ttl, factor) >= options.ttl) {
    throw std::invalid_argument(
        fmt::format("redlock: options.ttl of {} ms leaves no validity after the drift allowance of "
                    "ttl * {} + 2 ms; use a longer ttl",
                    options.ttl.count(), factor));
  }
  if (options.max_hold.count() < 0) {
    throw std::invalid_argument("redlock: options.max_hold must be >= 0 ms");
  }
}

}  // namespace

namespace {

// Fair mode over several servers: the one that orders the waiters, chosen alike by every client
// whatever order it lists the servers in: the servers sorted by identity (run_id), rotated by
// the key's hash slot, so hot keys spread their queues over the servers.
std::size_t choose_orderer(const std::vector<std::shared_ptr<ClientImpl>>& nodes,
                           const std::string& key) {
  if (nodes.size() == 1) return 0;
  std::vector<std::pair<std::string, std::size_t>> ids;
  for (std::size_t i = 0; i < nodes.size(); ++i) ids.emplace_back(nodes[i]->identity(), i);
  std::sort(ids.begin(), ids.end());
  return ids[key_slot(key) % ids.size()].second;
}

}  // namespace

void validate_lock_options(const std::string& key, const LockOptions& options) {
  check_key(key);
  check_durations(options);
  check_drift(options);
}

LeaseEngine::LeaseEngine(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string key,
                         const LockOptions& options, std::string channel, WaiterQueue queue)
    : nodes_(std::move(nodes)),
      ttl_(options.ttl),
      drift_factor_(options.clock_drift_factor),
      fencing_(options.fencing),
      // Unset: fair on one server; a Redlock waits on release (include/redlock/options.hpp says
      // why: an orderer's FIFO needs its refusal to override a majority).
      fair_(options.fair.value_or(nodes_.size() == 1)) {
  check_nodes(nodes_);
  validate_lock_options(key, options);
  for (const auto& node : nodes_) {
    if (node->router() != nullptr && !helpers_share_slot(key)) {
      throw std::invalid_argument(
          "redlock: key has no hash tag but contains '}': on a cluster its helper keys could not "
          "share its slot; give the key a hash tag ({...})");
    }
  }
  keys_.key = std::move(key);
  keys_.fence = helper_key(keys_.key, ":fence");
  keys_.channel = channel.empty() ? helper_key(keys_.key, ":released") : std::move(channel);
  if (fair_) orderer_ = choose_orderer(nodes_, keys_.key);
  keys_.grant_channel = keys_.channel + ":" + nodes_[orderer_]->waiter_id();
  quiet_capable_ = fair_ && nodes_.size() == 1 && queue.list.empty() && !fencing_;
  keys_.queue = queue.list.empty() ? helper_key(keys_.key, ":waiters") : std::move(queue.list);
  keys_.queue_info =
      queue.info.empty() ? helper_key(keys_.key, ":waiters:info") : std::move(queue.info);
  peers_ = std::move(queue.peers);
  ttl_ms_ = std::to_string(ttl_.count());
}

}  // namespace detail
}  // namespace redlock
