// tests/support/redis_server.cpp: see redis_server.hpp.
#include "support/redis_server.hpp"

#include "support/tls_certs.hpp"

#include <fcntl.h>        // open
#include <netinet/in.h>   // sockaddr_in
#include <pthread.h>      // pthread_sigmask
#include <signal.h>       // kill, sigprocmask
#include <sys/prctl.h>    // prctl
#include <sys/socket.h>   // socket, bind
#include <sys/syscall.h>  // SYS_close_range
#include <sys/time.h>     // timeval
#include <sys/un.h>       // sockaddr_un
#include <sys/wait.h>     // waitpid
#include <unistd.h>       // fork, execve

#include <hiredis/hiredis.h>

#include <algorithm>     // std::min
#include <cerrno>        // errno
#include <cstdint>       // std::uint64_t
#include <cstdio>        // std::snprintf
#include <cstdlib>       // std::getenv, std::atexit
#include <cstring>       // std::strerror
#include <ctime>         // timespec
#include <filesystem>    // std::filesystem
#include <fstream>       // std::ifstream
#include <iterator>      // std::istreambuf_iterator
#include <map>           // std::map
#include <mutex>         // std::mutex
#include <random>        // std::mt19937_64
#include <stdexcept>     // std::runtime_error
#include <system_error>  // std::error_code
#include <thread>        // std::this_thread::sleep_for
#include <utility>       // std::move

extern "C" char** environ;  // NOLINT(readability-redundant-declaration)

namespace redlock::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int kPortLow = 20000;  // ports are picked from [kPortLow, kPortHigh)
constexpr int kPortHigh = 60000;
constexpr int kMaxPortAttempts = 20;
constexpr auto kStartTimeout = std::chrono::seconds(5);
constexpr auto kRestartBusyWindow = std::chrono::seconds(5);
constexpr auto kPollInterval = milliseconds(5);
constexpr std::size_t kTailChars = 2000;

// ---------------------------------------------------------------------------------------------
// Process-wide registry of live servers: keeps ports distinct within the process and lets the
// atexit handler kill whatever is still running when the process exits.

struct Entry {
  pid_t pid = -1;
  int port = 0;
  int tls_port = 0;
  std::string dir;
};

struct Registry {
  std::mutex mu;
  std::map<const void*, Entry> entries;
  std::mt19937_64 rng;
};

void kill_and_reap(pid_t pid) noexcept {
  ::kill(pid, SIGCONT);
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

void kill_all_at_exit();

Registry& registry() {
  // Leaked on purpose: the atexit handler may run after static destructors.
  static Registry* const reg = [] {
    auto* r = new Registry;
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), static_cast<unsigned>(::getpid()),
                      static_cast<unsigned>(Clock::now().time_since_epoch().count())};
    r->rng.seed(seq);
    std::atexit(kill_all_at_exit);
    return r;
  }();
  return *reg;
}

void kill_all_at_exit() {
  Registry& reg = registry();
  std::unique_lock<std::mutex> lock(reg.mu, std::defer_lock);
  // Another thread might hold the lock while exit() runs; don't deadlock over it (the servers
  // still die through PR_SET_PDEATHSIG).
  for (int i = 0; i < 100 && !lock.try_lock(); ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  if (!lock.owns_lock()) return;
  for (auto& [owner, entry] : reg.entries) {
    if (entry.pid > 0) kill_and_reap(entry.pid);
    entry.pid = -1;
    if (!entry.dir.empty()) {
      std::error_code ec;
      fs::remove_all(entry.dir, ec);
    }
  }
}

void registry_set_dir(const void* owner, const std::string& dir) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.entries[owner].dir = dir;
}

void registry_set_pid(const void* owner, pid_t pid) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.entries[owner].pid = pid;
}

