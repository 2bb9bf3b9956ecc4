// src/protocol/scripts.cpp: the text of the library's Lua scripts.
#include "protocol/scripts.hpp"

namespace redlock {
namespace detail {

const char kReleaseLua[] = REDLOCK_PUBLISH_LUA R"(if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  return 1 + publish(ARGV[2], ARGV[1])
end
return 0)";

// The rollback of a grant: compare-and-delete without announcing it (nobody was told the lock
// was held, so there is nothing to wake waiters for).
const char kUndoLua[] = R"(if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0)";

const char kExtendLua[] = R"(if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0)";

// A repeat of the very same attempt (a pooled connection that died after the server ran it is
// retried once) finds the key already holding its token: that is the grant, re-armed, with the
// counter's current value, which is this hold's fence (nothing else increments it meanwhile).
const char kAcquireFencedLua[] = R"(if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('incr', KEYS[2])}
end
if redis.call('type', KEYS[1]).ok ~= 'string' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
end
return {0, redis.call('pttl', KEYS[1])})";

const char kRaiseFenceLua[] = R"(if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
local current = tonumber(redis.call('get', KEYS[2]) or '0')
if current < tonumber(ARGV[2]) then redis.call('set', KEYS[2], ARGV[2]) end
return 1)";

// Fair mode. Server time, not client time, decides whether a queued waiter is still alive (every
// client then judges by one clock). Dead waiters ahead of the caller are dropped from the queue.
// Uncontended (no queue, the key free: a queue's list and info leave together) it is two calls,
// EXISTS and SET NX: no GET, no clock read, no queue walk. Past that, the key is held or the
// queue is not empty (the script is atomic), so the head of a live queue is never jumped.
const char kFairAcquireLua[] = R"(if redis.replicate_commands then redis.replicate_commands() end
local function fence(incr)
  if ARGV[6] ~= '1' then return 0 end
  if incr then return redis.call('incr', KEYS[4]) end
  return tonumber(redis.call('get', KEYS[4]) or '0')
end
if redis.call('exists', KEYS[2]) == 0 and
    redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, fence(true)}
end
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('lrem', KEYS[2], 0, ARGV[1])
  redis.call('hdel', KEYS[3], ARGV[1])
  return {1, fence(false)}
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head = redis.call('lindex', KEYS[2], 0)
while head and head ~= ARGV[1] do
  local info = redis.call('hget', KEYS[3], head)
  local alive = info and tonumber(string.match(info, '^(%d+):'))
  if alive and alive >= now then break end
  redis.call('lpop', KEYS[2])
  redis.call('hdel', KEYS[3], head)
  head = redis.call('lindex', KEYS[2], 0)
end
if not holder and (not head or head == ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if head then redis.call('lpop', KEYS[2]) end
  redis.call('hdel', KEYS[3], ARGV[1])
  return {1, fence(true)}
end
if ARGV[3] == '1' then
  local alive = tonumber(ARGV[4])
  -- Concatenated, never %s: Lua 5.1's format cuts a string at its first NUL (keys are binary).
  local info = string.format('%.0f', now + alive) .. ':' .. ARGV[2] .. ':' .. ARGV[5] .. ':' ..
    ARGV[6] .. ':' .. ARGV[7]
  if redis.call('hset', KEYS[3], ARGV[1], info) == 1 then
    redis.call('lrem', KEYS[2], 0, ARGV[1])
    redis.call('rpush', KEYS[2], ARGV[1])
  end
  -- One expiry for both keys (so they never outlive each other): outlasts every live place.
  local keep = math.max(2 * alive, redis.call('pttl', KEYS[2]), redis.call('pttl', KEYS[3]))
  redis.call('pexpire', KEYS[2], keep)
  redis.call('pexpire', KEYS[3], keep)
end
local pttl = -2
if holder then pttl = redis.call('pttl', KEYS[1]) end
return {0, pttl})";

// Nobody queued (the common case): a plain compare-and-delete and the announcement. The holder
// has no place of its own in the queue (a grant removes it).
const char kFairReleaseLua[] =
    REDLOCK_PUBLISH_LUA R"(if redis.replicate_commands then redis.replicate_commands() end
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  redis.call('lrem', KEYS[2], 0, ARGV[1])
  redis.call('hdel', KEYS[3], ARGV[1])
  return 0
end
if redis.call('exists', KEYS[2]) == 0 then
  redis.call('del', KEYS[1])
  return 1 + publish(ARGV[2], ARGV[1])
end
redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('hdel', KEYS[3], ARGV[1])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while true do
  local waiter = redis.call('lpop', KEYS[2])
  if not waiter then break end
  local info = redis.call('hget', KEYS[3], waiter)
  redis.call('hdel', KEYS[3], waiter)
  if info then
    local alive, ttl, seq, fenced, channel = string.match(info, '^(%d+):(%d+):(%d+):([01]):(.+)$')
    if alive and tonumber(alive) >= now then
      redis.call('set', KEYS[1], waiter, 'PX', ttl)
      local fence = '0'
      if fenced == '1' then
        redis.call('incr', KEYS[4])
        fence = redis.call('get', KEYS[4])  -- a string: a Lua number would print as 1e+14
      end
      publish(channel, 'grant:' .. seq .. ':' .. fence .. ':' .. redis.sha1hex(waiter))
      return 1
    end
  end
end
redis.call('del', KEYS[1])
return 1 + publish(ARGV[2], ARGV[1]))";

const Scripts& Scripts::get() {
  // Deliberately never destroyed: locks with static storage duration (and the watchdog's
  // threads) may still release or renew while the program exits.
  static const Scripts& scripts =
      *new Scripts{Script(kReleaseLua),    Script(kExtendLua), Script(kAcquireFencedLua),
                   Script(kRaiseFenceLua), Script(kUndoLua),   Script(kFairAcquireLua),
                   Script(kFairReleaseLua)};
  return scripts;
}

}  // namespace detail
}  // namespace redlock
