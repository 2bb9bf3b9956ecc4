// bench/etcd.cpp: Child (a program whose output is read with deadlines) and EtcdServer.
#include "etcd.hpp"

#include <arpa/inet.h>   // htonl, ntohs
#include <fcntl.h>       // open, O_WRONLY
#include <netinet/in.h>  // sockaddr_in
#include <poll.h>        // poll
#include <signal.h>      // kill, signal, sigprocmask
#include <sys/prctl.h>   // prctl, PR_SET_PDEATHSIG
#include <sys/socket.h>  // socket, bind, getsockname
#include <sys/wait.h>    // waitpid
#include <unistd.h>      // fork, execv, pipe, dup2, access

#include <algorithm>   // std::max
#include <cerrno>      // errno
#include <cstdlib>     // mkdtemp, getenv
#include <cstring>     // std::strerror
#include <filesystem>  // std::filesystem::remove_all
#include <stdexcept>   // std::runtime_error
#include <thread>      // std::this_thread
#include <utility>     // std::move

#include "common.hpp"  // now_ns

namespace bench {
namespace {

constexpr const char* kEtcd = "/usr/bin/etcd";
constexpr const char* kEtcdctl = "/usr/bin/etcdctl";

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

}  // namespace

Child::Child(const std::vector<std::string>& argv, Stderr err) : program_(argv.at(0)) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("pipe");
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) fail("fork");
  if (pid_ == 0) {  // only async-signal-safe calls until exec
    // Default signal handling: a bench started in the background by a shell ignores SIGINT and
    // SIGQUIT (and the bench ignores SIGPIPE), and ignored signals are inherited through exec;
    // a command of redlock-run's that ignored SIGINT would cost a hand-over its --grace.
    for (const int sig : {SIGINT, SIGQUIT, SIGPIPE, SIGHUP, SIGTERM}) ::signal(sig, SIG_DFL);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(fds[1], 1);
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(err == Stderr::merged ? fds[1] : null, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  out_ = fds[0];
}

Child::~Child() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_ >= 0) ::close(out_);
}

bool Child::fill(std::int64_t deadline_ns) {
  const std::int64_t left = deadline_ns - now_ns();
  if (left <= 0) return false;
  pollfd p{out_, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, left / 1'000'000)));
  if (ready <= 0) return ready == 0 || errno == EINTR;  // a timeout is seen by the next call
  char chunk[4096];
  const ssize_t n = ::read(out_, chunk, sizeof chunk);
  if (n <= 0) return false;
  buffer_.append(chunk, static_cast<std::size_t>(n));
  return true;
}

std::string Child::read_line(std::int64_t deadline_ns) {
  for (;;) {
    const std::size_t eol = buffer_.find('\n');
    if (eol != std::string::npos) {
      std::string line = buffer_.substr(0, eol);
      buffer_.erase(0, eol + 1);
      return line;
    }
    if (!fill(deadline_ns)) {
      throw std::runtime_error(program_ + ": no line of output in time (read so far: '" + buffer_ +
                               "')");
    }
  }
}

std::string Child::read_until(const std::string& needle, std::int64_t deadline_ns) {
  for (;;) {
    std::string line = read_line(deadline_ns);
    if (line.find(needle) != std::string::npos) return line;
  }
}

std::string Child::read_all(std::int64_t deadline_ns) {
  while (fill(deadline_ns)) {
  }
  return std::move(buffer_);
}

void Child::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int Child::wait(std::int64_t deadline_ns) {
  int status = 0;
  while (pid_ > 0) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    if (now_ns() >= deadline_ns) ::kill(pid_, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return status;
}

bool etcd_available() { return ::access(kEtcd, X_OK) == 0 && ::access(kEtcdctl, X_OK) == 0; }

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) fail("bind 127.0.0.1:0");
  return ntohs(addr.sin_port);
}

EtcdServer::EtcdServer() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/redlock-etcd-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) fail("mkdtemp " + pattern);
  dir_ = pattern;
  const std::string peer = "http://127.0.0.1:" + std::to_string(free_loopback_port());
  endpoint_ = "http://127.0.0.1:" + std::to_string(free_loopback_port());
  server_ = std::make_unique<Child>(std::vector<std::string>{
      kEtcd, "--name", "bench", "--data-dir", dir_ + "/data", "--listen-client-urls", endpoint_,
      "--advertise-client-urls", endpoint_, "--listen-peer-urls", peer,
      "--initial-advertise-peer-urls", peer, "--initial-cluster", "bench=" + peer, "--log-level",
      "error", "--logger", "zap"});
  const std::int64_t until = now_ns() + 20'000'000'000;
  while (now_ns() < until) {
    Child health(ctl({"endpoint", "health", "--command-timeout=1s"}));
    const int status = health.wait(until);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  server_.reset();
  std::filesystem::remove_all(dir_);
  throw std::runtime_error("etcd did not answer on " + endpoint_ + " within 20 s");
}

EtcdServer::~EtcdServer() {
  server_.reset();  // SIGKILL, reaped
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::vector<std::string> EtcdServer::ctl(std::vector<std::string> args) const {
  std::vector<std::string> argv{kEtcdctl, "--endpoints=" + endpoint_};
  for (std::string& a : args) argv.push_back(std::move(a));
  return argv;
}

}  // namespace bench
