// Fair mode when nobody contends (issue 42): an uncontended Lock cycle costs the server one
// command more than the default mode's (the release's check of the queue), and a queue that forms
// during such a cycle's hold is still handed over in order. Counted on the server (INFO
// commandstats).
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/fair_queue.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::fair_lock_options;
using redlock::test::key;
using redlock::test::queue_length;
using redlock::test::RedisServer;
using redlock::test::wait_for_queue;
using Clock = std::chrono::steady_clock;

namespace {

// Calls per command since the last CONFIG RESETSTAT, without the test's own INFO and CONFIG.
std::map<std::string, long long> calls(const RedisServer& server) {
  const std::string info = server.raw({"INFO", "commandstats"}).str();
  std::map<std::string, long long> out;
  const std::string tag = "cmdstat_";
  for (auto at = info.find(tag); at != std::string::npos; at = info.find(tag, at + 1)) {
    const auto colon = info.find(":calls=", at);
    const std::string name = info.substr(at + tag.size(), colon - at - tag.size());
    if (name == "info" || name.rfind("config", 0) == 0) continue;  // "config|resetstat" too
    out[name] = std::stoll(info.substr(colon + 7));
  }
  return out;
}

long long total(const std::map<std::string, long long>& counts) {
  long long sum = 0;
  for (const auto& c : counts) sum += c.second;
  return sum;
}

std::string describe(const std::map<std::string, long long>& counts) {
  std::string out;
  for (const auto& c : counts) out += c.first + "=" + std::to_string(c.second) + " ";
  return out;
}

}  // namespace

TEST_CASE("An uncontended fair Lock cycle costs the server 6 commands, the default mode's 5 + 1",
          "[redis][fair]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  redlock::Lock lock(client, key("uncontended-cost"));  // the default: fair on one server
  for (int i = 0; i < 3; ++i) {                         // connections, the script cache
    lock.lock();
    lock.unlock();
  }
  server.raw({"CONFIG", "RESETSTAT"});
  constexpr int kCycles = 20;
  for (int i = 0; i < kCycles; ++i) {
    lock.lock();
    lock.unlock();
  }
  auto counts = calls(server);
  INFO("calls in " << kCycles << " cycles: " << describe(counts));
  // SET NX PX (no EXISTS on the queue once a cycle saw nobody), then EVALSHA of the fair release
  // (GET, EXISTS on the queue, DEL, PUBLISH). The default mode's cycle is the same but the EXISTS.
  CHECK(total(counts) == 6 * kCycles);
  CHECK(counts["set"] == kCycles);
  CHECK(counts["exists"] == kCycles);
}

TEST_CASE("A queue that forms during an uncontended fair hold is handed over in order",
          "[redis][fair]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const std::string k = key("uncontended-then-queue");
  redlock::Lock holder(client, k);
  for (int i = 0; i < 3; ++i) {  // a cycle with nobody listening: the cheap one from now on
    holder.lock();
    holder.unlock();
  }
  holder.lock();
  // Two waiters of their own Clients, 10 s between polls: only the queue serves them in time.
  std::vector<std::unique_ptr<redlock::Client>> clients;
  std::vector<std::unique_ptr<redlock::Lock>> locks;
  std::vector<std::future<Clock::time_point>> served;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(std::make_unique<redlock::Client>(server.endpoint()));
    locks.push_back(std::make_unique<redlock::Lock>(*clients.back(), k, fair_lock_options()));
    redlock::Lock& lock = *locks.back();
    served.push_back(std::async(std::launch::async, [&lock] {
      if (!lock.try_lock_for(20s)) return Clock::time_point{};
      const auto at = Clock::now();
      std::this_thread::sleep_for(20ms);
      lock.unlock();
      return at;
    }));
    REQUIRE(wait_for_queue(server, k, i + 1));
  }
  const auto released = Clock::now();
  holder.unlock();
  const auto first = served[0].get();
  const auto second = served[1].get();
  REQUIRE(first != Clock::time_point{});
  REQUIRE(second != Clock::time_point{});
  CHECK(first < second);
  CHECK(second - released < 5s);  // far from the 10 s poll
  CHECK(queue_length(server, k) == 0);
  // Contended once: the holder's next cycles check the queue again until one sees nobody.
  REQUIRE(holder.try_lock());
  holder.unlock();
}
