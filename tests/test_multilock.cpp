// MultiLock on one instance: all or nothing (a raw client never sees part of the set held),
// contention with a Lock on one of its keys both ways, wake on release, nothing left behind by a
// timed-out, cancelled or killed acquire, one script per attempt, fences per key, renewal and
// loss, bad input.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "cluster_fixture.hpp"
#include "support/fair_queue.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"

using namespace std::chrono_literals;
using redlock::test::command_calls;
using redlock::test::key;
using redlock::test::RedisServer;
using Clock = std::chrono::steady_clock;

namespace {

redlock::LockOptions fast(std::chrono::milliseconds ttl = 10s) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.retry_delay = 5ms;
  return o;
}

// The keys of one test: k:a, k:b, k:c (no hash tag: standalone).
std::vector<std::string> three(const std::string& k) { return {k + ":a", k + ":b", k + ":c"}; }

long long exist(const RedisServer& server, const std::vector<std::string>& keys) {
  std::vector<std::string> argv{"EXISTS"};
  argv.insert(argv.end(), keys.begin(), keys.end());
  return server.raw(argv).integer();
}

struct Setup {
  explicit Setup(const std::string& name) : client(server.endpoint()), k(key(name)) {}
  RedisServer server;
  redlock::Client client;
  std::string k;
};

}  // namespace

TEST_CASE("MultiLock rejects bad arguments, naming them", "[multilock][unit]") {
  redlock::Client client("redis://127.0.0.1:1");
  using Keys = std::vector<std::string>;
  CHECK_THROWS_WITH(redlock::MultiLock(client, Keys{}), Catch::Contains("keys"));
  CHECK_THROWS_WITH(redlock::MultiLock(client, Keys{"a", "b", "a"}), Catch::Contains("'a' twice"));
  CHECK_THROWS_AS(redlock::MultiLock(client, Keys{"a", ""}), std::invalid_argument);
  auto fair = fast();
  fair.fair = true;
  CHECK_THROWS_WITH(redlock::MultiLock(client, Keys{"a"}, fair), Catch::Contains("fair"));
  auto no_ttl = fast();
  no_ttl.ttl = 0ms;
  CHECK_THROWS_WITH(redlock::MultiLock(client, Keys{"a"}, no_ttl), Catch::Contains("ttl"));
  // Each attempt is one script over every key, and the server runs nothing else meanwhile:
  // 50,000 keys ran past the default command_timeout, a TimeoutError blaming the server.
  Keys many;
  for (int i = 0; i < 1025; ++i) many.push_back("k" + std::to_string(i));
  CHECK_THROWS_MATCHES(
      redlock::MultiLock(client, many), std::invalid_argument,
      Catch::Matchers::Message("redlock: keys has 1025 keys; a MultiLock takes at most 1024"));
  many.pop_back();
  CHECK_NOTHROW(redlock::MultiLock(client, many));
  redlock::MultiLock fine(client, Keys{"b", "a"});
  CHECK(fine.keys() == Keys{"b", "a"});
  CHECK(fine.key() == "b, a");
  CHECK(fine.size() == 1);
}

TEST_CASE("MultiLock on a cluster requires one slot, naming the key that differs",
          "[multilock][unit]") {
  redlock::Client cluster("redis-cluster://127.0.0.1:1");  // connects nothing yet
  using Keys = std::vector<std::string>;
  CHECK_THROWS_WITH(redlock::MultiLock(cluster, Keys{"{t}:1", "other"}),
                    Catch::Contains("'other'") && Catch::Contains("slot"));
  CHECK_NOTHROW(redlock::MultiLock(cluster, Keys{"{t}:1", "{t}:2", "t"}));
}

