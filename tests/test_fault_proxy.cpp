// Tests for the fault-injecting TCP proxy (tests/support/fault_proxy.hpp), driven through a real
// redis-server with plain hiredis (not the library under test).
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

#include <hiredis/hiredis.h>
#include <netinet/in.h>  // sockaddr_in
#include <poll.h>        // poll
#include <sys/socket.h>  // socket, connect, shutdown, recv
#include <sys/time.h>    // timeval
#include <unistd.h>      // close

#include <catch2/catch.hpp>

#include <atomic>     // std::atomic
#include <chrono>     // std::chrono
#include <cstdint>    // std::uint16_t
#include <memory>     // std::unique_ptr
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <thread>     // std::thread, std::this_thread
#include <vector>     // std::vector

namespace {

using namespace std::chrono_literals;
using redlock::test::eventually;
using redlock::test::FaultProxy;
using Clock = std::chrono::steady_clock;

using ContextPtr = std::unique_ptr<redisContext, decltype(&redisFree)>;
using ReplyPtr = std::unique_ptr<redisReply, decltype(&freeReplyObject)>;

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// A blocking hiredis connection to 127.0.0.1:port with connect and command timeouts. May hold a
// context whose err is set (connect failed); never null unless hiredis could not allocate.
ContextPtr connect_to(int port, std::chrono::milliseconds timeout = 1000ms) {
  ContextPtr c(redisConnectWithTimeout("127.0.0.1", port, to_timeval(timeout)), &redisFree);
  if (c && c->err == 0) redisSetTimeout(c.get(), to_timeval(timeout));
  return c;
}

// Runs one command (arguments passed binary-safe). Null on any error (then c->err is set).
ReplyPtr command(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  void* r = redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
  return ReplyPtr(static_cast<redisReply*>(r), &freeReplyObject);
}

bool ping(redisContext* c) {
  if (c == nullptr || c->err != 0) return false;
  ReplyPtr r = command(c, {"PING"});
  return r && r->type == REDIS_REPLY_STATUS && std::string(r->str, r->len) == "PONG";
}

// A fresh connection through port answers PING.
bool fresh_ping(int port) {
  ContextPtr c = connect_to(port);
  return c && ping(c.get());
}

// A real redis-server on a random loopback port, killed by its destructor.
using TestServer = redlock::test::RedisServer;

}  // namespace

TEST_CASE("FaultProxy forwards traffic to redis-server", "[fault]") {
  TestServer redis;
  FaultProxy proxy("127.0.0.1", redis.port());
  REQUIRE(proxy.port() > 0);
  CHECK(proxy.port() != redis.port());
  CHECK(proxy.target_port() == redis.port());
  CHECK(proxy.connections() == 0);

  ContextPtr c = connect_to(proxy.port());
  REQUIRE(c);
  REQUIRE(c->err == 0);
  CHECK(ping(c.get()));
  CHECK(proxy.connections() == 1);
  // "*1\r\n$4\r\nPING\r\n" (14 bytes) up, "+PONG\r\n" (7 bytes) down. The counter is bumped
  // just after each send(), so it may trail what the client has already received.
  CHECK(eventually([&] { return proxy.bytes_forwarded() >= 21; }));

  ReplyPtr set = command(c.get(), {"SET", "fault:fwd", std::string(200000, 'x')});
  REQUIRE(set);
  ReplyPtr get = command(c.get(), {"GET", "fault:fwd"});
  REQUIRE(get);
  REQUIRE(get->type == REDIS_REPLY_STRING);
  CHECK(get->len == 200000);
  CHECK(eventually([&] { return proxy.bytes_forwarded() >= 400000; }));

  ContextPtr c2 = connect_to(proxy.port());
  REQUIRE(ping(c2.get()));
  CHECK(proxy.connections() == 2);
  c.reset();
  c2.reset();
  CHECK(eventually([&] { return proxy.connections() == 0; }));
}

TEST_CASE("FaultProxy accepts only loopback targets", "[fault]") {
  CHECK_THROWS_AS(FaultProxy("10.0.0.1", 6379), std::invalid_argument);
  CHECK_THROWS_AS(FaultProxy("192.168.1.1", 6379), std::invalid_argument);
  CHECK_THROWS_AS(FaultProxy("example.com", 6379), std::invalid_argument);
  CHECK_THROWS_AS(FaultProxy("::2", 6379), std::invalid_argument);
  CHECK_THROWS_AS(FaultProxy("127.0.0.1", 0), std::invalid_argument);
  CHECK_THROWS_AS(FaultProxy("127.0.0.1", 65536), std::invalid_argument);
  CHECK_NOTHROW(FaultProxy("localhost", 6379));
  CHECK_NOTHROW(FaultProxy("127.0.0.2", 6379));
  CHECK_NOTHROW(FaultProxy("::1", 6379));
}

