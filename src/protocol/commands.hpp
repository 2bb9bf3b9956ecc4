// src/protocol/commands.hpp: typed builders for the library's commands, with their capacity
// checked and what was sent recorded (e.g. whether SET carried GET), never inferred from argc.
// The commands point into the strings they are given: keep those alive until the batch returns.
#ifndef REDLOCK_SRC_PROTOCOL_COMMANDS_HPP
#define REDLOCK_SRC_PROTOCOL_COMMANDS_HPP

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "io/connection.hpp"
#include "protocol/replies.hpp"
#include "protocol/scripts.hpp"

namespace redlock {
namespace detail {

// A FixedCommand whose every argument is checked against its capacity N. Overflowing it is a
// bug in the library (every builder's count is fixed), so it terminates rather than write past
// the arrays.
template <int N>
class Command {
 public:
  Command& arg(std::string_view value) noexcept {
    if (raw_.argc >= N) std::terminate();
    raw_.arg(value);
    return *this;
  }
  // An EVALSHA of `script` (NOSCRIPT falls back to EVAL with its body).
  Command& evalsha(const Script& script) noexcept {
    raw_.script = &script;
    return arg("EVALSHA").arg(script.sha1());
  }
  CommandView view() const noexcept { return raw_.view(); }
  int argc() const noexcept { return raw_.argc; }

 private:
  FixedCommand<N> raw_;
};

// The keys one lock uses on the server.
struct LockKeys {
  std::string key;
  std::string fence;          // key + ":fence"
  std::string queue;          // fair mode: key + ":waiters"
  std::string queue_info;     // fair mode: key + ":waiters:info"
  std::string channel;        // key + ":released"
  std::string grant_channel;  // fair mode: channel + ":" + the Client's waiter_id
};

// Fair mode: an acquire attempt's parameters beyond the token.
struct FairAttempt {
  std::string_view ttl_ms;
  std::string_view join;      // "1": queue (or update the place's info) when refused
  std::string_view spublish;  // publish_flag() of the node it is sent to
  std::string_view seq;
  std::string_view fenced;  // "1" with fencing
  // The channel a hand-over is published on; empty for a waiter that polls (then `seq` is the
  // claim window, in ms, that its next attempt comes within).
  std::string_view grant_channel;
};

using AcquireCommand = Command<14>;
using ReleaseCommand = Command<10>;
using ExtendCommand = Command<6>;
using RaiseFenceCommand = Command<8>;
using KeyCommand = Command<2>;

// SET NX PX, with GET when `dialect` is set_nx_get. `dialect` must not be script.
void build_set_nx(AcquireCommand& c, const LockKeys& keys, std::string_view token,
                  std::string_view ttl_ms, AcquireDialect dialect) noexcept;
void build_acquire_fenced(AcquireCommand& c, const LockKeys& keys, std::string_view token,
                          std::string_view ttl_ms) noexcept;
void build_fair_acquire(AcquireCommand& c, const LockKeys& keys, std::string_view token,
                        const FairAttempt& attempt) noexcept;
// Which token-checked release: announced to waiters, a quiet undo, or (fair mode, always)
// fair_release, which leaves the queue and hands a late grant on.
enum class ReleaseScript : unsigned char { release, undo, fair_release };
// EVALSHA, or EVAL for a rollback nobody reads the reply of (it could not retry a NOSCRIPT).
enum class Send : unsigned char { evalsha, eval };
// The scripts' last argument: "1" announces with SPUBLISH (sharded pub/sub), "0" with PUBLISH.
std::string_view publish_flag(PubSub pubsub) noexcept;
// `pubsub`: how the node announces a release or hand-over (PUBLISH or SPUBLISH; the script is
// the same text for both, told by its last argument).
void build_release(ReleaseCommand& c, const LockKeys& keys, std::string_view token,
                   ReleaseScript script, Send send, PubSub pubsub) noexcept;
void build_extend(ExtendCommand& c, std::string_view key, std::string_view token,
                  std::string_view ttl_ms) noexcept;
void build_raise_fence(RaiseFenceCommand& c, const LockKeys& keys, std::string_view token,
                       std::string_view fence) noexcept;
// PTTL key / GET key.
void build_key_command(KeyCommand& c, std::string_view verb, std::string_view key) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_PROTOCOL_COMMANDS_HPP
