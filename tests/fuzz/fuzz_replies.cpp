// libFuzzer target: the reply handling behind every lock operation. Arbitrary bytes go through
// the decoder connections use (the reply caps, then hiredis's RESP reader; TLS decrypts to the
// same framing): garbage, wrong types, deep arrays, huge declared sizes. Every reply it produces
// is interpreted as an acquire reply (plain, with GET, fenced), an extend/release confirmation, a
// hand-over message (pub/sub payload) and a public Reply; tokens include NUL and non-UTF-8 bytes.
// Nothing may crash, leak, allocate what a header merely declares, or read out of bounds, and the
// interpretation must stay consistent (a grant never comes with a problem, a fence only with a
// fenced grant).
#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>

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

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The reader as connections use it: every byte passes the reply caps (HeaderScan) first, so a
  // header declaring gigabytes ("*555555555", "$4000000000"), or nested arrays each within the
  // per-array cap but over the reply's total (seed nested-over-total), is refused before hiredis
  // allocates.
  redlock::detail::Decoder decoder;
  if (!decoder.feed(reinterpret_cast<const char*>(data), size)) return 0;
  const std::string_view token("0123456789abcdef0123456789abcdef01234567");
  // Binary data where keys and tokens may carry it: a NUL first, non-UTF-8 bytes.
  const std::string_view binary_token("\0to\0k\xff\xfe\x80", 8);
  redlock::detail::ReplyPtr previous;
  for (int i = 0; i < 64; ++i) {
    redlock::detail::ReplyPtr current;
    if (decoder.next(current) != redlock::detail::Decoded::reply) break;
    redisReply* reply = current.get();
    check(redlock::detail::read_acquire_reply(reply, previous.get(), AcquireDialect::set_nx, token),
          false);
    check(redlock::detail::read_acquire_reply(reply, previous.get(), AcquireDialect::set_nx_get,
                                              token),
          false);
    check(redlock::detail::read_acquire_reply(reply, nullptr, AcquireDialect::script, token), true);
    const AcquireReply own = redlock::detail::read_acquire_reply(
        reply, previous.get(), AcquireDialect::set_nx_get, binary_token);
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
    previous = std::move(current);
  }
  return 0;
}
