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

// Fair mode: the server's FIFO of waiters (KEYS[2], a list of tokens in arrival order; KEYS[3],
// a hash token -> "<ttl ms>:<seq>:<fenced 0/1>:<channel>"), shared by both fair scripts, whose
// ARGV[3] is the SPUBLISH flag. Liveness needs no heartbeat: a waiter's channel is its process's
// own (one per Client), so no subscriber of it on this node means that process is gone (its
// subscription went with its socket); the entry is dropped and the next one tried. `deliver`
// counts them (PUBSUB [SHARD]NUMSUB) and publishes only to a live one: PUBLISH's own answer
// counts this node's subscribers alone, yet the message also reaches the shard's other nodes (a
// cluster) or the replicas (replication); a waiter subscribed on a replica (a demoted master
// accepts SSUBSCRIBE) heard a grant that the master took for unheard and gave to the next. A waiter
// that gave up deletes only its hash field (lazy: its list entry is skipped when popped), so
// no O(N) LREM runs. The first two live waiters ("watchers") are told the holder's lease: they
// sleep until it ends and then advance the queue (an expiry announces nothing), the second one
// later, in case the first died too. No script reads TIME.
#define REDLOCK_FAIR_QUEUE_LUA                                                                     \
  "local function deliver(channel, message)\n"                                                     \
  "  local subs = nil\n"                                                                           \
  "  if ARGV[3] == '1' then subs = redis.pcall('pubsub', 'shardnumsub', channel) end\n"            \
  "  if type(subs) ~= 'table' or subs.err then\n"                                                  \
  "    subs = redis.call('pubsub', 'numsub', channel)\n"                                           \
  "  end\n"                                                                                        \
  "  if subs[2] == 0 then return 0 end\n"                                                          \
  "  return publish(channel, message)\n"                                                           \
  "end\n"                                                                                          \
  "local function notify_watchers(pttl)\n"                                                         \
  "  local pos = 0\n"                                                                              \
  "  while pos < 2 do\n"                                                                           \
  "    local w = redis.call('lindex', KEYS[2], pos)\n"                                             \
  "    if not w then return end\n"                                                                 \
  "    local info = redis.call('hget', KEYS[3], w)\n"                                              \
  "    local heard = 0\n"                                                                          \
  "    if info then\n"                                                                             \
  "      local channel = string.match(info, '^%d+:%d+:[01]:(.*)$')\n"                              \
  "      if channel then\n"                                                                        \
  "        heard = deliver(channel, 'head:' .. (pos + 1) .. ':' .. pttl .. ':' ..\n"               \
  "                        redis.sha1hex(w))\n"                                                    \
  "      end\n"                                                                                    \
  "    end\n"                                                                                      \
  "    if heard > 0 then\n"                                                                        \
  "      pos = pos + 1\n"                                                                          \
  "    else\n"                                                                                     \
  "      if info then redis.call('hdel', KEYS[3], w) end\n"                                        \
  "      if pos == 0 then\n"                                                                       \
  "        redis.call('lpop', KEYS[2])\n"                                                          \
  "      else\n"                                                                                   \
  "        local head = redis.call('lpop', KEYS[2])\n"                                             \
  "        redis.call('lpop', KEYS[2])\n"                                                          \
  "        redis.call('lpush', KEYS[2], head)\n"                                                   \
  "      end\n"                                                                                    \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "end\n"                                                                                          \
  "local function hand_over(self)\n"                                                               \
  "  local fence = nil\n"                                                                          \
  "  while true do\n"                                                                              \
  "    local w = redis.call('lpop', KEYS[2])\n"                                                    \
  "    if not w then break end\n"                                                                  \
  "    local info = redis.call('hget', KEYS[3], w)\n"                                              \
  "    if info then\n"                                                                             \
  "      redis.call('hdel', KEYS[3], w)\n"                                                         \
  "      if w == self then return w end\n"                                                         \
  "      local ttl, seq, fenced, channel = string.match(info, '^(%d+):(%d+):([01]):(.*)$')\n"      \
  "      if ttl then\n"                                                                            \
  "        redis.call('set', KEYS[1], w, 'PX', ttl)\n"                                             \
  "        if fenced == '1' and not fence then\n"                                                  \
  "          redis.call('incr', KEYS[4])\n"                                                        \
  "          fence = redis.call('get', KEYS[4])\n"                                                 \
  "        end\n"                                                                                  \
  "        local f = '0'\n"                                                                        \
  "        if fenced == '1' then f = fence end\n"                                                  \
  "        if deliver(channel, 'grant:' .. seq .. ':' .. f .. ':' .. redis.sha1hex(w)) > 0 then\n" \
  "          notify_watchers(ttl)\n"                                                               \
  "          return w\n"                                                                           \
  "        end\n"                                                                                  \
  "      end\n"                                                                                    \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "  redis.call('del', KEYS[1])\n"                                                                 \
  "  return false\n"                                                                               \
  "end\n"

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
if not holder then
  local got = hand_over(ARGV[1])
  if not got or got == ARGV[1] then
    redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
    notify_watchers(ARGV[2])
    return {1, fence(true)}
  end
end
local position = 0
if ARGV[4] == '1' then
  -- Concatenated, never %s: Lua 5.1's format cuts a string at its first NUL (keys are binary).
  local info = ARGV[2] .. ':' .. ARGV[5] .. ':' .. ARGV[6] .. ':' .. ARGV[7]
  if redis.call('hset', KEYS[3], ARGV[1], info) == 1 then
    position = math.min(redis.call('rpush', KEYS[2], ARGV[1]), 3)
  elseif redis.call('lindex', KEYS[2], 0) == ARGV[1] then
    position = 1
  elseif redis.call('lindex', KEYS[2], 1) == ARGV[1] then
    position = 2
  else
    position = 3
  end
end
return {0, redis.call('pttl', KEYS[1]), position})";

// The holder's release hands the lock to the oldest live waiter, or (nobody live queued)
// deletes it and announces the release. Anyone else's call is a waiter leaving the queue.
const char kFairReleaseLua[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n" REDLOCK_PUBLISH_LUA
        REDLOCK_FAIR_QUEUE_LUA R"(if redis.call('get', KEYS[1]) ~= ARGV[1] then
  if redis.call('hdel', KEYS[3], ARGV[1]) == 1 then
    local pttl = redis.call('pttl', KEYS[1])
    if pttl == -2 then
      hand_over(false)
    elseif redis.call('hlen', KEYS[3]) == 0 then
      redis.call('del', KEYS[2])  -- nobody waits: what is left is entries that left
    elseif redis.call('lindex', KEYS[2], 0) == ARGV[1] or
        redis.call('lindex', KEYS[2], 1) == ARGV[1] then
      notify_watchers(pttl)
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
