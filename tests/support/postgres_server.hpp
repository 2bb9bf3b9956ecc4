// tests/support/postgres_server.hpp: a real PostgreSQL 15 server for the [postgres] tests, on a
// free loopback port, in a temp dir owned by the postgres user (root cannot run the server:
// initdb runs through runuser, and the postmaster is this process's child through setpriv
// --pdeathsig KILL, so it dies with the thread that started it, even on a crash).
#ifndef REDLOCK_TESTS_SUPPORT_POSTGRES_SERVER_HPP
#define REDLOCK_TESTS_SUPPORT_POSTGRES_SERVER_HPP

#include <sys/types.h>  // pid_t

#include <cstdlib>  // std::getenv (REQUIRE_POSTGRES)
#include <string>   // std::string

namespace redlock::test {

class PostgresServer {
 public:
  // Where Debian keeps initdb and pg_ctl ($REDLOCK_PG_BIN overrides).
  static std::string bin_dir();
  // True if initdb and postgres are there, and runuser and setpriv exist.
  static bool available();

  // initdb (trust auth), then the postmaster, waiting until it accepts connections. Throws
  // std::runtime_error with the tool's output if the server cannot start; the temp dir is
  // removed then too.
  PostgresServer();
  // kill -9 of every server process, waits until they are gone, removes the dir. Never throws.
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  int port() const noexcept { return port_; }
  pid_t pid() const noexcept { return pid_; }
  // postgresql://postgres@127.0.0.1:<port>/postgres
  std::string uri() const;

  // Runs one SQL statement with psql as the superuser; returns its unaligned output.
  std::string psql(const std::string& sql) const;
  // SIGSTOP / SIGCONT every process of the server (postmaster and its backends).
  void pause() const;
  void resume() const;
  // kill -9 of every server process, then a new postmaster on the same port and data (the
  // committed rows survive). Throws as the constructor.
  void restart();

 private:
  void start();
  void stop() noexcept;
  void remove_dir() noexcept;

  std::string dir_;
  int port_{0};
  pid_t pid_{0};
};

}  // namespace redlock::test

// For a [postgres] test case (Catch2): outside CI a machine without postgresql-15 skips; CI
// installs it (scripts/deps.sh) and must run.
#define REQUIRE_POSTGRES()                                                                         \
  do {                                                                                             \
    if (!redlock::test::PostgresServer::available()) {                                             \
      if (std::getenv("CI")) FAIL("postgresql-15 is missing in CI");                               \
      WARN("skipped: postgresql-15 not installed in " + redlock::test::PostgresServer::bin_dir()); \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

#endif  // REDLOCK_TESTS_SUPPORT_POSTGRES_SERVER_HPP
