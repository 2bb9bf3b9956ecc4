// A lone waiter reads its subscriber's connection itself (Subscriber::wait_lent): it is still
// woken by releases and hand-overs, by cancel_waits(), and gives the connection back whenever the
// subscriber thread is needed (another key's subscription, an unsubscribe falling due, a killed
// connection).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <redlock/observer.hpp>
#include <redlock/redlock.hpp>

#include "api/access.hpp"
#include "io/connection.hpp"  // ClientImpl::subscriber()
#include "support/eventually.hpp"
#include "support/redis_server.hpp"
#include "support/waiter_thread.hpp"
#include "util/key_slot.hpp"        // helper_key
#include "watch/release_watch.hpp"  // make_release_watch: the watch a fair waiter uses
#include "watch/subscriber.hpp"     // SubscriberStats::loans

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::eventually;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::Waiter;
using Clock = std::chrono::steady_clock;

namespace {

// Long enough that only a release message, never a timer, can end these waits in time.
redlock::LockOptions long_lease(bool fair = false) {
  redlock::LockOptions o;
  o.ttl = 60s;
  o.retry_delay = 10s;
  o.fair = fair;
  return o;
}

redlock::detail::SubscriberStats stats(redlock::Client& client) {
  return redlock::detail::Access::client(client)->subscriber().stats();
}

long long subscribers(const RedisServer& server, const std::string& channel) {
  const auto r = server.raw({"PUBSUB", "NUMSUB", channel});
  return r.elements().size() == 2 ? r.elements()[1].integer() : -1;
}

// Its first on_wake hook takes 3 s (a slow metrics sink).
struct SlowFirstWake : redlock::Observer {
  std::atomic<int> wakes{0};
  void on_wake(const redlock::WakeEvent& /*event*/) noexcept override {
    if (wakes++ == 0) std::this_thread::sleep_for(3s);
  }
};

}  // namespace

TEST_CASE("A lone waiter reads its subscription itself and wakes on the release",
          "[redis][wake][lend]") {
  const bool fair = GENERATE(false, true);
  INFO((fair ? "fair mode (a hand-over)" : "default (a release message)"));
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("lend-lone");
  redlock::Lock holder(client, k, long_lease(fair));
  holder.lock();
  Waiter waiter(client, k, long_lease(fair));
  REQUIRE(eventually([&] { return stats(client).loans >= 1; }));  // the case under test
  // A message that frees nothing: the waiter tries, is refused, and waits on a loan again.
  if (!fair) server.raw({"PUBLISH", helper_key(k, ":released"), "not-a-release"});
  REQUIRE(eventually([&] { return stats(client).loans >= (fair ? 1U : 2U); }));
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(waiter.done());
  const auto released = Clock::now();
  holder.unlock();
  REQUIRE(eventually([&] { return waiter.done(); }));
  CHECK_FALSE(waiter.cancelled());
  CHECK(waiter.at() - released < 1s);  // not the 10 s retry delay, nor the 60 s lease
  CHECK(stats(client).reconnects == 1);
}

TEST_CASE("cancel_waits ends a waiter that reads its subscription itself", "[redis][wake][lend]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("lend-cancel");
  redlock::Lock holder(client, k, long_lease());
  holder.lock();
  Waiter waiter(client, k, long_lease());
  REQUIRE(eventually([&] { return stats(client).loans >= 1; }));
  const auto cancelled = Clock::now();
  waiter.cancel();
  REQUIRE(eventually([&] { return waiter.done(); }));
  CHECK(waiter.cancelled());
  CHECK(waiter.at() - cancelled < 1s);
  holder.unlock();
}

TEST_CASE("A waiter on a second key takes the lent connection back and both are woken",
          "[redis][wake][lend]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k1 = key("lend-first");
  const auto k2 = key("lend-second");
  redlock::Lock h1(client, k1, long_lease());
  redlock::Lock h2(client, k2, long_lease());
  h1.lock();
  h2.lock();
  Waiter w1(client, k1, long_lease());
  REQUIRE(eventually([&] { return stats(client).loans >= 1; }));
  // The second key needs a SUBSCRIBE, which only the subscriber thread sends.
  Waiter w2(client, k2, long_lease());
  REQUIRE(eventually([&] { return subscribers(server, helper_key(k2, ":released")) == 1; }));
  auto released = Clock::now();
  h2.unlock();
  REQUIRE(eventually([&] { return w2.done(); }));
  CHECK(w2.at() - released < 1s);
  CHECK_FALSE(w1.done());
  released = Clock::now();
  h1.unlock();
  REQUIRE(eventually([&] { return w1.done(); }));
  CHECK(w1.at() - released < 1s);
}

