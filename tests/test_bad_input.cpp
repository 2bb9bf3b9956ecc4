// Bad input, tried and named: odd keys, extreme durations, hostile or broken servers, missing
// permissions, paused and full servers. Each case says what the library must answer.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <limits>
#include <string>
#include <thread>

#include <redlock/redlock.hpp>

#include "support/eventually.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of a lock's helper keys

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::ServerOptions;
using Clock = std::chrono::steady_clock;

namespace {

redlock::LockOptions fast() {
  redlock::LockOptions o;
  o.ttl = 5s;
  o.retry_delay = 5ms;
  return o;
}

}  // namespace

TEST_CASE("Keys with NUL bytes, CR/LF and printf directives lock exactly that key",
          "[redis][bad-input]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const std::string k = key(std::string("a\0b\r\n%s%n *", 10));
  redlock::Lock lock(client, k, fast());
  REQUIRE(lock.try_lock());
  CHECK(server.raw({"EXISTS", k}).integer() == 1);
  CHECK(server.raw({"EXISTS", key("a")}).integer() == 0);
  redlock::Lock prefix_only(client, key("a"), fast());
  CHECK(prefix_only.try_lock());  // a different key: not truncated at the NUL
  prefix_only.unlock();
  lock.unlock();
  CHECK(server.raw({"EXISTS", k}).integer() == 0);
}

TEST_CASE("Extreme durations: huge, negative and zero", "[redis][bad-input]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  redlock::Lock holder(client, key("durations"), fast());
  redlock::Lock other(client, key("durations"), fast());
  REQUIRE(holder.try_lock());
  auto start = Clock::now();
  CHECK_FALSE(other.try_lock_for(-1h));
  CHECK_FALSE(other.try_lock_for(std::chrono::nanoseconds::min()));
  CHECK_FALSE(other.try_lock_for(0s));
  CHECK_FALSE(other.try_lock_until(Clock::now() - 1h));
  CHECK_FALSE(other.try_lock_until(std::chrono::system_clock::time_point::min()));
  CHECK_FALSE(other.try_lock_until(std::chrono::steady_clock::time_point::min()));
  CHECK(Clock::now() - start < 500ms);  // one attempt each, no waiting
  // Huge timeouts mean "wait forever", without overflow: the release lets it through.
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    got = other.try_lock_for(std::chrono::hours::max());
    if (got) other.unlock();
  });
  std::this_thread::sleep_for(100ms);
  holder.unlock();
  waiter.join();
  CHECK(got.load());
  start = Clock::now();
  CHECK(other.try_lock_until(std::chrono::steady_clock::time_point::max()));
  other.unlock();
  // ttl near INT64_MAX ms is refused up front; a merely large one works.
  auto o = fast();
  o.ttl = std::chrono::milliseconds(std::numeric_limits<std::int64_t>::max() - 1);
  CHECK_THROWS_WITH(redlock::Lock(client, key("ttl"), o), Catch::Contains("ttl"));
  o.ttl = std::chrono::hours(24 * 365 * 201);
  CHECK_THROWS_WITH(redlock::Lock(client, key("ttl"), o), Catch::Contains("200 years"));
  o.ttl = std::chrono::hours(24 * 365 * 100);
  redlock::Lock century(client, key("ttl"), o);
  REQUIRE(century.try_lock());
  CHECK(server.raw({"PTTL", key("ttl")}).integer() > 3'000'000'000'000LL);
  CHECK_THROWS_AS(century.extend(std::chrono::milliseconds::max()), std::invalid_argument);
  CHECK_THROWS_AS(century.extend(1ms), std::invalid_argument);  // drift (2 ms) eats it
  CHECK_FALSE(century.lease().wait_for(std::chrono::milliseconds(0)));
  century.unlock();
  auto huge = fast();
  huge.retry_delay = std::chrono::milliseconds::max();
  CHECK_THROWS_WITH(redlock::Lock(client, key("ttl"), huge), Catch::Contains("retry_delay"));
  redlock::Endpoint slow = server.endpoint();
  slow.command_timeout = std::chrono::milliseconds::max();
  CHECK_THROWS_WITH(redlock::Client{slow}, Catch::Contains("command_timeout"));
}

TEST_CASE("A key over the documented maximum (4 MiB) is refused before any I/O",
          "[unit][bad-input]") {
  redlock::Endpoint nowhere;
  nowhere.port = 1;  // nothing is sent, so nothing needs to listen
  redlock::Client client(nowhere);
  CHECK_THROWS_WITH(redlock::Lock(client, std::string(4 * 1024 * 1024 + 1, 'k')),
                    Catch::Contains("maximum"));
  CHECK_NOTHROW(redlock::Lock(client, std::string(4 * 1024 * 1024, 'k')));
}

