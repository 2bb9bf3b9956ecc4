// redlock::Observer: every hook fires for its event with the figures it promises, per lock and
// process-wide, against real servers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of a lock's helper keys

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::key;
using redlock::test::RedisServer;

namespace {

// Keeps a copy of every event (keys and addresses copied: the views die with the hook).
class Recorder : public redlock::Observer {
 public:
  struct Acquire {
    std::string key;
    redlock::AcquireEvent event;
  };
  struct Release {
    std::string key;
    redlock::ReleaseEvent event;
  };
  struct Extend {
    std::string key;
    redlock::ExtendEvent event;
  };
  struct Node {
    std::string address;
    redlock::NodeHealth health;
    std::string why;
  };
  struct Wake {
    std::string key;
    redlock::WakeKind kind;
  };

  void on_acquire(const redlock::AcquireEvent& e) noexcept override {
    add(acquires, Acquire{std::string(e.key), e});
  }
  void on_release(const redlock::ReleaseEvent& e) noexcept override {
    add(releases, Release{std::string(e.key), e});
  }
  void on_extend(const redlock::ExtendEvent& e) noexcept override {
    add(extends, Extend{std::string(e.key), e});
  }
  void on_lost(const redlock::LostEvent& e) noexcept override { add(losses, e); }
  void on_node(const redlock::NodeEvent& e) noexcept override {
    add(nodes, Node{std::string(e.address), e.health, std::string(e.why)});
  }
  void on_wake(const redlock::WakeEvent& e) noexcept override {
    add(wakes, Wake{std::string(e.key), e.kind});
  }

  // Waits (at most 10 s) until `pred()` holds, under the recorder's mutex.
  template <typename Pred>
  bool wait_for(Pred pred) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, 10s, pred);
  }

  std::mutex mutex;
  std::condition_variable cv;
  std::vector<Acquire> acquires;
  std::vector<Release> releases;
  std::vector<Extend> extends;
  std::vector<redlock::LostEvent> losses;
  std::vector<Node> nodes;
  std::vector<Wake> wakes;

 private:
  template <typename V, typename T>
  void add(V& list, T value) noexcept {
    try {
      {
        std::lock_guard<std::mutex> guard(mutex);
        list.push_back(std::move(value));
      }
      cv.notify_all();
    } catch (...) {
    }
  }
};

redlock::LockOptions observed(const std::shared_ptr<Recorder>& recorder) {
  redlock::LockOptions o;
  o.ttl = 10s;
  o.fencing = true;
  o.observer = recorder;
  return o;
}

}  // namespace

TEST_CASE("Observer: acquire, contention, release and extend, with their figures",
          "[redis][observer]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  auto recorder = std::make_shared<Recorder>();
  const auto k = key("observer-basic");
  redlock::Lock lock(client, k, observed(recorder));
  redlock::Lock rival(client, k, observed(recorder));

  REQUIRE(lock.try_lock());
  CHECK_FALSE(rival.try_lock());
  CHECK(lock.extend(20s));
  CHECK(lock.release());

  std::lock_guard<std::mutex> guard(recorder->mutex);
  REQUIRE(recorder->acquires.size() == 2);
  const auto& got = recorder->acquires[0];
  CHECK(got.key == k);
  CHECK(got.event.outcome == redlock::AcquireOutcome::acquired);
  CHECK(got.event.attempts == 1);
  CHECK(got.event.nodes == 1);
  CHECK(got.event.granted == 1);
  CHECK(got.event.fence >= 1);
  CHECK_FALSE(got.event.handed_over);
  CHECK(got.event.latency > 0ns);
  const auto& refused = recorder->acquires[1];
  CHECK(refused.event.outcome == redlock::AcquireOutcome::contended);
  CHECK(refused.event.attempts == 1);
  CHECK(refused.event.granted == 0);
  CHECK(refused.event.fence == 0);

  REQUIRE(recorder->extends.size() == 1);
  CHECK(recorder->extends[0].key == k);
  CHECK(recorder->extends[0].event.held);
  CHECK_FALSE(recorder->extends[0].event.renewal);

  REQUIRE(recorder->releases.size() == 1);
  CHECK(recorder->releases[0].key == k);
  CHECK(recorder->releases[0].event.kept);
  CHECK_FALSE(recorder->releases[0].event.failed);
  CHECK(recorder->releases[0].event.held > 0ns);
  CHECK(recorder->losses.empty());
}

