// tests/support/zookeeper_server.hpp: a real ZooKeeper 3.8 server (Debian's `zookeeper` package,
// run without its init scripts) for the [zookeeper] tests and the benchmark.
//
//   redlock::test::ZooKeeperServer zk;                  // standalone, on 127.0.0.1, tick 200 ms
//   redlock::zookeeper::Session session(zk.uri("/t?session_timeout=2000"));
//   zk.pause();  /* the server hangs */  zk.resume();
//   zk.kill9();  zk.restart();                          // same port, same data dir
//
// The server is `java ... org.apache.zookeeper.server.ZooKeeperServerMain <dir>/zoo.cfg`,
// listening on 127.0.0.1 only, in a temporary directory (redlock-zk-<pid>-XXXXXX under $TMPDIR or
// /tmp) with its output in <dir>/stdout.log. The classpath is $REDLOCK_ZOOKEEPER_CLASSPATH or
// /usr/share/java/zookeeper.jar (its manifest names the jars it needs); java is $REDLOCK_JAVA or
// `java` on PATH. A server never outlives the test: the destructor kills it, and
// PR_SET_PDEATHSIG kills it if the thread that started it dies (start servers on the test's own
// thread). JVM start-up takes a second or two: share a server across cases that do not kill it.
//
// Thread-safety: port(), uri(), pid() from any thread; the rest must not race with each other.
#ifndef REDLOCK_TESTS_SUPPORT_ZOOKEEPER_SERVER_HPP
#define REDLOCK_TESTS_SUPPORT_ZOOKEEPER_SERVER_HPP

#include <sys/types.h>  // pid_t

#include <atomic>       // std::atomic
#include <chrono>       // std::chrono::milliseconds
#include <cstdlib>      // std::getenv (REQUIRE_ZOOKEEPER)
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace redlock::test {

class ZooKeeperServer {
 public:
  // Starts the server with this tick (the server's session timeouts are 2..20 ticks) and waits
  // (at most 30 s) until it answers `ruok`. Throws std::runtime_error with the tail of its
  // output if it cannot start (no java, no jars).
  explicit ZooKeeperServer(std::chrono::milliseconds tick = std::chrono::milliseconds(200));
  // True if java and the server's jar are there (the tests skip, outside CI, when not).
  static bool available();
  // SIGCONT + SIGKILL + waitpid, then removes the temp dir. Never throws.
  ~ZooKeeperServer();
  ZooKeeperServer(const ZooKeeperServer&) = delete;
  ZooKeeperServer& operator=(const ZooKeeperServer&) = delete;

  // TCP port on 127.0.0.1; the same across restart().
  int port() const { return port_; }
  // "zookeeper://127.0.0.1:<port>" followed by `suffix` (e.g. "/chroot?session_timeout=2000").
  std::string uri(std::string_view suffix = {}) const;
  // Pid of the JVM, or -1 while it is not running.
  pid_t pid() const { return pid_.load(); }
  const std::string& dir() const { return dir_; }

  // SIGSTOP / SIGCONT; return once the process is stopped / running. No-ops if not running.
  void pause();
  void resume();
  // SIGKILL + waitpid. No-op if not running.
  void kill9();
  // kill9() if running, then starts again on the same port and data dir and waits until it
  // answers. Throws std::runtime_error if it cannot start.
  void restart();
  // True if the server answers `ruok` with `imok` within `timeout`.
  bool answers(std::chrono::milliseconds timeout = std::chrono::milliseconds(500)) const;
  // The server's whole answer to a four-letter word (`ruok` or `srvr`: the only ones enabled),
  // read until it closes the connection or `timeout`; empty if it cannot be reached.
  std::string ask(std::string_view word,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) const;

 private:
  void start();
  void write_config() const;

  std::chrono::milliseconds tick_;
  std::string dir_;
  int port_{0};
  std::atomic<pid_t> pid_{-1};
};

// One server for every case of the test binary that needs no server of its own (a ZooKeeper
// takes seconds to start); each case uses a chroot of its own.
inline ZooKeeperServer& shared_zookeeper_server() {
  static ZooKeeperServer server;
  return server;
}

}  // namespace redlock::test

// For a [zookeeper] test case (Catch2): outside CI a machine without ZooKeeper or java skips;
// CI installs them (scripts/deps.sh).
#define REQUIRE_ZOOKEEPER()                                                          \
  do {                                                                               \
    if (!redlock::test::ZooKeeperServer::available()) {                              \
      if (std::getenv("CI")) FAIL("zookeeper or java is missing in CI");             \
      WARN("skipped: no java or /usr/share/java/zookeeper.jar (package zookeeper)"); \
      return;                                                                        \
    }                                                                                \
  } while (0)

#endif  // REDLOCK_TESTS_SUPPORT_ZOOKEEPER_SERVER_HPP
