// src/connection.cpp: hiredis contexts, the connection pool, and the multiplexed batch executor.
#include "connection.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "log_internal.hpp"
#include "subscriber.hpp"
#include "token.hpp"

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

// Per-node progress while a batch runs.
struct Pending {
  NodeBatch* batch{nullptr};
  std::unique_ptr<Connection> connection;
  std::size_t handshake{0};  // leading replies that belong to the handshake
  std::size_t expected{0};
  SmallVector<ReplyPtr, 4> replies;  // handshake (AUTH, SELECT) and the batch's commands
  Clock::time_point deadline{};
  bool done{false};
  bool connection_attempted{false};  // false when skipped by the circuit breaker
  bool abandoned{false};             // cut short by an early finish, not by its own timeout
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
void send_on_timeout(Pending& p) noexcept {
  if (!p.connection) return;
  redisContext* context = p.connection->context.get();
  try {
    if (p.batch->on_timeout.empty()) {
      for (const auto& command : p.batch->commands) {
        if (command.script != nullptr) append(context, command, true);
      }
    }
  } catch (...) {  // bad_alloc while building the EVAL argv: skip the fallback
  }
  for (const auto& command : p.batch->on_timeout) {
    redisAppendCommandArgv(context, command.argc, const_cast<const char**>(command.argv),
                           command.lens);
  }
  write_all(context);
}

void fail(Pending& p, std::exception_ptr error) {
  p.batch->error = std::move(error);
  p.connection.reset();  // a context that reported an error is never reused
  p.done = true;
}

bool flush(Pending& p) {
  if (!write_all(p.connection->context.get())) {
    fail(p, transport_error(p.connection->context.get(), *p.batch->node, "send to"));
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
      if (looks_like_timeout(*context)) {
        context->err = 0;  // the context itself is fine; only the reply is late
        send_on_timeout(p);
        context->err = REDIS_ERR_IO;
      }
      fail(p, transport_error(context, *p.batch->node, "read from"));
      return;
    }
    p.replies.emplace_back(static_cast<redisReply*>(raw));
  }
}

// Reads the remaining replies of every pending node, all at once, each until its deadline (or
// the grace deadline of an early finish).
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
      // Only nodes that answered "no" make a quorum impossible: a node that failed or was
      // skipped says nothing about the others, which are then still awaited normally (else a
      // busy machine could abandon every live node and turn "not held" into "unreachable").
      std::size_t succeeded = 0;
      std::size_t failed = 0;
      std::size_t unavailable = 0;
      for (std::size_t i = 0; i < pending.size(); ++i) {
        const Pending& p = pending[i];
        if (p.done) {
          ++unavailable;
        } else if (p.replies.size() >= p.expected) {
          const bool handshake_ok = std::none_of(
              p.replies.begin(), p.replies.begin() + static_cast<std::ptrdiff_t>(p.handshake),
              [](const ReplyPtr& r) { return is_error(r.get()); });
          if (handshake_ok && early->succeeded(i, p.replies[p.handshake].get())) {
            ++succeeded;
          } else {
            ++failed;
          }
        }
      }
      if (succeeded >= early->needed ||
          (failed > 0 && failed + unavailable > pending.size() - early->needed)) {
        grace = now + std::max<Clock::duration>(3 * (now - start), std::chrono::milliseconds(5));
      }
    }
    auto next_deadline = Clock::time_point::max();
    for (auto& p : pending) {
      if (p.done || p.replies.size() >= p.expected) continue;
      if (now >= p.deadline || now >= grace) {
        p.abandoned = now < p.deadline;
        send_on_timeout(p);
        // Reported as a timeout: the context saw no error, so describe it ourselves.
        p.connection->context->err = REDIS_ERR_IO;
        std::snprintf(p.connection->context->errstr, sizeof(p.connection->context->errstr), "%s",
                      "Resource temporarily unavailable");
        fail(p, transport_error(p.connection->context.get(), *p.batch->node, "read from"));
        continue;
      }
      next_deadline = std::min({next_deadline, p.deadline, grace});
      fds.push_back(pollfd{p.connection->context->fd, POLLIN, 0});
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
      if (redisBufferRead(p.connection->context.get()) == REDIS_ERR) {
        fail(p, transport_error(p.connection->context.get(), *p.batch->node, "read from"));
        continue;
      }
      drain(p);
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
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!idle_.empty()) {
      auto connection = std::move(idle_.back());
      idle_.pop_back();
      connection->reused = true;
      return connection;
    }
  }
  const timeval connect_tv = to_timeval(endpoint_.connect_timeout);
  ContextPtr context(
      endpoint_.unix_socket.empty()
          ? redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, connect_tv)
          : redisConnectUnixWithTimeout(endpoint_.unix_socket.c_str(), connect_tv));
  if (context == nullptr || context->err != 0) {
    std::rethrow_exception(transport_error(context.get(), *this, "connect to"));
  }
  // Not inherited by child processes: a fork+exec must not carry authenticated connections.
  const int flags = ::fcntl(context->fd, F_GETFD);
  if (flags >= 0) ::fcntl(context->fd, F_SETFD, flags | FD_CLOEXEC);
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

