// src/io/wire.cpp: moving a connection's bytes (non-blocking steps, blocking helpers on poll) and
// the exceptions for what can go wrong on the wire.
#include "io/wire.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "util/small_vector.hpp"

namespace redlock {
namespace detail {

void append(Connection& connection, const CommandView& command, Dialect dialect) {
  if (dialect == Dialect::as_given) {
    connection.out.append(command.argc, command.argv, command.lens);
    return;
  }
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
  connection.out.append(command.argc, argv.data(), lens.data());
}

IoResult write_some(Connection& connection) noexcept {
  while (!connection.out.empty()) {
    const IoResult result =
        connection.transport.write(connection.out.data(), connection.out.size());
    if (result.error != IoError::none) return result;
    connection.out.consume(result.bytes);
  }
  return IoResult{};
}

IoResult read_some(Connection& connection, ReadMode mode) noexcept {
  char buffer[16 * 1024];
  Transport& transport = connection.transport;
  const IoResult result = mode == ReadMode::waiting ? transport.read_waiting(buffer, sizeof buffer)
                                                    : transport.read(buffer, sizeof buffer);
  if (result.error == IoError::none && !connection.in.feed(buffer, result.bytes)) {
    return IoResult{0, IoError::other, ENOMEM};
  }
  return result;
}

bool await(int socket, short events, SteadyTime deadline) {
  pollfd fd{socket, events, 0};
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    // Re-checked every minute at most; never negative.
    const auto wait = std::clamp<std::int64_t>(left.count(), 0, 60'000);
    const int rc = ::poll(&fd, 1, static_cast<int>(wait));
    if (rc == 1) return true;
    if (rc == 0 && wait == left.count()) return false;
    if (rc < 0 && errno != EINTR) {
      throw ConnectionError(fmt::format("redlock: poll failed: {}", std::strerror(errno)));
    }
  }
}

void write_all(Connection& connection, const std::string& address) {
  for (;;) {
    const IoResult result = write_some(connection);
    if (result.error == IoError::none) return;
    if (result.error != IoError::again) {
      std::rethrow_exception(transport_error(result, address, "send to", connection.timeout));
    }
    const short events = connection.transport.wanted(POLLOUT);
    if (!await(connection.transport.fd(), events,
               std::chrono::steady_clock::now() + connection.timeout)) {
      std::rethrow_exception(transport_error(IoResult{0, IoError::timeout, EAGAIN}, address,
                                             "send to", connection.timeout));
    }
  }
}

std::exception_ptr transport_error(const IoResult& result, const std::string& address,
                                   std::string_view doing, std::chrono::milliseconds limit) {
  switch (result.error) {
    case IoError::timeout:
    case IoError::again:
      return std::make_exception_ptr(TimeoutError(fmt::format(
          "redlock: {} did not answer within {} ms while trying to {} it ({}); the server may "
          "be paused, overloaded or unreachable",
          address, limit.count(), doing, std::strerror(result.code != 0 ? result.code : EAGAIN))));
    case IoError::closed:
      return std::make_exception_ptr(ConnectionError(fmt::format(
          "redlock: {} closed the connection (end of stream); it may have restarted or killed "
          "this client, the next call reconnects",
          address)));
    default:
      if (result.detail != nullptr && *result.detail != '\0') {
        return std::make_exception_ptr(ConnectionError(
            fmt::format("redlock: cannot {} {} over TLS: {}", doing, address, result.detail)));
      }
      return std::make_exception_ptr(ConnectionError(
          fmt::format("redlock: cannot {} {} ({}); check that redis-server is running there", doing,
                      address, std::strerror(result.code))));
  }
}

std::exception_ptr accept_timeout(const std::string& address, std::chrono::milliseconds limit) {
  return std::make_exception_ptr(TimeoutError(
      fmt::format("redlock: {} did not accept a connection within {} ms; the server may be paused, "
                  "overloaded or unreachable",
                  address, limit.count())));
}

std::exception_ptr handshake_timeout(const std::string& address, std::chrono::milliseconds limit,
                                     bool heard) {
  // A plain Redis reads the client hello as an inline command and waits for its '\n': silence.
  return std::make_exception_ptr(TimeoutError(fmt::format(
      "redlock: the TLS handshake with {} did not finish within {} ms (the connect timeout); {}",
      address, limit.count(),
      heard ? "the server may be paused or overloaded"
            : "the server did not answer in TLS (nothing came back to the client hello, as from a "
              "plain-text port): is this its tls-port? Else it may be paused or overloaded")));
}

std::exception_ptr handshake_error(const std::string& address, const char* why) {
  return std::make_exception_ptr(
      ConnectionError(fmt::format("redlock: cannot connect to {} over TLS: {}", address,
                                  why != nullptr && *why != '\0' ? why : "the handshake failed")));
}

std::exception_ptr protocol_error(const Connection& connection, const std::string& address) {
  return std::make_exception_ptr(ProtocolError(
      fmt::format("redlock: protocol error from {} ({}); is it really a Redis server?", address,
                  connection.in.error())));
}

namespace {

std::string_view hint_for(std::string_view message) {
  if (message.rfind("NOAUTH", 0) == 0 || message.rfind("WRONGPASS", 0) == 0 ||
      message.find("invalid password") != std::string_view::npos) {
    return "; check Endpoint::username and Endpoint::password";
  }
  if (message.rfind("NOPERM", 0) == 0) {
    return "; the ACL user lacks a permission redlock needs (see docs/operations.md, 'Minimal "
           "Redis ACL')";
  }
  if (message.rfind("WRONGTYPE", 0) == 0) {
    return "; the key holds a value that is not a lock: use another key";
  }
  if (message.rfind("OOM", 0) == 0)
    return "; the server hit maxmemory: free memory or raise maxmemory";
  if (message.rfind("BUSY", 0) == 0) return "; a long-running script blocks the server";
  return {};
}

}  // namespace

std::exception_ptr server_error(const std::string& address, std::string_view operation,
                                std::string_view message) {
  const std::string_view hint = hint_for(message);
  std::string_view sentence = message;  // "...user is disabled." then "; check ...": no '.'
  if (!hint.empty() && !sentence.empty() && sentence.back() == '.') sentence.remove_suffix(1);
  return std::make_exception_ptr(
      ServerError(fmt::format("redlock: {} answered {} with an error: {}{}", address, operation,
                              sentence, hint),
                  std::string(message)));
}

bool is_timeout(const std::exception_ptr& error) noexcept {
  if (!error) return false;
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError&) {
    return true;
  } catch (...) {
  }
  return false;
}

}  // namespace detail
}  // namespace redlock
