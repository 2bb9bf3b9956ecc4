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

#include <chrono>      // std::chrono
#include <cstdint>     // std::uint16_t
#include <cstdlib>     // std::system, std::atexit
#include <cstring>     // std::strncmp
#include <filesystem>  // std::filesystem::remove_all
#include <fstream>     // std::ofstream, std::ifstream
#include <iterator>    // std::istreambuf_iterator
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string, std::to_string
#include <thread>      // std::this_thread::sleep_for
#include <utility>
#include <vector>  // std::vector

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

// A CA and a server certificate it issued, EC P-256, valid for a day.
constexpr const char* kMakeCerts = R"(set -e
cd "$1"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -subj "/CN=redlock demo CA" -days 1 -out ca.pem \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
key server.key
openssl req -new -key server.key -subj "/CN=localhost" -out server.csr
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
  -extfile server.ext -out server.pem 2>/dev/null
)";

TlsFiles make_tls_files() {
  std::string dir = "/tmp/redlock-demo-certs-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("tls_files: mkdtemp failed");
  std::ofstream(dir + "/make.sh") << kMakeCerts;
  const std::string command = "bash '" + dir + "/make.sh' '" + dir + "' >'" + dir + "/log' 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(dir + "/log");
    throw std::runtime_error("could not make TLS certificates with openssl: " +
                             std::string(std::istreambuf_iterator<char>(log), {}));
  }
  return TlsFiles{dir, dir + "/ca.pem", dir + "/server.pem", dir + "/server.key"};
}

}  // namespace

const TlsFiles& tls_files() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors
  // registered before it, so it must not read a destroyed object.
  static const TlsFiles& files = *[] {
    auto* made = new TlsFiles(make_tls_files());
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(tls_files().dir, ignored);
    });
    return made;
  }();
  return files;
}

ThrowawayServer::ThrowawayServer(Tls tls) : ThrowawayServer(tls, {}, {}) {}

ThrowawayServer::ThrowawayServer(Tls tls, std::vector<std::string> extra_args,
                                 std::string sentinel_config)
    : tls_(tls), extra_args_(std::move(extra_args)), sentinel_config_(std::move(sentinel_config)) {
  if (tls_ == Tls::on) tls_files();  // made before any child starts
  for (int attempt = 0; attempt < 10; ++attempt) {
    if (tls_ == Tls::on) tls_port_ = free_port();
    if (spawn_and_wait(free_port())) return;
  }
  throw std::runtime_error("could not start redis-server (is it installed and in PATH?)");
}

ThrowawayServer::~ThrowawayServer() { kill9(); }

redlock::Endpoint ThrowawayServer::endpoint() const {
  if (tls_ == Tls::off)
    return redlock::Endpoint::parse("redis://127.0.0.1:" + std::to_string(port_));
  return redlock::Endpoint::parse("rediss://127.0.0.1:" + std::to_string(tls_port_) +
                                  "?cacert=" + tls_files().ca);
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
  std::vector<std::string> args{"redis-server"};
  if (!sentinel_config_.empty()) args.insert(args.end(), {sentinel_config_, "--sentinel"});
  args.insert(args.end(), {"--port", port_arg, "--bind", "127.0.0.1", "--save", "", "--appendonly",
                           "no", "--dir", "/tmp"});
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  if (tls_ == Tls::on) {
    const TlsFiles& files = tls_files();
    args.insert(args.end(), {"--tls-port", std::to_string(tls_port_), "--tls-cert-file", files.cert,
                             "--tls-key-file", files.key, "--tls-ca-cert-file", files.ca,
                             "--tls-auth-clients", "no"});
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {  // child: quiet, dies with us
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::execvp("redis-server", argv.data());
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

ThrowawayServers::ThrowawayServers(std::size_t n, Tls tls) {
  for (std::size_t i = 0; i < n; ++i) servers_.push_back(std::make_unique<ThrowawayServer>(tls));
}

std::vector<redlock::Endpoint> ThrowawayServers::endpoints() const {
  std::vector<redlock::Endpoint> out;
  for (const auto& s : servers_) out.push_back(s->endpoint());
  return out;
}

}  // namespace example
