// src/protocol/scripts.hpp: the library's Lua scripts: their text and their Script objects (SHA1
// computed once).
#ifndef REDLOCK_SRC_PROTOCOL_SCRIPTS_HPP
#define REDLOCK_SRC_PROTOCOL_SCRIPTS_HPP

#include <redlock/client.hpp>

// The Lua function publish(channel, message) that every announcing script starts with: ARGV[3] '1'
// asks for SPUBLISH (sharded pub/sub on a cluster, where the channel shares the key's slot). A
// server without it (Redis < 7.0) publishes the classic way; its waiters, refused SSUBSCRIBE, poll.
#define REDLOCK_PUBLISH_LUA                                       \
  "local function publish(channel, message)\n"                    \
  "  if ARGV[3] == '1' then\n"                                    \
  "    local heard = redis.pcall('spublish', channel, message)\n" \
  "    if type(heard) == 'number' then return heard end\n"        \
  "  end\n"                                                       \
  "  return redis.call('publish', channel, message)\n"            \
  "end\n"

// Fair mode: the server's FIFO of waiters (KEYS[2], a list of tokens in arrival order; KEYS[3],
// a hash token -> "<ttl ms>:<seq>:<fenced 0/1>:<channel>"), shared by both fair scripts, whose
// ARGV[3] is the SPUBLISH flag. A waiter's channel is its process's own (one per Client), so no
// subscriber of it on this node means that process is gone (its subscription went with its
// socket); the entry is dropped and the next one tried. An empty channel is a waiter that
// polls (it cannot be woken): its info's second field is then its claim window, and a
// hand-over to it sets the key for that long, with no message; its next attempt re-arms it.
// `deliver` counts them (PUBSUB [SHARD]NUMSUB) and publishes only to a live one: PUBLISH's own
// answer counts this node's subscribers alone, yet the message also reaches the shard's other nodes
// (a cluster) or the replicas (replication); a waiter subscribed on a replica (a demoted master
// accepts SSUBSCRIBE) heard a grant that the master took for unheard and gave to the next. A
// waiter that gave up deletes its hash field, and its list entry only when it is among the last
// 64 (`forget`: bounded); a deeper one is skipped when popped. No call examines more than 32
// entries (`examine`): a hand-over that runs out returns false, true (more left for later
// calls). Every join keeps the queue's keys for 3 x the joiner's ttl (`keep_queue`), so they
// expire once no waiter attempts any more. The first two live waiters ("watchers") are told the
// holder's lease: they sleep until it ends and then advance the queue (an expiry announces
// nothing), the second one later, in case the first died too; every queued waiter also re-attempts
// once per stall guard (AcquireLoop::turn_wake), so nobody relies on the watchers alone (#41).
// `hand_over(self, lapsed)`: a hand-over because the key was found free with a queue (a lease that
// lapsed, a grant nobody claimed) sets the key for a claim window only (claim_window) and publishes
// "grant:0:...", a grant numbering no attempt, which the grantee takes with an attempt (the
// acquire re-arms a key holding the caller's token to its ttl); a holder's own release hands
// over with the full ttl, taken on the message alone. No script reads TIME. The queue's keys are
// the fq_ locals: the lock's scripts keep KEYS[1..4]; a Semaphore's permit scripts
// (protocol/permits.cpp) point fq_list, fq_info and fq_fence at the semaphore's queue and fq_key at
// the permit slot in play. A Semaphore's watchers are told the earliest lease end among its
// permits (`lease_end`, over the slot keys its scripts put in fq_peers; a free slot counts as 0).
#define REDLOCK_FAIR_QUEUE_LUA                                                                     \
  "local fq_key, fq_list, fq_info, fq_fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]\n"                \
  "local fq_budget = 32  -- queue entries one call examines; the rest is left to later calls\n"    \
  "local function examine()\n"                                                                     \
  "  fq_budget = fq_budget - 1\n"                                                                  \
  "  return fq_budget >= 0\n"                                                                      \
  "end\n"                                                                                          \
  "local function keep_queue(ttl)\n"                                                               \
  "  local keep = 3 * tonumber(ttl)\n"                                                             \
  "  if redis.call('pttl', fq_info) < 2 * tonumber(ttl) then\n"                                    \
  "    redis.call('pexpire', fq_info, keep)\n"                                                     \
  "    redis.call('pexpire', fq_list, keep)\n"                                                     \
  "  end\n"                                                                                        \
  "end\n"                                                                                          \
  "local function forget(token)\n"                                                                 \
  "  local at = redis.pcall('lpos', fq_list, token, 'RANK', -1, 'MAXLEN', 64)\n"                   \
  "  if type(at) == 'number' then redis.call('lrem', fq_list, -1, token) end\n"                    \
  "end\n"                                                                                          \
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
  "  while pos < 2 and examine() do\n"                                                             \
  "    local w = redis.call('lindex', fq_list, pos)\n"                                             \
  "    if not w then return end\n"                                                                 \
  "    local info = redis.call('hget', fq_info, w)\n"                                              \
  "    local heard = 0\n"                                                                          \
  "    if info then\n"                                                                             \
  "      local channel = string.match(info, '^%d+:%d+:[01]:(.*)$')\n"                              \
  "      if channel == '' then\n"                                                                  \
  "        heard = 1  -- a waiter that polls: it needs no notice\n"                                \
  "      elseif channel then\n"                                                                    \
  "        heard = deliver(channel, 'head:' .. (pos + 1) .. ':' .. pttl .. ':' ..\n"               \
  "                        redis.sha1hex(w))\n"                                                    \
  "      end\n"                                                                                    \
  "    end\n"                                                                                      \
  "    if heard > 0 then\n"                                                                        \
  "      pos = pos + 1\n"                                                                          \
  "    else\n"                                                                                     \
  "      if info then redis.call('hdel', fq_info, w) end\n"                                        \
  "      if pos == 0 then\n"                                                                       \
  "        redis.call('lpop', fq_list)\n"                                                          \
  "      else\n"                                                                                   \
  "        local head = redis.call('lpop', fq_list)\n"                                             \
  "        redis.call('lpop', fq_list)\n"                                                          \
  "        redis.call('lpush', fq_list, head)\n"                                                   \
  "      end\n"                                                                                    \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "end\n"                                                                                          \
  "local fq_peers = {}  -- a Semaphore's slot keys: watchers hear their earliest lease end\n"      \
  "local function lease_end(pttl)\n"                                                               \
  "  pttl = tonumber(pttl)\n"                                                                      \
  "  for _, peer in ipairs(fq_peers) do\n"                                                         \
  "    local left = redis.call('pttl', peer)\n"                                                    \
  "    if left == -2 then left = 0 end  -- free: a lease that ended unannounced\n"                 \
  "    if left >= 0 and (pttl < 0 or left < pttl) then pttl = left end\n"                          \
  "  end\n"                                                                                        \
  "  return pttl\n"                                                                                \
  "end\n"                                                                                          \
  "local function claim_window(ttl)\n"                                                             \
  "  ttl = tonumber(ttl)\n"                                                                        \
  "  return math.min(ttl, math.max(100, math.min(1000, math.floor(ttl / 5))))\n"                   \
  "end\n"                                                                                          \
  "local function hand_over(self, lapsed)\n"                                                       \
  "  local fence = nil\n"                                                                          \
  "  while true do\n"                                                                              \
  "    if not examine() then\n"                                                                    \
  "      redis.call('del', fq_key)\n"                                                              \
  "      return false, true\n"                                                                     \
  "    end\n"                                                                                      \
  "    local w = redis.call('lpop', fq_list)\n"                                                    \
  "    if not w then break end\n"                                                                  \
  "    local info = redis.call('hget', fq_info, w)\n"                                              \
  "    if info then\n"                                                                             \
  "      redis.call('hdel', fq_info, w)\n"                                                         \
  "      if w == self then return w end\n"                                                         \
  "      local ttl, seq, fenced, channel = string.match(info, '^(%d+):(%d+):([01]):(.*)$')\n"      \
  "      if ttl then\n"                                                                            \
  "        if channel == '' then\n"                                                                \
  "          ttl = math.min(tonumber(ttl), math.max(tonumber(seq), 1))\n"                          \
  "        elseif lapsed then\n"                                                                   \
  "          ttl, seq = claim_window(ttl), '0'\n"                                                  \
  "        end\n"                                                                                  \
  "        redis.call('set', fq_key, w, 'PX', ttl)\n"                                              \
  "        if fenced == '1' and not fence then\n"                                                  \
  "          redis.call('incr', fq_fence)\n"                                                       \
  "          fence = redis.call('get', fq_fence)\n"                                                \
  "        end\n"                                                                                  \
  "        local f = '0'\n"                                                                        \
  "        if fenced == '1' then f = fence end\n"                                                  \
  "        if channel == '' or\n"                                                                  \
  "           deliver(channel, 'grant:' .. seq .. ':' .. f .. ':' .. redis.sha1hex(w)) > 0 then\n" \
  "          notify_watchers(lease_end(ttl))\n"                                                    \
  "          return w\n"                                                                           \
  "        end\n"                                                                                  \
  "      end\n"                                                                                    \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "  redis.call('del', fq_key)\n"                                                                  \
  "  return false\n"                                                                               \
  "end\n"                                                                                          \
  "local function join(token, info)\n"                                                             \
  "  local added = redis.call('hset', fq_info, token, info) == 1\n"                                \
  "  local length = 0\n"                                                                           \
  "  if added then length = redis.call('rpush', fq_list, token) end\n"                             \
  "  keep_queue(string.match(info, '^(%d+):'))\n"                                                  \
  "  if added then\n"                                                                              \
  "    return math.min(length, 3)\n"                                                               \
  "  elseif redis.call('lindex', fq_list, 0) == token then\n"                                      \
  "    return 1\n"                                                                                 \
  "  elseif redis.call('lindex', fq_list, 1) == token then\n"                                      \
  "    return 2\n"                                                                                 \
  "  end\n"                                                                                        \
  "  return 3\n"                                                                                   \
  "end\n"

