// Degraded nodes: a paused Redlock node must cost the others nothing (wherever it is listed), a
// release must reach a node in timeout back-off, and a user's script must never be re-sent.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "api/access.hpp"
#include "io/connection.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::ServerGroup;
using redlock::test::ServerOptions;
using Clock = std::chrono::steady_clock;

namespace {

// These cases are about the plain quorum: any quorum grants, and a slow or silent node is cut
// and backed off (a Redlock's default). With fair = true the server that orders the waiters is
// awaited whatever the others say (its refusal vetoes), so when the sick node is that server the
// outcome differs by design (docs/ARCHITECTURE.md, the waiter model).
redlock::LockOptions plain_quorum() {
  redlock::LockOptions o;
  o.fair = false;
  return o;
}

// Collects every "unreachable" warning for the lifetime of the object.
class UnreachableLog {
 public:
  UnreachableLog() {
    redlock::set_log_handler([this](redlock::LogLevel level, std::string_view message) {
      if (level < redlock::LogLevel::warn) return;
      if (message.find("unreachable") == std::string_view::npos) return;
      std::lock_guard<std::mutex> guard(mutex_);
      messages_.emplace_back(message);
    });
  }
  ~UnreachableLog() { redlock::set_log_handler({}); }
  UnreachableLog(const UnreachableLog&) = delete;
  UnreachableLog& operator=(const UnreachableLog&) = delete;

