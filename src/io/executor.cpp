// src/io/executor.cpp: execute(): which nodes to ask, opening their connections, what each
// outcome says about the node's health, the retry of stale pooled connections, and the EVAL
// fallback for NOSCRIPT. The poll loop itself is in poll_loop.cpp.
#include "io/executor.hpp"

#include <algorithm>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "io/cluster.hpp"
#include "io/pending.hpp"
#include "io/pool.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {
namespace {

bool is_noscript(const redisReply* reply) {
  return is_error(reply) && text(reply).rfind("NOSCRIPT", 0) == 0;
}

// Sends node p's request on the connection reserve() gave it, or leaves it dialing for the poll
// loop (with reserve()'s slot, or none: the subscriber's private connection is not counted).
void open_node(Pending& p) {
  p.connection_attempted = true;
  ClientImpl& node = *p.batch->node;
  try {
    if (!p.connection) {
      p.dial = node.dial();
      p.stage = Stage::dialing;
      p.deadline = Clock::now() + node.endpoint().connect_timeout;
      return;
    }
  } catch (...) {
    p.batch->error = std::current_exception();
    p.done = true;
    return;
  }
  send(p);
}

// What a node's outcome says about its health, for the log and the circuit breaker.
void note_outcome(Pending& p) {
  ClientImpl& node = *p.batch->node;
  if (!p.done) {
    node.note_health(true);
    node.note_answer();
    return;
  }
  if (!p.batch->error) return;
  try {
    std::rethrow_exception(p.batch->error);
  } catch (const ServerError&) {
    node.note_health(true);  // it answered, with an error
    node.note_answer();
  } catch (const TimeoutError& e) {
    if (p.cut == Cut::grace) {
      node.note_abandoned();  // slower than the others: not yet evidence that it is down
    } else if (p.cut != Cut::not_awaited) {
      node.note_health(false, e.what());
      node.note_timeout();
    }
  } catch (const std::exception& e) {
    node.note_health(false, e.what());
  }
}

// A pooled connection the server had already closed (restart, CLIENT KILL, idle timeout) fails
// before any reply. The request is sent again on a fresh connection only if every command may
// be (Resend::allowed); a slow server is not a stale connection.
bool worth_retry(const Pending& p) {
  if (!p.reused || !p.done || !p.replies.empty() || p.batch->error == nullptr) return false;
  if (p.connection != nullptr || p.cut != Cut::none) return false;
  const auto& commands = p.batch->commands;
  if (std::any_of(commands.begin(), commands.end(),
                  [](const CommandView& c) { return c.resend == Resend::never; })) {
    return false;
  }
  try {
    std::rethrow_exception(p.batch->error);
  } catch (const TimeoutError&) {
    return false;
  } catch (...) {
    return true;
  }
}

// Checks the handshake replies and moves the command replies into the batch.
void finish(Pending& p) {
  if (p.done) return;
  for (std::size_t i = 0; i < p.handshake; ++i) {
    const redisReply* reply = p.replies[i].get();
    if (is_error(reply)) {
      const Endpoint& ep = p.batch->node->endpoint();
      const bool auth = i == 0 && (!ep.password.empty() || !ep.username.empty());
      fail(p, server_error(p.batch->node->address(), auth ? "AUTH" : "SELECT", text(reply)));
      return;
    }
  }
  p.connection->authenticated = true;
  p.batch->replies.clear();
  p.batch->replies.reserve(p.replies.size() - p.handshake);
  for (std::size_t i = p.handshake; i < p.replies.size(); ++i) {
    p.batch->replies.push_back(std::move(p.replies[i]));
  }
  p.handshake = 0;
}

// Through Sentinel, a reply that says the server is not a master now (READONLY, LOADING,
// MASTERDOWN: a failover happened or is under way) fails the node like a lost connection: the
// command did not run there, and the next request goes to the master the sentinels name then.
void check_master(Pending& p) {
  if (p.done) return;
  for (const ReplyPtr& reply : p.batch->replies) {
    if (!is_error(reply.get()) || !p.batch->node->master_moved(text(reply.get()))) continue;
    fail(p, std::make_exception_ptr(ConnectionError(
                fmt::format("redlock: {} is not the master now ({}); asking the sentinels again",
                            p.batch->node->address(), text(reply.get())))));
    return;
  }
}

bool named(const CommandView& c, std::string_view name) {
  return c.script == nullptr && c.argc > 0 && std::string_view(c.argv[0], c.lens[0]) == name;
}

// What a NOSCRIPT fallback sends again: the scripts that got NOSCRIPT; the ASKING in front of
// one (it applies to the next command only: the EVAL would get MOVED without it); and a WAIT
// behind them (it counted the replicas before the write).
std::vector<std::size_t> noscript_redo(const NodeBatch& b) {
  std::vector<std::size_t> redo;
  for (std::size_t i = 0; i < b.commands.size(); ++i) {
    if (b.commands[i].script == nullptr || !is_noscript(b.replies[i].get())) continue;
    if (i > 0 && named(b.commands[i - 1], "ASKING")) redo.push_back(i - 1);
    redo.push_back(i);
  }
  if (redo.empty()) return redo;
  for (std::size_t i = redo.front() + 1; i < b.commands.size(); ++i) {
    if (named(b.commands[i], "WAIT")) redo.push_back(i);
  }
  std::sort(redo.begin(), redo.end());
  redo.erase(std::unique(redo.begin(), redo.end()), redo.end());
  return redo;
}

// EVAL fallback for NOSCRIPT replies, one node at a time (rare: after SCRIPT FLUSH or restart).
void retry_noscript(Pending& p) {
  if (p.done) return;
  const std::vector<std::size_t> redo = noscript_redo(*p.batch);
  if (redo.empty()) return;
  log_message(LogLevel::debug, "redlock: NOSCRIPT, re-sending with EVAL");
  for (std::size_t i : redo) {
    const CommandView& c = p.batch->commands[i];
    append(*p.connection, c, c.script != nullptr ? Dialect::as_eval : Dialect::as_given);
  }
  p.replies.clear();
  p.expected = redo.size();
  p.trailing = false;  // alone in this loop: awaited until its own deadline
  start_writing(p);
  run_poll_loop(&p, 1, Clock::now(), nullptr);
  if (p.done) return;
  for (std::size_t k = 0; k < redo.size(); ++k) p.batch->replies[redo[k]] = std::move(p.replies[k]);
}

// Prepares every node's progress; a node in back-off is skipped (acquires) or marked trailing.
// Returns how many nodes are waited for.
std::size_t prepare(PerNode<Pending>& pending, NodeBatch* batches, Clock::time_point start,
                    const EarlyFinish* early, SkipPolicy policy) {
  const bool redlock = pending.size() > 1 && early != nullptr;
  std::size_t awaited = 0;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    Pending& p = pending[i];
    p.batch = &batches[i];
    p.batch->error = nullptr;
    p.batch->replies.clear();
    p.batch->skipped = false;
    if (redlock && policy == SkipPolicy::skip_backed_off && p.batch->node->skip(start)) {
      p.batch->skipped = true;
      p.batch->error = std::make_exception_ptr(TimeoutError(
          fmt::format("redlock: {} timed out recently; skipped until its back-off ends",
                      p.batch->node->address())));
      p.done = true;
      continue;
    }
    p.trailing = redlock && policy == SkipPolicy::every_node && p.batch->node->suspect();
    awaited += p.trailing ? 0 : 1;
  }
  return awaited;
}

