// [zookeeper]: redlock::zookeeper::Lock against a real ZooKeeper 3.8
// (tests/support/zookeeper_server). Cases that do not kill or stop the server share one; each
// case works under a chroot of its own. Worker processes are this binary again, running the
// hidden case "[.zkchild]" (no fork of a multithreaded process).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <redlock/client.hpp>
#include <redlock/errors.hpp>
#include <redlock/lock.hpp>
#include <redlock/zookeeper.hpp>

#include "api/access.hpp"
#include "backends/zookeeper/zk_names.hpp"
#include "backends/zookeeper/zk_session.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"
#include "support/zookeeper_server.hpp"
#include "zk_test_support.hpp"  // fresh_chroot, uri_of, spawn, spawn_child, wait_child

using namespace std::chrono_literals;
using redlock::test::ZooKeeperServer;
using namespace redlock::test::zk;
using Clock = std::chrono::steady_clock;

namespace {

// The lock znodes under <chroot>/<name>, read with the component's own plain calls.
std::size_t queue_length(const std::string& uri, const std::string& path) {
  redlock::detail::ZkSession session(uri);
  std::vector<std::string> children;
  redlock::detail::zk_children(*session.conn(), path, &children);
  return redlock::detail::zk_queue_of(children).size();
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

}  // namespace

// The worker: REDLOCK_ZK_MODE=count adds 1 to the number in REDLOCK_ZK_FILE, ROUNDS times, each
// under the lock; REDLOCK_ZK_MODE=hold takes the lock, writes REDLOCK_ZK_FILE and sleeps;
// REDLOCK_ZK_MODE=loop connects, writes REDLOCK_ZK_FILE.ready, waits for REDLOCK_ZK_FILE.go,
// then takes the lock and holds it 1 ms in a loop for ROUNDS ms, and writes its count.
TEST_CASE("zookeeper child worker", "[.zkchild]") {
  redlock::zookeeper::Session session(env_or("REDLOCK_ZK_URI", ""));
  redlock::zookeeper::Lock lock(session, "mutex");
  const std::string file = env_or("REDLOCK_ZK_FILE", "");
  if (env_or("REDLOCK_ZK_MODE", "") == "loop") {
    if (lock.try_lock()) lock.unlock();  // connected, the chroot made
    std::ofstream(file + ".ready") << "1\n";
    while (!std::ifstream(file + ".go")) std::this_thread::sleep_for(5ms);
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(std::stoi(env_or("REDLOCK_ZK_ROUNDS", "0")));
    long n = 0;
    for (; std::chrono::steady_clock::now() < until; ++n) {
      std::lock_guard<redlock::zookeeper::Lock> guard(lock);
      std::this_thread::sleep_for(1ms);
    }
    std::ofstream(file) << n << "\n";
    return;
  }
  if (env_or("REDLOCK_ZK_MODE", "") == "hold") {
    lock.lock();
    std::ofstream(file) << lock.fence() << "\n";
    std::this_thread::sleep_for(120s);  // killed by the test long before
    return;
  }
  const int rounds = std::stoi(env_or("REDLOCK_ZK_ROUNDS", "10"));
  for (int i = 0; i < rounds; ++i) {
    std::lock_guard<redlock::zookeeper::Lock> guard(lock);
    long value = 0;
    std::ifstream(file) >> value;
    std::this_thread::sleep_for(1ms);  // widens the window a second holder would need
    std::ofstream(file) << value + 1 << "\n";
  }
}

TEST_CASE("zookeeper: bad URIs and names are rejected with the reason", "[zookeeper]") {
  using redlock::zookeeper::Session;
  const auto rejects = [](const char* uri, const char* what) {
    INFO(uri);
    REQUIRE_THROWS_WITH(Session(uri), Catch::Contains(what));
  };
  rejects("redis://127.0.0.1:2181", "scheme");
  rejects("zookeeper://", "no host");
  rejects("zookeeper:///chroot", "no host");
  rejects("zookeeper://h:0", "port '0'");
  rejects("zookeeper://h:70000", "port '70000'");
  rejects("zookeeper://h:abc", "port 'abc'");
  rejects("zookeeper://h:", "empty port");
  rejects("zookeeper://h1,,h2", "empty host");
  rejects("zookeeper://h/a//b", "chroot");
  rejects("zookeeper://h/a/", "must not end with '/'");
  rejects("zookeeper://h/a/../b", "chroot");
  rejects("zookeeper://h?session_timeout=abc", "session_timeout 'abc'");
  rejects("zookeeper://h?session_timeout=0", "session_timeout '0'");
  rejects("zookeeper://h?timeout=5", "unknown parameter 'timeout'");
  REQUIRE_NOTHROW(Session("zookeeper://h1:2181,h2,[::1]:2182/a/b?session_timeout=3000"));
  REQUIRE(Session("zookeeper://h?session_timeout=3000").session_timeout() == 3000ms);

  Session session("zookeeper://127.0.0.1:1");
  const std::vector<std::string> names{
      "", "/a", "a/", "a//b", "a/./b", "..", std::string("a\0b", 3)};
  for (const auto& name : names) {
    INFO(name);
    REQUIRE_THROWS_AS(redlock::zookeeper::Lock(session, name), std::invalid_argument);
  }
  redlock::LockOptions bad;
  bad.retry_delay = 0ms;
  REQUIRE_THROWS_AS(redlock::zookeeper::Lock(session, "x", bad), std::invalid_argument);
}

TEST_CASE("zookeeper: an unreachable server is a ConnectionError, not contention", "[zookeeper]") {
  redlock::zookeeper::Session session("zookeeper://127.0.0.1:1?session_timeout=500");
  redlock::zookeeper::Lock lock(session, "x");
  REQUIRE_THROWS_AS(lock.try_lock(), redlock::ConnectionError);
  REQUIRE_FALSE(lock.owns_lock());
}

TEST_CASE("zookeeper: try_lock, re-entrancy, fence, and no znode left by a refusal",
          "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string chroot = fresh_chroot();
  const std::string uri = uri_of(server, chroot, 4000);
  redlock::zookeeper::Session s1(uri), s2(uri);
  redlock::zookeeper::Lock a(s1, "res"), b(s2, "res"), c(s1, "res");

  REQUIRE(a.try_lock());
  REQUIRE(a.owns_lock());
  REQUIRE(a.validity() > 0ms);
  REQUIRE(a.validity() <= s1.session_timeout());
  const auto first_fence = a.fence();
  REQUIRE(first_fence > 0);
  REQUIRE(a.key() == "res");
  REQUIRE(a.extend(std::chrono::hours(1)));  // confirms now; capped at the session timeout
  REQUIRE(a.validity() <= s1.session_timeout());
  REQUIRE(a.try_lock());  // re-entrant: depth 2
  REQUIRE(a.release());
  REQUIRE(a.owns_lock());

  REQUIRE_FALSE(b.try_lock());
  REQUIRE_FALSE(c.try_lock());  // another Lock object of the same session is another holder
  REQUIRE(queue_length(uri, chroot + "/res") == 1);  // the refusals left nothing behind

  a.unlock();
  REQUIRE_FALSE(a.owns_lock());
  REQUIRE(b.try_lock());
  REQUIRE(b.fence() > first_fence);
  REQUIRE(a.lease().lost());  // not held by this thread any more
  b.unlock();
  REQUIRE(queue_length(uri, chroot + "/res") == 0);
}

// Review 3, item 1, for every backend: the holder's znode deleted by someone else.
TEST_CASE("zookeeper: a release after the znode was deleted and taken is false, and lost",
          "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string chroot = fresh_chroot();
  const std::string uri = uri_of(server, chroot, 4000);
  redlock::zookeeper::Session s1(uri), s2(uri);
  std::atomic<int> losses{0};
  redlock::LockOptions o;
  o.on_lost = [&](const redlock::LostEvent&) { ++losses; };
  redlock::zookeeper::Lock a(s1, "res", o), b(s2, "res");
  REQUIRE(a.try_lock());
  {
    redlock::detail::ZkSession operator_session(uri);
    std::vector<std::string> children;
    redlock::detail::zk_children(*operator_session.conn(), chroot + "/res", &children);
    REQUIRE(children.size() == 1);
    REQUIRE(redlock::detail::zk_delete(*operator_session.conn(), chroot + "/res/" + children[0]) ==
            0);
  }
  REQUIRE(b.try_lock());
  CHECK_FALSE(a.release());
  CHECK(redlock::test::eventually([&] { return losses.load() == 1; }));
  b.unlock();
}

TEST_CASE("zookeeper: waiters are served first come, first served (50 waiters)", "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string chroot = fresh_chroot();
  const std::string uri = uri_of(server, chroot, 4000);
  redlock::zookeeper::Session session(uri);
  constexpr int kWaiters = 50;
  redlock::zookeeper::Lock holder(session, "fifo");
  holder.lock();
  std::vector<std::unique_ptr<redlock::zookeeper::Lock>> locks;
  for (int i = 0; i < kWaiters; ++i) {
    locks.push_back(std::make_unique<redlock::zookeeper::Lock>(session, "fifo"));
  }
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      if (!locks[i]->try_lock_for(60s)) return;
      {
        std::lock_guard<std::mutex> guard(mutex);
        order.push_back(i);
      }
      locks[i]->unlock();
    });
    // The next waiter starts only once this one's znode is in the queue.
    const auto deadline = Clock::now() + 20s;
    while (queue_length(uri, chroot + "/fifo") < static_cast<std::size_t>(i + 2) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
  }
  holder.unlock();
  for (auto& t : threads) t.join();
  REQUIRE(order.size() == static_cast<std::size_t>(kWaiters));
  for (int i = 0; i < kWaiters; ++i) REQUIRE(order[i] == i);
}

