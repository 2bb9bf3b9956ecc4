// src/io/poll_loop.cpp: the executor's poll loop: connects, writes and reads of every node of a
// batch at once, each node bounded by its own deadline, early finish and grace.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "io/fan_out.hpp"
#include "io/finisher.hpp"
#include "io/pending.hpp"
#include "io/pool.hpp"

namespace redlock {
namespace detail {

void fail(Pending& p, std::exception_ptr error) {
  p.batch->error = std::move(error);
  p.connection.reset();  // a connection that reported an error is never reused
  p.done = true;
}

bool complete(const Pending& p) noexcept {
  return p.stage == Stage::reading && p.replies.size() >= p.expected;
}

namespace {

const std::string& address(const Pending& p) { return p.batch->node->address(); }
std::chrono::milliseconds command_timeout(const Pending& p) {
  return p.batch->node->endpoint().command_timeout;
}

// Queues the batch's on_timeout commands behind its request and hands the connection to the
// finisher (which writes everything and reads every reply, then closes it). Without on_timeout
// commands, each script command is sent again as EVAL: the server may answer the EVALSHA with
// NOSCRIPT (a fresh server) to a connection nobody reads any more, and the scripts this is used
// for (release, extend) are harmless to run twice.
void send_on_timeout(Pending& p) noexcept {
  if (!p.connection) return;
  // The replies still owed: the request's (a partly decoded one included), then one for each
  // command queued below.
  std::size_t owed = p.expected - std::min(p.expected, p.replies.size());
  try {
    if (p.batch->on_timeout.empty()) {
      for (const auto& command : p.batch->commands) {
        if (command.script != nullptr && command.resend == Resend::allowed) {
          append(*p.connection, command, Dialect::as_eval);
          ++owed;
        }
      }
    }
    for (const auto& command : p.batch->on_timeout) {
      append(*p.connection, command, Dialect::as_given);
      ++owed;
    }
  } catch (...) {  // bad_alloc while encoding: what was queued so far still goes out
  }
  finish_in_background(std::move(p.connection), owed);
}

// Writes what it can. A write that fails may have sent part of the request, even whole commands
// of it; a timeout while writing is handled like a request that timed out (see expire).
void write_step(Pending& p) {
  const IoResult result = write_some(*p.connection);
  if (result.error == IoError::none) {
    p.stage = Stage::reading;
  } else if (result.error != IoError::again) {
    fail(p, transport_error(result, address(p), "send to", command_timeout(p)));
  }
}

// Takes every complete reply the decoder has.
void drain(Pending& p) {
  while (p.replies.size() < p.expected) {
    ReplyPtr reply;
    const Decoded decoded = p.connection->in.next(reply);
    if (decoded == Decoded::need_more) return;
    if (decoded == Decoded::malformed) {
      fail(p, protocol_error(*p.connection, address(p)));
      return;
    }
    p.replies.push_back(std::move(reply));
  }
}

// Reads what node p's server sent. False if nothing had arrived (nor did within the waiting
// read's bound, with ReadMode::waiting).
bool read_step(Pending& p, ReadMode mode = ReadMode::now) {
  const IoResult result = read_some(*p.connection, mode);
  if (result.error == IoError::again) return false;
  if (result.error != IoError::none) {
    fail(p, transport_error(result, address(p), "read from", command_timeout(p)));
    return true;
  }
  drain(p);
  return true;
}

// One step of the transport's handshake (TLS); then the request goes out.
void secure_step(Pending& p) {
  const Handshake step = p.connection->transport.handshake();
  if (step == Handshake::ready) {
    send(p);
  } else if (step == Handshake::failed) {
    fail(p, handshake_error(address(p), p.connection->transport.failure()));
  }
}

// Finishes a connect that poll() reported ready, and sends the batch on it.
void connected(Pending& p) {
  try {
    p.connection = p.batch->node->adopt(p.dial);
    p.connection->pool_slot = std::move(p.slot);
  } catch (...) {
    fail(p, std::current_exception());
    return;
  }
  p.stage = Stage::securing;
  secure_step(p);
}

// Moves node p on after poll() reported its socket ready.
void step(Pending& p) {
  switch (p.stage) {
    case Stage::dialing:
      return connected(p);
    case Stage::securing:
      return secure_step(p);
    case Stage::writing:
      return write_step(p);
    case Stage::reading:
      read_step(p);
      return;
  }
}

// What the poll loop waits for on node p.
pollfd watch(const Pending& p) {
  if (p.stage == Stage::dialing) return pollfd{p.dial.fd(), POLLOUT, 0};
  const Transport& transport = p.connection->transport;
  const short natural = p.stage == Stage::reading ? POLLIN : POLLOUT;
  return pollfd{transport.fd(), transport.wanted(natural), 0};
}

// Before a node is given up: takes a connect or replies that are ready right now, so nothing
// that has arrived is thrown away as a timeout. Returns true if the node is complete.
bool last_look(Pending& p) {
  pollfd fd = watch(p);
  if (::poll(&fd, 1, 0) != 1) return false;
  const Stage before = p.stage;
  step(p);  // a connect now sends the request; its answer is not awaited any more
  return before == Stage::reading && !p.done && complete(p);
}

// Gives up on a node: its on_timeout commands go behind its request, and it fails with a
// TimeoutError.
void expire(Pending& p, Cut cut) {
  p.cut = cut;
  const auto connect_timeout = p.batch->node->endpoint().connect_timeout;
  if (p.stage == Stage::dialing && cut != Cut::own_deadline && p.slot) {
    // A node whose reconnect is still under way when the others are done: in back-off (not
    // awaited), or cut by the early finish's grace. The request still goes out once the connect
    // completes, with its on_timeout commands behind it: the finisher's first write waits for
    // it. A release then still reaches a node that is slow to accept or has just come back.
    // Only within the node's max_connections (the dial holds a slot): a node that stays down
    // does not pile connects up in the finisher.
    try {
      p.connection = p.batch->node->adopt(p.dial);
      p.connection->pool_slot = std::move(p.slot);
      queue_request(p);
    } catch (...) {
      fail(p, std::current_exception());
      return;
    }
    p.stage = Stage::writing;
  }
  if (p.stage == Stage::dialing) {  // nothing was sent
    fail(p, accept_timeout(address(p), connect_timeout));
    return;
  }
  if (p.stage == Stage::securing && cut == Cut::own_deadline) {  // the connect timeout ran out
    fail(p, handshake_timeout(address(p), connect_timeout,
                              p.connection->transport.heard_from_server()));
    return;
  }
  if (p.stage == Stage::securing) {
    // Cut by the early finish mid-handshake: the request goes out once the handshake is done
    // (the finisher's first write completes it), with its on_timeout commands behind it, just
    // as on a plain socket that connected at once. A release then still reaches a slow node.
    try {
      queue_request(p);
    } catch (...) {
      fail(p, std::current_exception());
      return;
    }
    p.stage = Stage::writing;
  }
  // Connected, and cut short by the early finish rather than its own deadline: reachable.
  p.batch->abandoned = cut != Cut::own_deadline;
  const char* doing = p.stage == Stage::reading ? "read from" : "send to";
  auto error =
      transport_error(IoResult{0, IoError::timeout, EAGAIN}, address(p), doing, command_timeout(p));
  send_on_timeout(p);
  fail(p, std::move(error));
}

// One round's scratch arrays, inline for up to five nodes (no allocation).
struct Scratch {
  PerNode<FanNode> nodes;  // where each node stands, for FanOut::tick
  PerNode<FanCut> cuts;
  PerNode<pollfd> fds;  // the poll set: the nodes still waited for
  PerNode<Pending*> owners;
};

// Where node p stands, for the round's rules (io/fan_out).
FanNode view(const Pending& p) {
  FanNode n;
  n.trailing = p.trailing;
  if (p.done) {
    n.state = FanNode::State::ended;
  } else if (complete(p)) {
    n.state = FanNode::State::answered;
    const auto first = p.replies.begin();
    const bool handshake_ok = std::none_of(first, first + static_cast<std::ptrdiff_t>(p.handshake),
                                           [](const ReplyPtr& r) { return is_error(r.get()); });
    if (handshake_ok && p.replies.size() > p.handshake) n.answer = p.replies[p.handshake].get();
  } else {
    n.securing = p.stage == Stage::securing;
    n.deadline = p.deadline;
  }
  return n;
}

// One pass: the round's rules (FanOut::tick) say which nodes to give up; each gets a last look
// and is cut. Then the poll set: the nodes still waited for. Returns when to look again.
Clock::time_point collect(Pending* pending, std::size_t count, FanOut& fan, Clock::time_point now,
                          Scratch& scratch) {
  scratch.nodes.clear();
  scratch.cuts.clear();
  for (const Pending* p = pending; p != pending + count; ++p) scratch.nodes.push_back(view(*p));
  const auto next = fan.tick(now, scratch.nodes.data(), scratch.cuts);
  for (const FanCut& c : scratch.cuts) {
    Pending& p = pending[c.node];
    if (last_look(p) || p.done) continue;
    expire(p, c.cut);
  }
  scratch.fds.clear();
  scratch.owners.clear();
  for (Pending* p = pending; p != pending + count; ++p) {
    if (p->done || complete(*p)) continue;
    scratch.fds.push_back(watch(*p));
    scratch.owners.push_back(p);
  }
  return next;
}

// Milliseconds to poll for: until the next deadline, re-checked every minute at most, never
// negative; zero when a transport has bytes buffered above its socket (TLS).
int poll_timeout(const PerNode<Pending*>& owners, Clock::time_point next, Clock::time_point now) {
  for (const Pending* p : owners) {
    if (p->stage == Stage::reading && p->connection->transport.buffered()) return 0;
  }
  const auto wait = std::min<std::chrono::milliseconds>(
      std::chrono::ceil<std::chrono::milliseconds>(next - now), std::chrono::milliseconds(60'000));
  return static_cast<int>(std::max<std::int64_t>(wait.count(), 0));
}

enum class Lead : unsigned char {
  none,     // no node to lead with (a connect or a write is in progress): poll every node
  stepped,  // the lead node read (or was interrupted); look again
  gave_up,  // the lead node was late: poll every node for the rest of this batch
};

// One lead wait of a fan-out. Rather than poll every node (three system calls for each wait:
// a read that finds nothing, the poll, the read), it reads one node at a time in the order the
// requests went out (the first node still waited for), with a read that may wait
// (Transport::read_waiting, bounded by kWaitingRead): one system call a node, as a client that
// reads each node in turn. A lead node that sends nothing within that bound ends the lead waits,
// and the poll on every node takes over for the rest of the batch: a paused node costs this
// once per batch at most, and only until a grace first cuts it (a lagging node never leads).
// With less than kWaitingReadBound left before the next deadline (an early finish's grace, a
// command timeout), the lead node is read without waiting, and if nothing had arrived the poll
// takes over (it waits for every node, and cuts each at its own deadline). Plain connections
// only (TLS ones poll every node).
Lead lead_step(const PerNode<Pending*>& owners, Clock::time_point next_deadline,
               Clock::time_point now) {
  Pending* lead = nullptr;
  for (Pending* p : owners) {
    if (p->stage != Stage::reading) return Lead::none;
    if (lead == nullptr && !p->trailing && !p->batch->node->lagging()) lead = p;
  }
  if (lead == nullptr || !lead->connection->transport.waits_briefly()) return Lead::none;
  const ReadMode mode =
      next_deadline - now >= kWaitingReadBound ? ReadMode::waiting : ReadMode::now;
  return read_step(*lead, mode) ? Lead::stepped : Lead::gave_up;
}

// True for a node whose request is written and that has not read anything yet.
bool waits_first_reply(const Pending& p) {
  return p.stage == Stage::reading && !p.waited && p.replies.empty();
}

}  // namespace

void send(Pending& p) {
  queue_request(p);
  start_writing(p);
}

void queue_request(Pending& p) {
  Connection& connection = *p.connection;
  p.handshake = 0;
  if (!connection.authenticated) {
    for (const auto& h : p.batch->node->handshake()) append(connection, h, Dialect::as_given);
    p.handshake = p.batch->node->handshake().size();
  }
  for (const auto& command : p.batch->commands) append(connection, command, Dialect::as_given);
  p.expected = p.handshake + p.batch->commands.size();
  p.replies.reserve(p.expected);
  p.reused = connection.reused;
}

void start_writing(Pending& p) {
  p.deadline = Clock::now() + command_timeout(p);
  p.waited = false;
  p.stage = Stage::writing;
  write_step(p);
}

void run_poll_loop(Pending* pending, std::size_t count, Clock::time_point start,
                   const EarlyFinish* early) {
  Scratch scratch;
  PerNode<pollfd>& fds = scratch.fds;
  const PerNode<Pending*>& owners = scratch.owners;
  FanOut fan(count, start, early);
  bool leading = count > 1;
  for (;;) {
    const auto now = Clock::now();
    const auto next_deadline = collect(pending, count, fan, now, scratch);
    if (fds.empty()) return;
    if (count == 1 && waits_first_reply(*owners[0])) {
      // One node, its request just written: one blocking read (bounded by kWaitingRead, the
      // socket's receive timeout) instead of poll + read. Later reads use the poll.
      owners[0]->waited = true;
      read_step(*owners[0], ReadMode::waiting);
      continue;
    }
    if (leading) {
      const Lead lead = lead_step(owners, next_deadline, now);
      if (lead == Lead::stepped) continue;
      if (lead == Lead::gave_up) {
        // The other nodes' replies may have been there all along, so the grace is reckoned
        // from before this wait (a silent lead node does not stretch the stragglers' grace).
        leading = false;
        fan.not_counted(Clock::now() - now);
        continue;  // collect() again, at the time it is now
      }
    }
    const int rc = ::poll(fds.data(), fds.size(), poll_timeout(owners, next_deadline, now));
    if (rc < 0) {
      if (errno == EINTR) continue;
      for (auto* p : owners) {
        fail(*p, std::make_exception_ptr(ConnectionError(
                     fmt::format("redlock: poll failed: {}", std::strerror(errno)))));
      }
      return;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      const bool buffered =
          owners[i]->stage == Stage::reading && owners[i]->connection->transport.buffered();
      if (fds[i].revents != 0 || buffered) step(*owners[i]);
    }
  }
}

}  // namespace detail
}  // namespace redlock
