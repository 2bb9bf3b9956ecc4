// src/io/fan_out.hpp: one round over N nodes as pure state (sans-I/O): which nodes are given up,
// and when, by their own deadlines, an early finish's grace, or as trailing nodes once the others
// are done. Its driver does the I/O and tells it where each node stands: the poll loop
// (io/poll_loop.cpp) for the blocking calls; docs/design/async-engine.md §4.1 for the reactor's.
#ifndef REDLOCK_SRC_IO_FAN_OUT_HPP
#define REDLOCK_SRC_IO_FAN_OUT_HPP

#include <chrono>
#include <cstddef>

#include "io/executor.hpp"

struct redisReply;

namespace redlock {
namespace detail {

// How a node's wait ended without all its replies.
enum class Cut : unsigned char {
  none,
  own_deadline,  // its command (or connect) timeout: evidence that it is slow or stopped
  grace,         // an early finish's grace ran out: it was slower than the others
  not_awaited,   // in back-off and the others were done (SkipPolicy::every_node)
};

// Where one node of a round stands, as its driver tells FanOut::tick.
struct FanNode {
  enum class State : unsigned char {
    waiting,   // replies still owed
    answered,  // every reply is in
    ended,     // failed, cut, or never sent
  };
  State state{State::waiting};
  bool trailing{false};  // in back-off: not waited for once the others are done
  bool securing{false};  // a TLS handshake under way: not cut by the grace, only its deadline
  std::chrono::steady_clock::time_point deadline{};  // waiting: its connect's or its replies'
  // answered: the reply the early finish judges (its first command's); null when the node
  // refused the connection's handshake (AUTH, SELECT), which counts as a "no".
  const redisReply* answer{nullptr};
};

// A node to give up now, and why. The driver may still take what has arrived (a last look).
struct FanCut {
  std::size_t node;
  Cut cut;
};

// The round's rules, written once: own deadlines, EarlyFinish (needed, required, the grace of
// three times the time so far, at least 5 ms), trailing nodes. Not thread-safe (one driver).
class FanOut {
 public:
  using Clock = std::chrono::steady_clock;

  // `early` (may be null: every node is awaited to its own deadline) must outlive the round.
  FanOut(std::size_t count, Clock::time_point start, const EarlyFinish* early) noexcept
      : count_(count), start_(start), early_(early) {}

  // Time the driver spent in a wait that says nothing of the other nodes (a lead node's read
  // that gave up): the grace is reckoned from before it, so a silent node does not stretch it.
  void not_counted(Clock::duration lost) noexcept { lost_ = lost; }

  // Decides at `now`, given the nodes' states (`count` of them): appends to `cuts` every node
  // to give up now, and returns when to look again: the earliest deadline or grace end among
  // the nodes still waited for (time_point::max() when there is none: the round is over once
  // the cuts are made). Never throws beyond `cuts`' growth (std::bad_alloc).
  Clock::time_point tick(Clock::time_point now, const FanNode* nodes, PerNode<FanCut>& cuts);

  // The end of the early finish's grace, once its outcome is certain; else time_point::max().
  Clock::time_point grace() const noexcept { return grace_; }

 private:
  // The grace's end if the outcome is certain at `now`, else time_point::max().
  Clock::time_point grace_end(const FanNode* nodes, Clock::time_point now) const;

  std::size_t count_;
  Clock::time_point start_;
  const EarlyFinish* early_;
  Clock::duration lost_{};
  Clock::time_point grace_{Clock::time_point::max()};
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_FAN_OUT_HPP
