// Locks through Redis Sentinel, against a real topology on loopback (tests/support/sentinel_set):
// one master, two replicas and three sentinels; faults are SENTINEL FAILOVER, kill -9 and
// stopped sentinels.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/eventually.hpp"
#include "support/sentinel_set.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of a lock's helper keys

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::eventually;
using redlock::test::key;
using redlock::test::SentinelSet;
using redlock::test::SentinelSetOptions;
using Clock = std::chrono::steady_clock;

namespace {

// The message of the E that `call` throws; a failed check (and "") if it throws nothing. Another
// exception type propagates and fails the case.
template <class E, class F>
std::string what_of(F&& call) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  }
  FAIL_CHECK("no exception thrown");
  return {};
}

// Waits until every running replica has `k` (replication is asynchronous: a failover test that
// means to keep a hold first lets it reach the replicas).
void await_replicated(SentinelSet& set, const std::string& k) {
  const auto deadline = Clock::now() + 5s;
  for (std::size_t i = 0; i < set.data_count(); ++i) {
    if (!set.data(i).running() || set.role(i) != "slave") continue;
    while (set.data(i).raw({"EXISTS", k}).integer() != 1) {
      REQUIRE(Clock::now() < deadline);
      std::this_thread::sleep_for(10ms);
    }
  }
}

redlock::LockOptions patient(std::chrono::milliseconds ttl = 30s) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.fencing = true;
  o.max_unavailable = 60s;  // a waiter waits through the failover
  o.fair = false;           // these cases follow wake-on-release's channel; the queue has its own
  return o;
}

// A holder that stays through a failover: renewed, with a ttl long enough that a waiter which
// only wakes when it runs out is seen (the wake-up is all that can bring it in sooner).
redlock::LockOptions renewed_holder() {
  redlock::LockOptions o = patient(15s);
  o.auto_renew = true;
  return o;
}

// Subscribers of `k`'s release channel on data node i.
long long listeners(SentinelSet& set, std::size_t i, const std::string& k) {
  return set.data(i)
      .raw({"PUBSUB", "NUMSUB", helper_key(k, ":released")})
      .elements()
      .at(1)
      .integer();
}

// Waits until `client` reaches the master again after a failover (a try_lock of another key
// succeeds: the library's own view, not only the sentinels').
void await_serving(const redlock::Client& client, const std::string& k) {
  const bool served = eventually(
      [&] {
        try {
          redlock::Lock probe(client, k + "-probe", patient(2s));
          if (!probe.try_lock()) return false;
          probe.unlock();
          return true;
        } catch (const redlock::Error&) {
          return false;
        }
      },
      15s);
  REQUIRE(served);
}

// Waits for `k` on a thread of its own (wake-on-release, the default) and tells how long after
// released() it acquired (negative: before).
class TimedWaiter {
 public:
  TimedWaiter(redlock::Client client, std::string k)
      : thread_([this, client = std::move(client), k = std::move(k)] {
          redlock::Lock lock(client, k, patient(15s));
          lock.lock();
          acquired_ = Clock::now();
          lock.unlock();
        }) {}
  ~TimedWaiter() {
    if (thread_.joinable()) thread_.join();
  }
  TimedWaiter(const TimedWaiter&) = delete;
  TimedWaiter& operator=(const TimedWaiter&) = delete;
  // Call just before the holder releases.
  void released() { released_ = Clock::now(); }
  long long ms_after_release() {
    thread_.join();
    return std::chrono::duration_cast<std::chrono::milliseconds>(acquired_ - released_).count();
  }

 private:
  Clock::time_point released_{};
  Clock::time_point acquired_{};
  std::thread thread_;  // last: started once the fields above exist
};

}  // namespace

