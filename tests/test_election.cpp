// Election on Redis ([election]): campaign, resign hands over at once and the term grows,
// leader() from a process that never campaigns, observe() hears every change, a killed leader's
// successor, and run() stopping its worker when leadership is lost. Real servers, real
// processes.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "election_worker.hpp"
#include "support/eventually.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the election's lock key

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::with_ttl;
using Clock = std::chrono::steady_clock;

namespace {

// The leader key of election `name` (what a raw client takes over in the nemesis tests).
std::string leader_key(const std::string& name) {
  return redlock::detail::helper_key(name, ":leader");
}

// Forks a candidate that campaigns, writes its term to `fd` and then leads until killed.
pid_t fork_leader(const RedisServer& server, const std::string& name, int fd,
                  std::chrono::milliseconds ttl) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  int rc = 1;
  try {
    redlock::Client client(server.endpoint());
    redlock::Election election(client, name, "child", with_ttl(ttl));
    const std::uint64_t term = election.campaign();
    rc = write(fd, &term, sizeof term) == sizeof term ? 0 : 2;
    for (;;) std::this_thread::sleep_for(1s);
  } catch (...) {
  }
  _exit(rc);
}

// What observe() reported, in order.
struct Seen {
  std::mutex mutex;
  std::vector<std::optional<redlock::Leader>> changes;
  void add(const std::optional<redlock::Leader>& leader) {
    std::lock_guard<std::mutex> guard(mutex);
    changes.push_back(leader);
  }
  std::optional<redlock::Leader> last() {
    std::lock_guard<std::mutex> guard(mutex);
    return changes.empty() ? std::nullopt : changes.back();
  }
  std::vector<std::optional<redlock::Leader>> all() {
    std::lock_guard<std::mutex> guard(mutex);
    return changes;
  }
};

}  // namespace

TEST_CASE("Election: one of two candidates leads, resign hands over at once, the term grows",
          "[election]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const std::string name = key("election-handover");
  redlock::Election a(client, name, "a", with_ttl(60s));
  redlock::Election b(redlock::Client(server.endpoint()), name, "b", with_ttl(60s));

  const std::uint64_t first = a.campaign();
  CHECK(first > 0);
  CHECK(a.is_leader());
  CHECK(a.term() == first);
  CHECK(a.campaign() == first);  // already leading: at once
  CHECK_FALSE(b.try_campaign_for(100ms));
  CHECK_FALSE(b.is_leader());
  CHECK(b.term() == 0);

  std::optional<std::uint64_t> second;
  std::thread waiting([&] { second = b.try_campaign_for(30s); });
  std::this_thread::sleep_for(100ms);  // b waits on the lock's release channel
  const auto resigned = Clock::now();
  CHECK(a.resign());
  waiting.join();
  // Well inside the 60 s ttl: the release woke b, nothing expired.
  CHECK(Clock::now() - resigned < 5s);
  REQUIRE(second);
  CHECK(*second > first);
  CHECK(b.is_leader());
  // The thread that campaigned has exited: leadership is not the thread's.
  REQUIRE(a.leader());
  CHECK(a.leader()->id == "b");
  CHECK(a.leader()->term == *second);
  CHECK_FALSE(a.is_leader());
  CHECK(a.term() == 0);
  CHECK_FALSE(a.resign());  // not leading: nothing to do
}

TEST_CASE("Election: concurrent campaigns on one Election all return its term", "[election]") {
  RedisServer server;
  redlock::Election election(redlock::Client(server.endpoint()), key("election-threads"), "e",
                             with_ttl(60s));
  std::vector<std::uint64_t> terms(4);
  std::vector<std::thread> threads;
  for (auto& term : terms) {
    threads.emplace_back([&term, &election] { term = election.try_campaign_for(5s).value_or(0); });
  }
  for (auto& thread : threads) thread.join();
  CHECK(terms[0] > 0);
  for (const std::uint64_t term : terms) CHECK(term == terms[0]);
}

