// src/io/executor.hpp: the fan-out executor: several commands on each of several nodes, one round
// trip per node, all nodes at once in one poll loop, each bounded by its own deadline, with an
// early finish once the outcome is certain.
#ifndef REDLOCK_SRC_IO_EXECUTOR_HPP
#define REDLOCK_SRC_IO_EXECUTOR_HPP

#include <cstddef>
#include <exception>

#include "io/codec.hpp"
#include "io/command.hpp"
#include "util/small_vector.hpp"

namespace redlock {
namespace detail {

class ClientImpl;

// Scratch arrays with one slot per node: inline for up to five nodes (a typical Redlock), so an
// operation on them costs no allocation.
constexpr std::size_t kInlineNodes = 5;
template <class T>
using PerNode = SmallVector<T, kInlineNodes>;

// Commands for one node, and what came back.
struct NodeBatch {
  ClientImpl* node{nullptr};
  SmallVector<CommandView, 2> commands;
  // Sent on the same connection, behind `commands`, if this node times out; then the connection
  // is closed once the server has answered them all (io/finisher.hpp). Redis runs one
  // connection's commands in order, so a rollback sent this way cannot overtake the request it
  // undoes (a paused node that resumes runs SET, then the release). When empty, script commands
  // with Resend::allowed are re-sent as EVAL instead (in case the server answers the EVALSHA with
  // NOSCRIPT that nobody will read); a user's command is never sent twice.
  SmallVector<CommandView, 1> on_timeout;
  // Out: one reply per command (all present when `error` is null). Error replies are replies.
  SmallVector<ReplyPtr, 2> replies;
  // Out: why this node could not answer (ConnectionError, TimeoutError, ProtocolError, or a
  // ServerError from the AUTH/SELECT handshake). Null on success.
  std::exception_ptr error;
  // Out: the commands were sent twice (a pooled connection died before any reply, and they were
  // retried on a fresh one, which only commands with Resend::allowed are); the server may have
  // run the first send too.
  bool retried{false};
  // Out: cut short by an early finish (its error is a TimeoutError), not by its own deadline.
  bool abandoned{false};
  // Out: not sent at all: the node is in back-off and the policy skips it (SkipPolicy).
  bool skipped{false};
};

// Lets a multi-node batch finish before its slowest node once the outcome is certain: when
// `needed` nodes succeeded (by `success`, given the node's index and its first command's reply),
// or so many failed that `needed` successes are impossible. The remaining nodes then get a
// grace period of three times the time taken so far (at least 5 ms), so healthy stragglers on a
// busy machine still answer; nodes still silent after it are abandoned like a timeout
// (on_timeout is sent behind their request, the connection closed, error = TimeoutError).
struct EarlyFinish {
  std::size_t needed{0};
  // A node whose answer the outcome needs whatever the others say (a fair Redlock's orderer:
  // its refusal vetoes): no grace starts while it is still awaited. SIZE_MAX: none.
  std::size_t required{static_cast<std::size_t>(-1)};
  // The test, as a function pointer and its context (no allocation); set with succeed_when().
  bool (*success)(const void* context, std::size_t node, const redisReply* reply){nullptr};
  const void* context{nullptr};

  // Uses `test(node, reply)`, which the caller keeps alive until execute() returns.
  template <class Test>
  void succeed_when(const Test& test) noexcept {
    context = &test;
    success = [](const void* c, std::size_t node, const redisReply* reply) {
      return (*static_cast<const Test*>(c))(node, reply);
    };
  }
  template <class Test>
  void succeed_when(const Test&& test) = delete;  // a temporary would be gone by then

  bool succeeded(std::size_t node, const redisReply* reply) const {
    return success(context, node, reply);
  }
};

// Which nodes a multi-node batch with an EarlyFinish may leave out. An acquire may skip a node in
// back-off (it then does not grant; NodeBatch::skipped). Anything that may find our key on a node
// (release, extend, the rollback of a partial grant, raising a fence) goes to every node the
// caller names (a release leaves out the nodes its grant skipped: the token never reached them);
// a node in back-off then gets the request but is not waited for once the other nodes are done.
enum class SkipPolicy : unsigned char { every_node, skip_backed_off };

// Runs every batch: connects where no pooled connection is idle and sends each node's commands
// in one write, then reads all replies; connects, writes and reads of all nodes share one poll
// loop, so a node slow to accept or to answer costs the others nothing. A node that does not
// answer within its command_timeout (or accept within connect_timeout) gets a TimeoutError; a
// reply that has arrived by then is always taken. NOSCRIPT replies are retried with EVAL on the
// same connection. Never throws for per-node failures (they land in NodeBatch::error); throws
// std::bad_alloc only. Thread-safe (batches are the caller's).
void execute(NodeBatch* batches, std::size_t count, const EarlyFinish* early = nullptr,
             SkipPolicy policy = SkipPolicy::every_node);
// execute() without the routing of cluster batches (io/cluster_route.cpp): every batch's node is
// the server it talks to.
void execute_direct(NodeBatch* batches, std::size_t count, const EarlyFinish* early,
                    SkipPolicy policy);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_EXECUTOR_HPP
