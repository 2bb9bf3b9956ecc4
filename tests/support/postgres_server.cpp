#include "support/postgres_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace redlock::test {
namespace {

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("postgres harness: no free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Runs a shell command; returns its output (stdout and stderr) and sets `status`.
std::string run(const std::string& command, int& status) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("postgres harness: popen failed");
  char buf[512];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  status = ::pclose(pipe);
  return out;
}

// The signal goes to the postmaster and its children (backends share no process group with
// it, so each child is found by its parent pid).
void signal_all(pid_t postmaster, int sig) {
  int status = 0;
  std::string kids = run("pgrep -P " + std::to_string(postmaster), status);
  ::kill(postmaster, sig);
  std::size_t pos = 0;
  while (pos < kids.size()) {
    std::size_t end = kids.find('\n', pos);
    if (end == std::string::npos) end = kids.size();
    pid_t kid = std::atoi(kids.substr(pos, end - pos).c_str());
    if (kid > 0) ::kill(kid, sig);
    pos = end + 1;
  }
}

}  // namespace

std::string PostgresServer::bin_dir() {
  const char* env = std::getenv("REDLOCK_PG_BIN");
  return env && *env ? env : "/usr/lib/postgresql/15/bin";
}

bool PostgresServer::available() {
  return ::access((bin_dir() + "/initdb").c_str(), X_OK) == 0 &&
         ::access((bin_dir() + "/pg_ctl").c_str(), X_OK) == 0 &&
         ::access("/usr/sbin/runuser", X_OK) == 0;
}

PostgresServer::PostgresServer() {
  char tmpl[] = "/tmp/redlock-pg-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("postgres harness: mkdtemp failed");
  dir_ = tmpl;
  port_ = free_port();
  int status = 0;
  std::string bin = bin_dir();
  std::string out = run("chown postgres " + dir_ + " && runuser -u postgres -- " + bin +
                            "/initdb -D " + dir_ + "/data -A trust -U postgres",
                        status);
  if (status == 0) {
    out += run("runuser -u postgres -- " + bin + "/pg_ctl -D " + dir_ + "/data -l " + dir_ +
                   "/data/log -o \"-p " + std::to_string(port_) + " -k " + dir_ +
                   " -c listen_addresses=127.0.0.1 -c fsync=off\" -w start",
               status);
  }
  std::ifstream pidfile(dir_ + "/data/postmaster.pid");
  pidfile >> pid_;
  if (status != 0 || pid_ <= 0) {
    stop();
    throw std::runtime_error("postgres harness: server did not start:\n" + out);
  }
}

PostgresServer::~PostgresServer() { stop(); }

void PostgresServer::stop() noexcept {
  if (pid_ > 0) {
    signal_all(pid_, SIGCONT);
    ::kill(pid_, SIGQUIT);
    for (int i = 0; i < 500 && ::kill(pid_, 0) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (::kill(pid_, 0) == 0) signal_all(pid_, SIGKILL);
    pid_ = 0;
  }
  if (!dir_.empty()) {
    int status = 0;
    run("rm -rf " + dir_, status);
  }
}

std::string PostgresServer::uri() const {
  return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/postgres";
}

std::string PostgresServer::psql(const std::string& sql) const {
  int status = 0;
  std::string out =
      run(bin_dir() + "/psql -X -A -t -q -d '" + uri() + "' -c \"" + sql + "\"", status);
  if (status != 0) throw std::runtime_error("psql failed: " + out);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void PostgresServer::pause() const { signal_all(pid_, SIGSTOP); }
void PostgresServer::resume() const { signal_all(pid_, SIGCONT); }

}  // namespace redlock::test
