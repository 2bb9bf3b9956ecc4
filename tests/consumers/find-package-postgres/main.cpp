// Consumer test of the PostgreSQL component: builds a Database and a Lock and expects a
// ConnectionError from a port nobody listens on (no PostgreSQL server needed). Exit 0 on success.
#include <cstdio>
#include <stdexcept>

#include <redlock/postgres.hpp>

int main() {
  try {
    redlock::postgres::Database bad("postgresql://127.0.0.1:1/db?mode=exclusive");
    std::puts("consumer_app: mode=exclusive was accepted");
    return 1;
  } catch (const std::invalid_argument&) {
  }
  redlock::postgres::Database db("postgresql://consumer@127.0.0.1:1/db?connect_timeout=2");
  redlock::postgres::Lock lock(db, "job");
  try {
    lock.try_lock();
  } catch (const redlock::ConnectionError& e) {
    std::printf("consumer_app: postgres component linked; unreachable server: %s\n", e.what());
    return 0;
  }
  std::puts("consumer_app: try_lock on a closed port did not throw ConnectionError");
  return 1;
}
