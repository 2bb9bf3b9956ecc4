// tests/support/zookeeper_server.cpp: see zookeeper_server.hpp.
#include "support/zookeeper_server.hpp"

#include <arpa/inet.h>    // htons
#include <netinet/in.h>   // sockaddr_in
#include <poll.h>         // poll
#include <signal.h>       // kill
#include <sys/prctl.h>    // prctl
#include <sys/socket.h>   // socket
#include <sys/syscall.h>  // SYS_close_range
#include <sys/wait.h>     // waitpid
#include <unistd.h>       // fork, execvp

#include <fcntl.h>  // open

#include <cerrno>      // errno
#include <cstdlib>     // std::getenv
#include <cstring>     // std::strerror
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ofstream
#include <stdexcept>   // std::runtime_error
#include <thread>      // std::this_thread::sleep_for
#include <vector>      // std::vector

namespace redlock::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// A TCP connection to 127.0.0.1:port, or -1.
int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A port that 127.0.0.1 can bind now (the kernel's choice).
int pick_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("zookeeper_server: socket: " + std::string(strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  if (port <= 0) throw std::runtime_error("zookeeper_server: found no free port");
  return port;
}

char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() ? '?' : line[paren + 2];
}

std::string tail_of(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
}

}  // namespace

bool ZooKeeperServer::available() {
  const std::string jar = env_or("REDLOCK_ZOOKEEPER_CLASSPATH", "/usr/share/java/zookeeper.jar");
  const std::string java = env_or("REDLOCK_JAVA", "java");
  if (java.find('/') != std::string::npos) return ::access(java.c_str(), X_OK) == 0;
  const std::string path = env_or("PATH", "/usr/bin:/bin");
  bool found = false;
  for (std::size_t start = 0; start <= path.size() && !found;) {
    const auto colon = std::min(path.find(':', start), path.size());
    found = ::access((path.substr(start, colon - start) + "/" + java).c_str(), X_OK) == 0;
    start = colon + 1;
  }
  // A classpath may be a list or a wildcard: only a single file is checked.
  const bool single = jar.find_first_of(":*") == std::string::npos;
  return found && (!single || ::access(jar.c_str(), R_OK) == 0);
}

ZooKeeperServer::ZooKeeperServer(std::chrono::milliseconds tick) : tick_(tick) {
  const std::string base = env_or("TMPDIR", "/tmp");
  std::string pattern = base + "/redlock-zk-" + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("zookeeper_server: mkdtemp: " + std::string(strerror(errno)));
  }
  dir_ = pattern;
  port_ = pick_port();
  try {
    write_config();
    start();
  } catch (...) {
    kill9();
    std::error_code ec;
    fs::remove_all(dir_, ec);
    throw;
  }
}

ZooKeeperServer::~ZooKeeperServer() {
  kill9();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string ZooKeeperServer::uri(std::string_view suffix) const {
  return "zookeeper://127.0.0.1:" + std::to_string(port_) + std::string(suffix);
}

void ZooKeeperServer::write_config() const {
  std::ofstream out(dir_ + "/zoo.cfg");
  out << "tickTime=" << tick_.count() << "\n"
      << "dataDir=" << dir_ << "/data\n"
      << "clientPort=" << port_ << "\n"
      << "clientPortAddress=127.0.0.1\n"
      << "maxClientCnxns=0\n"
      << "minSessionTimeout=" << 2 * tick_.count() << "\n"
      << "maxSessionTimeout=60000\n";
  if (!out) throw std::runtime_error("zookeeper_server: cannot write " + dir_ + "/zoo.cfg");
}

void ZooKeeperServer::start() {
  const std::string java = env_or("REDLOCK_JAVA", "java");
  const std::string classpath =
      env_or("REDLOCK_ZOOKEEPER_CLASSPATH", "/usr/share/java/zookeeper.jar");
  const std::string config = dir_ + "/zoo.cfg";
  const std::string log = dir_ + "/stdout.log";
  std::vector<std::string> args{java,
                                "-Xmx128m",
                                "-XX:+UseSerialGC",
                                "-XX:TieredStopAtLevel=1",
                                "-Dzookeeper.admin.enableServer=false",
                                "-Dzookeeper.4lw.commands.whitelist=ruok,srvr",
                                "-Dzookeeper.forceSync=no",
                                "-cp",
                                classpath,
                                "org.apache.zookeeper.server.ZooKeeperServerMain",
                                config};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (out < 0) throw std::runtime_error("zookeeper_server: open " + log);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) {  // only async-signal-safe calls until exec
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::syscall(SYS_close_range, 3U, ~0U, 0U);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out);
  if (child < 0)
    throw std::runtime_error("zookeeper_server: fork: " + std::string(strerror(errno)));
  pid_ = child;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) {
      pid_ = -1;
      throw std::runtime_error("zookeeper_server: the server exited at start:\n" + tail_of(log));
    }
    if (answers(std::chrono::milliseconds(500))) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill9();
  throw std::runtime_error("zookeeper_server: no answer within 30 s:\n" + tail_of(log));
}

std::string ZooKeeperServer::ask(std::string_view word, std::chrono::milliseconds timeout) const {
  const int fd = connect_loopback(port_);
  if (fd < 0) return {};
  bool ok = ::send(fd, word.data(), word.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(word.size());
  std::string reply;
  const auto deadline = Clock::now() + timeout;
  while (ok && Clock::now() < deadline) {  // the server closes the connection after its reply
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (::poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) break;
    char buffer[512];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply;
}

bool ZooKeeperServer::answers(std::chrono::milliseconds timeout) const {
  return ask("ruok", timeout).compare(0, 4, "imok") == 0;
}

void ZooKeeperServer::pause() {
  const pid_t pid = pid_;
  if (pid <= 0) return;
  ::kill(pid, SIGSTOP);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (process_state(pid) != 'T' && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ZooKeeperServer::resume() {
  const pid_t pid = pid_;
  if (pid <= 0) return;
  ::kill(pid, SIGCONT);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (process_state(pid) == 'T' && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ZooKeeperServer::kill9() {
  const pid_t pid = pid_.exchange(-1);
  if (pid <= 0) return;
  ::kill(pid, SIGCONT);
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

void ZooKeeperServer::restart() {
  kill9();
  start();
}

}  // namespace redlock::test