// Returns the pid the registry holds for owner (-1 if none) and forgets it: whoever claims a pid
// is the one who kills and reaps it.
pid_t registry_claim_pid(const void* owner) noexcept {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.entries.find(owner);
  if (it == reg.entries.end()) return -1;
  return std::exchange(it->second.pid, -1);
}

void registry_erase(const void* owner) noexcept {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.entries.erase(owner);
}

// ---------------------------------------------------------------------------------------------
// Ports.

// [first, last) ranges to pick from: [kPortLow, kPortHigh) minus the kernel's ephemeral range,
// so that restart() rarely finds its port taken by some outgoing connection.
const std::vector<std::pair<int, int>>& port_ranges() {
  static const std::vector<std::pair<int, int>> ranges = [] {
    std::vector<std::pair<int, int>> out;
    std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
    int eph_low = 0;
    int eph_high = -1;
    if (in >> eph_low >> eph_high && eph_low <= eph_high) {
      if (eph_low > kPortLow) out.emplace_back(kPortLow, std::min(kPortHigh, eph_low));
      if (eph_high + 1 < kPortHigh) out.emplace_back(std::max(kPortLow, eph_high + 1), kPortHigh);
    }
    int total = 0;
    for (const auto& [first, last] : out) total += last - first;
    if (total < 2000) out.assign(1, {kPortLow, kPortHigh});
    return out;
  }();
  return ranges;
}

// True if a listening socket could bind 127.0.0.1:port right now (with SO_REUSEADDR, like Redis).
bool port_bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // can't tell; let the server try
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A random port that no server of this process uses (as its port or TLS port), apart from the
// one of owner's that `replaced` names, and that is free right now. Caller holds reg.mu.
int free_port(Registry& reg, const void* owner, int Entry::*replaced) {
  const auto& ranges = port_ranges();
  int total = 0;
  for (const auto& [first, last] : ranges) total += last - first;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int n = static_cast<int>(reg.rng() % static_cast<std::uint64_t>(total));
    int port = 0;
    for (const auto& [first, last] : ranges) {
      if (n < last - first) {
        port = first + n;
        break;
      }
      n -= last - first;
    }
    bool taken = false;
    for (const auto& [other, entry] : reg.entries) {
      const bool own = other == owner;
      if ((!own || replaced != &Entry::port) && entry.port == port) taken = true;
      if ((!own || replaced != &Entry::tls_port) && entry.tls_port == port) taken = true;
    }
    if (taken || !port_bindable(port)) continue;
    return port;
  }
  throw std::runtime_error("redis_server: found no free TCP port on 127.0.0.1");
}

// Picks a random free port not used by any other server of this process and records it as
// owner's (`which`: its port or its TLS port).
int pick_port(const void* owner, int Entry::*which = &Entry::port) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  const int port = free_port(reg, owner, which);
  reg.entries[owner].*which = port;
  return port;
}

// ---------------------------------------------------------------------------------------------
// Files and paths.

