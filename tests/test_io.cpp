// tests/test_io.cpp: the I/O layer's parts without a server: errno classification, the codec
// (RESP out, replies in), and the transport over a socket pair.
#include <sys/socket.h>

#include <cerrno>
#include <csignal>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "io/codec.hpp"
#include "io/transport.hpp"
#include "io/wire.hpp"

using redlock::detail::Decoded;
using redlock::detail::Decoder;
using redlock::detail::IoError;
using redlock::detail::OutBuffer;
using redlock::detail::ReplyPtr;
using redlock::detail::Transport;

namespace {
bool feed(Decoder& decoder, std::string_view bytes) {
  return decoder.feed(bytes.data(), bytes.size());
}
}  // namespace

TEST_CASE("Transport errors are classified by errno", "[unit][io]") {
  CHECK(redlock::detail::classify(EAGAIN) == IoError::again);
  CHECK(redlock::detail::classify(EINTR) == IoError::again);
  CHECK(redlock::detail::classify(ETIMEDOUT) == IoError::timeout);
  CHECK(redlock::detail::classify(ECONNREFUSED) == IoError::refused);
  CHECK(redlock::detail::classify(ECONNRESET) == IoError::reset);
  CHECK(redlock::detail::classify(EPIPE) == IoError::reset);
  CHECK(redlock::detail::classify(EBADF) == IoError::other);
}

TEST_CASE("The codec encodes RESP into its own buffer and decodes split replies", "[unit][io]") {
  OutBuffer out;
  const char* argv[] = {"SET", "k", "a b"};
  const std::size_t lens[] = {3, 1, 3};
  out.append(3, argv, lens);
  const std::string expected = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\na b\r\n";
  REQUIRE(std::string(out.data(), out.size()) == expected);
  out.consume(4);
  CHECK(std::string(out.data(), out.size()) == expected.substr(4));
  out.consume(out.size());
  CHECK(out.empty());

  Decoder in;
  ReplyPtr reply;
  REQUIRE(feed(in, "*2\r\n:4"));
  CHECK(in.next(reply) == Decoded::need_more);
  REQUIRE(feed(in, "2\r\n$2\r\nok\r\n+OK\r\n"));
  REQUIRE(in.next(reply) == Decoded::reply);
  REQUIRE(reply->type == REDIS_REPLY_ARRAY);
  CHECK(reply->element[0]->integer == 42);
  CHECK(redlock::detail::text(reply->element[1]) == "ok");
  REQUIRE(in.next(reply) == Decoded::reply);
  CHECK(redlock::detail::text(reply.get()) == "OK");
  CHECK(in.next(reply) == Decoded::need_more);

  Decoder bad;
  REQUIRE(feed(bad, "HTTP/1.1 400\r\n"));
  CHECK(bad.next(reply) == Decoded::malformed);
  CHECK_FALSE(bad.error().empty());
}

namespace {
// What hiredis's own formatter makes of a command.
std::string hiredis_format(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* encoded = nullptr;
  const int length =
      redisFormatCommandArgv(&encoded, static_cast<int>(args.size()), argv.data(), lens.data());
  REQUIRE(length > 0);
  std::string out(encoded, static_cast<std::size_t>(length));
  redisFreeCommand(encoded);
  return out;
}
}  // namespace

TEST_CASE("The codec encodes commands byte for byte as hiredis does", "[unit][io]") {
  const std::vector<std::vector<std::string>> commands = {
      {"PING"},
      {"SET", "", std::string("a\0b\r\n", 5), "PX", "30000"},
      {"EVALSHA", std::string(40, 'f'), "1", "k", std::string(12345, 'x'), "30000"},
      {"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L"},  // a two-digit count
  };
  OutBuffer out;
  std::string expected;
  for (const auto& args : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    out.append(static_cast<int>(args.size()), argv.data(), lens.data());
    expected += hiredis_format(args);
  }
  CHECK(std::string(out.data(), out.size()) == expected);
  out.consume(out.size());
  const char* ping[] = {"PING"};
  const std::size_t ping_len[] = {4};
  out.append(1, ping, ping_len);  // after everything was written: starts over
  CHECK(std::string(out.data(), out.size()) == "*1\r\n$4\r\nPING\r\n");
}

