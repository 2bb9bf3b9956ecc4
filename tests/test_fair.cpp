// Fair mode (LockOptions::fair): waiters queue on the server, a release hands the lock to the
// longest-waiting live waiter without another round trip, dead and departed waiters are skipped,
// and nothing is left behind.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <hiredis/hiredis.h>

#include <redlock/redlock.hpp>

#include "support/clock.hpp"
#include "support/fair_queue.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of a lock's helper keys

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::command_calls;
using redlock::test::fair_lock_options;
using redlock::test::HeldFairLock;
using redlock::test::key;
using redlock::test::monotonic_us;
using redlock::test::queue_length;
using redlock::test::RedisServer;
using redlock::test::wait_for_queue;
using Clock = std::chrono::steady_clock;

namespace {

// Forks a process that waits for `k` in fair mode, writes `id` to `fd` once it holds the lock,
// holds it for `hold`, and exits.
pid_t fork_waiter(const RedisServer& server, const std::string& k, int id, int fd,
                  std::chrono::milliseconds hold, redlock::LockOptions options) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  int rc = 1;
  try {
    redlock::Client client(server.endpoint());
    redlock::Lock lock(client, k, options);
    lock.lock();
    rc = write(fd, &id, sizeof id) == sizeof id ? 0 : 2;
    std::this_thread::sleep_for(hold);
    lock.unlock();
  } catch (...) {
  }
  _exit(rc);
}

// A server behind a fault proxy, a client straight to it and one through the proxy, and a fair
// lock on `name` that the direct client holds.
struct ProxiedHeldLock {
  ProxiedHeldLock(const std::string& name, std::chrono::milliseconds command_timeout)
      : proxy("127.0.0.1", server.endpoint().port),
        k(key(name)),
        direct(server.endpoint()),
        via_proxy(proxied(server, proxy, command_timeout)),
        holder(direct, k, fair_lock_options()) {
    holder.lock();
  }
  static redlock::Endpoint proxied(const RedisServer& server,
                                   const redlock::test::FaultProxy& proxy,
                                   std::chrono::milliseconds command_timeout) {
    redlock::Endpoint endpoint = server.endpoint();
    endpoint.port = proxy.port();
    endpoint.command_timeout = command_timeout;
    endpoint.connect_timeout = 2s;
    return endpoint;
  }
  RedisServer server;
  redlock::test::FaultProxy proxy;
  std::string k;
  redlock::Client direct;
  redlock::Client via_proxy;
  redlock::Lock holder;
};

}  // namespace

TEST_CASE("Fair mode serves waiters in other processes in arrival order", "[redis][fair]") {
  HeldFairLock held("fair-order");
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  constexpr int kWaiters = 5;
  std::vector<pid_t> children;
  for (int id = 0; id < kWaiters; ++id) {
    children.push_back(
        fork_waiter(held.server, held.k, id, pipe_fds[1], 20ms, fair_lock_options()));
    REQUIRE(children.back() > 0);
    // The next one starts only once this one has its place.
    REQUIRE(wait_for_queue(held.server, held.k, id + 1));
  }
  close(pipe_fds[1]);
  const long long released = monotonic_us();
  held.holder.unlock();
  std::vector<int> order;
  int id = 0;
  while (read(pipe_fds[0], &id, sizeof id) == sizeof id) order.push_back(id);
  const long long all_done = monotonic_us();
  close(pipe_fds[0]);
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  // Five 20 ms holds handed over one after the other; the 10 s retry delay never came into it.
  CHECK(all_done - released < 2000000);
  // Nothing left behind: the queue and its info are gone, the lock is free.
  CHECK(held.server
            .raw({"EXISTS", held.k, helper_key(held.k, ":waiters"),
                  helper_key(held.k, ":waiters:info")})
            .integer() == 0);
}

