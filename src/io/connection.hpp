// src/io/connection.hpp: the I/O half of redlock. Owns hiredis contexts and replies, maps hiredis
// failures to redlock exceptions, and runs batches: several commands on each of several nodes,
// one round trip per node, all nodes at once, each bounded by its own command timeout. A request
// given up on (timed out, or cut after an early finish) is finished in the background with its
// rollback behind it, by one "finisher" thread per process (see connection.cpp).
//
// The algorithm half (quorum, validity, tokens) is in engine.hpp and never touches hiredis.
#ifndef REDLOCK_SRC_CONNECTION_HPP
#define REDLOCK_SRC_CONNECTION_HPP

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <redlock/client.hpp>
#include <redlock/endpoint.hpp>
#include <redlock/reply.hpp>

#include "io/dial.hpp"
#include "util/small_vector.hpp"

namespace redlock {
namespace detail {

struct ContextDeleter {
  void operator()(redisContext* context) const noexcept {
    if (context != nullptr) redisFree(context);
  }
};
struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept {
    if (reply != nullptr) freeReplyObject(reply);
  }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// Whether the executor may send a command a second time after the first send may have run: to
// retry it on a fresh connection when a pooled one turns out dead, or (scripts) to re-send it as
// EVAL behind a timed-out EVALSHA. Only for commands whose caller copes with a second run (the
// library's own idempotent scripts, SET NX with `NodeBatch::retried`); never for a user's.
enum class Resend : unsigned char { never, allowed };

// One command, as argv views the caller keeps alive until the batch returns. When `script` is set,
// argv[0] must be "EVALSHA" and argv[1] the script's SHA1; on NOSCRIPT the same command is re-sent
// as EVAL with the body (NOSCRIPT means it did not run).
struct CommandView {
  int argc{0};
  const char* const* argv{nullptr};
  const std::size_t* lens{nullptr};
  const Script* script{nullptr};
  Resend resend{Resend::never};
};

// A small owning command builder for fixed-size commands on the hot path (no allocation).
template <int N>
struct FixedCommand {
  const char* argv[N]{};
  std::size_t lens[N]{};
  int argc{0};
  const Script* script{nullptr};

  FixedCommand& arg(std::string_view value) noexcept {
    argv[argc] = value.data();
    lens[argc] = value.size();
    ++argc;
    return *this;
  }
  // The library's own commands: safe to send again (see Resend).
  CommandView view() const noexcept {
    return CommandView{argc, argv, lens, script, Resend::allowed};
  }
};

// A live hiredis connection. Any transport error retires it (a context that reported an error is
// never reused).
struct Connection {
  ContextPtr context;
  bool authenticated{false};  // AUTH/SELECT handshake done
  bool reused{false};         // came out of the idle pool (may be stale after a restart)
};

class Subscriber;

// What a Client shares among its copies: the endpoint, a pool of idle connections, the
// subscriber connection for wake-on-release (created on first use).
class ClientImpl {
 public:
  explicit ClientImpl(Endpoint endpoint);
  ~ClientImpl();
  ClientImpl(const ClientImpl&) = delete;
  ClientImpl& operator=(const ClientImpl&) = delete;

  const Endpoint& endpoint() const noexcept { return endpoint_; }
  // "host:port" or "unix:/path": what every message names.
  const std::string& address() const noexcept { return address_; }
  // Identity of the server for duplicate detection (never the database): "run_id:<id>" from
  // INFO server when the server answers (learned once per ClientImpl), else the resolved
  // numeric address, so that 127.1, LOCALHOST and 127.0.0.1 compare equal. May do one round
  // trip (bounded by the endpoint's timeouts); never throws a transport error. Defined in
  // client.cpp.
  std::string identity();
  // 16 random hex characters naming this Client's waiters to the server: fair mode's hand-overs
  // to them are published on "<key>:released:<waiter_id>", so other processes are not woken.
  const std::string& waiter_id() const noexcept { return waiter_id_; }

  // An idle connection, or a new one (connect only; the handshake rides on the first batch).
  // Blocks for at most connect_timeout. Throws ConnectionError or TimeoutError.
  std::unique_ptr<Connection> checkout();
  // An idle connection that the server has not closed meanwhile (checked without blocking; a
  // closed one is dropped, so nothing is sent on it), or null if none is left.
  std::unique_ptr<Connection> take_idle() noexcept;
  // Starts a non-blocking connect (see io/dial.hpp). Throws ConnectionError.
  Dial dial() const;
  // Completes a connect that poll() reported writable. Throws ConnectionError.
  std::unique_ptr<Connection> adopt(Dial& dial) const;
  // Returns a healthy connection to the pool (closes it if the pool is full).
  void checkin(std::unique_ptr<Connection> connection) noexcept;
  std::size_t idle() const;
  // Closes every idle connection (after one turned out stale: the others likely are too).
  void clear_idle() noexcept;

  // Opens a connection and completes the handshake synchronously (for the subscriber).
  std::unique_ptr<Connection> connect_ready();

  // The handshake commands (AUTH, SELECT) for a new connection; empty if none needed.
  const std::vector<CommandView>& handshake() const noexcept { return handshake_; }

