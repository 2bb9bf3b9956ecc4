// src/core/rw_lease.hpp: the two leases of a ReadWriteLock on one Redis server (standalone, TLS,
// Sentinel, Cluster: every key shares the lock key's slot). Each is a ScriptLease run by its own
// LockCore: the writer's lease is the lock key; each reader's is its entry in the readers' set
// (protocol/rwlock.hpp). A downgrade turns the writer's lease into a reader's in one script.
#ifndef REDLOCK_SRC_CORE_RW_LEASE_HPP
#define REDLOCK_SRC_CORE_RW_LEASE_HPP

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <redlock/options.hpp>

#include "core/script_lease.hpp"
#include "protocol/rwlock.hpp"

namespace redlock {
namespace detail {

// What both sides share: the keys and how long a waiting writer's marker lives.
struct RwShared {
  // Throws std::invalid_argument for options.fair, a key or option a Lock rejects, on a
  // cluster a key whose helper keys could not share its slot, and for several nodes: fencing
  // (no fence is agreed across nodes) or two nodes that are one server.
  RwShared(const std::vector<std::shared_ptr<ClientImpl>>& nodes, std::string key,
           const LockOptions& options);
  RwKeys keys;
  // max(250 ms, 5 * retry_delay), at most ttl: a writer that stops waiting (gave up, crashed)
  // holds new readers back for at most this long.
  std::chrono::milliseconds mark;
  std::string mark_ms;
};

// What both leases share: their keys, the channel their waiters listen on, the watch on it.
class RwLease : public ScriptLease {
 public:
  bool watch_live() const noexcept final;
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline,
                                      std::string token_sha1) final;

 protected:
  // `waits_on`: the writers' channel (released) or the readers' (readable), in `shared`.
  RwLease(std::vector<std::shared_ptr<ClientImpl>> nodes, std::shared_ptr<const RwShared> shared,
          const char* what, const LockOptions& options, const std::string RwKeys::*waits_on);
  const std::string& release_channel() const noexcept final { return shared_->keys.released; }

  std::shared_ptr<const RwShared> shared_;

 private:
  const std::string& waits_on_;
  // Readers also hear `released` (a plain Lock's release of the key); writers nothing more.
  const std::vector<std::string> also_;
};

class RwWriterLease final : public RwLease {
 public:
  RwWriterLease(std::vector<std::shared_ptr<ClientImpl>> nodes,
                std::shared_ptr<const RwShared> shared, const LockOptions& options);

  // A retry (Attempt::contended: the call waits) sets the waiting marker when refused, and
  // reports the holder's remaining ttl as at most a third of the marker's life, so the next
  // attempt refreshes it in time.
  AcquireResult acquire(const AcquireRequest& request) override;
  // True: a wait must not skip the attempts that keep its marker (writer preference).
  bool attempt_marks_waiter() const noexcept override { return true; }
  // A downgrade of the writer's hold `token` starts: from now on its release (by the writer's
  // LockCore, which stops its renewal first) sends nothing and reports the hold kept, for the key
  // stays set until the reader's attempt converts it; an extend in flight confirms (`return 1`).
  void downgrade_started(const std::string& token);
  // Whether that release happened (false: the writer's hold was re-entered, only a level ended).
  bool downgrade_released() const;
  // The downgrade is over (converted, or given up): releases are real again.
  void downgrade_ended() noexcept;
  ReleaseResult release(const std::string& token, Announce announce) override;
  // The wait gave up: its marker goes (if still its own) and waiting readers are woken.
  void unmark_waiter() noexcept override;

 private:
  void build_extend(VarCommand& c, const ClientImpl& node, const std::string& token,
                    std::string_view ttl_ms) const override;
  void build_release(VarCommand& c, const ClientImpl& node, const std::string& token,
                     Announce announce, ScriptSend send) const override;
  bool downgraded(const std::string& token) const;

  // The waiting marker's value: one wait's attempts each have a token of their own, and only one
  // thread of the object waits at a time (its ownership gate), so the object names the waiter.
  const std::string waiter_;
  mutable std::mutex mutex_;
  std::string downgraded_;  // mutex_
  bool released_{false};    // mutex_: the downgraded token's release happened
};

class RwReaderLease final : public RwLease {
 public:
  RwReaderLease(std::vector<std::shared_ptr<ClientImpl>> nodes,
                std::shared_ptr<const RwShared> shared, const LockOptions& options);

  // A retry (Attempt::contended: it may have been woken with other readers) announces its entry
  // to the next waiting reader. After arm_downgrade() on the calling thread, the attempt is that
  // downgrade instead.
  AcquireResult acquire(const AcquireRequest& request) override;
  // The calling thread's next attempt converts the writer's hold `writer_token`. Cleared by that
  // attempt or disarm_downgrade().
  void arm_downgrade(std::string writer_token);
  void disarm_downgrade() noexcept;

 private:
  void build_extend(VarCommand& c, const ClientImpl& node, const std::string& token,
                    std::string_view ttl_ms) const override;
  void build_release(VarCommand& c, const ClientImpl& node, const std::string& token,
                     Announce announce, ScriptSend send) const override;
  std::mutex mutex_;
  std::thread::id downgrader_;  // mutex_
  std::string from_writer_;     // mutex_
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_CORE_RW_LEASE_HPP
