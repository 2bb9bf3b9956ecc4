// redlock/errors.hpp: the exception types redlock throws.
//
// Contention is never an exception (try_lock() returns false). What throws is a failure to talk
// to Redis at all: every type below derives from redlock::Error, so one catch clause covers them.
// Bad arguments throw std::invalid_argument instead, naming the argument.
//
//   try {
//     std::lock_guard<redlock::Lock> guard(lock);
//     ...
//   } catch (const redlock::TimeoutError& e) {   // a deadline passed (paused or slow server)
//   } catch (const redlock::Error& e) {          // any other Redis-side failure
//   }
//
// Every message names the endpoint (host:port or unix socket) and never contains a password.
#ifndef REDLOCK_ERRORS_HPP
#define REDLOCK_ERRORS_HPP

#include <cstddef>    // std::size_t
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string

namespace redlock {

// Base of every redlock failure that is not a bad argument.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Could not connect, or the connection was lost (refused, reset, EOF). The connection involved
// has been discarded; the next call reconnects.
class ConnectionError : public Error {
 public:
  using Error::Error;
};

// Redlock: fewer than quorum() nodes answered at all (the others were down, slow or refused the
// connection), so the attempt could not decide anything. what() names each failed node and why.
class QuorumUnavailableError : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

// A connect or command deadline (Endpoint::connect_timeout / command_timeout) passed before the
// server answered. The connection involved has been discarded.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Redis answered with an error reply (NOAUTH, WRONGPASS, WRONGTYPE, NOPERM, OOM, ...).
// what() is a full sentence; server_message() is the server's own text, e.g.
// "WRONGTYPE Operation against a key holding the wrong kind of value".
class ServerError : public Error {
 public:
  ServerError(const std::string& what, std::string server_message)
      : Error(what), server_message_(std::move(server_message)) {}

  // The error reply exactly as the server sent it. Thread-safe (immutable).
  const std::string& server_message() const noexcept { return server_message_; }

 private:
  std::string server_message_;
};

// Semaphore: permits of this key are held under another limit than this object's (the limit is
// stored on the server with the permits, in `{<key>}:permit:limit`). Every user of a semaphore key
// must give the same limit; it may change only while no permit is held. Waits do not ride it out
// (it lasts as long as those permits). server_message() is the script's reply, "REDLOCK_LIMIT <n>".
class LimitMismatchError : public ServerError {
 public:
  LimitMismatchError(const std::string& what, std::string server_message, std::size_t limit,
                     std::size_t server_limit)
      : ServerError(what, std::move(server_message)), limit_(limit), server_limit_(server_limit) {}

  // This object's limit. Thread-safe (immutable).
  std::size_t limit() const noexcept { return limit_; }
  // The limit the held permits were taken under. Thread-safe (immutable).
  std::size_t server_limit() const noexcept { return server_limit_; }

 private:
  std::size_t limit_;
  std::size_t server_limit_;
};

// Endpoint::wait_replicas: the grant (or extend) reached the server but fewer replicas than
// asked acknowledged it within wait_timeout, so it was rolled back (a failover could lose it).
// Not contention: the lock may be free. try_lock() throws it; lock() and try_lock_for() retry
// while the outage lasts (LockOptions::max_unavailable), like a connection failure.
class ReplicationError : public Error {
 public:
  using Error::Error;
};

// lock() gave up because cancel_waits() was called on the lock object (see LockBase).
class CancelledError : public Error {
 public:
  using Error::Error;
};

// The server sent something that is not valid RESP, or a reply of a type the operation cannot
// have produced. The connection involved has been discarded.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

}  // namespace redlock

#endif  // REDLOCK_ERRORS_HPP
