// src/io/cluster.cpp: ClusterRouter, the slot map of a Redis Cluster and its pools (see
// cluster.hpp). The routing of batches is cluster_route.cpp.
#include "io/cluster.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

#include <fmt/format.h>

#include <redlock/errors.hpp>
#include <redlock/reply.hpp>

#include "io/codec.hpp"
#include "io/executor.hpp"
#include "io/pool.hpp"
#include "util/key_slot.hpp"
#include "util/log_internal.hpp"
#include "util/shared_registry.hpp"

namespace redlock {
namespace detail {
namespace {

std::string host_port(const std::string& host, int port) {
  Endpoint e;
  e.host = host;
  e.port = port;
  return e.address();
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) ==
                  std::toupper(static_cast<unsigned char>(y));
         });
}

}  // namespace

ClusterRouter::ClusterRouter(const Endpoint& endpoint) : template_(endpoint) {
  address_ = endpoint.address();
  template_.cluster = ClusterOptions{};
  for (const Endpoint& s : endpoint.cluster.seeds) {
    seeds_.push_back(node(s.host, s.port));
  }
}

ClientImpl* ClusterRouter::node(const std::string& host, int port) {
  std::lock_guard<std::mutex> guard(mutex_);
  return node_locked(host, port);
}

ClientImpl* ClusterRouter::node_locked(const std::string& host, int port) {
  std::shared_ptr<ClientImpl>& pool = nodes_[host_port(host, port)];
  if (!pool) {
    Endpoint e = template_;
    e.host = host;
    e.port = port;
    pool = std::make_shared<ClientImpl>(std::move(e), PubSub::sharded);  // SSUBSCRIBE, SPUBLISH
  }
  return pool.get();
}

ClientImpl* ClusterRouter::owner(std::uint16_t slot) {
  for (int round = 0; round < 2; ++round) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      // After a refresh (round 1) the map is taken as it is, even if marked stale again.
      if (!owners_.empty() && (round == 1 || !stale_.load(std::memory_order_acquire))) {
        if (owners_[slot] != nullptr) return owners_[slot];
      }
    }
    if (round == 0) refresh();
  }
  throw ConnectionError(fmt::format(
      "redlock: no master of the cluster {} owns slot {} (a cluster being resharded, or one "
      "that lost a master and its replicas)",
      address_, slot));
}

ClientImpl* ClusterRouter::known_owner(std::uint16_t slot) const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return owners_.empty() ? nullptr : owners_[slot];
}

ClientImpl* ClusterRouter::any_master() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!masters_.empty() && !stale_.load(std::memory_order_acquire)) return masters_.front();
  }
  refresh();
  std::lock_guard<std::mutex> guard(mutex_);
  if (masters_.empty()) {
    throw ConnectionError(fmt::format("redlock: the cluster {} names no master", address_));
  }
  return masters_.front();
}

void ClusterRouter::moved(std::uint16_t slot, const std::string& host, int port) {
  std::lock_guard<std::mutex> guard(mutex_);
  ClientImpl* const target = node_locked(host, port);
  if (!owners_.empty()) owners_[slot] = target;
  if (std::find(masters_.begin(), masters_.end(), target) == masters_.end()) {
    masters_.push_back(target);
  }
  stale_.store(true, std::memory_order_release);
}

// The node that answered last, the seeds, then every other node the map has named (a cluster
// whose seeds all left can still be found through the masters it had).
std::vector<ClientImpl*> ClusterRouter::candidates() const {
  std::vector<ClientImpl*> out;
  std::lock_guard<std::mutex> guard(mutex_);
  if (answered_ != nullptr) out.push_back(answered_);
  for (ClientImpl* s : seeds_) {
    if (s != answered_) out.push_back(s);
  }
  for (ClientImpl* m : masters_) {
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  }
  return out;
}

