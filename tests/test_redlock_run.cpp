// redlock-run, the command-line tool (tools/redlock-run/, from main.cpp), run as a process
// against real servers: exit statuses, the lock held while the command runs, contention, a lost
// lease (key deleted, server paused), signal forwarding, usage errors, no password in messages.
//
// The helpers (Tool, TempDir, run...) are in redlock_run_tool.hpp, shared with
// test_redlock_run_flags.cpp.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <redlock/election.hpp>  // --leader
#include <redlock/semaphore.hpp>
#include <redlock/version.hpp>  // REDLOCK_VERSION_STRING, REDLOCK_KEY_LAYOUT

#include "redlock_run_tool.hpp"  // Tool, TempDir and the shared helpers
#include "support/eventually.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_set.hpp"
#ifdef REDLOCK_TESTS_WITH_POSTGRES
#include <redlock/postgres.hpp>

#include "support/postgres_server.hpp"
#endif
#include "util/key_slot.hpp"  // helper_key: the names of a lock's helper keys

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::eventually;
using redlock::test::key;
using redlock::test::ServerGroup;
using namespace redlock_run_test;

TEST_CASE("redlock-run --help lists every option, the exit statuses and an example",
          "[redis][cli]") {
  Tool tool({"--help"});
  REQUIRE(tool.wait() == 0);
  const std::string help = tool.out();
  for (const char* option : {"--redis", "--key", "--ttl", "--wait", "--no-wait", "--grace",
                             "--fencing", "--fair", "--quiet", "--version", "command"}) {
    CHECK_THAT(help, Catch::Contains(option));
  }
  for (const char* status : {" 64 ", " 69 ", " 70 ", " 75 ", " 127 ", "128+N"}) {
    CHECK_THAT(help, Catch::Contains(status));
  }
  CHECK_THAT(help, Catch::Contains("REDLOCK_KEY"));
  CHECK_THAT(help, Catch::Contains("REDLOCK_FENCE"));
  CHECK_THAT(help, Catch::Contains("Example"));
  CHECK(tool.err().empty());
}

TEST_CASE("redlock-run exits with the command's status and releases the lock", "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-status");
  const std::vector<std::string> base = {"--redis", uri(server), "--key", k, "--"};
  std::string err;
  CHECK(run(base + std::vector<std::string>{"sh", "-c", "exit 7"}, &err) == 7);
  CHECK(err.empty());
  CHECK_FALSE(held(server, k));
  CHECK(run(base + std::vector<std::string>{"true"}) == 0);
  // Killed by a signal: 128 + N, like a shell.
  CHECK(run(base + std::vector<std::string>{"sh", "-c", "kill -KILL $$"}) == 128 + SIGKILL);
  CHECK_FALSE(held(server, k));
  // Without "--", our options end at the first word that is not one of them.
  CHECK(run({"--redis", uri(server), "--key", k, "sh", "-c", "exit 3", "--key"}) == 3);
}

TEST_CASE(
    "redlock-run holds the key while the command runs, and exports REDLOCK_KEY and "
    "REDLOCK_FENCE",
    "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-held");
  for (int round = 1; round <= 2; ++round) {
    const std::string env_file = dir / ("env" + std::to_string(round));
    Tool tool({"--redis", uri(server), "--key", k, "--ttl", "10s", "--fencing", "--", "sh", "-c",
               "echo \"$REDLOCK_KEY $REDLOCK_FENCE\" > " + env_file + "; sleep 0.5"});
    REQUIRE(command_started(tool, env_file));
    CHECK(held(server, k));
    CHECK(server.raw({"GET", k}).str().size() == 40);  // the library's token
    const auto pttl = server.raw({"PTTL", k}).integer();
    CHECK(pttl > 0);
    CHECK(pttl <= 10'000);
    CHECK(tool.wait() == 0);
    CHECK(slurp(env_file) == k + " " + std::to_string(round) + "\n");
    CHECK_FALSE(held(server, k));
  }
}

TEST_CASE("redlock-run does not leak its Redis connections into the command", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const std::string fds = dir / "fds";
  CHECK(run({"--redis", uri(server), "--key", key("run-fds"), "--", "sh", "-c",
             "ls -l /proc/$$/fd > " + fds}) == 0);
  const std::string listing = slurp(fds);
  CHECK_FALSE(listing.empty());
  CHECK_THAT(listing, !Catch::Contains("socket:"));
}

TEST_CASE("redlock-run --redis rediss://... holds the lock over verified TLS",
          "[redis][cli][tls]") {
  redlock::test::ServerOptions options;
  options.tls.enabled = true;
  RedisServer server(options);
  TempDir dir;
  const auto k = key("run-tls");
  const std::string tls_uri = server.endpoint().to_string();  // rediss://...?cacert=...
  REQUIRE(tls_uri.rfind("rediss://", 0) == 0);
  const std::string started = dir / "started";
  Tool tool({"--redis", tls_uri, "--key", k, "--", "sh", "-c", "touch " + started + "; sleep 0.3"});
  REQUIRE(command_started(tool, started));
  CHECK(held(server, k));
  CHECK(tool.wait() == 0);
  CHECK_FALSE(held(server, k));
  // Verification is on: a URI without the CA fails (the system store does not know it).
  std::string err;
  const std::string no_ca =
      "rediss://127.0.0.1:" + std::to_string(server.tls_port()) + "?connect_timeout=2000";
  CHECK(run({"--redis", no_ca, "--no-wait", "--key", k, "--", "true"}, &err) != 0);
  CHECK_THAT(err, Catch::Contains("unknown CA"));
}

TEST_CASE("redlock-run with several --redis servers holds the key on all of them (Redlock)",
          "[redis][cli]") {
  ServerGroup group(3);
  TempDir dir;
  const auto k = key("run-quorum");
  std::vector<std::string> args;
  for (std::size_t i = 0; i < group.size(); ++i) {
    args.emplace_back("--redis");
    args.push_back(uri(group[i]));
  }
  const std::string started = dir / "started";
  Tool tool(args + std::vector<std::string>{"--key", k, "--", "sh", "-c",
                                            "touch " + started + "; sleep 0.5"});
  REQUIRE(command_started(tool, started));
  for (std::size_t i = 0; i < group.size(); ++i) CHECK(held(group[i], k));
  CHECK(tool.wait() == 0);
  for (std::size_t i = 0; i < group.size(); ++i) CHECK_FALSE(held(group[i], k));
}

TEST_CASE("redlock-run --no-wait exits 75 at once while another holder has the lock",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-busy");
  REQUIRE(server.raw({"SET", k, "someone-else", "PX", "10000"}).str() == "OK");
  const std::string ran = dir / "ran";
  Tool tool({"--redis", uri(server), "--key", k, "--no-wait", "--", "touch", ran});
  CHECK(tool.wait() == 75);
  CHECK(tool.elapsed() < 2s);
  const std::string err = tool.err();
  CHECK_THAT(err, Catch::Contains(k));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);  // one line
  CHECK_FALSE(exists(ran));
  CHECK(server.raw({"GET", k}).str() == "someone-else");  // untouched
  // --quiet: the status alone says it.
  std::string quiet_err;
  CHECK(run({"--redis", uri(server), "--key", k, "--no-wait", "--quiet", "--", "touch", ran},
            &quiet_err) == 75);
  CHECK(quiet_err.empty());
  CHECK_FALSE(exists(ran));
}

TEST_CASE("redlock-run --wait gives up with 75 after about that long", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-wait");
  REQUIRE(server.raw({"SET", k, "someone-else", "PX", "10000"}).str() == "OK");
  const std::string ran = dir / "ran";
  Tool tool({"--redis", uri(server), "--key", k, "--wait", "300ms", "--", "touch", ran});
  CHECK(tool.wait() == 75);
  CHECK(tool.elapsed() >= 290ms);
  CHECK(tool.elapsed() < 3s);
  CHECK_THAT(tool.err(), Catch::Contains("300ms"));
  CHECK_FALSE(exists(ran));
}

