// redlock/multilock.hpp: MultiLock, one hold over a set of keys on one Redis instance, taken
// all or nothing.
//
// Every attempt is one Lua script: it checks every key and, only if none is held by someone
// else, sets them all (SET PX ttl) with one token. No other client ever sees part of the set
// held. Extend and release are one script each over every key, and the watchdog renews the set
// as one lease. Each key is an ordinary lock key: a Lock on one of the keys and a MultiLock
// over a set that contains it exclude each other, share the key's fence counter and wake each
// other on release. (std::scoped_lock over several Locks avoids deadlock too, but it holds the
// keys one by one and costs a round trip per key.)
//
//   redlock::Client client(redlock::Endpoint::parse("redis://127.0.0.1:6379"));
//   redlock::MultiLock both(client, {"accounts:17", "accounts:42"});
//   {
//     std::lock_guard<redlock::MultiLock> guard(both);  // waits until both are held
//     transfer(17, 42);                                  // within both.validity()
//   }                                                    // both released, in one round trip
//
// Topologies: a standalone server, TLS, Sentinel; on a Redis Cluster every key must hash to one
// slot (give them one hash tag: "{accounts}:17", "{accounts}:42"), or the constructor throws.
// Keys on several masters or a quorum of servers are not offered.
//
// Threads, re-entrancy, cancel_waits(), auto_renew, on_lost, validity() and what a lease can
// promise are a Lock's (redlock/lock.hpp, docs/safety.md). options.fair is not supported: a
// waiting MultiLock retries when any of its keys is released (or its holder's lease would end).
// No order is kept among waiters, and a MultiLock gets in only when all its keys are free at
// once: keys that other holders keep taking in turn (never all free together) can make it wait
// long. Two MultiLocks over overlapping sets never deadlock, whatever order names the keys: each
// takes its whole set or nothing.
//
// At most kMaxKeys (1,024) keys. The set is bounded rather than the script split, because the
// one script per attempt is what makes the set all or nothing, and the server runs nothing else
// while it runs: its time grows with the keys (50,000 keys ran for over 200 ms, the default
// command_timeout, so every attempt failed with a TimeoutError that blamed the server and
// stalled the server's other clients meanwhile). 1,024 keys take a few milliseconds.
#ifndef REDLOCK_MULTILOCK_HPP
#define REDLOCK_MULTILOCK_HPP

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <memory>   // std::shared_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include <redlock/client.hpp>   // Client
#include <redlock/lock.hpp>     // LockBase: lock, try_lock_for, unlock, extend, validity, ...
#include <redlock/options.hpp>  // LockOptions

namespace redlock {

namespace detail {
class LockCore;
class MultiLease;
}  // namespace detail

// lock()/try_lock()/try_lock_for()/try_lock_until()/unlock()/release()/extend()/cancel_waits()/
// owns_lock()/validity()/lease()/options() are LockBase's, applied to the whole set: held means
// every key is held. key() names the set for messages (its keys joined by ", "); size() and
// quorum() are 1; fence() is the first key's fence (keys()[0]); fences() has every key's.
class MultiLock final : public LockBase {
 public:
  // The most keys one MultiLock takes (see the file comment).
  static constexpr std::size_t kMaxKeys = 1024;

  // Connects nothing yet. Throws std::invalid_argument naming the argument for an empty set,
  // more than kMaxKeys keys, a key named twice, an empty key, keys over 4 MiB in all,
  // options.fair, every option a Lock
  // rejects (ttl <= drift allowance, retry_delay <= 0, ...), and on a cluster a key whose slot
  // differs from the first key's (naming it).
  MultiLock(Client client, std::vector<std::string> keys, LockOptions options = {});

  // The keys, in the order given. Never throws. Thread-safe.
  const std::vector<std::string>& keys() const noexcept;

  // The fencing token of each key of the calling thread's hold, in keys() order: each is the
  // key's own counter (the one a Lock on that key uses), so it grows strictly from one hold of
  // that key to the next, whoever held it. Empty without LockOptions::fencing, when the calling
  // thread does not hold the set, or when the hold was lost. Throws std::bad_alloc only.
  // Thread-safe.
  std::vector<std::uint64_t> fences() const;

 private:
  struct Parts;
  static Parts make_parts(Client client, std::vector<std::string> keys, LockOptions options);
  explicit MultiLock(Parts parts);

  std::shared_ptr<detail::MultiLease> lease_;
  std::shared_ptr<detail::LockCore> core_;
};

}  // namespace redlock

#endif  // REDLOCK_MULTILOCK_HPP
