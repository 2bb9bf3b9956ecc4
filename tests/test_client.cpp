// Client: connections, errors, AUTH/SELECT, unix sockets, reconnects, NOSCRIPT, binary safety.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::ServerOptions;
using Clock = std::chrono::steady_clock;

namespace {

template <class F>
std::chrono::milliseconds time_of(F&& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

// Runs f, which must throw E; returns the message.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return {};
}

}  // namespace

TEST_CASE("Client pings and reads the server version", "[redis][client]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  REQUIRE_NOTHROW(client.ping());
  CHECK(client.server_version().rfind("7.", 0) == 0);
  CHECK(client.idle_connections() == 1);
}

TEST_CASE("Client rejects unusable endpoints with the field's name", "[unit][client]") {
  redlock::Endpoint ep;
  ep.port = 0;
  CHECK_THROWS_WITH(redlock::Client(ep), Catch::Contains("port"));
  ep = {};
  ep.command_timeout = 0ms;
  CHECK_THROWS_WITH(redlock::Client(ep), Catch::Contains("command_timeout"));
  ep = {};
  ep.host.clear();
  CHECK_THROWS_WITH(redlock::Client(ep), Catch::Contains("host"));
  ep = {};
  ep.database = -1;
  CHECK_THROWS_WITH(redlock::Client(ep), Catch::Contains("database"));
  // A reply cap of 0 would refuse every reply that has what it bounds.
  for (std::size_t redlock::ReplyLimits::*cap :
       {&redlock::ReplyLimits::max_bulk_bytes, &redlock::ReplyLimits::max_elements,
        &redlock::ReplyLimits::max_reply_elements, &redlock::ReplyLimits::max_reply_bytes}) {
    ep = {};
    ep.reply_limits.*cap = 0;
    CHECK_THROWS_AS(redlock::Client(ep), std::invalid_argument);
  }
  ep = {};
  ep.reply_limits.max_reply_bytes = 0;
  CHECK_THROWS_WITH(redlock::Client(ep), Catch::Contains("reply_limits.max_reply_bytes"));
}

TEST_CASE("Client to a killed server throws ConnectionError naming the address",
          "[redis][client][fault]") {
  RedisServer server;
  const auto ep = server.endpoint();
  server.kill9();
  redlock::Client client(ep);
  std::string what;
  const auto elapsed =
      time_of([&] { what = message_of<redlock::ConnectionError>([&] { client.ping(); }); });
  CHECK(what.find(ep.address()) != std::string::npos);
  CHECK(elapsed < 1000ms);
}

TEST_CASE("Client to a paused server times out within about its command timeout",
          "[redis][client][fault]") {
  RedisServer server;
  auto ep = server.endpoint();
  ep.command_timeout = 200ms;
  redlock::Client client(ep);
  client.ping();  // a pooled connection exists
  server.pause();
  std::string what;
  const auto elapsed =
      time_of([&] { what = message_of<redlock::TimeoutError>([&] { client.ping(); }); });
  CHECK(elapsed >= 150ms);
  CHECK(elapsed < 1500ms);
  CHECK(what.find(ep.address()) != std::string::npos);
  // A fresh connection: the kernel accepts it, the paused server never answers.
  redlock::Client fresh(ep);
  const auto elapsed2 = time_of([&] { CHECK_THROWS_AS(fresh.ping(), redlock::TimeoutError); });
  CHECK(elapsed2 < 1500ms);
  server.resume();
  CHECK_NOTHROW(client.ping());  // the timed-out connection was discarded; a new one works
}

TEST_CASE("Client authenticates as an ACL user and reports a wrong password clearly",
          "[redis][client]") {
  ServerOptions options;
  options.extra_args = {"--user", "alice", "on", ">alice-pw-123", "~*", "&*", "+@all"};
  RedisServer server(options);
  auto ep = server.endpoint();
  ep.username = "alice";
  ep.password = "alice-pw-123";
  redlock::Client good(ep);
  REQUIRE_NOTHROW(good.ping());
  CHECK(good.command({"ACL", "WHOAMI"}).str() == "alice");

  ep.password = "not-the-password-987";
  redlock::Client bad(ep);
  const auto what = message_of<redlock::ServerError>([&] { bad.ping(); });
  CHECK(what.find("WRONGPASS") != std::string::npos);
  CHECK(what.find("password") != std::string::npos);
  CHECK(what.find("not-the-password-987") == std::string::npos);
  CHECK(what.find(ep.address()) != std::string::npos);
  CHECK(what.find(".;") == std::string::npos);  // the server's sentence, then the hint
}