TEST_CASE("redlock-run waits for the holder, and two of them run one after the other",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-queue");
  SECTION("a lease that expires") {
    REQUIRE(server.raw({"SET", k, "someone-else", "PX", "400"}).str() == "OK");
    Tool tool({"--redis", uri(server), "--key", k, "--", "true"});
    CHECK(tool.wait() == 0);
    CHECK(tool.elapsed() >= 300ms);
  }
  SECTION("another redlock-run, by default and in fair mode") {
    for (const bool fair : {false, true}) {
      const std::string tag = fair ? "-fair" : "";
      const std::string a_started = dir / ("a-started" + tag);
      const std::string a_done = dir / ("a-done" + tag);
      const std::string b_ok = dir / ("b-ok" + tag);
      auto args = [&](std::vector<std::string> rest) {
        std::vector<std::string> all{"--redis", uri(server), "--key", k};
        if (fair) all.push_back("--fair");
        all.insert(all.end(), rest.begin(), rest.end());
        return all;
      };
      Tool a(args({"--", "sh", "-c", "touch " + a_started + "; sleep 0.4; touch " + a_done}));
      REQUIRE(command_started(a, a_started));
      // b may run only after a's command has finished.
      Tool b(args({"--wait", "5s", "--", "sh", "-c", "test -e " + a_done + " && touch " + b_ok}));
      CHECK(a.wait() == 0);
      CHECK(b.wait() == 0);
      CHECK(exists(b_ok));
      CHECK(server.raw({"EXISTS", helper_key(k, ":waiters"), helper_key(k, ":waiters:info")})
                .integer() == 0);
    }
  }
  CHECK_FALSE(held(server, k));
}

TEST_CASE("redlock-run: a lost lease (key deleted) sends SIGTERM to the command, exit 70",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-lost");
  Tool tool(std::vector<std::string>{"--redis", uri(server), "--key", k, "--ttl", "300ms", "--"} +
            looping_command(dir));
  REQUIRE(command_started(tool, dir / "started"));
  std::this_thread::sleep_for(350ms);  // a few renewals: the lease outlived its first ttl
  REQUIRE(held(server, k));
  server.raw({"DEL", k});
  CHECK(tool.wait(5s) == 70);
  CHECK(exists(dir / "term"));
  const std::string err = tool.err();
  CHECK_THAT(err, Catch::Contains("lease on " + k + " lost (refused); sending SIGTERM to "));
  CHECK_THAT(err, !Catch::Contains("SIGKILL"));
}

TEST_CASE("redlock-run: after a lost lease, SIGKILL follows SIGTERM after --grace",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-grace");
  const std::string started = dir / "started";
  Tool tool({"--redis", uri(server), "--key", k, "--ttl", "300ms", "--grace", "400ms", "--", "sh",
             "-c", "trap '' TERM; touch " + started + "; while :; do sleep 0.05; done"});
  REQUIRE(command_started(tool, started));
  server.raw({"DEL", k});
  const auto deleted = Clock::now();
  CHECK(tool.wait(5s) == 70);
  CHECK(Clock::now() - deleted >= 400ms);
  CHECK(Clock::now() - deleted < 4s);
  const std::string err = tool.err();
  CHECK_THAT(err, Catch::Contains("lost"));
  CHECK_THAT(err, Catch::Contains("SIGKILL"));
}

TEST_CASE("redlock-run: a paused server lets the lease expire, exit 70", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-paused");
  Tool tool(std::vector<std::string>{"--redis", uri(server), "--key", k, "--ttl", "300ms", "--"} +
            looping_command(dir));
  REQUIRE(command_started(tool, dir / "started"));
  server.pause();
  const int status = tool.wait(5s);
  server.resume();
  CHECK(status == 70);
  CHECK(exists(dir / "term"));
  CHECK_THAT(tool.err(), Catch::Contains("lease on " + k + " lost (expired)"));
}

TEST_CASE("redlock-run forwards SIGTERM to the command and still releases", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-forward");
  Tool tool(std::vector<std::string>{"--redis", uri(server), "--key", k, "--"} +
            looping_command(dir, 42));
  REQUIRE(command_started(tool, dir / "started"));
  REQUIRE(::kill(tool.pid(), SIGTERM) == 0);
  CHECK(tool.wait(5s) == 42);
  CHECK(exists(dir / "term"));
  CHECK_FALSE(held(server, k));
}

TEST_CASE("redlock-run stops waiting on SIGTERM: 128+15, the command never runs", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-interrupt");
  REQUIRE(server.raw({"SET", k, "someone-else", "PX", "10000"}).str() == "OK");
  const std::string ran = dir / "ran";
  Tool tool({"--redis", uri(server), "--key", k, "--", "touch", ran});
  std::this_thread::sleep_for(300ms);
  REQUIRE(tool.running());
  REQUIRE(::kill(tool.pid(), SIGTERM) == 0);
  CHECK(tool.wait(3s) == 128 + SIGTERM);
  CHECK_FALSE(exists(ran));
  CHECK(server.raw({"GET", k}).str() == "someone-else");
}

TEST_CASE("redlock-run --leader prints the leader's id and term, exit 1 when nobody leads",
          "[redis][cli][election]") {
  RedisServer server;
  const auto k = key("cli-leader");
  {
    Tool nobody({"--redis", uri(server), "--key", k, "--leader"});
    CHECK(nobody.wait() == 1);
    CHECK(nobody.out().empty());
    CHECK(nobody.err().find("nobody leads") != std::string::npos);
  }
  redlock::Election candidate(redlock::Client(server.endpoint()), k, "pod-7");
  const std::uint64_t term = candidate.campaign();
  Tool leader({"--redis", uri(server), "--key", k, "--leader"});
  CHECK(leader.wait() == 0);
  CHECK(leader.out() == "pod-7 " + std::to_string(term) + "\n");
  CHECK(run({"--redis", uri(server), "--key", k, "--leader", "--", "true"}) == 64);
}

// A standby's command: appends its REDLOCK_TERM to `terms` and marks `started`, then loops until
// SIGTERM, which marks `term` and exits 0.
std::vector<std::string> elected_command(const TempDir& dir) {
  return {"sh", "-c",
          "trap 'touch " + dir / "term" + "; exit 0' TERM; echo \"$REDLOCK_TERM\" >> " +
              dir / "terms" + "; touch " + dir / "started" + "; while :; do sleep 0.05; done"};
}

std::vector<std::uint64_t> terms_in(const std::string& path) {
  std::vector<std::uint64_t> terms;
  std::istringstream lines(slurp(path));
  for (std::string line; std::getline(lines, line);) terms.push_back(std::stoull(line));
  return terms;
}

TEST_CASE("redlock-run --elect: a standby leads again after a loss, the next takes over at once",
          "[redis][cli][election]") {
  RedisServer server;
  const auto k = key("cli-elect");
  TempDir a_dir, b_dir;
  const std::vector<std::string> common = {"--redis", uri(server), "--key", k, "--ttl", "1s"};
  Tool a(common + std::vector<std::string>{"--elect", "a", "--"} + elected_command(a_dir));
  REQUIRE(command_started(a, a_dir / "started"));

  // Another client takes the leader's key over: a stops its command as for a lost lease, and
  // leads again once the intruder's key expires, with a higher term.
  server.raw({"SET", redlock::detail::helper_key(k, ":leader"), "intruder", "PX", "1500"});
  CHECK(redlock::test::eventually([&] { return exists(a_dir / "term"); }, 10s));
  CHECK(redlock::test::eventually([&] { return terms_in(a_dir / "terms").size() == 2; }, 10s));
  const auto a_terms = terms_in(a_dir / "terms");
  REQUIRE(a_terms.size() == 2);
  CHECK(a_terms[1] > a_terms[0]);
  CHECK(a.running());

  Tool b(common + std::vector<std::string>{"--elect", "b", "--"} + elected_command(b_dir));
  std::this_thread::sleep_for(300ms);
  CHECK_FALSE(exists(b_dir / "started"));  // a standby while a leads
  // SIGTERM to a: forwarded to its command, which exits 0; a resigns and exits 0, and b leads
  // (woken by the release; the bound is for a busy machine).
  ::kill(a.pid(), SIGTERM);
  CHECK(a.wait() == 0);
  REQUIRE(command_started(b, b_dir / "started", 5s));
  const auto b_terms = terms_in(b_dir / "terms");
  REQUIRE(b_terms.size() == 1);
  CHECK(b_terms[0] > a_terms[1]);
  ::kill(b.pid(), SIGTERM);
  CHECK(b.wait() == 0);
  CHECK(run({"--redis", uri(server), "--key", k, "--elect", "c", "--no-wait", "--", "true"}) == 64);
}

