// redlock-run (tools/redlock-run/): a command never outlives its lease, even while redlock-run
// itself cannot act (SIGSTOP of the supervisor, not of its command): the lease guard ends the
// command when the validity runs out. Measured on one CLOCK_MONOTONIC: the commands write
// clock_gettime(CLOCK_MONOTONIC) (Python's time.monotonic_ns()) as they run, and the old
// holder's last beat must come before the new holder's first. Also --elect's errors, reasons,
// validity and -v.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <redlock/client.hpp>

#include "redlock_run_tool.hpp"  // Tool, TempDir, run, uri, command_started ...
#include "support/eventually.hpp"
#include "support/redis_server.hpp"
#ifdef REDLOCK_RUN_TESTS_WITH_ZOOKEEPER
#include "support/zookeeper_server.hpp"
#endif
#include "util/key_slot.hpp"  // helper_key: the leader's lock key

using namespace std::chrono_literals;
using namespace redlock_run_test;
using redlock::test::eventually;
using redlock::test::key;
using redlock::test::RedisServer;

namespace {

// A command that appends CLOCK_MONOTONIC nanoseconds to `path`, one line every 5 ms, until a
// signal ends it (SIGTERM's default action: no handler).
std::vector<std::string> beating(const std::string& path) {
  return {"python3", "-c",
          "import sys, time\n"
          "f = open(sys.argv[1], 'a')\n"
          "while True:\n"
          "    f.write('%d\\n' % time.monotonic_ns()); f.flush(); time.sleep(0.005)\n",
          path};
}

std::vector<std::int64_t> beats(const std::string& path) {
  std::vector<std::int64_t> found;
  std::istringstream lines(slurp(path));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) found.push_back(std::stoll(line));
  }
  return found;
}

// The processes whose command line names `word` (a test's unique key): redlock-run, its lease
// guard (a fork of it) and nothing else once they are all gone.
int processes_naming(const std::string& word) {
  int count = 0;
  DIR* dir = ::opendir("/proc");
  REQUIRE(dir != nullptr);
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = slurp("/proc/" + name + "/cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (cmdline.find(word) != std::string::npos && std::to_string(::getpid()) != name) ++count;
  }
  ::closedir(dir);
  return count;
}

// Starts `old_args` (beating into old/beats), SIGSTOPs that redlock-run once its command beats,
// starts `new_args` (beating into new/beats) and checks on CLOCK_MONOTONIC that the old command
// beat for the last time before the new one's first beat. Returns the old redlock-run's status
// after SIGCONT if `old_exits`, else -1 (it goes on, and is stopped with SIGTERM).
int check_no_overlap(const std::vector<std::string>& old_args,
                     const std::vector<std::string>& new_args, const std::string& k,
                     bool old_exits) {
  TempDir old_dir, new_dir;
  Tool old_run(old_args + beating(old_dir / "beats"));
  REQUIRE(command_started(old_run, old_dir / "beats"));
  REQUIRE(::kill(old_run.pid(), SIGSTOP) == 0);
  Tool new_run(new_args + beating(new_dir / "beats"));
  REQUIRE(command_started(new_run, new_dir / "beats"));
  std::this_thread::sleep_for(300ms);  // the old command, if alive, beats meanwhile
  const auto old_beats = beats(old_dir / "beats");
  const auto new_beats = beats(new_dir / "beats");
  REQUIRE_FALSE(old_beats.empty());
  REQUIRE_FALSE(new_beats.empty());
  INFO("the old command's last beat is "
       << (old_beats.back() - new_beats.front()) / 1'000'000
       << " ms after the new command's first; old stderr: " << old_run.err());
  CHECK(old_beats.back() < new_beats.front());
  ::kill(old_run.pid(), SIGCONT);
  int status = -1;
  if (old_exits) {
    status = old_run.wait(20s);
  } else {
    ::kill(old_run.pid(), SIGTERM);
    old_run.wait(20s);
  }
  ::kill(new_run.pid(), SIGTERM);
  new_run.wait(20s);
  // Neither redlock-run left its lease guard behind.
  CHECK(eventually([&] { return processes_naming(k) == 0; }, 5s));
  return status;
}

