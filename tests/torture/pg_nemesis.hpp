// tests/torture/pg_nemesis.hpp: faults for --mode postgres and --mode postgres-session, on one
// PostgreSQL server (tests/support/postgres_server). Every 1-3 s, one of:
//   pause      SIGSTOP of every server process for 0.3-1.5 s (statement_timeout is 300 ms:
//              statements time out, acquires are abandoned and undone)
//   restart    kill -9 of every server process, and a new postmaster on the same data (the
//              committed lease rows survive; session mode's advisory locks do not)
//   terminate  pg_terminate_backend of every client backend (the workers' connections)
// Driven by the controller's main thread, like Nemesis (the server is that thread's child).
#ifndef REDLOCK_TESTS_TORTURE_PG_NEMESIS_HPP
#define REDLOCK_TESTS_TORTURE_PG_NEMESIS_HPP

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "nemesis.hpp"
#include "support/postgres_server.hpp"

namespace redlock::torture {

class PgNemesis : public Faults {
 public:
  // `server` must outlive the nemesis. `log` (may be null) gets one line per injection and heal.
  PgNemesis(test::PostgresServer& server, std::uint64_t seed, std::FILE* log);
  std::int64_t step(std::int64_t now) override;
  void heal_all() override;
  const std::map<std::string, std::int64_t>& injected() const override { return injected_; }
  const std::vector<std::string>& problems() const override { return problems_; }

 private:
  void inject(std::int64_t now);
  void heal(std::int64_t now);
  std::int64_t uniform_ms(int lo, int hi);
  void note(const std::string& what);

  test::PostgresServer& server_;
  std::mt19937_64 rng_;  // reproducible with --seed
  std::FILE* log_;
  bool paused_{false};
  std::int64_t heal_at_{0};
  std::int64_t next_inject_{0};
  std::map<std::string, std::int64_t> injected_;
  std::vector<std::string> problems_;
};

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_PG_NEMESIS_HPP