TEST_CASE("A hand-over reaches the waiter in another process without another command",
          "[redis][fair]") {
  HeldFairLock held("fair-handover");
  // once around first, so both scripts are cached (no NOSCRIPT + EVAL below)
  held.holder.unlock();
  held.holder.lock();
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t child = fork_waiter(held.server, held.k, 7, pipe_fds[1], 0ms, fair_lock_options());
  REQUIRE(child > 0);
  close(pipe_fds[1]);
  REQUIRE(wait_for_queue(held.server, held.k, 1));
  std::this_thread::sleep_for(50ms);
  held.server.raw({"CONFIG", "RESETSTAT"});
  const long long released = monotonic_us();
  held.holder.unlock();
  int id = 0;
  REQUIRE(read(pipe_fds[0], &id, sizeof id) == sizeof id);
  const long long acquired = monotonic_us();
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(id == 7);
  INFO("handoff " << acquired - released << " us");
  CHECK(acquired - released < 50000);
  // The holder's release script (whose SET inside hands the key over) and the waiter's own
  // release afterwards: no acquire attempt by the waiter in between, the hand-over message told
  // it everything. (commandstats counts the commands scripts run, too.)
  CHECK(command_calls(held.server, "evalsha") == 2);
  CHECK(command_calls(held.server, "set") == 1);
  CHECK(command_calls(held.server, "eval") == 0);
  CHECK(command_calls(held.server, "pexpire") == 0);
}

TEST_CASE("A hand-over goes to the waiter's process alone and names the waiter by a hash",
          "[redis][fair]") {
  HeldFairLock held("fair-hidden");
  // A bystander subscribed to every channel of the lock.
  timeval tv{5, 0};
  redisContext* spy = redisConnectWithTimeout("127.0.0.1", held.server.port(), tv);
  REQUIRE(spy != nullptr);
  REQUIRE(spy->err == 0);
  redisSetTimeout(spy, tv);
  const std::string pattern = helper_key(held.k, ":released") + "*";
  const char* argv[] = {"PSUBSCRIBE", pattern.c_str()};
  const std::size_t lens[] = {10, pattern.size()};
  void* raw = redisCommandArgv(spy, 2, argv, lens);
  REQUIRE(raw != nullptr);
  freeReplyObject(raw);
  std::atomic<bool> got{false};
  std::atomic<bool> checked{false};
  redlock::Lock waiter(held.client, held.k, fair_lock_options());
  std::atomic<bool> acquired{false};
  std::thread t([&] {
    got = waiter.try_lock_for(10s);  // stays held until the checks are done (a thread that
    acquired = true;                 // exits holding releases its holds)
    while (!checked) std::this_thread::sleep_for(1ms);
    if (got) waiter.unlock();
  });
  REQUIRE(wait_for_queue(held.server, held.k, 1));
  held.holder.unlock();
  struct Finish {  // lets the waiter's thread unlock and end, also when a REQUIRE fails
    std::atomic<bool>& checked;
    std::thread& t;
    ~Finish() {
      checked = true;
      t.join();
    }
  } finish{checked, t};
  while (!acquired) std::this_thread::sleep_for(1ms);
  REQUIRE(got.load());
  const std::string token = held.server.raw({"GET", held.k}).str();
  raw = nullptr;
  REQUIRE(redisGetReply(spy, &raw) == REDIS_OK);
  auto* message = static_cast<redisReply*>(raw);
  REQUIRE(message->type == REDIS_REPLY_ARRAY);
  REQUIRE(message->elements == 4);  // pmessage, pattern, channel, payload
  const std::string channel(message->element[2]->str, message->element[2]->len);
  const std::string payload(message->element[3]->str, message->element[3]->len);
  freeReplyObject(raw);
  redisFree(spy);
  INFO("payload " << payload);
  CHECK(payload.rfind("grant:", 0) == 0);
  // Published on the waiting process's own channel: other processes are not woken.
  CHECK(channel.rfind(helper_key(held.k, ":released:"), 0) == 0);
  CHECK(channel.size() == helper_key(held.k, ":released:").size() + 16);
  CHECK(payload.find(token) == std::string::npos);  // the live holder's token stays secret
  CHECK(payload.substr(payload.size() - 40) == redlock::Script(token).sha1());
  // Somebody who heard the message cannot release the lock with what it said.
  CHECK(held.server
            .raw({"EVAL", "if redis.call('get', KEYS[1]) == ARGV[1] then return 1 end return 0",
                  "1", held.k, payload.substr(payload.size() - 40)})
            .integer() == 0);
}

