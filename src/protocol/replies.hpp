// src/protocol/replies.hpp: what the servers' replies to the library's commands mean; the only
// code outside io/ that reads a redisReply. Pure: no I/O, no exceptions (fuzz/fuzz_replies.cpp
// feeds it arbitrary replies).
#ifndef REDLOCK_SRC_PROTOCOL_REPLIES_HPP
#define REDLOCK_SRC_PROTOCOL_REPLIES_HPP

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace redlock {
namespace detail {

// Which acquire command a node was sent (recorded when it is built, never inferred from argc).
enum class AcquireDialect : unsigned char {
  set_nx,      // SET NX PX (Redis < 7.0), followed by a GET that reports WRONGTYPE
  set_nx_get,  // SET NX PX GET: recognises our own earlier grant
  script,      // an acquire script's {flag, value} (fencing, fair mode)
};

// What one node said to an acquire attempt.
enum class Answer { granted, refused, failed };

// One node's reply to an acquire attempt, interpreted.
struct AcquireReply {
  enum class Problem { none, server_error, syntax_error, unexpected };
  Answer answer{Answer::failed};
  std::uint64_t fence{0};
  long long holder_pttl{-1};
  // Fair mode, refused: 1 the head of the queue, 2 the next waiter (both watch the holder's
  // lease), 3 further back, 0 not queued.
  unsigned char position{0};
  Problem problem{Problem::none};
};
// `reply` answers the acquire command sent in `dialect`; `pttl` the pipelined PTTL, or null.
// `token` is the attempt's token (SET ... GET returns it when an earlier send of this very
// attempt got through).
AcquireReply read_acquire_reply(const redisReply* reply, const redisReply* pttl,
                                AcquireDialect dialect, std::string_view token) noexcept;

// A token-checked script's answer: 1 confirmed (extend, raise_fence), anything else refused.
// An error reply is neither (see error_text()).
bool confirmed(const redisReply* reply) noexcept;

// A release script's answer.
struct ReleaseReply {
  enum class Kind { released, refused, other };
  Kind kind{Kind::other};
  std::size_t listeners{0};  // released: subscribers that heard it (capped at 2^20)
};
ReleaseReply read_release_reply(const redisReply* reply) noexcept;

// EXISTS's answer: true only for the integer 0 (none of the keys exists).
bool none_exist(const redisReply* reply) noexcept;

// WAIT's answer: the replicas that acknowledged, or -1 for anything but an integer.
long long read_wait_reply(const redisReply* reply) noexcept;

// The message of an error reply, or empty (null, or not an error reply).
std::string_view error_text(const redisReply* reply) noexcept;
bool is_error_reply(const redisReply* reply) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_PROTOCOL_REPLIES_HPP