TEST_CASE("A transport never blocks and reports end of stream and a dropped peer", "[unit][io]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  Transport ours(fds[0]);
  Transport peer(fds[1]);
  char buffer[16];
  CHECK(ours.read(buffer, sizeof buffer).error == IoError::again);  // nothing yet: no wait
  REQUIRE(peer.write("PONG", 4).bytes == 4);
  const auto got = ours.read(buffer, sizeof buffer);
  REQUIRE(got.error == IoError::none);
  CHECK(std::string(buffer, got.bytes) == "PONG");

  peer = Transport();  // the peer closes
  CHECK(ours.read(buffer, sizeof buffer).error == IoError::closed);
  // Writing to a closed peer is EPIPE, not a SIGPIPE that would kill the test process.
  const auto sent = ours.write("x", 1);
  CHECK(sent.error == IoError::reset);
  CHECK(sent.code == EPIPE);
}

namespace {

// Feeds `bytes` one at a time (a header may be split anywhere) and returns what the decoder
// makes of them: the replies it decoded, then "malformed: <why>" if it stopped there.
std::vector<std::string> decode_bytewise(const redlock::ReplyLimits& limits,
                                         const std::string& bytes) {
  Decoder decoder(limits);
  for (const char c : bytes) REQUIRE(decoder.feed(&c, 1));
  std::vector<std::string> out;
  for (;;) {
    ReplyPtr reply;
    const Decoded decoded = decoder.next(reply);
    if (decoded == Decoded::need_more) return out;
    if (decoded == Decoded::malformed) {
      out.push_back("malformed: " + std::string(decoder.error()));
      return out;
    }
    out.push_back(reply->type == REDIS_REPLY_ARRAY ? "array" : "scalar");
  }
}

}  // namespace

TEST_CASE("Reply caps bound the total of one reply, summed over every level of nesting",
          "[unit][io]") {
  redlock::ReplyLimits limits;
  limits.max_elements = 4;        // each array's own cap
  limits.max_reply_elements = 6;  // all arrays of one reply together
  limits.max_bulk_bytes = 16;
  limits.max_reply_bytes = 60;  // the whole reply on the wire
  // Three arrays of 3 (each within max_elements): 9 elements in one reply.
  const std::string nested = "*3\r\n*3\r\n*3\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n";
  auto decoded = decode_bytewise(limits, nested);
  REQUIRE(decoded.size() == 1);
  CHECK_THAT(decoded[0], Catch::StartsWith("malformed") && Catch::Contains("max_reply_elements"));
  // Two arrays of 3: within; the total starts again with each reply.
  const std::string within = "*3\r\n*2\r\n:1\r\n:2\r\n:3\r\n:4\r\n";
  CHECK(decode_bytewise(limits, within + within + within) ==
        std::vector<std::string>{"array", "array", "array"});
  // Bulk strings within max_bulk_bytes each, 4 + 3 x (5 + 16 + 2) bytes on the wire in one
  // reply: refused at the third header, before its payload.
  const std::string bulk = "$16\r\n" + std::string(16, 'x') + "\r\n";
  decoded = decode_bytewise(limits, "*3\r\n" + bulk + bulk + bulk);
  REQUIRE(decoded.size() == 1);
  CHECK_THAT(decoded[0], Catch::StartsWith("malformed") && Catch::Contains("max_reply_bytes"));
  CHECK(decode_bytewise(limits, bulk + bulk + bulk) ==
        std::vector<std::string>{"scalar", "scalar", "scalar"});
  // Status lines count as they arrive: 4 + 4 x 18 bytes.
  const std::string status = "+" + std::string(15, 'a') + "\r\n";
  decoded = decode_bytewise(limits, "*4\r\n" + status + status + status + status);
  REQUIRE(decoded.size() == 1);
  CHECK_THAT(decoded[0], Catch::Contains("max_reply_bytes"));
  // Nil arrays and bulk strings add nothing; empty arrays end where they start.
  CHECK(decode_bytewise(limits, "*3\r\n*-1\r\n$-1\r\n*0\r\n:1\r\n") ==
        std::vector<std::string>{"array", "scalar"});
}