void ClientImpl::note_answer() noexcept {
  if (backoff_ms_.load(std::memory_order_relaxed) != 0) {
    backoff_ms_.store(0, std::memory_order_relaxed);
    skip_until_ns_.store(0, std::memory_order_relaxed);
  }
}

bool ClientImpl::skipping(Clock::time_point now) const noexcept {
  const std::int64_t until = skip_until_ns_.load(std::memory_order_relaxed);
  return until != 0 && now.time_since_epoch().count() < until;
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
  auto connection = checkout();
  Pending p;
  p.batch = &batch;
  p.connection = std::move(connection);
  if (!p.connection->authenticated) {
    for (const auto& h : handshake_) append(p.connection->context.get(), h, false);
    p.handshake = handshake_.size();
  }
  append(p.connection->context.get(), batch.commands[0], false);
  p.expected = p.handshake + 1;
  if (flush(p)) read_blocking(p);
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

// stale[i] (in: false) is set when node i failed on a pooled connection that turned out closed.
void execute_once(NodeBatch* batches, std::size_t count, bool* stale, const EarlyFinish* early) {
  PerNode<Pending> pending(count);
  const auto start = Clock::now();
  std::size_t live = 0;
  for (std::size_t i = 0; i < count; ++i) {
    Pending& p = pending[i];
    p.batch = &batches[i];
    p.batch->error = nullptr;
    p.batch->replies.clear();
    if (count > 1 && early != nullptr && p.batch->node->skipping(start)) {
      p.batch->error = std::make_exception_ptr(TimeoutError(
          fmt::format("redlock: {} timed out recently; skipped until its back-off ends",
                      p.batch->node->address())));
      p.done = true;
      continue;
    }
    p.connection_attempted = true;
    try {
      p.connection = p.batch->node->checkout();
    } catch (...) {
      p.batch->error = std::current_exception();
      p.done = true;
      continue;
    }
    redisContext* context = p.connection->context.get();
    if (!p.connection->authenticated) {
      for (const auto& h : p.batch->node->handshake()) append(context, h, false);
      p.handshake = p.batch->node->handshake().size();
    }
    for (const auto& command : p.batch->commands) append(context, command, false);
    p.expected = p.handshake + p.batch->commands.size();
    p.replies.reserve(p.expected);
    stale[i] = p.connection->reused;
    if (flush(p)) ++live;
    // Each node's deadline starts when its own request left: a slow connect to one node (they
    // are made one after another) must not eat the others' time.
    p.deadline = Clock::now() + p.batch->node->endpoint().command_timeout;
  }
  if (live == 1 && count == 1) {
    read_blocking(pending[0]);
  } else if (live > 0) {
    read_multiplexed(pending, start, early);
  }
  for (std::size_t i = 0; i < count; ++i) {
    Pending& p = pending[i];
    // A pooled connection the server had already closed (restart, CLIENT KILL, idle timeout)
    // fails before any reply: worth one retry on a fresh connection, nothing was executed.
    stale[i] = stale[i] && p.done && p.replies.empty() && p.batch->error != nullptr &&
               p.connection == nullptr;
    if (stale[i]) {
      try {
        std::rethrow_exception(p.batch->error);
      } catch (const TimeoutError&) {
        stale[i] = false;  // a slow server is not a stale connection
      } catch (...) {
      }
    }
    finish(p);
    retry_noscript(p);
    if (!p.done) {
      p.batch->node->note_health(true);
      p.batch->node->note_answer();
      p.batch->node->checkin(std::move(p.connection));
    } else if (p.batch->error && !stale[i] && p.connection_attempted) {
      try {
        std::rethrow_exception(p.batch->error);
      } catch (const ServerError&) {
        p.batch->node->note_health(true);  // it answered, with an error
        p.batch->node->note_answer();
      } catch (const TimeoutError& e) {
        p.batch->node->note_health(false, e.what());
        if (!p.abandoned) p.batch->node->note_timeout();
      } catch (const std::exception& e) {
        p.batch->node->note_health(false, e.what());
      }
    }
  }
}

}  // namespace

void execute(NodeBatch* batches, std::size_t count, const EarlyFinish* early) {
  PerNode<bool> stale(count, false);
  execute_once(batches, count, stale.data(), early);
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
  execute_once(again.data(), again.size(), unused.data(), nullptr);
  for (std::size_t k = 0; k < again.size(); ++k) {
    batches[index[k]] = std::move(again[k]);
    batches[index[k]].retried = true;
  }
}

}  // namespace detail
}  // namespace redlock