namespace redlock {
namespace detail {

// The Lua scripts, shared by every lock (SHA1 computed once).
struct Scripts {
  // Every script that announces takes, after its channel, a flag: "1" announces with SPUBLISH
  // (sharded pub/sub, Redis >= 7.0: a cluster, where the channel shares the key's slot), anything
  // else with PUBLISH. One text serves every topology; the node decides (ClientImpl::pubsub).
  //
  // KEYS[1] lock key; ARGV[1] token; ARGV[2] release channel; ARGV[3] the SPUBLISH flag. Deletes
  // the key if it still holds the token and publishes on the channel. Returns 1 + the number of
  // subscribers that heard the release if deleted, 0 if it was not ours.
  Script release;
  // KEYS[1] lock key; ARGV[1] token; ARGV[2] ttl ms. PEXPIREs the key if it still holds the token.
  // Returns 1 if extended, 0 if not ours.
  Script extend;
  // KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] token; ARGV[2] ttl ms.
  // SET NX PX and INCR the counter in one step. Returns {1, fence} or {0, pttl of the holder}.
  Script acquire_fenced;
  // KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] token; ARGV[2] fence.
  // If the key still holds the token, raises the counter to at least fence. Returns 1 or 0.
  Script raise_fence;
  // KEYS[1] lock key; ARGV[1] token. Compare-and-delete without publishing. Returns 1 or 0.
  Script undo;
  // Fair mode (the FIFO is described in scripts.cpp). KEYS[1] lock key, KEYS[2] queue (list of
  // tokens), KEYS[3] queue info (hash: token -> "ttl_ms:seq:fenced:grant channel"), KEYS[4] fence
  // counter. ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the SPUBLISH flag, ARGV[4] "1" to join the
  // queue when refused (or update the place's info), ARGV[5] attempt sequence number, ARGV[6]
  // "1" with fencing, ARGV[7] the channel to hand the lock over on (this process's own). Takes
  // the lock if it is free and nobody live is queued ahead; a key already holding the token (a
  // hand-over whose message was missed or came too late to trust, or a grant after a lapse) is
  // re-armed to the full ttl. Empty ARGV[7]: the caller polls, and ARGV[5] is its claim window
  // (ms). Returns {1, fence (0 without fencing)} or {0, pttl of the holder, position}: position
  // 1 for the head of the queue, 2 for the next one (both watch the holder's lease), 3 further
  // back, 0 not queued (ARGV[4] not "1"); position 1 also when this call found the key free and
  // handed it to another waiter (the caller watches that grant's claim window), with pttl 0
  // when it left dead entries to examine (the caller comes back at once).
  Script fair_acquire;
  // Fair mode. KEYS as fair_acquire, then (a Semaphore's permit) every slot key of the
  // semaphore; ARGV[1] token, ARGV[2] release channel, ARGV[3] the SPUBLISH flag. If the key
  // holds the token: hands it to the first live queued waiter (SET PX its ttl, publish
  // "grant:<seq>:<fence>:<sha1 of token>" on that waiter's channel, and tell the next two
  // waiters "head:<position>:<pttl>:<sha1>", pttl the earliest lease end among KEYS[1] and the
  // slot keys) or deletes it and publishes the token on
  // ARGV[2]. Otherwise the waiter leaves the queue. Returns 0 if it was not ours, 1 if handed
  // over, 1 + the number of subscribers if deleted. Messages name a waiter by SHA1(token): a
  // live holder's token is never published.
  Script fair_release;
  static const Scripts& get();
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_PROTOCOL_SCRIPTS_HPP