TEST_CASE("Election: leader() from a process that never campaigns, none once resigned",
          "[election]") {
  RedisServer server;
  const std::string name = key("election-leader");
  redlock::Election watcher(redlock::Client(server.endpoint()), name, "watcher");
  CHECK_FALSE(watcher.leader());

  redlock::Election candidate(redlock::Client(server.endpoint()), name, "pod-7", with_ttl(60s));
  const std::uint64_t term = candidate.campaign();
  const std::optional<redlock::Leader> seen = watcher.leader();
  REQUIRE(seen);
  CHECK(seen->id == "pod-7");
  CHECK(seen->term == term);

  // A grant that is not claimed (a raw holder of the key) is no leader.
  candidate.resign();
  CHECK_FALSE(watcher.leader());
  CHECK(server.raw({"SET", leader_key(name), "someone", "PX", "60000"}).str() == "OK");
  CHECK_FALSE(watcher.leader());
}

TEST_CASE("Election: leader() never reports an expired leader", "[election]") {
  RedisServer server;
  const std::string name = key("election-expired");
  redlock::Election watcher(redlock::Client(server.endpoint()), name, "watcher");
  redlock::Election candidate(redlock::Client(server.endpoint()), name, "c", with_ttl(60s));
  candidate.campaign();
  REQUIRE(watcher.leader());
  // The lease expires on the server (as if the leader were paused past its ttl).
  server.raw({"PEXPIRE", leader_key(name), "1"});
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(watcher.leader());
}

// leader() reads the lock key and the leader record together and names the record only while
// the key holds the recorded token: a grant whose claim is not yet written, or a record left by
// an earlier leader, names nobody. A torn read (the key of one leader, the record of another)
// would name the old leader here.
TEST_CASE("Election: leader() names nobody while the lock key holds an unrecorded token",
          "[election]") {
  RedisServer server;
  const std::string name = key("election-unclaimed");
  redlock::Election watcher(redlock::Client(server.endpoint()), name, "watcher");
  redlock::Election candidate(redlock::Client(server.endpoint()), name, "c", with_ttl(60s));
  const std::uint64_t term = candidate.campaign();
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->term == term);
  // Another grant, not yet claimed: the key holds a token the record does not name.
  server.raw({"SET", leader_key(name), "00ff00ff", "PX", "60000"});
  CHECK_FALSE(watcher.leader());
  // A record that is not "<term> <token> <id>" names nobody either, and does not throw.
  server.raw({"SET", redlock::detail::helper_key(leader_key(name), ":id"), "garbage"});
  CHECK_FALSE(watcher.leader());
  server.raw({"SET", redlock::detail::helper_key(leader_key(name), ":id"),
              std::to_string(term) + " 00ff00ff other"});
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->id == "other");
  CHECK(watcher.leader()->term == term);
}

// leader() reads with MGET, which docs/operations.md's minimal ACL did not list before: a user
// without it is refused once (NOPERM) and leader() reads with the script from then on.
TEST_CASE("Election: leader() as the minimal ACL user without +mget", "[election][acl]") {
  RedisServer server;
  std::vector<std::string> rules = {"ACL", "SETUSER", "leader-reader", "reset"};
  for (const std::string& rule : redlock::test::minimal_acl_rules()) {
    rules.push_back(rule.front() == '>' ? ">pw" : rule);
  }
  server.raw(rules);
  redlock::Endpoint restricted = server.endpoint();
  restricted.username = "leader-reader";
  restricted.password = "pw";
  const std::string name = key("election-acl");
  redlock::Election candidate(redlock::Client(server.endpoint()), name, "c", with_ttl(60s));
  const std::uint64_t term = candidate.campaign();
  redlock::Election watcher(redlock::Client(restricted), name, "watcher");
  for (int i = 0; i < 3; ++i) {
    const std::optional<redlock::Leader> seen = watcher.leader();
    REQUIRE(seen);
    CHECK(seen->id == "c");
    CHECK(seen->term == term);
  }
  CHECK(server.raw({"ACL", "DRYRUN", "leader-reader", "MGET", name, name}).str() != "OK");
}

