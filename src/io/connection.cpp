// src/io/connection.cpp: hiredis contexts, the connection pool, the multiplexed batch executor, and
// the finisher that completes the writes of given-up connections.
#include "io/connection.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "util/log_internal.hpp"
#include "watch/subscriber.hpp"
#include "util/token.hpp"

namespace redlock {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxIdle = 16;

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

bool looks_like_timeout(const redisContext& context) {
  return context.err == REDIS_ERR_IO &&
         (std::strstr(context.errstr, "temporarily unavailable") != nullptr ||
          std::strstr(context.errstr, "timed out") != nullptr ||
          std::strstr(context.errstr, "would block") != nullptr);
}

// The one place that turns a failed hiredis context into a redlock exception.
std::exception_ptr transport_error(const redisContext* context, const ClientImpl& node,
                                   std::string_view doing) {
  const Endpoint& ep = node.endpoint();
  if (context == nullptr) {
    return std::make_exception_ptr(ConnectionError(fmt::format(
        "redlock: cannot {} {}: out of memory allocating a connection", doing, node.address())));
  }
  if (looks_like_timeout(*context)) {
    const auto limit = doing == "connect to" ? ep.connect_timeout : ep.command_timeout;
    return std::make_exception_ptr(TimeoutError(fmt::format(
        "redlock: {} did not answer within {} ms while trying to {} it ({}); the server may be "
        "paused, overloaded or unreachable",
        node.address(), limit.count(), doing, context->errstr)));
  }
  switch (context->err) {
    case REDIS_ERR_PROTOCOL:
      return std::make_exception_ptr(ProtocolError(
          fmt::format("redlock: protocol error from {} ({}); is it really a Redis server?",
                      node.address(), context->errstr)));
    case REDIS_ERR_EOF:
      return std::make_exception_ptr(ConnectionError(fmt::format(
          "redlock: {} closed the connection ({}); it may have restarted or killed this client, "
          "the next call reconnects",
          node.address(), context->errstr)));
    default:
      return std::make_exception_ptr(ConnectionError(
          fmt::format("redlock: cannot {} {} ({}); check that redis-server is running there", doing,
                      node.address(), context->errstr)));
  }
}

bool is_noscript(const redisReply* reply) {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR &&
         std::string_view(reply->str, reply->len).rfind("NOSCRIPT", 0) == 0;
}

// How a node's wait ended without all its replies.
enum class Cut : unsigned char {
  none,
  own_deadline,  // its command (or connect) timeout: evidence that it is slow or stopped
  grace,         // an early finish's grace ran out: it was slower than the others
  not_awaited,   // in back-off and the others were done (SkipPolicy::every_node)
};

// Per-node progress while a batch runs.
struct Pending {
  NodeBatch* batch{nullptr};
  Dial dial;  // connect in progress (the poll loop finishes it), else empty
  std::unique_ptr<Connection> connection;
  std::size_t handshake{0};  // leading replies that belong to the handshake
  std::size_t expected{0};
  SmallVector<ReplyPtr, 4> replies;  // handshake (AUTH, SELECT) and the batch's commands
  Clock::time_point deadline{};      // of the connect while dialing, then of the replies
  bool done{false};
  bool connection_attempted{false};  // false when skipped by the circuit breaker
  bool reused{false};                // the request went out on a pooled connection
  bool trailing{false};              // in back-off: not waited for once the others are done
  Cut cut{Cut::none};
};

// Writing to a connection the server has closed raises SIGPIPE, whose default action kills the
// process. Unless the process already ignores SIGPIPE (checked once; most servers do, and then
// this costs nothing), the signal is blocked in this thread around the write and a SIGPIPE it
// raised is consumed before unblocking.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    static const bool ignored = [] {
      struct sigaction current {};
      return ::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
    }();
    if (ignored) return;
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    ::sigpending(&pending);
    already_pending_ = sigismember(&pending, SIGPIPE) == 1;
    active_ = ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~SigpipeGuard() {
    if (!active_) return;
    if (!already_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      if (::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        ::sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool active_{false};
  bool already_pending_{false};
};

}  // namespace

bool write_all(redisContext* context) {
#if HIREDIS_MAJOR == 0 && HIREDIS_MINOR >= 14
  // hiredis 0.14 keeps its output buffer in a public sds: send it ourselves with MSG_NOSIGNAL,
  // which needs no signal-mask dance (4 system calls per write when SIGPIPE is not ignored).
  // Only for buffers of up to 64 KiB: we can shorten an sds but not free it (sds.h gives its
  // functions C++ linkage here), and hiredis's own write below frees a large one when done.
  if ((context->flags & REDIS_BLOCK) != 0 && context->err == 0 &&
      sdsalloc(context->obuf) <= 64u * 1024u) {
    while (sdslen(context->obuf) > 0) {
      const ssize_t n = ::send(context->fd, context->obuf, sdslen(context->obuf), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        context->err = REDIS_ERR_IO;
        std::snprintf(context->errstr, sizeof context->errstr, "%s", std::strerror(errno));
        return false;
      }
      // Drop what was sent (sdsrange's work; sds.h declares it without C linkage in 0.14).
      const std::size_t left = sdslen(context->obuf) - static_cast<std::size_t>(n);
      std::memmove(context->obuf, context->obuf + n, left);
      sdssetlen(context->obuf, left);
      context->obuf[left] = '\0';
    }
    return true;
  }
#endif
  SigpipeGuard guard;
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(context, &done) == REDIS_ERR) return false;
  }
  return true;
}