TEST_CASE("redlock-run usage errors exit 64", "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-usage");
  const std::string r = uri(server);
  std::string err;
  SECTION("bad durations") {
    for (const char* bad : {"5x", "abc", "1.5.5s", "s", "-1s", "", "99999999999999h"}) {
      CHECK(run({"--redis", r, "--key", k, "--ttl", bad, "--", "true"}, &err) == 64);
      CHECK_THAT(err, Catch::Contains("--ttl"));
    }
    CHECK(run({"--redis", r, "--key", k, "--ttl", "0s", "--", "true"}, &err) == 64);
    CHECK(run({"--redis", r, "--key", k, "--wait", "soon", "--", "true"}, &err) == 64);
    CHECK_THAT(err, Catch::Contains("1m30s"));
    CHECK(run({"--redis", r, "--key", k, "--grace", "2 s", "--", "true"}, &err) == 64);
    // Accepted by the parser but too short for the lease (the library's check).
    CHECK(run({"--redis", r, "--key", k, "--ttl", "1ms", "--", "true"}, &err) == 64);
  }
  SECTION("missing or conflicting options") {
    CHECK(run({"--redis", r, "--", "true"}, &err) == 64);
    CHECK_THAT(err, Catch::Contains("--key"));
    CHECK(run({"--key", k, "--", "true"}, &err) == 64);
    CHECK_THAT(err, Catch::Contains("--redis"));
    CHECK(run({"--redis", r, "--key", k}, &err) == 64);
    CHECK(run({"--redis", r, "--key", k, "--wait", "1s", "--no-wait", "--", "true"}, &err) == 64);
    CHECK(run({"--redis", r, "--redis", r, "--key", k, "--", "true"}, &err) == 64);  // twice
    CHECK(run({"--redis", "http://127.0.0.1", "--key", k, "--", "true"}, &err) == 64);
    CHECK(run({"--redis", r, "--key", k, "--bogus", "--", "true"}, &err) == 64);
    // Fair mode needs one server: a queue on several could not agree on an order.
    CHECK(run({"--redis", r, "--redis", "redis://127.0.0.1:1", "--key", k, "--fair", "--", "true"},
              &err) == 64);
    CHECK_THAT(err, Catch::Contains("fair"));
  }
  CHECK_FALSE(held(server, k));
}

TEST_CASE("redlock-run exits 69 when Redis cannot be reached", "[redis][cli]") {
  std::string address;
  {
    RedisServer gone;
    address = "127.0.0.1:" + std::to_string(gone.port());
  }  // stopped: nothing listens there now
  TempDir dir;
  const std::string ran = dir / "ran";
  std::string err;
  const auto start = std::chrono::steady_clock::now();
  CHECK(run({"--redis", "redis://" + address, "--key", key("run-down"), "--unavailable-timeout",
             "1s", "--", "touch", ran},
            &err) == 69);
  // It rode out the outage for --unavailable-timeout, not for ever.
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(900));
  CHECK_THAT(err, Catch::Contains("--unavailable-timeout") || Catch::Contains(address));
  CHECK_THAT(err, Catch::Contains(address));
  CHECK_FALSE(exists(ran));
}

TEST_CASE("redlock-run exits 127 when the command cannot be executed, and releases",
          "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-noexec");
  for (const char* command : {"redlock-no-such-command-xyz", "/nonexistent/bin/tool"}) {
    std::string err;
    CHECK(run({"--redis", uri(server), "--key", k, "--", command}, &err) == 127);
    CHECK_THAT(err, Catch::Contains("cannot run"));
    CHECK_THAT(err, Catch::Contains(command));
    CHECK_FALSE(held(server, k));
  }
}

TEST_CASE("redlock-run never prints a password from a --redis URI", "[redis][cli]") {
  const std::string password = "s3cret-Pa55";
  redlock::test::ServerOptions options;
  options.extra_args = {"--requirepass", password};
  RedisServer server(options);
  TempDir dir;
  const auto k = key("run-secret");
  const std::string port = std::to_string(server.port());
  const std::string good = "redis://:" + password + "@127.0.0.1:" + port;
  std::vector<std::string> stderrs;
  auto collect = [&](std::vector<std::string> args, int expected) {
    Tool tool(std::move(args));
    CHECK(tool.wait() == expected);
    stderrs.push_back(tool.err());
  };

  collect({"--redis", good, "--key", k, "--", "true"}, 0);  // the password works
  // Wrong password: the server refuses AUTH.
  collect(
      {"--redis", "redis://:" + password + "-wrong@127.0.0.1:" + port, "--key", k, "--", "true"},
      69);
  // Nothing listens on port 1.
  collect({"--redis", "redis://:" + password + "@127.0.0.1:1", "--key", k, "--unavailable-timeout",
           "0.5s", "--", "true"},
          69);
  // Malformed URIs, an unknown option carrying one, the same server twice.
  collect({"--redis", "redis://:" + password + "@127.0.0.1:99999", "--key", k, "--", "true"}, 64);
  collect({"--redis", "redis://app:" + password + "@[::1", "--key", k, "--", "true"}, 64);
  collect({"--redis", good, "--bogus=" + good, "--key", k, "--", "true"}, 64);
  collect({"--redis", good, "--redis", good, "--key", k, "--", "true"}, 64);
  // Contention and a lost lease.
  REQUIRE(
      server.raw_pipeline({{"AUTH", password}, {"SET", k, "other", "PX", "10000"}}).at(1).str() ==
      "OK");
  collect({"--redis", good, "--key", k, "--no-wait", "--", "true"}, 75);
  REQUIRE(server.raw_pipeline({{"AUTH", password}, {"DEL", k}}).at(1).integer() == 1);
  {
    Tool tool(std::vector<std::string>{"--redis", good, "--key", k, "--ttl", "300ms", "--"} +
              looping_command(dir));
    REQUIRE(command_started(tool, dir / "started"));
    server.raw_pipeline({{"AUTH", password}, {"DEL", k}});
    CHECK(tool.wait(5s) == 70);
    stderrs.push_back(tool.err());
  }

  REQUIRE(stderrs.size() == 9);
  // The password works; it was given inline, which shows in ps: one warning, no password.
  CHECK_THAT(stderrs[0], Catch::Contains("REDLOCK_REDIS"));
  for (std::size_t i = 0; i < stderrs.size(); ++i) {
    INFO("stderr #" << i << ": " << stderrs[i]);
    CHECK_FALSE(stderrs[i].empty());
    CHECK_THAT(stderrs[i], !Catch::Contains(password));
  }
}

// ---- issue 20 --------------------------------------------------------------------------------

namespace {

// PIDs of live processes whose command line starts with `marker` (scans /proc/*/cmdline; a
// zombie's command line is empty, so a dead but unreaped process does not count).
std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = slurp(entry.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.rfind(marker, 0) == 0) found.push_back(std::stoi(name));
  }
  return found;
}

// A sleep that no other test or process runs: "sleep 100.<pid><n>" (sleep takes fractions).
std::string unique_sleep() {
  static int counter = 0;
  return "100." + std::to_string(::getpid()) + std::to_string(++counter);
}

// `sh -c 'sleep MARKER & touch started; wait'`: dash does not exec, so the sleep is a grandchild.
std::vector<std::string> grandchild_command(const TempDir& dir, const std::string& marker) {
  return {"sh", "-c", "sleep " + marker + " & touch " + dir / "started" + "; wait"};
}

}  // namespace

