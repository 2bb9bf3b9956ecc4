// redlock-run's flags (issue 44, "--elect and the flags"): combinations that are not documented
// are refused naming both flags, a refused repeated --key names the key that is held, a plain
// run on a semaphore's key is refused, messages name the user's flags and keys, --status sees
// elections and readers, --exclusive is the preferring writer, and --leader/--status print ids
// unambiguously, as text or JSON.
//
// The helpers (Tool, TempDir, run...) are in redlock_run_tool.hpp, shared with
// test_redlock_run.cpp.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <redlock/election.hpp>  // a candidate for --leader and --status

#include "redlock_run_tool.hpp"  // Tool, TempDir, run, uri, ...
#include "support/eventually.hpp"
#include "support/redis_server.hpp"

using redlock::test::eventually;
using redlock::test::key;
using namespace redlock_run_test;

namespace {

using Args = std::vector<std::string>;

// How many times `needle` occurs in `text`.
std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// A --hold process on `args`, and a wait until it holds (its "held" line on stdout).
std::unique_ptr<Tool> holding(const Args& args) {
  auto tool =
      std::make_unique<Tool>(args + Args{"--hold"}, std::vector<std::string>{}, Input::pipe);
  REQUIRE(eventually([&] { return !tool->out().empty() || !tool->running(); }, 20s));
  REQUIRE(tool->running());
  return tool;
}

}  // namespace

TEST_CASE("redlock-run refuses combined modes and kinds of lock (64), naming both flags",
          "[redis][cli][flags]") {
  RedisServer server;
  const auto k = key("flags-modes");
  const Args base = {"--redis", uri(server), "--key", k};
  const std::vector<std::pair<Args, Args>> refused = {
      {{"--elect", "a", "--hold"}, {"--elect", "--hold"}},
      {{"--hold", "--elect", "a", "--", "true"}, {"--elect", "--hold"}},
      {{"--elect", "a", "--shared", "--", "true"}, {"--elect", "--shared"}},
      {{"--key", k + "b", "--elect", "a", "--", "true"}, {"--elect", "--key"}},
      {{"--elect", "a", "--leader"}, {"--elect", "--leader"}},
      {{"--status", "--leader"}, {"--status", "--leader"}},
      {{"--hold", "--status"}, {"--hold", "--status"}},
      {{"--leader", "--limit", "2"}, {"--leader", "--limit"}},
      {{"--status", "--shared"}, {"--status", "--shared"}},
      {{"--shared", "--exclusive", "--", "true"}, {"--shared", "--exclusive"}},
      {{"--elect", "a", "--elect", "b", "--", "true"}, {"--elect", "twice"}},
      {{"-w", "1s", "-n", "--", "true"}, {"-w", "-n"}},
      {{"--format", "json", "--", "true"}, {"--format", "--status"}},
  };
  for (const auto& [args, named] : refused) {
    std::string err;
    const int status = run(base + args, &err);
    INFO("args: " << Catch::Detail::stringify(args) << "; stderr: " << err);
    CHECK(status == 64);
    for (const auto& flag : named) CHECK_THAT(err, Catch::Contains(flag));
    CHECK(count(err, "\n") == 2);  // the message and "Try 'redlock-run --help'"
  }
  CHECK_FALSE(held(server, k));
}

TEST_CASE("redlock-run: a refused repeated --key names the key held elsewhere",
          "[redis][cli][flags]") {
  RedisServer server;
  const auto b2 = key("flags-b2");
  const auto c2 = key("flags-c2");
  REQUIRE(server.raw({"SET", b2, "someone-else", "PX", "10000"}).str() == "OK");
  std::string err;
  CHECK(run({"--redis", uri(server), "--key", c2, "--key", b2, "-n", "--", "true"}, &err) == 75);
  CHECK_THAT(err, Catch::Contains(b2 + " is held elsewhere"));
  CHECK_THAT(err, !Catch::Contains(c2));
}

