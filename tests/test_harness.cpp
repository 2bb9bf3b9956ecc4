// Tests of the test harness itself (tests/support/redis_server.*): real redis-server processes.
#include <netinet/in.h>  // sockaddr_in
#include <signal.h>      // kill
#include <sys/socket.h>  // socket, bind, listen
#include <sys/stat.h>    // stat
#include <unistd.h>      // close, getpid

#include <hiredis/hiredis.h>
#include <catch2/catch.hpp>

#include <cerrno>      // errno, ESRCH
#include <chrono>      // std::chrono
#include <cstdint>     // std::uint16_t
#include <cstdlib>     // std::getenv
#include <filesystem>  // std::filesystem
#include <set>         // std::set
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string
#include <thread>      // std::thread
#include <vector>      // std::vector

#include "support/redis_server.hpp"

namespace {

namespace fs = std::filesystem;
using redlock::Reply;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::run_prefix;
using redlock::test::ServerGroup;
using redlock::test::ServerOptions;
using namespace std::chrono_literals;

bool is_pong(const Reply& r) { return r.type() == Reply::Type::status && r.str() == "PONG"; }

bool process_gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

// Number of temp dirs this process has under the directory RedisServer uses.
int own_temp_dirs() {
  const char* env = std::getenv("TMPDIR");
  const fs::path base = (env != nullptr && *env != '\0') ? fs::path(env) : fs::path("/tmp");
  const std::string prefix = "redlock-test-" + std::to_string(::getpid()) + "-";
  int n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

// (seconds, microseconds) of the server's TIME, in microseconds.
long long server_time_us(const RedisServer& server) {
  const Reply r = server.raw({"TIME"});
  REQUIRE(r.type() == Reply::Type::array);
  REQUIRE(r.elements().size() == 2);
  return std::stoll(r.elements()[0].str()) * 1000000 + std::stoll(r.elements()[1].str());
}

}  // namespace

TEST_CASE("RedisServer starts and answers raw commands", "[harness][redis]") {
  RedisServer server;
  CHECK(server.running());
  CHECK(server.pid() > 0);
  CHECK(server.port() >= 20000);
  CHECK(server.port() < 60000);
  CHECK(server.unix_socket().empty());
  CHECK(fs::is_directory(server.dir()));
  CHECK(fs::path(server.dir()).filename().string().rfind("redlock-test-", 0) == 0);

  const redlock::Endpoint ep = server.endpoint();
  CHECK(ep.host == "127.0.0.1");
  CHECK(ep.port == server.port());
  CHECK(ep.unix_socket.empty());
  CHECK(ep.connect_timeout == 200ms);
  CHECK(ep.command_timeout == 200ms);

  CHECK(is_pong(server.raw({"PING"})));

  SECTION("binary-safe strings, nil, integers, arrays, errors") {
    const std::string k = key("binary");
    const std::string value("a\0b\r\nc", 6);
    CHECK(server.raw({"SET", k, value}).str() == "OK");
    const Reply got = server.raw({"GET", k});
    CHECK(got.type() == Reply::Type::string);
    CHECK(got.str() == value);
    CHECK(server.raw({"GET", key("missing")}).is_nil());
    CHECK(server.raw({"INCR", key("counter")}).integer() == 1);
    const Reply arr = server.raw({"MGET", k, key("missing")});
    REQUIRE(arr.type() == Reply::Type::array);
    REQUIRE(arr.elements().size() == 2);
    CHECK(arr.elements()[0].str() == value);
    CHECK(arr.elements()[1].is_nil());
    const Reply err = server.raw({"NO-SUCH-COMMAND"});
    CHECK(err.is_error());
    CHECK(err.str().find("unknown command") != std::string::npos);
  }

  SECTION("DEBUG is enabled for local connections") {
    CHECK(server.raw({"DEBUG", "SLEEP", "0"}).str() == "OK");
  }

  SECTION("raw_pipeline sends several commands on one connection") {
    const auto replies = server.raw_pipeline({{"MULTI"}, {"INCR", key("p")}, {"EXEC"}});
    REQUIRE(replies.size() == 3);
    CHECK(replies[0].str() == "OK");
    CHECK(replies[1].str() == "QUEUED");
    REQUIRE(replies[2].elements().size() == 1);
    CHECK(replies[2].elements()[0].integer() == 1);
  }
}

TEST_CASE("ServerGroup of 5 servers all answer", "[harness][redis]") {
  ServerGroup group(5);
  REQUIRE(group.size() == 5);
  const std::vector<redlock::Endpoint> endpoints = group.endpoints();
  REQUIRE(endpoints.size() == 5);
  std::set<int> ports;
  std::set<std::string> dirs;
  for (std::size_t i = 0; i < group.size(); ++i) {
    CHECK(endpoints[i].port == group[i].port());
    CHECK(is_pong(group[i].raw({"PING"})));
    ports.insert(group[i].port());
    dirs.insert(group[i].dir());
  }
  CHECK(ports.size() == 5);
  CHECK(dirs.size() == 5);
}

TEST_CASE("pause makes a server hang and resume brings it back", "[harness][redis][fault]") {
  RedisServer server;
  server.pause();
  CHECK(server.running());
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(server.raw({"PING"}, 200ms), std::runtime_error);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  server.resume();
  CHECK(is_pong(server.raw({"PING"})));
}

TEST_CASE("kill9 and restart", "[harness][redis][fault]") {
  SECTION("without persistence the data is gone") {
    RedisServer server;
    const int port = server.port();
    const pid_t old_pid = server.pid();
    REQUIRE(server.raw({"SET", key("k"), "v"}).str() == "OK");
    server.kill9();
    CHECK_FALSE(server.running());
    CHECK(server.pid() == -1);
    CHECK(process_gone(old_pid));
    CHECK_THROWS_AS(server.raw({"PING"}), std::runtime_error);
    server.kill9();  // no-op when not running
    server.restart();
    CHECK(server.running());
    CHECK(server.port() == port);
    CHECK(server.pid() != old_pid);
    CHECK(server.raw({"GET", key("k")}).is_nil());
  }

  SECTION("with persistence an acknowledged SET survives") {
    ServerOptions options;
    options.persistence = true;
    RedisServer server(options);
    REQUIRE(server.raw({"SET", key("k"), "v"}).str() == "OK");
    server.kill9();
    server.restart();
    CHECK(server.raw({"GET", key("k")}).str() == "v");
  }

  SECTION("restart of a running server kills it first") {
    RedisServer server;
    const pid_t old_pid = server.pid();
    server.restart();
    CHECK(process_gone(old_pid));
    CHECK(is_pong(server.raw({"PING"})));
  }

  SECTION("restart of a paused server") {
    RedisServer server;
    server.pause();
    server.restart();
    CHECK(is_pong(server.raw({"PING"})));
  }
}

TEST_CASE("restart waits for a port that is briefly taken", "[harness][redis][fault]") {
  RedisServer server;
  const int port = server.port();
  server.kill9();

  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  std::thread releaser([fd] {
    std::this_thread::sleep_for(300ms);
    ::close(fd);
  });
  const auto start = std::chrono::steady_clock::now();
  server.restart();
  releaser.join();
  CHECK(std::chrono::steady_clock::now() - start >= 250ms);
  CHECK(server.port() == port);
  CHECK(is_pong(server.raw({"PING"})));
}

TEST_CASE("running() notices a server that exits on its own", "[harness][redis][fault]") {
  RedisServer server;
  CHECK_THROWS(server.raw({"SHUTDOWN", "NOSAVE"}));  // the connection just closes
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (server.running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK_FALSE(server.running());
  CHECK(server.pid() == -1);
  server.restart();
  CHECK(is_pong(server.raw({"PING"})));
}

TEST_CASE("unix socket", "[harness][redis]") {
  ServerOptions options;
  options.unix_socket = true;
  RedisServer server(options);
  REQUIRE_FALSE(server.unix_socket().empty());
  CHECK(fs::path(server.unix_socket()).parent_path() == fs::path(server.dir()));
  struct stat st {};
  REQUIRE(::stat(server.unix_socket().c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(server.unix_endpoint().unix_socket == server.unix_socket());

  timeval tv{1, 0};
  redisContext* c = redisConnectUnixWithTimeout(server.unix_socket().c_str(), tv);
  REQUIRE(c != nullptr);
  CHECK(c->err == 0);
  if (c->err == 0) {
    auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
    REQUIRE(reply != nullptr);
    CHECK(reply->type == REDIS_REPLY_STATUS);
    CHECK(std::string(reply->str, reply->len) == "PONG");
    freeReplyObject(reply);
  }
  redisFree(c);

  SECTION("the socket comes back after restart") {
    server.kill9();
    server.restart();
    timeval tv2{1, 0};
    redisContext* c2 = redisConnectUnixWithTimeout(server.unix_socket().c_str(), tv2);
    REQUIRE(c2 != nullptr);
    CHECK(c2->err == 0);
    redisFree(c2);
  }
}

TEST_CASE("faketime makes the server's clock run 2x", "[harness][redis]") {
  ServerOptions options;
  options.faketime = "+0 x2";
  RedisServer server(options);
  const auto real_start = std::chrono::steady_clock::now();
  const long long fake_start = server_time_us(server);
  std::this_thread::sleep_for(600ms);
  const long long fake_end = server_time_us(server);
  const auto real_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::steady_clock::now() - real_start)
                           .count();
  const double ratio = static_cast<double>(fake_end - fake_start) / static_cast<double>(real_us);
  INFO("fake/real ratio " << ratio);
  CHECK(ratio > 1.5);
  CHECK(ratio < 2.6);

  SECTION("expiry follows the fast clock") {
    REQUIRE(server.raw({"SET", key("ttl"), "v", "PX", "600"}).str() == "OK");
    std::this_thread::sleep_for(450ms);  // 900 ms of server time
    CHECK(server.raw({"GET", key("ttl")}).is_nil());
  }
}

TEST_CASE("requirepass via extra_args", "[harness][redis]") {
  ServerOptions options;
  options.extra_args = {"--requirepass", "s3cret"};
  RedisServer server(options);  // NOAUTH counts as "up"
  const Reply denied = server.raw({"PING"});
  CHECK(denied.is_error());
  CHECK(denied.str().rfind("NOAUTH", 0) == 0);
  const auto replies = server.raw_pipeline({{"AUTH", "s3cret"}, {"PING"}});
  REQUIRE(replies.size() == 2);
  CHECK(replies[0].str() == "OK");
  CHECK(is_pong(replies[1]));
  CHECK(server.endpoint().password.empty());
}

TEST_CASE("a server that cannot start throws with its output", "[harness][redis]") {
  const int dirs_before = own_temp_dirs();
  ServerOptions options;
  options.extra_args = {"--no-such-directive", "1"};
  try {
    RedisServer server(options);
    FAIL("RedisServer started despite a bad directive");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("no-such-directive") != std::string::npos);
  }
  CHECK(own_temp_dirs() == dirs_before);
}

TEST_CASE("destruction kills the server and removes its dir", "[harness][redis]") {
  pid_t pid = -1;
  std::string dir;
  const bool paused = GENERATE(false, true);
  {
    ServerOptions options;
    options.persistence = true;
    options.unix_socket = true;
    RedisServer server(options);
    pid = server.pid();
    dir = server.dir();
    REQUIRE(server.raw({"SET", key("k"), "v"}).str() == "OK");
    if (paused) server.pause();
  }
  CHECK(process_gone(pid));
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("key() carries run_prefix()", "[harness]") {
  const std::string& prefix = run_prefix();
  CHECK(prefix.rfind("rltest:" + std::to_string(::getpid()) + ":", 0) == 0);
  CHECK(prefix.back() == ':');
  CHECK(prefix.size() > std::string("rltest::").size() + std::to_string(::getpid()).size() + 8);
  CHECK(&run_prefix() == &prefix);
  CHECK(key("x") == prefix + "x");
  CHECK(key("") == prefix);
}
