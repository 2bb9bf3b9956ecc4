// src/core/engine.hpp: the lease engine. One implementation of acquire / extend / release for N
// nodes; a single-instance Lock is the N = 1 case. The rules come from quorum.hpp, the I/O from
// connection.hpp; nothing here knows about threads, re-entrancy or waiting (see lock.cpp).
#ifndef REDLOCK_SRC_ENGINE_HPP
#define REDLOCK_SRC_ENGINE_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <redlock/client.hpp>
#include <redlock/options.hpp>

#include "core/backend.hpp"
#include "core/quorum.hpp"
#include "io/connection.hpp"

namespace redlock {
namespace detail {

// The Lua scripts, shared by every lock (SHA1 computed once).
struct Scripts {
  // KEYS[1] lock key; ARGV[1] token; ARGV[2] release channel. Deletes the key if it still holds
  // the token and publishes on the channel. Returns 1 + the number of subscribers that heard
  // the release if deleted, 0 if it was not ours.
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
  // Fair mode. KEYS[1] lock key, KEYS[2] queue (list of tokens), KEYS[3] queue info (hash:
  // token -> "alive_until_ms:ttl_ms:seq:fenced:grant channel"), KEYS[4] fence counter. ARGV[1]
  // token, ARGV[2] ttl ms, ARGV[3] "1" to queue (or refresh the place in the queue) when
  // refused, ARGV[4] how long the place stays without a refresh (ms), ARGV[5] attempt sequence
  // number, ARGV[6] "1" with fencing, ARGV[7] the channel to announce a hand-over on. Takes the
  // lock if it is free and nobody live is queued ahead; a key already holding the token (a
  // hand-over whose message was missed) is re-armed to the full ttl. Returns {1, fence (0 without
  // fencing)} or {0, pttl of the holder}.
  Script fair_acquire;
  // Fair mode. KEYS as fair_acquire; ARGV[1] token, ARGV[2] release channel. Leaves the queue;
  // then, if the key holds the token, hands it to the first live queued waiter (SET PX its ttl,
  // publish "grant:<seq>:<fence>:<sha1 of token>" on that waiter's grant channel) or deletes it
  // and publishes the token on ARGV[2]. Returns 0 if it was not ours, 1 if handed over, 1 + the
  // number of subscribers if deleted. The message names the waiter by SHA1(token): a live holder's
  // token is never published.
  Script fair_release;
  static const Scripts& get();
};

// What one node said to an acquire attempt.
enum class Answer { granted, refused, failed };

// One node's reply to an acquire attempt, interpreted. Pure: no I/O, no exceptions; what
// fuzz/fuzz_replies.cpp feeds with arbitrary replies.
struct AcquireReply {
  enum class Problem { none, server_error, syntax_error, unexpected };
  Answer answer{Answer::failed};
  std::uint64_t fence{0};
  long long holder_pttl{-1};
  Problem problem{Problem::none};
};
// `reply` answers the acquire command (SET NX PX [GET], or an acquire script); `pttl` the
// pipelined PTTL, or null. `with_get`: the SET carried GET.
// `scripted`: the reply is a script's {flag, value}, not SET's.
AcquireReply read_acquire_reply(const redisReply* reply, const redisReply* pttl, bool scripted,
                                bool with_get, std::string_view token) noexcept;

class LeaseEngine {
 public:
  // Throws std::invalid_argument for bad options or duplicate nodes (see Lock/Redlock ctors).
  LeaseEngine(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string key,
              const LockOptions& options);

  // One attempt with `token` on every node at once; rolls back partial or late grants.
  // `want_pttl` also asks refusing nodes for the holder's remaining ttl (one round trip still).
  // Fair mode: `enqueue` takes (or refreshes) a place in the server's queue when refused, `seq`
  // numbers the attempt (a hand-over names the last attempt the server saw).
  AcquireResult acquire(const std::string& token, bool want_pttl, bool enqueue = false,
                        std::uint64_t seq = 0);
  // Fair mode: the hold a hand-over gave us, its lease counted from `sent`, when the attempt the
  // hand-over named was sent (the server set the key after it ran). Pure: no I/O.
  AcquireResult handed_over(std::uint64_t fence, SteadyClock::time_point sent) const;
  // Compare-and-pexpire on every node; held iff a quorum confirmed and validity stays positive.
  ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl);
  // Compare-and-delete on every node, or only where only[i] (one flag per node) is true.
  // `announce`: publish the release to waiters (a real release); false for the quiet rollback of
  // a failed attempt, so a split vote does not wake every waiter straight into the next split
  // vote.
  ReleaseResult release(const std::string& token, const bool* only = nullptr, bool announce = true);

  // Building blocks for the watchdog, which batches extends of many leases per node.
  // The returned command points into `token`, `ttl_ms` and this engine: keep them alive.
  FixedCommand<6> extend_command(const std::string& token, const std::string& ttl_ms) const;
  static bool extend_confirmed(const redisReply* reply) noexcept;

  const std::vector<std::shared_ptr<ClientImpl>>& nodes() const noexcept { return nodes_; }
  const std::string& key() const noexcept { return key_; }
  // The pub/sub channel releases are announced on: key + ":released".
  const std::string& channel() const noexcept { return channel_; }
  // Fair mode: where hand-overs to this process's waiters are published,
  // channel() + ":" + the Client's waiter_id().
  const std::string& grant_channel() const noexcept { return grant_channel_; }
  std::size_t quorum() const noexcept { return quorum_of(nodes_.size()); }
  std::chrono::milliseconds ttl() const noexcept { return ttl_; }
  double drift_factor() const noexcept { return drift_factor_; }
  bool fair() const noexcept { return fair_; }
  // Fair mode: how long a queued waiter keeps its place without refreshing it.
  std::chrono::milliseconds queue_alive() const noexcept { return queue_alive_; }

 private:
  // Appends the fair scripts' numkeys and KEYS (lock, queue, queue info, fence counter).
  template <int N>
  FixedCommand<N>& fair_keys(FixedCommand<N>& c) const noexcept {
    return c.arg("4").arg(key_).arg(queue_key_).arg(queue_info_key_).arg(fence_key_);
  }

  std::vector<std::shared_ptr<ClientImpl>> nodes_;
  std::string key_;
  std::string fence_key_;
  std::string channel_;
  std::string grant_channel_;
  std::chrono::milliseconds ttl_;
  std::string ttl_ms_;
  double drift_factor_;
  bool fencing_;
  bool fair_;
  std::string queue_key_;
  std::string queue_info_key_;
  std::chrono::milliseconds queue_alive_{0};
  std::string queue_alive_ms_;
};

// The documented maximum key length. Redis would take up to 512 MB, but a lock name that large
// is a bug, and every operation sends the key (and the release channel) again.
constexpr std::size_t kMaxKeyBytes = 4u * 1024u * 1024u;

// The longest ttl, retry delay or timeout accepted (200 years): far inside what steady_clock's
// nanoseconds can add without overflow (292 years) and what Redis accepts for PX.
constexpr std::chrono::milliseconds kMaxTtl = std::chrono::hours(24 * 365 * 200);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_ENGINE_HPP
