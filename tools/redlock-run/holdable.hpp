// tools/redlock-run/holdable.hpp: what a run holds, behind one interface, so that the wait, the
// hold and the release are written once: a redlock::Lock (one Redis server), a Redlock (several),
// a Semaphore permit (--limit N), a PostgreSQL lease (--postgres) or a ZooKeeper lock
// (--zookeeper). make_holdable() is the one place that chooses: a new kind of lock (a shared
// lock, a leader election) is a new branch there and, if the library type has the usual members,
// one more HoldableOf<>.
//
//   std::unique_ptr<Holdable> lock = make_holdable(config, clients, options);
//   if (lock->try_lock_until(deadline)) { ...; lock->release(); }
#ifndef REDLOCK_RUN_HOLDABLE_HPP
#define REDLOCK_RUN_HOLDABLE_HPP

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <memory>       // std::unique_ptr, std::shared_ptr
#include <string>       // std::string
#include <type_traits>  // std::is_same_v
#include <utility>      // std::forward
#include <vector>       // std::vector

#include <redlock/redlock.hpp>  // Client, LockOptions, LeaseToken, Semaphore

#include "common.hpp"   // Clock, milliseconds
#include "options.hpp"  // Config

namespace redlock_run {

class Holdable {
 public:
  // `kind`: what it is, for -v: "Lock", "Redlock, quorum 2 of 3", "Semaphore, limit 4"...
  explicit Holdable(std::string kind) : kind_(std::move(kind)) {}
  virtual ~Holdable() = default;
  const std::string& kind() const noexcept { return kind_; }
  void set_kind(std::string kind) { kind_ = std::move(kind); }
  virtual bool try_lock() = 0;
  virtual bool try_lock_until(Clock::time_point deadline) = 0;
  // Makes the wait in progress (and any later one) give up at once; a fair waiter leaves the
  // queue. Called from the signal thread.
  virtual void cancel_waits() noexcept = 0;
  virtual bool release() = 0;
  virtual std::uint64_t fence() const noexcept = 0;
  virtual milliseconds validity() const noexcept = 0;
  virtual redlock::LeaseToken lease() const noexcept = 0;
  virtual std::size_t quorum() const noexcept = 0;

 private:
  std::string kind_;
};

// A library lock type as a Holdable, described as `kind`. `owner` keeps alive what the lock refers
// to (a database or a ZooKeeper session) for as long as the lock; null if nothing.
template <class L>
class HoldableOf final : public Holdable {
 public:
  template <class... Args>
  HoldableOf(std::string kind, std::shared_ptr<void> owner, Args&&... args)
      : Holdable(std::move(kind)), owner_(std::move(owner)), lock_(std::forward<Args>(args)...) {}
  bool try_lock() override { return lock_.try_lock(); }
  bool try_lock_until(Clock::time_point deadline) override {
    return lock_.try_lock_until(deadline);
  }
  void cancel_waits() noexcept override { lock_.cancel_waits(); }
  bool release() override { return lock_.release(); }
  std::uint64_t fence() const noexcept override { return lock_.fence(); }
  milliseconds validity() const noexcept override { return lock_.validity(); }
  redlock::LeaseToken lease() const noexcept override { return lock_.lease(); }
  std::size_t quorum() const noexcept override {
    if constexpr (std::is_same_v<L, redlock::Semaphore>) {
      return 1;
    } else {
      return lock_.quorum();
    }
  }

 private:
  std::shared_ptr<void> owner_;  // destroyed after lock_
  L lock_;
};

// The read side of a ReadWriteLock (`RW`: Redis's or ZooKeeper's) with the members HoldableOf<>
// calls, for --shared.
template <class RW>
class ReadSide {
 public:
  template <class... Args>
  explicit ReadSide(std::size_t quorum, Args&&... args)
      : quorum_(quorum), rw_(std::forward<Args>(args)...) {}
  bool try_lock() { return rw_.try_lock_shared(); }
  bool try_lock_until(Clock::time_point deadline) { return rw_.try_lock_shared_until(deadline); }
  void cancel_waits() noexcept { rw_.cancel_waits(); }
  bool release() { return rw_.release_shared(); }
  std::uint64_t fence() const noexcept { return rw_.fence_shared(); }
  milliseconds validity() const noexcept { return rw_.validity_shared(); }
  redlock::LeaseToken lease() const noexcept { return rw_.lease_shared(); }
  std::size_t quorum() const noexcept { return quorum_; }

 private:
  std::size_t quorum_;
  RW rw_;
};

// The write side of a ReadWriteLock (`RW`: Redis's or ZooKeeper's) with the members HoldableOf<>
// calls, for --exclusive: a wait (try_lock_until) holds new readers back, unlike a plain Lock on
// the key (writer preference).
template <class RW>
class WriteSide {
 public:
  template <class... Args>
  explicit WriteSide(std::size_t quorum, Args&&... args)
      : quorum_(quorum), rw_(std::forward<Args>(args)...) {}
  bool try_lock() { return rw_.try_lock(); }
  bool try_lock_until(Clock::time_point deadline) { return rw_.try_lock_until(deadline); }
  void cancel_waits() noexcept { rw_.cancel_waits(); }
  bool release() { return rw_.release(); }
  std::uint64_t fence() const noexcept { return rw_.fence(); }
  milliseconds validity() const noexcept { return rw_.validity(); }
  redlock::LeaseToken lease() const noexcept { return rw_.lease(); }
  std::size_t quorum() const noexcept { return quorum_; }

 private:
  std::size_t quorum_;
  RW rw_;
};

// The lock `config` asks for, on `clients` (the Redis servers; unused with --postgres and
// --zookeeper). Throws UsageError for a key, ttl or server list the library refuses.
std::unique_ptr<Holdable> make_holdable(const Config& config,
                                        const std::vector<redlock::Client>& clients,
                                        const redlock::LockOptions& options);

}  // namespace redlock_run

#endif  // REDLOCK_RUN_HOLDABLE_HPP