// Gives every node still to be asked an idle connection or a slot to dial one. A single node's
// request waits (its callers in arrival order) while the node's max_connections are busy, and
// fails with TimeoutError if none comes back for connect + command timeout. A fan-out never
// waits: a node whose connections are all busy gets one more for this attempt, closed when it
// is done (not pooled). Waiting would stall the other nodes behind a paused server (it keeps
// its connections), and a fan-out holding some nodes' connections while it waits for another's
// could deadlock with one doing the opposite.
void reserve(PerNode<Pending>& pending) {
  PerNode<Pending*> order;
  for (auto& p : pending) {
    if (!p.done) order.push_back(&p);
  }
  std::sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) {
    return std::less<const ClientImpl*>()(a->batch->node, b->batch->node);
  });
  const bool fan_out = pending.size() > 1;
  for (Pending* p : order) {
    ClientImpl& node = *p->batch->node;
    const Endpoint& ep = node.endpoint();
    const auto& commands = p->batch->commands;
    const Probe probe =
        std::all_of(commands.begin(), commands.end(),
                    [](const CommandView& c) { return c.resend == Resend::allowed; })
            ? Probe::skip
            : Probe::first;
    try {
      if (!fan_out) {
        p->connection = node.obtain(ep.connect_timeout + ep.command_timeout, p->slot, probe);
      } else {
        node.try_obtain(p->connection, p->slot, probe);  // false: dials one beyond the bound
      }
    } catch (...) {
      p->batch->error = std::current_exception();
      p->done = true;
    }
  }
}

