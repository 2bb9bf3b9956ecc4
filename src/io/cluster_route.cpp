// src/io/cluster_route.cpp: execute_routed(), batches on a Redis Cluster (see cluster.hpp): each
// batch is split by the master that owns each command's slot, the parts run in one fan-out, and
// MOVED, ASK and TRYAGAIN replies are followed before the caller sees the replies.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "io/cluster.hpp"
#include "io/codec.hpp"
#include "io/executor.hpp"
#include "io/pool.hpp"
#include "util/log_internal.hpp"
#include "util/small_vector.hpp"

namespace redlock {
namespace detail {
namespace {

// Redirections followed per command before its MOVED/ASK/TRYAGAIN reply is handed back as it is.
constexpr int kMaxRedirects = 5;

// One batch's commands for one node.
struct Part {
  std::size_t origin{0};
  SmallVector<std::size_t, 4> index;  // which of the origin's commands, in order
  ClientImpl* keep{nullptr};          // the master (null: not a cluster batch); the router's
  ClusterRouter* router{nullptr};     // the batch's cluster, alive while the batch runs
};

struct Redirect {
  enum class Kind : unsigned char { none, moved, ask, tryagain, down } kind{Kind::none};
  std::uint16_t slot{0};
  std::string host;
  int port{0};
};

// "MOVED 3999 127.0.0.1:6381", "ASK ...", "TRYAGAIN ...", "CLUSTERDOWN ...".
Redirect redirect_of(const redisReply* reply) {
  Redirect r;
  if (!is_error(reply)) return r;
  const std::string_view t = text(reply);
  if (t.rfind("TRYAGAIN", 0) == 0) r.kind = Redirect::Kind::tryagain;
  if (t.rfind("CLUSTERDOWN", 0) == 0) r.kind = Redirect::Kind::down;
  const bool moved = t.rfind("MOVED ", 0) == 0;
  if (!moved && t.rfind("ASK ", 0) != 0) return r;
  const std::size_t space = t.find(' ', moved ? 6 : 4);
  const std::size_t colon = t.rfind(':');
  if (space == std::string_view::npos || colon == std::string_view::npos || colon < space) return r;
  r.slot = static_cast<std::uint16_t>(std::atoi(std::string(t.substr(t.find(' ') + 1)).c_str()));
  r.host = std::string(t.substr(space + 1, colon - space - 1));
  if (r.host.size() > 2 && r.host.front() == '[') r.host = r.host.substr(1, r.host.size() - 2);
  r.port = std::atoi(std::string(t.substr(colon + 1)).c_str());
  if (r.port > 0) r.kind = moved ? Redirect::Kind::moved : Redirect::Kind::ask;
  return r;
}

// The part of batch `origin` for `node`, created if new.
std::size_t part_for(PerNode<Part>& parts, PerNode<NodeBatch>& out, std::size_t origin,
                     ClientImpl* node, ClusterRouter& router) {
  for (std::size_t p = 0; p < parts.size(); ++p) {
    if (parts[p].origin == origin && parts[p].keep == node) return p;
  }
  out.emplace_back();
  out.back().node = node;
  parts.emplace_back();
  parts.back().origin = origin;
  parts.back().keep = node;
  parts.back().router = &router;
  return parts.size() - 1;
}

// A cluster batch's commands by owner. A command without a key goes with the one before it
// (WAIT behind a write), or to any master. False (batch.error set) if a slot has no owner.
bool split_cluster(NodeBatch& batch, std::size_t origin, PerNode<Part>& parts,
                   PerNode<NodeBatch>& out) {
  ClusterRouter& router = *batch.node->router();
  const std::size_t first = parts.size();
  try {
    ClientImpl* last = nullptr;
    for (std::size_t k = 0; k < batch.commands.size(); ++k) {
      const auto slot = command_slot(batch.commands[k]);
      last = slot ? router.owner(*slot) : last != nullptr ? last : router.any_master();
      const std::size_t p = part_for(parts, out, origin, last, router);
      parts[p].index.push_back(k);
      out[p].commands.push_back(batch.commands[k]);
    }
    for (const CommandView& undo : batch.on_timeout) {
      const auto slot = command_slot(undo);
      if (!slot) continue;
      ClientImpl* const owner = router.owner(*slot);
      for (std::size_t p = 0; p < parts.size(); ++p) {
        if (parts[p].origin == origin && parts[p].keep == owner) out[p].on_timeout.push_back(undo);
      }
    }
  } catch (...) {
    batch.error = std::current_exception();
    parts.resize(first);  // none of the batch's commands runs
    out.resize(first);
    return false;
  }
  return true;
}

void split(NodeBatch* batches, std::size_t count, PerNode<Part>& parts, PerNode<NodeBatch>& out) {
  for (std::size_t i = 0; i < count; ++i) {
    NodeBatch& b = batches[i];
    b.error = nullptr;
    b.replies.clear();
    if (b.node->router() != nullptr) {
      split_cluster(b, i, parts, out);
      continue;
    }
    out.emplace_back();
    out.back().node = b.node;
    for (const CommandView& c : b.commands) out.back().commands.push_back(c);
    for (const CommandView& c : b.on_timeout) out.back().on_timeout.push_back(c);
    Part& part = parts.emplace_back();
    part.origin = i;
    for (std::size_t k = 0; k < b.commands.size(); ++k) part.index.push_back(k);
  }
}

// One redirected command (and the keyless ones behind it) of a part, sent again.
struct Redo {
  std::size_t part{0};
  std::vector<std::size_t> at;  // positions in the part
  bool asking{false};
  ClientImpl* target{nullptr};
};

const char* const kAsking[] = {"ASKING"};
const std::size_t kAskingLen[] = {6};

// The redirected commands of part `p` (a cluster part without an error), with their targets; a
// CLUSTERDOWN reply fails the part instead. Returns whether a TRYAGAIN was among them.
bool collect(std::size_t p, const Part& part, NodeBatch& b, ClusterRouter& router,
             std::vector<Redo>& redo) {
  bool tryagain = false;
  for (std::size_t j = 0; j < b.replies.size(); ++j) {
    const Redirect r = redirect_of(b.replies[j].get());
    if (r.kind == Redirect::Kind::none) continue;
    if (r.kind == Redirect::Kind::down) {
      b.error = std::make_exception_ptr(ConnectionError(
          fmt::format("redlock: the cluster {} is down ({} answered {})", router.address(),
                      b.node->address(), text(b.replies[j].get()))));
      return false;
    }
    Redo d;
    d.part = p;
    d.at.push_back(j);
    while (j + 1 < b.replies.size() && !command_slot(b.commands[j + 1])) d.at.push_back(++j);
    d.asking = r.kind == Redirect::Kind::ask;
    if (r.kind == Redirect::Kind::tryagain) {
      tryagain = true;
      d.target = part.keep;
    } else {
      if (r.kind == Redirect::Kind::moved) router.moved(r.slot, r.host, r.port);
      d.target = router.node(r.host, r.port);
    }
    redo.push_back(std::move(d));
  }
  return tryagain;
}

// Sends the redirected commands again and puts their replies in place (or fails their part).
void resend(std::vector<Redo>& redo, PerNode<NodeBatch>& out) {
  std::vector<NodeBatch> again(redo.size());
  for (std::size_t r = 0; r < redo.size(); ++r) {
    again[r].node = redo[r].target;
    if (redo[r].asking) again[r].commands.push_back(CommandView{1, kAsking, kAskingLen});
    for (std::size_t j : redo[r].at) again[r].commands.push_back(out[redo[r].part].commands[j]);
  }
  execute_direct(again.data(), again.size(), nullptr, SkipPolicy::every_node);
  for (std::size_t r = 0; r < redo.size(); ++r) {
    NodeBatch& b = out[redo[r].part];
    if (again[r].error) {
      if (!b.error) b.error = again[r].error;
      continue;
    }
    const std::size_t skip = redo[r].asking ? 1 : 0;
    for (std::size_t k = 0; k < redo[r].at.size(); ++k) {
      b.replies[redo[r].at[k]] = std::move(again[r].replies[skip + k]);
    }
    b.retried = b.retried || again[r].retried;
  }
}

// A command still redirected after kMaxRedirects rounds (a slot whose keys are split between
// two masters mid-migration answers TRYAGAIN until the migration ends) fails its part: the
// command did not run, like a node that could not be reached.
void give_up(PerNode<Part>& parts, PerNode<NodeBatch>& out) {
  for (std::size_t p = 0; p < parts.size(); ++p) {
    NodeBatch& b = out[p];
    if (parts[p].keep == nullptr || b.error) continue;
    for (const ReplyPtr& reply : b.replies) {
      if (redirect_of(reply.get()).kind == Redirect::Kind::none) continue;
      b.error = std::make_exception_ptr(ConnectionError(fmt::format(
          "redlock: the cluster {} still redirects after {} tries ({}: {}); a slot being "
          "migrated, try again",
          parts[p].router->address(), kMaxRedirects, b.node->address(), text(reply.get()))));
      break;
    }
  }
}

// Follows redirections, at most kMaxRedirects rounds; TRYAGAIN waits 10, 20, 40... ms first.
void follow(PerNode<Part>& parts, PerNode<NodeBatch>& out) {
  for (int round = 0; round < kMaxRedirects; ++round) {
    std::vector<Redo> redo;
    bool tryagain = false;
    for (std::size_t p = 0; p < parts.size(); ++p) {
      if (parts[p].keep == nullptr || out[p].error) continue;
      tryagain = collect(p, parts[p], out[p], *parts[p].router, redo) || tryagain;
    }
    if (redo.empty()) return;
    if (tryagain) std::this_thread::sleep_for(std::chrono::milliseconds(10 << round));
    resend(redo, out);
  }
  give_up(parts, out);
}

// A part whose node failed (not an answer): the map may be out of date (a failover).
void note_failures(PerNode<Part>& parts, PerNode<NodeBatch>& out) {
  for (std::size_t p = 0; p < parts.size(); ++p) {
    if (parts[p].keep == nullptr || !out[p].error) continue;
    try {
      std::rethrow_exception(out[p].error);
    } catch (const ServerError&) {
    } catch (...) {
      parts[p].router->stale();
    }
  }
}

// Puts the parts' replies back into their batches, in the batches' command order.
void join(NodeBatch* batches, PerNode<Part>& parts, PerNode<NodeBatch>& out) {
  for (std::size_t p = 0; p < parts.size(); ++p) {
    NodeBatch& b = batches[parts[p].origin];
    b.retried = b.retried || out[p].retried;
    b.abandoned = b.abandoned || out[p].abandoned;
    if (out[p].error) {
      if (!b.error) b.error = out[p].error;
      continue;
    }
    if (b.replies.size() < b.commands.size()) b.replies.resize(b.commands.size());
    for (std::size_t k = 0; k < parts[p].index.size(); ++k) {
      b.replies[parts[p].index[k]] = std::move(out[p].replies[k]);
    }
  }
}

struct MappedFinish {
  const EarlyFinish* inner;
  const PerNode<Part>* parts;
  bool operator()(std::size_t node, const redisReply* reply) const {
    return inner->succeeded((*parts)[node].origin, reply);
  }
};

}  // namespace

void execute_routed(NodeBatch* batches, std::size_t count, const EarlyFinish* early,
                    SkipPolicy policy) {
  PerNode<Part> parts;
  PerNode<NodeBatch> out;
  split(batches, count, parts, out);
  // An early finish counts nodes: only when every batch is one part (one master each).
  const MappedFinish test{early, &parts};
  EarlyFinish mapped;
  if (early != nullptr && parts.size() == count) {
    mapped.needed = early->needed;
    mapped.required = early->required;  // one part per batch: the indexes are the same
    mapped.succeed_when(test);
  }
  execute_direct(out.data(), out.size(), mapped.success != nullptr ? &mapped : nullptr, policy);
  follow(parts, out);
  note_failures(parts, out);
  join(batches, parts, out);
}

}  // namespace detail
}  // namespace redlock