TEST_CASE("Observer: a re-entrant acquire is not an event, a failed one says failed",
          "[redis][observer]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  auto recorder = std::make_shared<Recorder>();
  redlock::Lock lock(client, key("observer-reentrant"), observed(recorder));
  REQUIRE(lock.try_lock());
  REQUIRE(lock.try_lock());  // re-entrant: no store round trip
  lock.unlock();
  lock.unlock();

  redlock::Endpoint nowhere = server.endpoint();
  server.kill9();
  nowhere.connect_timeout = 200ms;
  redlock::Client dead(nowhere);
  redlock::Lock unreachable(dead, key("observer-failed"), observed(recorder));
  CHECK_THROWS_AS(unreachable.try_lock(), redlock::Error);

  std::lock_guard<std::mutex> guard(recorder->mutex);
  REQUIRE(recorder->acquires.size() == 2);
  CHECK(recorder->acquires[0].event.outcome == redlock::AcquireOutcome::acquired);
  CHECK(recorder->acquires[1].event.outcome == redlock::AcquireOutcome::failed);
  CHECK(recorder->acquires[1].event.attempts == 1);
  CHECK(recorder->releases.size() == 1);  // the last level only
}

TEST_CASE("Observer: watchdog renewals and a lost lease", "[redis][observer][watchdog]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  auto recorder = std::make_shared<Recorder>();
  const auto k = key("observer-renewal");
  redlock::LockOptions o = observed(recorder);
  o.ttl = 600ms;
  o.auto_renew = true;
  redlock::Lock lock(client, k, o);
  REQUIRE(lock.try_lock());
  CHECK(recorder->wait_for([&] { return recorder->extends.size() >= 2; }));
  server.raw({"DEL", k});  // the next renewal is refused: the lease is lost
  CHECK(recorder->wait_for([&] { return !recorder->losses.empty(); }));
  CHECK_FALSE(lock.owns_lock());
  lock.unlock();

  std::lock_guard<std::mutex> guard(recorder->mutex);
  const auto& first = recorder->extends.front();
  CHECK(first.key == k);
  CHECK(first.event.renewal);
  CHECK(first.event.held);
  CHECK(first.event.lateness >= 0ns);
  CHECK(first.event.lateness < 600ms);
  REQUIRE(recorder->losses.size() == 1);
  CHECK(recorder->losses[0].key == k);
  CHECK(recorder->losses[0].reason == redlock::LostReason::refused);
  CHECK(recorder->losses[0].fence >= 1);
  CHECK(recorder->losses[0].renewals >= 2);
}

TEST_CASE("Observer: a waiter woken by a release, and a fair hand-over", "[redis][observer]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  auto recorder = std::make_shared<Recorder>();
  for (const bool fair : {false, true}) {
    const auto k = key(fair ? "observer-fair" : "observer-wake");
    redlock::LockOptions o = observed(recorder);
    o.fair = fair;
    o.retry_delay = 10s;  // only a release can end the wait in time
    redlock::Lock holder(client, k, o);
    redlock::Lock waiter(client, k, o);
    REQUIRE(holder.try_lock());
    std::atomic<bool> got{false};
    std::thread t([&] {
      got = waiter.try_lock_for(5s);
      if (got) waiter.unlock();
    });
    // The waiter is refused and waits before the release: fair, it is in the server's queue;
    // otherwise it has subscribed, and its one attempt after that takes a round trip.
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until) {
      if (fair ? server.raw({"LLEN", helper_key(k, ":waiters")}).integer() == 1
               : !server.raw({"PUBSUB", "CHANNELS"}).elements().empty()) {
        break;
      }
      std::this_thread::sleep_for(5ms);
    }
    if (!fair) std::this_thread::sleep_for(500ms);
    holder.unlock();
    t.join();
    REQUIRE(got.load());
    std::lock_guard<std::mutex> guard(recorder->mutex);
    const auto kind = fair ? redlock::WakeKind::handed_over : redlock::WakeKind::released;
    CHECK(std::count_if(recorder->wakes.begin(), recorder->wakes.end(),
                        [&](const Recorder::Wake& w) { return w.key == k && w.kind == kind; }) ==
          1);
    const auto last = std::find_if(recorder->acquires.rbegin(), recorder->acquires.rend(),
                                   [&](const Recorder::Acquire& a) { return a.key == k; });
    REQUIRE(last != recorder->acquires.rend());
    CHECK(last->event.outcome == redlock::AcquireOutcome::acquired);
    CHECK(last->event.handed_over == fair);
    CHECK(last->event.attempts >= 1);
  }
}