namespace {

// Writes the batch's on_timeout commands behind what was sent (best effort, never blocks long:
// the socket's send timeout bounds it).
void append(redisContext* context, const CommandView& command, bool as_eval) {
  if (as_eval) {
    SmallVector<const char*, 8> argv;
    SmallVector<std::size_t, 8> lens;
    for (int i = 0; i < command.argc; ++i) {
      argv.push_back(command.argv[i]);
      lens.push_back(command.lens[i]);
    }
    argv[0] = "EVAL";
    lens[0] = 4;
    argv[1] = command.script->body().data();
    lens[1] = command.script->body().size();
    redisAppendCommandArgv(context, command.argc, argv.data(), lens.data());
  } else {
    // hiredis 0.14 takes `const char**` but does not modify the array.
    redisAppendCommandArgv(context, command.argc, const_cast<const char**>(command.argv),
                           command.lens);
  }
}

// Without on_timeout commands, each script command is sent again as EVAL: the server may
// answer the EVALSHA with NOSCRIPT (a fresh server) to a connection nobody reads any more, and
// the scripts this is used for (release, extend) are harmless to run twice.
// Finishes the writes of given-up connections, then closes them: what a timed-out connection was
// sent, and the rollback queued behind it, must reach the server whole and in order even when
// its socket buffers are full (a paused server, a request of a few MiB). Once written, the
// connection is shut down for writing and its replies are read until the server closes it:
// closing with unread replies would reset the connection and could drop what the server has
// not read yet. One thread per process, started on first use; each connection gets at most
// kFinishFor.
class Finisher {
 public:
  // Never destroyed: its detached thread may still run while static destructors do.
  static Finisher& get() {
    static Finisher* finisher = new Finisher();
    return *finisher;
  }

  // Writes what is left in `context`'s output buffer, then closes it. Never blocks.
  void finish(ContextPtr context) noexcept {
    Item item{std::move(context), 0, Clock::now() + kFinishFor};
    if (settled(item)) return;  // the common case: written at once, nothing in flight
    try {
      std::lock_guard<std::mutex> guard(mutex_);
      if (!started_) {
        std::thread([this] { run(); }).detach();
        started_ = true;
      }
      queue_.push_back(std::move(item));
    } catch (...) {  // no thread or no memory: the connection is closed unfinished
      return;
    }
    wake_.notify_one();
  }

 private:
  static constexpr std::chrono::minutes kFinishFor{10};
  struct Item {
    ContextPtr context;
    std::size_t sent{0};  // bytes of the output buffer written so far
    Clock::time_point until;
  };

