// src/protocol/multi.hpp: a MultiLock's commands on the wire: one script per operation over every
// key of the set (acquire all or none, extend all or none, release all), and what the acquire
// script's reply means. Pure: no I/O, no exceptions beyond std::bad_alloc.
#ifndef REDLOCK_SRC_PROTOCOL_MULTI_HPP
#define REDLOCK_SRC_PROTOCOL_MULTI_HPP

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/command.hpp"
#include "protocol/permits.hpp"  // VarCommand

namespace redlock {
namespace detail {

// The names of a set of lock keys: each key's fence counter and release channel are a Lock's
// (helper_key(key, ":fence"), helper_key(key, ":released")), so a MultiLock and a Lock on one of
// its keys exclude each other, share the fence counter and wake each other.
struct MultiKeys {
  explicit MultiKeys(std::vector<std::string> keys);
  std::vector<std::string> keys;
  std::vector<std::string> fences;
  std::vector<std::string> channels;
};

// EVALSHA of the acquire script: SET PX `ttl_ms` on every key for `token` if none is held by
// another token (a key holding `token` already is a repeat of this attempt, re-armed), else
// nothing. With `fenced` "1" each granted key's counter is INCRed (a repeat reads it).
void build_multi_acquire(VarCommand& c, const MultiKeys& keys, std::string_view token,
                         std::string_view ttl_ms, std::string_view fenced);
// The release script over every key holding `token` (compare-and-delete), announced on each
// key's channel with `announce` (else quiet: a rollback). EVALSHA, or EVAL (`eval`) for a
// rollback behind a timed-out request, whose NOSCRIPT nobody would read. Its reply reads as a
// Lock's release (read_release_reply): 1 + the most subscribers a channel had if every key held
// the token, 0 if any did not (those that did are deleted all the same).
enum class ScriptSend : unsigned char { evalsha, eval };
void build_multi_release(VarCommand& c, const MultiKeys& keys, std::string_view token,
                         bool announce, PubSub pubsub, ScriptSend send);
// EVALSHA of the extend script: PEXPIRE every key to `ttl_ms` if every key holds `token`, else
// nothing. Replies 1 or 0 (confirmed()).
void build_multi_extend(VarCommand& c, const MultiKeys& keys, std::string_view token,
                        std::string_view ttl_ms);

// The acquire script's reply: granted with one fence per key (0 without fencing), or refused
// with the remaining ttl of the first busy key found (-1: no expiry) and its index.
struct MultiReply {
  enum class Problem { none, server_error, unexpected };
  bool granted{false};
  std::vector<std::uint64_t> fences;
  std::chrono::milliseconds holder_pttl{-1};
  std::size_t busy{0};
  Problem problem{Problem::none};
};
MultiReply read_multi_reply(const redisReply* reply, std::size_t keys);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_PROTOCOL_MULTI_HPP