// redlock-run's options for `k` on `server` with a ttl of 1 s, then `more`, then "--".
std::vector<std::string> options(const RedisServer& server, const std::string& k,
                                 const std::vector<std::string>& more) {
  return std::vector<std::string>{"--redis", uri(server), "--key", k, "--ttl", "1s"} + more +
         std::vector<std::string>{"--"};
}

}  // namespace

TEST_CASE("redlock-run: a paused supervisor's command ends before the next holder's starts",
          "[redis][cli][fault][slow]") {
  RedisServer server;
  const auto k = key("run-guard-lock");
  CHECK(check_no_overlap(options(server, k, {"--grace", "1s"}),
                         options(server, k, {"--wait", "15s"}), k, /*old_exits=*/true) == 70);
}

TEST_CASE("redlock-run --limit: a paused supervisor's command ends before its permit is reused",
          "[redis][cli][fault][semaphore][slow]") {
  RedisServer server;
  const auto k = key("run-guard-limit");
  CHECK(check_no_overlap(options(server, k, {"--limit", "1", "--grace", "1s"}),
                         options(server, k, {"--limit", "1", "--wait", "15s"}), k,
                         /*old_exits=*/true) == 70);
}

TEST_CASE("redlock-run --elect: a paused leader's command ends before the next term's starts",
          "[redis][cli][fault][election][slow]") {
  RedisServer server;
  const auto k = key("run-guard-elect");
  check_no_overlap(options(server, k, {"--grace", "1s", "--elect", "a"}),
                   options(server, k, {"--elect", "b"}), k, /*old_exits=*/false);
}

// [slow]: in the plain stage only. Under ASan (CI, a loaded machine) the killed run's command
// was still listed after 5 s once; not explained yet (the guard exits with _exit after its
// SIGKILL).
TEST_CASE(
    "redlock-run: the lease guard ends with the command, and ends a command that outlives "
    "a killed redlock-run",
    "[redis][cli][slow]") {
  RedisServer server;
  const auto k = key("run-guard-end");
  CHECK(run({"--redis", uri(server), "--key", k, "--", "true"}) == 0);
  CHECK(processes_naming(k) == 0);

  // redlock-run killed (-9): the command, which ignores SIGTERM, is stopped by the guard's
  // SIGKILL after --grace; then nothing of that run is left.
  TempDir dir;
  auto tool = std::make_unique<Tool>(std::vector<std::string>{
      "--redis", uri(server), "--key", k, "--ttl", "5s", "--grace", "500ms", "--", "sh", "-c",
      "trap '' TERM; touch " + dir / "started" + "; while :; do sleep 0.05; done # " + k});
  REQUIRE(command_started(*tool, dir / "started"));
  tool.reset();  // SIGKILL
  CHECK(eventually([&] { return processes_naming(k) == 0; }, 5s));
}