TEST_CASE("MultiLock takes every key or none, a raw client never sees part of the set",
          "[redis][multilock]") {
  Setup setup("multi-atomic");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  const auto keys = three(k);
  std::atomic<bool> stop{false};
  std::atomic<int> holds{0};
  // Two MultiLocks over {a, b, c} and a Lock on b compete; b changes hands all the time.
  const redlock::Endpoint endpoint = server.endpoint();  // a lambda cannot capture a binding
  auto multi = [&] {
    redlock::Client own(endpoint);
    redlock::MultiLock m(own, keys, fast());
    while (!stop) {
      if (!m.try_lock_for(200ms)) continue;
      ++holds;
      std::this_thread::sleep_for(1ms);
      m.unlock();
    }
  };
  auto single = [&] {
    redlock::Client own(endpoint);
    redlock::Lock l(own, keys[1], fast());
    while (!stop) {
      if (!l.try_lock_for(200ms)) continue;
      std::this_thread::sleep_for(1ms);
      l.unlock();
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(multi);
  threads.emplace_back(multi);
  threads.emplace_back(single);
  int snapshots = 0;
  int whole = 0;
  int partial = 0;
  const auto end = Clock::now() + 2s;
  while (Clock::now() < end || whole == 0) {
    const auto r = server.raw({"MGET", keys[0], keys[1], keys[2]});  // one atomic read
    const auto& a = r.elements()[0];
    const auto& b = r.elements()[1];
    const auto& c = r.elements()[2];
    ++snapshots;
    if (a.is_nil() != c.is_nil() ||
        (!a.is_nil() && (a.str() != c.str() || b.is_nil() || b.str() != a.str()))) {
      ++partial;
    } else if (!a.is_nil()) {
      ++whole;
    }
    if (Clock::now() > end + 10s) break;
  }
  stop = true;
  for (auto& t : threads) t.join();
  CHECK(partial == 0);
  CHECK(whole > 0);  // the check saw sets held, not only empty ones
  CHECK(holds > 0);
  CHECK(snapshots > 100);
  CHECK(exist(server, keys) == 0);
}

TEST_CASE("A Lock on one key and a MultiLock over it exclude each other", "[redis][multilock]") {
  Setup setup("multi-vs-lock");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  const auto keys = three(k);
  redlock::Lock b(client, keys[1], fast());
  redlock::MultiLock all(client, keys, fast());
  REQUIRE(b.try_lock());
  CHECK_FALSE(all.try_lock());
  CHECK(exist(server, {keys[0], keys[2]}) == 0);  // a refusal writes nothing
  b.unlock();
  REQUIRE(all.try_lock());
  CHECK(exist(server, keys) == 3);
  CHECK_FALSE(b.try_lock());
  {
    // std::unique_lock over the set, from another thread: contention is false.
    auto other = std::async(std::launch::async, [&] {
      std::unique_lock<redlock::MultiLock> guard(all, std::try_to_lock);
      return guard.owns_lock();
    });
    CHECK_FALSE(other.get());
  }
  CHECK(all.release());
  CHECK(exist(server, keys) == 0);
  {
    std::lock_guard<redlock::MultiLock> guard(all);  // BasicLockable
    CHECK(all.owns_lock());
  }
  CHECK(exist(server, keys) == 0);
}

TEST_CASE("A release of one key wakes a waiting MultiLock, and a MultiLock's release wakes a Lock",
          "[redis][multilock][wake]") {
  Setup setup("multi-wake");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  const auto keys = three(k);
  auto slow = fast(30s);
  slow.retry_delay = 10s;  // only a wake-up can explain a quick grant
  redlock::Lock c(client, keys[2], slow);
  redlock::MultiLock all(client, keys, slow);
  REQUIRE(c.try_lock());
  std::promise<void> go;
  std::atomic<bool> held{false};
  std::atomic<Clock::rep> when{0};
  std::thread waiter([&, done = go.get_future()] {
    held = all.try_lock_for(20s);
    when = Clock::now().time_since_epoch().count();
    done.wait();
    if (held) all.unlock();
  });
  std::this_thread::sleep_for(300ms);
  auto released = Clock::now();
  CHECK(c.release());
  while (when == 0) std::this_thread::sleep_for(1ms);
  REQUIRE(held);
  CHECK(Clock::time_point(Clock::duration(when.load())) - released < 3s);
  CHECK(exist(server, keys) == 3);
  // The other way round: a Lock waits for c, and the set is released.
  auto lock_got = std::async(std::launch::async, [&] {
    const bool held_c = c.try_lock_for(20s);
    const auto at = Clock::now();
    if (held_c) c.unlock();
    return std::make_pair(held_c, at);
  });
  std::this_thread::sleep_for(300ms);
  released = Clock::now();
  go.set_value();
  waiter.join();
  const auto [held_c, at] = lock_got.get();
  CHECK(held_c);
  CHECK(at - released < 3s);
  CHECK(exist(server, keys) == 0);
}

TEST_CASE("A timed-out, cancelled or killed MultiLock acquire leaves no key behind",
          "[redis][multilock][fault]") {
  Setup setup("multi-left");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  const auto keys = three(k);
  const std::vector<std::string> free_keys{keys[0], keys[2]};
  redlock::Lock b(client, keys[1], fast(30s));
  REQUIRE(b.try_lock());
  redlock::MultiLock all(client, keys, fast());
  CHECK_FALSE(all.try_lock_for(300ms));
  CHECK(exist(server, free_keys) == 0);
  auto waiting = std::async(std::launch::async, [&] {
    try {
      all.lock();
      all.unlock();
      return std::string("held");
    } catch (const redlock::CancelledError&) {
      return std::string("cancelled");
    }
  });
  std::this_thread::sleep_for(200ms);
  all.cancel_waits();
  CHECK(waiting.get() == "cancelled");
  CHECK(exist(server, free_keys) == 0);
  // A process killed while it waits in lock() (Redisson #4456).
  const pid_t child = fork();
  if (child == 0) {
    try {
      redlock::Client own(server.endpoint());
      redlock::MultiLock m(own, keys, fast());
      m.lock();
    } catch (...) {
    }
    _exit(1);
  }
  REQUIRE(child > 0);
  std::this_thread::sleep_for(300ms);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(exist(server, free_keys) == 0);
  CHECK(b.release());
  redlock::MultiLock again(client, keys, fast());
  CHECK(again.try_lock());
  CHECK(again.release());
  CHECK(exist(server, keys) == 0);
}

TEST_CASE("A MultiLock attempt is one script, whatever the number of keys", "[redis][multilock]") {
  Setup setup("multi-trips");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back(k + ":" + std::to_string(i));
  redlock::MultiLock all(client, keys, fast());
  REQUIRE(all.try_lock());  // loads the scripts
  CHECK(all.extend());
  all.unlock();
  REQUIRE(server.raw({"CONFIG", "RESETSTAT"}).str() == "OK");
  REQUIRE(all.try_lock());
  CHECK(command_calls(server, "evalsha") == 1);
  CHECK(command_calls(server, "set") == 8);  // commandstats counts what scripts run too
  CHECK(all.extend());
  CHECK(command_calls(server, "evalsha") == 2);
  all.unlock();
  CHECK(command_calls(server, "evalsha") == 3);
  redlock::Lock one(client, keys[5], fast());
  REQUIRE(one.try_lock());
  REQUIRE(server.raw({"CONFIG", "RESETSTAT"}).str() == "OK");
  CHECK_FALSE(all.try_lock());
  CHECK(command_calls(server, "evalsha") == 1);
  CHECK(command_calls(server, "set") == 0);
  CHECK(command_calls(server, "eval") == 0);
  one.unlock();
}

TEST_CASE("A MultiLock of the most keys allowed fits the default command_timeout",
          "[redis][multilock]") {
  Setup setup("multi-most");
  std::vector<std::string> keys;
  for (int i = 0; i < 1024; ++i) {  // MultiLock::kMaxKeys
    keys.push_back(setup.k + ":" + std::to_string(i));
  }
  auto options = fast();
  options.fencing = true;  // the costliest script: an INCR per key too
  redlock::MultiLock all(setup.client, keys, options);
  REQUIRE(all.try_lock());  // loads the scripts
  all.unlock();
  REQUIRE(setup.server.raw({"CONFIG", "RESETSTAT"}).str() == "OK");
  for (int round = 0; round < 3; ++round) {
    REQUIRE(all.try_lock());
    CHECK(all.extend());
    CHECK(all.release());
  }
  // The server's own time per script (commandstats: no client scheduling in it), against the
  // default command_timeout of 200 ms.
  const std::string info = setup.server.raw({"INFO", "commandstats"}).str();
  const std::string tag = "cmdstat_evalsha:calls=";
  const auto at = info.find(tag);
  REQUIRE(at != std::string::npos);
  const long long calls = std::stoll(info.substr(at + tag.size()));
  const auto usec_at = info.find("usec=", at);
  REQUIRE(usec_at != std::string::npos);
  const long long usec = std::stoll(info.substr(usec_at + 5));
  CHECK(calls == 9);
  INFO("server time per script over 1,024 keys: " << usec / calls << " us");
  CHECK(usec / calls < 50'000);  // 4.0 ms measured on a busy 2-core VM
}

TEST_CASE("MultiLock fences are per key and share each key's counter with a Lock",
          "[redis][multilock]") {
  Setup setup("multi-fence");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  auto o = fast();
  o.fencing = true;
  const std::vector<std::string> keys{k + ":a", k + ":b"};
  redlock::Lock a(client, keys[0], o);
  redlock::MultiLock both(client, keys, o);
  REQUIRE(a.try_lock());
  const auto first = a.fence();
  CHECK(first > 0);
  a.unlock();
  REQUIRE(both.try_lock());
  const auto fences = both.fences();
  REQUIRE(fences.size() == 2);
  CHECK(fences[0] > first);
  CHECK(fences[1] > 0);
  CHECK(both.fence() == fences[0]);
  both.unlock();
  CHECK(both.fences().empty());
  REQUIRE(a.try_lock());
  CHECK(a.fence() > fences[0]);
  a.unlock();
  redlock::MultiLock plain(client, keys, fast());
  REQUIRE(plain.try_lock());
  CHECK(plain.fences().empty());
  CHECK(plain.fence() == 0);
  plain.unlock();
}

TEST_CASE("MultiLock auto_renew keeps every key past its ttl, on_lost when one key goes",
          "[redis][multilock][watchdog]") {
  Setup setup("multi-renew");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  const auto keys = three(k);
  auto o = fast(1000ms);
  o.auto_renew = true;
  std::promise<redlock::LostEvent> lost;
  std::once_flag once;
  o.on_lost = [&](const redlock::LostEvent& e) {
    std::call_once(once, [&] { lost.set_value(e); });
  };
  redlock::MultiLock all(client, keys, o);
  REQUIRE(all.try_lock());
  std::this_thread::sleep_for(2500ms);
  CHECK(all.owns_lock());
  CHECK(exist(server, keys) == 3);
  server.raw({"DEL", keys[1]});
  auto event = lost.get_future();
  REQUIRE(event.wait_for(5s) == std::future_status::ready);
  CHECK(event.get().key == all.key());
  CHECK_FALSE(all.owns_lock());
  CHECK_FALSE(all.release());
  CHECK(exist(server, keys) == 0);  // the keys still ours were deleted by the release
}

namespace {

// One worker: `rounds` times hold `set`, counting itself in on each key (INCR, which must give
// 1: nobody else holds the key) and out again. Returns the violations, or -1 if a wait timed out.
int overlap_worker(const RedisServer& server, const std::vector<std::string>& set, int rounds) {
  redlock::Client client(server.endpoint());
  redlock::MultiLock m(client, set, fast());
  int violations = 0;
  for (int i = 0; i < rounds; ++i) {
    if (!m.try_lock_for(30s)) return -1;
    std::vector<std::vector<std::string>> in;
    std::vector<std::vector<std::string>> out;
    for (const auto& k : set) {
      in.push_back({"INCR", k + ":inside"});
      out.push_back({"DECR", k + ":inside"});
    }
    for (const auto& r : server.raw_pipeline(in)) violations += r.integer() == 1 ? 0 : 1;
    std::this_thread::sleep_for(2ms);
    server.raw_pipeline(out);
    m.unlock();
  }
  return violations;
}

}  // namespace

TEST_CASE("MultiLocks over overlapping sets in different orders, 4 processes x 2 threads",
          "[redis][multilock]") {
  RedisServer server;
  const auto k = key("multi-overlap");
  const std::vector<std::string> pool{k + ":0", k + ":1", k + ":2", k + ":3", k + ":4"};
  // Every pair of sets overlaps in keys named in opposite orders somewhere.
  const std::vector<std::vector<std::string>> sets{
      {pool[0], pool[1], pool[2]}, {pool[2], pool[1]},         {pool[3], pool[0]},
      {pool[4], pool[2], pool[0]}, {pool[1], pool[3]},         {pool[0], pool[4]},
      {pool[2], pool[3], pool[4]}, {pool[4], pool[3], pool[1]}};
  constexpr int kRounds = 40;
  std::vector<pid_t> children;
  for (int p = 0; p < 4; ++p) {
    const pid_t pid = fork();
    if (pid == 0) {
      int rc = 0;
      try {
        auto other = std::async(std::launch::async,
                                [&] { return overlap_worker(server, sets[2 * p + 1], kRounds); });
        const int mine = overlap_worker(server, sets[2 * p], kRounds);
        const int theirs = other.get();
        rc = mine < 0 || theirs < 0 ? 3 : (mine + theirs > 0 ? 4 : 0);
      } catch (...) {
        rc = 2;
      }
      _exit(rc);
    }
    REQUIRE(pid > 0);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // 3: a wait timed out (deadlock), 4: a key held twice
  }
  CHECK(exist(server, pool) == 0);  // nothing left behind
}

TEST_CASE(
    "Cluster: a MultiLock over one hash tag is one script on the owner and wakes through "
    "sharded pub/sub, on each master",
    "[cluster][redis]") {
  using redlock::test::shared_cluster;
  auto& cluster = shared_cluster();
  redlock::Client client(cluster.uri());
  auto slow = fast(30s);
  slow.retry_delay = 10s;  // only a wake-up explains a quick grant
  for (const std::size_t m : cluster.masters()) {
    const std::string tag = "{" + cluster.key_on(m, "multi-cluster") + "}";
    const std::vector<std::string> keys{tag + ":a", tag + ":b", tag + ":c"};
    INFO(tag);
    redlock::Lock b(client, keys[1], slow);
    redlock::MultiLock all(client, keys, slow);
    REQUIRE(b.try_lock());
    CHECK_FALSE(all.try_lock());
    std::promise<void> go;
    std::atomic<Clock::rep> when{0};
    std::atomic<bool> held{false};
    std::thread waiter([&, done = go.get_future()] {
      held = all.try_lock_for(20s);
      when = Clock::now().time_since_epoch().count();
      done.wait();
      if (held) all.unlock();
    });
    std::this_thread::sleep_for(300ms);
    const auto released = Clock::now();
    CHECK(b.release());
    while (when == 0) std::this_thread::sleep_for(1ms);
    CHECK(held);
    CHECK(Clock::time_point(Clock::duration(when.load())) - released < 3s);
    std::vector<std::string> exists{"EXISTS"};
    exists.insert(exists.end(), keys.begin(), keys.end());
    CHECK(cluster.node(m).raw(exists).integer() == 3);
    go.set_value();
    waiter.join();
    CHECK(cluster.node(m).raw(exists).integer() == 0);
  }
}