TEST_CASE("Fair mode skips a waiter that died in the queue", "[redis][fair][fault]") {
  HeldFairLock held("fair-dead");
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  // A waiter with a 200 ms retry delay keeps its place for 1 s without a refresh; if it were
  // handed the lock dead, its 60 s ttl would block everyone behind it.
  const pid_t doomed =
      fork_waiter(held.server, held.k, 1, pipe_fds[1], 0ms, fair_lock_options(200ms));
  REQUIRE(doomed > 0);
  REQUIRE(wait_for_queue(held.server, held.k, 1));
  kill(doomed, SIGKILL);
  int status = 0;
  waitpid(doomed, &status, 0);
  close(pipe_fds[1]);
  close(pipe_fds[0]);
  std::atomic<bool> got{false};
  std::thread next([&] {
    redlock::Lock lock(held.client, held.k, fair_lock_options());
    got = lock.try_lock_for(10s);
    if (got) lock.unlock();
  });
  REQUIRE(wait_for_queue(held.server, held.k, 2));  // queued behind the dead one
  std::this_thread::sleep_for(1200ms);              // the dead waiter's place has lapsed
  const auto released = Clock::now();
  held.holder.unlock();
  next.join();
  CHECK(got.load());
  CHECK(Clock::now() - released < 2s);
  CHECK(held.server
            .raw({"EXISTS", helper_key(held.k, ":waiters"), helper_key(held.k, ":waiters:info")})
            .integer() == 0);
}

TEST_CASE("A fair waiter that times out leaves the queue", "[redis][fair]") {
  HeldFairLock held("fair-timeout");
  redlock::Lock waiter(held.client, held.k, fair_lock_options());
  const auto start = Clock::now();
  CHECK_FALSE(waiter.try_lock_for(300ms));
  CHECK(Clock::now() - start >= 300ms);
  CHECK(queue_length(held.server, held.k) == 0);
  CHECK(held.server.raw({"HLEN", helper_key(held.k, ":waiters:info")}).integer() == 0);
  // The lock is still the holder's, and its release finds nobody to hand over to.
  CHECK(held.holder.owns_lock());
  CHECK(held.holder.release());
  CHECK(held.server.raw({"EXISTS", held.k}).integer() == 0);
}

TEST_CASE("try_lock in fair mode does not jump a live queue", "[redis][fair]") {
  HeldFairLock held("fair-nobarge");
  std::atomic<bool> got{false};
  std::thread queued([&] {
    redlock::Lock lock(held.client, held.k, fair_lock_options(2s));  // retries after 1-3 s
    got = lock.try_lock_for(10s);
    if (got) lock.unlock();
  });
  REQUIRE(wait_for_queue(held.server, held.k, 1));
  // The holder's lease vanishes unannounced (as if it expired): the lock is free on the
  // server, but it belongs to the queue's head, not to whoever asks first.
  held.server.raw({"DEL", held.k});
  redlock::Lock barger(held.client, held.k, fair_lock_options());
  CHECK_FALSE(barger.try_lock());
  queued.join();
  CHECK(got.load());  // the head took it on its timer (an expiry publishes nothing)
  CHECK(barger.try_lock());
  barger.unlock();
}

TEST_CASE("Fair mode: fence tokens grow across hand-overs, also when the message is missed",
          "[redis][fair]") {
  RedisServer server;
  const auto k = key("fair-fence");
  redlock::Client client(server.endpoint());
  for (const bool wake : {true, false}) {
    auto o = fair_lock_options(wake ? 10s : 200ms);
    o.fencing = true;
    o.wake_on_release = wake;  // without it, the hand-over is found by the next refresh
    redlock::Lock holder(client, k, o);
    holder.lock();
    const auto first = holder.fence();
    std::atomic<std::uint64_t> second{0};
    std::atomic<bool> got{false};
    std::thread waiter([&] {
      redlock::Lock lock(client, k, o);
      got = lock.try_lock_for(10s);
      second = lock.fence();
      if (got) lock.unlock();
    });
    REQUIRE(wait_for_queue(server, k, 1));
    holder.unlock();
    waiter.join();
    CHECK(got.load());
    CHECK(second.load() > first);
    CHECK(std::to_string(second.load()) == server.raw({"GET", helper_key(k, ":fence")}).str());
  }
}

