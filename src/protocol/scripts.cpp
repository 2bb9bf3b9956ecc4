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

// The fair queue's shared functions (REDLOCK_FAIR_QUEUE_LUA) are in scripts.hpp.

// Uncontended (no queue, the key free) it is two calls, EXISTS and SET NX. A free key with a
// queue (a lease that lapsed, a head that left) is never barged: the caller advances the queue
// and takes the key only if it is the live head or nobody live is ahead of it.
const char kFairAcquireLua[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n" REDLOCK_PUBLISH_LUA
        REDLOCK_FAIR_QUEUE_LUA R"(local function fence(incr)
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
  redis.call('hdel', KEYS[3], ARGV[1])
  return {1, fence(false)}
end
-- A free key with a queue: a lease that lapsed, or a grant nobody claimed. The caller advances
-- the queue; a grant it makes to another lapses after a claim window unless claimed, and the
-- caller watches it (position 1) to advance again.
local advanced, more = false, false
if not holder then
  local got
  got, more = hand_over(ARGV[1], true)
  if (not got and not more) or got == ARGV[1] then
    redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
    notify_watchers(ARGV[2])
    return {1, fence(true)}
  end
  advanced = true
end
local position = 0
if ARGV[4] == '1' then
  -- Concatenated, never %s: Lua 5.1's format cuts a string at its first NUL (keys are binary).
  position = join(ARGV[1], ARGV[2] .. ':' .. ARGV[5] .. ':' .. ARGV[6] .. ':' .. ARGV[7])
  if advanced then position = 1 end
end
-- Dead entries left for later calls: the caller comes back at once to examine more.
if more then return {0, 0, position} end
return {0, redis.call('pttl', KEYS[1]), position})";

// The holder's release hands the lock to the oldest live waiter, or (nobody live queued)
// deletes it and announces the release. Anyone else's call is a waiter leaving the queue.
// KEYS[5..]: a Semaphore permit's slot keys (fq_peers), so the watchers hear the earliest lease
// end among the permits, not the new holder's.
const char kFairReleaseLua[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n" REDLOCK_PUBLISH_LUA
        REDLOCK_FAIR_QUEUE_LUA R"(for i = 5, #KEYS do fq_peers[i - 4] = KEYS[i] end
local holder = redis.call('get', KEYS[1])
if holder ~= ARGV[1] then
  if redis.call('hdel', KEYS[3], ARGV[1]) == 1 then
    local watched = redis.call('lindex', KEYS[2], 0) == ARGV[1] or
        redis.call('lindex', KEYS[2], 1) == ARGV[1]
    forget(ARGV[1])
    if not holder then
      hand_over(false, true)
    elseif redis.call('hlen', KEYS[3]) == 0 then
      redis.call('del', KEYS[2])  -- nobody waits: what is left is entries that left
    elseif watched then
      notify_watchers(lease_end(redis.call('pttl', KEYS[1])))
    end
  end
  return 0
end
if redis.call('exists', KEYS[2]) == 1 and hand_over(false) then return 1 end
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