TEST_CASE("zookeeper: mutual exclusion across processes", "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string uri = uri_of(server, fresh_chroot(), 4000);
  const std::string file =
      server.dir() + "/counter-" + std::to_string(Clock::now().time_since_epoch().count());
  std::ofstream(file) << 0 << "\n";
  constexpr int kProcesses = 3, kRounds = 15;
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(
        spawn_child({"REDLOCK_ZK_URI=" + uri, "REDLOCK_ZK_FILE=" + file, "REDLOCK_ZK_MODE=count",
                     "REDLOCK_ZK_ROUNDS=" + std::to_string(kRounds)}));
  }
  for (pid_t pid : children) REQUIRE(wait_child(pid) == 0);
  long value = 0;
  std::ifstream(file) >> value;
  REQUIRE(value == kProcesses * kRounds);
}

TEST_CASE("zookeeper: std::scoped_lock over a Redis Lock and a ZooKeeper Lock", "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  redlock::test::RedisServer redis;
  redlock::Client client(redis.endpoint());
  const std::string uri = uri_of(server, fresh_chroot(), 4000);
  redlock::zookeeper::Session session(uri);
  redlock::Lock redis_lock(client, "zk-and-redis");
  redlock::zookeeper::Lock zk_lock(session, "zk-and-redis");
  {
    std::scoped_lock both(redis_lock, zk_lock);
    REQUIRE(redis_lock.owns_lock());
    REQUIRE(zk_lock.owns_lock());
    redlock::zookeeper::Session other(uri);
    redlock::zookeeper::Lock zk_other(other, "zk-and-redis");
    REQUIRE_FALSE(zk_other.try_lock());
  }
  REQUIRE_FALSE(redis_lock.owns_lock());
  REQUIRE_FALSE(zk_lock.owns_lock());
  redlock::zookeeper::Session other(uri);
  redlock::zookeeper::Lock zk_other(other, "zk-and-redis");
  REQUIRE(zk_other.try_lock());
}

