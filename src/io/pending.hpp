// src/io/pending.hpp: the executor's per-node progress (Pending) and the poll loop that drives
// every node of a batch at once; internal to io/ (executor.cpp and poll_loop.cpp).
#ifndef REDLOCK_SRC_IO_PENDING_HPP
#define REDLOCK_SRC_IO_PENDING_HPP

#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>

#include "io/dial.hpp"
#include "io/executor.hpp"
#include "io/fan_out.hpp"
#include "io/wire.hpp"

namespace redlock {
namespace detail {

using Clock = std::chrono::steady_clock;

// Where a node that is not done stands.
enum class Stage : unsigned char {
  dialing,   // connect in progress (`dial`)
  securing,  // transport handshake (TLS) in progress; plain sockets skip it
  writing,   // request partly written
  reading,   // request written, replies awaited
};

// Per-node progress while a batch runs.
struct Pending {
  NodeBatch* batch{nullptr};
  Dial dial;  // connect in progress (the poll loop finishes it), else empty
  std::unique_ptr<Connection> connection;
  std::shared_ptr<void> slot;  // the pool's slot for the connection being dialed, if counted
  std::size_t handshake{0};    // leading replies that belong to the handshake
  std::size_t expected{0};
  SmallVector<ReplyPtr, 4> replies;  // handshake (AUTH, SELECT) and the batch's commands
  Clock::time_point deadline{};      // of the connect while dialing, then of the replies
  Stage stage{Stage::dialing};
  bool done{false};
  bool connection_attempted{false};  // false when skipped by the circuit breaker
  bool reused{false};                // the request went out on a pooled connection
  bool trailing{false};              // in back-off: not waited for once the others are done
  bool waited{false};                // the one blocking read for the first reply was made
  Cut cut{Cut::none};
};

// Ends node p with `error`; its connection is closed (never reused after an error).
void fail(Pending& p, std::exception_ptr error);
// Queues the batch (behind the AUTH/SELECT handshake on a new connection) and starts writing it;
// the replies are due within command_timeout from now.
void send(Pending& p);
// Queues the batch (as send() does) without writing anything yet.
void queue_request(Pending& p);
// Starts writing what p's connection has buffered, replies due within command_timeout.
void start_writing(Pending& p);
// True when every reply p waits for has arrived.
bool complete(const Pending& p) noexcept;
// Drives `count` nodes until each is complete, failed or cut (see execute()).
void run_poll_loop(Pending* pending, std::size_t count, Clock::time_point start,
                   const EarlyFinish* early);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_PENDING_HPP