bool is_executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }
bool is_readable(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

std::string find_redis_server() {
  if (const char* env = std::getenv("REDLOCK_REDIS_SERVER"); env != nullptr && *env != '\0') {
    if (!is_executable(env)) {
      throw std::runtime_error(std::string("redis_server: REDLOCK_REDIS_SERVER=") + env +
                               " is not executable");
    }
    return env;
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::string_view rest(path);
    while (!rest.empty()) {
      const std::size_t colon = rest.find(':');
      const std::string_view dir = rest.substr(0, colon);
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
      if (dir.empty()) continue;
      std::string candidate = std::string(dir) + "/redis-server";
      if (is_executable(candidate)) return candidate;
    }
  }
  for (const char* candidate : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
    if (is_executable(candidate)) return candidate;
  }
  throw std::runtime_error("redis_server: redis-server not found on PATH");
}

const char* const kLibDirs[] = {"/lib/x86_64-linux-gnu",
                                "/usr/lib/x86_64-linux-gnu",
                                "/lib/aarch64-linux-gnu",
                                "/usr/lib/aarch64-linux-gnu",
                                "/lib64",
                                "/usr/lib64",
                                "/usr/local/lib",
                                "/lib",
                                "/usr/lib"};

// LD_PRELOAD entries for a faketime server.
//
// libfaketime 0.9.10 (Debian bookworm) deadlocks in jemalloc's initialisation, and Debian's
// redis-server links jemalloc: jemalloc's first malloc calls clock_gettime, libfaketime then
// initialises itself, which mallocs again (inside dlsym) -> recursion, hang. Preloading glibc's
// libc_malloc_debug.so.0 in front routes malloc/free/realloc/calloc/malloc_usable_size to glibc's
// allocator, so jemalloc is never used for allocations (Redis only asks it for statistics) and
// the recursion cannot happen.
std::vector<std::string> faketime_preload() {
  std::string faketime_lib;
  if (const char* env = std::getenv("REDLOCK_FAKETIME_LIB"); env != nullptr && *env != '\0') {
    faketime_lib = env;
  } else {
    for (const char* dir : kLibDirs) {
      for (const char* name : {"/faketime/libfaketime.so.1", "/libfaketime.so.1"}) {
        if (is_readable(std::string(dir) + name)) {
          faketime_lib = std::string(dir) + name;
          break;
        }
      }
      if (!faketime_lib.empty()) break;
    }
  }
  if (faketime_lib.empty() || !is_readable(faketime_lib)) {
    throw std::runtime_error(
        "redis_server: libfaketime.so.1 not found (install libfaketime or set "
        "REDLOCK_FAKETIME_LIB)");
  }
  std::vector<std::string> preload;
  for (const char* dir : kLibDirs) {
    std::string candidate = std::string(dir) + "/libc_malloc_debug.so.0";
    if (is_readable(candidate)) {
      preload.push_back(std::move(candidate));
      break;
    }
  }
  preload.push_back(std::move(faketime_lib));
  return preload;
}

std::string make_temp_dir(bool need_unix_socket) {
  std::string base = "/tmp";
  if (const char* env = std::getenv("TMPDIR"); env != nullptr && *env != '\0') base = env;
  std::error_code ec;
  if (fs::path abs = fs::absolute(base, ec); !ec) base = abs.string();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string pattern = "/redlock-test-" + std::to_string(::getpid()) + "-XXXXXX";
  // A unix socket path must fit in sockaddr_un::sun_path; fall back to /tmp if $TMPDIR is deep.
  if (need_unix_socket &&
      (base + pattern + "/redis.sock").size() >= sizeof(sockaddr_un{}.sun_path)) {
    base = "/tmp";
  }
  std::string path = base + pattern;
  std::vector<char> buffer(path.begin(), path.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) {
    const int err = errno;
    throw std::runtime_error("redis_server: mkdtemp(" + path + "): " + std::strerror(err));
  }
  return std::string(buffer.data());
}

std::uintmax_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  return ec ? 0 : size;
}

// The contents of path from offset on ("" if missing).
std::string read_from(const std::string& path, std::uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in) return {};
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return data;
}

std::string tail(const std::string& text, std::size_t n) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// State letter from /proc/<pid>/stat ('R', 'S', 'T', 'Z', ...), or '?' if unreadable.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '?';
  const std::size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return '?';
  return line[paren + 2];
}

// ---------------------------------------------------------------------------------------------
// Child side of fork(): only async-signal-safe calls from here to execve.

[[noreturn]] void exec_child(const char* path, char* const* argv, char* const* envp, int out_fd,
                             int null_fd, pid_t parent, const int* fds, std::size_t nfds) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(null_fd, STDIN_FILENO) < 0 || ::dup2(out_fd, STDOUT_FILENO) < 0 ||
      ::dup2(out_fd, STDERR_FILENO) < 0) {
    ::_exit(127);
  }
  // Don't leak the test process's descriptors (sockets!) into the server: a server holding a
  // copy of a client socket would keep it open after the test closed it.
  bool closed = false;