TEST_CASE("zookeeper: a holder killed with -9 gives way once its session expires", "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  constexpr auto kTimeout = 2000ms;
  const std::string uri = uri_of(server, fresh_chroot(), static_cast<int>(kTimeout.count()));
  const std::string file =
      server.dir() + "/held-" + std::to_string(Clock::now().time_since_epoch().count());
  const pid_t child =
      spawn_child({"REDLOCK_ZK_URI=" + uri, "REDLOCK_ZK_FILE=" + file, "REDLOCK_ZK_MODE=hold"});
  std::uint64_t holder_fence = 0;
  const auto deadline = Clock::now() + 30s;
  while (!(std::ifstream(file) >> holder_fence) && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  redlock::zookeeper::Session session(uri);
  redlock::zookeeper::Lock waiter(session, "mutex");
  const bool held_by_child = holder_fence > 0 && !waiter.try_lock();
  ::kill(child, SIGKILL);
  wait_child(child);
  REQUIRE(held_by_child);
  const auto killed = Clock::now();
  REQUIRE(waiter.try_lock_for(30s));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed);
  WARN("acquired " << took.count() << " ms after kill -9 of the holder (session timeout "
                   << kTimeout.count() << " ms)");
  // The server keeps the session for the timeout since it last heard from it (at most a third
  // of it before the kill): never much sooner.
  REQUIRE(took >= kTimeout / 2);
  REQUIRE(waiter.fence() > holder_fence);
  waiter.unlock();
}