TEST_CASE("Fair mode: mutual exclusion and even shares across processes", "[redis][fair][slow]") {
  RedisServer server;
  const auto k = key("fair-shares");
  const auto counter = k + ":counter";
  constexpr int kProcesses = 4;
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const auto stop_at = monotonic_us() + 2000000;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 1;
      try {
        redlock::Client client(server.endpoint());
        redlock::Client plain(server.endpoint());
        redlock::Lock lock(client, k, fair_lock_options(50ms));
        int count = 0;
        while (monotonic_us() < stop_at) {
          std::lock_guard<redlock::Lock> guard(lock);
          // read-sleep-write: a second holder would lose an update
          const auto value = plain.command({"GET", counter});
          const long long n = value.is_nil() ? 0 : std::stoll(value.str());
          std::this_thread::sleep_for(1ms);
          plain.command({"SET", counter, std::to_string(n + 1)});
          ++count;
        }
        rc = write(pipe_fds[1], &count, sizeof count) == sizeof count ? 0 : 2;
      } catch (...) {
      }
      _exit(rc);
    }
    children.push_back(pid);
  }
  close(pipe_fds[1]);
  std::vector<int> counts;
  int count = 0;
  while (read(pipe_fds[0], &count, sizeof count) == sizeof count) counts.push_back(count);
  close(pipe_fds[0]);
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WEXITSTATUS(status) == 0);
  }
  REQUIRE(counts.size() == static_cast<std::size_t>(kProcesses));
  long long total = 0;
  for (int c : counts) total += c;
  CHECK(std::to_string(total) == server.raw({"GET", counter}).str());  // no lost update
  const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  INFO("acquisitions per process: " << *lo << " - " << *hi);
  CHECK(*lo > 0);
  // First come, first served: every process gets a share. Without fair mode the processes race
  // for each release and the spread is often 10x or more.
  CHECK(static_cast<double>(*lo) >= 0.3 * static_cast<double>(*hi));
}

TEST_CASE("A fair Redlock queues its waiters on one server, the same whatever the instances' order",
          "[redis][redlock][fair]") {
  redlock::test::ServerGroup group(3);
  const auto k = key("fair-redlock-orderer");
  const auto clients = [&](std::vector<std::size_t> order) {
    std::vector<redlock::Client> out;
    for (std::size_t i : order) out.emplace_back(group[i].endpoint());
    return out;
  };
  redlock::Redlock holder(clients({0, 1, 2}), k, fair_lock_options());
  REQUIRE(holder.try_lock());
  std::vector<int> served;
  std::mutex served_mutex;
  const auto waiter = [&](std::vector<std::size_t> order, int id) {
    return std::thread([&, order, id] {
      redlock::Redlock lock(clients(order), k, fair_lock_options());
      if (!lock.try_lock_for(20s)) return;
      {
        std::lock_guard<std::mutex> guard(served_mutex);
        served.push_back(id);
      }
      lock.unlock();
    });
  };
  const auto queued = [&] {
    std::vector<long long> out;
    for (std::size_t i = 0; i < 3; ++i) out.push_back(queue_length(group[i], k));
    return out;
  };
  std::thread first = waiter({2, 0, 1}, 1);
  const auto end = Clock::now() + 10s;
  std::vector<long long> lengths = queued();
  while (std::count(lengths.begin(), lengths.end(), 1) != 1 && Clock::now() < end) {
    std::this_thread::sleep_for(5ms);
    lengths = queued();
  }
  std::thread second = waiter({1, 2, 0}, 2);
  while (std::count(lengths.begin(), lengths.end(), 2) != 1 && Clock::now() < end) {
    std::this_thread::sleep_for(5ms);
    lengths = queued();
  }
  INFO("queue lengths: " << lengths[0] << " " << lengths[1] << " " << lengths[2]);
  CHECK(std::count(lengths.begin(), lengths.end(), 2) == 1);  // one orderer for both
  CHECK(std::count(lengths.begin(), lengths.end(), 0) == 2);
  holder.unlock();
  first.join();
  second.join();
  CHECK(served == std::vector<int>{1, 2});
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(group[i]
              .raw({"EXISTS", k, helper_key(k, ":waiters"), helper_key(k, ":waiters:info")})
              .integer() == 0);
  }
}

