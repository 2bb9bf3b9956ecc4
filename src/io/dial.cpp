// src/io/dial.cpp: non-blocking connect, finished by the caller's poll loop.
#include "io/dial.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include <redlock/errors.hpp>

namespace redlock {
namespace detail {
namespace {

[[noreturn]] void refused(const std::string& address, int error) {
  throw ConnectionError(
      fmt::format("redlock: cannot connect to {} ({}); check that redis-server is running there",
                  address, std::strerror(error)));
}

// One connect attempt on a fresh non-blocking socket. Returns the socket (connected or in
// progress), or an empty Dial with `error` set.
Dial try_connect(int family, const sockaddr* to, socklen_t length, int& error) {
  Dial dial(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!dial) {
    error = errno;
    return dial;
  }
  if (family != AF_UNIX) {
    const int one = 1;
    ::setsockopt(dial.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  int rc = 0;
  do {
    rc = ::connect(dial.fd(), to, length);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0 || errno == EINPROGRESS) return dial;
  // A unix socket whose backlog is full answers EAGAIN at once instead of waiting.
  error = errno;
  return Dial();
}

Dial dial_unix(const std::string& path, const std::string& address) {
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  if (path.size() >= sizeof to.sun_path) refused(address, ENAMETOOLONG);
  std::memcpy(to.sun_path, path.data(), path.size());
  int error = 0;
  Dial dial = try_connect(AF_UNIX, reinterpret_cast<const sockaddr*>(&to), sizeof to, error);
  if (!dial) refused(address, error);
  return dial;
}

}  // namespace

Dial::~Dial() {
  if (fd_ >= 0) ::close(fd_);
}

Dial& Dial::operator=(Dial&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    target = std::move(other.target);
    epoch = other.epoch;
    fd_ = other.release();
  }
  return *this;
}

Dial start_dial(const Endpoint& endpoint, const std::string& address) {
  if (!endpoint.unix_socket.empty()) return dial_unix(endpoint.unix_socket, address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint.port);
  const int rc = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    throw ConnectionError(fmt::format("redlock: cannot resolve {} ({}); check Endpoint::host",
                                      address, ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  int error = ECONNREFUSED;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    Dial dial = try_connect(a->ai_family, a->ai_addr, a->ai_addrlen, error);
    if (dial) return dial;
  }
  refused(address, error);
}

Transport finish_dial(Dial& dial, const std::string& address) {
  int error = 0;
  socklen_t length = sizeof error;
  if (::getsockopt(dial.fd(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
  if (error != 0) refused(address, error);
  return Transport(dial.release());
}

}  // namespace detail
}  // namespace redlock
