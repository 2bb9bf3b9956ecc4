// The subscriber's connection notices a dead peer (issue 41, "Subscriber health"): a waiter whose
// subscription was cut behind a partition, while the server dropped its socket, is served once
// the network heals (its subscriber PINGs after 2 s of silence and waits 2 s for the answer, then
// reconnects, re-subscribes and wakes its waiters), and an idle subscriber sends at most one PING
// per 2 s. Counted on the server: INFO commandstats' ping calls.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/eventually.hpp"
#include "support/fair_queue.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"
#include "support/waiter_thread.hpp"

using namespace std::chrono_literals;
using redlock::test::command_calls;
using redlock::test::eventually;
using redlock::test::fair_lock_options;
using redlock::test::FaultProxy;
using redlock::test::HeldFairLock;
using redlock::test::pubsub_connections;
using redlock::test::wait_for_queue;
using redlock::test::Waiter;
using Clock = std::chrono::steady_clock;

TEST_CASE("A waiter whose subscription was dropped behind a partition is served once it heals",
          "[redis][wake][fair][fault]") {
  // One waiter reads its subscription itself (a lent connection); two are read for by the
  // subscriber thread.
  const int waiters = GENERATE(1, 2);
  HeldFairLock held("sub-half-open");  // its lease ends in 60 s: only a wake-up serves in time
  FaultProxy proxy("127.0.0.1", held.server.endpoint().port);
  redlock::Endpoint endpoint = held.server.endpoint();
  endpoint.port = proxy.port();
  endpoint.connect_timeout = 1s;
  redlock::Client via_proxy(endpoint);
  std::vector<std::unique_ptr<Waiter>> queued;
  for (int i = 0; i < waiters; ++i) {
    queued.push_back(std::make_unique<Waiter>(via_proxy, held.k, fair_lock_options()));
    REQUIRE(wait_for_queue(held.server, held.k, i + 1));
  }
  REQUIRE(eventually([&] { return pubsub_connections(held.server) == 1; }));
  // The partition: nothing passes, and the server drops the subscriber's socket (what its
  // tcp-keepalive does to a peer it cannot reach); the client's side stays open.
  proxy.set_half_open(true);
  proxy.set_blackhole(true);
  held.server.raw({"CLIENT", "KILL", "TYPE", "pubsub"});
  std::this_thread::sleep_for(300ms);
  proxy.clear();  // healed
  const auto released = Clock::now();
  REQUIRE(held.holder.release());  // hands over to nobody: no subscriber hears the waiters
  // A PING within 2 s of silence, its answer awaited 2 s: the subscriber reconnects, and its
  // waiters try again and are served, well before the holder's lease would have ended.
  for (auto& waiter : queued) {
    REQUIRE(eventually([&] { return waiter->done(); }, 8s));
    CHECK_FALSE(waiter->cancelled());
    CHECK(waiter->at() - released < 8s);
  }
}

TEST_CASE("An idle subscriber sends at most one PING per 2 s", "[redis][wake][fair]") {
  HeldFairLock held("sub-idle-pings");
  redlock::Client client(held.server.endpoint());
  Waiter waiter(client, held.k, fair_lock_options());
  REQUIRE(wait_for_queue(held.server, held.k, 1));
  REQUIRE(eventually([&] { return pubsub_connections(held.server) == 1; }));
  const long long before = command_calls(held.server, "ping");
  std::this_thread::sleep_for(4500ms);
  const long long pings = command_calls(held.server, "ping") - before;
  CHECK(pings >= 1);                            // it does look
  CHECK(pings <= 3);                            // 4.5 s / 2 s, plus one for the phase
  CHECK(pubsub_connections(held.server) == 1);  // answered: the same connection kept
  CHECK_FALSE(waiter.done());
}