TEST_CASE("Observer: Redlock votes, and node health process-wide", "[redis][observer]") {
  redlock::test::ServerGroup group(3);
  auto recorder = std::make_shared<Recorder>();
  redlock::set_observer(recorder);
  struct Unset {
    ~Unset() { redlock::set_observer(nullptr); }
  } unset;
  CHECK(redlock::observer() == recorder.get());
  std::vector<redlock::Client> clients;
  for (std::size_t i = 0; i < 3; ++i) {
    redlock::Endpoint e = group[i].endpoint();
    e.connect_timeout = 300ms;
    e.command_timeout = 300ms;
    clients.emplace_back(e);
  }
  redlock::LockOptions o;
  o.ttl = 10s;  // no observer of its own: the process-wide one hears it
  redlock::Redlock lock(clients, key("observer-redlock"), o);
  REQUIRE(lock.try_lock());
  lock.unlock();
  const std::string address = "127.0.0.1:" + std::to_string(group[2].port());
  group[2].kill9();
  REQUIRE(lock.try_lock());  // 2 of 3 grant
  lock.unlock();
  group[2].restart();
  // Until the node answers again, attempts may skip it (back-off) or fail on it.
  CHECK(recorder->wait_for([&] {
    for (const auto& n : recorder->nodes) {
      if (n.address == address && n.health == redlock::NodeHealth::unreachable) return true;
    }
    return false;
  }));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  bool back = false;
  while (!back && std::chrono::steady_clock::now() < deadline) {
    if (lock.try_lock()) lock.unlock();
    std::lock_guard<std::mutex> guard(recorder->mutex);
    for (const auto& n : recorder->nodes) {
      back = back || (n.address == address && n.health == redlock::NodeHealth::reachable);
    }
  }
  CHECK(back);

  std::lock_guard<std::mutex> guard(recorder->mutex);
  REQUIRE(recorder->acquires.size() >= 2);
  CHECK(recorder->acquires[0].event.nodes == 3);
  CHECK(recorder->acquires[0].event.granted == 3);
  CHECK(recorder->acquires[1].event.outcome == redlock::AcquireOutcome::acquired);
  CHECK(recorder->acquires[1].event.granted == 2);
}

TEST_CASE("Observer: set_observer(nullptr) silences the process-wide hooks", "[observer]") {
  auto recorder = std::make_shared<Recorder>();
  redlock::set_observer(recorder);
  redlock::set_observer(nullptr);
  CHECK(redlock::observer() == nullptr);
  CHECK(std::string(redlock::to_string(redlock::AcquireOutcome::contended)) == "contended");
  CHECK(std::string(redlock::to_string(redlock::NodeHealth::slow)) == "slow");
}

TEST_CASE("Observer: a Semaphore's acquires and releases", "[redis][observer][semaphore]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  auto recorder = std::make_shared<Recorder>();
  const auto k = key("observer-semaphore");
  redlock::Semaphore first(client, k, 1, observed(recorder));
  redlock::Semaphore second(client, k, 1, observed(recorder));
  REQUIRE(first.try_acquire());
  CHECK_FALSE(second.try_acquire());
  CHECK(first.release());

  std::lock_guard<std::mutex> guard(recorder->mutex);
  REQUIRE(recorder->acquires.size() == 2);
  CHECK(recorder->acquires[0].key == k);
  CHECK(recorder->acquires[0].event.outcome == redlock::AcquireOutcome::acquired);
  CHECK(recorder->acquires[0].event.granted == 1);
  CHECK(recorder->acquires[0].event.fence >= 1);
  CHECK(recorder->acquires[1].event.outcome == redlock::AcquireOutcome::contended);
  CHECK(recorder->acquires[1].event.attempts == 1);
  REQUIRE(recorder->releases.size() == 1);
  CHECK(recorder->releases[0].key == k);
  CHECK(recorder->releases[0].event.kept);
}
