// src/io/transport.hpp: the byte stream under a connection: it owns the socket (TCP or unix),
// reads and writes without ever blocking, and classifies every failure by errno.
//
// Contract for every kind of transport (plain socket today; a TLS session plugs in as a
// SecureLayer, see below):
//   - read() and write() never block. They return how many bytes moved, or an IoError; `again`
//     means "poll for wanted() and call again" (a TLS layer may want POLLOUT to make a read go).
//   - handshake() is called by the poll loop until it answers ready (plain sockets: at once),
//     before the first command is written.
//   - A transport that reported any error other than `again` is dead: close it, never reuse it.
#ifndef REDLOCK_SRC_IO_TRANSPORT_HPP
#define REDLOCK_SRC_IO_TRANSPORT_HPP

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>

namespace redlock {
namespace detail {

// Why a read or write moved nothing, from errno (never from message text).
enum class IoError : unsigned char {
  none,
  again,    // EAGAIN/EWOULDBLOCK/EINTR (or a TLS want-read/want-write): poll and retry
  timeout,  // ETIMEDOUT: the kernel gave up on the peer
  refused,  // ECONNREFUSED
  reset,    // ECONNRESET, EPIPE, ECONNABORTED: the peer dropped the connection
  closed,   // an orderly end of stream (EOF) where data was expected
  other,    // any other errno (see IoResult::code)
};

struct IoResult {
  std::size_t bytes{0};
  IoError error{IoError::none};
  int code{0};  // the errno behind `error` (0 for none, again-by-TLS and closed; EPROTO for TLS)
  // For a TLS failure: what failed (points into the layer; valid while the transport lives).
  const char* detail{nullptr};
};

// Maps an errno value to its IoError class.
IoError classify(int code) noexcept;

// The longest a read_waiting() call waits for its first byte on a plain connection from the
// pool (less if the endpoint's command_timeout is shorter): short, so that a fan-out reading its
// nodes in turn does not wait long on a paused one. TLS connections keep command_timeout (a
// TLS read may take several socket reads, each waiting up to the limit).
constexpr std::chrono::milliseconds kWaitingRead{2};
// What such a read may really take: the kernel rounds the limit up to a clock tick and its timer
// fires at the tick after (measured 4-12 ms at HZ=250; up to 20 ms at HZ=100). Only a caller
// with this much time left before its deadline waits that way.
constexpr std::chrono::milliseconds kWaitingReadBound{25};

// Where a handshake (TLS) stands; plain sockets are ready at once.
enum class Handshake : unsigned char { ready, want_read, want_write, failed };

// The hook for an encrypting layer over the socket (the TLS issue implements it with
// SSL_do_handshake/SSL_read/SSL_write on the same non-blocking fd). Null for plain sockets, so
// the plain path costs no virtual call.
class SecureLayer {
 public:
  virtual ~SecureLayer() = default;
  virtual Handshake handshake(int fd) noexcept = 0;
  virtual IoResult read(int fd, char* into, std::size_t capacity) noexcept = 0;
  // Like read(), but its socket reads may wait (up to the socket's SO_RCVTIMEO, see
  // Transport::allow_waiting) for the first byte.
  virtual IoResult read_waiting(int fd, char* into, std::size_t capacity) noexcept = 0;
  virtual IoResult write(int fd, const char* from, std::size_t length) noexcept = 0;
  // Poll events the last `again` is waiting for (POLLIN or POLLOUT); 0 if the last operation
  // did not answer `again` (then the caller's natural direction applies).
  virtual short wanted() const noexcept = 0;
  // Bytes already decrypted and readable without touching the socket (poll would not see them).
  virtual bool buffered() const noexcept = 0;
  // Sends close_notify (best effort, never blocks).
  virtual void close(int fd) noexcept = 0;
  // Why the handshake (or the last read or write) failed, naming what to do; "" if it did not.
  virtual const char* failure() const noexcept = 0;
  // True once the server has sent any byte (a plain-text port sends none to a client hello).
  virtual bool heard_from_server() const noexcept = 0;
};

// A connected socket. Move-only; closes the socket (after the layer's close) when destroyed.
class Transport {
 public:
  Transport() = default;
  explicit Transport(int fd, std::unique_ptr<SecureLayer> layer = nullptr) noexcept;
  ~Transport();
  Transport(Transport&& other) noexcept;
  Transport& operator=(Transport&& other) noexcept;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int fd() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

  // Puts an encrypting layer over the socket (before the handshake, and before allow_waiting,
  // which then refuses). Null keeps the socket plain.
  void secure(std::unique_ptr<SecureLayer> layer) noexcept { layer_ = std::move(layer); }
  // True if an encrypting layer is set.
  bool secured() const noexcept { return layer_ != nullptr; }
  // One step of the handshake. Never blocks.
  Handshake handshake() noexcept;
  // Why the handshake failed (the layer's description), or "".
  const char* failure() const noexcept { return layer_ ? layer_->failure() : ""; }
  // True if the layer has received any byte from the server (false for a plain socket).
  bool heard_from_server() const noexcept { return layer_ && layer_->heard_from_server(); }
  // Reads what is available (at most `capacity` bytes). bytes == 0 with error none never
  // happens: end of stream is IoError::closed. Never blocks.
  IoResult read(char* into, std::size_t capacity) noexcept;
  // Writes as much of [from, from + length) as the socket takes, without SIGPIPE. Never blocks.
  IoResult write(const char* from, std::size_t length) noexcept;
  // Lets read_waiting() block for at most `limit`. Every other operation stays non-blocking (they
  // pass MSG_DONTWAIT, also inside a SecureLayer). Returns false if the socket could not be
  // configured (then never wait).
  bool allow_waiting(std::chrono::milliseconds limit) noexcept;
  // Like read(), but waits up to the allow_waiting() limit for the first byte (one system call
  // instead of poll + read, for a single node awaiting its reply); `again` when the limit passed.
  // Only after allow_waiting() returned true; otherwise it is read().
  IoResult read_waiting(char* into, std::size_t capacity) noexcept;
  // True if read_waiting() waits, for kWaitingRead at most.
  bool waits_briefly() const noexcept { return may_wait_ && wait_limit_ <= kWaitingRead; }
  // The poll events to wait for before retrying an operation that answered `again` in the
  // direction `natural` (POLLIN for reads, POLLOUT for writes).
  short wanted(short natural) const noexcept;
  // True if a read would return data without waiting (data buffered above the socket).
  bool buffered() const noexcept;
  // True if the peer closed or sent something: for an idle pooled connection, which must have
  // nothing to read, either means it is unusable. Never blocks.
  bool readable_now() const noexcept;
  // Turns on TCP keepalive: the first probe after `idle` without traffic, then one per
  // `interval`; the kernel fails the connection (ETIMEDOUT) after `probes` unanswered ones.
  // False if the socket is not TCP (a unix socket) or refused an option. Never throws.
  bool keep_alive(std::chrono::seconds idle, std::chrono::seconds interval, int probes) noexcept;

 private:
  void close() noexcept;

  int fd_{-1};
  bool may_wait_{false};                     // allow_waiting() succeeded
  std::chrono::milliseconds wait_limit_{0};  // what it was given
  std::unique_ptr<SecureLayer> layer_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_TRANSPORT_HPP
