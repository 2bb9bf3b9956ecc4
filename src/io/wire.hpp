// src/io/wire.hpp: one connection to a server: a transport (the socket), the codec (our output
// buffer and a reply decoder) and its handshake state; plus the few blocking helpers the
// subscriber and the pool use (bounded by a deadline, built on poll).
#ifndef REDLOCK_SRC_IO_WIRE_HPP
#define REDLOCK_SRC_IO_WIRE_HPP

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "io/codec.hpp"
#include "io/command.hpp"
#include "io/transport.hpp"

namespace redlock {
namespace detail {

using SteadyTime = std::chrono::steady_clock::time_point;

// A live connection. Any transport or protocol error retires it (never reused after one).
struct Connection {
  Connection() = default;
  explicit Connection(const ReplyLimits& limits) : in(limits) {}

  Transport transport;
  OutBuffer out;
  Decoder in;
  std::chrono::milliseconds timeout{0};  // the endpoint's command_timeout, for blocking writes
  bool authenticated{false};             // AUTH/SELECT handshake done
  bool reused{false};                    // came out of the idle pool (may be stale after a restart)
  std::uint64_t epoch{0};                // through Sentinel: the master lookup it was dialed under
  // The pool's slot (io/pool.hpp): freed when the connection closes. Empty: not counted.
  std::shared_ptr<void> pool_slot;
};

// How a command is encoded: as given, or (a script's EVALSHA) as EVAL with the script's body.
enum class Dialect : unsigned char { as_given, as_eval };

// Appends `command` to the connection's output. Throws std::bad_alloc.
void append(Connection& connection, const CommandView& command, Dialect dialect);

// Writes buffered output until it is all written (error none), the socket is full (again), or
// it failed. Never blocks.
IoResult write_some(Connection& connection) noexcept;
// Whether a read may wait for data (Transport::read_waiting) or returns at once.
enum class ReadMode : unsigned char { now, waiting };

// One read of what the server sent, fed to the decoder. Blocks only with ReadMode::waiting (then
// for at most the transport's wait limit). A decoder out of memory is reported as
// IoError::other with ENOMEM.
IoResult read_some(Connection& connection, ReadMode mode = ReadMode::now) noexcept;

// Waits until socket `fd` is ready for `events` or `deadline` passes. Returns false on timeout.
// Throws ConnectionError if poll fails.
bool await(int fd, short events, SteadyTime deadline);

// Blocking: writes all output; each wait for the socket is bounded by connection.timeout.
// Throws ConnectionError or TimeoutError naming `address`.
void write_all(Connection& connection, const std::string& address);

// The exception for a failed read or write (`doing` is "read from", "send to", ...): TimeoutError
// for IoError::timeout (`limit` is what ran out; the message quotes strerror(result.code), or
// EAGAIN's text when our own deadline ran out), else ConnectionError.
std::exception_ptr transport_error(const IoResult& result, const std::string& address,
                                   std::string_view doing, std::chrono::milliseconds limit);
// The exception for a server that did not accept a connection within `limit`.
std::exception_ptr accept_timeout(const std::string& address, std::chrono::milliseconds limit);
// The exception for a TLS handshake that did not finish within `limit` (the connect timeout);
// `heard` is false when the server sent nothing back, as a plain-text port does.
std::exception_ptr handshake_timeout(const std::string& address, std::chrono::milliseconds limit,
                                     bool heard);
// The exception for a TLS handshake that failed (`why`: the layer's description).
std::exception_ptr handshake_error(const std::string& address, const char* why);
// The exception for bytes that are not RESP.
std::exception_ptr protocol_error(const Connection& connection, const std::string& address);
// The exception for an error reply to `operation` on `address`, with a hint for common errors.
std::exception_ptr server_error(const std::string& address, std::string_view operation,
                                std::string_view message);
// Whether `error` is a TimeoutError (a request that may still run on the server), as opposed to
// a connection that died (the request may have run) or a refusal. False for null.
bool is_timeout(const std::exception_ptr& error) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_WIRE_HPP
