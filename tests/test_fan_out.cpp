// [unit][fan_out]: the rules of one round over N nodes (src/io/fan_out.hpp), as pure state: each
// node cut at its own deadline, an early finish's grace (3x the time so far, at least 5 ms) once
// the outcome is certain, a required node, TLS handshakes, trailing nodes, and a lead wait not
// counted in the grace. The poll loop drives the same rules against real servers (the Redlock
// suites); here the clock is the test's.
#include <chrono>
#include <cstddef>
#include <vector>

#include <hiredis/hiredis.h>
#include <catch2/catch.hpp>

#include "io/fan_out.hpp"

using namespace std::chrono_literals;
using redlock::detail::Cut;
using redlock::detail::EarlyFinish;
using redlock::detail::FanCut;
using redlock::detail::FanNode;
using redlock::detail::FanOut;
using redlock::detail::PerNode;
using Clock = std::chrono::steady_clock;

namespace {

const Clock::time_point t0 = Clock::now();
constexpr auto kNever = Clock::time_point::max();

redisReply integer(long long value) {
  redisReply r{};
  r.type = REDIS_REPLY_INTEGER;
  r.integer = value;
  return r;
}
const redisReply yes = integer(1);
const redisReply no = integer(0);

FanNode waiting(Clock::time_point deadline) {
  FanNode n;
  n.deadline = deadline;
  return n;
}
FanNode answered(const redisReply& reply) {
  FanNode n;
  n.state = FanNode::State::answered;
  n.answer = &reply;
  return n;
}

// The cuts of one tick, as "node:cut" pairs.
struct Tick {
  Clock::time_point next;
  std::vector<std::pair<std::size_t, Cut>> cuts;
};
Tick tick(FanOut& fan, Clock::time_point now, const std::vector<FanNode>& nodes) {
  PerNode<FanCut> cuts;
  Tick t{fan.tick(now, nodes.data(), cuts), {}};
  for (const FanCut& c : cuts) t.cuts.emplace_back(c.node, c.cut);
  return t;
}
using Cuts = std::vector<std::pair<std::size_t, Cut>>;

// A majority of 3 that succeeds on an integer reply of 1.
struct Majority {
  Majority() { early.succeed_when(test); }
  bool (*test)(std::size_t, const redisReply*) = [](std::size_t, const redisReply* r) {
    return r->integer == 1;
  };
  EarlyFinish early{2};
};

}  // namespace

TEST_CASE("FanOut: without an early finish every node runs to its own deadline",
          "[unit][fan_out]") {
  FanOut fan(3, t0, nullptr);
  std::vector<FanNode> nodes{waiting(t0 + 100ms), answered(yes), waiting(t0 + 50ms)};
  Tick t = tick(fan, t0 + 10ms, nodes);
  CHECK(t.cuts.empty());
  CHECK(t.next == t0 + 50ms);  // the earliest deadline among the nodes waited for
  t = tick(fan, t0 + 50ms, nodes);
  CHECK(t.cuts == Cuts{{2, Cut::own_deadline}});
  CHECK(t.next == t0 + 100ms);  // node 2 is cut: only node 0 is waited for
  nodes[2].state = FanNode::State::ended;
  nodes[0].state = FanNode::State::ended;
  t = tick(fan, t0 + 60ms, nodes);
  CHECK(t.cuts.empty());
  CHECK(t.next == kNever);  // the round is over
  CHECK(fan.grace() == kNever);
}

TEST_CASE("FanOut: a quorum that answered starts a grace of 3x the time so far, at least 5 ms",
          "[unit][fan_out]") {
  Majority m;
  FanOut fan(3, t0, &m.early);
  std::vector<FanNode> nodes{answered(yes), waiting(t0 + 1s), waiting(t0 + 1s)};
  Tick t = tick(fan, t0 + 10ms, nodes);  // one "yes" of the 2 needed: no grace
  CHECK(t.cuts.empty());
  CHECK(t.next == t0 + 1s);
  nodes[1] = answered(yes);
  t = tick(fan, t0 + 20ms, nodes);  // certain at 20 ms: grace until 20 + 60 ms
  CHECK(fan.grace() == t0 + 80ms);
  CHECK(t.next == t0 + 80ms);
  CHECK(tick(fan, t0 + 79ms, nodes).cuts.empty());
  t = tick(fan, t0 + 80ms, nodes);
  CHECK(t.cuts == Cuts{{2, Cut::grace}});
  CHECK(t.next == kNever);

  FanOut quick(3, t0, &m.early);  // certain at 1 ms: the grace is the floor, 5 ms
  nodes = {answered(yes), answered(yes), waiting(t0 + 1s)};
  tick(quick, t0 + 1ms, nodes);
  CHECK(quick.grace() == t0 + 6ms);
}

