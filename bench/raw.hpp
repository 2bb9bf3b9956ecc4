// bench/raw.hpp: the floors. A plain synchronous hiredis client sending the same commands as the
// library (SET key token NX PX ttl GET to acquire, EVALSHA of the same release script to
// release, 40-hex-character tokens from getrandom), with nothing else around them: no pool, no
// options, no re-entrancy, no error mapping. Whatever the library costs above these is its
// overhead.
//
//   bench::RawContext c = bench::raw_connect(server.endpoint());
//   bench::RawLock lock(c.get(), "k", bench::release_script_sha());
//   if (lock.acquire()) lock.release();
#ifndef REDLOCK_BENCH_RAW_HPP
#define REDLOCK_BENCH_RAW_HPP

#include <hiredis/hiredis.h>

#include <chrono>   // std::chrono::milliseconds
#include <cstdint>  // std::int64_t, std::uint64_t
#include <map>      // std::map
#include <memory>   // std::unique_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include <redlock/endpoint.hpp>  // Endpoint

namespace bench {

struct ContextFree {
  void operator()(redisContext* c) const noexcept {
    if (c != nullptr) redisFree(c);
  }
};
struct ReplyFree {
  void operator()(redisReply* r) const noexcept {
    if (r != nullptr) freeReplyObject(r);
  }
};
using RawContext = std::unique_ptr<redisContext, ContextFree>;
using RawReply = std::unique_ptr<redisReply, ReplyFree>;

// Connects with the endpoint's connect and command timeouts. Throws std::runtime_error.
RawContext raw_connect(const redlock::Endpoint& endpoint);
// One command (argv strings), blocking. Throws std::runtime_error on a transport error.
RawReply raw_command(redisContext* c, const std::vector<std::string>& argv);

// Copies of the library's Lua scripts (src/engine.cpp). bench.cpp checks, on a server the library
// has used and the floor has not, that the server cached scripts with exactly these SHA1s (SCRIPT
// EXISTS), i.e. that the floor runs the same scripts as the library.
extern const char kReleaseLua[];
extern const char kExtendLua[];
const std::string& release_script_sha();
const std::string& extend_script_sha();
// Loads both scripts (SCRIPT LOAD) so that the floor's EVALSHA never sees NOSCRIPT.
void load_scripts(redisContext* c);
// True if the server's script cache holds `sha` (SCRIPT EXISTS).
bool script_cached(redisContext* c, const std::string& sha);

// 20 bytes from getrandom(2), hex-encoded: 40 characters, like the library's tokens.
std::string raw_token();

// The lock's TTL every section uses, as the PX argument.
inline constexpr std::chrono::milliseconds kTtl{30'000};

// SET NX PX GET + EVALSHA release on one key of one server, one blocking command at a time.
class RawLock {
 public:
  RawLock(redisContext* c, std::string key);
  // SET key token NX PX ttl GET. Returns true if granted.
  bool acquire();
  // EVALSHA release 1 key token channel. Returns true if the key held our token.
  bool release();

 private:
  redisContext* c_;
  std::string key_;
  std::string channel_;
  std::string token_;
  std::string ttl_;
};

// The same pair of commands on N servers. pipelined: append to all N, flush all N, then read the
// N replies (the best a simple synchronous client can do: one round trip, all nodes at once).
// sequential: one blocking command per node, one after the other. Quorum: N/2 + 1; an attempt
// without quorum is rolled back like the library does.
class RawQuorum {
 public:
  RawQuorum(std::vector<redisContext*> nodes, std::string key, bool pipelined);
  bool acquire();
  void release();

 private:
  std::size_t fan_out(const char* const* argv, const std::size_t* lens, int argc, bool granted);
  std::vector<redisContext*> nodes_;
  std::string key_;
  std::string channel_;
  std::string token_;
  std::string ttl_;
  bool pipelined_;
};

// INFO commandstats as {command: calls}, e.g. {"set": 1200, "evalsha": 1199}.
std::map<std::string, std::uint64_t> command_calls(redisContext* c);
// INFO <section> field, e.g. info_field(c, "server", "redis_version"). Empty if absent.
std::string info_field(redisContext* c, const std::string& section, const std::string& field);

// `count` PINGs, one at a time; returns each round trip in nanoseconds. With a non-zero `idle`,
// the client sleeps that long before each PING, so the machine is idle when it is sent (as a
// waiter is when a release wakes it), not busy with back-to-back requests.
// One-way pub/sub delivery: a context SUBSCRIBEd to a channel on its own thread, another
// PUBLISHing to it after `idle` each time; returns PUBLISH sent -> message read (ns). The floor
// of any hand-over through pub/sub (the releaser's script publishes, the waiter reads).
std::vector<std::int64_t> publish_delivery(const redlock::Endpoint& endpoint, int count,
                                           std::chrono::microseconds idle);

std::vector<std::int64_t> ping_rtts(redisContext* c, int count,
                                    std::chrono::microseconds idle = std::chrono::microseconds(0));

}  // namespace bench

#endif  // REDLOCK_BENCH_RAW_HPP
