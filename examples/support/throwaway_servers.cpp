// examples/support/throwaway_servers.cpp: see throwaway_servers.hpp.
#include "throwaway_servers.hpp"

#include <arpa/inet.h>   // htonl, htons, ntohs
#include <fcntl.h>       // open, O_WRONLY
#include <netinet/in.h>  // sockaddr_in
#include <signal.h>      // kill, SIGKILL, SIGSTOP, SIGCONT
#include <sys/prctl.h>   // prctl(PR_SET_PDEATHSIG)
#include <sys/socket.h>  // socket, bind, connect
#include <sys/time.h>    // timeval
#include <sys/wait.h>    // waitpid
#include <unistd.h>      // fork, execlp, close, dup2

#include <chrono>     // std::chrono
#include <cstdint>    // std::uint16_t
#include <cstring>    // std::strncmp
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string, std::to_string
#include <thread>     // std::this_thread::sleep_for

namespace example {
namespace {

// A loopback TCP socket, closed with its scope.
struct Socket {
  int fd{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  return addr;
}

// A port the kernel just handed out (port 0), so probably free. 0 on failure.
int free_port() {
  Socket s;
  sockaddr_in addr = loopback(0);
  socklen_t len = sizeof addr;
  if (s.fd < 0 || ::bind(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(s.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return 0;
  }
  return ntohs(addr.sin_port);
}

// True when something on the port answers PING with +PONG within about a second.
bool answers_ping(int port) {
  Socket s;
  const timeval timeout{1, 0};
  ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr = loopback(port);
  if (s.fd < 0 || ::connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return false;
  }
  if (::send(s.fd, "PING\r\n", 6, MSG_NOSIGNAL) != 6) return false;
  char reply[8] = {};
  return ::recv(s.fd, reply, sizeof reply, 0) >= 5 && std::strncmp(reply, "+PONG", 5) == 0;
}

}  // namespace

ThrowawayServer::ThrowawayServer() {
  for (int attempt = 0; attempt < 10; ++attempt) {
    if (spawn_and_wait(free_port())) return;
  }
  throw std::runtime_error("could not start redis-server (is it installed and in PATH?)");
}

ThrowawayServer::~ThrowawayServer() { kill9(); }

redlock::Endpoint ThrowawayServer::endpoint() const {
  return redlock::Endpoint::parse("redis://127.0.0.1:" + std::to_string(port_));
}

void ThrowawayServer::pause() noexcept {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void ThrowawayServer::resume() noexcept {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void ThrowawayServer::kill9() noexcept {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void ThrowawayServer::restart() {
  kill9();
  if (!spawn_and_wait(port_)) {
    throw std::runtime_error("redis-server did not restart on port " + std::to_string(port_));
  }
}

bool ThrowawayServer::spawn_and_wait(int port) {
  if (port <= 0) return false;
  const std::string port_arg = std::to_string(port);
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {  // child: quiet, dies with us
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::execlp("redis-server", "redis-server", "--port", port_arg.c_str(), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", "/tmp", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  pid_ = pid;
  port_ = port;
  for (int i = 0; i < 100; ++i) {                     // up to about 5 s
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {  // exited: the port was taken
      pid_ = -1;
      return false;
    }
    if (answers_ping(port_)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill9();
  return false;
}

ThrowawayServers::ThrowawayServers(std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) servers_.push_back(std::make_unique<ThrowawayServer>());
}

std::vector<redlock::Endpoint> ThrowawayServers::endpoints() const {
  std::vector<redlock::Endpoint> out;
  for (const auto& s : servers_) out.push_back(s->endpoint());
  return out;
}

}  // namespace example
