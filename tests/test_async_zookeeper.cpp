// The async operations (redlock/detail/async.hpp) on a zookeeper::Lock: a waiter completed by
// the release it hears (the session's waker), a timed one that gives up, a cancelled one that
// leaves no znode.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <unistd.h>

#include <redlock/zookeeper.hpp>

#include "backends/zookeeper/zk_names.hpp"
#include "backends/zookeeper/zk_session.hpp"
#include "support/async_outcome.hpp"
#include "support/zookeeper_server.hpp"

TEST_CASE("async: zookeeper::Lock waits, gives up and is cancelled without a thread",
          "[zookeeper][async]") {
  REQUIRE_ZOOKEEPER();
  redlock::test::ZooKeeperServer server;
  const std::string chroot = "/redlock-async-" + std::to_string(::getpid());
  const std::string uri = server.uri(chroot);
  redlock::zookeeper::Session s1(uri);
  redlock::zookeeper::Session s2(uri);
  redlock::zookeeper::Lock holder(s1, "async", redlock::test::slow_options());
  redlock::zookeeper::Lock waiter(s2, "async", redlock::test::slow_options());
  redlock::detail::ZkSession reader(uri);
  redlock::test::waits_and_cancels(holder, waiter, [&] {
    std::vector<std::string> children;
    redlock::detail::zk_children(*reader.conn(), chroot + "/async", &children);
    const auto n = redlock::detail::zk_queue_of(children).size();
    return n > 0 ? static_cast<int>(n) - 1 : 0;  // but the holder's
  });
}