TEST_CASE("redlock-run: a lost lease stops the command's whole process group", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-group-lost");
  const std::string marker = unique_sleep();
  Tool tool(std::vector<std::string>{"--redis", uri(server), "--key", k, "--ttl", "300ms", "--"} +
            grandchild_command(dir, marker));
  REQUIRE(command_started(tool, dir / "started"));
  REQUIRE(processes_with("sleep " + marker).size() == 1);
  server.raw({"DEL", k});
  CHECK(tool.wait(5s) == 70);
  // Nothing of the job may outlive redlock-run: the lock is free for the next holder now.
  const auto left = processes_with("sleep " + marker);
  for (const pid_t p : left) ::kill(p, SIGKILL);
  CHECK(left.empty());
}

TEST_CASE("redlock-run: a forwarded SIGTERM stops the whole process group before the release",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-group-term");
  const std::string marker = unique_sleep();
  Tool tool(std::vector<std::string>{"--redis", uri(server), "--key", k, "--"} +
            grandchild_command(dir, marker));
  REQUIRE(command_started(tool, dir / "started"));
  REQUIRE(::kill(tool.pid(), SIGTERM) == 0);
  CHECK(tool.wait(5s) == 128 + SIGTERM);
  const auto left = processes_with("sleep " + marker);
  for (const pid_t p : left) ::kill(p, SIGKILL);
  CHECK(left.empty());
  CHECK_FALSE(held(server, k));
}

TEST_CASE(
    "redlock-run: SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM and SIGHUP stop the command, then "
    "release",
    "[redis][cli]") {
  RedisServer server;
  for (const int signo : {SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGHUP}) {
    INFO("signal " << signo);
    TempDir dir;
    const auto k = key("run-sig" + std::to_string(signo));
    Tool tool(std::vector<std::string>{"--redis", uri(server), "--key", k, "--"} +
              looping_command(dir));
    REQUIRE(command_started(tool, dir / "started"));
    REQUIRE(::kill(tool.pid(), signo) == 0);
    CHECK(tool.wait(5s) == 128 + signo);  // the command died of the forwarded signal
    CHECK_FALSE(held(server, k));
  }
}

TEST_CASE("redlock-run: --grace then SIGKILL applies after a forwarded SIGTERM too",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-grace-term");
  const std::string started = dir / "started";
  Tool tool({"--redis", uri(server), "--key", k, "--grace", "400ms", "--", "sh", "-c",
             "trap '' TERM; touch " + started + "; while :; do sleep 0.05; done"});
  REQUIRE(command_started(tool, started));
  REQUIRE(::kill(tool.pid(), SIGTERM) == 0);
  const auto sent = Clock::now();
  CHECK(tool.wait(6s) == 128 + SIGKILL);
  CHECK(Clock::now() - sent >= 400ms);
  CHECK_THAT(tool.err(), Catch::Contains("SIGKILL"));
  CHECK_FALSE(held(server, k));
}

TEST_CASE("redlock-run: 126 for a file that is not executable, 127 for one not found",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-126");
  const std::string file = dir / "script";
  std::ofstream(file) << "#!/bin/sh\nexit 0\n";
  std::string err;
  CHECK(run({"--redis", uri(server), "--key", k, "--", file}, &err) == 126);
  CHECK_THAT(err, Catch::Contains(file));
  CHECK(run({"--redis", uri(server), "--key", k, "--", dir / "missing"}, &err) == 127);
  CHECK_FALSE(held(server, k));
}

TEST_CASE("redlock-run: --redis never takes the command's first word", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-words");
  std::string err;
  CHECK(run({"--key", k, "--redis", uri(server), "ls", "-l", "/dev/null"}, &err) == 0);
  CHECK(err.empty());
  CHECK(run({"--key", k, "--redis", uri(server), "touch", dir / "ran"}, &err) == 0);
  CHECK(exists(dir / "ran"));
}

TEST_CASE("redlock-run: a ttl the drift allowance makes unusable is a usage error",
          "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-short-ttl");
  std::string err;
  for (const char* ttl : {"3ms", "20ms"}) {
    CHECK(run({"--redis", uri(server), "--key", k, "--ttl", ttl, "--", "true"}, &err) == 64);
    CHECK_THAT(err, Catch::Contains("--ttl"));
  }
}

TEST_CASE("redlock-run: messages name the flag the user typed, never the library's internals",
          "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-messages");
  const std::string r = uri(server);
  std::string err;
  const std::vector<std::string> internals = {"Endpoint::",          "options.",      "instances[",
                                              "following arguments", "RequiredError", "TEXT"};
  auto check_clean = [&](const std::string& flag) {
    INFO("stderr: " << err);
    CHECK_THAT(err, Catch::Contains(flag));
    CHECK_THAT(err, Catch::Contains("--help"));
    for (const auto& word : internals) CHECK_THAT(err, !Catch::Contains(word));
  };
  CHECK(run({"--redis", r, "--key", k, "--bogus", "--", "true"}, &err) == 64);
  check_clean("--bogus");
  CHECK(run({"--redis", r, "--", "true"}, &err) == 64);
  check_clean("--key");
  CHECK(run({"--redis", r, "--redis", "redis://127.0.0.1:1", "--key", k, "--fair", "--", "true"},
            &err) == 64);
  check_clean("--fair");
  CHECK(run({"--redis", "redis://127.0.0.1:99999", "--key", k, "--", "true"}, &err) == 64);
  check_clean("--redis");
  CHECK(run({"--redis", r, "--key", k, "--ttl", "soon", "--", "true"}, &err) == 64);
  check_clean("--ttl");
  CHECK(run({"--redis", r, "--key", k}, &err) == 64);
  check_clean("command");
}

TEST_CASE("redlock-run: durations take fractions, compounds and bare seconds", "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-durations");
  REQUIRE(server.raw({"SET", k, "someone-else", "PX", "20000"}).str() == "OK");
  for (const char* wait : {"0.3s", "0.3", "300ms", "0m0.3s"}) {
    INFO("--wait " << wait);
    Tool tool({"--redis", uri(server), "--key", k, "--wait", wait, "--", "true"});
    CHECK(tool.wait() == 75);
    CHECK(tool.elapsed() >= 290ms);
  }
  // Accepted (the run then ends at once: the command is `true`).
  server.raw({"DEL", k});
  for (const char* ttl : {"1m30s", "2", "1.5s", "1h"}) {
    CHECK(run({"--redis", uri(server), "--key", k, "--ttl", ttl, "--", "true"}) == 0);
  }
}

TEST_CASE("redlock-run: -n, -w, --timeout and -E as flock spells them", "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-short");
  REQUIRE(server.raw({"SET", k, "someone-else", "PX", "20000"}).str() == "OK");
  const std::string r = uri(server);
  CHECK(run({"--redis", r, "--key", k, "-n", "--", "true"}) == 75);
  CHECK(run({"--redis", r, "--key", k, "-n", "-E", "3", "--", "true"}) == 3);
  CHECK(run({"--redis", r, "--key", k, "--conflict-exit-code", "9", "-w", "0.2", "--", "true"}) ==
        9);
  CHECK(run({"--redis", r, "--key", k, "--timeout", "200ms", "--", "true"}) == 75);
  CHECK(run({"--redis", r, "--key", k, "-E", "300", "-n", "--", "true"}) == 64);
}