TEST_CASE("A username without a password authenticates as that user (AUTH user \"\")",
          "[redis][client][acl]") {
  ServerOptions options;
  options.extra_args = {"--user", "app", "on", "nopass",     "~*", "&*", "+@all",
                        "--user", "ops", "on", ">ops-pw-77", "~*", "&*", "+@all"};
  RedisServer server(options);
  const std::string authority = "127.0.0.1:" + std::to_string(server.port());
  // A nopass user accepts the empty password: the connection runs as `app`, not `default`.
  redlock::Client app(redlock::Endpoint::parse("redis://app@" + authority));
  REQUIRE_NOTHROW(app.ping());
  CHECK(app.command({"ACL", "WHOAMI"}).str() == "app");
  // A user with a password refuses it, and says so; it never silently runs as `default`.
  redlock::Client ops(redlock::Endpoint::parse("redis://ops@" + authority));
  const auto what = message_of<redlock::ServerError>([&] { ops.ping(); });
  CHECK(what.find("WRONGPASS") != std::string::npos);
  CHECK(what.find("AUTH") != std::string::npos);
}

TEST_CASE("Client uses legacy AUTH when only a password is set", "[redis][client]") {
  ServerOptions options;
  options.extra_args = {"--requirepass", "legacy-secret-42"};
  RedisServer server(options);
  auto ep = server.endpoint();
  redlock::Client anonymous(ep);
  const auto what = message_of<redlock::ServerError>([&] { anonymous.ping(); });
  CHECK(what.find("NOAUTH") != std::string::npos);
  ep.password = "legacy-secret-42";
  redlock::Client client(ep);
  CHECK_NOTHROW(client.ping());
}

TEST_CASE("Client selects its database", "[redis][client]") {
  RedisServer server;
  auto ep = server.endpoint();
  ep.database = 3;
  redlock::Client db3(ep);
  const auto k = key("select");
  db3.command({"SET", k, "in-three"});
  redlock::Client db0(server.endpoint());
  CHECK(db0.command({"GET", k}).is_nil());
  CHECK(db3.command({"GET", k}).str() == "in-three");
}

TEST_CASE("Client connects over a unix socket", "[redis][client]") {
  ServerOptions options;
  options.unix_socket = true;
  RedisServer server(options);
  redlock::Client client(server.unix_endpoint());
  CHECK_NOTHROW(client.ping());
  CHECK(client.endpoint().address().rfind("unix:", 0) == 0);
}

TEST_CASE("Client reconnects after the server restarts", "[redis][client][fault]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  client.ping();
  server.kill9();
  CHECK_THROWS_AS(client.ping(), redlock::ConnectionError);
  server.restart();
  CHECK_NOTHROW(client.ping());
  // A pooled connection left over from before a restart is retried on a fresh one.
  server.kill9();
  server.restart();
  CHECK_NOTHROW(client.ping());
}

TEST_CASE("Client reconnects after CLIENT KILL", "[redis][client][fault]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  client.ping();
  server.raw({"CLIENT", "KILL", "TYPE", "normal"});
  CHECK_NOTHROW(client.ping());
}

