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
  // hand-over whose message was missed or came too late to trust) is re-armed to the full ttl.
  // Returns {1, fence (0 without fencing)} or {0, pttl of the holder, position}: position 1 for
  // the head of the queue, 2 for the next one (both watch the holder's lease), 3 further back,
  // 0 not queued (ARGV[4] not "1").
  Script fair_acquire;
  // Fair mode. KEYS as fair_acquire; ARGV[1] token, ARGV[2] release channel, ARGV[3] the
  // SPUBLISH flag. If the key holds the token: hands it to the first live queued waiter (SET PX
  // its ttl, publish "grant:<seq>:<fence>:<sha1 of token>" on that waiter's channel, and tell the
  // next two waiters "head:<position>:<pttl>:<sha1>") or deletes it and publishes the token on
  // ARGV[2]. Otherwise the waiter leaves the queue. Returns 0 if it was not ours, 1 if handed
  // over, 1 + the number of subscribers if deleted. Messages name a waiter by SHA1(token): a
  // live holder's token is never published.
  Script fair_release;
  static const Scripts& get();
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_PROTOCOL_SCRIPTS_HPP
