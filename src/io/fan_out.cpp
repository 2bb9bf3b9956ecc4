// src/io/fan_out.cpp: the rules of one round over N nodes (see fan_out.hpp).
#include "io/fan_out.hpp"

#include <algorithm>

namespace redlock {
namespace detail {

FanOut::Clock::time_point FanOut::grace_end(const FanNode* nodes, Clock::time_point now) const {
  const EarlyFinish& early = *early_;
  // Only nodes that answered "no" make a quorum impossible: a node that failed or was skipped
  // says nothing about the others, which are then still awaited normally (else a busy machine
  // could abandon every live node and turn "not held" into "unreachable").
  if (early.required < count_) {
    const FanNode& r = nodes[early.required];
    if (r.state == FanNode::State::waiting && !r.trailing) return Clock::time_point::max();
  }
  std::size_t succeeded = 0;
  std::size_t failed = 0;
  std::size_t unavailable = 0;
  for (std::size_t i = 0; i < count_; ++i) {
    const FanNode& n = nodes[i];
    if (n.state == FanNode::State::ended || n.trailing) {
      ++unavailable;
    } else if (n.state == FanNode::State::answered) {
      if (n.answer != nullptr && early.succeeded(i, n.answer)) {
        ++succeeded;
      } else {
        ++failed;
      }
    }
  }
  if (succeeded >= early.needed || (failed > 0 && failed + unavailable > count_ - early.needed)) {
    return now + std::max<Clock::duration>(3 * (now - start_), std::chrono::milliseconds(5));
  }
  return Clock::time_point::max();
}

FanOut::Clock::time_point FanOut::tick(Clock::time_point now, const FanNode* nodes,
                                       PerNode<FanCut>& cuts) {
  if (early_ != nullptr && grace_ == Clock::time_point::max()) {
    grace_ = grace_end(nodes, now - lost_);
  }
  // Trailing nodes are cut once every node that is waited for is done.
  const bool cut_trailing = std::all_of(nodes, nodes + count_, [](const FanNode& n) {
    return n.trailing || n.state != FanNode::State::waiting;
  });
  auto next = Clock::time_point::max();
  for (std::size_t i = 0; i < count_; ++i) {
    const FanNode& n = nodes[i];
    if (n.state != FanNode::State::waiting) continue;
    // A TLS handshake in progress is not cut by the grace (only by its connect deadline, or
    // when the node is trailing): a plain socket's request would be out by now, and a fresh
    // Redlock's slower handshakes would otherwise leave it held on only a quorum.
    const bool own = now >= n.deadline;
    const bool due = own || (now >= grace_ && !n.securing);
    if (due || (n.trailing && cut_trailing)) {
      cuts.push_back(FanCut{i, own ? Cut::own_deadline : due ? Cut::grace : Cut::not_awaited});
      continue;
    }
    next = std::min(next, n.securing ? n.deadline : std::min(n.deadline, grace_));
  }
  return next;
}

}  // namespace detail
}  // namespace redlock
