// Security: tokens from the OS CSPRNG, unguessable and unique; passwords never leak into
// exception text or logs.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <bitset>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/redis_server.hpp"
#include "util/token.hpp"

using namespace std::chrono_literals;
using redlock::test::key;
using redlock::test::RedisServer;
using redlock::test::ServerOptions;

namespace {

int hex_value(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

// Hamming distance between two hex tokens, in bits.
int bit_distance(const std::string& a, const std::string& b) {
  int bits = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    bits += static_cast<int>(std::bitset<4>(hex_value(a[i]) ^ hex_value(b[i])).count());
  }
  return bits;
}

}  // namespace

TEST_CASE("10^6 tokens: 160 bits each, no duplicates, none predictable from the previous",
          "[unit][security][slow]") {
  constexpr int kCount = 1'000'000;
  std::unordered_set<std::string> seen;
  seen.reserve(kCount);
  std::string previous = redlock::detail::make_token();
  long long distance_sum = 0;
  int min_distance = 160;
  std::vector<long long> ones(160, 0);
  for (int i = 0; i < kCount; ++i) {
    std::string token = redlock::detail::make_token();
    REQUIRE(token.size() * 4 == 160);
    const int d = bit_distance(previous, token);
    distance_sum += d;
    min_distance = std::min(min_distance, d);
    for (std::size_t c = 0; c < token.size(); ++c) {
      const int v = hex_value(token[c]);
      for (int b = 0; b < 4; ++b) ones[c * 4 + b] += (v >> b) & 1;
    }
    seen.insert(token);
    previous = std::move(token);
  }
  CHECK(seen.size() == static_cast<std::size_t>(kCount));
  // Consecutive tokens differ in ~80 of 160 bits (independent); a counter or a weak generator
  // seeded per call would show far fewer.
  const double mean = static_cast<double>(distance_sum) / kCount;
  CHECK(mean > 79.5);
  CHECK(mean < 80.5);
  CHECK(min_distance > 30);  // 6.3 standard deviations: never seen by chance in 10^6 pairs
  // Every bit position is a fair coin (within 6 sigma = 3000 of 500,000).
  for (long long count : ones) {
    CHECK(count > kCount / 2 - 3000);
    CHECK(count < kCount / 2 + 3000);
  }
}

TEST_CASE("A forked child never makes the tokens its parent will make", "[unit][security]") {
  // Tokens come from a per-thread buffer of getrandom output: the child must not reuse the
  // parent's copy of it.
  (void)redlock::detail::make_token();  // the buffer is filled, and mostly unused
  constexpr int kCount = 100;           // more than a buffer holds: refills are covered too
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    for (int i = 0; i < kCount; ++i) {
      const std::string token = redlock::detail::make_token();
      if (write(fds[1], token.data(), token.size()) != static_cast<ssize_t>(token.size())) {
        _exit(2);
      }
    }
    _exit(0);
  }
  close(fds[1]);
  std::unordered_set<std::string> parent;
  for (int i = 0; i < kCount; ++i) parent.insert(redlock::detail::make_token());
  std::vector<std::string> from_child;
  char buf[40];
  while (read(fds[0], buf, sizeof buf) == static_cast<ssize_t>(sizeof buf)) {
    from_child.emplace_back(buf, sizeof buf);
  }
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE(from_child.size() == static_cast<std::size_t>(kCount));
  int shared = 0;
  for (const auto& token : from_child) shared += parent.count(token) != 0 ? 1 : 0;
  CHECK(shared == 0);
}

TEST_CASE("Passwords never appear in exception text or log messages", "[redis][security]") {
  const std::string secret = "Sup3r-S3cret-Passw0rd";
  std::mutex mutex;
  std::vector<std::string> logged;
  redlock::set_log_handler([&](redlock::LogLevel, std::string_view message) {
    std::lock_guard<std::mutex> guard(mutex);
    logged.emplace_back(message);
  });
  ServerOptions options;
  options.extra_args = {"--requirepass", "the-real-password"};
  RedisServer server(options);
  std::vector<std::string> messages;
  auto ep = server.endpoint();
  ep.password = secret;  // wrong password: AUTH fails
  {
    redlock::Client client(ep);
    try {
      client.ping();
    } catch (const redlock::Error& e) {
      messages.emplace_back(e.what());
    }
    redlock::Lock lock(client, key("secret"));
    try {
      lock.try_lock();
    } catch (const redlock::Error& e) {
      messages.emplace_back(e.what());
    }
    lock.unlock();  // logged, not thrown
  }
  // Unreachable server and bad URIs with the password in them.
  ep.port = 1;
  try {
    redlock::Client(ep).ping();
  } catch (const redlock::Error& e) {
    messages.emplace_back(e.what());
  }
  for (const char* uri :
       {"redis://user:Sup3r-S3cret-Passw0rd@host:0", "redis://:Sup3r-S3cret-Passw0rd@host/notadb",
        "ftp://user:Sup3r-S3cret-Passw0rd@host"}) {
    try {
      redlock::Endpoint::parse(uri);
    } catch (const std::invalid_argument& e) {
      messages.emplace_back(e.what());
    }
  }
  CHECK(redlock::Endpoint::parse("redis://u:" + secret + "@h").to_string().find(secret) ==
        std::string::npos);
  redlock::set_log_handler(nullptr);
  CHECK(messages.size() == 6);
  for (const auto& m : messages) {
    INFO(m);
    CHECK(m.find(secret) == std::string::npos);
  }
  for (const auto& m : logged) {
    INFO(m);
    CHECK(m.find(secret) == std::string::npos);
  }
}