TEST_CASE("FaultProxy delay holds every chunk in both directions", "[fault]") {
  TestServer redis;
  FaultProxy proxy("127.0.0.1", redis.port());
  ContextPtr c = connect_to(proxy.port(), 3000ms);
  REQUIRE(ping(c.get()));

  SECTION("a round trip pays the delay twice") {
    proxy.set_delay(100ms);
    const auto start = Clock::now();
    CHECK(ping(c.get()));
    const auto elapsed = Clock::now() - start;
    CHECK(elapsed >= 200ms);
    CHECK(elapsed < 1500ms);

    proxy.set_delay(0ms);
    const auto start2 = Clock::now();
    CHECK(ping(c.get()));
    CHECK(Clock::now() - start2 < 200ms);
  }

  SECTION("a later chunk never overtakes an earlier one") {
    proxy.set_delay(300ms);
    const auto start = Clock::now();
    int done = 0;
    REQUIRE(redisAppendCommand(c.get(), "ECHO first") == REDIS_OK);
    while (!done) REQUIRE(redisBufferWrite(c.get(), &done) == REDIS_OK);
    // Let the proxy read "first" under the 300 ms delay before dropping the delay to 0.
    std::this_thread::sleep_for(50ms);
    proxy.set_delay(0ms);
    REQUIRE(redisAppendCommand(c.get(), "ECHO second") == REDIS_OK);

    void* raw = nullptr;
    REQUIRE(redisGetReply(c.get(), &raw) == REDIS_OK);
    ReplyPtr first(static_cast<redisReply*>(raw), &freeReplyObject);
    REQUIRE(redisGetReply(c.get(), &raw) == REDIS_OK);
    ReplyPtr second(static_cast<redisReply*>(raw), &freeReplyObject);
    REQUIRE(first->type == REDIS_REPLY_STRING);
    REQUIRE(second->type == REDIS_REPLY_STRING);
    CHECK(std::string(first->str, first->len) == "first");
    CHECK(std::string(second->str, second->len) == "second");
    // "second" waited behind "first" (300 ms up; replies then go at once).
    CHECK(Clock::now() - start >= 300ms);
  }
}

TEST_CASE("FaultProxy blackhole stalls traffic until cleared", "[fault]") {
  TestServer redis;
  FaultProxy proxy("127.0.0.1", redis.port());
  ContextPtr c = connect_to(proxy.port(), 200ms);
  REQUIRE(ping(c.get()));

  proxy.set_blackhole(true);
  const auto start = Clock::now();
  CHECK_FALSE(ping(c.get()));
  CHECK(c->err != 0);
  CHECK(Clock::now() - start < 1500ms);

  // New connections are accepted (the TCP connect succeeds) but stall too.
  ContextPtr stalled = connect_to(proxy.port(), 200ms);
  REQUIRE(stalled);
  CHECK(stalled->err == 0);
  CHECK_FALSE(ping(stalled.get()));
  CHECK(eventually([&] { return proxy.connections() == 2; }));

  proxy.clear();
  CHECK(fresh_ping(proxy.port()));
}

TEST_CASE("FaultProxy drop_after_request delivers the request but not the reply", "[fault]") {
  TestServer redis;
  ContextPtr direct = connect_to(redis.port());
  REQUIRE(ping(direct.get()));
  REQUIRE(command(direct.get(), {"DEL", "fault:drop"}));

  FaultProxy proxy("127.0.0.1", redis.port());
  proxy.set_drop_after_request(true);
  ContextPtr c = connect_to(proxy.port());
  REQUIRE(c);
  REQUIRE(c->err == 0);
  ReplyPtr reply = command(c.get(), {"SET", "fault:drop", "v"});
  CHECK_FALSE(reply);
  CHECK((c->err == REDIS_ERR_EOF || c->err == REDIS_ERR_IO));

  // The server executed the SET all the same.
  CHECK(eventually([&] {
    ReplyPtr get = command(direct.get(), {"GET", "fault:drop"});
    return get && get->type == REDIS_REPLY_STRING && std::string(get->str, get->len) == "v";
  }));
  CHECK(eventually([&] { return proxy.connections() == 0; }));

  proxy.clear();
  CHECK(fresh_ping(proxy.port()));
}

TEST_CASE("FaultProxy reset_all resets every live connection", "[fault]") {
  TestServer redis;
  FaultProxy proxy("127.0.0.1", redis.port());
  ContextPtr a = connect_to(proxy.port());
  ContextPtr b = connect_to(proxy.port());
  REQUIRE(ping(a.get()));
  REQUIRE(ping(b.get()));
  REQUIRE(proxy.connections() == 2);

  proxy.reset_all();
  CHECK(proxy.connections() == 0);  // synchronous
  CHECK_FALSE(ping(a.get()));
  CHECK((a->err == REDIS_ERR_IO || a->err == REDIS_ERR_EOF));
  CHECK_FALSE(ping(b.get()));
  CHECK((b->err == REDIS_ERR_IO || b->err == REDIS_ERR_EOF));

  // reset_all is one-shot: the proxy keeps serving.
  CHECK(fresh_ping(proxy.port()));
  proxy.reset_all();
  proxy.reset_all();  // nothing to reset: returns all the same
  CHECK(proxy.connections() == 0);
}