TEST_CASE("Election: observe() hears elected, resigned and changed leaders", "[election]") {
  RedisServer server;
  const std::string name = key("election-observe");
  Seen seen;  // outlives the watcher, whose thread calls it until destroyed
  redlock::Election watcher(redlock::Client(server.endpoint()), name, "watcher", with_ttl(60s));
  watcher.observe([&](const std::optional<redlock::Leader>& leader) { seen.add(leader); });
  REQUIRE(eventually([&] { return seen.all().size() == 1; }));
  CHECK_FALSE(seen.last());  // no leader at first

  redlock::Election a(redlock::Client(server.endpoint()), name, "a", with_ttl(60s));
  redlock::Election b(redlock::Client(server.endpoint()), name, "b", with_ttl(60s));
  const std::uint64_t ta = a.campaign();
  CHECK(eventually([&] { return seen.last() && seen.last()->id == "a"; }));
  a.resign();
  CHECK(eventually([&] { return !seen.last(); }));
  const std::uint64_t tb = b.campaign();
  CHECK(eventually([&] { return seen.last() && seen.last()->id == "b"; }));
  CHECK(tb > ta);
  const auto changes = seen.all();
  REQUIRE(changes.size() == 4);  // none, a, none, b: each change once, no repeats
  CHECK(changes[1]->term == ta);
  CHECK(changes[3]->term == tb);
}

TEST_CASE("Election: a leader killed with -9 is replaced within its ttl, with a higher term",
          "[election]") {
  RedisServer server;
  const std::string name = key("election-kill");
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork_leader(server, name, fds[1], 1000ms);
  std::uint64_t child_term = 0;
  REQUIRE(read(fds[0], &child_term, sizeof child_term) == sizeof child_term);
  close(fds[0]);
  close(fds[1]);

  redlock::Election next(redlock::Client(server.endpoint()), name, "next", with_ttl(1000ms));
  REQUIRE(next.leader());
  CHECK(next.leader()->id == "child");
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  const auto killed = Clock::now();
  const std::optional<std::uint64_t> term = next.try_campaign_for(10s);
  REQUIRE(term);
  CHECK(*term > child_term);
  // At most the ttl (the lease expires), plus a generous bound for a busy machine.
  CHECK(Clock::now() - killed < 1000ms + 3s);
}

TEST_CASE("Election: run() stops the worker when leadership is lost and campaigns again",
          "[election]") {
  RedisServer server;
  const std::string name = key("election-run");
  redlock::Election election(redlock::Client(server.endpoint()), name, "runner", with_ttl(900ms));
  redlock::test::RecordingWorker worker(election);
  REQUIRE(eventually([&] { return worker.started() == 1; }));
  CHECK(election.is_leader());

  // A raw client takes the key over: the next renewal is refused, the worker is stopped.
  server.raw({"SET", leader_key(name), "intruder", "PX", "1500"});
  CHECK(eventually([&] { return worker.stopped() == 1; }));
  CHECK_FALSE(election.is_leader());
  // The intruder's key expires; run() campaigns again and leads with a higher term.
  REQUIRE(eventually([&] { return worker.started() == 2; }));
  CHECK(worker.terms()[1] > worker.terms()[0]);
  worker.stop_and_join();
  CHECK(worker.stopped() == 2);
  CHECK_FALSE(election.is_leader());
  CHECK_FALSE(election.leader());  // stop() resigned
}

