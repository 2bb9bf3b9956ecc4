// src/lock/permit_store.hpp: a Semaphore's permits on its Redis server: `limit` slot keys, the
// script that takes the first free one, the rollback of an attempt whose outcome is unknown, the
// per-slot release, and the per-slot lease engines the watchdog renews.
#ifndef REDLOCK_SRC_LOCK_PERMIT_STORE_HPP
#define REDLOCK_SRC_LOCK_PERMIT_STORE_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <redlock/client.hpp>
#include <redlock/options.hpp>

namespace redlock {
namespace detail {

class ClientImpl;
class LeaseEngine;

// An acquire script's reply: granted a slot, or refused with the earliest expiry.
struct SlotReply {
  std::size_t slot{0};  // 1..limit if granted
  std::uint64_t fence{0};
  std::chrono::milliseconds holder_pttl{-1};
};

class PermitStore {
 public:
  // `options` are the semaphore's, already validated. Throws std::invalid_argument for options
  // a lease engine rejects.
  PermitStore(Client client, const std::string& key, std::size_t limit, const LockOptions& options);

  // One attempt with `token`: the first free slot, or the earliest expiry. Throws the transport
  // or server failure (after rolling back an attempt that may have run).
  SlotReply acquire(const std::string& token);
  // Compare-and-delete of the slot key, announced to waiters. Returns 0 if it was not ours.
  long long release(std::size_t slot, const std::string& token);
  // The lease engine of one slot key: what the watchdog renews (and releases at a cap). No
  // fencing of its own (the semaphore's counter is per key), never fair. Not thread-safe: only
  // the thread holding the semaphore's gate calls it.
  std::shared_ptr<LeaseEngine> engine_for(std::size_t slot);

  std::size_t limit() const noexcept { return permit_keys_.size(); }
  // Where releases of a permit are announced: key + ":permit:released".
  const std::string& channel() const noexcept { return channel_; }
  const std::shared_ptr<ClientImpl>& node() const noexcept;

 private:
  void undo(const std::string& token) noexcept;

  Client client_;
  const std::string& key_;  // the semaphore's, which outlives this store
  LockOptions options_;
  std::vector<std::string> permit_keys_;  // slot i is permit_keys_[i - 1]
  std::string fence_key_;
  std::string channel_;
  std::string ttl_ms_;
  std::vector<std::shared_ptr<LeaseEngine>> engines_;  // per slot, made when first held
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_PERMIT_STORE_HPP