TEST_CASE("redlock-run: the command gets REDLOCK_VALIDITY_MS and REDLOCK_TTL_MS", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const std::string env_file = dir / "env";
  CHECK(run({"--redis", uri(server), "--key", key("run-env"), "--ttl", "10s", "--", "sh", "-c",
             "echo \"$REDLOCK_TTL_MS $REDLOCK_VALIDITY_MS\" > " + env_file}) == 0);
  const std::string env = slurp(env_file);
  REQUIRE(env.size() > 7);
  CHECK(env.rfind("10000 ", 0) == 0);
  const long validity = std::stol(env.substr(6));
  CHECK(validity > 5'000);
  CHECK(validity <= 10'000);
}

TEST_CASE("redlock-run: servers from REDLOCK_REDIS and --redis-file, an inline password warns",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-envservers");
  std::string err;
  {
    Tool tool({"--key", k, "--", "true"}, {"REDLOCK_REDIS=" + uri(server)});
    CHECK(tool.wait() == 0);
    CHECK(tool.err().empty());
  }
  {
    ServerGroup group(3);
    const std::string list = uri(group[0]) + ", " + uri(group[1]) + " " + uri(group[2]);
    const std::string started = dir / "started";
    Tool tool({"--key", k, "--", "sh", "-c", "touch " + started + "; sleep 0.3"},
              {"REDLOCK_REDIS=" + list});
    REQUIRE(command_started(tool, started));
    for (std::size_t i = 0; i < group.size(); ++i) CHECK(held(group[i], k));
    CHECK(tool.wait() == 0);
  }
  const std::string file = dir / "servers";
  std::ofstream(file) << "# our lock server\n" << uri(server) << "\n\n";
  CHECK(run({"--redis-file", file, "--key", k, "--", "true"}, &err) == 0);
  CHECK(err.empty());
  CHECK(run({"--redis-file", dir / "nope", "--key", k, "--", "true"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("--redis-file"));
  // A password on the command line shows in ps: warn (and still run).
  CHECK(run({"--redis", "redis://:pw@127.0.0.1:" + std::to_string(server.port()), "--key", k, "--",
             "true"},
            &err) != 64);
  CHECK_THAT(err, Catch::Contains("REDLOCK_REDIS"));
  CHECK_THAT(err, !Catch::Contains(":pw@"));
}

TEST_CASE("redlock-run -v reports waiting, acquired with fence and validity, and lost",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-verbose");
  // Held long enough that a slow start of the tool on a loaded machine still finds it held
  // (it then says "waiting"); it expires by itself (no release is announced).
  REQUIRE(server.raw({"SET", k, "someone-else", "PX", "1500"}).str() == "OK");
  Tool tool(std::vector<std::string>{"--redis", uri(server), "--key", k, "-v", "--fencing", "--ttl",
                                     "300ms", "--"} +
            looping_command(dir));
  REQUIRE(command_started(tool, dir / "started"));
  server.raw({"DEL", k});
  CHECK(tool.wait(5s) == 70);
  const std::string err = tool.err();
  CHECK_THAT(err, Catch::Contains("waiting"));
  CHECK_THAT(err, Catch::Contains("acquired"));
  CHECK_THAT(err, Catch::Contains("fence 1"));
  CHECK_THAT(err, Catch::Contains("validity"));
  CHECK_THAT(err, Catch::Contains("lost"));
}

TEST_CASE("redlock-run --status shows the holder, its remaining ttl and identity", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-status-q");
  Tool status_free({"--redis", uri(server), "--key", k, "--status"});
  CHECK(status_free.wait() == 1);
  CHECK_THAT(status_free.out(), Catch::Contains("not held"));
  Tool holder(std::vector<std::string>{"--redis", uri(server), "--key", k, "--ttl", "20s", "--"} +
              looping_command(dir));
  REQUIRE(command_started(holder, dir / "started"));
  CHECK(server.raw({"PTTL", k + ":holder"}).integer() > 0);
  Tool status_held({"--redis", uri(server), "--key", k, "--status"});
  CHECK(status_held.wait() == 0);
  const std::string out = status_held.out();
  CHECK_THAT(out, Catch::Contains("held"));
  CHECK_THAT(out, Catch::Contains("pid=" + std::to_string(holder.pid())));
  CHECK_THAT(out, Catch::Contains("sh -c"));
  CHECK_THAT(out, Catch::Contains("ttl"));
  ::kill(holder.pid(), SIGTERM);
  CHECK(holder.wait() == 0);
  CHECK(server.raw({"EXISTS", k, k + ":holder"}).integer() == 0);
}

TEST_CASE("redlock-run --hold keeps the lock until stdin closes", "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-hold");
  Tool tool({"--redis", uri(server), "--key", k, "--hold"}, {}, Input::pipe);
  // A script waits for the "held" line (the key exists a moment before the wait returns).
  REQUIRE(eventually([&] { return !tool.out().empty(); }));
  CHECK(held(server, k));
  std::this_thread::sleep_for(200ms);
  CHECK(tool.running());
  tool.close_stdin();
  CHECK(tool.wait() == 0);
  CHECK(tool.out() == "held " + k + " fence 0\n");  // what a script waits for
  CHECK_FALSE(held(server, k));
  // And until a signal.
  Tool signalled({"--redis", uri(server), "--key", k, "--hold"}, {}, Input::pipe);
  REQUIRE(eventually([&] { return !signalled.out().empty(); }));
  ::kill(signalled.pid(), SIGTERM);
  CHECK(signalled.wait() == 128 + SIGTERM);
  CHECK_FALSE(held(server, k));
}

TEST_CASE("redlock-run: a Redlock without a quorum of live servers is unavailable (69)",
          "[redis][cli]") {
  ServerGroup group(3);
  const auto k = key("run-noquorum");
  std::vector<std::string> args;
  for (std::size_t i = 0; i < group.size(); ++i) {
    args.emplace_back("--redis");
    args.push_back(uri(group[i]));
  }
  args.emplace_back("--key");
  args.push_back(k);
  {
    // One of three down: works, and warns once.
    group[2].pause();
    Tool tool(args + std::vector<std::string>{"--", "true"});
    const int status = tool.wait();
    group[2].resume();
    CHECK(status == 0);
    CHECK_THAT(tool.err(), Catch::Contains("1 of 3"));
  }
  group[1].pause();
  group[2].pause();
  Tool no_wait(args + std::vector<std::string>{"--no-wait", "--", "true"});
  Tool waiting(args + std::vector<std::string>{"--wait", "1s", "--", "true"});
  const int no_wait_status = no_wait.wait();
  const int waiting_status = waiting.wait();
  group[1].resume();
  group[2].resume();
  CHECK(no_wait_status == 69);
  CHECK(waiting_status == 69);
  CHECK_THAT(no_wait.err(), Catch::Contains("unavailable"));
}

// Issue 20 item 4: redlock-run used to cut each wait into 250 ms try_lock_for slices, so a fair
// waiter left the queue and rejoined at the back every slice. Now one try_lock_until per wait.
TEST_CASE("redlock-run --fair serves five staggered waiters in arrival order",
          "[redis][cli][fair][fifo]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-fifo");
  const std::string order = dir / "order";
  const std::string started = dir / "started";
  const std::string go = dir / "go";
  // The first holds until told to go, so every waiter is queued before the first hand-over.
  Tool first({"--redis", uri(server), "--key", k, "--fair", "--", "sh", "-c",
              "touch " + started + "; while [ ! -e " + go + " ]; do sleep 0.05; done"});
  REQUIRE(command_started(first, started));
  std::vector<std::unique_ptr<Tool>> waiters;
  for (int i = 1; i <= 5; ++i) {
    waiters.push_back(std::make_unique<Tool>(
        std::vector<std::string>{"--redis", uri(server), "--key", k, "--fair", "--", "sh", "-c",
                                 "echo " + std::to_string(i) + " >> " + order + "; sleep 0.1"}));
    // Arrival order is the order of the server's queue: the next starts once this one is in it
    // (a process that starts slowly on a busy machine must not be overtaken by the next).
    REQUIRE(eventually(
        [&] {
          return server.raw({"LLEN", helper_key(k, ":waiters")}).integer() == i;
        },
        10s));
  }
  REQUIRE(::close(::open(go.c_str(), O_WRONLY | O_CREAT, 0600)) == 0);
  CHECK(first.wait() == 0);
  for (auto& w : waiters) CHECK(w->wait(20s) == 0);
  CHECK(slurp(order) == "1\n2\n3\n4\n5\n");
}

// A signal during the wait cancels it (Lock::cancel_waits), and the fair waiter leaves the queue.
TEST_CASE("redlock-run --fair: SIGTERM while waiting leaves the queue cleanly", "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-fair-cancel");
  REQUIRE(server.raw({"SET", k, "someone-else", "PX", "20000"}).str() == "OK");
  Tool tool({"--redis", uri(server), "--key", k, "--fair", "--", "true"});
  REQUIRE(eventually([&] {
    return server.raw({"EXISTS", helper_key(k, ":waiters")}).integer() == 1;
  }));
  REQUIRE(::kill(tool.pid(), SIGTERM) == 0);
  CHECK(tool.wait(5s) == 128 + SIGTERM);
  CHECK(server.raw({"EXISTS", helper_key(k, ":waiters")}).integer() == 0);
  CHECK(server.raw({"GET", k}).str() == "someone-else");
}

// A wait rides out a server that does not answer (the library's unavailability rule).
TEST_CASE("redlock-run: a wait rides out a paused server, then takes the lock", "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-ride-out");
  REQUIRE(server.raw({"SET", k, "someone-else", "PX", "1500"}).str() == "OK");
  Tool tool({"--redis", uri(server) + "?command_timeout=200", "--key", k, "--", "true"});
  std::this_thread::sleep_for(200ms);
  server.pause();
  std::this_thread::sleep_for(600ms);
  server.resume();
  CHECK(tool.wait(10s) == 0);  // the holder's lease ran out; ours came after
}