TEST_CASE("FanOut: only refusals make a quorum impossible, not nodes that failed",
          "[unit][fan_out]") {
  Majority m;
  FanOut fan(3, t0, &m.early);
  // Two nodes failed: they say nothing of the third, which is awaited to its own deadline.
  std::vector<FanNode> nodes{waiting(t0 + 1s), waiting(t0 + 1s), waiting(t0 + 1s)};
  nodes[0].state = FanNode::State::ended;
  nodes[1].state = FanNode::State::ended;
  Tick t = tick(fan, t0 + 10ms, nodes);
  CHECK(fan.grace() == kNever);
  CHECK(t.next == t0 + 1s);
  // One refusal and one failure: 2 of 3 are impossible, so the grace starts.
  nodes[1] = answered(no);
  tick(fan, t0 + 10ms, nodes);
  CHECK(fan.grace() == t0 + 40ms);
  // A handshake the node refused (no answer to judge) counts as a refusal.
  FanOut refused(3, t0, &m.early);
  nodes = {answered(no), answered(yes), waiting(t0 + 1s)};
  nodes[1].answer = nullptr;
  tick(refused, t0 + 10ms, nodes);
  CHECK(refused.grace() == t0 + 40ms);
}

TEST_CASE("FanOut: no grace while the required node is awaited", "[unit][fan_out]") {
  Majority m;
  m.early.required = 2;  // a fair Redlock's orderer: its refusal vetoes
  FanOut fan(3, t0, &m.early);
  std::vector<FanNode> nodes{answered(yes), answered(yes), waiting(t0 + 1s)};
  Tick t = tick(fan, t0 + 10ms, nodes);
  CHECK(fan.grace() == kNever);
  CHECK(t.next == t0 + 1s);
  nodes[2] = answered(yes);
  tick(fan, t0 + 20ms, nodes);
  CHECK(fan.grace() == t0 + 80ms);
}

TEST_CASE("FanOut: a TLS handshake is cut by its deadline, not by the grace", "[unit][fan_out]") {
  Majority m;
  FanOut fan(3, t0, &m.early);
  std::vector<FanNode> nodes{answered(yes), answered(yes), waiting(t0 + 200ms)};
  nodes[2].securing = true;
  tick(fan, t0 + 10ms, nodes);
  Tick t = tick(fan, t0 + 100ms, nodes);  // past the grace (40 ms)
  CHECK(t.cuts.empty());
  CHECK(t.next == t0 + 200ms);  // its deadline: a grace already past is no reason to wake
  t = tick(fan, t0 + 200ms, nodes);
  CHECK(t.cuts == Cuts{{2, Cut::own_deadline}});
}

TEST_CASE("FanOut: a trailing node is cut once the others are done, not before",
          "[unit][fan_out]") {
  FanOut fan(3, t0, nullptr);
  std::vector<FanNode> nodes{waiting(t0 + 1s), waiting(t0 + 1s), waiting(t0 + 1s)};
  nodes[1].trailing = true;  // in back-off
  CHECK(tick(fan, t0 + 10ms, nodes).cuts.empty());
  nodes[0] = answered(yes);
  CHECK(tick(fan, t0 + 20ms, nodes).cuts.empty());  // node 2 is still awaited
  nodes[2].state = FanNode::State::ended;
  Tick t = tick(fan, t0 + 30ms, nodes);
  CHECK(t.cuts == Cuts{{1, Cut::not_awaited}});
  CHECK(t.next == kNever);
}

TEST_CASE("FanOut: a lead wait that gave up is not counted in the grace", "[unit][fan_out]") {
  Majority m;
  FanOut fan(3, t0, &m.early);
  fan.not_counted(30ms);  // the replies may have been there for the last 30 ms
  std::vector<FanNode> nodes{answered(yes), answered(yes), waiting(t0 + 1s)};
  tick(fan, t0 + 40ms, nodes);
  CHECK(fan.grace() == t0 + 10ms + 30ms);  // from 10 ms: 3 x 10 ms
}