TEST_CASE("zookeeper: a server stopped past the session timeout: the holder is told first",
          "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  ZooKeeperServer server;
  constexpr auto kTimeout = 2000ms;
  const std::string uri = uri_of(server, "/stop", static_cast<int>(kTimeout.count()));
  redlock::zookeeper::Session s1(uri);
  std::atomic<bool> lost_called{false};
  std::atomic<int> lost_reason{-1};
  redlock::LockOptions options;
  options.on_lost = [&](const redlock::LostEvent& e) {
    lost_reason = static_cast<int>(e.reason);
    lost_called = true;
  };
  redlock::zookeeper::Lock a(s1, "x", options);
  std::atomic<bool> held{false}, resumed{false}, lost_before_resume{false}, token_lost{false};
  std::atomic<std::int64_t> a_stopped{0};  // steady ns when A stopped believing it holds
  std::thread holder([&] {
    a.lock();
    held = true;
    const auto deadline = Clock::now() + 30s;
    while (a.owns_lock() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
    a_stopped = Clock::now().time_since_epoch().count();
    lost_before_resume = !resumed;
    token_lost = a.lease().lost();
    while (!resumed) std::this_thread::sleep_for(5ms);
    a.unlock();  // balances lock(); the znode goes (or went with the session)
  });
  while (!held) std::this_thread::sleep_for(5ms);
  server.pause();
  std::this_thread::sleep_for(2 * kTimeout);
  resumed = true;
  server.resume();
  redlock::zookeeper::Session s2(uri);
  redlock::zookeeper::Lock b(s2, "x");
  const bool b_held = b.try_lock_for(30s);
  const std::int64_t b_at = Clock::now().time_since_epoch().count();
  if (b_held) b.unlock();
  holder.join();
  const auto told_by = Clock::now() + 5s;  // on_lost runs on the watchdog's callback thread
  while (!lost_called && Clock::now() < told_by) std::this_thread::sleep_for(5ms);
  REQUIRE(b_held);
  REQUIRE(lost_before_resume);  // A stopped believing while the server was still stopped
  REQUIRE(a_stopped.load() < b_at);
  REQUIRE(token_lost);
  REQUIRE(lost_called);
  const auto reason = static_cast<redlock::LostReason>(lost_reason.load());
  REQUIRE(
      (reason == redlock::LostReason::expired || reason == redlock::LostReason::session_expired));
}

TEST_CASE("zookeeper: a session expiry is reported at once, not at the next confirmation",
          "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  ZooKeeperServer& server = redlock::test::shared_zookeeper_server();
  // A 30 s session: the watchdog confirms the hold every 10 s. Another client takes the session
  // over (its id and password) and closes it, as an operator's tool would: the server ends the
  // session, and our client hears "expired" when it reconnects.
  redlock::zookeeper::Session session(uri_of(server, fresh_chroot(), 30000));
  std::mutex mutex;
  std::condition_variable told;
  bool lost = false;
  auto reason = redlock::LostReason::refused;
  redlock::LockOptions options;
  options.on_lost = [&](const redlock::LostEvent& e) {
    std::lock_guard<std::mutex> guard(mutex);
    lost = true;
    reason = e.reason;
    told.notify_all();
  };
  redlock::zookeeper::Lock lock(session, "x", options);
  REQUIRE(lock.try_lock());
  const auto first_confirmation = Clock::now() + 10s;
  const auto conn = redlock::detail::Access::impl(session)->conn();
  const clientid_t id = *zoo_client_id(conn->handle());
  const std::string hosts = "127.0.0.1:" + std::to_string(server.port());
  zhandle_t* twin = zookeeper_init(hosts.c_str(), nullptr, 30000, &id, nullptr, 0);
  REQUIRE(twin != nullptr);
  const auto connected_by = Clock::now() + 5s;
  while (zoo_state(twin) != ZOO_CONNECTED_STATE && Clock::now() < connected_by) {
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(zoo_state(twin) == ZOO_CONNECTED_STATE);
  zookeeper_close(twin);  // closes the session on the server
  std::unique_lock<std::mutex> guard(mutex);
  // Before the first confirmation: only the expiry event can have told it.
  told.wait_until(guard, first_confirmation - 1s, [&] { return lost; });
  REQUIRE(lost);
  CHECK(static_cast<int>(reason) == static_cast<int>(redlock::LostReason::session_expired));
  guard.unlock();
  CHECK_FALSE(lock.owns_lock());
  CHECK(lock.lease().lost());
  lock.unlock();  // no throw: the znode went with the session
  // The Session carries on with a new ZooKeeper session.
  redlock::zookeeper::Lock again(session, "x");
  REQUIRE(again.try_lock_for(10s));
  again.unlock();
}

TEST_CASE("zookeeper: a server restart keeps the data, and fences keep growing", "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  ZooKeeperServer server;
  const std::string uri = uri_of(server, "/restart", 4000);
  redlock::zookeeper::Session s1(uri), s2(uri);
  redlock::zookeeper::Lock a(s1, "x"), c(s2, "x");
  a.lock();
  const auto before = a.fence();
  server.kill9();
  server.restart();
  const auto deadline = Clock::now() + 20s;
  while (!s1.connected() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  if (a.owns_lock()) REQUIRE_FALSE(c.try_lock());  // the session and its znode survived
  a.unlock();
  REQUIRE(c.try_lock_for(20s));
  REQUIRE(c.fence() > before);
  c.unlock();
}

TEST_CASE("zookeeper: a connection lost during create leaves no znode that blocks others",
          "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string chroot = fresh_chroot();
  redlock::test::FaultProxy proxy("127.0.0.1", server.port());
  const std::string via_proxy =
      "zookeeper://127.0.0.1:" + std::to_string(proxy.port()) + chroot + "?session_timeout=4000";
  redlock::zookeeper::Session s1(via_proxy);
  redlock::zookeeper::Lock warm(s1, "y"), a(s1, "y");
  REQUIRE(warm.try_lock());  // connected, and the lock's znode exists
  warm.unlock();
  proxy.drop_next_request();  // the create reaches the server; its reply never comes back
  bool a_held = false;
  try {
    a_held = a.try_lock();
  } catch (const redlock::ConnectionError&) {
  }
  if (a_held) a.unlock();
  redlock::zookeeper::Session s2(uri_of(server, chroot, 4000));
  redlock::zookeeper::Lock b(s2, "y");
  REQUIRE(b.try_lock_for(20s));
  b.unlock();
  REQUIRE(queue_length(uri_of(server, chroot, 4000), chroot + "/y") == 0);
}

// The acquire's one round trip: the listing pipelined behind the create is answered after it,
// so it always holds the new znode (the server runs one session's requests in order).
TEST_CASE("zookeeper: the listing pipelined behind an acquire's create holds the new znode",
          "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string chroot = fresh_chroot();
  redlock::detail::ZkSession session(uri_of(server, chroot, 4000));
  const auto conn = session.conn();
  const std::string parent = chroot + "/pipelined";
  redlock::detail::zk_ensure_path(*conn, parent);
  constexpr int kCreates = 40;
  for (int i = 0; i < kCreates; ++i) {
    std::string token =
        std::to_string(1'000'000 + i);  // distinct prefixes, none a prefix of another
    token.resize(40, 'f');
    std::string created;
    std::int64_t czxid = 0;
    std::vector<std::string> children;
    const int rc = redlock::detail::zk_create_and_list(
        *conn, parent + "/" + redlock::detail::zk_node_prefix(token), ZOO_EPHEMERAL_SEQUENTIAL,
        &created, &czxid, parent, &children);
    REQUIRE(rc == ZOK);
    REQUIRE(czxid > 0);
    const auto queue = redlock::detail::zk_queue_of(children);
    REQUIRE(queue.size() == static_cast<std::size_t>(i + 1));  // every earlier znode, and ours
    const auto at = redlock::detail::zk_find_token(queue, token);
    REQUIRE(at == static_cast<std::size_t>(i));  // ours, last in sequence order
    REQUIRE(parent + "/" + queue[at] == created);
  }
}

// Protected mode on a waiter's path (lock, try_lock_for): the create reaches the server, its
// reply (and the listing's) is lost with the connection; the retry on the same session finds the
// znode by its token and waits with it, rather than queueing a second one behind the first.
TEST_CASE("zookeeper: a waiter whose create reply is lost finds its znode by token",
          "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string chroot = fresh_chroot();
  const std::string direct = uri_of(server, chroot, 4000);
  redlock::test::FaultProxy proxy("127.0.0.1", server.port());
  redlock::zookeeper::Session s1("zookeeper://127.0.0.1:" + std::to_string(proxy.port()) + chroot +
                                 "?session_timeout=4000");
  redlock::zookeeper::Session s2(direct);
  redlock::zookeeper::Lock warm(s1, "w"), waiter(s1, "w"), holder(s2, "w");
  REQUIRE(warm.try_lock());  // s1 is connected, and the lock's znode exists
  warm.unlock();
  REQUIRE(holder.try_lock());
  proxy.drop_next_request();  // the waiter's create (and its listing) run; no reply comes back
  std::atomic<bool> got{false};
  std::atomic<std::size_t> queued_while_held{0};
  std::atomic<bool> threw{false};
  std::thread waiting([&] {
    try {
      if (!waiter.try_lock_for(20s)) return;
      got = true;
      queued_while_held = queue_length(direct, chroot + "/w");
      waiter.unlock();
    } catch (const std::exception&) {  // reported below, on the test's thread
      threw = true;
    }
  });
  const auto until = Clock::now() + 10s;
  while (queue_length(direct, chroot + "/w") < 2 && Clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  std::this_thread::sleep_for(1s);  // the waiter reconnects and looks again meanwhile
  const std::size_t queued = queue_length(direct, chroot + "/w");
  holder.unlock();
  waiting.join();
  CHECK(queued == 2);  // the holder's znode and the waiter's one, found again
  REQUIRE_FALSE(threw);
  REQUIRE(got);
  REQUIRE(queued_while_held == 1);
  REQUIRE(queue_length(direct, chroot + "/w") == 0);
}

#ifdef REDLOCK_RUN_PATH
TEST_CASE("zookeeper: redlock-run --zookeeper runs the command with REDLOCK_FENCE", "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string uri = uri_of(server, fresh_chroot(), 4000);
  const std::string file =
      server.dir() + "/fence-" + std::to_string(Clock::now().time_since_epoch().count());
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{REDLOCK_RUN_PATH, "--zookeeper", uri, "--key", "job"};
    args.insert(args.end(), extra.begin(), extra.end());
    return wait_child(spawn(args, {}));
  };
  REQUIRE(run({"--", "sh", "-c", "echo $REDLOCK_FENCE > " + file}) == 0);
  std::uint64_t fence = 0;
  REQUIRE(std::ifstream(file) >> fence);
  REQUIRE(fence > 0);

  redlock::zookeeper::Session session(uri);
  redlock::zookeeper::Lock lock(session, "job");
  REQUIRE(lock.try_lock());
  REQUIRE(lock.fence() > fence);
  REQUIRE(run({"-q", "-n", "--", "true"}) == 75);  // held elsewhere
  lock.unlock();
  REQUIRE(run({"--", "sh", "-c", "exit 3"}) == 3);
  REQUIRE(run({"--status"}) == 64);  // a Redis feature: a usage error
}

TEST_CASE("zookeeper: redlock-run stops the command when the session is lost (exit 70)",
          "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  ZooKeeperServer server;
  const std::string uri = uri_of(server, "/run", 2000);
  const std::string started = server.dir() + "/started";
  const pid_t run = spawn({REDLOCK_RUN_PATH, "--zookeeper", uri, "--key", "job", "--grace", "1s",
                           "--", "sh", "-c", "touch " + started + "; exec sleep 60"},
                          {});
  auto deadline = Clock::now() + 30s;
  while (!std::ifstream(started) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  const bool command_started = static_cast<bool>(std::ifstream(started));
  server.pause();  // longer than the session timeout: the hold cannot be confirmed
  int status = 0;
  bool ended = false;
  deadline = Clock::now() + 20s;
  while (!ended && Clock::now() < deadline) {
    ended = ::waitpid(run, &status, WNOHANG) == run;
    if (!ended) std::this_thread::sleep_for(20ms);
  }
  server.resume();
  if (!ended) {
    ::kill(run, SIGKILL);
    wait_child(run);
  }
  REQUIRE(command_started);
  REQUIRE(ended);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 70);
}
#endif

namespace {

// The packets the server has received ("Received: N" in `srvr`).
long received(const ZooKeeperServer& server) {
  const std::string srvr = server.ask("srvr");
  const auto at = srvr.find("Received: ");
  REQUIRE(at != std::string::npos);
  return std::stol(srvr.substr(at + 10));
}

struct ZkContention {
  double requests_per_acquisition{0};
  long fewest{0};
  long total{0};
};

// `processes` worker processes, each with its own Session and Lock on one name, loop lock /
// hold 1 ms / unlock for 2.5 s; the server's packets over the run, per acquisition.
ZkContention zk_contend(const ZooKeeperServer& server, int processes) {
  const std::string uri = uri_of(server, fresh_chroot(), 10000);
  const std::string base =
      "/tmp/redlock-zk-herd-" + std::to_string(::getpid()) + "-" + std::to_string(processes) + "-";
  std::vector<pid_t> kids;
  for (int i = 0; i < processes; ++i) {
    kids.push_back(
        spawn_child({"REDLOCK_ZK_URI=" + uri, "REDLOCK_ZK_MODE=loop", "REDLOCK_ZK_ROUNDS=2500",
                     "REDLOCK_ZK_FILE=" + base + std::to_string(i)}));
  }
  for (int i = 0; i < processes; ++i) {
    const std::string ready = base + std::to_string(i) + ".ready";
    REQUIRE(redlock::test::eventually([&] { return !!std::ifstream(ready); }, 30s));
  }
  const long before = received(server);
  for (int i = 0; i < processes; ++i) std::ofstream(base + std::to_string(i) + ".go") << "1\n";
  for (pid_t kid : kids) CHECK(wait_child(kid) == 0);
  const long after = received(server);
  ZkContention out;
  out.fewest = 1L << 40;
  for (int i = 0; i < processes; ++i) {
    const std::string file = base + std::to_string(i);
    long n = 0;
    std::ifstream(file) >> n;
    out.total += n;
    out.fewest = std::min(out.fewest, n);
    for (const char* suffix : {"", ".ready", ".go"}) ::unlink((file + suffix).c_str());
  }
  out.requests_per_acquisition =
      out.total > 0 ? static_cast<double>(after - before) / out.total : 0;
  return out;
}

}  // namespace

// Issue #32: the recipe wakes only the successor (a watch on its predecessor), so the server's
// work per acquisition does not grow with the number of waiting processes.
TEST_CASE("zookeeper: requests per acquisition do not grow with the waiters", "[zookeeper][slow]") {
  REQUIRE_ZOOKEEPER();
  const ZooKeeperServer& server = redlock::test::shared_zookeeper_server();
  const ZkContention few = zk_contend(server, 4);
  const ZkContention many = zk_contend(server, 16);
  INFO("packets per acquisition: 4 processes "
       << few.requests_per_acquisition << " (" << few.total << " acquisitions), 16 processes "
       << many.requests_per_acquisition << " (" << many.total << ")");
  CHECK(few.fewest > 0);
  CHECK(many.fewest > 0);  // every process served
  CHECK(many.requests_per_acquisition <= 1.5 * few.requests_per_acquisition);
}

// Issue 33: a hold owned by a handle, on the ZooKeeper backend (the same LockCore path).
TEST_CASE("zookeeper: a Hold is released from another thread, and by its destructor",
          "[zookeeper][hold]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string chroot = fresh_chroot();
  const std::string uri = uri_of(server, chroot, 4000);
  redlock::zookeeper::Session s1(uri), s2(uri);
  redlock::zookeeper::Lock a(s1, "res"), b(s2, "res");
  redlock::Hold hold;
  std::thread([&] { hold = a.acquire(); }).join();
  REQUIRE(hold.holds());
  CHECK_FALSE(b.try_lock());
  bool kept = false;
  std::thread([&] { kept = hold.release(); }).join();
  CHECK(kept);
  REQUIRE(b.try_lock());
  b.unlock();
  auto second = a.try_acquire_for(5s);
  REQUIRE(second);
  CHECK_FALSE(b.try_lock());
  second.reset();  // the destructor: released in the background
  REQUIRE(b.try_lock_for(10s));
  b.unlock();
  REQUIRE(queue_length(uri, chroot + "/res") == 0);
}

TEST_CASE(
    "zookeeper::ReadWriteLock: readers share, a writer excludes, a waiting writer goes "
    "before later readers",
    "[zookeeper]") {
  REQUIRE_ZOOKEEPER();
  auto& server = redlock::test::shared_zookeeper_server();
  const std::string chroot = fresh_chroot();
  const std::string uri = uri_of(server, chroot, 4000);
  redlock::zookeeper::Session s1(uri), s2(uri);
  redlock::zookeeper::ReadWriteLock r1(s1, "rw"), r2(s2, "rw"), w(s1, "rw"), late(s2, "rw");
  redlock::zookeeper::Lock plain(s2, "rw");
  REQUIRE(r1.try_lock_shared());
  REQUIRE(r2.try_lock_shared());  // readers share
  CHECK_FALSE(w.try_lock());
  CHECK_FALSE(plain.try_lock());                  // a zookeeper::Lock on the name is a writer
  CHECK(queue_length(uri, chroot + "/rw") == 2);  // refusals left nothing behind
  r2.unlock_shared();
  // The writer waits behind r1; a reader that comes after it waits behind the writer.
  std::atomic<int> order{0};
  std::atomic<int> writer_at{0};
  std::atomic<int> reader_at{0};
  auto writer = std::async(std::launch::async, [&] {
    if (!w.try_lock_for(20s)) return;
    writer_at = ++order;
    std::this_thread::sleep_for(200ms);
    w.unlock();
  });
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (queue_length(uri, chroot + "/rw") < 2 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(5ms);
  }
  auto reader = std::async(std::launch::async, [&] {
    if (!late.try_lock_shared_for(20s)) return;
    reader_at = ++order;
    late.unlock_shared();
  });
  std::this_thread::sleep_for(300ms);
  CHECK(order == 0);  // r1 still reads: the writer waits, and the late reader behind it
  r1.unlock_shared();
  writer.get();
  reader.get();
  CHECK(writer_at == 1);
  CHECK(reader_at == 2);
  CHECK_THROWS_AS(w.downgrade(), std::logic_error);
  CHECK(queue_length(uri, chroot + "/rw") == 0);
}
