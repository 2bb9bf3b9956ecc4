// src/protocol/rwlock.cpp: a ReadWriteLock's scripts and commands (see rwlock.hpp).
#include "protocol/rwlock.hpp"

#include "protocol/commands.hpp"  // publish_flag
#include "protocol/scripts.hpp"   // Script, Scripts (the writer's extend), REDLOCK_PUBLISH_LUA
#include "util/key_slot.hpp"

namespace redlock {
namespace detail {
namespace {

// Every script but the writer's release and extend starts here (KEYS[1] is the key, KEYS[2] the
// readers' set): the server's clock in ms; purge(), which drops the readers whose lease has
// ended; keep(), which makes the set expire with its longest lease and, while readers hold, sets
// the key itself to SHARED with the same expiry, so that a plain Lock on the key (SET NX) is
// refused like a writer; and cover(holder, ms), the same for one reader just entered with `ms`
// left while the key is free or SHARED, without reading the set: the key and the set only ever
// get longer expiries from it, as keep() gives them after a reader left early. SHARED is never a
// token (tokens are hex). TIME before writes needs effects replication (Redis < 5; later servers
// always replicate effects). The invariant the scripts keep: the key is SHARED, or a writer's
// token, for at least as long as any reader's lease in the set (keep() and cover() set both
// expiries together, and SHARED is deleted only once the set is empty), so a script that finds the
// key absent knows that no reader holds, and skips the purge; a set left with members of ended
// leases is purged by the next script that counts it.
#define REDLOCK_RW_PRELUDE_LUA                                                    \
  "if redis.replicate_commands then redis.replicate_commands() end\n"             \
  "local SHARED = 'redlock:rw:readers'\n"                                         \
  "local t = redis.call('time')\n"                                                \
  "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"       \
  "local function purge()\n"                                                      \
  "  redis.call('zremrangebyscore', KEYS[2], '-inf', now)\n"                      \
  "end\n"                                                                         \
  "local function keep()\n"                                                       \
  "  local last = redis.call('zrange', KEYS[2], -1, -1, 'WITHSCORES')\n"          \
  "  if not last[2] then return end\n"                                            \
  "  local left = math.max(1, tonumber(last[2]) - now)\n"                         \
  "  redis.call('pexpire', KEYS[2], left)\n"                                      \
  "  local holder = redis.call('get', KEYS[1])\n"                                 \
  "  if not holder or holder == SHARED then\n"                                    \
  "    redis.call('set', KEYS[1], SHARED, 'PX', left)\n"                          \
  "  end\n"                                                                       \
  "end\n"                                                                         \
  "local function cover(holder, ms)\n"                                            \
  "  if holder == SHARED and redis.call('pttl', KEYS[1]) >= ms then return end\n" \
  "  redis.call('pexpire', KEYS[2], ms)\n"                                        \
  "  redis.call('set', KEYS[1], SHARED, 'PX', ms)\n"                              \
  "end\n"

// KEYS key, readers, writer-waiting, fence; ARGV[1] token, [2] ttl ms, [3] "1" fencing, [4] "1"
// mark when refused, [5] the marker's PX, [6] the waiter's id (the marker's value: the same for
// every attempt of one wait, unlike the token). A key already holding the token is a repeat of
// this attempt (re-armed, the counter's value is its fence).
const char kWriterAcquireLua[] = REDLOCK_RW_PRELUDE_LUA R"(local holder = redis.call('get', KEYS[1])
local readers = redis.call('zcard', KEYS[2])
if readers > 0 then
  purge()
  readers = redis.call('zcard', KEYS[2])
end
if holder == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  local f = 0
  if ARGV[3] == '1' then f = tonumber(redis.call('get', KEYS[4]) or '0') end
  return {1, f}
end
if holder == SHARED and readers == 0 then holder = false end
if not holder and readers == 0 then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if redis.call('get', KEYS[3]) == ARGV[6] then redis.call('del', KEYS[3]) end
  local f = 0
  if ARGV[3] == '1' then f = redis.call('incr', KEYS[4]) end
  return {1, f}
end
if ARGV[4] == '1' then
  local marker = redis.call('get', KEYS[3])
  if not marker or marker == ARGV[6] then redis.call('set', KEYS[3], ARGV[6], 'PX', ARGV[5]) end
end
if holder and holder ~= SHARED then return {0, redis.call('pttl', KEYS[1]), 1} end
local last = redis.call('zrange', KEYS[2], -1, -1, 'WITHSCORES')
return {0, tonumber(last[2]) - now, 1})";

// KEYS key; ARGV[1] token, [2] the writers' channel, [3] the SPUBLISH flag, [4] the readers'
// channel. Always announced: readers refused by this writer wait for it.
const char kWriterReleaseLua[] = REDLOCK_PUBLISH_LUA
    R"(if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
local heard = publish(ARGV[2], ARGV[1])
return 1 + math.max(heard, publish(ARGV[4], ARGV[1])))";

// KEYS writer-waiting; ARGV[1] the waiter's id, [2] the readers' channel, [3] the SPUBLISH flag.
const char kWriterUnmarkLua[] = REDLOCK_PUBLISH_LUA
    R"(if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
publish(ARGV[2], ARGV[1])
return 1)";

// KEYS key, readers, writer-waiting, fence; ARGV[1] token, [2] ttl ms, [3] the SPUBLISH flag,
// [4] "1" fencing, [5] "1" announce the entry, [6] the writer's token to downgrade from (empty:
// none), [7] the readers' channel.
const char kReaderAcquireLua[] =
    REDLOCK_PUBLISH_LUA REDLOCK_RW_PRELUDE_LUA R"(local function fence()
  if ARGV[4] ~= '1' then return 0 end
  return tonumber(redis.call('get', KEYS[4]) or '0')