  // Messages that name `address` ("127.0.0.1:port").
  std::vector<std::string> naming(const std::string& address) const {
    std::lock_guard<std::mutex> guard(mutex_);
    std::vector<std::string> out;
    for (const auto& m : messages_) {
      if (m.find(address + " ") != std::string::npos) out.push_back(m);
    }
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

struct Run {
  long total{0};
  long errors{0};
  std::vector<long> per_second;  // successful cycles in each whole second of the run
};

// `threads` threads, each on its own key, doing try_lock_for(2s) + unlock for `seconds` seconds.
Run cycles(const std::vector<redlock::Endpoint>& order, const std::string& tag, int threads,
           int seconds) {
  std::vector<redlock::Client> clients;
  for (auto ep : order) {  // fresh pools and back-off state
    // A connect patient enough that a healthy node on a loaded 2-core machine never looks down
    // (only the paused node may time out); commands as usual, so the paused node's first
    // timeouts (before it enters the back-off) still leave cycles in the first second.
    ep.connect_timeout = 500ms;
    ep.command_timeout = 300ms;
    clients.emplace_back(ep);
  }
  std::vector<std::atomic<long>> counts(static_cast<std::size_t>(seconds));
  std::atomic<long> errors{0};
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      redlock::LockOptions options = plain_quorum();
      options.ttl = 10s;
      options.retry_delay = 5ms;
      redlock::Redlock lock(clients, key(tag + "-" + std::to_string(t)), options);
      while (Clock::now() < end) {
        try {
          if (lock.try_lock_for(2s)) {
            lock.unlock();
            const auto second = (Clock::now() - start) / 1s;
            if (second < seconds) ++counts[static_cast<std::size_t>(second)];
          }
        } catch (const redlock::Error&) {
          ++errors;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  Run run;
  run.errors = errors;
  for (auto& c : counts) {
    run.per_second.push_back(c);
    run.total += c;
  }
  return run;
}

std::string address(const redlock::Endpoint& ep) { return ep.host + ":" + std::to_string(ep.port); }

}  // namespace

TEST_CASE("A paused Redlock node costs no outage wherever it is listed",
          "[redis][redlock][fault][slow]") {
  ServerGroup group(5);
  const auto endpoints = group.endpoints();
  const Run healthy = cycles(endpoints, "degraded-healthy", 4, 2);
  const double healthy_rate = static_cast<double>(healthy.total) / 2.0;
  INFO("all healthy: " << healthy_rate << " cycles/s");
  REQUIRE(healthy.total > 0);

  group[4].pause();
  UnreachableLog log;
  constexpr int kSeconds = 4;
  for (std::size_t position : {std::size_t{0}, std::size_t{2}, std::size_t{4}}) {
    std::vector<redlock::Endpoint> order(endpoints.begin(), endpoints.end() - 1);
    order.insert(order.begin() + static_cast<std::ptrdiff_t>(position), endpoints[4]);
    const Run run = cycles(order, "degraded-" + std::to_string(position), 4, kSeconds);
    INFO("paused node at position "
         << position << ": " << run.total << " cycles, " << run.errors
         << " errors, per second: " << Catch::Detail::stringify(run.per_second));
    // Every second after the first has cycles (the first may go to the paused node's first
    // timeouts, before it enters the back-off: the degraded-performance issue's goal, measured
    // by redlock-bench). Before the fix, cycles stopped for good within the first second.
    for (std::size_t s = 1; s < run.per_second.size(); ++s) CHECK(run.per_second[s] > 0);
    CHECK(static_cast<double>(run.total) >= 0.3 * healthy_rate * kSeconds);
  }
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("healthy node " << address(endpoints[i]));
    CHECK(log.naming(address(endpoints[i])).empty());
  }
  group[4].resume();
}

TEST_CASE("A fan-out whose lead node is slow still reaches it, and counts the others",
          "[redis][redlock][fault]") {
  // A fan-out reads its nodes one at a time in request order, each read waiting a few
  // milliseconds at most (the lead wait); a node slower than that hands the rest of the batch
  // to the poll on every node, and the early finish's grace then cuts it. Its request must
  // still run there, the other nodes' replies must count, and a slow node is no timeout.
  ServerGroup group(5);
  for (std::size_t slow : {std::size_t{0}, std::size_t{2}}) {
    auto endpoints = group.endpoints();
    redlock::test::FaultProxy proxy("127.0.0.1", endpoints[slow].port);
    endpoints[slow].port = proxy.port();
    std::vector<redlock::Client> clients(endpoints.begin(), endpoints.end());
    const auto k = key("slow-lead-" + std::to_string(slow));
    redlock::Redlock lock(clients, k, plain_quorum());
    UnreachableLog log;
    for (int round = 0; round < 5; ++round) {
      INFO("slow node at position " << slow << ", round " << round);
      proxy.clear();
      REQUIRE(lock.try_lock());
      for (std::size_t n = 0; n < 5; ++n) {  // a cut grant's SET still reaches its node
        INFO("node " << n);
        REQUIRE(redlock::test::eventually([&] {
          return group[n].raw({"EXISTS", k}).integer() == 1;
        }));
      }
      proxy.set_delay(15ms);                 // each way: its reply comes 30 ms after the request
      CHECK(lock.release());                 // the four others count
      for (std::size_t n = 0; n < 5; ++n) {  // the release reaches the slow node too
        INFO("node " << n);
        CHECK(redlock::test::eventually([&] {
          return group[n].raw({"EXISTS", k}).integer() == 0;
        }));
      }
    }
    CHECK(log.naming(address(endpoints[slow])).empty());  // never taken for a timeout
  }
}

TEST_CASE(
    "A silent lead node does not stretch the grace: a node 10 ms slower than the others "
    "is cut",
    "[redis][redlock][fault]") {
  // The lead wait on node 0 gives up after a clock tick or two, by which time the others'
  // replies have long been there. Reckoned from then, the grace (3x the time to the outcome, at
  // least 5 ms) would cover node 0's 20 ms round trip, and a slow node would never be cut nor
  // backed off: every acquire would wait for it.
  struct SlowNodes : redlock::Observer {
    void on_node(const redlock::NodeEvent& event) noexcept override {
      if (event.health != redlock::NodeHealth::slow) return;
      std::lock_guard<std::mutex> guard(mutex);
      slow.emplace_back(event.address);
    }
    std::mutex mutex;
    std::vector<std::string> slow;
  };
  ServerGroup group(5);
  auto endpoints = group.endpoints();
  redlock::test::FaultProxy proxy("127.0.0.1", endpoints[0].port);
  endpoints[0].port = proxy.port();
  std::vector<redlock::Client> clients(endpoints.begin(), endpoints.end());
  redlock::Redlock lock(clients, key("slow-lead-grace"), plain_quorum());
  REQUIRE(lock.try_lock());  // connections open, node 0 healthy so far
  lock.unlock();
  auto observer = std::make_shared<SlowNodes>();
  redlock::set_observer(observer);
  proxy.set_delay(10ms);  // each way
  bool cut = false;
  for (int i = 0; i < 10 && !cut; ++i) {
    if (lock.try_lock()) lock.unlock();  // each cuts node 0 twice; three in a row: back-off
    std::lock_guard<std::mutex> guard(observer->mutex);
    cut = std::count(observer->slow.begin(), observer->slow.end(), address(endpoints[0])) > 0;
  }
  redlock::set_observer(nullptr);
  CHECK(cut);
}

TEST_CASE("A Redlock release reaches a node that is in timeout back-off",
          "[redis][redlock][fault]") {
  ServerGroup group(3);
  const auto k = key("release-backoff");
  std::vector<redlock::Client> clients;
  for (auto ep : group.endpoints()) {
    // The release dials node 1 again: over TLS on a loaded machine the handshake can take
    // longer than the default 200 ms, which would leave the key there for a reason other than
    // the back-off this case is about.
    ep.connect_timeout = 2s;
    clients.emplace_back(ep);
  }
  redlock::Redlock lock(clients, k, plain_quorum());
  // A quorum is two of three: on a loaded machine node 1's first connect can be cut by the
  // early finish, and the lock is then held without it. This case needs node 1 among them.
  bool on_node_1 = false;
  for (int attempt = 0; attempt < 20 && !on_node_1; ++attempt) {
    REQUIRE(lock.try_lock());
    on_node_1 = group[1].raw({"EXISTS", k}).integer() == 1;
    if (!on_node_1) lock.unlock();
  }
  REQUIRE(on_node_1);

  // Two timeouts on node 1 put it in back-off (250 ms, then 500 ms); it then resumes, healthy.
  group[1].pause();
  CHECK_THROWS_AS(clients[1].command({"PING"}), redlock::TimeoutError);
  CHECK_THROWS_AS(clients[1].command({"PING"}), redlock::TimeoutError);
  group[1].resume();

  std::mutex log_mutex;
  std::string log;
  redlock::set_log_handler([&](redlock::LogLevel, std::string_view message) {
    std::lock_guard<std::mutex> guard(log_mutex);
    log.append(message).append("\n");
  });
  const auto released_at = std::chrono::steady_clock::now();
  CHECK(lock.release());
  // Node 1 is not awaited: its release may finish in the background. Given 10 s (the key would
  // live 30 s): a CI run under load once found it still there after a fixed 200 ms.
  redlock::test::eventually([&] { return group[1].raw({"EXISTS", k}).integer() == 0; }, 10s);
  const auto waited = std::chrono::steady_clock::now() - released_at;
  redlock::set_log_handler(nullptr);
  INFO("PTTL on node 1 after release: " << group[1].raw({"PTTL", k}).integer());
  INFO("waited " << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
                 << " ms; the library's log meanwhile:\n"
                 << log);
  CHECK(group[1].raw({"EXISTS", k}).integer() == 0);
  CHECK(group[0].raw({"EXISTS", k}).integer() == 0);
  CHECK(group[2].raw({"EXISTS", k}).integer() == 0);
}

TEST_CASE("Client::eval never runs a user's script twice after a timeout",
          "[redis][client][fault]") {
  RedisServer server;
  auto ep = server.endpoint();
  ep.command_timeout = 200ms;
  redlock::Client client(ep);
  const auto counter = key("eval-once");
  // Busy for 300 ms (longer than the command timeout), then counts one run.
  const redlock::Script slow(
      "local t = redis.call('TIME') "
      "local start = t[1] * 1000000 + t[2] "
      "repeat local n = redis.call('TIME') until n[1] * 1000000 + n[2] - start > 300000 "
      "return redis.call('INCR', KEYS[1])");
  CHECK_THROWS_AS(client.eval(slow, {counter}, {}), redlock::TimeoutError);
  std::this_thread::sleep_for(1s);  // anything re-sent has run by now
  CHECK(server.raw({"GET", counter}).str() == "1");
  // Once cached (EVALSHA runs it directly), a timeout still means exactly one run.
  CHECK_THROWS_AS(client.eval(slow, {counter}, {}), redlock::TimeoutError);
  std::this_thread::sleep_for(1s);
  CHECK(server.raw({"GET", counter}).str() == "2");
}

TEST_CASE("A request cut off in the middle of its write still gets its rollback",
          "[redis][fault]") {
  RedisServer server;
  auto ep = server.endpoint();
  ep.command_timeout = 300ms;
  redlock::Client client(ep);
  client.ping();  // a pooled connection
  const auto k = key("partial-write");
  // SET fits into the socket buffers of a paused server; the 16 MiB behind it cannot: the send
  // times out after SET went out whole.
  const std::string big(std::size_t{16} << 20, 'x');
  redlock::detail::FixedCommand<3> set;
  set.arg("SET").arg(k).arg("v");
  redlock::detail::FixedCommand<2> echo;
  echo.arg("ECHO").arg(big);
  redlock::detail::FixedCommand<2> undo;
  undo.arg("DEL").arg(k);
  redlock::detail::NodeBatch batch;
  batch.node = redlock::detail::Access::client(client).get();
  batch.commands.push_back(set.view());
  batch.commands.push_back(echo.view());
  batch.on_timeout.push_back(undo.view());
  server.pause();
  redlock::detail::execute(&batch, 1);
  CHECK(batch.error != nullptr);
  server.resume();
  std::this_thread::sleep_for(500ms);  // the server reads what it was sent
  CHECK(server.raw({"EXISTS", k}).integer() == 0);
}

TEST_CASE(
    "A Redlock with more threads than max_connections neither fails nor blames a healthy node",
    "[redis][redlock][pool]") {
  ServerGroup group(3);
  std::vector<redlock::Client> clients;
  for (auto ep : group.endpoints()) {
    ep.connect_timeout = 1s;
    ep.command_timeout = 1s;
    ep.max_connections = 2;  // far fewer than the threads below
    clients.emplace_back(ep);
  }
  UnreachableLog log;
  std::atomic<long> held{0};
  std::atomic<long> refused{0};
  std::atomic<long> errors{0};
  std::mutex first_mutex;
  std::string first_error;
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&, t] {
      redlock::Redlock lock(clients, key("busy-pool-" + std::to_string(t)), plain_quorum());
      for (int i = 0; i < 150; ++i) {
        try {
          if (!lock.try_lock()) {
            ++refused;  // distinct keys: a refusal means a node was not asked
            continue;
          }
          lock.unlock();
          ++held;
        } catch (const std::exception& e) {
          if (errors++ == 0) {
            std::lock_guard<std::mutex> guard(first_mutex);
            first_error = e.what();
          }
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  INFO("first error: " << first_error);
  CHECK(errors == 0);
  CHECK(refused == 0);
  CHECK(held == 8 * 150);
  for (std::size_t i = 0; i < group.size(); ++i) {
    CHECK(log.naming("127.0.0.1:" + std::to_string(group[i].port())).empty());
  }
}

TEST_CASE(
    "A Redlock release skips a node its acquire skipped: no connection per cycle to a "
    "paused node",
    "[redis][redlock][fault]") {
  ServerGroup group(3);
  std::vector<redlock::Client> clients;
  for (auto ep : group.endpoints()) {
    ep.command_timeout = 200ms;
    clients.emplace_back(ep);
  }
  const auto connections = [&group] {
    const std::string info = group[2].raw({"INFO", "stats"}).str();
    const std::string tag = "total_connections_received:";
    return std::stol(info.substr(info.find(tag) + tag.size()));
  };
  redlock::Redlock lock(clients, key("release-skips-backoff"), plain_quorum());
  REQUIRE(lock.try_lock());  // every node has a pooled connection now
  lock.unlock();
  const long before = connections();
  group[2].pause();
  // Abandoned after the early finish's grace three times in a row, node 3 enters its back-off
  // (250 ms at first); the acquires after that skip it.
  for (int i = 0; i < 3; ++i) {
    REQUIRE(lock.try_lock());
    lock.unlock();
  }
  constexpr int kCycles = 40;
  const auto start = Clock::now();
  for (int i = 0; i < kCycles; ++i) {
    REQUIRE(lock.try_lock());
    lock.unlock();
  }
  const auto took = Clock::now() - start;
  group[2].resume();
  std::this_thread::sleep_for(300ms);  // the server accepts what waited in its backlog
  const long dialed = connections() - before;
  const double took_ms = std::chrono::duration<double, std::milli>(took).count();
  INFO(kCycles << " cycles in " << took_ms << " ms; connections to the paused node: " << dialed);
  // The acquires before the back-off (and a probe if the back-off ran out) may each leave a
  // connection behind; a release of a lease whose acquire skipped the node sends it nothing.
  // Before: every release dialed the paused node again (a connection per cycle).
  CHECK(dialed <= 10);
}

namespace {

// How a slow moment of a Redlock node is noticed: by a command of the library that times out on
// it (issue 31 item 8 saw it after an extend).
enum class Noticed { by_extend, by_ping };

// Node 3's slow moment: a CLIENT PAUSE of `pause`, noticed by one command, and the release sent
// `release_at` after the pause began. Redis ends a pause at its next cron tick (every 100 ms at
// the default hz 10), so a pause of 120 ms lasts 120-220 ms.
struct SlowMoment {
  Noticed noticed;
  std::chrono::milliseconds pause;
  std::chrono::milliseconds release_at;
};

// One run of issue 31 item 8: the lease is held on all three nodes; node 3 has its slow moment,
// then release() returns. Returns the PTTL left on node 3 `within` after the release (-2: no
// key), and appends the library's log to `log`.
long long release_after_slow_moment(ServerGroup& group, const SlowMoment& moment,
                                    const std::string& name, std::chrono::milliseconds within,
                                    std::string& log) {
  std::vector<redlock::Client> clients;  // fresh pools and back-off state each run
  for (auto ep : group.endpoints()) {
    ep.command_timeout = 50ms;
    ep.connect_timeout = 1s;  // a healthy node is never taken for a down one on a busy machine
    clients.emplace_back(ep);
  }
  const auto k = key(name);
  redlock::LockOptions options = plain_quorum();
  options.ttl = 20s;
  redlock::Redlock lock(clients, k, options);
  const auto on_every_node = [&] {
    for (std::size_t n = 0; n < 3; ++n) {
      if (group[n].raw({"EXISTS", k}).integer() != 1) return false;
    }
    return true;
  };
  bool held_everywhere = false;  // a quorum is two: a slow first connect may leave one out
  for (int attempt = 0; attempt < 20 && !held_everywhere; ++attempt) {
    REQUIRE(lock.try_lock());
    held_everywhere = redlock::test::eventually(on_every_node, 1s);
    if (!held_everywhere) lock.unlock();
  }
  REQUIRE(held_everywhere);
  const auto paused_at = Clock::now();
  const std::string pause = std::to_string(moment.pause.count());
  REQUIRE(group[2].raw({"CLIENT", "PAUSE", pause, "ALL"}).str() == "OK");
  if (moment.noticed == Noticed::by_ping) {
    CHECK_THROWS_AS(clients[2].ping(), redlock::TimeoutError);
  } else {
    lock.extend();  // nodes 1 and 2 confirm it; node 3 times out
  }
  std::this_thread::sleep_until(paused_at + moment.release_at);
  std::mutex log_mutex;
  redlock::set_log_handler([&](redlock::LogLevel, std::string_view message) {
    std::lock_guard<std::mutex> guard(log_mutex);
    log.append(message).append("\n");
  });
  CHECK(lock.release());
  redlock::test::eventually([&] { return group[2].raw({"EXISTS", k}).integer() == 0; }, within);
  redlock::set_log_handler(nullptr);
  CHECK(group[0].raw({"EXISTS", k}).integer() == 0);
  CHECK(group[1].raw({"EXISTS", k}).integer() == 0);
  return group[2].raw({"PTTL", k}).integer();
}

}  // namespace

TEST_CASE("A Redlock release reaches a node that timed out once just before it (20 runs)",
          "[redis][redlock][fault][slow]") {
  // Issue 31 item 8: in 2 runs of 3, node 3 still held the key with ~17.6 s left 2 s after
  // release() returned true. Every node that granted the lease must get the release, if need be
  // in the background after the quorum answered.
  ServerGroup group(3);
  const SlowMoment moments[] = {
      // The steps: the release 100 ms after the timeout (at 50 ms) noticed the pause. A
      // pause of 120 ms then still lasts in about 2 runs of 3.
      {Noticed::by_ping, 120ms, 150ms},
      {Noticed::by_extend, 120ms, 150ms},  // nodes 1 and 2 confirm; node 3 is cut
      {Noticed::by_ping, 300ms, 100ms},    // the release goes out while the pause lasts
  };
  for (std::size_t m = 0; m < std::size(moments); ++m) {
    const SlowMoment& moment = moments[m];
    int left = 0;
    std::string first_log;
    long long first_pttl = 0;
    for (int run = 0; run < 20; ++run) {
      std::string log;
      const std::string name =
          "release-slow-moment-" + std::to_string(m) + "-" + std::to_string(run);
      const long long pttl = release_after_slow_moment(group, moment, name, 3s, log);
      if (pttl == -2) continue;
      if (left++ == 0) {
        first_log = log;
        first_pttl = pttl;
      }
    }
    INFO((moment.noticed == Noticed::by_extend ? "noticed by an extend" : "noticed by a ping")
         << ", pause " << moment.pause.count() << " ms, release at " << moment.release_at.count()
         << " ms: " << left << " of 20 runs left the key on node 3 (first: PTTL " << first_pttl
         << " ms 3 s after the release; the library's log:\n"
         << first_log << ")");
    CHECK(left == 0);
  }
}

namespace {

// How many of the group's servers hold `k`.
int holders(ServerGroup& group, const std::string& k) {
  int n = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    n += static_cast<int>(group[i].raw({"EXISTS", k}).integer());
  }
  return n;
}

// Connects to 127.0.0.1:port without blocking; the socket, or -1.
int start_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  return fd;
}

// True if the connect on `fd` completes within `within`.
bool connects(int fd, std::chrono::milliseconds within) {
  pollfd p{fd, POLLOUT, 0};
  return ::poll(&p, 1, static_cast<int>(within.count())) == 1;
}

}  // namespace

TEST_CASE("A Redlock release cut by the grace while its node is still connecting still reaches it",
          "[redis][redlock][fault]") {
  // Node 3 lost its pooled connection (an extend cut by the grace took it) and is slow to
  // accept a new one when the release comes: nodes 1 and 2 answer, and the grace cuts node 3
  // while its connect is under way. The release must still go out once the connect completes.
  // A stopped server with a full accept queue (tcp-backlog 1) drops the SYN: the connect waits
  // for its retransmission, 1 s later.
  ServerOptions options;
  options.extra_args = {"--tcp-backlog", "1"};
  ServerGroup group(3, options);
  std::vector<redlock::Client> clients;
  for (auto ep : group.endpoints()) {
    ep.connect_timeout = 5s;  // the grace cuts node 3's connect, not its own deadline
    clients.emplace_back(ep);
  }
  const auto k = key("release-cut-connecting");
  redlock::LockOptions lock_options = plain_quorum();
  lock_options.ttl = 20s;
  redlock::Redlock lock(clients, k, lock_options);
  bool held_everywhere = false;  // a quorum is two: a slow first connect may leave one out
  for (int attempt = 0; attempt < 20 && !held_everywhere; ++attempt) {
    REQUIRE(lock.try_lock());
    held_everywhere = redlock::test::eventually([&] { return holders(group, k) == 3; }, 1s);
    if (!held_everywhere) lock.unlock();
  }
  REQUIRE(held_everywhere);
  group[2].pause();
  CHECK(lock.extend());      // nodes 1 and 2 confirm; node 3's connection goes to the finisher
  std::vector<int> fillers;  // node 3's accept queue, full
  bool full = false;
  for (int i = 0; i < 8 && !full; ++i) {
    fillers.push_back(start_connect(clients[2].endpoint().port));
    full = !connects(fillers.back(), 200ms);
  }
  REQUIRE(full);
  CHECK(lock.release());
  for (const int fd : fillers) ::close(fd);
  group[2].resume();
  // A connect of ours may wait for its SYN's retransmission too, until the queue is taken.
  const auto gone_from_node_3 = [&] {
    try {
      return group[2].raw({"EXISTS", k}).integer() == 0;
    } catch (const std::runtime_error&) {
      return false;
    }
  };
  CHECK(redlock::test::eventually(gone_from_node_3));
  INFO("PTTL on node 3: " << group[2].raw({"PTTL", k}).integer());
  CHECK(holders(group, k) == 0);
}