TEST_CASE("Writing to a connection the server closed does not raise SIGPIPE",
          "[redis][client][fault]") {
  RedisServer server;
  // In a child with SIGPIPE's default action (kill the process), like a program that never
  // thought about it: the library must not die writing to a dead socket.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    signal(SIGPIPE, SIG_DFL);
    int rc = 1;
    try {
      redlock::Client client(server.endpoint());
      const std::string big(4 << 20, 'x');  // several writes: the RST lands mid-way
      for (int i = 0; i < 5; ++i) {
        client.ping();  // a pooled connection
        server.raw({"CLIENT", "KILL", "TYPE", "normal"});
        std::this_thread::sleep_for(20ms);
        try {
          client.pipeline({{"SET", "rltest:sigpipe", big}, {"SET", "rltest:sigpipe", big}});
        } catch (const redlock::Error&) {
        }
      }
      rc = 0;
    } catch (...) {
    }
    _exit(rc);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK_FALSE(WIFSIGNALED(status));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("Client falls back to EVAL after SCRIPT FLUSH", "[redis][client]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const redlock::Script script("return redis.call('incr', KEYS[1]) + tonumber(ARGV[1])");
  const auto k = key("noscript");
  CHECK(client.eval(script, {k}, {"10"}).integer() == 11);
  CHECK(client.eval(script, {k}, {"10"}).integer() == 12);
  server.raw({"SCRIPT", "FLUSH"});
  CHECK(client.eval(script, {k}, {"10"}).integer() == 13);
  // After a restart (script cache empty, new connection) too.
  server.kill9();
  server.restart();
  CHECK(client.eval(script, {k}, {"0"}).integer() == 1);
  CHECK(server.raw({"SCRIPT", "EXISTS", script.sha1()}).elements().at(0).integer() == 1);
}

TEST_CASE("Script SHA1 matches the server's", "[redis][client]") {
  RedisServer server;
  const redlock::Script script("return 1");
  CHECK(server.raw({"SCRIPT", "LOAD", script.body()}).str() == script.sha1());
}

TEST_CASE("Client sends keys and values binary-safe", "[redis][client]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const std::string nasty_key = key(std::string("sp ace %s %n \0nul\r\n", 19));
  const std::string nasty_value("v\0a%sl\xff", 8);
  REQUIRE(nasty_key.find('\0') != std::string::npos);
  client.command({"SET", nasty_key, nasty_value});
  CHECK(client.command({"GET", nasty_key}).str() == nasty_value);
  CHECK(server.raw({"STRLEN", nasty_key}).integer() == 8);
  CHECK(server.raw({"EXISTS", key("sp ace %s %n ")}).integer() == 0);
}

TEST_CASE("Client pipelines commands and returns error replies in place", "[redis][client]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("pipe");
  const auto replies =
      client.pipeline({{"SET", k, "1"}, {"INCR", k}, {"HSET", k, "f", "v"}, {"GET", k}});
  REQUIRE(replies.size() == 4);
  CHECK(replies[0].str() == "OK");
  CHECK(replies[1].integer() == 2);
  CHECK(replies[2].is_error());
  CHECK(replies[2].str().rfind("WRONGTYPE", 0) == 0);
  CHECK(replies[3].str() == "2");
  CHECK_THROWS_AS(client.command({"HSET", k, "f", "v"}), redlock::ServerError);
  CHECK_THROWS_AS(client.command({}), std::invalid_argument);
  // Commands that would change a pooled connection's state for the locks are refused.
  CHECK_THROWS_WITH(client.command({"select", "1"}),
                    Catch::Contains("SELECT") || Catch::Contains("select"));
  CHECK_THROWS_AS(client.command({"MULTI"}), std::invalid_argument);
  CHECK_THROWS_AS(client.command({"CLIENT", "REPLY", "OFF"}), std::invalid_argument);
  CHECK_THROWS_AS(client.pipeline({{"GET", k}, {"SUBSCRIBE", "c"}}), std::invalid_argument);
  CHECK(client.command({"GET", k}).str() == "2");  // still database 0, still request/reply
}

TEST_CASE("Client copies share one pool and are safe across threads", "[redis][client]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const auto k = key("threads");
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([copy = client, &k] {
      for (int i = 0; i < 200; ++i) copy.command({"INCR", k});
    });
  }
  for (auto& t : threads) t.join();
  CHECK(client.command({"GET", k}).str() == "1600");
  redlock::Client copy = client;
  CHECK(copy.same_pool(client));
  CHECK(client.idle_connections() <= 16);
  CHECK(client.idle_connections() >= 1);
}

TEST_CASE("The log hook receives messages and a throwing handler is contained", "[redis][client]") {
  std::atomic<int> calls{0};
  redlock::set_log_handler([&](redlock::LogLevel, std::string_view) {
    ++calls;
    throw std::runtime_error("handler failure");
  });
  {
    RedisServer server;
    redlock::Client client(server.endpoint());
    client.ping();  // "connected" at debug level
  }
  redlock::set_log_handler(nullptr);
  CHECK(calls.load() >= 1);
  CHECK(std::string(redlock::to_string(redlock::LogLevel::warn)) == "warn");
}

TEST_CASE("The log hook's least level: messages below it never reach the handler",
          "[redis][client]") {
  std::mutex mutex;
  std::vector<redlock::LogLevel> levels;
  auto record = [&](redlock::LogLevel level, std::string_view) {
    std::lock_guard<std::mutex> guard(mutex);
    levels.push_back(level);
  };
  RedisServer server;
  redlock::set_log_handler(record, redlock::LogLevel::warn);
  {
    redlock::Client client(server.endpoint());
    client.ping();  // "connected" at debug level: dropped
    redlock::Lock lock(client, redlock::test::key("log-level"));
    lock.unlock();  // not held: a warning
  }
  {
    std::lock_guard<std::mutex> guard(mutex);
    REQUIRE(!levels.empty());
    for (const auto level : levels) CHECK(level >= redlock::LogLevel::warn);
    levels.clear();
  }
  redlock::set_log_handler(record);  // the default level: everything
  {
    redlock::Client client(server.endpoint());
    client.ping();
  }
  redlock::set_log_handler(nullptr);
  std::lock_guard<std::mutex> guard(mutex);
  CHECK(std::find(levels.begin(), levels.end(), redlock::LogLevel::debug) != levels.end());
}