namespace {

std::size_t lines_in(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("redlock-run --elect: a wrong password or a key of the wrong type ends with 69 at once",
          "[redis][cli][election]") {
  redlock::test::ServerOptions options;
  options.extra_args = {"--requirepass", "right"};
  RedisServer server(options);
  const auto k = key("run-elect-config");
  const std::string port = std::to_string(server.port());
  Tool wrong(
      {"--redis", "redis://:wrong@127.0.0.1:" + port, "--key", k, "--elect", "a", "--", "true"});
  CHECK(wrong.wait(8s) == 69);
  CHECK(wrong.elapsed() < 5s);
  CHECK_THAT(wrong.err(), Catch::Contains("cannot campaign for " + k));
  CHECK(lines_in(wrong.err()) <= 3);  // no retry after retry

  // The leader's lock key holds a hash: every attempt would be refused (WRONGTYPE).
  const std::string good = "redis://:right@127.0.0.1:" + port;
  redlock::Client client(redlock::Endpoint::parse(good));
  client.command({"HSET", redlock::detail::helper_key(k, ":leader"), "f", "v"});
  Tool wrong_type({"--redis", good, "--key", k, "--elect", "a", "--", "true"});
  CHECK(wrong_type.wait(8s) == 69);
  CHECK(wrong_type.elapsed() < 5s);
  CHECK(lines_in(wrong_type.err()) <= 3);
}

TEST_CASE("redlock-run --elect: unreachable servers end with 69 after --unavailable-timeout",
          "[redis][cli][election]") {
  const auto k = key("run-elect-unreachable");
  Tool tool({"--redis", "redis://127.0.0.1:1", "--key", k, "--unavailable-timeout", "1s", "--elect",
             "a", "--", "true"});
  CHECK(tool.wait(10s) == 69);
  CHECK(tool.elapsed() >= 900ms);
  CHECK(lines_in(tool.err()) <= 4);  // as a plain run's; not one line per retry
}

TEST_CASE("redlock-run --elect: a lost term says why (expired for a paused server)",
          "[redis][cli][election]") {
  RedisServer server;
  const auto k = key("run-elect-reason");
  TempDir dir;
  Tool a({"--redis", uri(server), "--key", k, "--ttl", "1s", "--elect", "a", "--", "sh", "-c",
          "touch " + dir / "started" + "; exec sleep 30"});
  REQUIRE(command_started(a, dir / "started"));
  server.pause();
  CHECK(eventually([&] { return a.err().find("lost (") != std::string::npos; }, 10s));
  server.resume();
  CHECK_THAT(a.err(), Catch::Contains("lost (expired)"));
  CHECK_THAT(a.err(), !Catch::Contains("(refused)"));
  ::kill(a.pid(), SIGTERM);
  a.wait(20s);
}

TEST_CASE("redlock-run --elect: REDLOCK_VALIDITY_MS is the validity left, not the ttl",
          "[redis][cli][election]") {
  RedisServer server;
  const auto k = key("run-elect-validity");
  TempDir dir;
  Tool a({"--redis", uri(server), "--key", k, "--ttl", "2s", "--elect", "a", "--", "sh", "-c",
          "echo $REDLOCK_VALIDITY_MS > " + dir / "validity"});
  CHECK(a.wait() == 0);
  const long validity = std::stol("0" + slurp(dir / "validity"));
  CHECK(validity > 1000);
  CHECK(validity < 2000);  // 2000 less the drift allowance (22 ms) and the time the grant took
}

TEST_CASE("redlock-run --elect -v says who leads while a standby waits", "[redis][cli][election]") {
  RedisServer server;
  const auto k = key("run-elect-verbose");
  TempDir dir;
  Tool a({"--redis", uri(server), "--key", k, "--elect", "pod-a", "--", "sh", "-c",
          "touch " + dir / "started" + "; exec sleep 30"});
  REQUIRE(command_started(a, dir / "started"));
  Tool b({"--redis", uri(server), "--key", k, "--elect", "pod-b", "-v", "--", "true"});
  CHECK(eventually([&] { return b.err().find("waiting") != std::string::npos; }, 10s));
  CHECK_THAT(b.err(), Catch::Contains("led by pod-a"));
  ::kill(b.pid(), SIGTERM);
  CHECK(b.wait() == 128 + SIGTERM);
  ::kill(a.pid(), SIGTERM);
  a.wait();
}

#ifdef REDLOCK_RUN_TESTS_WITH_ZOOKEEPER
TEST_CASE(
    "redlock-run --zookeeper: the lease guard lets a healthy session's command run past "
    "its timeout, --elect exports the validity left",
    "[zookeeper][cli][election][slow]") {
  if (!redlock::test::ZooKeeperServer::available()) {
    if (std::getenv("CI")) FAIL("ZooKeeper is missing in CI");
    WARN("skipped: no java or ZooKeeper jar");
    return;
  }
  redlock::test::ZooKeeperServer server;
  const std::string uri = server.uri("/cli?session_timeout=2000");
  TempDir dir;
  const auto k = key("run-guard-zk");
  // 3 s: longer than the session timeout, which the session's background confirmations extend.
  Tool plain({"--zookeeper", uri, "--key", k, "--", "sleep", "3"});
  Tool elect({"--zookeeper", uri, "--key", k + "-e", "--elect", "a", "--", "sh", "-c",
              "echo $REDLOCK_VALIDITY_MS > " + dir / "validity" + "; sleep 3"});
  CHECK(plain.wait(30s) == 0);
  CHECK(elect.wait(30s) == 0);
  INFO(plain.err() << elect.err());
  CHECK_THAT(plain.err() + elect.err(), !Catch::Contains("lease guard"));
  const long validity = std::stol("0" + slurp(dir / "validity"));
  CHECK(validity > 0);
  CHECK(validity <= 2000);  // the session's, not the unused default --ttl (30000)
}
#endif
