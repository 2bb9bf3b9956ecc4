// src/protocol/permits.hpp: a Semaphore's commands on the wire: the script that takes the first
// free permit slot, the rollback of an attempt whose outcome is unknown, and what the take
// script's reply means. Pure: no I/O, no exceptions beyond std::bad_alloc.
#ifndef REDLOCK_SRC_PROTOCOL_PERMITS_HPP
#define REDLOCK_SRC_PROTOCOL_PERMITS_HPP

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <redlock/client.hpp>

#include "io/command.hpp"
#include "protocol/commands.hpp"  // Send
#include "util/small_vector.hpp"

namespace redlock {
namespace detail {

// The keys of semaphore `key` with `limit` permits.
struct PermitKeys {
  PermitKeys(const std::string& key, std::size_t limit);
  std::vector<std::string> slots;  // slot i (1..limit) is slots[i - 1]: key + ":permit:" + i
  std::string fence;               // key + ":permit:fence"
  std::string channel;             // key + ":permit:released"
  std::string limit;               // key + ":permit:limit": the limit the held permits use
  std::string queue;               // key + ":permit:waiters": the wake-one queue (tokens, in order)
  std::string queue_info;          // key + ":permit:waiters:info": token -> "ttl:0:0:grant channel"
};

// A command with as many arguments as the semaphore has permits. Views point into the
// arguments given, which the caller keeps alive while the command is in use.
// Neither copied nor moved: its views may point into it.
class VarCommand {
 public:
  VarCommand() = default;
  VarCommand(const VarCommand&) = delete;
  VarCommand& operator=(const VarCommand&) = delete;

  VarCommand& arg(std::string_view value);
  // Appends the key count `n` as decimal text, kept inside the command (once per command).
  VarCommand& key_count(std::size_t n);
  // EVALSHA of `script`: re-sent as EVAL with its body on NOSCRIPT.
  VarCommand& evalsha(const Script& script);
  // The command may be sent again (Resend::allowed; default never): an idempotent script.
  VarCommand& allow_resend() noexcept {
    resend_ = Resend::allowed;
    return *this;
  }
  CommandView view() const noexcept;

 private:
  // Inline up to 16 arguments (every script but a large semaphore's): no allocation per command.
  SmallVector<const char*, 16> argv_;
  SmallVector<std::size_t, 16> lens_;
  const Script* script_{nullptr};
  std::string numkeys_;
  Resend resend_{Resend::never};
};

// A fixed number of VarCommands made at once (one allocation), never moved: batches point into
// them. Not thread-safe.
class VarCommands {
 public:
  explicit VarCommands(std::size_t count) : commands_(new VarCommand[count]) {}
  VarCommand& operator[](std::size_t i) const noexcept { return commands_[i]; }

 private:
  std::unique_ptr<VarCommand[]> commands_;
};

// The take script's arguments beyond the keys and the token. Views into strings the caller keeps.
struct TakeArgs {
  std::string_view ttl_ms;
  std::string_view limit;          // the limit n (decimal); the keys may have more slots
  std::string_view fenced;         // "1" with fencing
  std::string_view join;           // "1": refused, join the waiters' queue
  std::string_view grant_channel;  // this process's channel for hand-overs (joining only)
  PubSub pubsub{PubSub::classic};  // how the node announces (its hand-overs and notices)
};
// EVALSHA of the take script: the first free slot of 1..`limit` (SET PX `ttl_ms`) for `token`, a
// fence from the counter when `fenced` is "1", once the limit stored with the permits is
// `limit`; a free slot goes to the wake-one queue's oldest live waiter first. `keys` may have more
// slots than `limit`, to check a larger stored limit.
void build_take_permit(VarCommand& c, const PermitKeys& keys, std::string_view token,
                       const TakeArgs& args);
// The way out of `token` (EVAL for a rollback nobody reads the reply of, EVALSHA otherwise): a
// slot holding it is handed to the queue's oldest live waiter (or deleted and announced); its
// place in the queue, if any, is left.
void build_leave_permits(VarCommand& c, const PermitKeys& keys, std::string_view token,
                         PubSub pubsub, Send send);
// EVALSHA of fair_release (protocol/scripts.hpp) on the permit `keys` (its slot key, the
// semaphore's queue and fence) with every slot key of the semaphore (`slots`, which the caller
// keeps alive): a hand-over tells the watchers the earliest lease end among the permits. Safe to
// send again, as the lock's release.
void build_permit_release(VarCommand& c, const LockKeys& keys,
                          const std::vector<std::string>& slots, std::string_view token,
                          PubSub pubsub);

// The take script's reply: granted `slot` (1..limit) with `fence`, or refused (slot 0) with the
// earliest expiry of a held slot and the place taken in the queue (`watcher`, as
// AcquireResult's). limit_conflict: permits are held under `other_limit`;
// limit_unchecked: the stored limit is `other_limit`, larger than the slots passed (send again
// with that many).
struct TakeReply {
  enum class Problem { none, server_error, unexpected, limit_conflict, limit_unchecked };
  std::size_t slot{0};
  std::uint64_t fence{0};
  std::chrono::milliseconds holder_pttl{-1};
  unsigned char watcher{0};
  Problem problem{Problem::none};
  std::size_t other_limit{0};
};
TakeReply read_take_reply(const redisReply* reply, std::size_t limit) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_PROTOCOL_PERMITS_HPP
