// src/io/dial.hpp: connecting without blocking. A connect is started on a non-blocking socket
// and finished when poll(2) reports the socket writable, so a batch can connect to several
// nodes, and read from the ones already connected, in one poll loop: a node whose accept queue
// is full (a paused server) then costs the others nothing.
//
//   Dial dial = start_dial(endpoint);            // throws ConnectionError on refusal
//   pollfd fd{dial.fd(), POLLOUT, 0};  ::poll(&fd, 1, timeout_ms);
//   Transport transport = finish_dial(dial);     // throws ConnectionError; still non-blocking
//
// A TLS connection will wrap the returned transport's socket in its SecureLayer and finish its
// handshake in the same poll loop (see io/transport.hpp).
#ifndef REDLOCK_SRC_IO_DIAL_HPP
#define REDLOCK_SRC_IO_DIAL_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <redlock/endpoint.hpp>

#include "io/transport.hpp"

namespace redlock {
namespace detail {

// A socket whose connect may still be in progress. Closes it unless finish_dial() took it.
class Dial {
 public:
  Dial() = default;
  explicit Dial(int fd) noexcept : fd_(fd) {}
  ~Dial();
  Dial(Dial&& other) noexcept
      : target(std::move(other.target)), epoch(other.epoch), fd_(other.release()) {}
  Dial& operator=(Dial&& other) noexcept;
  Dial(const Dial&) = delete;
  Dial& operator=(const Dial&) = delete;

  int fd() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

  // Through Sentinel: the master this connects to, and the locator's epoch when it was chosen.
  std::shared_ptr<const Endpoint> target;
  std::uint64_t epoch{0};

 private:
  int fd_{-1};
};

// Starts a connect to `endpoint` (TCP or unix socket) on a non-blocking, close-on-exec socket.
// Tries each resolved address until one is in progress or connected. Throws ConnectionError
// (naming `address`) if every address refused at once. Thread-safe.
Dial start_dial(const Endpoint& endpoint, const std::string& address);

// Completes a connect that poll() reported writable (or failed): checks SO_ERROR and hands the
// socket (still non-blocking) to a plain Transport. Throws ConnectionError naming `address`.
// Thread-safe.
Transport finish_dial(Dial& dial, const std::string& address);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_DIAL_HPP
