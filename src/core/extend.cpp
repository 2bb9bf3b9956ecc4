// src/core/extend.cpp: extend-many (see extend.hpp): build, execute, tally, decide.
#include "core/extend.hpp"

#include <unordered_map>
#include <utility>
#include <vector>

#include "core/engine.hpp"
#include "core/tally.hpp"
#include "protocol/commands.hpp"
#include "protocol/replies.hpp"

namespace redlock {
namespace detail {
namespace {

// Where one (lease, node) command went: its node's batch and its place in that batch.
using Place = std::pair<std::size_t, std::size_t>;

// Finds (or adds) the batch of a node: a linear search while there are few nodes (no
// allocation on Lock::extend's path), a hash map beyond.
class BatchIndex {
 public:
  explicit BatchIndex(PerNode<NodeBatch>& batches) : batches_(batches) {}

  std::size_t of(ClientImpl* node) {
    if (map_.empty()) {
      for (std::size_t b = 0; b < batches_.size(); ++b) {
        if (batches_[b].node == node) return b;
      }
      if (batches_.size() < kLinear) return add(node);
      for (std::size_t b = 0; b < batches_.size(); ++b) map_.emplace(batches_[b].node, b);
    }
    const auto [it, fresh] = map_.try_emplace(node, batches_.size());
    if (fresh) add(node);
    return it->second;
  }

 private:
  static constexpr std::size_t kLinear = 8;
  std::size_t add(ClientImpl* node) {
    batches_.emplace_back();
    batches_.back().node = node;
    return batches_.size() - 1;
  }
  PerNode<NodeBatch>& batches_;
  std::unordered_map<ClientImpl*, std::size_t> map_;
};

void build(const ExtendItem* items, std::size_t count, ExtendCommand* commands, Place* places,
           PerNode<NodeBatch>& batches) {
  BatchIndex index(batches);
  if (count > 1 && items[0].engine->nodes().size() == 1) {
    // A watchdog batch on one server: one node batch with all of them (grown once, not by
    // doubling), plus a WAIT.
    batches[index.of(items[0].engine->nodes()[0].get())].commands.reserve(count + 1);
  }
  std::size_t at = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const ExtendItem& item = items[k];
    for (const auto& node : item.engine->nodes()) {
      build_extend(commands[at], item.engine->key(), *item.token, *item.ttl_ms);
      const std::size_t b = index.of(node.get());
      batches[b].commands.push_back(commands[at].view());
      places[at] = Place(b, batches[b].commands.size() - 1);
      ++at;
    }
  }
  // Endpoint::wait_replicas: one WAIT behind all of a node's extends covers them all.
  for (NodeBatch& batch : batches) {
    if (const CommandView* wait = batch.node->replica_wait()) batch.commands.push_back(*wait);
  }
}

void run(PerNode<NodeBatch>& batches, const ExtendItem* items, std::size_t count, Finish finish) {
  if (finish == Finish::every_node || count != 1) {
    execute(batches.data(), batches.size());
    return;
  }
  EarlyFinish early;
  early.needed = items[0].engine->quorum();
  const auto extended = [](std::size_t, const redisReply* reply) { return confirmed(reply); };
  early.succeed_when(extended);
  execute(batches.data(), batches.size(), &early);
}

void tally_item(ExtendItem& item, const PerNode<NodeBatch>& batches, const Place* places,
                SteadyClock::time_point started, SteadyClock::time_point done) {
  const LeaseEngine& engine = *item.engine;
  const auto& nodes = engine.nodes();
  Tally tally(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeBatch& batch = batches[places[i].first];
    if (batch.error) {
      tally.failed(i, batch.error);
      continue;
    }
    const redisReply* reply = batch.replies[places[i].second].get();
    if (is_error_reply(reply)) {
      tally.server_error(i, *nodes[i], "the extend script", error_text(reply));
      continue;
    }
    const bool yes = confirmed(reply);
    if (yes && batch.node->replica_wait() != nullptr &&
        !tally.replicas_acknowledged(i, *nodes[i], batch.replies.back().get())) {
      continue;  // too few replicas have the new expiry: not confirmed
    }
    tally.answered(yes);
    if (!yes) tally.refused();
  }
  ExtendResult& result = item.result;
  result.confirmed = tally.yes();
  const Decision d =
      decide(nodes.size(), result.confirmed, item.ttl, engine.drift_factor(), started, done);
  result.held = d.held;
  result.valid_until = d.valid_until;
  result.failure = tally.failure_if_silent();
  result.reason = extend_reason(nodes.size(), result.confirmed);
  item.refused = tally.refusals();
}

}  // namespace

std::size_t extend_leases(ExtendItem* items, std::size_t count, Finish finish) {
  std::size_t total = 0;
  for (std::size_t k = 0; k < count; ++k) total += items[k].engine->nodes().size();
  // Scratch kept by the thread (the watchdog's batches of many leases allocate nothing once
  // warm). Sized before build() and not after: the batches point into `commands`.
  thread_local std::vector<ExtendCommand> commands;
  thread_local std::vector<Place> places;
  commands.clear();
  commands.resize(total);
  places.resize(total);
  PerNode<NodeBatch> batches;
  build(items, count, commands.data(), places.data(), batches);
  const auto started = SteadyClock::now();
  run(batches, items, count, finish);
  const auto done = SteadyClock::now();
  std::size_t at = 0;
  for (std::size_t k = 0; k < count; ++k) {
    tally_item(items[k], batches, places.data() + at, started, done);
    at += items[k].engine->nodes().size();
  }
  return batches.size();
}

}  // namespace detail
}  // namespace redlock