TEST_CASE("A lingering subscription is dropped on time while a lone waiter reads the connection",
          "[redis][wake][lend]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k1 = key("lend-waiting");
  const auto k2 = key("lend-lingering");
  const auto channel2 = helper_key(k2, ":released");
  {
    // A wait on k2 leaves its subscription lingering (kLinger, 500 ms).
    redlock::Lock h2(client, k2, long_lease());
    h2.lock();
    Waiter w2(client, k2, long_lease());
    REQUIRE(eventually([&] { return subscribers(server, channel2) == 1; }));
    h2.unlock();
    REQUIRE(eventually([&] { return w2.done(); }));
  }
  redlock::Lock h1(client, k1, long_lease());
  h1.lock();
  const auto loans = stats(client).loans;
  Waiter w1(client, k1, long_lease());
  REQUIRE(eventually([&] { return stats(client).loans > loans; }));
  REQUIRE(subscribers(server, channel2) == 1);
  // Due 500 ms after w2 left: the thread takes the connection back to unsubscribe.
  CHECK(eventually([&] { return subscribers(server, channel2) == 0; }, 3s));
  CHECK_FALSE(w1.done());
  const auto released = Clock::now();
  h1.unlock();
  REQUIRE(eventually([&] { return w1.done(); }));
  CHECK(w1.at() - released < 1s);
}

TEST_CASE("A lone waiter's lent connection killed: the thread reconnects and the waiter wakes",
          "[redis][wake][lend][fault]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("lend-killed");
  redlock::Lock holder(client, k, long_lease());
  holder.lock();
  Waiter waiter(client, k, long_lease());
  REQUIRE(eventually([&] { return stats(client).loans >= 1; }));
  server.raw({"CLIENT", "KILL", "TYPE", "pubsub"});
  // The waiter's read fails; the thread reconnects, subscribes again, and the waiter (woken to
  // retry, since releases may have been missed) waits again.
  REQUIRE(eventually([&] { return stats(client).reconnects == 2; }));
  REQUIRE(eventually([&] { return subscribers(server, helper_key(k, ":released")) == 1; }));
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(waiter.done());
  const auto released = Clock::now();
  holder.unlock();
  REQUIRE(eventually([&] { return waiter.done(); }));
  CHECK_FALSE(waiter.cancelled());
  CHECK(waiter.at() - released < 1s);
}

TEST_CASE("A woken waiter's slow observer hook does not hold up another key's waiter",
          "[redis][wake][lend]") {
  // Between two waits the connection is the subscriber thread's again: a new subscription and
  // the releases it brings do not wait for the first waiter to come back.
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k1 = key("lend-slow-hook");
  const auto k2 = key("lend-meanwhile");
  redlock::Lock h1(client, k1, long_lease());
  redlock::Lock h2(client, k2, long_lease());
  h1.lock();
  h2.lock();
  auto observed = long_lease();
  const auto hook = std::make_shared<SlowFirstWake>();
  observed.observer = hook;
  Waiter w1(client, k1, observed);
  REQUIRE(eventually([&] { return stats(client).loans >= 1; }));
  server.raw({"PUBLISH", helper_key(k1, ":released"), "not-a-release"});  // wakes w1, frees nothing
  REQUIRE(eventually([&] { return hook->wakes.load() == 1; }));
  Waiter w2(client, k2, long_lease());
  CHECK(eventually([&] { return subscribers(server, helper_key(k2, ":released")) == 1; }, 1s));
  const auto released = Clock::now();
  h2.unlock();
  REQUIRE(eventually([&] { return w2.done(); }, 15s));
  CHECK(w2.at() - released < 1s);  // not after w1's hook (3 s), nor the 10 s retry delay
  h1.unlock();
}

TEST_CASE("A fair waiter reads a hand-over that reached its returned connection before giving up",
          "[redis][wake][lend][fair]") {
  // A loan ends with the connection returned to a parked thread, so a hand-over sent during the
  // waiter's last attempt sits unread; at its deadline the waiter looks for one (take_grant)
  // and must find it: the server gave it the lock in time.
  RedisServer server;
  redlock::Client client(server.endpoint());
  const std::string k = key("lend-grant");  // channels an ACL user of the test suite may use
  const std::string release = k + ":released";
  const std::string grant = k + ":granted";
  const std::string sha1(40, 'a');
  auto watch = redlock::detail::make_release_watch(
      {redlock::detail::Access::client(client)}, redlock::detail::WatchChannels{release, grant, k},
      Clock::now() + 2s, sha1);
  CHECK_FALSE(watch->wait_until(Clock::now() + 30ms));  // lent, timed out, returned
  REQUIRE(stats(client).loans >= 1);
  const auto messages = stats(client).messages;
  server.raw({"PUBLISH", grant, "grant:1:7:" + sha1});
  std::this_thread::sleep_for(100ms);
  CHECK(stats(client).messages == messages);  // unread: the thread is parked, the waiter away
  std::uint64_t seq = 0;
  std::uint64_t fence = 0;
  REQUIRE(watch->take_grant(seq, fence));
  CHECK(seq == 1);
  CHECK(fence == 7);
}
