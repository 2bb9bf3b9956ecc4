// [postgres]: a statement's wait for a pooled connection is bounded by its own deadline, never
// by the statements ahead of it (the round's rule). With the server stopped, each statement
// holds its connection until its client deadline (statement_timeout + 1 s) and a timed-out
// acquire keeps it longer, for its undo; a caller behind them must still get its TimeoutError
// within its own deadline.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <redlock/errors.hpp>
#include <redlock/postgres.hpp>

#include "support/postgres_server.hpp"

using namespace std::chrono_literals;
using redlock::test::PostgresServer;
using Clock = std::chrono::steady_clock;

TEST_CASE(
    "postgres::Database: a statement waits for a pooled connection no longer than its own "
    "deadline",
    "[postgres][fault]") {
  REQUIRE_POSTGRES();
  PostgresServer server;
  redlock::postgres::DatabaseOptions options;
  options.statement_timeout = 300ms;  // client deadline 1.3 s
  options.pool_size = 1;
  redlock::postgres::Database db(server.uri(), options);
  db.ensure_table();
  server.pause();
  // The server comes back when every caller has its answer, or after 12 s whatever the library
  // does, so that a wait behind the abandoned statement's undo ends and the test does too.
  std::atomic<bool> answered{false};
  std::thread resume([&] {
    const auto until = Clock::now() + 12s;
    while (!answered && Clock::now() < until) std::this_thread::sleep_for(10ms);
    server.resume();
  });
  constexpr int kCallers = 4;
  std::vector<long long> took_ms(kCallers, -1);
  std::atomic<int> timeouts{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      redlock::postgres::Lock lock(db, "pool-" + std::to_string(i));
      const auto start = Clock::now();
      try {
        (void)lock.try_lock();
      } catch (const redlock::TimeoutError&) {
        ++timeouts;
      } catch (const redlock::Error&) {
      }
      took_ms[i] =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    });
  }
  for (auto& t : callers) t.join();
  answered = true;
  resume.join();
  const long long longest = *std::max_element(took_ms.begin(), took_ms.end());
  INFO("the longest try_lock() took " << longest << " ms; " << timeouts << " of " << kCallers
                                      << " threw TimeoutError");
  CHECK(timeouts == kCallers);
  // Its own deadline is 1.3 s for the wait, then a new connection's connect_timeout (2 s) or its
  // statement's 1.3 s: about 3.3 s. Behind three others and an undo that holds a connection
  // until the server answers, the last waited for the server to come back (7.3 s of 8 s).
  CHECK(longest < 6000);
}