// Review 3, item 3: --limit waits in the same loop as a plain lock, so it rides out the same
// pause (it exited 69 after 0.74 s).
TEST_CASE("redlock-run --limit: a wait rides out a paused server, then takes a permit",
          "[redis][cli][semaphore]") {
  RedisServer server;
  const auto k = key("run-limit-ride-out");
  redlock::Client client(server.endpoint());
  redlock::LockOptions o;
  o.ttl = 1500ms;
  redlock::Semaphore holder(client, k, 1, o);
  REQUIRE(holder.try_acquire());
  Tool tool(
      {"--redis", uri(server) + "?command_timeout=200", "--key", k, "--limit", "1", "--", "true"});
  std::this_thread::sleep_for(200ms);
  server.pause();
  std::this_thread::sleep_for(600ms);
  server.resume();
  CHECK(tool.wait(10s) == 0);  // the holder's permit ran out; ours came after
}

TEST_CASE("redlock-run: what the command leaves running in its group is stopped before release",
          "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-leftover");
  const std::string marker = unique_sleep();
  Tool tool(
      {"--redis", uri(server), "--key", k, "--", "sh", "-c", "sleep " + marker + " & exit 5"});
  CHECK(tool.wait(5s) == 5);  // the command's own status
  const auto left = processes_with("sleep " + marker);
  for (const pid_t p : left) ::kill(p, SIGKILL);
  CHECK(left.empty());
  CHECK_THAT(tool.err(), Catch::Contains("left running"));
  CHECK_FALSE(held(server, k));
}

// --limit N: a semaphore. Each run marks itself in a directory while it holds a permit; a run
// that sees more than N marks records it. The limit is reached, never passed, and the usage
// errors name the flag.
TEST_CASE("redlock-run --limit 2 lets at most two commands hold the key at once",
          "[redis][cli][semaphore]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-limit");
  const std::string marks = dir / "marks";
  const std::string over = dir / "over";
  const std::string peak = dir / "peak";
  REQUIRE(::mkdir(marks.c_str(), 0700) == 0);
  // Marks itself, records how many marks it saw, waits, unmarks.
  const std::string script = "touch " + marks + "/$$; n=$(ls " + marks + " | wc -l); echo $n >> " +
                             peak + "; [ $n -le 2 ] || touch " + over + "; sleep 0.4; rm " + marks +
                             "/$$";
  std::vector<std::unique_ptr<Tool>> runs;
  for (int i = 0; i < 5; ++i) {
    runs.push_back(std::make_unique<Tool>(std::vector<std::string>{"--redis", uri(server), "--key",
                                                                   k, "--limit", "2", "--fencing",
                                                                   "--", "sh", "-c", script}));
  }
  for (auto& run : runs) CHECK(run->wait(20s) == 0);
  CHECK_FALSE(exists(over));
  CHECK_THAT(slurp(peak), Catch::Contains("2"));  // two did hold it at once
  CHECK(server.raw({"GET", helper_key(k, ":permit:fence")}).str() == "5");

  std::string err;
  CHECK(run({"--redis", uri(server), "--key", k, "--limit", "0", "--", "true"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("--limit"));
  CHECK(run({"--redis", uri(server), "--key", k, "--limit", "2", "--fair", "--", "true"}, &err) ==
        64);
  CHECK_THAT(err, Catch::Contains("--fair"));
}

TEST_CASE("redlock-run --metrics PATH writes Prometheus text at start and at exit",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const std::string path = dir / "redlock.prom";
  const auto k = key("run-metrics");
  // The command sees the file already written (at start), with no acquire counted yet.
  const std::string seen = dir / "seen";
  CHECK(run({"--redis", uri(server), "--key", k, "--metrics", path, "--", "sh", "-c",
             "cp \"$0\" \"$1\"", path, seen}) == 0);
  CHECK(slurp(seen).find("# TYPE redlock_acquires_total counter") != std::string::npos);
  CHECK(slurp(seen).find("outcome=\"acquired\"") == std::string::npos);
  const std::string text = slurp(path);
  CHECK(text.find("redlock_acquires_total{key=\"" + k + "\",outcome=\"acquired\"} 1") !=
        std::string::npos);
  CHECK(text.find("redlock_releases_total{key=\"" + k + "\",result=\"kept\"} 1") !=
        std::string::npos);
  CHECK(text.find("redlock_acquire_seconds_count{key=\"" + k + "\"} 1") != std::string::npos);
  // Written atomically (a temporary file renamed): nothing else is left beside it.
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "")) {
    (void)entry;
    ++files;
  }
  CHECK(files == 2);  // redlock.prom and seen
  // A path that cannot be written is a usage error naming the option; the command never runs.
  std::string err;
  CHECK(run({"--redis", uri(server), "--key", k, "--metrics", dir / "no/such/dir/x.prom", "--",
             "touch", dir / "ran"},
            &err) == 64);
  CHECK(err.find("--metrics") != std::string::npos);
  CHECK_FALSE(exists(dir / "ran"));
  CHECK_FALSE(held(server, k));
}

TEST_CASE("redlock-run through Sentinel: --redis, REDLOCK_REDIS and --redis-file take the URI",
          "[sentinel][cli]") {
  redlock::test::SentinelSet set;
  TempDir dir;
  const auto k = key("run-sentinel");
  const std::string uri = set.uri();  // redis-sentinel://127.0.0.1:p1,127.0.0.1:p2,...#mymaster
  const std::string started = dir / "started";
  {
    Tool tool({"--key", k, "--", "sh", "-c", "touch " + started + "; sleep 0.3"},
              {"REDLOCK_REDIS=" + uri});
    REQUIRE(command_started(tool, started));
    CHECK(held(set.data(set.master_index()), k));  // on the master the sentinels name
    CHECK(tool.wait() == 0);
  }
  std::string err;
  std::string waiting = uri;
  waiting.insert(waiting.find('#'), "?wait_replicas=2&wait_timeout=150");
  CHECK(run({"--redis", waiting, "--key", k, "--", "true"}, &err) == 0);
  CHECK(err.empty());
  const std::string file = dir / "servers";
  std::ofstream(file) << "# through Sentinel\n" << uri << "  # the service after '#'\n";
  CHECK(run({"--redis-file", file, "--key", k, "--", "true"}, &err) == 0);
  CHECK(err.empty());
  CHECK_FALSE(held(set.data(set.master_index()), k));
}

#ifdef REDLOCK_TESTS_WITH_POSTGRES
// ---- --postgres: the same tool with the lock in a PostgreSQL lease table ----------------------

TEST_CASE("redlock-run --postgres runs the command under a lease row, exports the fence, releases",
          "[postgres][cli]") {
  redlock::test::PostgresServer pg;
  TempDir dir;
  const std::string fence_file = dir / "fence";
  std::string err;
  CHECK(run({"--postgres", pg.uri(), "--key", "nightly", "--", "sh", "-c",
             "echo \"$REDLOCK_FENCE $REDLOCK_KEY\" > " + fence_file + "; psql -X -A -t -q -d '" +
                 pg.uri() +
                 "' -c 'SELECT count(*) FROM redlock_leases WHERE expires_at > now()' >> " +
                 fence_file + "; exit 7"},
            &err) == 7);
  CHECK(err.empty());
  const std::string seen = slurp(fence_file);
  CHECK_THAT(seen, Catch::Matches("[1-9][0-9]* nightly\n1\n"));  // held while it ran
  CHECK(pg.psql("SELECT count(*) FROM redlock_leases WHERE expires_at > now()") ==
        "0");  // released after
}

