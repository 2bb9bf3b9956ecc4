// src/protocol/multi.cpp: a MultiLock's scripts, commands and reply (see multi.hpp).
#include "protocol/multi.hpp"

#include "protocol/commands.hpp"  // publish_flag
#include "protocol/scripts.hpp"   // Script, REDLOCK_PUBLISH_LUA
#include "util/key_slot.hpp"

namespace redlock {
namespace detail {
namespace {

// KEYS[1..n] the lock keys, KEYS[n+1..2n] their fence counters; ARGV[1] token, ARGV[2] ttl ms,
// ARGV[3] "1" with fencing. Every GET comes before any SET: a refusal writes nothing, so no
// partial hold is ever visible. GET on a key of another type fails with WRONGTYPE. Returns
// {1, fence of each key} or {0, pttl of the busy key, its index}.
const char kAcquireLua[] = R"(local n = #KEYS / 2
local ours = {}
for i = 1, n do
  local holder = redis.call('get', KEYS[i])
  if holder == ARGV[1] then
    ours[i] = true
  elseif holder then
    return {0, redis.call('pttl', KEYS[i]), i}
  end
end
local out = {1}
for i = 1, n do
  redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
  local fence = 0
  if ARGV[3] == '1' then
    if ours[i] then
      fence = tonumber(redis.call('get', KEYS[n + i]) or '0')
    else
      fence = redis.call('incr', KEYS[n + i])
    end
  end
  out[i + 1] = fence
end
return out)";

// KEYS the lock keys; ARGV[1] token, ARGV[2] "1" to announce, ARGV[3] the SPUBLISH flag,
// ARGV[3 + i] the channel of KEYS[i].
const char kReleaseLua[] = REDLOCK_PUBLISH_LUA R"(local all = true
local heard = 0
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    redis.call('del', KEYS[i])
    if ARGV[2] == '1' then heard = math.max(heard, publish(ARGV[3 + i], ARGV[1])) end
  else
    all = false
  end
end
if not all then return 0 end
return 1 + heard)";

// KEYS the lock keys; ARGV[1] token, ARGV[2] ttl ms.
const char kExtendLua[] = R"(for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do redis.call('pexpire', KEYS[i], ARGV[2]) end
return 1)";

// Never destroyed, like Scripts::get(): locks with static storage may still use them.
struct MultiScripts {
  Script acquire{kAcquireLua};
  Script release{kReleaseLua};
  Script extend{kExtendLua};
};
const MultiScripts& scripts() {
  static const MultiScripts& s = *new MultiScripts();
  return s;
}

}  // namespace

MultiKeys::MultiKeys(std::vector<std::string> names) : keys(std::move(names)) {
  fences.reserve(keys.size());
  channels.reserve(keys.size());
  for (const std::string& key : keys) {
    fences.push_back(helper_key(key, ":fence"));
    channels.push_back(helper_key(key, ":released"));
  }
}

void build_multi_acquire(VarCommand& c, const MultiKeys& keys, std::string_view token,
                         std::string_view ttl_ms, std::string_view fenced) {
  c.evalsha(scripts().acquire).key_count(2 * keys.keys.size());
  for (const auto& key : keys.keys) c.arg(key);
  for (const auto& fence : keys.fences) c.arg(fence);
  c.arg(token).arg(ttl_ms).arg(fenced);
}

void build_multi_release(VarCommand& c, const MultiKeys& keys, std::string_view token,
                         bool announce, PubSub pubsub, ScriptSend send) {
  if (send == ScriptSend::eval) {
    c.arg("EVAL").arg(kReleaseLua);
  } else {
    c.evalsha(scripts().release);
  }
  c.key_count(keys.keys.size());
  for (const auto& key : keys.keys) c.arg(key);
  c.arg(token).arg(announce ? "1" : "0").arg(publish_flag(pubsub));
  for (const auto& channel : keys.channels) c.arg(channel);
}

void build_multi_extend(VarCommand& c, const MultiKeys& keys, std::string_view token,
                        std::string_view ttl_ms) {
  c.evalsha(scripts().extend).key_count(keys.keys.size());
  for (const auto& key : keys.keys) c.arg(key);
  c.arg(token).arg(ttl_ms);
}

MultiReply read_multi_reply(const redisReply* r, std::size_t keys) {
  MultiReply out;
  if (r != nullptr && r->type == REDIS_REPLY_ERROR) {
    out.problem = MultiReply::Problem::server_error;
    return out;
  }
  const bool array = r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements >= 1;
  for (std::size_t i = 0; array && i < r->elements; ++i) {
    if (r->element[i]->type != REDIS_REPLY_INTEGER) out.problem = MultiReply::Problem::unexpected;
  }
  if (!array || out.problem != MultiReply::Problem::none) {
    out.problem = MultiReply::Problem::unexpected;
    return out;
  }
  const long long flag = r->element[0]->integer;
  if (flag == 1 && r->elements == keys + 1) {
    out.granted = true;
    for (std::size_t i = 1; i <= keys; ++i) {
      const long long fence = r->element[i]->integer;
      if (fence < 0) out.problem = MultiReply::Problem::unexpected;
      out.fences.push_back(static_cast<std::uint64_t>(fence < 0 ? 0 : fence));
    }
    return out;
  }
  const long long busy = r->elements == 3 ? r->element[2]->integer : 0;
  if (flag != 0 || busy < 1 || static_cast<unsigned long long>(busy) > keys) {
    out.problem = MultiReply::Problem::unexpected;
    return out;
  }
  out.holder_pttl = std::chrono::milliseconds(r->element[1]->integer);
  out.busy = static_cast<std::size_t>(busy - 1);
  return out;
}

}  // namespace detail
}  // namespace redlock