  // Reads and drops replies without blocking; true once the server has closed (or failed).
  static bool drain(Item& item) noexcept {
    char scrap[4096];
    for (;;) {
      const ssize_t n = ::recv(item.context->fd, scrap, sizeof scrap, MSG_DONTWAIT);
      if (n > 0) continue;
      return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
  }

  // Sends without blocking; true when all is written (then shuts writing down) or the socket
  // failed.
  static bool write_some(Item& item) noexcept {
    const char* out = item.context->obuf;
    const std::size_t length = sdslen(item.context->obuf);
    while (item.sent < length) {
      const ssize_t n = ::send(item.context->fd, out + item.sent, length - item.sent,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        item.sent = length + 1;  // failed: nothing more to write
        return true;
      }
      item.sent += static_cast<std::size_t>(n);
    }
    if (item.sent == length) {
      ::shutdown(item.context->fd, SHUT_WR);
      ++item.sent;  // past the end: shut down
    }
    return true;
  }

  static bool written(const Item& item) { return item.sent > sdslen(item.context->obuf); }

  // True when the item may be closed: all written, no reply left unread, and no byte of ours
  // still waiting in our send queue (which a reset would discard); or the connection is over.
  static bool settled(Item& item) noexcept {
    if (!written(item) && !write_some(item)) return false;
    if (drain(item)) return true;
    int queued = 0;
    return ::ioctl(item.context->fd, SIOCOUTQ, &queued) == 0 && queued == 0;
  }

  void run() {
    std::vector<Item> items;
    std::vector<pollfd> fds;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (items.empty()) wake_.wait(lock, [this] { return !queue_.empty(); });
        for (auto& item : queue_) items.push_back(std::move(item));
        queue_.clear();
      }
      fds.clear();
      for (const auto& item : items) {
        fds.push_back(
            pollfd{item.context->fd, static_cast<short>(written(item) ? POLLIN : POLLOUT), 0});
      }
      // Short: new items join on the next pass, and a send queue empties without an event.
      ::poll(fds.data(), fds.size(), 50);
      const auto now = Clock::now();
      std::size_t kept = 0;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (now < items[i].until && !settled(items[i])) items[kept++] = std::move(items[i]);
      }
      items.resize(kept);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Item> queue_;  // guarded by mutex_
  bool started_{false};      // guarded by mutex_
};

// Queues the batch's on_timeout commands behind its request and hands the connection to the
// Finisher (which writes everything, then closes it). Leaves p.connection without a context.
void send_on_timeout(Pending& p) noexcept {
  if (!p.connection) return;
  redisContext* context = p.connection->context.get();
  try {
    if (p.batch->on_timeout.empty()) {
      for (const auto& command : p.batch->commands) {
        if (command.script != nullptr && command.resend == Resend::allowed) {
          append(context, command, true);
        }
      }
    }
  } catch (...) {  // bad_alloc while building the EVAL argv: skip the fallback
  }
  for (const auto& command : p.batch->on_timeout) {
    redisAppendCommandArgv(context, command.argc, const_cast<const char**>(command.argv),
                           command.lens);
  }
  Finisher::get().finish(std::move(p.connection->context));
}

void fail(Pending& p, std::exception_ptr error) {
  p.batch->error = std::move(error);
  p.connection.reset();  // a context that reported an error is never reused
  p.done = true;
}

// A send that timed out may have written part of the request, even whole commands of it: it is
// treated like a request that timed out (the rest and the rollback follow it, in order).
bool flush(Pending& p) {
  redisContext* context = p.connection->context.get();
  if (!write_all(context)) {
    auto error = transport_error(context, *p.batch->node, "send to");
    if (looks_like_timeout(*context)) send_on_timeout(p);
    fail(p, std::move(error));
    return false;
  }
  return true;
}

// Takes every complete reply hiredis has buffered.
bool drain(Pending& p) {
  redisContext* context = p.connection->context.get();
  while (p.replies.size() < p.expected) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(context, &raw) == REDIS_ERR) {
      fail(p, transport_error(context, *p.batch->node, "read from"));
      return false;
    }
    if (raw == nullptr) break;
    p.replies.emplace_back(static_cast<redisReply*>(raw));
  }
  return true;
}