TEST_CASE("redlock-run --postgres: contention is 75, a lost lease 70, a down server 69",
          "[postgres][cli]") {
  redlock::test::PostgresServer pg;
  TempDir dir;
  SECTION("held elsewhere, --no-wait") {
    redlock::postgres::Database db(pg.uri());
    redlock::postgres::Lock other(db, "busy");
    REQUIRE(other.try_lock());
    const std::string ran = dir / "ran";
    CHECK(run({"--postgres", pg.uri(), "--key", "busy", "-n", "--", "touch", ran}) == 75);
    CHECK_FALSE(exists(ran));
    CHECK(other.owns_lock());
  }
  SECTION("the row deleted under the command") {
    Tool tool(
        std::vector<std::string>{"--postgres", pg.uri(), "--key", "lost", "--ttl", "500ms", "--"} +
        looping_command(dir));
    REQUIRE(command_started(tool, dir / "started"));
    pg.psql("DELETE FROM redlock_leases WHERE name = 'lost'");
    CHECK(tool.wait(10s) == 70);
    CHECK(exists(dir / "term"));
    CHECK_THAT(tool.err(), Catch::Contains("lease on lost lost"));
  }
  SECTION("nothing listens there") {
    const std::string gone =
        "postgresql://postgres@127.0.0.1:" + std::to_string(pg.port() + 1) + "/postgres";
    std::string err;
    CHECK(run({"--postgres", gone, "--key", "down", "--unavailable-timeout", "1s", "--", "true"},
              &err) == 69);
    CHECK_THAT(err, Catch::Contains("down"));
  }
}