end
local function enter()
  redis.call('zadd', KEYS[2], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
  keep()
end
local holder = redis.call('get', KEYS[1])
if holder then purge() end
if ARGV[6] ~= '' then
  if holder ~= ARGV[6] then return {0, 0, 1} end
  redis.call('del', KEYS[1])
  enter()
  publish(ARGV[7], ARGV[1])
  return {1, fence()}
end
if holder and holder ~= SHARED then
  if redis.call('zscore', KEYS[2], ARGV[1]) then
    enter()
    return {1, fence()}
  end
  return {0, redis.call('pttl', KEYS[1]), 1}
end
if redis.call('exists', KEYS[3]) == 1 then
  if holder and redis.call('zscore', KEYS[2], ARGV[1]) then
    enter()
    return {1, fence()}
  end
  return {0, redis.call('pttl', KEYS[3]), 1}
end
redis.call('zadd', KEYS[2], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
cover(holder, tonumber(ARGV[2]))
if ARGV[5] == '1' then publish(ARGV[7], ARGV[1]) end
return {1, fence()})";

// KEYS key, readers; ARGV[1] token, [2] the writers' channel, [3] the SPUBLISH flag.
const char kReaderReleaseLua[] = REDLOCK_PUBLISH_LUA REDLOCK_RW_PRELUDE_LUA
    R"(purge()
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then return 0 end
if redis.call('zcard', KEYS[2]) > 0 then return 1 end
if redis.call('get', KEYS[1]) == SHARED then redis.call('del', KEYS[1]) end
return 1 + publish(ARGV[2], ARGV[1]))";

// KEYS key, readers; ARGV[1] token, [2] ttl ms.
const char kReaderExtendLua[] = REDLOCK_RW_PRELUDE_LUA
    R"(purge()
if not redis.call('zscore', KEYS[2], ARGV[1]) then return 0 end
redis.call('zadd', KEYS[2], 'XX', string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
keep()
return 1)";

// Never destroyed, like Scripts::get(): locks with static storage may still use them.
struct RwScripts {
  Script writer_acquire{kWriterAcquireLua};
  Script writer_release{kWriterReleaseLua};
  Script writer_unmark{kWriterUnmarkLua};
  Script reader_acquire{kReaderAcquireLua};
  Script reader_release{kReaderReleaseLua};
  Script reader_extend{kReaderExtendLua};
};
const RwScripts& scripts() {
  static const RwScripts& s = *new RwScripts();
  return s;
}

void head(VarCommand& c, const Script& script, ScriptSend send) {
  if (send == ScriptSend::eval) {
    c.arg("EVAL").arg(script.body());
  } else {
    c.evalsha(script);
  }
}

}  // namespace

RwKeys::RwKeys(std::string name)
    : key(std::move(name)),
      readers(helper_key(key, ":readers")),
      writer_waiting(helper_key(key, ":writer-waiting")),
      fence(helper_key(key, ":fence")),
      released(helper_key(key, ":released")),
      readable(helper_key(key, ":readable")) {}

void build_writer_acquire(VarCommand& c, const RwKeys& keys, std::string_view token,
                          std::string_view ttl_ms, std::string_view fenced, std::string_view mark,
                          std::string_view mark_ms, std::string_view waiter) {
  c.evalsha(scripts().writer_acquire).key_count(4);
  c.arg(keys.key).arg(keys.readers).arg(keys.writer_waiting).arg(keys.fence);
  c.arg(token).arg(ttl_ms).arg(fenced).arg(mark).arg(mark_ms).arg(waiter);
}

void build_writer_release(VarCommand& c, const RwKeys& keys, std::string_view token, PubSub pubsub,
                          ScriptSend send) {
  head(c, scripts().writer_release, send);
  c.key_count(1).arg(keys.key);
  c.arg(token).arg(keys.released).arg(publish_flag(pubsub)).arg(keys.readable);
}

void build_writer_unmark(VarCommand& c, const RwKeys& keys, std::string_view waiter,
                         PubSub pubsub) {
  c.evalsha(scripts().writer_unmark).key_count(1).arg(keys.writer_waiting);
  c.arg(waiter).arg(keys.readable).arg(publish_flag(pubsub));
}

void build_writer_extend(VarCommand& c, const RwKeys& keys, std::string_view token,
                         std::string_view ttl_ms) {
  c.evalsha(Scripts::get().extend).key_count(1).arg(keys.key).arg(token).arg(ttl_ms);
}

void build_reader_acquire(VarCommand& c, const RwKeys& keys, std::string_view token,
                          std::string_view ttl_ms, std::string_view fenced, std::string_view chain,
                          std::string_view from_writer, PubSub pubsub) {
  c.evalsha(scripts().reader_acquire).key_count(4);
  c.arg(keys.key).arg(keys.readers).arg(keys.writer_waiting).arg(keys.fence);
  c.arg(token).arg(ttl_ms).arg(publish_flag(pubsub)).arg(fenced).arg(chain).arg(from_writer);
  c.arg(keys.readable);
}

void build_reader_release(VarCommand& c, const RwKeys& keys, std::string_view token, PubSub pubsub,
                          ScriptSend send) {
  head(c, scripts().reader_release, send);
  c.key_count(2).arg(keys.key).arg(keys.readers);
  c.arg(token).arg(keys.released).arg(publish_flag(pubsub));
}

void build_reader_extend(VarCommand& c, const RwKeys& keys, std::string_view token,
                         std::string_view ttl_ms) {
  c.evalsha(scripts().reader_extend).key_count(2).arg(keys.key).arg(keys.readers);
  c.arg(token).arg(ttl_ms);
}

}  // namespace detail
}  // namespace redlock