// Blocking read of the remaining replies on one connection (SO_RCVTIMEO bounds each read).
void read_blocking(Pending& p) {
  redisContext* context = p.connection->context.get();
  while (p.replies.size() < p.expected) {
    void* raw = nullptr;
    if (redisGetReply(context, &raw) == REDIS_ERR) {
      auto error = transport_error(context, *p.batch->node, "read from");
      if (looks_like_timeout(*context)) send_on_timeout(p);  // only the reply is late
      fail(p, std::move(error));
      return;
    }
    p.replies.emplace_back(static_cast<redisReply*>(raw));
  }
}

std::exception_ptr accept_timeout(const ClientImpl& node) {
  return std::make_exception_ptr(TimeoutError(
      fmt::format("redlock: {} did not accept a connection within {} ms; the server may be paused, "
                  "overloaded or unreachable",
                  node.address(), node.endpoint().connect_timeout.count())));
}

// Sends the batch (behind the AUTH/SELECT handshake on a new connection); the replies are due
// within command_timeout from now.
void send(Pending& p) {
  redisContext* context = p.connection->context.get();
  if (!p.connection->authenticated) {
    for (const auto& h : p.batch->node->handshake()) append(context, h, false);
    p.handshake = p.batch->node->handshake().size();
  }
  for (const auto& command : p.batch->commands) append(context, command, false);
  p.expected = p.handshake + p.batch->commands.size();
  p.replies.reserve(p.expected);
  p.reused = p.connection->reused;
  p.deadline = Clock::now() + p.batch->node->endpoint().command_timeout;
  flush(p);
}

// Finishes a connect that poll() reported ready, and sends the batch on it.
void connected(Pending& p) {
  try {
    p.connection = p.batch->node->adopt(p.dial);
  } catch (...) {
    fail(p, std::current_exception());
    return;
  }
  send(p);
}

// What the poll loop waits for on node p: its connect to finish, or its replies.
pollfd watch(const Pending& p) {
  return p.dial ? pollfd{p.dial.fd(), POLLOUT, 0} : pollfd{p.connection->context->fd, POLLIN, 0};
}

bool complete(const Pending& p) { return p.dial ? false : p.replies.size() >= p.expected; }

// Before a node is given up: takes a connect or replies that are ready right now, so nothing
// that has arrived is thrown away as a timeout. Returns true if the node is complete.
bool last_look(Pending& p) {
  pollfd fd = watch(p);
  if (::poll(&fd, 1, 0) != 1) return false;
  if (p.dial) {
    connected(p);  // the request goes out; its answer is not awaited any more
    return false;
  }
  if (redisBufferRead(p.connection->context.get()) == REDIS_ERR) {
    fail(p, transport_error(p.connection->context.get(), *p.batch->node, "read from"));
    return false;
  }
  return drain(p) && complete(p);
}

// Gives up on a node: its on_timeout commands go behind its request, and it fails with a
// TimeoutError.
void expire(Pending& p, Cut cut) {
  p.cut = cut;
  if (p.dial) {
    fail(p, accept_timeout(*p.batch->node));
    return;
  }
  // Connected, and cut short by the early finish rather than its own deadline: reachable.
  p.batch->abandoned = cut != Cut::own_deadline;
  // Reported as a timeout: the context saw no error, so describe it ourselves.
  redisContext* context = p.connection->context.get();
  context->err = REDIS_ERR_IO;
  std::snprintf(context->errstr, sizeof(context->errstr), "%s", "Resource temporarily unavailable");
  auto error = transport_error(context, *p.batch->node, "read from");
  send_on_timeout(p);
  fail(p, std::move(error));
}

