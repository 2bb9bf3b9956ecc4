// src/protocol/permits.cpp: a Semaphore's scripts, commands and reply (see permits.hpp).
#include "protocol/permits.hpp"

#include <string>

#include "protocol/commands.hpp"  // publish_flag
#include "util/key_slot.hpp"

namespace redlock {
namespace detail {
namespace {

// KEYS[1..m] slot keys, KEYS[m+1] the fence counter, KEYS[m+2] the stored limit; ARGV[1] token,
// ARGV[2] ttl ms, ARGV[3] "1" with fencing, ARGV[4] the limit n (m >= n: more slots are passed to
// check a larger stored limit). The limit is stored with the permits: another one is refused
// (error REDLOCK_LIMIT <stored>) while any of the slots passed is held, {-2, stored} asks for
// the slots up to a larger stored limit, and with none held the limit is replaced. No stored
// limit (none yet, or permits of a client that did not store it) is replaced at once. Only
// get, set, pexpire, pttl and incr: the minimal ACL of the README.
// Then takes the first free slot of 1..n (SET PX). A repeat of the same attempt (a retried
// connection) finds its token and re-arms that slot; it gets a fresh fence, so no two holds ever
// share one. Returns {slot, fence (0 without fencing)} or {0, smallest pttl of the slots (-1:
// none expires)}. GET on a slot holding another type fails the script with WRONGTYPE.
const char kTakeLua[] = R"(local m = #KEYS - 2
local n = tonumber(ARGV[4])
local stored = tonumber(redis.call('get', KEYS[m + 2]))
if stored ~= n then
  if stored then
    for i = 1, m do
      if redis.call('get', KEYS[i]) then
        return redis.error_reply('REDLOCK_LIMIT ' .. stored)
      end
    end
    if stored > m then return {-2, stored} end
  end
  redis.call('set', KEYS[m + 2], ARGV[4])
end
local free = 0
local pttl = -1
local function fence()
  if ARGV[3] ~= '1' then return 0 end
  return redis.call('incr', KEYS[m + 1])
end
for i = 1, n do
  local holder = redis.call('get', KEYS[i])
  if holder == ARGV[1] then
    redis.call('pexpire', KEYS[i], ARGV[2])
    return {i, fence()}
  end
  if not holder then
    if free == 0 then free = i end
  else
    local left = redis.call('pttl', KEYS[i])
    if left >= 0 and (pttl < 0 or left < pttl) then pttl = left end
  end
end
if free == 0 then return {0, pttl} end
redis.call('set', KEYS[free], ARGV[1], 'PX', ARGV[2])
return {free, fence()})";

// KEYS the slot keys; ARGV[1] token, ARGV[2] release channel, ARGV[3] the SPUBLISH flag (see
// protocol/scripts.hpp). Deletes the slot holding the
// token, if any, and announces it.
const char kUndoLua[] = REDLOCK_PUBLISH_LUA R"(for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    redis.call('del', KEYS[i])
    return 1 + publish(ARGV[2], ARGV[1])
  end
end
return 0)";

// Never destroyed, like Scripts::get(): semaphores with static storage may still use it.
const Script& take_script() {
  static const Script& script = *new Script(kTakeLua);
  return script;
}

}  // namespace

PermitKeys::PermitKeys(const std::string& key, std::size_t limit)
    : fence(helper_key(key, ":permit:fence")),
      channel(helper_key(key, ":permit:released")),
      limit(helper_key(key, ":permit:limit")) {
  slots.reserve(limit);
  for (std::size_t i = 1; i <= limit; ++i) {
    slots.push_back(helper_key(key, ":permit:" + std::to_string(i)));
  }
}

VarCommand& VarCommand::arg(std::string_view value) {
  argv_.push_back(value.data());
  lens_.push_back(value.size());
  return *this;
}

VarCommand& VarCommand::key_count(std::size_t n) {
  numkeys_ = std::to_string(n);
  return arg(numkeys_);
}

VarCommand& VarCommand::evalsha(const Script& script) {
  script_ = &script;
  return arg("EVALSHA").arg(script.sha1());
}

CommandView VarCommand::view() const noexcept {
  return CommandView{static_cast<int>(argv_.size()), argv_.data(), lens_.data(), script_,
                     Resend::never};
}

void build_take_permit(VarCommand& c, const PermitKeys& keys, std::string_view token,
                       std::string_view ttl_ms, std::string_view fenced, std::string_view limit) {
  c.evalsha(take_script()).key_count(keys.slots.size() + 2);
  for (const auto& slot : keys.slots) c.arg(slot);
  c.arg(keys.fence).arg(keys.limit).arg(token).arg(ttl_ms).arg(fenced).arg(limit);
}

void build_undo_permit(VarCommand& c, const PermitKeys& keys, std::string_view token,
                       PubSub pubsub) {
  c.arg("EVAL").arg(kUndoLua).key_count(keys.slots.size());
  for (const auto& slot : keys.slots) c.arg(slot);
  c.arg(token).arg(keys.channel).arg(publish_flag(pubsub));
}

namespace {

// "REDLOCK_LIMIT <n>": the limit stored with held permits, or 0 if `r` is another error.
std::size_t limit_in_error(const redisReply* r) noexcept {
  static constexpr std::string_view kPrefix = "REDLOCK_LIMIT ";
  const std::string_view text(r->str, r->len);
  if (text.substr(0, kPrefix.size()) != kPrefix) return 0;
  std::size_t n = 0;
  for (const char c : text.substr(kPrefix.size())) {
    if (c < '0' || c > '9' || n > 1'000'000'000) return 0;
    n = n * 10 + static_cast<std::size_t>(c - '0');
  }
  return n;
}

}  // namespace

TakeReply read_take_reply(const redisReply* r, std::size_t limit) noexcept {
  TakeReply out;
  if (r != nullptr && r->type == REDIS_REPLY_ERROR) {
    out.other_limit = limit_in_error(r);
    out.problem =
        out.other_limit > 0 ? TakeReply::Problem::limit_conflict : TakeReply::Problem::server_error;
    return out;
  }
  const bool shape = r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                     r->element[0]->type == REDIS_REPLY_INTEGER &&
                     r->element[1]->type == REDIS_REPLY_INTEGER;
  const long long slot = shape ? r->element[0]->integer : -1;
  const long long value = shape ? r->element[1]->integer : -1;
  if (slot == -2 && value > 0) {
    out.problem = TakeReply::Problem::limit_unchecked;
    out.other_limit = static_cast<std::size_t>(value);
    return out;
  }
  if (slot < 0 || static_cast<unsigned long long>(slot) > limit || (slot > 0 && value < 0)) {
    out.problem = TakeReply::Problem::unexpected;
    return out;
  }
  out.slot = static_cast<std::size_t>(slot);
  if (slot > 0) {
    out.fence = static_cast<std::uint64_t>(value);
  } else {
    out.holder_pttl = std::chrono::milliseconds(value);
  }
  return out;
}

}  // namespace detail
}  // namespace redlock