// Coalesced: callers that wait here while another refreshes find the map fresh and return.
void ClusterRouter::refresh() {
  const std::uint64_t seen = refreshes_.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> one_at_a_time(refresh_mutex_);
  if (refreshes_.load(std::memory_order_acquire) != seen) return;  // done meanwhile
  std::string log;
  for (ClientImpl* candidate : candidates()) {
    std::vector<Range> ranges;
    if (!ask(*candidate, ranges, log)) continue;
    adopt(ranges, candidate);
    refreshes_.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  throw ConnectionError(
      fmt::format("redlock: no node of the cluster {} answered CLUSTER SLOTS ({})", address_, log));
}

// CLUSTER SLOTS on `node`: [[first, last, [host, port, id...], replicas...], ...]. An empty host
// means the node's own address.
bool ClusterRouter::ask(ClientImpl& node, std::vector<Range>& ranges, std::string& log) {
  static const char* const kArgv[] = {"CLUSTER", "SLOTS"};
  static const std::size_t kLens[] = {7, 5};
  NodeBatch batch;
  batch.node = &node;
  batch.commands.push_back(CommandView{2, kArgv, kLens});
  execute(&batch, 1);
  const std::string sep = log.empty() ? "" : "; ";
  if (batch.error) {
    try {
      std::rethrow_exception(batch.error);
    } catch (const std::exception& e) {
      log += sep + e.what();
    }
    return false;
  }
  const Reply reply = to_reply(batch.replies[0].get());
  if (reply.type() != Reply::Type::array || reply.elements().empty()) {
    log += sep + node.address() + " answered " +
           (reply.type() == Reply::Type::error ? reply.str() : "no slots");
    return false;
  }
  for (const Reply& r : reply.elements()) {
    const auto& e = r.elements();
    if (e.size() < 3 || e[2].elements().size() < 2) continue;
    Range range;
    range.first = static_cast<std::uint16_t>(e[0].integer());
    range.last = static_cast<std::uint16_t>(std::min<long long>(e[1].integer(), kClusterSlots - 1));
    range.host = e[2].elements()[0].str();
    if (range.host.empty() || range.host == "?") range.host = node.endpoint().host;
    range.port = static_cast<int>(e[2].elements()[1].integer());
    ranges.push_back(std::move(range));
  }
  return true;
}

void ClusterRouter::adopt(const std::vector<Range>& ranges, ClientImpl* from) {
  std::lock_guard<std::mutex> guard(mutex_);
  answered_ = from;
  owners_.assign(kClusterSlots, nullptr);
  masters_.clear();
  for (const Range& r : ranges) {
    ClientImpl* const master = node_locked(r.host, r.port);
    for (unsigned s = r.first; s <= r.last; ++s) owners_[s] = master;
    if (std::find(masters_.begin(), masters_.end(), master) == masters_.end()) {
      masters_.push_back(master);
    }
  }
  stale_.store(false, std::memory_order_release);
  logf(LogLevel::debug, "redlock: slot map of {}: {} ranges on {} masters", address_, ranges.size(),
       masters_.size());
}

std::optional<std::uint16_t> command_slot(const CommandView& c) noexcept {
  if (c.argc < 2) return std::nullopt;
  const std::string_view name(c.argv[0], c.lens[0]);
  if (iequal(name, "EVAL") || iequal(name, "EVALSHA")) {
    if (c.argc < 4 || std::string_view(c.argv[2], c.lens[2]) == "0") return std::nullopt;
    return key_slot(std::string_view(c.argv[3], c.lens[3]));
  }
  for (std::string_view keyless : {"WAIT", "PING", "INFO", "SCRIPT", "CLUSTER", "ROLE", "ECHO",
                                   "CLIENT", "CONFIG", "TIME", "DBSIZE", "PUBLISH", "ASKING"}) {
    if (iequal(name, keyless)) return std::nullopt;
  }
  return key_slot(std::string_view(c.argv[1], c.lens[1]));
}

std::shared_ptr<ClusterRouter> shared_router(const Endpoint& endpoint) {
  static auto& registry = *new SharedRegistry<ClusterRouter>;  // never destroyed
  return registry.get(settings_key(endpoint),
                      [&endpoint] { return std::make_shared<ClusterRouter>(endpoint); });
}

}  // namespace detail
}  // namespace redlock
