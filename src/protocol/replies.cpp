// src/protocol/replies.cpp: reading the replies to the library's commands (see replies.hpp).
#include "protocol/replies.hpp"

#include <algorithm>

namespace redlock {
namespace detail {
namespace {

std::string_view text_of(const redisReply* reply) noexcept {
  if (reply == nullptr || reply->str == nullptr) return {};
  return {reply->str, reply->len};
}

bool is_integer(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_INTEGER;
}

// {1, fence} or {0, pttl} (fair mode: {0, pttl, position}); a fence is a counter value (0: the
// script issued none).
AcquireReply read_script_reply(const redisReply* reply) noexcept {
  AcquireReply out;
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 || reply->elements > 3 ||
      reply->element == nullptr || !is_integer(reply->element[0]) ||
      !is_integer(reply->element[1]) || (reply->elements == 3 && !is_integer(reply->element[2]))) {
    out.problem = AcquireReply::Problem::unexpected;
    return out;
  }
  const long long flag = reply->element[0]->integer;
  const long long value = reply->element[1]->integer;
  if (flag == 1 && value >= 0) {
    out.answer = Answer::granted;
    out.fence = static_cast<std::uint64_t>(value);
  } else if (flag == 0) {
    out.answer = Answer::refused;
    out.holder_pttl = value;
    const long long position = reply->elements == 3 ? reply->element[2]->integer : 0;
    if (position >= 1 && position <= 3) out.position = static_cast<unsigned char>(position);
  } else {
    out.problem = AcquireReply::Problem::unexpected;
  }
  return out;
}

// SET NX PX [GET]: with GET, nil means it set the key (granted) and a string is the current
// holder's token (ours only if an earlier send of this very attempt got through); without GET,
// OK means granted and nil refused.
AcquireReply read_set_reply(const redisReply* reply, const redisReply* pttl, AcquireDialect dialect,
                            std::string_view token) noexcept {
  AcquireReply out;
  const bool with_get = dialect == AcquireDialect::set_nx_get;
  switch (reply->type) {
    case REDIS_REPLY_NIL:
      out.answer = with_get ? Answer::granted : Answer::refused;
      break;
    case REDIS_REPLY_STATUS:
      if (text_of(reply) != "OK") {
        out.problem = AcquireReply::Problem::unexpected;
        return out;
      }
      out.answer = Answer::granted;
      break;
    case REDIS_REPLY_STRING:
      out.answer = with_get && text_of(reply) == token ? Answer::granted : Answer::refused;
      break;
    default:
      out.problem = AcquireReply::Problem::unexpected;
      return out;
  }
  if (out.answer == Answer::refused && is_integer(pttl)) out.holder_pttl = pttl->integer;
  return out;
}

}  // namespace

AcquireReply read_acquire_reply(const redisReply* reply, const redisReply* pttl,
                                AcquireDialect dialect, std::string_view token) noexcept {
  AcquireReply out;
  const bool scripted = dialect == AcquireDialect::script;
  if (reply == nullptr) {
    out.problem = AcquireReply::Problem::unexpected;
    return out;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    out.problem = !scripted && text_of(reply).rfind("ERR syntax error", 0) == 0
                      ? AcquireReply::Problem::syntax_error
                      : AcquireReply::Problem::server_error;
    return out;
  }
  return scripted ? read_script_reply(reply) : read_set_reply(reply, pttl, dialect, token);
}

bool none_exist(const redisReply* reply) noexcept {
  return is_integer(reply) && reply->integer == 0;
}

bool confirmed(const redisReply* reply) noexcept {
  return is_integer(reply) && reply->integer == 1;
}

ReleaseReply read_release_reply(const redisReply* reply) noexcept {
  ReleaseReply out;
  if (!is_integer(reply)) return out;
  if (reply->integer == 0) {
    out.kind = ReleaseReply::Kind::refused;
  } else if (reply->integer >= 1) {
    out.kind = ReleaseReply::Kind::released;
    out.listeners = static_cast<std::size_t>(std::min<long long>(reply->integer - 1, 1 << 20));
  }
  return out;
}

std::string_view error_text(const redisReply* reply) noexcept {
  return is_error_reply(reply) ? text_of(reply) : std::string_view();
}

long long read_wait_reply(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
}

bool is_error_reply(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR;
}

}  // namespace detail
}  // namespace redlock
