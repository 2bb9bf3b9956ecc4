// libFuzzer target: the reply handling behind every lock operation. Arbitrary bytes go through
// hiredis's RESP reader (garbage, wrong types, deep arrays, huge bulk strings); every reply it
// produces is interpreted as an acquire reply (plain, with GET, fenced), an extend/release
// confirmation and a public Reply. Nothing may crash, leak or read out of bounds, and the
// interpretation must stay consistent (a grant never comes with a problem, a fence only with a
// fenced grant).
#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "connection.hpp"
#include "engine.hpp"

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
  redisReply* previous = nullptr;
  for (int i = 0; i < 64; ++i) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader, &raw) != REDIS_OK || raw == nullptr) break;
    auto* reply = static_cast<redisReply*>(raw);
    check(redlock::detail::read_acquire_reply(reply, previous, false, false, token), false);
    check(redlock::detail::read_acquire_reply(reply, previous, false, true, token), false);
    check(redlock::detail::read_acquire_reply(reply, nullptr, true, false, token), true);
    (void)redlock::detail::LeaseEngine::extend_confirmed(reply);
    (void)redlock::detail::to_reply(reply);
    if (previous != nullptr) freeReplyObject(previous);
    previous = reply;
  }
  if (previous != nullptr) freeReplyObject(previous);
  redisReaderFree(reader);
  return 0;
}