// When an early finish's outcome is certain: the end of the grace the stragglers get.
Clock::time_point grace_end(const PerNode<Pending>& pending, Clock::time_point start,
                            Clock::time_point now, const EarlyFinish& early) {
  // Only nodes that answered "no" make a quorum impossible: a node that failed or was skipped
  // says nothing about the others, which are then still awaited normally (else a busy machine
  // could abandon every live node and turn "not held" into "unreachable").
  std::size_t succeeded = 0;
  std::size_t failed = 0;
  std::size_t unavailable = 0;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const Pending& p = pending[i];
    if (p.done || p.trailing) {
      ++unavailable;
    } else if (complete(p)) {
      const bool handshake_ok = std::none_of(
          p.replies.begin(), p.replies.begin() + static_cast<std::ptrdiff_t>(p.handshake),
          [](const ReplyPtr& r) { return is_error(r.get()); });
      if (handshake_ok && early.succeeded(i, p.replies[p.handshake].get())) {
        ++succeeded;
      } else {
        ++failed;
      }
    }
  }
  if (succeeded >= early.needed ||
      (failed > 0 && failed + unavailable > pending.size() - early.needed)) {
    return now + std::max<Clock::duration>(3 * (now - start), std::chrono::milliseconds(5));
  }
  return Clock::time_point::max();
}

// True when every node that is waited for (not trailing) is done or complete.
bool others_finished(const PerNode<Pending>& pending) {
  return std::all_of(pending.begin(), pending.end(),
                     [](const Pending& p) { return p.trailing || p.done || complete(p); });
}