#ifdef SYS_close_range
  closed = ::syscall(SYS_close_range, 3U, ~0U, 0U) == 0;
#endif
  if (!closed) {
    for (std::size_t i = 0; i < nfds; ++i) {
      if (fds[i] > STDERR_FILENO) ::close(fds[i]);
    }
  }
  ::execve(path, argv, envp);
  static const char kMessage[] = "redis_server: execve of redis-server failed\n";
  const ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  (void)ignored;
  ::_exit(127);
}

// Descriptors open in this process (fallback for kernels without close_range).
std::vector<int> open_fds() {
  std::vector<int> fds;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    char* last = nullptr;
    const long fd = std::strtol(name.c_str(), &last, 10);
    if (last != name.c_str() && *last == '\0') fds.push_back(static_cast<int>(fd));
  }
  return fds;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// ---------------------------------------------------------------------------------------------
// hiredis helpers.

struct ContextDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

struct ReplyDeleter {
  void operator()(void* r) const noexcept { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval to_timeval(milliseconds ms) {
  if (ms.count() <= 0) ms = milliseconds(1);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// Blocks SIGPIPE for this thread while talking to a server that may die under us, and swallows
// a SIGPIPE raised meanwhile (hiredis writes with write(), not send(MSG_NOSIGNAL)).
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pipe_set;
      sigemptyset(&pipe_set);
      sigaddset(&pipe_set, SIGPIPE);
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t old_{};
  bool was_pending_ = false;
};

redlock::Reply convert(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
      return redlock::Reply(redlock::Reply::Type::string, std::string(r->str, r->len));
    case REDIS_REPLY_STATUS:
      return redlock::Reply(redlock::Reply::Type::status, std::string(r->str, r->len));
    case REDIS_REPLY_ERROR:
      return redlock::Reply(redlock::Reply::Type::error, std::string(r->str, r->len));
    case REDIS_REPLY_INTEGER:
      return redlock::Reply(static_cast<std::int64_t>(r->integer));
    case REDIS_REPLY_ARRAY: {
      std::vector<redlock::Reply> elements;
      elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) elements.push_back(convert(r->element[i]));
      return redlock::Reply(std::move(elements));
    }
    default:
      return redlock::Reply();
  }
}

enum class Probe { down, ready, foreign };

// One readiness probe: PING, and when it answers PONG, INFO server to make sure it is our
// process (not someone else's server that owned the port first).
Probe probe(int port, pid_t expected_pid) {
  SigpipeGuard guard;
  ContextPtr c(redisConnectWithTimeout("127.0.0.1", port, to_timeval(milliseconds(100))));
  if (!c || c->err != 0) return Probe::down;
  redisSetTimeout(c.get(), to_timeval(milliseconds(250)));
  ReplyPtr ping(static_cast<redisReply*>(redisCommand(c.get(), "PING")));
  if (!ping) return Probe::down;
  if (ping->type == REDIS_REPLY_ERROR) {
    // LOADING: still reading the AOF. Anything else (NOAUTH, ...) means it is up.
    return std::string_view(ping->str, ping->len).rfind("LOADING", 0) == 0 ? Probe::down
                                                                           : Probe::ready;
  }
  ReplyPtr info(static_cast<redisReply*>(redisCommand(c.get(), "INFO server")));
  if (info && info->type == REDIS_REPLY_STRING) {
    const std::string_view text(info->str, info->len);
    const std::size_t at = text.find("process_id:");
    if (at != std::string_view::npos) {
      const long pid = std::strtol(info->str + at + 11, nullptr, 10);
      if (pid != expected_pid) return Probe::foreign;
    }
  }
  return Probe::ready;
}