TEST_CASE("redlock-run --postgres: the Redis-only options are usage errors (64)",
          "[postgres][cli]") {
  const std::string db = "postgresql://postgres@127.0.0.1:1/postgres";
  std::string err;
  CHECK(run({"--postgres", db, "--redis", "redis://127.0.0.1:1", "--key", "k", "--", "true"},
            &err) == 64);
  CHECK_THAT(err, Catch::Contains("--postgres and --redis"));
  CHECK(run({"--postgres", db, "--key", "k", "--status"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("--status works with Redis only"));
  CHECK(run({"--postgres", db, "--key", "k", "--limit", "2", "--", "true"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("--limit works with Redis only"));
  CHECK(run({"--postgres", db, "--postgres", db, "--key", "k", "--", "true"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("given twice"));
  CHECK(
      run({"--postgres", "postgresql://u:secret@127.0.0.1:1/db", "--key", "k", "-n", "--", "true"},
          &err) != 0);
  CHECK_THAT(err, Catch::Contains("PGPASSWORD") && !Catch::Contains("secret"));
}
#endif  // REDLOCK_TESTS_WITH_POSTGRES

TEST_CASE("redlock-run on a Redis Cluster: --redis redis-cluster://, --status and --fencing",
          "[cluster][cli]") {
  redlock::test::RedisCluster cluster;
  TempDir dir;
  const auto masters = cluster.masters();
  const auto k = cluster.key_on(masters[1], "run-cluster-");
  const std::string uri = cluster.uri({masters[0]});  // one seed; the key is elsewhere
  const std::string started = dir / "started";
  {
    Tool tool({"--redis", uri, "--key", k, "--fencing", "--", "sh", "-c",
               "touch " + started + "; sleep 0.5"});
    REQUIRE(command_started(tool, started));
    CHECK(held(cluster.node(masters[1]), k));  // on the master that owns the key's slot
    Tool status({"--redis", uri, "--key", k, "--status"});
    CHECK(status.wait() == 0);                               // 0: held
    CHECK_THAT(status.out(), Catch::Contains("held, ttl"));  // and the holder record was found
    CHECK_THAT(status.out(), Catch::Contains("command=sh"));
    CHECK(tool.wait() == 0);
  }
  CHECK(cluster.node(masters[1]).raw({"GET", helper_key(k, ":fence")}).str() == "1");
  CHECK_FALSE(held(cluster.node(masters[1]), k));
}

// ---- issue 31 --------------------------------------------------------------------------------

namespace {

// `sh -c ': MARKER; ...'`: a writer that ignores SIGTERM and appends a line to `file` every 50 ms
// until killed; processes_with("sh -c : MARKER") finds it.
std::string stubborn_writer(const std::string& marker, const std::string& file) {
  return "sh -c ': " + marker + "; trap \"\" TERM; while :; do echo x >> " + file +
         "; sleep 0.05; done'";
}

// The end of a command that started a stubborn writer: once it has written (so it ignores
// SIGTERM by then), touch `started` and exit 3.
std::string exit_once_written(const TempDir& dir) {
  return "while [ ! -e " + dir / "written" + " ]; do sleep 0.01; done; touch " + dir / "started" +
         "; exit 3";
}

// Runs `script` (which starts a stubborn writer outside the command's process group, touches
// `started` and exits 3) under the lock with --grace 400ms. The writer must be gone (SIGKILL
// after --grace) before redlock-run releases and exits, and write nothing afterwards; a second
// holder then gets the lock.
void check_descendant_stopped(const std::string& shell, const std::string& script,
                              const std::string& marker, const TempDir& dir) {
  RedisServer server;
  const auto k = key("run-descendant");
  const std::string written = dir / "written";
  Tool tool({"--redis", uri(server), "--key", k, "--grace", "400ms", "--", shell, "-c", script});
  REQUIRE(command_started(tool, dir / "started"));
  CHECK(tool.wait(10s) == 3);  // the command's own status
  const auto left = processes_with("sh -c : " + marker);
  const auto size = slurp(written).size();
  for (const pid_t p : left) ::kill(p, SIGKILL);
  CHECK(left.empty());
  CHECK(tool.elapsed() >= 400ms);  // it waited for the writer, which ignores SIGTERM
  CHECK_THAT(tool.err(), Catch::Contains("SIGKILL"));
  CHECK_FALSE(held(server, k));
  std::this_thread::sleep_for(200ms);
  CHECK(slurp(written).size() == size);  // no write after the release
  CHECK(run({"--redis", uri(server), "--key", k, "-n", "--", "true"}) == 0);
}

}  // namespace

TEST_CASE("redlock-run stops a job-control (set -m) background job before it releases",
          "[redis][cli]") {
  TempDir dir;
  const std::string marker = unique_sleep();
  // bash with set -m puts the background job in a process group of its own.
  check_descendant_stopped(
      "bash",
      "set -m; " + stubborn_writer(marker, dir / "written") + " & " + exit_once_written(dir),
      marker, dir);
}

TEST_CASE("redlock-run stops a setsid child before it releases", "[redis][cli]") {
  TempDir dir;
  const std::string marker = unique_sleep();
  check_descendant_stopped(
      "sh", "setsid " + stubborn_writer(marker, dir / "written") + " & " + exit_once_written(dir),
      marker, dir);
}

TEST_CASE("redlock-run ignores SIGUSR1 and SIGUSR2 while it waits for the lock", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-usr-waiting");
  Tool holder({"--redis", uri(server), "--key", k, "--hold"}, {}, Input::pipe);
  REQUIRE(eventually([&] { return !holder.out().empty(); }, 10s));
  const std::string started = dir / "started";
  Tool tool({"--redis", uri(server), "--key", k, "-v", "--wait", "15s", "--", "sh", "-c",
             "touch " + started});
  REQUIRE(eventually([&] { return tool.err().find("waiting for") != std::string::npos; }, 10s));
  REQUIRE(::kill(tool.pid(), SIGUSR1) == 0);
  REQUIRE(::kill(tool.pid(), SIGUSR2) == 0);
  std::this_thread::sleep_for(200ms);
  CHECK(tool.running());
  holder.close_stdin();  // the release; the waiter hears of it
  CHECK(holder.wait() == 0);
  CHECK(tool.wait(10s) == 0);
  CHECK(exists(started));
  CHECK_THAT(tool.err(), !Catch::Contains("while waiting"));
}

TEST_CASE("redlock-run -v names the kind of lock, and says when there is no fence",
          "[redis][cli]") {
  ServerGroup group(3);
  RedisServer& server = group[0];
  std::string err;
  const auto k = key("run-verbose-kind");
  REQUIRE(run({"--redis", uri(server), "--key", k, "-v", "--", "true"}, &err) == 0);
  CHECK_THAT(err, Catch::Contains("acquired " + k + " (Lock"));
  CHECK_THAT(err, Catch::Contains("no fence"));
  CHECK_THAT(err, !Catch::Contains("fence 0"));
  REQUIRE(run({"--redis", uri(server), "--key", k, "-v", "--fencing", "--", "true"}, &err) == 0);
  CHECK_THAT(err, Catch::Contains("fence 1"));
  REQUIRE(run({"--redis", uri(group[0]), "--redis", uri(group[1]), "--redis", uri(group[2]),
               "--key", k + "r", "-v", "--", "true"},
              &err) == 0);
  CHECK_THAT(err, Catch::Contains("Redlock"));
  CHECK_THAT(err, Catch::Contains("quorum 2 of 3"));
  CHECK_THAT(err, Catch::Contains("no fence"));
  REQUIRE(run({"--redis", uri(server), "--key", k + "s", "-v", "--limit", "2", "--", "true"},
              &err) == 0);
  CHECK_THAT(err, Catch::Contains("Semaphore"));
  CHECK_THAT(err, Catch::Contains("limit 2"));
  CHECK_THAT(err, Catch::Contains("no fence"));
}

TEST_CASE("the key layout is 3: REDLOCK_KEY_LAYOUT and redlock::key_layout()", "[unit][cli]") {
  STATIC_REQUIRE(REDLOCK_KEY_LAYOUT == 3);
  STATIC_REQUIRE(redlock::key_layout() == REDLOCK_KEY_LAYOUT);
}

TEST_CASE("redlock-run --version prints the version and the key layout", "[cli]") {
  Tool tool({"--version"});
  CHECK(tool.wait() == 0);
  const std::string out = tool.out();
  CHECK(out.rfind(REDLOCK_VERSION_STRING "\n", 0) == 0);  // the first line: the version alone
  CHECK_THAT(out, Catch::Contains("key layout 3 (since 0.3.0)"));
}

TEST_CASE("redlock-run --limit: another limit on a held key is refused (64), naming both",
          "[redis][cli][semaphore]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-limit-mismatch");
  const std::string started = dir / "started";
  Tool holder({"--redis", uri(server), "--key", k, "--limit", "2", "--", "sh", "-c",
               "touch " + started + "; while :; do sleep 0.05; done"});
  REQUIRE(command_started(holder, started));
  std::string err;
  CHECK(run({"--redis", uri(server), "--key", k, "--limit", "3", "-n", "--", "true"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("--limit 3"));
  CHECK_THAT(err, Catch::Contains("limit 2"));
  // The same limit is contention-free here: a second permit.
  CHECK(run({"--redis", uri(server), "--key", k, "--limit", "2", "-n", "--", "true"}) == 0);
  ::kill(holder.pid(), SIGTERM);
  CHECK(holder.wait() == 128 + SIGTERM);
  // With no permit held, the limit may change.
  CHECK(run({"--redis", uri(server), "--key", k, "--limit", "3", "-n", "--", "true"}, &err) == 0);
}

TEST_CASE("redlock-run --status shows a semaphore's permits, with or without --limit",
          "[redis][cli][semaphore]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-status-sem");
  std::vector<std::unique_ptr<Tool>> holders;
  for (int i = 0; i < 2; ++i) {
    const std::string started = dir / ("started" + std::to_string(i));
    holders.push_back(std::make_unique<Tool>(std::vector<std::string>{
        "--redis", uri(server), "--key", k, "--limit", "2", "--ttl", "20s", "--", "sh", "-c",
        "touch " + started + "; while :; do sleep 0.05; done"}));
    REQUIRE(command_started(*holders.back(), started));
  }
  for (const auto& limit : {std::vector<std::string>{}, std::vector<std::string>{"--limit", "2"}}) {
    Tool status(std::vector<std::string>{"--redis", uri(server), "--key", k, "--status"} + limit);
    CHECK(status.wait() == 0);
    const std::string out = status.out();
    CHECK_THAT(out, Catch::Contains("2 of 2 permits held"));
    CHECK_THAT(out, Catch::Contains("limit 2"));
    CHECK_THAT(out, Catch::Contains("ttl"));
  }
  Tool mismatch({"--redis", uri(server), "--key", k, "--status", "--limit", "3"});
  CHECK(mismatch.wait() == 64);
  CHECK_THAT(mismatch.err(), Catch::Contains("limit 2"));
  for (auto& holder : holders) ::kill(holder->pid(), SIGTERM);
  for (auto& holder : holders) CHECK(holder->wait() == 128 + SIGTERM);
  Tool free_status({"--redis", uri(server), "--key", k, "--status", "--limit", "2"});
  CHECK(free_status.wait() == 1);
  CHECK_THAT(free_status.out(), Catch::Contains("0 of 2 permits held"));
}

TEST_CASE("redlock-run --shared: several readers at once, a plain run is the writer",
          "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-shared");
  Tool r1({"--redis", uri(server), "--key", k, "--shared", "--hold"}, {}, Input::pipe);
  Tool r2({"--redis", uri(server), "--key", k, "--shared", "--hold"}, {}, Input::pipe);
  REQUIRE(eventually([&] { return !r1.out().empty() && !r2.out().empty(); }));  // both hold
  CHECK(server.raw({"ZCARD", helper_key(k, ":readers")}).integer() == 2);
  CHECK(run({"--redis", uri(server), "--key", k, "--no-wait", "--", "true"}) == 75);
  r1.close_stdin();
  CHECK(r1.wait() == 0);
  CHECK(run({"--redis", uri(server), "--key", k, "--no-wait", "--", "true"}) == 75);
  r2.close_stdin();
  CHECK(r2.wait() == 0);
  CHECK(run({"--redis", uri(server), "--key", k, "--no-wait", "--", "true"}) == 0);
  // A plain run holds: a --shared one is refused.
  Tool writer({"--redis", uri(server), "--key", k, "--hold"}, {}, Input::pipe);
  REQUIRE(eventually([&] { return !writer.out().empty(); }));
  CHECK(run({"--redis", uri(server), "--key", k, "--shared", "--no-wait", "--", "true"}) == 75);
  writer.close_stdin();
  CHECK(writer.wait() == 0);
  CHECK(run({"--redis", uri(server), "--key", k, "--shared", "--limit", "2", "--", "true"}) == 64);
}

TEST_CASE("redlock-run with a repeated --key holds every key or none", "[redis][cli]") {
  RedisServer server;
  const auto a = key("run-multi-a");
  const auto b = key("run-multi-b");
  Tool both({"--redis", uri(server), "--key", a, "--key", b, "--hold"}, {}, Input::pipe);
  REQUIRE(eventually([&] { return !both.out().empty(); }));
  CHECK(server.raw({"EXISTS", a, b}).integer() == 2);
  CHECK(run({"--redis", uri(server), "--key", b, "--no-wait", "--", "true"}) == 75);
  both.close_stdin();
  CHECK(both.wait() == 0);
  CHECK(server.raw({"EXISTS", a, b}).integer() == 0);
  // One key held elsewhere: the set is refused, and the other key is not taken.
  REQUIRE(server.raw({"SET", b, "someone-else", "PX", "10000"}).str() == "OK");
  CHECK(run({"--redis", uri(server), "--key", a, "--key", b, "--no-wait", "--", "true"}) == 75);
  CHECK(server.raw({"EXISTS", a}).integer() == 0);
  CHECK(run({"--redis", uri(server), "--key", a, "--key", a, "--", "true"}) == 64);
  CHECK(run({"--redis", uri(server), "--key", a, "--key", b, "--shared", "--", "true"}) == 64);
}