TEST_CASE("FaultProxy refuse closes new connections at once", "[fault]") {
  TestServer redis;
  FaultProxy proxy("127.0.0.1", redis.port());
  ContextPtr before = connect_to(proxy.port());
  REQUIRE(ping(before.get()));

  proxy.set_refuse(true);
  ContextPtr c = connect_to(proxy.port(), 500ms);
  const bool failed = !c || c->err != 0 || !ping(c.get());
  CHECK(failed);
  CHECK(proxy.connections() == 1);
  CHECK(ping(before.get()));  // existing connections are untouched

  proxy.set_refuse(false);
  CHECK(fresh_ping(proxy.port()));
}

TEST_CASE("FaultProxy closes the pair on EOF or a dead upstream", "[fault]") {
  SECTION("client half-close") {
    TestServer redis;
    FaultProxy proxy("127.0.0.1", redis.port());
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(proxy.port()));
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    CHECK(eventually([&] { return proxy.connections() == 1; }));
    REQUIRE(::shutdown(fd, SHUT_WR) == 0);
    CHECK(eventually([&] { return proxy.connections() == 0; }));
    char byte = 0;
    CHECK(::recv(fd, &byte, 1, 0) == 0);  // the proxy closed its side too
    ::close(fd);
  }

  SECTION("nothing listens upstream") {
    // Grab a free port, then close it so nothing listens there.
    const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(probe >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    ::close(probe);

    FaultProxy proxy("127.0.0.1", ntohs(addr.sin_port));
    ContextPtr c = connect_to(proxy.port());
    REQUIRE(c);
    CHECK_FALSE(ping(c.get()));
    CHECK(eventually([&] { return proxy.connections() == 0; }));
  }
}

TEST_CASE(
    "FaultProxy half_open: a server side that ends behind the blackhole leaves the client's open",
    "[fault]") {
  TestServer redis;
  FaultProxy proxy("127.0.0.1", redis.port());
  ContextPtr c = connect_to(proxy.port(), 300ms);
  REQUIRE(ping(c.get()));
  ReplyPtr id = command(c.get(), {"CLIENT", "ID"});
  REQUIRE(id);
  REQUIRE(id->type == REDIS_REPLY_INTEGER);
  ContextPtr direct = connect_to(redis.port());

  proxy.set_half_open(true);
  proxy.set_blackhole(true);
  ReplyPtr killed = command(direct.get(), {"CLIENT", "KILL", "ID", std::to_string(id->integer)});
  REQUIRE(killed);
  CHECK(killed->integer == 1);
  std::this_thread::sleep_for(200ms);
  CHECK(proxy.connections() == 1);  // no FIN passed on: the client's side is half-open
  pollfd fd{c->fd, POLLIN, 0};
  CHECK(::poll(&fd, 1, 0) == 0);

  proxy.clear();  // healed: the first bytes the client sends are answered with RST
  CHECK_FALSE(ping(c.get()));
  CHECK((c->err == REDIS_ERR_IO || c->err == REDIS_ERR_EOF));
  CHECK(eventually([&] { return proxy.connections() == 0; }));
  CHECK(fresh_ping(proxy.port()));
}

TEST_CASE("FaultProxy destructor closes live connections", "[fault]") {
  TestServer redis;
  auto proxy = std::make_unique<FaultProxy>("127.0.0.1", redis.port());
  const int old_port = proxy->port();
  ContextPtr c = connect_to(proxy->port());
  REQUIRE(ping(c.get()));
  proxy->set_delay(500ms);  // queued data must not keep the destructor waiting
  int done = 0;
  REQUIRE(redisAppendCommand(c.get(), "PING") == REDIS_OK);
  while (!done) REQUIRE(redisBufferWrite(c.get(), &done) == REDIS_OK);
  std::this_thread::sleep_for(20ms);

  const auto start = Clock::now();
  proxy.reset();
  CHECK(Clock::now() - start < 400ms);

  void* raw = nullptr;
  CHECK(redisGetReply(c.get(), &raw) == REDIS_ERR);
  CHECK(raw == nullptr);
  ContextPtr after = connect_to(old_port, 200ms);
  CHECK((!after || after->err != 0));
}

TEST_CASE("FaultProxy setters are safe from any thread", "[fault]") {
  TestServer redis;
  FaultProxy proxy("127.0.0.1", redis.port());
  std::atomic<bool> stop{false};
  std::thread toggler([&] {
    while (!stop.load()) {
      proxy.set_delay(1ms);
      proxy.set_refuse(false);
      proxy.set_blackhole(false);
      proxy.set_drop_after_request(false);
      proxy.set_delay(0ms);
      (void)proxy.connections();
      (void)proxy.bytes_forwarded();
      std::this_thread::sleep_for(1ms);
    }
  });
  ContextPtr c = connect_to(proxy.port(), 3000ms);
  int ok = 0;
  for (int i = 0; i < 50; ++i) ok += ping(c.get()) ? 1 : 0;
  stop.store(true);
  toggler.join();
  CHECK(ok == 50);
  proxy.reset_all();
  CHECK(proxy.connections() == 0);
}