TEST_CASE("Fair mode hands over on keys with NUL and non-UTF-8 bytes", "[redis][fair][bad-input]") {
  // The hand-over names the waiter's channel, which contains the key: built with Lua's %s it
  // was cut at the first NUL (published on the wrong channel, or the waiter looked dead).
  std::vector<std::string> keys = {key(std::string("fair\0mid", 8)),
                                   key("fair-\xff\xfe\x80-bytes")};
  // A NUL first (the waiter looked dead), unless logged in with the minimal ACL, whose key
  // pattern ("rltest:*") such a key cannot match.
  if (std::getenv("REDLOCK_TEST_RESTRICTED_USER") == nullptr) {
    keys.push_back(std::string("\0fair-first", 11));
  }
  for (const std::string& k : keys) {
    INFO("key of " << k.size() << " bytes, first byte " << static_cast<int>(k[0]));
    RedisServer server;
    redlock::Client client(server.endpoint());
    redlock::Lock holder(client, k, fair_lock_options(2s));
    holder.lock();
    holder.unlock();  // once around, so the scripts are cached
    holder.lock();
    std::atomic<bool> got{false};
    redlock::Lock waiter(client, k, fair_lock_options(2s));
    std::thread t([&] {
      got = waiter.try_lock_for(5s);
      if (got) waiter.unlock();
    });
    REQUIRE(wait_for_queue(server, k, 1));
    std::this_thread::sleep_for(50ms);
    server.raw({"CONFIG", "RESETSTAT"});
    const auto released = Clock::now();
    holder.unlock();
    t.join();
    CHECK(got.load());
    CHECK(Clock::now() - released < 1500ms);
    // The holder's release and the waiter's own: the waiter never had to ask again.
    CHECK(command_calls(server, "evalsha") == 2);
    CHECK(server.raw({"EXISTS", k, helper_key(k, ":waiters"), helper_key(k, ":waiters:info")})
              .integer() == 0);
  }
}

TEST_CASE("Fair mode: a refused retry on a stale connection keeps the waiter's place and grant",
          "[redis][fair][fault]") {
  // The waiter's pooled connection dies; its next attempt is resent on a fresh one and refused.
  // That refusal cannot be the waiter's own grant (a script), so nothing may be rolled back: a
  // rollback (fair_release) after the holder handed the lock over would pass it on or delete it,
  // while the hand-over message still told the waiter it held the lock.
  ProxiedHeldLock held("fair-stale-retry", 2s);
  RedisServer& server = held.server;
  redlock::test::FaultProxy& proxy = held.proxy;
  const std::string& k = held.k;
  redlock::Client& via_proxy = held.via_proxy;
  redlock::Lock& holder = held.holder;
  redlock::Lock waiter(via_proxy, k, fair_lock_options(300ms));
  std::atomic<bool> got{false};
  std::thread t([&] {
    got = waiter.try_lock_for(20s);
    if (got) {
      // Still ours on the server: nobody else can take it.
      redlock::Client third_client(server.endpoint());
      redlock::Lock third(third_client, k, fair_lock_options());
      CHECK_FALSE(third.try_lock());
      CHECK(server.raw({"GET", k}).str().size() == 40);
      CHECK(waiter.release());
    }
  });
  REQUIRE(wait_for_queue(server, k, 1));
  proxy.set_delay(150ms);
  // Kills the waiter's pooled connection (and the holder's), not the subscriber.
  server.raw({"CLIENT", "KILL", "TYPE", "normal"});
  const long long before = command_calls(server, "evalsha");
  const auto end = Clock::now() + 5s;
  while (command_calls(server, "evalsha") == before && Clock::now() < end) {
    std::this_thread::sleep_for(1ms);
  }
  holder.unlock();  // hands over while the refusal is on its way back
  t.join();
  CHECK(got.load());
}