TEST_CASE("Election: run() stops the worker when the server is paused past validity",
          "[election][slow]") {
  RedisServer server;
  const std::string name = key("election-pause");
  redlock::Election election(redlock::Client(server.endpoint()), name, "runner", with_ttl(600ms));
  std::atomic<int> started{0};
  std::atomic<int> stopped{0};
  std::atomic<Clock::rep> stopped_at{0};
  std::thread service([&] {
    election.run([&](redlock::StopToken stop, std::uint64_t) {
      ++started;
      while (!stop.wait_for(1s)) {
      }
      stopped_at = Clock::now().time_since_epoch().count();
      ++stopped;
    });
  });
  REQUIRE(eventually([&] { return started == 1; }));
  const auto paused = Clock::now();
  server.pause();
  CHECK(eventually([&] { return stopped == 1; }, 5s));
  // Stopped by the local validity, before the server could let another candidate in.
  CHECK(Clock::time_point(Clock::duration(stopped_at.load())) - paused < 600ms + 2s);
  server.resume();
  CHECK(eventually([&] { return started == 2; }, 10s));
  election.stop();
  service.join();
}

TEST_CASE("Election over a quorum: a majority decides, a paused node changes nothing",
          "[election][redlock]") {
  redlock::test::ServerGroup group(3);
  const auto clients = [&] {
    std::vector<redlock::Client> out;
    for (const auto& endpoint : group.endpoints()) out.emplace_back(endpoint);
    return out;
  };
  const std::string name = key("election-quorum");
  redlock::Election a(clients(), name, "a", with_ttl(60s));
  redlock::Election b(clients(), name, "b", with_ttl(60s));
  redlock::Election watcher(clients(), name, "watcher");
  const std::uint64_t first = a.campaign();
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->id == "a");
  CHECK(watcher.leader()->term == first);

  group[2].pause();  // two of three still answer: the same leader, and a hand-over
  CHECK(watcher.leader()->id == "a");
  std::optional<std::uint64_t> second;
  std::thread waiting([&] { second = b.try_campaign_for(30s); });
  std::this_thread::sleep_for(200ms);
  CHECK(a.resign());
  waiting.join();
  REQUIRE(second);
  CHECK(*second > first);
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->id == "b");
  group[1].pause();  // one of three: nobody can tell
  CHECK_THROWS_AS(watcher.leader(), redlock::QuorumUnavailableError);
  group[1].resume();
  group[2].resume();
}

TEST_CASE("Election: bad arguments are named", "[election]") {
  redlock::Client client(redlock::Endpoint::parse("redis://127.0.0.1:1"));
  CHECK_THROWS_AS(redlock::Election(client, "", "id"), std::invalid_argument);
  CHECK_THROWS_AS(redlock::Election(client, "name", ""), std::invalid_argument);
  CHECK_THROWS_AS(redlock::Election(std::vector<redlock::Client>{}, "name", "id"),
                  std::invalid_argument);
  redlock::ElectionOptions zero;
  zero.ttl = 0ms;
  CHECK_THROWS_AS(redlock::Election(client, "name", "id", zero), std::invalid_argument);
  // The lease's key is {name}:leader, 9 bytes more than the name, and at most 4 MiB.
  const std::size_t longest = 4 * 1024 * 1024 - 9;
  CHECK_NOTHROW(redlock::Election(client, std::string(longest, 'n'), "id"));
  CHECK_THROWS_MATCHES(
      redlock::Election(client, std::string(longest + 5, 'n'), "id"), std::invalid_argument,
      Catch::Matchers::Message("redlock: Election: name is 4194300 bytes; the maximum is 4194295 "
                               "bytes (4 MiB less the 9 of the lease's key, {name}:leader)"));
}

// [unprefixed]: its key, {{rltest:...}}:leader, is outside the minimal ACL user's key patterns.
TEST_CASE("Election: names x and {x} are two elections", "[election][unprefixed]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const std::string x = key("election-braces");
  redlock::Election plain(client, x, "plain", with_ttl(60s));
  redlock::Election braced(client, "{" + x + "}", "braced", with_ttl(60s));
  REQUIRE(plain.try_campaign_for(2s));
  CHECK(braced.try_campaign_for(2s));  // nobody leads this other election yet
  REQUIRE(plain.leader());
  CHECK(plain.leader()->id == "plain");
  REQUIRE(braced.leader());
  CHECK(braced.leader()->id == "braced");
}
