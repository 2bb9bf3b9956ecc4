// libFuzzer target: the reply handling behind every lock operation. Arbitrary bytes go through
// hiredis's RESP reader (garbage, wrong types, deep arrays, huge bulk strings); every reply it
// produces is interpreted as an acquire reply (plain, with GET, fenced), an extend/release
// confirmation, a hand-over message (pub/sub payload) and a public Reply; tokens include NUL and
// non-UTF-8 bytes. Nothing may crash, leak or read out of bounds, and the
// interpretation must stay consistent (a grant never comes with a problem, a fence only with a
// fenced grant).
#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "io/connection.hpp"
#include "protocol/replies.hpp"
#include "watch/subscriber.hpp"

using redlock::detail::AcquireDialect;
using redlock::detail::AcquireReply;
using redlock::detail::Answer;

namespace {

// `scripted`: the reply was read as an acquire script's {flag, value}. A script grant may carry
// fence 0 (fair mode without fencing); the engine rejects 0 when it asked for a fence.
void check(const AcquireReply& a, bool scripted) {
  if (a.problem != AcquireReply::Problem::none && a.answer != Answer::failed) std::abort();
  if (a.fence != 0 && !(scripted && a.answer == Answer::granted)) std::abort();
}

}  // namespace

// hiredis 0.14's reader allocates what a header declares ("*555555555" -> a 4.4 GB element array)
// before any element arrives, and has no setting to cap it. That is hiredis's limit, not this
// code's: inputs declaring more than a million elements or bytes are skipped.
bool declares_huge(const std::uint8_t* data, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    if ((data[i] != '*' && data[i] != '$') || (i > 0 && data[i - 1] != '\n')) continue;
    std::uint64_t n = 0;
    for (std::size_t j = i + 1; j < size && data[j] >= '0' && data[j] <= '9'; ++j) {
      n = n * 10 + (data[j] - '0');
      if (n > 1000000) return true;
    }
  }
  return false;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (declares_huge(data, size)) return 0;
  redisReader* reader = redisReaderCreate();
  if (reader == nullptr) return 0;
  redisReaderFeed(reader, reinterpret_cast<const char*>(data), size);
  const std::string_view token("0123456789abcdef0123456789abcdef01234567");
  // Binary data where keys and tokens may carry it: a NUL first, non-UTF-8 bytes.
  const std::string_view binary_token("\0to\0k\xff\xfe\x80", 8);
  redisReply* previous = nullptr;
  for (int i = 0; i < 64; ++i) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader, &raw) != REDIS_OK || raw == nullptr) break;
    auto* reply = static_cast<redisReply*>(raw);
    check(redlock::detail::read_acquire_reply(reply, previous, AcquireDialect::set_nx, token),
          false);
    check(redlock::detail::read_acquire_reply(reply, previous, AcquireDialect::set_nx_get, token),
          false);
    check(redlock::detail::read_acquire_reply(reply, nullptr, AcquireDialect::script, token), true);
    const AcquireReply own = redlock::detail::read_acquire_reply(
        reply, previous, AcquireDialect::set_nx_get, binary_token);
    check(own, false);
    // SET ... GET answering exactly the (binary) token is our own grant, byte for byte.
    const bool exact = reply->type == REDIS_REPLY_STRING &&
                       std::string_view(reply->str, reply->len) == binary_token;
    if (exact != (own.answer == Answer::granted && reply->type == REDIS_REPLY_STRING)) std::abort();
    if (reply->type == REDIS_REPLY_STRING) {  // a pub/sub payload: maybe a hand-over message
      std::uint64_t seq = 0;
      std::uint64_t fence = 0;
      std::string_view sha1;
      (void)redlock::detail::parse_grant(std::string_view(reply->str, reply->len), seq, fence,
                                         sha1);
    }
    (void)redlock::detail::confirmed(reply);
    (void)redlock::detail::read_release_reply(reply);
    (void)redlock::detail::error_text(reply);
    (void)redlock::detail::to_reply(reply);
    if (previous != nullptr) freeReplyObject(previous);
    previous = reply;
  }
  if (previous != nullptr) freeReplyObject(previous);
  redisReaderFree(reader);
  return 0;
}