bool says_port_in_use(const std::string& output) {
  return output.find("Address already in use") != std::string::npos;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// RedisServer

RedisServer::RedisServer(ServerOptions options) : RedisServer(std::move(options), NoWait{}) {
  // The object is fully constructed once the delegated constructor returns, so the destructor
  // cleans up if this throws.
  finish_start();
}

RedisServer::RedisServer(ServerOptions options, NoWait /*tag*/) : options_(std::move(options)) {
  redis_path_ = find_redis_server();
  if (!options_.faketime.empty()) preload_ = faketime_preload();
  dir_ = make_temp_dir(options_.unix_socket);
  log_path_ = dir_ + "/redis.log";
  out_path_ = dir_ + "/stdout.log";
  if (options_.unix_socket) unix_socket_ = dir_ + "/redis.sock";
  try {
    registry_set_dir(this, dir_);
    spawn(pick_port(this));
  } catch (...) {
    stop_process();
    remove_dir();
    registry_erase(this);
    throw;
  }
}

RedisServer::~RedisServer() {
  stop_process();
  remove_dir();
  registry_erase(this);
}

int RedisServer::port() const { return port_; }

int RedisServer::tls_port() const { return tls_port_; }

bool RedisServer::tls() const { return options_.tls.enabled || tls_mode(); }
const std::string& RedisServer::unix_socket() const { return unix_socket_; }
pid_t RedisServer::pid() const { return pid_; }
const std::string& RedisServer::dir() const { return dir_; }
std::string RedisServer::log_path() const { return log_path_; }
const ServerOptions& RedisServer::options() const { return options_; }

redlock::Endpoint RedisServer::plain_endpoint() const {
  redlock::Endpoint e;
  e.host = "127.0.0.1";
  e.port = port_;
  e.connect_timeout = milliseconds(200);
  e.command_timeout = milliseconds(200);
  if (restricted_user_mode()) {
    e.username = kRestrictedUser;
    e.password = kRestrictedPassword;
  }
  return e;
}

redlock::Endpoint RedisServer::endpoint() const {
  redlock::Endpoint e = plain_endpoint();
  if (!tls()) return e;
  e.port = tls_port_;
  e.tls.enabled = true;
  e.tls.ca_file = tls_certs().ca;
  // The handshake shares the connect timeout. The suites' timing assumes 200 ms (as in plain
  // text: REDLOCK_TEST_TLS=1); the TLS tests' own servers get 1 s, for sanitizer and valgrind
  // runs, where a handshake costs far more CPU.
  if (!tls_mode()) e.connect_timeout = milliseconds(1000);
  return e;
}

bool tls_mode() {
  static const bool on = [] {
    const char* v = std::getenv("REDLOCK_TEST_TLS");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return on;
}

bool restricted_user_mode() {
  static const bool on = [] {
    const char* v = std::getenv("REDLOCK_TEST_RESTRICTED_USER");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return on;
}

std::vector<std::string> minimal_acl_rules() {
  // Exactly docs/operations.md's "Minimal Redis ACL", for keys and channels under the test prefix.
  // Helper keys and channels are named {<key>}:... (in the key's cluster slot): hence the
  // patterns with a leading '{'.
  return {"on", std::string(">") + kRestrictedPassword, "~rltest:*", "~{rltest:*", "&rltest:*",
          "&{rltest:*", "+set", "+get", "+del", "+pexpire", "+pttl", "+incr", "+type", "+eval",
          "+evalsha", "+publish", "+subscribe", "+unsubscribe", "+ping",
          // fair mode's queue scripts
          "+lindex", "+lpop", "+lpush", "+rpush", "+hget", "+hset", "+hdel", "+hlen", "+exists",
          "+pubsub|numsub", "+lpos", "+lrem",
          // a ReadWriteLock's readers
          "+time", "+zadd", "+zrem", "+zscore", "+zcard", "+zrange", "+zremrangebyscore"};
}

redlock::Endpoint RedisServer::unix_endpoint() const {
  if (unix_socket_.empty()) {
    throw std::logic_error(
        "RedisServer::unix_endpoint: started without ServerOptions::unix_socket");
  }
  redlock::Endpoint e = endpoint();
  e.unix_socket = unix_socket_;
  return e;
}

void RedisServer::add_tls_args(std::vector<std::string>& args) {
  const TlsCerts& certs = tls_certs();
  const TlsServerOptions& tls = options_.tls;
  args.insert(args.end(),
              {"--tls-port", std::to_string(tls_port_), "--tls-cert-file",
               tls.cert_file.empty() ? certs.server : tls.cert_file, "--tls-key-file",
               tls.key_file.empty() ? certs.server_key : tls.key_file, "--tls-ca-cert-file",
               certs.ca, "--tls-auth-clients", tls.auth_clients ? "yes" : "no"});
}

std::string RedisServer::write_sentinel_config() const {
  const std::string path = dir_ + "/sentinel.conf";
  if (::access(path.c_str(), F_OK) == 0) return path;  // the sentinel's own rewrite: kept
  std::ofstream out(path);
  for (const std::string& line : options_.config_lines) out << line << '\n';
  out.close();
  if (!out) throw std::runtime_error("redis_server: cannot write " + path);
  return path;
}

void RedisServer::spawn(int port) {
  // A new port (not a restart): a new TLS port too, in case the old one was what was busy.
  if (tls() && (port != port_ || tls_port_ == 0)) tls_port_ = pick_port(this, &Entry::tls_port);
  port_ = port;
  log_offset_ = file_size_or_zero(log_path_);
  out_offset_ = file_size_or_zero(out_path_);

  std::vector<std::string> args = {redis_path_};
  if (options_.sentinel) args.insert(args.end(), {write_sentinel_config(), "--sentinel"});
  args.insert(args.end(), {"--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", options_.persistence ? "yes" : "no"});
  if (options_.persistence) args.insert(args.end(), {"--appendfsync", "always"});
  args.insert(args.end(), {"--dir", dir_, "--daemonize", "no", "--enable-debug-command", "local",
                           "--logfile", log_path_});
  if (options_.unix_socket) {
    args.insert(args.end(), {"--unixsocket", unix_socket_, "--unixsocketperm", "700"});
  }
  if (tls()) add_tls_args(args);
  if (restricted_user_mode() && !options_.sentinel) {
    // The tests' own bookkeeping (counters, hold logs) needs a few more commands than the library.
    args.insert(args.end(), {"--user", kRestrictedUser});
    for (auto& rule : minimal_acl_rules()) args.push_back(rule);
    args.insert(args.end(), {"+incr", "+decr", "+rpush"});
  }
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());

  std::vector<std::string> env;
  std::string old_preload;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    if (!preload_.empty()) {
      if (kv.rfind("LD_PRELOAD=", 0) == 0) {
        old_preload = std::string(kv.substr(11));
        continue;
      }
      if (kv.rfind("FAKETIME=", 0) == 0 || kv.rfind("FAKETIME_NO_CACHE=", 0) == 0) continue;
    }
    env.emplace_back(kv);
  }
  if (!preload_.empty()) {
    std::string value;
    for (const std::string& lib : preload_) value += (value.empty() ? "" : ":") + lib;
    if (!old_preload.empty()) value += ":" + old_preload;
    env.push_back("LD_PRELOAD=" + value);
    env.push_back("FAKETIME=" + options_.faketime);
    env.emplace_back("FAKETIME_NO_CACHE=1");
  }

  std::vector<char*> argv = c_strings(args);
  std::vector<char*> envp = c_strings(env);
  const std::vector<int> fds = open_fds();

  const int out_fd = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (out_fd < 0) {
    const int err = errno;
    throw std::runtime_error("redis_server: open(" + out_path_ + "): " + std::strerror(err));
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    const int err = errno;
    ::close(out_fd);
    throw std::runtime_error(std::string("redis_server: open(/dev/null): ") + std::strerror(err));
  }

  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) {
    exec_child(redis_path_.c_str(), argv.data(), envp.data(), out_fd, null_fd, parent, fds.data(),
               fds.size());
  }
  const int fork_errno = errno;
  ::close(out_fd);
  ::close(null_fd);
  if (child < 0) {
    throw std::runtime_error(std::string("redis_server: fork: ") + std::strerror(fork_errno));
  }
  pid_ = child;
  registry_set_pid(this, child);
}