TEST_CASE("Redlock refuses one server named twice: by another spelling or another address",
          "[redis][client][redlock]") {
  ServerOptions options;
  options.extra_args = {"--bind", "127.0.0.1", "127.0.0.2"};  // one server, two addresses
  RedisServer server(options);
  RedisServer second;
  RedisServer third;
  auto at = [](const std::string& host, int port) {
    redlock::Endpoint ep;
    ep.host = host;
    ep.port = port;
    return redlock::Client(ep);
  };
  const int port = server.port();
  const auto k = key("dup-nodes");
  // Three spellings of 127.0.0.1 are one server: a "quorum of 2" there would be one server.
  CHECK_THROWS_AS(
      redlock::Redlock({at("127.0.0.1", port), at("127.1", port), at("LOCALHOST", port)}, k),
      std::invalid_argument);
  CHECK_THROWS_AS(
      redlock::Redlock(
          {at("127.0.0.1", port), at("localhost", port), at("127.0.0.1", second.port())}, k),
      std::invalid_argument);
  // A server that does not answer is compared by its resolved address.
  RedisServer gone;
  const int dead = gone.port();
  gone.kill9();
  CHECK_THROWS_AS(
      redlock::Redlock({at("127.0.0.1", dead), at("127.1", dead), at("LOCALHOST", dead)}, k),
      std::invalid_argument);
  // Two different addresses of one server: caught by the server's run_id; both are named.
  const auto what = message_of<std::invalid_argument>([&] {
    redlock::Redlock({at("127.0.0.1", port), at("127.0.0.2", port), at("127.0.0.1", second.port())},
                     k);
  });
  CHECK(what.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(what.find("127.0.0.2:" + std::to_string(port)) != std::string::npos);
  // Three servers are three nodes, however they are spelled.
  redlock::Redlock ok(
      {at("127.0.0.2", port), at("localhost", second.port()), at("127.0.0.1", third.port())}, k);
  CHECK(ok.try_lock());
  ok.unlock();
}

namespace {

long long info_number(const RedisServer& server, const char* section, const std::string& field) {
  const std::string info = server.raw({"INFO", section}).str();
  const auto at = info.find(field + ":");
  return at == std::string::npos ? -1 : std::stoll(info.substr(at + field.size() + 1));
}

// `threads` threads each run `each` PINGs on `client` at once; returns the most connections the
// server saw open at any sample (the sampler's own INFO connection is subtracted).
long long connections_under_burst(const RedisServer& server, const redlock::Client& client,
                                  int threads, int each) {
  std::atomic<bool> done{false};
  long long peak = 0;
  std::thread sampler([&] {
    while (!done) {
      peak = std::max(peak, info_number(server, "clients", "connected_clients") - 1);
      std::this_thread::sleep_for(2ms);
    }
  });
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < each; ++i) {
        try {
          client.ping();
        } catch (const redlock::Error&) {
          ++failures;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  done = true;
  sampler.join();
  CHECK(failures.load() == 0);  // a burst queues for a connection; it never times out
  return peak;
}

}  // namespace

TEST_CASE("A burst of 200 threads on one Client opens no more than the pool's bound (default 16)",
          "[redis][client][pool]") {
  RedisServer server;
  redlock::Client client(server.endpoint());
  const long long peak = connections_under_burst(server, client, 200, 50);
  INFO("peak " << peak << " connections");
  CHECK(peak <= 16);
}

TEST_CASE("Endpoint::max_connections bounds the pool, 0 is refused", "[redis][client][pool]") {
  RedisServer server;
  redlock::Endpoint ep = server.endpoint();
  ep.max_connections = 0;
  CHECK_THROWS_AS(redlock::Client(ep), std::invalid_argument);
  ep.max_connections = 3;
  redlock::Client client(ep);
  const long long peak = connections_under_burst(server, client, 50, 40);
  INFO("peak " << peak << " connections");
  CHECK(peak <= 3);
  CHECK(peak >= 1);
}
