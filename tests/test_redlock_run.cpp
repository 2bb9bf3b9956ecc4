// redlock-run, the command-line tool (examples/redlock_run.cpp), run as a separate process
// against real servers: exit statuses, the lock held while the command runs, contention, a lost
// lease (key deleted, server paused), signal forwarding, usage errors, no password in messages.
//
// The binary's path comes from the build: REDLOCK_RUN_PATH="$<TARGET_FILE:redlock-run>".
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/prctl.h>
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
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.hpp"

#ifndef REDLOCK_RUN_PATH
#error "REDLOCK_RUN_PATH must name the redlock-run binary (see tests/CMakeLists.txt)"
#endif

using namespace std::chrono_literals;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::ServerGroup;
using Clock = std::chrono::steady_clock;

namespace {

// A directory for markers and captured output, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "redlock-run-test-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

bool eventually(const std::function<bool()>& condition, Clock::duration timeout = 5s) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

// One redlock-run process: stdin /dev/null, stdout and stderr captured in files. Dies with the
// test process (PR_SET_PDEATHSIG), and is killed by the destructor if still running (its
// command then gets SIGTERM through redlock-run's own PR_SET_PDEATHSIG).
class Tool {
 public:
  explicit Tool(std::vector<std::string> args) {
    args.insert(args.begin(), REDLOCK_RUN_PATH);
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string out = files_ / "stdout";
    const std::string err = files_ / "stderr";
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(out_fd >= 0);
    REQUIRE(err_fd >= 0);
    REQUIRE(null_fd >= 0);
    const pid_t parent = ::getpid();
    started_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls from here to execv.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(SIGPIPE, &dfl, nullptr);
      sigset_t none;
      ::sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      if (::dup2(null_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) ::_exit(126);
      ::close_range(3, ~0U, 0);  // no test sockets in redlock-run (nor in its command)
      ::execv(argv[0], argv.data());
      ::_exit(126);
    }
    ::close(out_fd);
    ::close(err_fd);
    ::close(null_fd);
    REQUIRE(pid_ > 0);
  }
  ~Tool() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Tool(const Tool&) = delete;
  Tool& operator=(const Tool&) = delete;

  pid_t pid() const { return pid_; }

  bool running() {
    if (done_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) finish(status);
    return !done_;
  }

  // Waits for the exit. Returns the exit status; 1000 + N if redlock-run itself was killed by
  // signal N. Fails the test (and kills it) if it runs longer than `timeout`.
  int wait(Clock::duration timeout = 10s) {
    const auto deadline = Clock::now() + timeout;
    while (running()) {
      if (Clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        finish(status);
        FAIL("redlock-run still running after the timeout; stderr: " << err());
      }
      std::this_thread::sleep_for(5ms);
    }
    return status_;
  }

  // Start to exit (valid after wait()).
  Clock::duration elapsed() const { return ended_ - started_; }
  std::string out() const { return slurp(files_ / "stdout"); }
  std::string err() const { return slurp(files_ / "stderr"); }

 private:
  void finish(int status) {
    done_ = true;
    ended_ = Clock::now();
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
  }

