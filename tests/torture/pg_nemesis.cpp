// tests/torture/pg_nemesis.cpp: see pg_nemesis.hpp.
#include "pg_nemesis.hpp"

#include <exception>

#include "common.hpp"

namespace redlock::torture {

namespace {
constexpr std::int64_t kMs = 1'000'000;
}  // namespace

PgNemesis::PgNemesis(test::PostgresServer& server, std::uint64_t seed, std::FILE* log)
    : server_(server), rng_(seed ^ 0x9057ULL), log_(log) {
  next_inject_ = mono_ns() + uniform_ms(1000, 2000);
}

std::int64_t PgNemesis::uniform_ms(int lo, int hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_) * kMs;
}

void PgNemesis::note(const std::string& what) {
  if (log_ == nullptr) return;
  std::fprintf(log_, "%lld %s\n", static_cast<long long>(mono_ns()), what.c_str());
  std::fflush(log_);
}

std::int64_t PgNemesis::step(std::int64_t now) {
  if (paused_ && now >= heal_at_) heal(now);
  if (!paused_ && now >= next_inject_) inject(now);
  return paused_ ? heal_at_ : next_inject_;
}

void PgNemesis::inject(std::int64_t now) {
  next_inject_ = now + uniform_ms(1000, 3000);
  try {
    const int pick = static_cast<int>(std::uniform_int_distribution<int>(0, 2)(rng_));
    if (pick == 0) {
      server_.pause();
      paused_ = true;
      heal_at_ = now + uniform_ms(300, 1500);
      ++injected_["pause"];
      note("SIGSTOP of the server");
    } else if (pick == 1) {
      note("kill -9 of the server");  // restart() kills it first, then waits for it to listen
      server_.restart();
      ++injected_["restart"];
      note("restarted the server");
    } else {
      server_.psql(
          "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = "
          "'client backend' AND pid <> pg_backend_pid()");
      ++injected_["terminate"];
      note("pg_terminate_backend of every client backend");
    }
  } catch (const std::exception& e) {
    problems_.push_back(std::string("inject: ") + e.what());
  }
}

void PgNemesis::heal(std::int64_t now) {
  server_.resume();
  paused_ = false;
  note("SIGCONT of the server");
  next_inject_ = now + uniform_ms(1000, 3000);
}

void PgNemesis::heal_all() {
  if (paused_) heal(mono_ns());
}

}  // namespace redlock::torture
