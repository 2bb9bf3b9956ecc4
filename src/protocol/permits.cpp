// src/protocol/permits.cpp: a Semaphore's scripts, commands and reply (see permits.hpp).
#include "protocol/permits.hpp"

#include <algorithm>
#include <string>

#include "protocol/commands.hpp"  // publish_flag
#include "protocol/scripts.hpp"   // the wake-one queue's Lua
#include "util/key_slot.hpp"

namespace redlock {
namespace detail {
namespace {

// Hands the free slots free[from..] (their numbers in KEYS) to the next live waiters, while any
// wait: leases that ended unannounced (holders that died) all reach the queue at once, not one
// per lease the watchers sleep through. True if one was handed over (its grant told the
// watchers).
#define REDLOCK_HAND_OVER_FREE_LUA                             \
  "local function hand_over_free(free, from)\n"                \
  "  local handed = false\n"                                   \
  "  for at = from, #free do\n"                                \
  "    if redis.call('exists', fq_list) == 0 then break end\n" \
  "    fq_key = KEYS[free[at]]\n"                              \
  "    if hand_over(false) then handed = true end\n"           \
  "  end\n"                                                    \
  "  return handed\n"                                          \
  "end\n"

// KEYS[1..m] slot keys, KEYS[m+1] the fence counter, KEYS[m+2] the stored limit, KEYS[m+3] the
// waiters' queue, KEYS[m+4] its info; ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the SPUBLISH flag,
// ARGV[4] the limit n (m >= n: more slots are passed to check a larger stored limit), ARGV[5]
// "1" with fencing, ARGV[6] "1" to join the queue when refused, ARGV[7] this process's grant
// channel. The limit is stored with the permits: another one is refused (error REDLOCK_LIMIT
// <stored>) while any of the slots passed is held, {-2, stored} asks for the slots up to a
// larger stored limit, and with none held the limit is replaced. No stored limit (none yet, or
// permits of a client that did not store it) is replaced at once.
// A slot already holding the token is a hand-over being claimed (or a repeat of the same
// attempt): it is re-armed, and gets a fresh fence, so no two holds ever share one. Otherwise a
// free slot goes to the caller only if nobody live waits in the lock's wake-one queue
// (REDLOCK_FAIR_QUEUE_LUA, protocol/scripts.cpp): with a queue, the caller hands it to the
// oldest live waiter (itself, if it is that one). Refused, it joins the queue (ARGV[6]).
// Returns {slot, fence (0 without fencing)} or {0, smallest pttl of the slots (-1: none
// expires), queue position (0: not queued; 1, 2: watches the permits' lease ends; 3: behind)}.
// GET on a slot holding another type fails the script with WRONGTYPE.
const char kTakeLua[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n" REDLOCK_PUBLISH_LUA
        REDLOCK_FAIR_QUEUE_LUA REDLOCK_HAND_OVER_FREE_LUA R"(local m = #KEYS - 4
local n = tonumber(ARGV[4])
fq_fence, fq_list, fq_info = KEYS[m + 1], KEYS[m + 3], KEYS[m + 4]
for i = 1, math.min(n, m) do fq_peers[i] = KEYS[i] end
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
local function fence()
  if ARGV[5] ~= '1' then return 0 end
  return redis.call('incr', KEYS[m + 1])
end
local pttl = -1
local function lease_of(i)
  local left = redis.call('pttl', KEYS[i])
  if left >= 0 and (pttl < 0 or left < pttl) then pttl = left end
end
local free = {}
for i = 1, n do
  local holder = redis.call('get', KEYS[i])
  if holder == ARGV[1] then
    redis.call('pexpire', KEYS[i], ARGV[2])
    redis.call('hdel', fq_info, ARGV[1])
    return {i, fence()}
  end
  if holder then lease_of(i) else free[#free + 1] = i end
end
for at, i in ipairs(free) do
  fq_key = KEYS[i]
  local got, more = false, false
  if redis.call('exists', fq_list) == 1 then got, more = hand_over(ARGV[1]) end
  if (not got and not more) or got == ARGV[1] then
    redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
    -- The other free slots (leases that ended unannounced) go to the next live waiters now;
    -- a hand-over tells the watchers, otherwise the earliest lease end of the permits.
    if not hand_over_free(free, at + 1) and got then notify_watchers(lease_end(ARGV[2])) end
    return {i, fence()}
  end
  if more then pttl = 0 end  -- dead entries left for later calls: come back at once
  lease_of(i)
end
local position = 0
if ARGV[6] == '1' then position = join(ARGV[1], ARGV[2] .. ':0:0:' .. ARGV[7]) end
return {0, pttl, position})";

// KEYS[1..m] the slot keys, KEYS[m+1] the waiters' queue, KEYS[m+2] its info, KEYS[m+3] the
// fence counter; ARGV[1] token, ARGV[2] release channel, ARGV[3] the SPUBLISH flag. The token's
// way out, whatever it has: a slot holding it (an attempt's grant, or a hand-over that crossed
// a waiter giving up) goes to the oldest live waiter, or is deleted and announced; a place in
// the queue is left (lazily: the hash field only). A watcher that leaves passes its duty on:
// a free slot is handed over, otherwise the next two are told the earliest lease end.
const char kLeaveLua[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n" REDLOCK_PUBLISH_LUA
        REDLOCK_FAIR_QUEUE_LUA REDLOCK_HAND_OVER_FREE_LUA R"(local m = #KEYS - 3
fq_list, fq_info, fq_fence = KEYS[m + 1], KEYS[m + 2], KEYS[m + 3]
for i = 1, m do fq_peers[i] = KEYS[i] end
for i = 1, m do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    fq_key = KEYS[i]
    if redis.call('exists', fq_list) == 1 and hand_over(false) then return 1 end
    redis.call('del', KEYS[i])
    return 1 + publish(ARGV[2], ARGV[1])
  end
end
if redis.call('hdel', fq_info, ARGV[1]) == 0 then return 0 end
if redis.call('hlen', fq_info) == 0 then
  redis.call('del', fq_list)  -- nobody waits: what is left is entries that left
  return 0
end
if redis.call('lindex', fq_list, 0) ~= ARGV[1] and redis.call('lindex', fq_list, 1) ~= ARGV[1] then
  return 0
end
local pttl, free = -1, {}
for i = 1, m do
  local left = redis.call('pttl', KEYS[i])
  if left == -2 then
    free[#free + 1] = i
  elseif left >= 0 and (pttl < 0 or left < pttl) then
    pttl = left
  end
end
if not hand_over_free(free, 1) and pttl >= 0 then notify_watchers(pttl) end
return 0)";

// Never destroyed, like Scripts::get(): semaphores with static storage may still use it.
const Script& take_script() {
  static const Script& script = *new Script(kTakeLua);
  return script;
}

const Script& leave_script() {
  static const Script& script = *new Script(kLeaveLua);
  return script;
}

}  // namespace

PermitKeys::PermitKeys(const std::string& key, std::size_t limit)
    : fence(helper_key(key, ":permit:fence")),
      channel(helper_key(key, ":permit:released")),
      limit(helper_key(key, ":permit:limit")),
      queue(helper_key(key, ":permit:waiters")),
      queue_info(helper_key(key, ":permit:waiters:info")) {
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
  return CommandView{static_cast<int>(argv_.size()), argv_.data(), lens_.data(), script_, resend_};
}

void build_take_permit(VarCommand& c, const PermitKeys& keys, std::string_view token,
                       const TakeArgs& args) {
  c.evalsha(take_script()).key_count(keys.slots.size() + 4);
  for (const auto& slot : keys.slots) c.arg(slot);
  c.arg(keys.fence).arg(keys.limit).arg(keys.queue).arg(keys.queue_info);
  c.arg(token).arg(args.ttl_ms).arg(publish_flag(args.pubsub)).arg(args.limit);
  c.arg(args.fenced).arg(args.join).arg(args.grant_channel);
}

void build_leave_permits(VarCommand& c, const PermitKeys& keys, std::string_view token,
                         PubSub pubsub, Send send) {
  if (send == Send::eval) {
    c.arg("EVAL").arg(leave_script().body());
  } else {
    c.evalsha(leave_script());
  }
  c.key_count(keys.slots.size() + 3);
  for (const auto& slot : keys.slots) c.arg(slot);
  c.arg(keys.queue).arg(keys.queue_info).arg(keys.fence);
  c.arg(token).arg(keys.channel).arg(publish_flag(pubsub));
}

void build_permit_release(VarCommand& c, const LockKeys& keys,
                          const std::vector<std::string>& slots, std::string_view token,
                          PubSub pubsub) {
  c.evalsha(Scripts::get().fair_release).key_count(slots.size() + 4).allow_resend();
  c.arg(keys.key).arg(keys.queue).arg(keys.queue_info).arg(keys.fence);
  for (const auto& slot : slots) c.arg(slot);
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
  // {slot, fence}, {0, pttl, position} or {-2, stored limit}.
  const bool shape =
      r != nullptr && r->type == REDIS_REPLY_ARRAY && (r->elements == 2 || r->elements == 3) &&
      r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER &&
      (r->elements == 2 || r->element[2]->type == REDIS_REPLY_INTEGER);
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
    const long long position = r->elements == 3 ? r->element[2]->integer : 0;
    out.watcher = static_cast<unsigned char>(std::clamp(position, 0LL, 3LL));
  }
  return out;
}

}  // namespace detail
}  // namespace redlock