TEST_CASE("Sentinel: a Client from a redis-sentinel:// URI locks on the master", "[sentinel]") {
  SentinelSet set;
  redlock::Client client(set.uri());
  CHECK(client.endpoint().address() == "sentinel:mymaster");
  const auto k = key("sentinel-basic");
  redlock::Lock lock(client, k, patient(10s));
  REQUIRE(lock.try_lock());
  CHECK(lock.fence() > 0);
  // The key is on the master, and only a master: the replicas have it by replication.
  CHECK(set.data(0).raw({"EXISTS", k}).integer() == 1);
  CHECK(lock.extend(20s));
  CHECK(set.data(0).raw({"PTTL", k}).integer() > 10'000);
  redlock::Lock other(redlock::Client(set.endpoint()), k, patient(10s));
  CHECK_FALSE(other.try_lock());
  lock.unlock();
  CHECK(set.data(0).raw({"EXISTS", k}).integer() == 0);
  REQUIRE(other.try_lock());
  other.unlock();

  SECTION("the watchdog renews through Sentinel") {
    redlock::LockOptions o = patient(1s);
    o.auto_renew = true;
    redlock::Lock renewed(client, k, o);
    REQUIRE(renewed.try_lock());
    std::this_thread::sleep_for(2500ms);  // two and a half TTLs
    CHECK(renewed.owns_lock());
    CHECK(set.data(0).raw({"EXISTS", k}).integer() == 1);
    renewed.unlock();
  }
}

TEST_CASE(
    "Sentinel: SENTINEL FAILOVER keeps a replicated hold, and a waiter gets it on the new "
    "master when it is released",
    "[sentinel]") {
  SentinelSet set;
  const auto k = key("sentinel-failover");
  redlock::Client a(set.uri());
  redlock::Client b(set.uri());
  redlock::Lock holder(a, k, patient());
  REQUIRE(holder.try_lock());
  const std::uint64_t first_fence = holder.fence();
  await_replicated(set, k);

  std::atomic<bool> acquired{false};
  std::uint64_t waiter_fence = 0;
  std::thread waiter([&] {
    redlock::Lock lock(b, k, patient());
    lock.lock();
    waiter_fence = lock.fence();
    acquired = true;
    lock.unlock();
  });
  std::this_thread::sleep_for(300ms);
  const std::size_t promoted = set.failover();
  CHECK(promoted != 0);
  // Until the sentinels demote the former master (REPLICAOF, which also kills its clients), a
  // client that has not heard +switch-master yet may still write there, and such writes are
  // discarded by the demotion: the window this library cannot close (the README's safety
  // section). The assertions below are about the state after it.
  set.await_role(0, "slave", 20s);
  // The hold survives: the promoted replica had the key, so nobody else can take it.
  CHECK(set.data(promoted).raw({"EXISTS", k}).integer() == 1);
  redlock::Lock third(redlock::Client(set.uri()), k, patient());
  CHECK_FALSE(third.try_lock());
  CHECK_FALSE(acquired.load());
  // The release goes to the new master (never to the former one, a replica now) and wakes the
  // waiter, which acquires there with a larger fence.
  holder.unlock();
  waiter.join();
  CHECK(acquired.load());
  CHECK(waiter_fence > first_fence);
  CHECK(set.data(promoted).raw({"EXISTS", k}).integer() == 0);
}

TEST_CASE("Sentinel: after kill -9 of the master, a waiter acquires on the new master",
          "[sentinel]") {
  SentinelSet set;
  const auto k = key("sentinel-kill");
  redlock::Client client(set.uri());
  {
    redlock::Lock warm(client, k, patient());  // the locator has found the first master
    REQUIRE(warm.try_lock());
    warm.unlock();
  }
  std::atomic<long long> waited_ms{-1};
  set.data(0).kill9();
  const Clock::time_point killed = Clock::now();
  std::thread waiter([&] {
    redlock::Lock lock(client, k, patient());
    lock.lock();
    waited_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
    lock.unlock();
  });
  const std::size_t promoted = set.await_new_master(0, 30s);
  waiter.join();
  CHECK(promoted != 0);
  // Detection (down-after-milliseconds 500) + election + promotion: measured at 1-4 s here; the
  // bound is generous for a loaded machine.
  INFO("kill to acquire: " << waited_ms.load() << " ms");
  CHECK(waited_ms.load() >= set.options().down_after_ms);
  CHECK(waited_ms.load() < 20'000);

  // The old master comes back empty: the sentinels turn it into a replica, and no lock command
  // is ever answered by it as a master meanwhile (ROLE is checked before use).
  set.data(0).restart();
  redlock::Lock after(client, k, patient());
  REQUIRE(after.try_lock());
  CHECK(set.data(promoted).raw({"EXISTS", k}).integer() == 1);
  after.unlock();
}

TEST_CASE("Sentinel: a wrong service, a sentinel down, every sentinel down", "[sentinel]") {
  SentinelSet set;
  const auto k = key("sentinel-errors");
  SECTION("an unknown service name is a ServerError naming it") {
    redlock::Endpoint wrong = set.endpoint();
    wrong.sentinel.service = "no-such-master";
    redlock::Lock lock(redlock::Client(wrong), k, patient());
    const std::string what = what_of<redlock::ServerError>([&] { (void)lock.try_lock(); });
    CHECK_THAT(what, Catch::Contains("no sentinel knows the service 'no-such-master'"));
  }
  SECTION("one sentinel down: the others answer") {
    set.sentinel(0).kill9();
    redlock::Lock lock(redlock::Client(set.uri()), k, patient());
    REQUIRE(lock.try_lock());
    lock.unlock();
  }
  SECTION("every sentinel down: a ConnectionError naming each one") {
    for (std::size_t i = 0; i < set.sentinel_count(); ++i) set.sentinel(i).kill9();
    redlock::Lock lock(redlock::Client(set.uri()), k, patient());
    const std::string what = what_of<redlock::ConnectionError>([&] { (void)lock.try_lock(); });
    CHECK_THAT(what, Catch::Contains("no sentinel answered"));
    for (std::size_t i = 0; i < set.sentinel_count(); ++i) {
      CHECK_THAT(what, Catch::Contains("127.0.0.1:" + std::to_string(set.sentinel(i).port())));
    }
  }
}

TEST_CASE("Sentinel: passwords on the sentinels and on the master", "[sentinel]") {
  SentinelSetOptions options;
  options.replicas = 1;
  options.master_password = "master-pw";
  options.sentinel_password = "sentinel-pw";
  SentinelSet set(options);
  const auto k = key("sentinel-auth");
  redlock::Lock lock(redlock::Client(set.uri()), k, patient());
  REQUIRE(lock.try_lock());
  lock.unlock();

  redlock::Endpoint wrong = set.endpoint();
  for (auto& s : wrong.sentinel.sentinels) s.password = "nope";
  redlock::Lock refused(redlock::Client(wrong), k, patient());
  const std::string what = what_of<redlock::Error>([&] { (void)refused.try_lock(); });
  CHECK_THAT(what, Catch::Contains("AUTH"));
  wrong = set.endpoint();
  wrong.password = "nope";
  redlock::Lock bad_master(redlock::Client(wrong), k, patient());
  CHECK_THROWS_AS(bad_master.try_lock(), redlock::ServerError);
}

TEST_CASE("Sentinel: wait_replicas makes a grant wait for the replicas, or fail and leave nothing",
          "[sentinel]") {
  SentinelSet set;
  const auto k = key("sentinel-wait");
  redlock::Endpoint two = set.endpoint();
  two.wait_replicas = 2;
  two.command_timeout = 500ms;
  two.wait_timeout = 200ms;
  redlock::Client client(two);

  SECTION("acknowledged by both replicas, a hold survives a failover at once") {
    // Right after a failover a replica can be online and still a second behind the new master
    // (the extend below saw 1 of 2 acknowledgements within 200 ms in 1 run of 4, also after a
    // probe write had been acknowledged by both): this section allows WAIT 2 s.
    redlock::Endpoint patient_wait = two;
    patient_wait.wait_timeout = 2s;
    patient_wait.command_timeout = 3s;
    redlock::Lock lock(redlock::Client(patient_wait), k, patient());
    REQUIRE(lock.try_lock());  // no await_replicated: WAIT already said both replicas have it
    const std::size_t promoted = set.failover();
    CHECK(set.data(promoted).raw({"EXISTS", k}).integer() == 1);
    set.await_role(0, "slave", 20s);
    CHECK(lock.extend(30s));
    lock.unlock();
    CHECK(set.data(promoted).raw({"EXISTS", k}).integer() == 0);
  }
  SECTION("one replica paused: ReplicationError, and the grant is rolled back") {
    set.data(1).pause();
    redlock::Lock lock(client, k, patient());
    const std::string what = what_of<redlock::ReplicationError>([&] { (void)lock.try_lock(); });
    CHECK_THAT(what, Catch::Contains("1 of the 2 replicas"));
    CHECK_THAT(what, Catch::Contains("wait_replicas"));
    CHECK_FALSE(lock.owns_lock());
    CHECK(set.data(0).raw({"EXISTS", k}).integer() == 0);  // nothing left behind
    // A plain client (no WAIT) sees the lock free.
    redlock::Lock plain(redlock::Client(set.endpoint()), k, patient());
    REQUIRE(plain.try_lock());
    plain.unlock();

    // lock() treats it like an outage: it retries for max_unavailable, then throws it.
    redlock::LockOptions brief = patient();
    brief.max_unavailable = 600ms;
    redlock::Lock waiting(client, k, brief);
    CHECK_THROWS_AS(waiting.lock(), redlock::ReplicationError);
    set.data(1).resume();
    REQUIRE(waiting.try_lock());  // both acknowledge again
    waiting.unlock();
  }
  SECTION("an extend too few replicas acknowledged is not confirmed") {
    redlock::Lock lock(client, k, patient());
    REQUIRE(lock.try_lock());
    set.data(2).pause();
    CHECK_THROWS_AS(lock.extend(30s), redlock::ReplicationError);
    set.data(2).resume();
    lock.unlock();
  }
}

TEST_CASE("wait_replicas on a server that refuses WAIT names the option", "[sentinel]") {
  redlock::test::ServerOptions options;
  options.extra_args = {"--rename-command", "WAIT", ""};
  redlock::test::RedisServer server(options);
  redlock::Endpoint ep = server.endpoint();
  ep.wait_replicas = 1;
  redlock::Lock lock(redlock::Client(ep), key("wait-refused"), patient());
  const std::string what = what_of<redlock::ServerError>([&] { (void)lock.try_lock(); });
  CHECK_THAT(what, Catch::Contains("wait_replicas"));
  CHECK(server.raw({"EXISTS", key("wait-refused")}).integer() == 0);
}

TEST_CASE("Sentinel: wake-on-release follows the master through a failover", "[sentinel]") {
  SentinelSet set;
  const auto k = key("sentinel-wake");
  redlock::Client client(set.uri());
  redlock::LockOptions slow = patient();
  slow.retry_delay = 10s;  // a waiter that polls could not pass this test: only a wake-up can
  redlock::Lock holder(client, k, slow);
  REQUIRE(holder.try_lock());
  await_replicated(set, k);
  std::atomic<long long> woke_after_ms{-1};
  std::atomic<long long> released_at{0};
  std::thread waiter([&] {
    redlock::Lock lock(redlock::Client(set.uri()), k, slow);
    lock.lock();
    woke_after_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
            .count() -
        released_at.load();
    lock.unlock();
  });
  std::this_thread::sleep_for(300ms);  // the waiter subscribed on the first master
  const std::size_t promoted = set.failover();
  set.await_role(0, "slave", 20s);  // its pub/sub connection there was killed by the demotion
  // ... and it subscribes again, on the new master (the waiter's only way to learn of the
  // release: its retry delay is 10 s).
  const auto numsub = [&] {
    return set.data(promoted)
        .raw({"PUBSUB", "NUMSUB", helper_key(k, ":released")})
        .elements()
        .at(1)
        .integer();
  };
  const auto deadline = Clock::now() + 15s;
  while (numsub() < 1 && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  CHECK(numsub() == 1);
  released_at =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
          .count();
  holder.unlock();
  waiter.join();
  INFO("release to acquire: " << woke_after_ms.load() << " ms");
  CHECK(woke_after_ms.load() >= 0);
  CHECK(woke_after_ms.load() < 5'000);  // the retry delay is 10 s: this was a wake-up
}

TEST_CASE("Redlock with a Sentinel-managed node: too few replica acks count as not granted",
          "[sentinel]") {
  SentinelSet set;
  redlock::test::ServerGroup plain(2);
  redlock::Endpoint managed = set.endpoint();
  managed.wait_replicas = 2;
  managed.command_timeout = 500ms;
  managed.wait_timeout = 200ms;
  const auto k = key("sentinel-redlock");
  redlock::Redlock lock({redlock::Client(managed), redlock::Client(plain[0].endpoint()),
                         redlock::Client(plain[1].endpoint())},
                        k, patient());
  set.data(1).pause();       // the managed node's grant cannot reach 2 replicas
  REQUIRE(lock.try_lock());  // 2 of 3: the plain nodes
  // The managed node's grant is rolled back: by the attempt itself, or (when the early finish
  // left that node behind its WAIT) by the undo queued behind it on its connection.
  const auto deadline = Clock::now() + 3s;
  while (set.data(0).raw({"EXISTS", k}).integer() != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  CHECK(set.data(0).raw({"EXISTS", k}).integer() == 0);
  CHECK(plain[0].raw({"EXISTS", k}).integer() == 1);
  set.data(1).resume();
  lock.unlock();
  CHECK(plain[0].raw({"EXISTS", k}).integer() == 0);
}

// Until the sentinels demote it (about 10 s after SENTINEL FAILOVER here), the former master still
// accepts SUBSCRIBE and keeps its subscribers; releases are published on the new one only.
TEST_CASE(
    "Sentinel: waiters hear a release on the new master while the former one is still a "
    "master",
    "[sentinel][wake]") {
  SentinelSet set;
  const auto k = key("sentinel-wake-early");
  redlock::Client a(set.uri());
  redlock::Lock holder(a, k, renewed_holder());
  REQUIRE(holder.try_lock());
  await_replicated(set, k);
  const redlock::Client b(set.uri());
  // One waiter in the process reads the subscriber's lent connection itself; with two, the
  // subscriber's thread reads it.
  const int waiters = GENERATE(1, 2);
  INFO(waiters << " waiter(s)");
  std::vector<std::unique_ptr<TimedWaiter>> timed;
  for (int i = 0; i < waiters; ++i) timed.push_back(std::make_unique<TimedWaiter>(b, k));
  REQUIRE(eventually([&] { return listeners(set, 0, k) == 1; }));  // subscribed on the first
  const std::size_t promoted = set.failover();
  await_serving(a, k);
  INFO("the former master at the release: " << set.role(0));
  for (auto& w : timed) w->released();
  holder.unlock();
  CHECK(set.data(promoted).raw({"EXISTS", k}).integer() == 0);
  for (auto& w : timed) {
    const long long ms = w->ms_after_release();
    INFO("release to acquire: " << ms << " ms (the holder's ttl: 15 s)");
    CHECK(ms >= 0);
    CHECK(ms < 3'000);
  }
}

TEST_CASE(
    "Sentinel: a wait that starts after a failover subscribes on the new master, not on "
    "the subscriber's idle connection to the former one",
    "[sentinel][wake]") {
  SentinelSet set;
  const auto k = key("sentinel-wake-after");
  redlock::Client a(set.uri());
  const redlock::Client b(set.uri());
  {  // b waits once on the first master: its subscriber connects there and stays connected
    redlock::Lock holder(a, k, renewed_holder());
    REQUIRE(holder.try_lock());
    TimedWaiter first(b, k);
    REQUIRE(eventually([&] { return listeners(set, 0, k) == 1; }));
    first.released();
    holder.unlock();
    CHECK(first.ms_after_release() < 3'000);
  }
  const std::size_t promoted = set.failover();
  await_serving(a, k);
  redlock::Lock holder(a, k, renewed_holder());
  REQUIRE(holder.try_lock());  // on the new master
  TimedWaiter second(b, k);
  CHECK(eventually([&] { return listeners(set, promoted, k) == 1; }));
  INFO("the former master at the release: " << set.role(0));
  second.released();
  holder.unlock();
  const long long ms = second.ms_after_release();
  INFO("release to acquire: " << ms << " ms (the holder's ttl: 15 s)");
  CHECK(ms >= 0);
  CHECK(ms < 3'000);
}

// Fair mode (the default) through a failover: the queue is replicated, but asynchronously, and
// every waiter's subscription moves to the new master, so each one queues again there. The
// order is not kept across the failover; what is kept: every waiter is served, once each.
TEST_CASE("Sentinel: fair waiters queued before a failover are all served after it",
          "[sentinel][fair]") {
  SentinelSet set;
  const auto k = key("sentinel-fair-queue");
  redlock::LockOptions fair = patient(15s);
  fair.fair = true;
  fair.auto_renew = true;
  redlock::Client a(set.uri());
  redlock::Lock holder(a, k, fair);
  REQUIRE(holder.try_lock());
  await_replicated(set, k);
  constexpr int kWaiters = 3;
  std::atomic<int> served{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      redlock::Client own(set.uri());  // its own channel: a process of its own, as it were
      redlock::Lock lock(own, k, fair);
      if (lock.try_lock_for(40s)) {
        served.fetch_add(1);
        lock.unlock();
      }
    });
  }
  REQUIRE(eventually([&] {
    return set.data(0).raw({"LLEN", helper_key(k, ":waiters")}).integer() == kWaiters;
  }));
  set.failover();
  await_serving(a, k);
  holder.unlock();
  for (auto& t : waiters) t.join();
  CHECK(served.load() == kWaiters);
}
