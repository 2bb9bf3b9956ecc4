#include "support/postgres_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

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

// The postmaster and its children (the backends are found by their parent pid in /proc).
std::vector<pid_t> processes(pid_t postmaster) {
  std::vector<pid_t> out;
  if (postmaster <= 0) return out;
  out.push_back(postmaster);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size()) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == postmaster) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// True while any of `pids` runs (a zombie does not).
bool any_alive(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z')
      return true;
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  const std::string s = all.str();
  return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
}

}  // namespace

std::string PostgresServer::bin_dir() {
  const char* env = std::getenv("REDLOCK_PG_BIN");
  return env && *env ? env : "/usr/lib/postgresql/15/bin";
}

bool PostgresServer::available() {
  return ::access((bin_dir() + "/initdb").c_str(), X_OK) == 0 &&
         ::access((bin_dir() + "/postgres").c_str(), X_OK) == 0 &&
         ::access("/usr/sbin/runuser", X_OK) == 0 && ::access("/usr/bin/setpriv", X_OK) == 0;
}

PostgresServer::PostgresServer() {
  char tmpl[] = "/tmp/redlock-pg-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("postgres harness: mkdtemp failed");
  dir_ = tmpl;
  port_ = free_port();
  int status = 0;
  const std::string out = run("chown postgres " + dir_ + " && runuser -u postgres -- " + bin_dir() +
                                  "/initdb --no-sync -D " + dir_ + "/data -A trust -U postgres",
                              status);
  try {
    if (status != 0) throw std::runtime_error("postgres harness: initdb failed:\n" + out);
    start();
  } catch (...) {
    stop();
    remove_dir();
    throw;
  }
}

PostgresServer::~PostgresServer() {
  stop();
  remove_dir();
}

// The postmaster is our child: setpriv drops to the postgres user and asks for SIGKILL when
// the thread that started it dies, so a crashed test never leaves a server behind.
void PostgresServer::start() {
  std::vector<std::string> args = {"setpriv",
                                   "--reuid",
                                   "postgres",
                                   "--regid",
                                   "postgres",
                                   "--init-groups",
                                   "--pdeathsig",
                                   "KILL",
                                   bin_dir() + "/postgres",
                                   "-D",
                                   dir_ + "/data",
                                   "-p",
                                   std::to_string(port_),
                                   "-k",
                                   dir_,
                                   "-c",
                                   "listen_addresses=127.0.0.1",
                                   "-c",
                                   "fsync=off",
                                   "-c",
                                   "full_page_writes=off"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = dir_ + "/server.log";
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("postgres harness: fork failed");
  if (child == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  pid_ = child;
  const std::string probe = "host=127.0.0.1 port=" + std::to_string(port_) +
                            " user=postgres dbname=postgres connect_timeout=2";
  for (int i = 0; i < 300; ++i) {  // up to 15 s
    int status = 0;
    run(bin_dir() + "/pg_isready -q -d '" + probe + "'", status);
    if (status == 0) return;
    if (::waitpid(child, &status, WNOHANG) == child) {
      pid_ = 0;
      throw std::runtime_error("postgres harness: postgres exited:\n" + read_file(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("postgres harness: no connections accepted:\n" + read_file(log));
}

void PostgresServer::stop() noexcept {
  if (pid_ <= 0) return;
  const std::vector<pid_t> all = processes(pid_);
  for (pid_t p : all) {
    ::kill(p, SIGCONT);
    ::kill(p, SIGKILL);
  }
  ::waitpid(pid_, nullptr, 0);
  // Every backend must be gone (a zombie counts as gone) before a restart: until then they
  // hold the shared memory the new postmaster needs.
  for (int i = 0; i < 250 && any_alive(all); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pid_ = 0;
  std::error_code ignored;
  std::filesystem::remove(dir_ + "/data/postmaster.pid", ignored);
}

void PostgresServer::restart() {
  stop();
  start();
}

void PostgresServer::remove_dir() noexcept {
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
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

void PostgresServer::pause() const {
  for (pid_t p : processes(pid_)) ::kill(p, SIGSTOP);
}
void PostgresServer::resume() const {
  for (pid_t p : processes(pid_)) ::kill(p, SIGCONT);
}

}  // namespace redlock::test
