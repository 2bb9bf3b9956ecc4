// tests/support/redis_server.hpp: real redis-server processes for the test suite.
//
//   redlock::test::RedisServer server;                      // random port on 127.0.0.1
//   server.raw({"SET", redlock::test::key("k"), "v"});      // hiredis, not the library under test
//   server.pause();  /* ... server hangs ... */  server.resume();
//   server.kill9();  server.restart();                      // same port, same dir
//
//   redlock::test::ServerGroup group(5);                    // five servers, started in parallel
//   auto endpoints = group.endpoints();
//
// Every server runs in its own temporary directory (mkdtemp under $TMPDIR or /tmp, named
// redlock-test-<pid>-XXXXXX) with its log in <dir>/redis.log and its stdout/stderr in
// <dir>/stdout.log. Servers never outlive the test process: the destructor kills them, an atexit
// handler kills any that are left on exit(), and PR_SET_PDEATHSIG kills them if the process dies.
// Note that PR_SET_PDEATHSIG fires when the *thread* that started the server exits, so create
// servers on a thread that outlives them (normally the test's own thread).
//
// Thread-safety: the const accessors and raw()/raw_pipeline() may be called from any thread at any
// time; pause/resume/kill9/restart and destruction must not race with each other.
#ifndef REDLOCK_TESTS_SUPPORT_REDIS_SERVER_HPP
#define REDLOCK_TESTS_SUPPORT_REDIS_SERVER_HPP

#include <sys/types.h>  // pid_t

#include <atomic>       // std::atomic
#include <chrono>       // std::chrono::milliseconds
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uintmax_t
#include <memory>       // std::unique_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <redlock/endpoint.hpp>
#include <redlock/reply.hpp>

namespace redlock::test {

// TLS for a test server (certificates from tls_certs(), see tls_certs.hpp). The plain port stays
// open too: raw() and the readiness probe use it; endpoint() uses the TLS port.
struct TlsServerOptions {
  // Also listen with TLS on tls_port(). REDLOCK_TEST_TLS=1 in the environment turns it on for
  // every server (then the lock suites run over TLS).
  bool enabled = false;
  // tls-auth-clients yes: a client must present a certificate issued by tls_certs().ca.
  bool auth_clients = false;
  // The server's certificate (empty: tls_certs().server) and key (empty: tls_certs().server_key).
  std::string cert_file;
  std::string key_file;
};

struct ServerOptions {
  // appendonly yes + appendfsync always: acknowledged writes survive kill9() + restart().
  bool persistence = false;
  // Also listen on <dir>/redis.sock (unixsocketperm 700); see RedisServer::unix_socket().
  bool unix_socket = false;
  // Non-empty: run under libfaketime with FAKETIME=<this>, e.g. "+0 x2" (clock runs 2x) or
  // "-30s". The test process's own clock is untouched. Throws at start if libfaketime is missing
  // (override its path with $REDLOCK_FAKETIME_LIB). Such a server also gets glibc's
  // libc_malloc_debug.so.0 preloaded, i.e. it allocates with glibc malloc instead of jemalloc:
  // libfaketime 0.9.10 deadlocks inside jemalloc's initialisation otherwise.
  std::string faketime;
  // Appended to the command line, e.g. {"--requirepass", "pw"}.
  std::vector<std::string> extra_args;
  // Run as a Redis Sentinel (redis-server <dir>/sentinel.conf --sentinel) whose config file
  // starts with these lines (written once: the sentinel rewrites it, and a restart keeps what it
  // learnt). Never gets the restricted user's ACL.
  bool sentinel = false;
  std::vector<std::string> config_lines;
  TlsServerOptions tls;
};

class RedisServer {
 public:
  // Timeout of raw() without an explicit timeout (connect and each reply).
  static constexpr std::chrono::milliseconds kRawTimeout{1000};

  // Starts the server and waits (at most 5 s per attempt) until it answers PING. A server that
  // answers with an error other than LOADING (e.g. NOAUTH with --requirepass) counts as up.
  // Retries on another random port when the chosen one is taken.
  // Throws std::runtime_error with the tail of the server's output if it cannot start.
  explicit RedisServer(ServerOptions options = {});
  // SIGCONT + SIGKILL + waitpid, then removes the temp dir. Never throws.
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  RedisServer(RedisServer&&) = delete;
  RedisServer& operator=(RedisServer&&) = delete;

  // TCP port on 127.0.0.1 (plain text, also with TLS on); stays the same across restart().
  int port() const;
  // The TLS port (0 without TLS); stays the same across restart().
  int tls_port() const;
  // True if the server listens with TLS (TlsServerOptions::enabled or REDLOCK_TEST_TLS=1).
  bool tls() const;
  // Path of the unix socket, empty unless ServerOptions::unix_socket.
  const std::string& unix_socket() const;
  // Pid of the server process, or -1 while it is not running (after kill9(), or once a crash has
  // been noticed by running()).
  pid_t pid() const;
  // The server's temporary directory (its --dir).
  const std::string& dir() const;
  // Log file of the server (<dir>/redis.log).
  std::string log_path() const;
  // The options it was started with.
  const ServerOptions& options() const;