  TempDir files_;
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = -1;
  Clock::time_point started_;
  Clock::time_point ended_;
};

// Runs redlock-run to completion. Returns its exit status; stderr in `err` if given.
int run(std::vector<std::string> args, std::string* err = nullptr) {
  Tool tool(std::move(args));
  const int status = tool.wait();
  if (err != nullptr) *err = tool.err();
  return status;
}

std::string uri(const RedisServer& server) {
  return "redis://127.0.0.1:" + std::to_string(server.port());
}

bool held(const RedisServer& server, const std::string& k) {
  return server.raw({"EXISTS", k}).integer() == 1;
}

// A command that marks `started`, then loops until a signal; SIGTERM makes it mark `term` and
// exit 0 (or exit `term_status`).
std::vector<std::string> looping_command(const TempDir& dir, int term_status = 0) {
  return {"sh", "-c",
          "trap 'touch " + dir / "term" + "; exit " + std::to_string(term_status) +
              "' TERM; touch " + dir / "started" + "; while :; do sleep 0.05; done"};
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

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
    REQUIRE(eventually([&] { return exists(env_file); }));
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
  REQUIRE(eventually([&] { return exists(started); }));
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
      REQUIRE(eventually([&] { return exists(a_started); }));
      // b may run only after a's command has finished.
      Tool b(args({"--wait", "5s", "--", "sh", "-c", "test -e " + a_done + " && touch " + b_ok}));
      CHECK(a.wait() == 0);
      CHECK(b.wait() == 0);
      CHECK(exists(b_ok));
      CHECK(server.raw({"EXISTS", k + ":queue", k + ":queue:info"}).integer() == 0);
    }
  }
  CHECK_FALSE(held(server, k));
}

TEST_CASE("redlock-run: a lost lease (key deleted) sends SIGTERM to the command; exit 70",
          "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-lost");
  Tool tool(std::vector<std::string>{"--redis", uri(server), "--key", k, "--ttl", "300ms", "--"} +
            looping_command(dir));
  REQUIRE(eventually([&] { return exists(dir / "started"); }));
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
  REQUIRE(eventually([&] { return exists(started); }));
  server.raw({"DEL", k});
  const auto deleted = Clock::now();
  CHECK(tool.wait(5s) == 70);
  CHECK(Clock::now() - deleted >= 400ms);
  CHECK(Clock::now() - deleted < 4s);
  const std::string err = tool.err();
  CHECK_THAT(err, Catch::Contains("lost"));
  CHECK_THAT(err, Catch::Contains("SIGKILL"));
}

TEST_CASE("redlock-run: a paused server lets the lease expire; exit 70", "[redis][cli]") {
  RedisServer server;
  TempDir dir;
  const auto k = key("run-paused");
  Tool tool(std::vector<std::string>{"--redis", uri(server), "--key", k, "--ttl", "300ms", "--"} +
            looping_command(dir));
  REQUIRE(eventually([&] { return exists(dir / "started"); }));
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
  REQUIRE(eventually([&] { return exists(dir / "started"); }));
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

TEST_CASE("redlock-run usage errors exit 64", "[redis][cli]") {
  RedisServer server;
  const auto k = key("run-usage");
  const std::string r = uri(server);
  std::string err;
  SECTION("bad durations") {
    for (const char* bad : {"5x", "abc", "10", "1.5s", "-1s", "", "99999999999999h"}) {
      CHECK(run({"--redis", r, "--key", k, "--ttl", bad, "--", "true"}, &err) == 64);
      CHECK_THAT(err, Catch::Contains("--ttl"));
    }
    CHECK(run({"--redis", r, "--key", k, "--ttl", "0s", "--", "true"}, &err) == 64);
    CHECK(run({"--redis", r, "--key", k, "--wait", "soon", "--", "true"}, &err) == 64);
    CHECK_THAT(err, Catch::Contains("500ms, 30s, 2m or 1h"));
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
  CHECK(run({"--redis", "redis://" + address, "--key", key("run-down"), "--", "touch", ran},
            &err) == 69);
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
  collect({"--redis", "redis://:" + password + "@127.0.0.1:1", "--key", k, "--", "true"}, 69);
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
    REQUIRE(eventually([&] { return exists(dir / "started"); }));
    server.raw_pipeline({{"AUTH", password}, {"DEL", k}});
    CHECK(tool.wait(5s) == 70);
    stderrs.push_back(tool.err());
  }

  REQUIRE(stderrs.size() == 9);
  CHECK(stderrs[0].empty());
  for (std::size_t i = 1; i < stderrs.size(); ++i) {
    INFO("stderr #" << i << ": " << stderrs[i]);
    CHECK_FALSE(stderrs[i].empty());
    CHECK_THAT(stderrs[i], !Catch::Contains(password));
  }
}