  // The subscriber for wake-on-release, created on first call. Thread-safe.
  Subscriber& subscriber();
  // The subscriber if it was created already, else null. Thread-safe, never creates one.
  Subscriber* started_subscriber() const noexcept {
    return started_subscriber_.load(std::memory_order_acquire);
  }

  // The server's run_id once identity() has learned it (empty before). Guarded by run_id_mutex.
  std::mutex run_id_mutex;
  std::string run_id;

  // Whether SET ... NX ... GET works on this server (Redis >= 7.0); learned on first use.
  std::atomic<bool> set_nx_get{true};

  // Records whether the node just answered; logs only transitions (down: warn, back: info), so
  // a dead node costs one log line, not one per operation. Never throws.
  void note_health(bool reachable, std::string_view why = {}) noexcept;

  // Circuit breaker for multi-node batches. After a timeout, or after being abandoned (cut after
  // an early finish's grace) three times in a row, the node is skipped by Redlock acquires (it
  // simply does not grant) for a back-off that starts at 250 ms and doubles up to 5 s; then one
  // acquire probes it (the others keep skipping until that probe is done). A paused server would
  // otherwise cost every acquire a wait and a new connection. Releases, extends and rollbacks
  // never skip (see SkipPolicy); single-node operations and the watchdog never skip.
  void note_timeout() noexcept;
  void note_abandoned() noexcept;
  void note_answer() noexcept;
  // True if an acquire should skip this node now; when the back-off has just ended, false for
  // exactly one caller (the probe). Thread-safe.
  bool skip(std::chrono::steady_clock::time_point now) noexcept;
  // True while the node has timed out and not answered since. Thread-safe.
  bool suspect() const noexcept { return backoff_ms_.load(std::memory_order_relaxed) != 0; }

 private:
  Endpoint endpoint_;
  std::string address_;
  std::string waiter_id_;
  // Storage behind handshake_ views.
  std::vector<std::string> handshake_args_;
  std::vector<std::vector<const char*>> handshake_argv_;
  std::vector<std::vector<std::size_t>> handshake_lens_;
  std::vector<CommandView> handshake_;

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by mutex_
  std::atomic<bool> down_{false};
  std::atomic<std::int64_t> skip_until_ns_{0};  // steady_clock, 0: not skipping
  std::atomic<std::int64_t> backoff_ms_{0};
  std::atomic<int> abandoned_in_a_row_{0};
  std::once_flag subscriber_once_;
  std::unique_ptr<Subscriber> subscriber_;
  std::atomic<Subscriber*> started_subscriber_{nullptr};
};

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
  // is closed. Redis runs one connection's commands in order even after the client left, so a
  // rollback sent this way cannot overtake the request it undoes (a paused node that resumes
  // runs SET, then the release). When empty, script commands with Resend::allowed are re-sent
  // as EVAL instead (in case the server answers the EVALSHA with NOSCRIPT that nobody will
  // read); a user's command is never sent twice.
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
};

// Lets a multi-node batch finish before its slowest node once the outcome is certain: when
// `needed` nodes succeeded (by `success`, given the node's index and its first command's reply),
// or so many failed that `needed` successes are impossible. The remaining nodes then get a
// grace period of three times the time taken so far (at least 5 ms), so healthy stragglers on a
// busy machine still answer; nodes still silent after it are abandoned like a timeout
// (on_timeout is sent behind their request, the connection closed, error = TimeoutError).
struct EarlyFinish {
  std::size_t needed{0};
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
// back-off (it then does not grant). Anything that may find our key on a node (release, extend,
// the rollback of a partial grant, raising a fence) goes to every node; a node in back-off then
// gets the request but is not waited for once the other nodes are done.
enum class SkipPolicy : unsigned char { every_node, skip_backed_off };

// Runs every batch: connects where no pooled connection is idle and sends each node's commands
// in one write, then reads all replies; connects and reads of all nodes share one poll loop, so
// a node slow to accept or to answer costs the others nothing. A node that does not answer
// within its command_timeout (or accept within connect_timeout) gets a TimeoutError; a reply
// that has arrived by then is always taken. NOSCRIPT replies are retried with EVAL on the same
// connection. Never throws for per-node failures (they land in NodeBatch::error); throws
// std::bad_alloc only.
void execute(NodeBatch* batches, std::size_t count, const EarlyFinish* early = nullptr,
             SkipPolicy policy = SkipPolicy::every_node);

// Writes everything buffered in `context` (blocking, bounded by its send timeout) without letting
// a closed connection raise SIGPIPE in the caller. Returns false on a write error.
bool write_all(redisContext* context);

// Helpers for reading replies.
bool is_error(const redisReply* reply) noexcept;
std::string_view text(const redisReply* reply) noexcept;
// The exception for an error reply to `operation` on `address`, with a hint for common errors.
std::exception_ptr server_error(const std::string& address, std::string_view operation,
                                std::string_view message);
// Converts a hiredis reply to the public value type.
Reply to_reply(const redisReply* reply);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_CONNECTION_HPP