  // host 127.0.0.1, port(), connect_timeout 200 ms, command_timeout 200 ms. Never carries a
  // password, even when extra_args has --requirepass. With TLS on: tls_port(), tls.enabled and
  // tls.ca_file = tls_certs().ca (connect_timeout 1 s unless REDLOCK_TEST_TLS=1: a handshake
  // costs CPU, under sanitizers and valgrind most).
  redlock::Endpoint endpoint() const;
  // endpoint() on the plain port, even with TLS on.
  redlock::Endpoint plain_endpoint() const;
  // Like endpoint() but with unix_socket set. Throws std::logic_error if the socket is not enabled.
  redlock::Endpoint unix_endpoint() const;

  // SIGSTOP; returns once the process is actually stopped. No-op if not running.
  void pause();
  // SIGCONT; returns once the process is running again. No-op if not running.
  void resume();
  // SIGKILL + waitpid. No-op if not running.
  void kill9();
  // kill9() if running, then starts again on the same port and dir (same unix socket) and waits
  // until it answers PING. Retries for a few seconds if the port is briefly taken.
  // Throws std::runtime_error if it cannot start.
  void restart();
  // True while the process exists (also when paused). Reaps it if it exited on its own.
  bool running() const;

  // Sends one command over a fresh hiredis TCP connection (binary-safe) and returns the reply;
  // error replies come back as Reply::Type::error. Throws std::runtime_error if the server is
  // not running, cannot be reached, or does not answer within the timeout.
  redlock::Reply raw(const std::vector<std::string>& argv) const;
  redlock::Reply raw(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) const;
  // Sends several commands over one fresh connection (pipelined) and returns all replies, e.g.
  // {{"AUTH", "pw"}, {"GET", "k"}} or {{"MULTI"}, ..., {"EXEC"}}. Throws like raw().
  std::vector<redlock::Reply> raw_pipeline(const std::vector<std::vector<std::string>>& commands,
                                           std::chrono::milliseconds timeout = kRawTimeout) const;

 private:
  friend class ServerGroup;
  struct NoWait {};
  enum class StartResult { ready, port_busy };

  // Creates the dir and launches the process without waiting for it.
  RedisServer(ServerOptions options, NoWait);
  // Waits for the process launched by the NoWait constructor; retries on other ports.
  void finish_start();
  void spawn(int port);
  std::string write_sentinel_config() const;
  void add_tls_args(std::vector<std::string>& args);
  StartResult await_ready();
  void stop_process() noexcept;
  void remove_dir() noexcept;
  std::string output_tail() const;

  ServerOptions options_;
  std::string redis_path_;
  std::vector<std::string> preload_;  // LD_PRELOAD entries (faketime only)
  std::string dir_;
  std::string unix_socket_;
  std::string log_path_;
  std::string out_path_;
  int port_ = 0;
  int tls_port_ = 0;
  mutable std::atomic<pid_t> pid_{-1};  // written by running() too
  std::uintmax_t log_offset_ = 0;       // sizes of the logs when the current process was spawned
  std::uintmax_t out_offset_ = 0;
};

// N servers at once (Redlock tests use 3 and 5): all processes are launched first, then awaited.
class ServerGroup {
 public:
  explicit ServerGroup(std::size_t n, ServerOptions options = {});
  ~ServerGroup();
  ServerGroup(const ServerGroup&) = delete;
  ServerGroup& operator=(const ServerGroup&) = delete;

  RedisServer& operator[](std::size_t i);
  const RedisServer& operator[](std::size_t i) const;
  std::size_t size() const;
  // endpoint() of every server, in order.
  std::vector<redlock::Endpoint> endpoints() const;

 private:
  std::vector<std::unique_ptr<RedisServer>> servers_;
};

// A per-process prefix for keys, unique per test run: "rltest:<pid>:<random hex>:".
// With REDLOCK_TEST_RESTRICTED_USER=1 in the environment, every server also gets an ACL user
// with only the README's minimal permissions, and endpoint() logs in as that user: the lock
// suites then prove the library needs nothing more.
inline constexpr const char* kRestrictedUser = "locker";
inline constexpr const char* kRestrictedPassword = "locker-secret-pw";
bool restricted_user_mode();
// REDLOCK_TEST_TLS=1: every server also listens with TLS, and endpoint() uses it.
bool tls_mode();
// The ACL rules of that user (after its name), as `ACL SETUSER locker <rules...>` takes them.
std::vector<std::string> minimal_acl_rules();

const std::string& run_prefix();
// run_prefix() + name.
std::string key(std::string_view name);

}  // namespace redlock::test

#endif  // REDLOCK_TESTS_SUPPORT_REDIS_SERVER_HPP
