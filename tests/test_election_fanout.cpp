// Election over a quorum of Redis instances ([election][redlock]): the claim and leader() go to
// every node at once, as a Redlock attempt does, and finish at the quorum (issue 42). Each node
// sits behind a FaultProxy: one that black-holes the request naming the claim (or the leader
// record) shows whether every node had it before any answered; one that delays a node shows that
// a slow minority is cut by the grace.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "election_worker.hpp"  // with_ttl
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::FaultProxy;
using redlock::test::key;
using redlock::test::ServerGroup;
using redlock::test::with_ttl;
using Clock = std::chrono::steady_clock;

namespace {

// Every node of `group` behind a proxy of its own; a request not answered waits 5 s.
struct Proxied {
  std::vector<std::unique_ptr<FaultProxy>> proxies;
  std::vector<redlock::Client> clients;

  explicit Proxied(const ServerGroup& group) {
    // Plain text, even in the TLS re-run (REDLOCK_TEST_TLS): the proxies match request bytes.
    for (std::size_t i = 0; i < group.size(); ++i) {
      redlock::Endpoint endpoint = group[i].plain_endpoint();
      proxies.push_back(std::make_unique<FaultProxy>("127.0.0.1", endpoint.port));
      endpoint.port = proxies.back()->port();
      endpoint.command_timeout = 5s;
      clients.emplace_back(endpoint);
    }
  }
  // Black-holes each node from the first request that contains `pattern` (not forwarded).
  void hold_on(const std::string& pattern) {
    for (auto& proxy : proxies) proxy->set_blackhole_on(pattern);
  }
  // Waits (at most 3 s) until every proxy has had such a request, then heals and resets every
  // connection. Returns how many had it: all of them only if the request was on the wire to
  // every node at once (none of them answers while held).
  std::size_t reached_then_heal() {
    eventually([&] { return reached() == proxies.size(); }, 3s);
    const std::size_t count = reached();
    for (auto& proxy : proxies) {
      proxy->clear();
      proxy->reset_all();
    }
    return count;
  }
  std::size_t reached() const {
    std::size_t count = 0;
    for (const auto& proxy : proxies) count += proxy->blackholed() ? 1 : 0;
    return count;
  }
};

}  // namespace

TEST_CASE("Election over a quorum: the claim is on the wire to every node at once",
          "[election][redlock][fault]") {
  ServerGroup group(3);
  Proxied nodes(group);
  const std::string id = "claimant-of-" + key("claim");  // only the claim's record carries it
  redlock::Election election(nodes.clients, key("election-claim-fanout"), id, with_ttl(60s));
  nodes.hold_on(id);
  std::thread campaign([&] {
    try {
      election.try_campaign_for(20s);
    } catch (const redlock::Error&) {  // every node reset while held: the claim fails
    }
  });
  const std::size_t reached = nodes.reached_then_heal();
  campaign.join();
  CHECK(reached == 3);
}

TEST_CASE("Election over a quorum: leader() is on the wire to every node at once",
          "[election][redlock][fault]") {
  ServerGroup group(3);
  const auto endpoints = group.endpoints();
  const std::vector<redlock::Client> direct(endpoints.begin(), endpoints.end());
  const std::string name = key("election-read-fanout");
  redlock::Election leader(direct, name, "a", with_ttl(60s));
  leader.campaign();
  Proxied nodes(group);
  redlock::Election watcher(nodes.clients, name, "watcher");
  REQUIRE(watcher.leader());    // connections open while every node is healthy
  nodes.hold_on(":leader:id");  // the leader record, which only the claim and the read name
  std::thread read([&] {
    try {
      watcher.leader();
    } catch (const redlock::Error&) {
    }
  });
  const std::size_t reached = nodes.reached_then_heal();
  read.join();
  CHECK(reached == 3);
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->id == "a");
}