// Connects and reads every pending node, all at once, each until its deadline (or the grace
// deadline of an early finish).
void read_multiplexed(PerNode<Pending>& pending, Clock::time_point start,
                      const EarlyFinish* early) {
  PerNode<pollfd> fds;
  PerNode<Pending*> owners;
  auto grace = Clock::time_point::max();
  for (;;) {
    fds.clear();
    owners.clear();
    const auto now = Clock::now();
    if (early != nullptr && grace == Clock::time_point::max()) {
      grace = grace_end(pending, start, now, *early);
    }
    const bool cut_trailing = others_finished(pending);
    auto next_deadline = Clock::time_point::max();
    for (auto& p : pending) {
      if (p.done || complete(p)) continue;
      const bool due = now >= p.deadline || now >= grace;
      if (due || (p.trailing && cut_trailing)) {
        if (last_look(p) || p.done) continue;
        expire(p, now >= p.deadline ? Cut::own_deadline : due ? Cut::grace : Cut::not_awaited);
        continue;
      }
      next_deadline = std::min({next_deadline, p.deadline, grace});
      fds.push_back(watch(p));
      owners.push_back(&p);
    }
    if (fds.empty()) return;
    const auto wait = std::min<std::chrono::milliseconds>(
        std::chrono::ceil<std::chrono::milliseconds>(next_deadline - now),
        std::chrono::milliseconds(60'000));  // re-checked every minute at most; never negative
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (rc < 0) {
      if (errno == EINTR) continue;
      for (auto* p : owners) {
        fail(*p, std::make_exception_ptr(ConnectionError(
                     fmt::format("redlock: poll failed: {}", std::strerror(errno)))));
      }
      return;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Pending& p = *owners[i];
      if (p.dial) {
        connected(p);
      } else if (redisBufferRead(p.connection->context.get()) == REDIS_ERR) {
        fail(p, transport_error(p.connection->context.get(), *p.batch->node, "read from"));
      } else {
        drain(p);
      }
    }
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
  for (std::size_t i = p.handshake; i < p.replies.size(); ++i) {
    p.batch->replies.push_back(std::move(p.replies[i]));
  }
}

// EVAL fallback for NOSCRIPT replies, one node at a time (rare: after SCRIPT FLUSH or restart).
void retry_noscript(Pending& p) {
  if (p.done) return;
  std::vector<std::size_t> redo;
  for (std::size_t i = 0; i < p.batch->commands.size(); ++i) {
    if (p.batch->commands[i].script != nullptr && is_noscript(p.batch->replies[i].get())) {
      redo.push_back(i);
    }
  }
  if (redo.empty()) return;
  log_message(LogLevel::debug, "redlock: NOSCRIPT, re-sending with EVAL");
  for (std::size_t i : redo) append(p.connection->context.get(), p.batch->commands[i], true);
  if (!flush(p)) return;
  p.replies.clear();
  p.expected = redo.size();
  read_blocking(p);
  if (p.done) return;
  for (std::size_t k = 0; k < redo.size(); ++k) p.batch->replies[redo[k]] = std::move(p.replies[k]);
}

}  // namespace

bool is_error(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR;
}

std::string_view text(const redisReply* reply) noexcept {
  if (reply == nullptr || reply->str == nullptr) return {};
  return {reply->str, reply->len};
}

std::exception_ptr server_error(const std::string& address, std::string_view operation,
                                std::string_view message) {
  std::string hint;
  if (message.rfind("NOAUTH", 0) == 0 || message.rfind("WRONGPASS", 0) == 0 ||
      message.find("invalid password") != std::string_view::npos) {
    hint = "; check Endpoint::username and Endpoint::password";
  } else if (message.rfind("NOPERM", 0) == 0) {
    hint = "; the ACL user lacks a permission redlock needs (see README, 'Minimal Redis ACL')";
  } else if (message.rfind("WRONGTYPE", 0) == 0) {
    hint = "; the key holds a value that is not a lock: use another key";
  } else if (message.rfind("OOM", 0) == 0) {
    hint = "; the server hit maxmemory: free memory or raise maxmemory";
  } else if (message.rfind("BUSY", 0) == 0) {
    hint = "; a long-running script blocks the server";
  }
  return std::make_exception_ptr(ServerError(
      fmt::format("redlock: {} answered {} with an error: {}{}", address, operation, message, hint),
      std::string(message)));
}

Reply to_reply(const redisReply* reply) {
  if (reply == nullptr) return Reply();
  switch (reply->type) {
    case REDIS_REPLY_STRING:
      return Reply(Reply::Type::string, std::string(reply->str, reply->len));
    case REDIS_REPLY_STATUS:
      return Reply(Reply::Type::status, std::string(reply->str, reply->len));
    case REDIS_REPLY_ERROR:
      return Reply(Reply::Type::error, std::string(reply->str, reply->len));
    case REDIS_REPLY_INTEGER:
      return Reply(static_cast<std::int64_t>(reply->integer));
    case REDIS_REPLY_ARRAY: {
      std::vector<Reply> elements;
      elements.reserve(reply->elements);
      for (std::size_t i = 0; i < reply->elements; ++i) {
        elements.push_back(to_reply(reply->element[i]));
      }
      return Reply(std::move(elements));
    }
    default:
      return Reply();
  }
}

ClientImpl::ClientImpl(Endpoint endpoint)
    : endpoint_(std::move(endpoint)), waiter_id_(make_token().substr(0, 16)) {
  address_ = endpoint_.address();
  // AUTH [user] pass, then SELECT db: pipelined in front of a new connection's first batch.
  // A username without a password still authenticates (AUTH user ""): the server decides (a
  // nopass user accepts it, any other answers WRONGPASS), and the connection never runs as
  // `default` unnoticed.
  std::vector<std::vector<std::string>> commands;
  if (!endpoint_.username.empty()) {
    commands.push_back({"AUTH", endpoint_.username, endpoint_.password});
  } else if (!endpoint_.password.empty()) {
    commands.push_back({"AUTH", endpoint_.password});
  }
  if (endpoint_.database != 0) commands.push_back({"SELECT", std::to_string(endpoint_.database)});
  std::size_t total = 0;
  for (auto& c : commands) total += c.size();
  handshake_args_.reserve(total);  // views below point into it: no reallocation after this
  for (auto& c : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (auto& a : c) {
      handshake_args_.push_back(std::move(a));
      argv.push_back(handshake_args_.back().data());
      lens.push_back(handshake_args_.back().size());
    }
    handshake_argv_.push_back(std::move(argv));
    handshake_lens_.push_back(std::move(lens));
  }
  for (std::size_t i = 0; i < handshake_argv_.size(); ++i) {
    handshake_.push_back(CommandView{static_cast<int>(handshake_argv_[i].size()),
                                     handshake_argv_[i].data(), handshake_lens_[i].data(),
                                     nullptr});
  }
}

ClientImpl::~ClientImpl() = default;

std::unique_ptr<Connection> ClientImpl::checkout() {
  if (auto connection = take_idle()) return connection;
  Dial dialing = dial();
  pollfd fd{dialing.fd(), POLLOUT, 0};
  const auto deadline = Clock::now() + endpoint_.connect_timeout;
  for (;;) {
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    const int rc = ::poll(&fd, 1, static_cast<int>(std::max<std::int64_t>(wait.count(), 0)));
    if (rc == 1) return adopt(dialing);
    if (rc == 0) std::rethrow_exception(accept_timeout(*this));
    if (errno != EINTR) {
      throw ConnectionError(fmt::format("redlock: cannot connect to {}: poll failed: {}", address_,
                                        std::strerror(errno)));
    }
  }
}

std::unique_ptr<Connection> ClientImpl::take_idle() noexcept {
  for (;;) {
    std::unique_ptr<Connection> connection;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (idle_.empty()) return nullptr;
      connection = std::move(idle_.back());
      idle_.pop_back();
    }
    // An idle connection has nothing to read unless the server closed it (restart, CLIENT KILL,
    // idle timeout): such a one is dropped before anything is sent on it.
    pollfd fd{connection->context->fd, POLLIN, 0};
    if (::poll(&fd, 1, 0) == 0) {
      connection->reused = true;
      return connection;
    }
    logf(LogLevel::debug, "redlock: pooled connection to {} was closed by the server", address_);
  }
}

Dial ClientImpl::dial() const { return start_dial(endpoint_, address_); }

std::unique_ptr<Connection> ClientImpl::adopt(Dial& dial) const {
  ContextPtr context(finish_dial(dial, address_));
  if (redisSetTimeout(context.get(), to_timeval(endpoint_.command_timeout)) != REDIS_OK) {
    std::rethrow_exception(transport_error(context.get(), *this, "configure"));
  }
  logf(LogLevel::debug, "redlock: connected to {}", address_);
  auto connection = std::make_unique<Connection>();
  connection->context = std::move(context);
  connection->authenticated = handshake_.empty();
  return connection;
}

void ClientImpl::checkin(std::unique_ptr<Connection> connection) noexcept {
  if (!connection || connection->context == nullptr || connection->context->err != 0) return;
  std::lock_guard<std::mutex> guard(mutex_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(connection));
}

void ClientImpl::clear_idle() noexcept {
  std::vector<std::unique_ptr<Connection>> stale;
  std::lock_guard<std::mutex> guard(mutex_);
  stale.swap(idle_);
}

void ClientImpl::note_health(bool reachable, std::string_view why) noexcept {
  if (reachable) {
    if (down_.exchange(false, std::memory_order_relaxed)) {
      logf(LogLevel::info, "redlock: {} answers again", address_);
    }
  } else if (!down_.exchange(true, std::memory_order_relaxed)) {
    logf(LogLevel::warn, "redlock: {} is unreachable ({}); further failures are logged at debug",
         address_, why);
  } else {
    logf(LogLevel::debug, "redlock: {} still unreachable ({})", address_, why);
  }
}

void ClientImpl::note_timeout() noexcept {
  const std::int64_t previous = backoff_ms_.load(std::memory_order_relaxed);
  const std::int64_t backoff = previous == 0 ? 250 : std::min<std::int64_t>(previous * 2, 5000);
  backoff_ms_.store(backoff, std::memory_order_relaxed);
  const auto until = Clock::now() + std::chrono::milliseconds(backoff);
  skip_until_ns_.store(until.time_since_epoch().count(), std::memory_order_relaxed);
}

void ClientImpl::note_abandoned() noexcept {
  constexpr int kAbandonsForBackoff = 3;
  // A probe that is cut again goes straight back into (a longer) back-off.
  if (suspect() ||
      abandoned_in_a_row_.fetch_add(1, std::memory_order_relaxed) + 1 >= kAbandonsForBackoff) {
    abandoned_in_a_row_.store(0, std::memory_order_relaxed);
    note_timeout();
    logf(LogLevel::debug,
         "redlock: {} answers far slower than the other nodes; acquires skip it for {} ms",
         address_, backoff_ms_.load(std::memory_order_relaxed));
  }
}

void ClientImpl::note_answer() noexcept {
  abandoned_in_a_row_.store(0, std::memory_order_relaxed);
  if (backoff_ms_.load(std::memory_order_relaxed) != 0) {
    backoff_ms_.store(0, std::memory_order_relaxed);
    skip_until_ns_.store(0, std::memory_order_relaxed);
  }
}

bool ClientImpl::skip(Clock::time_point now) noexcept {
  std::int64_t until = skip_until_ns_.load(std::memory_order_relaxed);
  const std::int64_t now_ns = now.time_since_epoch().count();
  if (until == 0) return false;
  if (now_ns < until) return true;
  // The back-off is over: one caller probes; the others skip until the probe has had its time.
  const auto probe = std::chrono::duration_cast<Clock::duration>(endpoint_.connect_timeout +
                                                                 endpoint_.command_timeout);
  return !skip_until_ns_.compare_exchange_strong(until, now_ns + probe.count(),
                                                 std::memory_order_relaxed);
}

std::size_t ClientImpl::idle() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return idle_.size();
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
  p.connection = checkout();
  send(p);
  if (!p.done) read_blocking(p);
  finish(p);
  if (batch.error) std::rethrow_exception(batch.error);
  if (is_error(batch.replies[0].get())) {
    std::rethrow_exception(server_error(address_, "PING", text(batch.replies[0].get())));
  }
  return std::move(p.connection);
}