RedisServer::StartResult RedisServer::await_ready() {
  const auto deadline = Clock::now() + kStartTimeout;
  // Handles the process having exited (already reaped with `status`).
  auto exited = [this](int status) {
    registry_claim_pid(this);
    pid_ = -1;
    const std::string output =
        read_from(log_path_, log_offset_) + read_from(out_path_, out_offset_);
    if (says_port_in_use(output)) return StartResult::port_busy;
    throw std::runtime_error("redis-server on port " + std::to_string(port_) +
                             " exited during startup (" + describe_status(status) + ")" +
                             output_tail());
  };
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) return exited(status);
    switch (probe(port_, pid_)) {
      case Probe::ready:
        // Still alive after answering? (If not, someone else answered.)
        if (::waitpid(pid_, &status, WNOHANG) == pid_) return exited(status);
        return StartResult::ready;
      case Probe::foreign:
        stop_process();
        return StartResult::port_busy;
      case Probe::down:
        break;
    }
    if (says_port_in_use(read_from(log_path_, log_offset_))) {
      stop_process();
      return StartResult::port_busy;
    }
    if (Clock::now() >= deadline) {
      std::string message = "redis-server on port " + std::to_string(port_) +
                            " did not answer PING within 5 s" + output_tail();
      stop_process();
      throw std::runtime_error(message);
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void RedisServer::finish_start() {
  for (int attempt = 1;; ++attempt) {
    if (await_ready() == StartResult::ready) return;
    if (attempt >= kMaxPortAttempts) {
      throw std::runtime_error("redis-server: every port tried was in use (" +
                               std::to_string(attempt) + " attempts)" + output_tail());
    }
    spawn(pick_port(this));
  }
}

void RedisServer::stop_process() noexcept {
  const pid_t pid = registry_claim_pid(this);
  pid_ = -1;
  if (pid > 0) kill_and_reap(pid);
}

void RedisServer::remove_dir() noexcept {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string RedisServer::output_tail() const {
  std::string text;
  const std::string log = read_from(log_path_, log_offset_);
  const std::string out = read_from(out_path_, out_offset_);
  if (!out.empty()) text += "\n--- stdout/stderr (tail) ---\n" + tail(out, kTailChars);
  if (!log.empty()) text += "\n--- " + log_path_ + " (tail) ---\n" + tail(log, kTailChars);
  if (text.empty()) text = " (no output)";
  return text;
}

void RedisServer::pause() {
  if (!running()) return;
  ::kill(pid_, SIGSTOP);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (process_state(pid_) != 'T' && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
}

void RedisServer::resume() {
  if (!running()) return;
  ::kill(pid_, SIGCONT);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (process_state(pid_) == 'T' && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
}

void RedisServer::kill9() { stop_process(); }

void RedisServer::restart() {
  stop_process();
  const auto deadline = Clock::now() + kRestartBusyWindow;
  for (;;) {
    spawn(port_);
    if (await_ready() == StartResult::ready) return;
    if (Clock::now() >= deadline) {
      throw std::runtime_error("redis-server: restart failed, port " + std::to_string(port_) +
                               " stayed in use" + output_tail());
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

bool RedisServer::running() const {
  const pid_t pid = pid_;
  if (pid <= 0) return false;
  int status = 0;
  const pid_t reaped = ::waitpid(pid, &status, WNOHANG);
  if (reaped == 0) return true;
  if (reaped == pid || (reaped < 0 && errno == ECHILD)) {
    registry_claim_pid(this);
    pid_ = -1;
    return false;
  }
  return true;
}

redlock::Reply RedisServer::raw(const std::vector<std::string>& argv) const {
  return raw(argv, kRawTimeout);
}

redlock::Reply RedisServer::raw(const std::vector<std::string>& argv, milliseconds timeout) const {
  std::vector<redlock::Reply> replies = raw_pipeline({argv}, timeout);
  return std::move(replies.front());
}

std::vector<redlock::Reply> RedisServer::raw_pipeline(
    const std::vector<std::vector<std::string>>& commands, milliseconds timeout) const {
  const std::string where = "127.0.0.1:" + std::to_string(port_);
  if (pid_ <= 0) throw std::runtime_error("raw: redis-server at " + where + " is not running");
  for (const auto& argv : commands) {
    if (argv.empty()) throw std::invalid_argument("raw: empty command");
  }
  SigpipeGuard guard;
  const timeval tv = to_timeval(timeout);
  ContextPtr c(redisConnectWithTimeout("127.0.0.1", port_, tv));
  if (!c) throw std::runtime_error("raw: cannot allocate a hiredis context");
  if (c->err != 0) throw std::runtime_error("raw: cannot connect to " + where + ": " + c->errstr);
  if (redisSetTimeout(c.get(), tv) != REDIS_OK) {
    throw std::runtime_error("raw: cannot set timeout on " + where + ": " + c->errstr);
  }
  for (const auto& argv : commands) {
    std::vector<const char*> ptrs;
    std::vector<std::size_t> lens;
    ptrs.reserve(argv.size());
    lens.reserve(argv.size());
    for (const std::string& arg : argv) {
      ptrs.push_back(arg.data());
      lens.push_back(arg.size());
    }
    if (redisAppendCommandArgv(c.get(), static_cast<int>(argv.size()), ptrs.data(), lens.data()) !=
        REDIS_OK) {
      throw std::runtime_error("raw: cannot format command for " + where + ": " + c->errstr);
    }
  }
  std::vector<redlock::Reply> replies;
  replies.reserve(commands.size());
  for (const auto& argv : commands) {
    void* reply = nullptr;
    if (redisGetReply(c.get(), &reply) != REDIS_OK || reply == nullptr) {
      throw std::runtime_error("raw: no reply from " + where + " within " +
                               std::to_string(timeout.count()) + " ms (" + argv[0] +
                               "): " + (c->err != 0 ? c->errstr : "connection lost"));
    }
    ReplyPtr owned(static_cast<redisReply*>(reply));
    replies.push_back(convert(owned.get()));
  }
  return replies;
}

// ---------------------------------------------------------------------------------------------
// ServerGroup

ServerGroup::ServerGroup(std::size_t n,
                         ServerOptions options) {  // NOLINT(performance-unnecessary-value-param)
  servers_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    servers_.push_back(
        std::unique_ptr<RedisServer>(new RedisServer(options, RedisServer::NoWait{})));
  }
  for (auto& server : servers_) server->finish_start();
}

ServerGroup::~ServerGroup() = default;

RedisServer& ServerGroup::operator[](std::size_t i) { return *servers_.at(i); }
const RedisServer& ServerGroup::operator[](std::size_t i) const { return *servers_.at(i); }
std::size_t ServerGroup::size() const { return servers_.size(); }

std::vector<redlock::Endpoint> ServerGroup::endpoints() const {
  std::vector<redlock::Endpoint> out;
  out.reserve(servers_.size());
  for (const auto& server : servers_) out.push_back(server->endpoint());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Keys

const std::string& run_prefix() {
  static const std::string prefix = [] {
    std::random_device rd;
    const std::uint64_t value = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(value));
    return "rltest:" + std::to_string(::getpid()) + ":" + hex + ":";
  }();
  return prefix;
}

std::string key(std::string_view name) {
  std::string out = run_prefix();
  out.append(name);
  return out;
}

}  // namespace redlock::test
