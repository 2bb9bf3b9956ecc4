// redlock/client.hpp: a thread-safe, copyable handle to one Redis instance.
//
// A Client owns a small pool of connections, shared by all its copies, created lazily and
// discarded after any transport error (the next call reconnects). It never blocks longer than
// the endpoint's connect_timeout + command_timeout. Lock and Redlock take Clients; the command
// functions below are for the odd command a program needs beside its locks.
//
//   redlock::Client client(redlock::Endpoint::parse("redis://127.0.0.1:6379"));
//   client.ping();                                      // throws if unreachable
//   redlock::Lock lock(client, "jobs:nightly-report");
//
// All arguments travel through hiredis's argv interface: keys and values are binary-safe
// (spaces, '%', NUL bytes all arrive intact).
#ifndef REDLOCK_CLIENT_HPP
#define REDLOCK_CLIENT_HPP

#include <cstddef>      // std::size_t
#include <memory>       // std::shared_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <redlock/endpoint.hpp>  // Endpoint
#include <redlock/reply.hpp>     // Reply

namespace redlock {

namespace detail {
class ClientImpl;
struct Access;
}  // namespace detail

// A Lua script known by its SHA1, run with EVALSHA and a transparent EVAL fallback when the
// server answers NOSCRIPT (after SCRIPT FLUSH or a restart).
class Script {
 public:
  // Throws nothing but std::bad_alloc. Computes the SHA1 locally (no round trip).
  explicit Script(std::string body);
  const std::string& body() const noexcept { return body_; }
  // Lowercase hex SHA1 of body(), as EVALSHA wants it.
  const std::string& sha1() const noexcept { return sha1_; }

 private:
  std::string body_;
  std::string sha1_;
};

class Client {
 public:
  // Creates the handle; connects nothing yet (the first command does).
  // Throws std::invalid_argument naming the field if the endpoint is unusable (port out of range,
  // non-positive timeout, negative database, empty host and no unix socket).
  explicit Client(Endpoint endpoint);
  // The same from a URI: Client("redis://127.0.0.1:6379"), Client("rediss://..."),
  // Client("unix:///run/redis.sock"), `Client("redis-sentinel://s1,s2,s3#mymaster")`, as
  // Endpoint::parse() reads it. Throws std::invalid_argument naming the bad part of the URI (the
  // password never appears), or the unusable field as above.
  explicit Client(std::string_view uri);

  // The endpoint this client talks to. Thread-safe.
  const Endpoint& endpoint() const noexcept;

  // Sends PING and checks that the answer is PONG (a status, or a bulk string as some proxies
  // send). Returns nothing. Throws ConnectionError, TimeoutError, ServerError (e.g. NOAUTH or
  // WRONGPASS from the handshake), ProtocolError for any other answer (the message says what
  // came back) or one over Endpoint::reply_limits. Thread-safe.
  void ping() const;

  // The server's version string from INFO server ("7.0.15"). Throws like ping(). Thread-safe.
  std::string server_version() const;

  // Runs one command, e.g. command({"SET", key, value}). Returns its reply.
  // Throws ServerError if the reply is an error, ConnectionError/TimeoutError/ProtocolError on
  // transport failures, std::invalid_argument if argv is empty or is a command that changes the
  // state of the pooled connection the locks share (SELECT, AUTH, HELLO, MULTI, WATCH,
  // SUBSCRIBE, MONITOR, CLIENT REPLY, ...). Thread-safe.
  // A TimeoutError or ConnectionError after the command was sent means it may or may not have
  // run on the server. It is never sent a second time (a pooled connection the server has
  // closed is detected and dropped before sending); retry yourself only if that is safe.
  Reply command(const std::vector<std::string_view>& argv) const;

  // Sends all commands in one write and reads all replies: one round trip. Returns the replies in
  // order; an error reply is returned as a Reply of Type::error (not thrown) so that one bad
  // command does not hide the others. Throws on transport failures, like command().
  // After a transport error any prefix of the commands may have run; none is re-sent. Thread-safe.
  std::vector<Reply> pipeline(const std::vector<std::vector<std::string_view>>& commands) const;

  // Runs `script` with EVALSHA; if the server answers NOSCRIPT, runs it with EVAL (which also
  // caches it) on the same connection. Returns the script's reply. Throws like command(); after
  // a timeout the script may or may not have run, and it is never re-sent.
  // Thread-safe.
  Reply eval(const Script& script, const std::vector<std::string_view>& keys,
             const std::vector<std::string_view>& args) const;

  // True if both handles share one pool (one is a copy of the other). Thread-safe.
  bool same_pool(const Client& other) const noexcept { return impl_ == other.impl_; }

  // Number of idle pooled connections right now (for tests and diagnostics). Thread-safe.
  std::size_t idle_connections() const;

 private:
  friend struct detail::Access;  // the library's own layers reach the pool through
                                 // src/api/access.hpp
  std::shared_ptr<detail::ClientImpl> impl_;
};

}  // namespace redlock

#endif  // REDLOCK_CLIENT_HPP