TEST_CASE("redlock-run without --limit on a semaphore's held key is refused (64)",
          "[redis][cli][flags][semaphore]") {
  RedisServer server;
  const auto k = key("flags-sem");
  const Args base = {"--redis", uri(server), "--key", k};
  auto p1 = holding(base + Args{"--limit", "2"});
  auto p2 = holding(base + Args{"--limit", "2"});
  std::string err;
  CHECK(run(base + Args{"-n", "--", "true"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("--limit 2"));
  CHECK_FALSE(held(server, k));
  Tool json(base + Args{"--status", "--format", "json"});
  CHECK(json.wait() == 0);
  CHECK_THAT(json.out(), Catch::StartsWith("{\"key\":\"" + k +
                                           "\",\"kind\":\"semaphore\","
                                           "\"held\":true,\"limit\":2,\"permits_held\":2,"));
  p1->close_stdin();
  p2->close_stdin();
  CHECK(p1->wait() == 0);
  CHECK(p2->wait() == 0);
  // No permit held: the key may be a plain lock again.
  CHECK(run(base + Args{"-n", "--", "true"}) == 0);
}

TEST_CASE("redlock-run messages name the user's flags and keys, never internals",
          "[redis][cli][flags]") {
  RedisServer s1;
  RedisServer s2;
  const auto k = key("flags-words");
  std::string err;
  CHECK(run({"--redis", uri(s1), "--redis", uri(s2), "--key", k, "--shared", "--fencing", "--",
             "true"},
            &err) == 64);
  CHECK_THAT(err, Catch::Contains("--shared") && Catch::Contains("--fencing"));
  CHECK_THAT(err, !Catch::Contains("options.") && !Catch::Contains("--key or --ttl"));
  CHECK(run({"--redis", uri(s1), "--key", k, "--key", k, "--", "true"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("--key '" + k + "' is given twice"));
  CHECK(run({"--redis", uri(s1), "--key", "", "--", "true"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("--key needs"));
}

TEST_CASE("redlock-run --elect on a stopped server names KEY, not its helper key",
          "[redis][cli][flags][election]") {
  std::string address;
  {
    RedisServer gone;
    address = "redis://127.0.0.1:" + std::to_string(gone.port());
  }
  const auto k = key("flags-gone");
  Tool tool({"--redis", address, "--key", k, "--unavailable-timeout", "1s", "--elect", "a", "--",
             "true"});
  REQUIRE(eventually([&] { return tool.err().find(k) != std::string::npos; }, 10s));
  ::kill(tool.pid(), SIGTERM);
  tool.wait();
  CHECK_THAT(tool.err(), !Catch::Contains(":leader"));
}

TEST_CASE("redlock-run: a failed wait on a stopped server says it once", "[redis][cli][flags]") {
  std::string address;
  {
    RedisServer gone;
    address = "127.0.0.1:" + std::to_string(gone.port());
  }
  std::string err;
  CHECK(run({"--redis", "redis://" + address, "--key", key("flags-once"), "--unavailable-timeout",
             "500ms", "--", "true"},
            &err) == 69);
  INFO("stderr: " << err);
  CHECK(count(err, "unreachable") == 1);
}

TEST_CASE("redlock-run --status shows an election's leader and term, and a shared lock's readers",
          "[redis][cli][flags][election]") {
  RedisServer server;
  const auto k = key("flags-status");
  redlock::Election candidate(redlock::Client(server.endpoint()), k, "pod-7");
  const std::uint64_t term = candidate.campaign();
  Tool election({"--redis", uri(server), "--key", k, "--status"});
  CHECK(election.wait() == 0);
  CHECK_THAT(election.out(),
             Catch::Contains("leader pod-7") && Catch::Contains("term " + std::to_string(term)));
  Tool json({"--redis", uri(server), "--key", k, "--status", "--format", "json"});
  CHECK(json.wait() == 0);
  CHECK(json.out() == "{\"key\":\"" + k +
                          "\",\"kind\":\"election\",\"held\":true,"
                          "\"leader\":\"pod-7\",\"term\":" +
                          std::to_string(term) + "}\n");

  const auto r = key("flags-readers");
  const Args shared = {"--redis", uri(server), "--key", r, "--shared"};
  auto r1 = holding(shared);
  auto r2 = holding(shared);
  Tool readers({"--redis", uri(server), "--key", r, "--status"});
  CHECK(readers.wait() == 0);
  CHECK_THAT(readers.out(), Catch::Contains("held by 2 readers"));
  Tool readers_json({"--redis", uri(server), "--key", r, "--status", "--format", "json"});
  CHECK(readers_json.wait() == 0);
  CHECK_THAT(readers_json.out(), Catch::StartsWith("{\"key\":\"" + r +
                                                   "\",\"kind\":\"lock\","
                                                   "\"held\":true,\"servers\":[{") &&
                                     Catch::Contains("\"readers\":2}]}\n"));
}

TEST_CASE("redlock-run --exclusive: a waiting writer holds new --shared readers back",
          "[redis][cli][flags]") {
  RedisServer server;
  const auto k = key("flags-exclusive");
  const Args base = {"--redis", uri(server), "--key", k};
  auto reader = holding(base + Args{"--shared"});
  TempDir dir;
  Tool writer(base + Args{"--exclusive", "-w", "30s", "--", "touch", dir / "wrote"});
  // While it waits, a new reader is refused (a plain run would let it in).
  CHECK(eventually([&] { return run(base + Args{"--shared", "-n", "--", "true"}) == 75; }, 10s));
  CHECK(writer.running());
  reader->close_stdin();
  CHECK(reader->wait() == 0);
  CHECK(writer.wait(20s) == 0);
  CHECK(exists(dir / "wrote"));
}

TEST_CASE("redlock-run --leader prints ids unambiguously, and JSON with --format json",
          "[redis][cli][flags][election]") {
  RedisServer server;
  const auto k = key("flags-leader");
  std::string err;
  CHECK(run({"--redis", uri(server), "--key", k, "--elect", "pod 7", "--", "true"}, &err) == 64);
  CHECK_THAT(err, Catch::Contains("--elect"));
  CHECK(run({"--redis", uri(server), "--key", k, "--elect", "a\nb", "--", "true"}) == 64);
  // An id with a space and a newline, from a library candidate: one quoted word.
  redlock::Election candidate(redlock::Client(server.endpoint()), k, "pod 7\nx\"y");
  const std::string term = std::to_string(candidate.campaign());
  Tool text({"--redis", uri(server), "--key", k, "--leader"});
  CHECK(text.wait() == 0);
  CHECK(text.out() == "\"pod 7\\nx\\\"y\" " + term + "\n");
  Tool json({"--redis", uri(server), "--key", k, "--leader", "--format", "json"});
  CHECK(json.wait() == 0);
  CHECK(json.out() ==
        "{\"key\":\"" + k + "\",\"leader\":\"pod 7\\nx\\\"y\",\"term\":" + term + "}\n");
  candidate.resign();
  Tool nobody({"--redis", uri(server), "--key", k, "--leader", "--format=json"});
  CHECK(nobody.wait() == 1);
  CHECK(nobody.out() == "{\"key\":\"" + k + "\",\"leader\":null,\"term\":null}\n");
}
