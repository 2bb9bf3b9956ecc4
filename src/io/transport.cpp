// src/io/transport.cpp: non-blocking socket reads and writes, and their errors classified by errno.
#include "io/transport.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace redlock {
namespace detail {

IoError classify(int code) noexcept {
  switch (code) {
    case 0:
      return IoError::none;
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case EINTR:
    case EINPROGRESS:
      return IoError::again;
    case ETIMEDOUT:
      return IoError::timeout;
    case ECONNREFUSED:
      return IoError::refused;
    case ECONNRESET:
    case EPIPE:
    case ECONNABORTED:
      return IoError::reset;
    default:
      return IoError::other;
  }
}

namespace {

IoResult from_syscall(ssize_t n) noexcept {
  if (n > 0) return IoResult{static_cast<std::size_t>(n), IoError::none, 0};
  if (n == 0) return IoResult{0, IoError::closed, 0};
  const int code = errno;
  return IoResult{0, classify(code), code};
}

}  // namespace

Transport::Transport(int fd, std::unique_ptr<SecureLayer> layer) noexcept
    : fd_(fd), layer_(std::move(layer)) {}

Transport::~Transport() { close(); }

Transport::Transport(Transport&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      may_wait_(std::exchange(other.may_wait_, false)),
      layer_(std::move(other.layer_)) {}

Transport& Transport::operator=(Transport&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    may_wait_ = std::exchange(other.may_wait_, false);
    layer_ = std::move(other.layer_);
  }
  return *this;
}

void Transport::close() noexcept {
  if (fd_ < 0) return;
  if (layer_) layer_->close(fd_);
  ::close(fd_);
  fd_ = -1;
}

Handshake Transport::handshake() noexcept {
  return layer_ ? layer_->handshake(fd_) : Handshake::ready;
}

IoResult Transport::read(char* into, std::size_t capacity) noexcept {
  if (layer_) return layer_->read(fd_, into, capacity);
  return from_syscall(::recv(fd_, into, capacity, MSG_DONTWAIT));
}

IoResult Transport::write(const char* from, std::size_t length) noexcept {
  if (layer_) return layer_->write(fd_, from, length);
  // MSG_NOSIGNAL: a peer that closed makes this EPIPE, never a SIGPIPE in the caller.
  return from_syscall(::send(fd_, from, length, MSG_NOSIGNAL | MSG_DONTWAIT));
}

bool Transport::allow_waiting(std::chrono::milliseconds limit) noexcept {
  if (fd_ < 0) return false;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(limit.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((limit.count() % 1000) * 1000);
  const int flags = ::fcntl(fd_, F_GETFL);
  may_wait_ = flags >= 0 && ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
              ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) == 0;
  wait_limit_ = limit;
  return may_wait_;
}

IoResult Transport::read_waiting(char* into, std::size_t capacity) noexcept {
  if (!may_wait_) return read(into, capacity);
  if (layer_) return layer_->read_waiting(fd_, into, capacity);
  return from_syscall(::recv(fd_, into, capacity, 0));  // bounded by SO_RCVTIMEO
}

short Transport::wanted(short natural) const noexcept {
  const short layer_wants = layer_ ? layer_->wanted() : short{0};
  return layer_wants != 0 ? layer_wants : natural;
}

bool Transport::buffered() const noexcept { return layer_ && layer_->buffered(); }

bool Transport::readable_now() const noexcept {
  pollfd fd{fd_, POLLIN, 0};
  return buffered() || ::poll(&fd, 1, 0) != 0;
}

bool Transport::keep_alive(std::chrono::seconds idle, std::chrono::seconds interval,
                           int probes) noexcept {
  const int on = 1;
  const int idle_s = static_cast<int>(idle.count());
  const int interval_s = static_cast<int>(interval.count());
  return ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) == 0 &&
         ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s) == 0 &&
         ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s) == 0 &&
         ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes) == 0;
}

}  // namespace detail
}  // namespace redlock
