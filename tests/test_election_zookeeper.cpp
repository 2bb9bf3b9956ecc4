// [zookeeper][election]: redlock::zookeeper::Election against a real ZooKeeper: hand-over on
// resign with a higher term (the czxid), leader() and observe() from a non-candidate, and run()
// stopping its worker when the leader's session expires, then leading again on a new session.
#include <zookeeper/zookeeper.h>

#include <unistd.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <redlock/election.hpp>
#include <redlock/zookeeper.hpp>

#include "api/access.hpp"
#include "backends/zookeeper/zk_session.hpp"
#include "election_worker.hpp"
#include "support/eventually.hpp"
#include "support/zookeeper_server.hpp"

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::ZooKeeperServer;
using Clock = std::chrono::steady_clock;

namespace {

std::string fresh_uri(const ZooKeeperServer& server, int timeout_ms) {
  static int n = 0;
  return server.uri("/redlock-election-" + std::to_string(::getpid()) + "-" + std::to_string(++n) +
                    "?session_timeout=" + std::to_string(timeout_ms));
}

// Ends `session`'s ZooKeeper session on the server, as an operator's tool would: another
// handle takes the session over (its id and password) and closes it.
void expire(redlock::zookeeper::Session& session, const ZooKeeperServer& server) {
  const auto conn = redlock::detail::Access::impl(session)->conn();
  const clientid_t id = *zoo_client_id(conn->handle());
  const std::string hosts = "127.0.0.1:" + std::to_string(server.port());
  zhandle_t* twin = zookeeper_init(hosts.c_str(), nullptr, 30000, &id, nullptr, 0);
  REQUIRE(twin != nullptr);
  CHECK(eventually([&] { return zoo_state(twin) == ZOO_CONNECTED_STATE; }));
  zookeeper_close(twin);
}

}  // namespace

TEST_CASE("zookeeper::Election: resign hands over at once, the term (czxid) grows, observe()",
          "[zookeeper][election]") {
  REQUIRE_ZOOKEEPER();
  ZooKeeperServer& server = redlock::test::shared_zookeeper_server();
  const std::string uri = fresh_uri(server, 10000);
  redlock::zookeeper::Session s1(uri), s2(uri), s3(uri);
  redlock::zookeeper::Election watcher(s3, "svc", "watcher");
  redlock::zookeeper::Election a(s1, "svc", "a");
  redlock::zookeeper::Election b(s2, "svc", "b");
  redlock::test::check_hand_over(a, b, watcher);
}

TEST_CASE("zookeeper::Election: a session expiry stops run()'s worker, it leads again",
          "[zookeeper][election]") {
  REQUIRE_ZOOKEEPER();
  ZooKeeperServer& server = redlock::test::shared_zookeeper_server();
  const std::string uri = fresh_uri(server, 30000);
  redlock::zookeeper::Session session(uri), other(uri);
  redlock::zookeeper::Election election(session, "runner", "r", redlock::test::with_ttl(30s));
  redlock::zookeeper::Election watcher(other, "runner", "watcher");
  redlock::test::RecordingWorker worker(election);
  REQUIRE(eventually([&] { return worker.started() == 1; }, 10s));
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->term == worker.terms()[0]);

  expire(session, server);
  // Told by the expiry event, long before the 30 s session's first confirmation (10 s).
  CHECK(eventually([&] { return worker.stopped() == 1; }, 8s));
  REQUIRE(eventually([&] { return worker.started() == 2; }, 10s));
  CHECK(worker.terms()[1] > worker.terms()[0]);
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->term == worker.terms()[1]);
  worker.stop_and_join();
  CHECK_FALSE(watcher.leader());
}

TEST_CASE("zookeeper::Election: a disconnected leader steps down at once, it leads again after",
          "[zookeeper][election]") {
  REQUIRE_ZOOKEEPER();
  ZooKeeperServer server;  // its own: this case stops it
  redlock::zookeeper::Session session(fresh_uri(server, 30000));
  redlock::zookeeper::Election election(session, "suspend", "s", redlock::test::with_ttl(30s));
  redlock::test::RecordingWorker worker(election);
  REQUIRE(eventually([&] { return worker.started() == 1; }, 10s));
  server.kill9();
  // Suspended (disconnected): stopped long before the 30 s session's validity would run out.
  CHECK(eventually([&] { return worker.stopped() == 1; }, 8s));
  CHECK_FALSE(election.is_leader());
  server.restart();
  REQUIRE(eventually([&] { return worker.started() == 2; }, 60s));
  CHECK(worker.terms()[1] > worker.terms()[0]);
}
