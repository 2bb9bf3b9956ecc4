// tests/test_release_retry.cpp: a release that may not have reached a node is retried there in
// the background (issue 41; src/watch/release_retry.hpp), and a refusal never is.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <redlock/redlock.hpp>

#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/lock_fixture.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::fast;
using redlock::test::FaultProxy;
using redlock::test::key;
using redlock::test::RedisServer;

namespace {

// A server behind a fault proxy; a Client through it, quick to give up on a dead connection; a
// Watchdog of the test's own, whose counters the cases read.
struct Rig {
  explicit Rig(const std::string& name) : proxy("127.0.0.1", server.endpoint().port), k(key(name)) {
    redlock::Endpoint endpoint = server.endpoint();
    endpoint.port = proxy.port();
    endpoint.command_timeout = 300ms;
    endpoint.connect_timeout = 300ms;
    client = std::make_unique<redlock::Client>(endpoint);
  }
  redlock::LockOptions options(std::chrono::milliseconds ttl) const {
    auto o = fast(ttl);
    o.watchdog = dog;
    return o;
  }
  bool exists() const { return server.raw({"EXISTS", k}).integer() == 1; }
  // Every connection reset, and new ones closed at once.
  void cut() {
    proxy.set_refuse(true);
    proxy.reset_all();
  }

  RedisServer server;
  FaultProxy proxy;
  std::unique_ptr<redlock::Client> client;
  std::string k;
  std::shared_ptr<redlock::Watchdog> dog = std::make_shared<redlock::Watchdog>();
};

}  // namespace

// Before the retry the key stayed for its whole ttl (20 s here), and a fair queue's head waited
// that long: a planned SENTINEL FAILOVER showed it (test_fair_topologies.cpp).
TEST_CASE("A release cut off from its server is retried: the key goes when the server is back",
          "[redis][lock][fault][liveness]") {
  for (const bool fair : {true, false}) {
    INFO("fair " << fair);
    Rig rig("release-retry");
    auto options = rig.options(20s);
    options.fair = fair;
    redlock::Lock lock(*rig.client, rig.k, options);
    REQUIRE(lock.try_lock());
    lock.unlock();  // once around: the scripts are cached
    REQUIRE(lock.try_lock());
    rig.cut();
    CHECK_THROWS_AS(lock.release(), redlock::Error);  // the caller hears of it, as before
    CHECK(rig.exists());
    CHECK(rig.dog->stats().release_retries == 1);
    CHECK(rig.dog->stats().releases_retried == 0);
    rig.proxy.clear();
    CHECK(eventually([&] { return !rig.exists(); }, 10s));  // half the ttl
    CHECK(eventually([&] { return rig.dog->stats().releases_retried == 1; }));
  }
}

TEST_CASE("A release the server answered is not retried: a refusal, a release that ran",
          "[redis][lock][fault]") {
  Rig rig("release-no-retry");
  redlock::Lock lock(*rig.client, rig.k, rig.options(20s));
  REQUIRE(lock.try_lock());
  CHECK(lock.release());
  REQUIRE(lock.try_lock());
  rig.server.raw({"DEL", rig.k});  // someone else took the key away
  CHECK_FALSE(lock.release());     // "not ours": a loss, reported
  REQUIRE(lock.try_lock());
  rig.proxy.drop_next_request();  // the release runs; its reply is lost, the resend refused
  CHECK(lock.release());
  CHECK(rig.dog->stats().release_retries == 0);
}

// A hold whose validity already ended left nothing to free: its key expired by itself.
TEST_CASE("A release after the hold's validity ended is not retried", "[redis][lock][fault]") {
  Rig rig("release-late");
  redlock::Lock lock(*rig.client, rig.k, rig.options(200ms));
  REQUIRE(lock.try_lock());
  std::this_thread::sleep_for(300ms);
  rig.cut();
  try {
    lock.release();
  } catch (const redlock::Error&) {
  }
  CHECK(rig.dog->stats().release_retries == 0);
}