TEST_CASE("A fair waiter cancelled from another thread leaves the queue", "[redis][fair][cancel]") {
  HeldFairLock held("fair-cancel");
  redlock::Lock waiter(held.client, held.k, fair_lock_options());
  std::atomic<bool> got{true};
  std::thread t([&] { got = waiter.try_lock_for(30s); });
  REQUIRE(wait_for_queue(held.server, held.k, 1));
  const auto start = Clock::now();
  waiter.cancel_waits();
  t.join();
  CHECK_FALSE(got.load());
  CHECK(Clock::now() - start < 2s);
  CHECK(queue_length(held.server, held.k) == 0);
  CHECK(held.server.raw({"HLEN", helper_key(held.k, ":waiters:info")}).integer() == 0);
  // Nobody to hand over to: the release deletes the key.
  CHECK(held.holder.release());
  CHECK(held.server.raw({"EXISTS", held.k}).integer() == 0);
}

TEST_CASE("A fair wait keeps one place and one token for its whole wait", "[redis][fair]") {
  HeldFairLock held("fair-one-place");
  // Refreshes its place ~10 times a second; a generous timeout, so that a busy machine does not
  // turn a slow refresh into a transport failure (after which the waiter rejoins).
  redlock::Endpoint patient = held.server.endpoint();
  patient.command_timeout = 2s;
  redlock::Client client(patient);
  redlock::Lock waiter(client, held.k, fair_lock_options(100ms));
  std::atomic<bool> got{false};
  std::string holding;  // the key's value while the waiter holds (its thread still runs)
  std::thread t([&] {
    got = waiter.try_lock_for(20s);
    if (!got) return;
    holding = held.server.raw({"GET", held.k}).str();
    waiter.unlock();
  });
  REQUIRE(wait_for_queue(held.server, held.k, 1));
  const std::string place = held.server.raw({"LINDEX", helper_key(held.k, ":waiters"), "0"}).str();
  REQUIRE(place.size() == 40);
  for (int i = 0; i < 40; ++i) {  // two seconds of refreshes
    std::this_thread::sleep_for(50ms);
    CHECK(queue_length(held.server, held.k) == 1);
    CHECK(held.server.raw({"LINDEX", helper_key(held.k, ":waiters"), "0"}).str() == place);
  }
  held.holder.unlock();
  t.join();
  REQUIRE(got.load());
  CHECK(holding == place);  // the hold is the queued token
}

TEST_CASE("Fair mode: a late undo of an abandoned attempt never ends the waiter's later hold",
          "[redis][fair][fault]") {
  // An attempt that times out is abandoned, and its undo (fair_release with the waiter's token)
  // is queued behind it on the same connection. A slow network can deliver both long after the
  // waiter's next attempts, on fresh connections, made it the holder. The undo must then find
  // nothing of the waiter's to end. Found by torture_lock_fair (latency faults): the late undo
  // deleted the key, the next waiter took it, and fencing caught the overlap.
  ProxiedHeldLock held("fair-late-undo", 200ms);
  const std::string& k = held.k;
  redlock::LockOptions options = fair_lock_options(50ms, 30s);
  options.wake_on_release = false;  // retries every 50 ms: no subscriber through the proxy
  redlock::Lock waiter(held.via_proxy, k, options);
  held.proxy.set_delay(1500ms);  // the first attempts and their undos arrive 1.5 s late
  std::atomic<bool> got{false};
  std::thread t([&] {
    got = waiter.try_lock_for(20s);
    if (!got) return;
    std::this_thread::sleep_for(2500ms);  // the delayed attempts and undos have now run
    redlock::Lock third(held.direct, k, fair_lock_options());
    CHECK_FALSE(third.try_lock());
    CHECK(waiter.owns_lock());
    CHECK(waiter.release());
  });
  std::this_thread::sleep_for(500ms);
  held.proxy.set_delay(0ms);
  REQUIRE(wait_for_queue(held.server, k, 1));  // an attempt on a fresh connection queued the waiter
  held.holder.unlock();                        // hands the lock over to it
  t.join();
  CHECK(got.load());
}
