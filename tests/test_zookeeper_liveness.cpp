// [zookeeper] A wait always ends (#41): a holder paused (SIGSTOP) keeps its socket but stops its
// session's heartbeats; the server expires the session after its timeout and deletes its nodes,
// so the waiters behind it, and behind a paused waiter, are served by then. Worker processes
// are this binary again (zk_test_support.hpp); a real ZooKeeper 3.8.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include <redlock/zookeeper.hpp>

#include "support/zookeeper_server.hpp"
#include "zk_test_support.hpp"  // fresh_chroot, uri_of, spawn_child, wait_child

using namespace std::chrono_literals;
using namespace redlock::test::zk;
using Clock = std::chrono::steady_clock;

TEST_CASE("zookeeper: a holder and the head paused (SIGSTOP): the next is served by the timeout",
          "[zookeeper][liveness][fault][slow]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  constexpr auto kTimeout = 2000ms;
  const std::string uri = uri_of(server, fresh_chroot(), static_cast<int>(kTimeout.count()));
  const std::string file =
      server.dir() + "/paused-" + std::to_string(Clock::now().time_since_epoch().count());
  const pid_t holder =
      spawn_child({"REDLOCK_ZK_URI=" + uri, "REDLOCK_ZK_FILE=" + file, "REDLOCK_ZK_MODE=hold"});
  std::uint64_t holder_fence = 0;
  const auto deadline = Clock::now() + 30s;
  while (!(std::ifstream(file) >> holder_fence) && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(holder_fence > 0);
  // The head: a process that waits for the lock (one round under it), queued first.
  const pid_t head = spawn_child(
      {"REDLOCK_ZK_URI=" + uri, "REDLOCK_ZK_FILE=" + file + ".count", "REDLOCK_ZK_ROUNDS=1"});
  std::this_thread::sleep_for(1s);  // connected and queued
  redlock::zookeeper::Session session(uri);
  redlock::zookeeper::Lock next(session, "mutex");
  REQUIRE_FALSE(next.try_lock());
  ::kill(holder, SIGSTOP);
  ::kill(head, SIGSTOP);
  const auto paused = Clock::now();
  REQUIRE(next.try_lock_for(30s));
  const auto took = Clock::now() - paused;
  WARN("served " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                 << " ms after the holder and the head were paused (session timeout "
                 << kTimeout.count() << " ms)");
  CHECK(took < kTimeout + 4s);  // the sessions' expiry, and a busy machine
  CHECK(next.fence() > holder_fence);
  next.unlock();
  for (const pid_t pid : {holder, head}) {
    ::kill(pid, SIGKILL);
    wait_child(pid);
  }
}