TEST_CASE("A server that answers -ERR to EVALSHA: release throws ServerError, unlock does not",
          "[redis][bad-input]") {
  ServerOptions options;
  options.extra_args = {"--rename-command", "EVALSHA", ""};
  RedisServer server(options);
  redlock::Client client(server.endpoint());
  const auto k = key("no-evalsha");
  auto lock_options = fast();
  lock_options.fair = false;  // fair mode's contended attempts are scripts too
  redlock::Lock lock(client, k, lock_options);
  REQUIRE(lock.try_lock());
  try {
    lock.release();
    FAIL("expected ServerError");
  } catch (const redlock::ServerError& e) {
    CHECK(e.server_message().rfind("ERR", 0) == 0);
    CHECK(std::string(e.what()).find(server.endpoint().address()) != std::string::npos);
  }
  CHECK_FALSE(lock.owns_lock());   // the hold is gone locally; the key expires by its ttl
  REQUIRE(lock.try_lock_for(6s));  // after the ttl of the stuck key
  lock.unlock();                   // never throws, even though the release fails
}

TEST_CASE("An ACL user without EVALSHA gets a ServerError naming the permission",
          "[redis][bad-input]") {
  ServerOptions options;
  options.extra_args = {"--user", "noscript", "on",   ">noscript-pw", "~*",
                        "&*",     "+set",     "+get", "+ping",        "+pttl"};
  RedisServer server(options);
  auto ep = server.endpoint();
  ep.username = "noscript";
  ep.password = "noscript-pw";
  redlock::Client client(ep);
  // A fair Lock's first attempt checks the queue with EXISTS, which this user may not run: a
  // clear error naming it, not a silent refusal.
  auto fair_options = fast();
  fair_options.fair = true;
  redlock::Lock fair(client, key("noperm-fair"), fair_options);
  try {
    (void)fair.try_lock();
    FAIL("expected ServerError");
  } catch (const redlock::ServerError& e) {
    CHECK(e.server_message().rfind("NOPERM", 0) == 0);
    CHECK(std::string(e.what()).find("EXISTS") != std::string::npos);
  }
  CHECK_FALSE(fair.owns_lock());
  auto lock_options = fast();
  lock_options.fair = false;
  redlock::Lock lock(client, key("noperm"), lock_options);
  REQUIRE(lock.try_lock());  // SET is allowed
  try {
    lock.release();
    FAIL("expected ServerError");
  } catch (const redlock::ServerError& e) {
    const std::string what = e.what();
    CHECK(e.server_message().rfind("NOPERM", 0) == 0);
    CHECK(what.find("evalsha") != std::string::npos);
    CHECK(what.find("ACL") != std::string::npos);
    CHECK(what.find("noscript-pw") == std::string::npos);
  }
}

TEST_CASE("A server in CLIENT PAUSE makes lock operations time out, then recover",
          "[redis][bad-input][fault]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  client.ping();
  redlock::Lock lock(client, key("paused"), fast());
  server.raw({"CLIENT", "PAUSE", "700", "WRITE"});
  const auto start = Clock::now();
  CHECK_THROWS_AS(lock.try_lock(), redlock::TimeoutError);
  CHECK(Clock::now() - start < 1000ms);
  std::this_thread::sleep_for(800ms);
  // The paused SET ran when the pause ended and was undone on the same connection.
  // Waited for up to 2 s: the key's 5 s ttl must not be what removes it.
  CHECK(redlock::test::eventually(
      [&] {
        return server.raw({"EXISTS", key("paused")}).integer() == 0;
      },
      2s));
  REQUIRE(lock.try_lock());
  lock.unlock();
}

TEST_CASE("OOM at maxmemory is a ServerError with the server's words", "[redis][bad-input]") {
  ServerOptions options;
  options.extra_args = {"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"};
  RedisServer server(options);
  redlock::Client client(server.endpoint());
  // DEBUG POPULATE ignores maxmemory: push the server well over its limit.
  server.raw({"DEBUG", "POPULATE", "50000", key("fill"), "100"});
  REQUIRE(server.raw({"SET", key("probe"), "x"}).str().rfind("OOM", 0) == 0);
  redlock::Lock lock(client, key("oom"), fast());
  try {
    lock.try_lock();
    FAIL("expected ServerError");
  } catch (const redlock::ServerError& e) {
    CHECK(e.server_message().rfind("OOM", 0) == 0);
    CHECK(std::string(e.what()).find("maxmemory") != std::string::npos);
  }
  CHECK_FALSE(lock.owns_lock());
}

TEST_CASE("A wrong-type fence counter is reported, not misread", "[redis][bad-input]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("bad-fence");
  server.raw({"HSET", helper_key(k, ":fence"), "f", "v"});
  auto o = fast();
  o.fencing = true;
  redlock::Lock lock(client, k, o);
  CHECK_THROWS_AS(lock.try_lock(), redlock::ServerError);
  CHECK_FALSE(lock.owns_lock());
}
