// tests/test_io.cpp: the I/O layer's parts without a server: errno classification, the codec
// (RESP out, replies in), and the transport over a socket pair.
#include <sys/socket.h>

#include <cerrno>
#include <csignal>
#include <string>
#include <string_view>

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