// stale[i] (in: false) is set when node i failed on a pooled connection that turned out closed.
void execute_once(NodeBatch* batches, std::size_t count, bool* stale, const EarlyFinish* early,
                  SkipPolicy policy) {
  PerNode<Pending> pending(count);
  const auto start = Clock::now();
  const std::size_t awaited = prepare(pending, batches, start, early, policy);
  reserve(pending);
  for (auto& p : pending) {
    if (p.done) continue;
    if (awaited == 0) p.trailing = false;  // nobody else to wait for: wait for these
    open_node(p);
  }
  run_poll_loop(pending.data(), count, start, early);
  for (std::size_t i = 0; i < count; ++i) {
    Pending& p = pending[i];
    stale[i] = worth_retry(p);
    finish(p);
    retry_noscript(p);
    check_master(p);
    if (p.connection_attempted && !stale[i]) note_outcome(p);
    if (!p.done) p.batch->node->checkin(std::move(p.connection));
  }
}

}  // namespace

void execute(NodeBatch* batches, std::size_t count, const EarlyFinish* early, SkipPolicy policy) {
  for (std::size_t i = 0; i < count; ++i) {
    if (batches[i].node->router() != nullptr) {
      execute_routed(batches, count, early, policy);
      return;
    }
  }
  execute_direct(batches, count, early, policy);
}

void execute_direct(NodeBatch* batches, std::size_t count, const EarlyFinish* early,
                    SkipPolicy policy) {
  PerNode<bool> stale(count, false);
  execute_once(batches, count, stale.data(), early, policy);
  if (std::find(stale.begin(), stale.end(), true) == stale.end()) return;
  PerNode<NodeBatch> again;
  PerNode<std::size_t> index;
  for (std::size_t i = 0; i < count; ++i) {
    if (!stale[i]) continue;
    batches[i].node->clear_idle();
    logf(LogLevel::info, "redlock: connection to {} was closed by the server; reconnecting",
         batches[i].node->address());
    again.push_back(std::move(batches[i]));
    index.push_back(i);
  }
  PerNode<bool> unused(again.size(), false);
  execute_once(again.data(), again.size(), unused.data(), nullptr, SkipPolicy::every_node);
  for (std::size_t k = 0; k < again.size(); ++k) {
    batches[index[k]] = std::move(again[k]);
    batches[index[k]].retried = true;
  }
}

std::unique_ptr<Connection> ClientImpl::connect_ready() {
  NodeBatch batch;
  batch.node = this;
  static const char* const kPing[] = {"PING"};
  static const std::size_t kPingLen[] = {4};
  batch.commands.push_back(CommandView{1, kPing, kPingLen, nullptr});
  // Run the handshake on a private connection that is handed out instead of pooled.
  Pending p;
  p.batch = &batch;
  open_node(p);
  run_poll_loop(&p, 1, Clock::now(), nullptr);
  finish(p);
  if (batch.error) std::rethrow_exception(batch.error);
  if (is_error(batch.replies[0].get())) {
    std::rethrow_exception(server_error(address(), "PING", text(batch.replies[0].get())));
  }
  return std::move(p.connection);
}

}  // namespace detail
}  // namespace redlock
