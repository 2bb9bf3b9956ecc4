// tests/torture/common.hpp: what the controller, the workers and the checker of redlock-torture
// share: the clock, the options, the names of keys, and the checker store's fenced scripts.
//
// The model in one paragraph (details in torture.md next to this file): a controller starts five
// lock nodes (redis-server, AOF with appendfsync always) each behind its own FaultProxy, plus one
// "checker store" redis-server that is never faulted. K worker processes x T threads contend for
// one lock (Redlock over the five proxies, or a single Lock on node 0) and, while holding it, do
// read-sleep-write on a counter in the checker store with fenced scripts. Every hold is logged
// with CLOCK_MONOTONIC timestamps (shared by all processes of one machine). A nemesis in the
// controller breaks at most a minority of nodes at a time. After the workers exit, the checker
// proves from the logs and the store that no two validity windows overlapped, no update was lost,
// fenced writes were applied in fence order, and every hold ended with a record.
#ifndef REDLOCK_TESTS_TORTURE_COMMON_HPP
#define REDLOCK_TESTS_TORTURE_COMMON_HPP

#include <chrono>       // std::chrono::nanoseconds, milliseconds
#include <cstdint>      // std::int64_t, std::uint64_t
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace redlock::torture {

// Nanoseconds on CLOCK_MONOTONIC. One clock for every process of the machine, which is what lets
// the checker compare timestamps taken in different worker processes. (The library's validity is
// on std::chrono::steady_clock, which is CLOCK_MONOTONIC on Linux.) Never throws.
std::int64_t mono_ns() noexcept;

// "500ms", "30s", "2m", "1h", or a bare number of seconds ("60"). Returns nullopt if malformed,
// negative or absurdly large (more than a day).
std::optional<std::chrono::nanoseconds> parse_duration(std::string_view text);
// "60s", "1500ms", "2m" (the shortest exact form). Thread-safe.
std::string format_duration(std::chrono::nanoseconds d);
// s as a JSON string literal, quotes included (the reports' one-line JSON).
std::string json_string(const std::string& s);

// redlock: Redlock over 5 nodes; lock: a Lock on node 0; sentinel: a Lock through Sentinel on
// a master with 2 replicas and 3 sentinels (no proxies: the faults are failovers, kills, pauses);
// cluster: a Lock on a Redis Cluster (slot migrations, failovers, kills); postgres /
// postgres_session: a postgres::Lock (lease or session mode) on one PostgreSQL server (the faults
// are pauses, kill -9 and restart, terminated backends); zookeeper: a zookeeper::Lock on one
// ZooKeeper server.
enum class Mode { redlock, lock, sentinel, cluster, postgres, postgres_session, zookeeper };
// Outside the fault model: what the run deliberately breaks (see torture.md).
enum class Unsafe { none, clock, restart };
// What the workers take (on the mode's store): a lock (Lock, Redlock, the store's lock), a
// ReadWriteLock (1 thread in 4 a writer, with writer preference; the others readers), a
// MultiLock over sets of 3 of the 4 keys kMultiKeys mixed with plain Locks on single keys, or an
// Election's terms (run(): each term is a hold, its worker's stop ends the hold's window).
enum class Primitive { lock, rwlock, multilock, election };

const char* to_string(Mode mode) noexcept;
const char* to_string(Unsafe unsafe) noexcept;
std::optional<Mode> parse_mode(std::string_view text);
std::optional<Unsafe> parse_unsafe(std::string_view text);
const char* to_string(Primitive primitive) noexcept;
std::optional<Primitive> parse_primitive(std::string_view text);

// The lock every worker thread contends for (on the lock nodes).
inline constexpr char kLockKey[] = "torture:lock";
// --primitive multilock: the keys (one hash tag: a cluster keeps them in one slot). A hold's set
// is a bit mask of them in the hold log.
inline constexpr int kMultiKeyCount = 4;
inline constexpr const char* kMultiKeys[kMultiKeyCount] = {"{torture}:m0", "{torture}:m1",
                                                           "{torture}:m2", "{torture}:m3"};

// Keys in the checker store.
inline constexpr char kCounterKey[] = "torture:counter";           // the fenced counter
inline constexpr char kShadowKey[] = "torture:shadow";             // the same counter, unfenced
inline constexpr char kLastAppliedKey[] = "torture:applied:last";  // fence of the last write
inline constexpr char kMaxSeenKey[] = "torture:seen:max";          // highest fence any read showed
inline constexpr char kAppliedListKey[] = "torture:applied";  // "fence:value" per applied write

// Fenced read. KEYS: counter, shadow, max_seen. ARGV: fence.
// Raises max_seen to the fence, returns {counter, shadow}. Both counters read 0 when unset.
//
// Why reads are fenced too: a fence check on writes alone does not protect read-modify-write.
// Holders A (fence 10) and B (fence 11) that overlap can both read 5 and then write 6 in fence
// order (10, then 11): both writes pass "fence > last applied" and one update is lost. Recording
// the highest fence that has *read* makes A's write fail (10 < 11), which is what a fenced
// resource must do (Kleppmann: the storage remembers the highest token it has seen).
inline constexpr char kFencedReadLua[] = R"(local f = tonumber(ARGV[1])
local seen = tonumber(redis.call('get', KEYS[3]) or '0')
if f > seen then redis.call('set', KEYS[3], ARGV[1]) end
return {tonumber(redis.call('get', KEYS[1]) or '0'), tonumber(redis.call('get', KEYS[2]) or '0')})";

// Fenced write. KEYS: counter, shadow, last_applied, max_seen, applied list.
// ARGV: fence, new counter value, new shadow value.
// The shadow (unfenced) counter is always written: it shows what the same workload would do
// without fencing. The counter is written only if fence > last applied fence and no read with a
// higher fence has happened; then last_applied = fence and "fence:value" is appended to the list.
// Returns 1 (applied) or 0 (rejected).
inline constexpr char kFencedWriteLua[] = R"(redis.call('set', KEYS[2], ARGV[3])
local f = tonumber(ARGV[1])
local last = tonumber(redis.call('get', KEYS[3]) or '0')
local seen = tonumber(redis.call('get', KEYS[4]) or '0')
if f <= last or f < seen then return 0 end
redis.call('set', KEYS[1], ARGV[2])
redis.call('set', KEYS[3], ARGV[1])
redis.call('rpush', KEYS[5], ARGV[1] .. ':' .. ARGV[2])
return 1)";

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_COMMON_HPP