TEST_CASE("Election over a quorum: a slow node, whichever it is, slows no claim or read",
          "[election][redlock][fault]") {
  ServerGroup group(3);
  for (std::size_t slow = 0; slow < group.size(); ++slow) {
    auto endpoints = group.endpoints();
    FaultProxy proxy("127.0.0.1", endpoints[slow].port);
    endpoints[slow].port = proxy.port();
    const std::vector<redlock::Client> clients(endpoints.begin(), endpoints.end());
    redlock::Election election(clients, key("election-slow-" + std::to_string(slow)), "e",
                               with_ttl(60s));
    REQUIRE(election.try_campaign_for(5s));  // connections open while every node is healthy
    election.resign();
    // 50 ms each way: a campaign or read that waits for this node takes at least 100 ms. The
    // two others answer in well under that on loopback, and the grace after them is 3x their
    // time.
    proxy.set_delay(50ms);
    int quick_claims = 0;
    int quick_reads = 0;
    int led = 0;
    for (int i = 0; i < 7; ++i) {
      auto start = Clock::now();
      const auto term = election.try_campaign_for(5s);
      quick_claims += Clock::now() - start < 100ms ? 1 : 0;
      if (!term) continue;
      ++led;
      start = Clock::now();
      const auto seen = election.leader();
      quick_reads += Clock::now() - start < 100ms ? 1 : 0;
      CHECK((seen && seen->term == *term));
      election.resign();
    }
    INFO("slow node " << slow << ": " << quick_claims << " campaigns and " << quick_reads
                      << " reads of 7 under 100 ms");
    CHECK(led == 7);
    CHECK(quick_claims >= 4);
    CHECK(quick_reads >= 4);
    proxy.clear();
  }
}

// During a hand-over the nodes can name different leaders. Two quick nodes name two leaders and
// the slow third agrees with the first: a read settled as soon as a quorum named *any* leader
// cuts the third by the grace and finds no majority. The read may finish early only when a
// quorum names the same leader, or none can.
TEST_CASE("Election over a quorum: leader() waits for a majority that names the same leader",
          "[election][redlock][fault]") {
  ServerGroup group(3);
  const auto endpoints = group.endpoints();
  const std::vector<redlock::Client> direct(endpoints.begin(), endpoints.end());
  const std::string name = key("election-disagree");
  redlock::Election leader(direct, name, "a", with_ttl(60s));
  REQUIRE(leader.campaign());
  // The leader record (fence, token, id) and the lock key that holds the token, found on node 0.
  const redlock::Reply keys = group[0].raw({"KEYS", "*" + name + "*"});  // kept: elements() below
  std::string record_key;
  for (const auto& k : keys.elements()) {
    if (k.str().size() > 3 && k.str().compare(k.str().size() - 3, 3, ":id") == 0) {
      record_key = k.str();
    }
  }
  REQUIRE(!record_key.empty());
  const std::string record = group[0].raw({"GET", record_key}).str();
  const std::string token =
      record.substr(record.find(' ') + 1, record.rfind(' ') - record.find(' ') - 1);
  std::string lock_key;
  for (const auto& k : keys.elements()) {
    if (group[0].raw({"TYPE", k.str()}).str() == "string" &&
        group[0].raw({"GET", k.str()}).str() == token) {
      lock_key = k.str();
    }
  }
  REQUIRE(!lock_key.empty());
  // Node 1 names another leader, "b", with a later term.
  group[1].raw({"SET", lock_key, "token-of-b", "PX", "60000"});
  group[1].raw({"SET", record_key, "999999 token-of-b b"});
  // Node 2 (which names "a", as node 0 does) answers 50 ms late each way.
  auto slow = endpoints;
  FaultProxy proxy("127.0.0.1", slow[2].port);
  slow[2].port = proxy.port();
  const std::vector<redlock::Client> clients(slow.begin(), slow.end());
  redlock::Election watcher(clients, name, "watcher");
  REQUIRE(watcher.leader());  // connections open while every node is quick
  proxy.set_delay(50ms);
  int named_a = 0;
  for (int i = 0; i < 5; ++i) {
    const auto seen = watcher.leader();
    named_a += seen && seen->id == "a" ? 1 : 0;
  }
  proxy.clear();
  CHECK(named_a == 5);
}