Subscriber& ClientImpl::subscriber() {
  std::call_once(subscriber_once_, [this] {
    subscriber_ = std::make_unique<Subscriber>(*this);
    started_subscriber_.store(subscriber_.get(), std::memory_order_release);
  });
  return *subscriber_;
}

namespace {

enum class Connect : unsigned char { blocking, in_poll_loop };

// Gives node p a connection and sends its request, or leaves it dialing for the poll loop.
void open_node(Pending& p, Connect how) {
  p.connection_attempted = true;
  ClientImpl& node = *p.batch->node;
  try {
    if (how == Connect::blocking) {
      p.connection = node.checkout();
    } else if (!(p.connection = node.take_idle())) {
      p.dial = node.dial();
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

// stale[i] (in: false) is set when node i failed on a pooled connection that turned out closed.
void execute_once(NodeBatch* batches, std::size_t count, bool* stale, const EarlyFinish* early,
                  SkipPolicy policy) {
  PerNode<Pending> pending(count);
  const auto start = Clock::now();
  const bool redlock = count > 1 && early != nullptr;
  std::size_t awaited = 0;
  for (std::size_t i = 0; i < count; ++i) {
    Pending& p = pending[i];
    p.batch = &batches[i];
    p.batch->error = nullptr;
    p.batch->replies.clear();
    if (redlock && policy == SkipPolicy::skip_backed_off && p.batch->node->skip(start)) {
      p.batch->error = std::make_exception_ptr(TimeoutError(
          fmt::format("redlock: {} timed out recently; skipped until its back-off ends",
                      p.batch->node->address())));
      p.done = true;
      continue;
    }
    p.trailing = redlock && policy == SkipPolicy::every_node && p.batch->node->suspect();
    awaited += p.trailing ? 0 : 1;
  }
  for (auto& p : pending) {
    if (p.done) continue;
    if (awaited == 0) p.trailing = false;  // nobody else to wait for: wait for these
    open_node(p, count == 1 ? Connect::blocking : Connect::in_poll_loop);
  }
  if (count == 1 && !pending[0].done) {
    read_blocking(pending[0]);
  } else if (count > 1) {
    read_multiplexed(pending, start, early);
  }
  for (std::size_t i = 0; i < count; ++i) {
    Pending& p = pending[i];
    stale[i] = worth_retry(p);
    finish(p);
    retry_noscript(p);
    if (p.connection_attempted && !stale[i]) note_outcome(p);
    if (!p.done) p.batch->node->checkin(std::move(p.connection));
  }
}

}  // namespace

void execute(NodeBatch* batches, std::size_t count, const EarlyFinish* early, SkipPolicy policy) {
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

}  // namespace detail
}  // namespace redlock
