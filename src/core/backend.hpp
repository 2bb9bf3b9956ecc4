// src/core/backend.hpp: the seam between the lock layer (lock/, watch/) and a lease store. A
// Redis standalone server and a Redlock over N servers are its first implementation (the lease
// engine, core/engine.hpp); Sentinel, Cluster, ZooKeeper and PostgreSQL add more without
// touching lock/ or watch/.
//
// Every operation is one attempt: no waiting, no retries beyond what the store needs for
// idempotence. The lock layer owns threads, re-entrancy and waiting; the backend owns the wire,
// the quorum tally, validity and the reason a lease was lost (each computed once, here).
#ifndef REDLOCK_SRC_CORE_BACKEND_HPP
#define REDLOCK_SRC_CORE_BACKEND_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <redlock/options.hpp>

#include "core/quorum.hpp"

namespace redlock {
namespace detail {

// How an acquire attempt is made.
enum class Attempt {
  first,      // the first try of a call: nothing else is asked
  contended,  // a retry after a refusal: also learn the holder's remaining ttl (same round trip)
};
// Fair mode: whether a refused attempt takes (or refreshes) a place in the server's queue.
enum class Queue { none, join };
// Whether a release wakes waiters (a real release) or is a quiet rollback of a failed attempt.
enum class Announce { waiters, quietly };

struct AcquireRequest {
  const std::string* token{nullptr};
  Attempt attempt{Attempt::first};
  Queue queue{Queue::none};
  std::uint64_t seq{0};  // fair mode: numbers the attempt; a hand-over names the last one seen
  // Fair mode, a waiter that cannot be woken (it polls: wake_on_release = false, or its
  // subscription is not live): a hand-over to it sets the key for this claim window, which its
  // next attempt picks up; no message. Zero for a waiter that hears its grants.
  std::chrono::milliseconds polls{0};
};

struct AcquireResult {
  bool held{false};
  SteadyClock::time_point valid_until{};
  std::uint64_t fence{0};
  std::size_t granted{0};
  // Smallest remaining ttl reported by nodes that refused (-1: unknown or no expiry).
  std::chrono::milliseconds holder_pttl{-1};
  // Set when no node gave a usable answer: the error to throw (server error preferred); for
  // N > 1, also when fewer than a quorum answered (QuorumUnavailableError).
  std::exception_ptr failure;
  // PermitBackend: the permit granted (1..limit), 0 if refused.
  std::size_t slot{0};
  // A wake-one queue (Redis fair mode, PostgreSQL lease mode), refused and queued where a grant
  // can reach the waiter: 1 if it heads the server's queue, 2 if it is next (both watch the
  // holder's lease: an expiry announces nothing, so they advance the queue when it ends; a
  // backend may fold the second's delay into holder_pttl and report 1), 3 further back (it
  // sleeps until a hand-over or a notice that it moved up). 0: not queued or not known (retry as
  // a polling wait would).
  unsigned char watcher{0};
  // Fair mode: the queue place is gone (fair_release ran, or may still run, with the token), so
  // any hand-over named by this attempt or an earlier one is void.
  bool left_queue{false};
  // owed[i] != 0: node i may not have run this attempt's rollback (note_owed, core/tally.hpp):
  // a grant, or a fair queue place, may stay there. The lock layer retries it in the background
  // (watch/release_retry.hpp) for up to one ttl. Empty in the common case (no allocation).
  std::vector<char> undo_owed;
};

struct ExtendResult {
  bool held{false};
  SteadyClock::time_point valid_until{};
  std::size_t confirmed{0};
  std::exception_ptr failure;              // as in AcquireResult
  LostReason reason{LostReason::refused};  // why not held (meaningful when !held && !failure)
};

struct ReleaseResult {
  std::size_t released{0};     // nodes where our token was deleted
  std::size_t refused{0};      // nodes that answered "not ours" (silent nodes count in neither)
  std::size_t listeners{0};    // most subscribers (waiting processes) any node announced it to
  std::exception_ptr failure;  // as in AcquireResult
  // The backend positively confirmed that no quorum can have lost the lease before this release
  // (its own delete succeeded, or refusals still leave a quorum possible). False by default: a
  // backend that does not set it (a dead connection, a refusal, a failure) reports the hold as
  // not kept, never a lease another client may hold by now.
  bool quorum_kept{false};
  LostReason reason{LostReason::refused};  // why not kept (meaningful when !quorum_kept)
  // owed[i] != 0: node i may not have run the release (note_owed in core/tally.hpp), so the
  // key may stay there until its ttl ends; the lock layer has it retried in the background
  // (watch/release_retry.hpp). Empty when every node answered or was cut short with the
  // release on the wire; allocated only then.
  std::vector<char> owed;
};

// "Wake me when it may be free": one waiter's subscription to a lock's releases (and, in fair
// mode, to hand-overs naming its token). Registered before the attempt that follows it, so a
// release between a refusal and the wait cannot be missed.
// Told that a wait on a watch would end now (the async driver's side of ReleaseWatch::set_waker).
// wake_up() is called from any thread, possibly under the watch's own lock: it only schedules,
// never calls back into the watch, and never throws.
class Waker {
 public:
  virtual void wake_up() noexcept = 0;

 protected:
  ~Waker() = default;
};

class ReleaseWatch {
 public:
  virtual ~ReleaseWatch() = default;
  // The async form of wait_until (lock/async_driver): from now on `waker` (null: none) is told
  // whenever a wait_until in progress would end, at once if one would end already. Returns false
  // if this watch cannot tell (the async driver then looks again at its timer). Any thread.
  virtual bool set_waker(Waker* waker) noexcept {
    (void)waker;
    return false;
  }
  // When a wait until `until` should look again at the latest (a relocation's pace may come
  // first). Never throws.
  virtual SteadyClock::time_point due(SteadyClock::time_point until) noexcept { return until; }
  // wait_until without blocking: true if a wake-up was pending (and consumes it). `until` is the
  // wait's own end (a relocation's subscriptions are confirmed within it). Throws as wait_until.
  virtual bool poll(SteadyClock::time_point until) {
    (void)until;
    return wait_until(SteadyClock::now());
  }
  // Blocks until a release is announced (or wake()) or `until`, whichever is first. Returns true
  // if it was woken before `until`.
  virtual bool wait_until(SteadyClock::time_point until) = 0;
  // Fair mode: a hand-over that arrived for this waiter (attempt `seq`, fence `fence`).
  virtual bool take_grant(std::uint64_t& seq, std::uint64_t& fence) noexcept = 0;
  // Fair mode: a notice that this waiter moved up to `position` (1 the head, 2 the next) of the
  // queue, and that the holder's lease ends in `pttl`. False if none arrived.
  virtual bool take_notice(unsigned& position, std::chrono::milliseconds& pttl) noexcept {
    (void)position;
    (void)pttl;
    return false;
  }
  // Fair mode: hand-overs are for the token with this SHA1 (hex) from now on; one to the old
  // token not taken yet is dropped.
  virtual void retoken(std::string token_sha1) noexcept = 0;
  // Fair mode: the attempt about to be sent sees every release announced so far, so a plain
  // release wake-up still pending is spent (a hand-over, a notice or a relocation is kept).
  // Never throws.
  virtual void spend_release_wake() noexcept {}
  // Fair mode: the waiter is queued behind the two watchers. Its turn comes by a hand-over or a
  // notice, and while it is queued every release hands over, so a plain release announcement
  // is not for it: one that is pending is spent (it came from a release before the join), later
  // ones wake another waiter of this process, or nobody. A notice, a relocation or a new token
  // makes it hear them again. Never throws.
  virtual void queued_behind_watchers() noexcept {}
  // Ends a wait_until in progress (or the next one) at once: cancel_waits(). Any thread.
  virtual void wake() noexcept = 0;
  // True if other waiters of this process watched the same lock before this one and still wait:
  // a release wakes them first (in arrival order), so this one need not try before its turn.
  virtual bool behind_others() const noexcept { return false; }
  // The waiter leaves without holding (its deadline, a cancellation, a failure): a release
  // wake-up it consumed is passed on to the next waiter of this process when it unwatches,
  // for the lock may be free for that one (a writer's marker refuses only readers; the attempt
  // it woke for may have been refused by a holder that left since). Never throws.
  virtual void give_up() noexcept {}
};

class LeaseBackend;

// One lease of a renewal batch (LeaseBackend::extend_many). The caller keeps `backend` and
// `token` alive until extend_many() returns.
struct RenewItem {
  LeaseBackend* backend{nullptr};
  const std::string* token{nullptr};
  ExtendResult result;     // out: as LeaseBackend::extend's, at the backend's ttl()
  std::size_t refused{0};  // out: nodes that answered "not ours"
  // The hold's validity when its renewal began: a backend that sends its items one after
  // another sends none at or after it (the item is left not held, nothing refused).
  SteadyClock::time_point send_by{SteadyClock::time_point::max()};
};

// A renewal lane (LeaseBackend::renewal_lane) named by the servers a lease lives on: leases on
// the same nodes (in the same order) share one; nodes are compared by identity, as batches are.
template <class Nodes>
std::uintptr_t lane_of_nodes(const Nodes& nodes) noexcept {
  std::uintptr_t lane = 0x9e3779b97f4a7c15ULL;
  for (const auto& node : nodes) {
    lane = (lane ^ reinterpret_cast<std::uintptr_t>(node.get())) * 0x100000001b3ULL;
  }
  return lane;
}

class LeaseBackend {
 public:
  virtual ~LeaseBackend() = default;

  virtual const std::string& key() const noexcept = 0;
  virtual std::size_t size() const noexcept = 0;    // nodes (1 for a single store)
  virtual std::size_t quorum() const noexcept = 0;  // nodes that must agree
  virtual std::chrono::milliseconds ttl() const noexcept = 0;
  virtual bool fair() const noexcept = 0;

  // One attempt on every node at once; partial or late grants are rolled back.
  virtual AcquireResult acquire(const AcquireRequest& request) = 0;
  // Fair mode: the hold a hand-over gave, its lease counted from `sent` (when the attempt the
  // hand-over named was sent). Pure: no I/O.
  virtual AcquireResult handed_over(std::uint64_t fence, SteadyClock::time_point sent) const = 0;
  // Token-checked extend on every node; held iff a quorum confirmed and validity is positive.
  virtual ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl) = 0;
  // The earliest a lease extended by `ttl` from `start` may end (start + ttl - the clock-drift
  // allowance): an extend in flight lowers the hold's validity to it at once. Pure.
  virtual SteadyClock::time_point extend_floor(SteadyClock::time_point start,
                                               std::chrono::milliseconds ttl) const noexcept = 0;
  // Leases whose backends return the same batch_group() are renewed together by one
  // extend_many() call on any of them (the Redis engines share one group: one round trip per
  // server for all their leases).
  virtual const void* batch_group() const noexcept = 0;
  // The store or servers this lease's renewal round trips wait on. The watchdog renews each
  // lane on a thread of its own, so that a lane's stuck round trip (a store cut off) never
  // delays another lane's renewals; leases of one lane (and batch group) share round trips.
  // Equal values: one lane (a collision only shares a thread). Default: the batch group.
  virtual std::uintptr_t renewal_lane() const noexcept {
    return reinterpret_cast<std::uintptr_t>(batch_group());
  }
  // Extends every item by its backend's ttl(); every item's backend has this batch_group().
  // Returns the round trips made. Per-node failures land in each result; throws std::bad_alloc
  // only.
  virtual std::size_t extend_many(RenewItem* items, std::size_t count) = 0;
  // Token-checked release on every node that may hold the key.
  virtual ReleaseResult release(const std::string& token, Announce announce) = 0;
  // The release of `token` again, announced, on the nodes where owed[i] != 0 (the `owed` of an
  // earlier release of it): one round of the background retry (watch/release_retry.hpp). Its
  // result's `owed` names the nodes still owed. Default: nothing is owed (a store whose release
  // fails only with its session, which ends the lease with it). Throws std::bad_alloc only.
  virtual ReleaseResult retry_release(const std::string& token, const std::vector<char>& owed) {
    (void)token;
    (void)owed;
    return {};
  }

  // Wake-on-release. `live()`: this process is already subscribed, so watching costs no round
  // trip. `watch` subscribes (waiting for confirmation at most until `deadline`); `token_sha1`
  // names a fair waiter's hand-overs (empty otherwise). Never null.
  virtual bool watch_live() const noexcept = 0;
  virtual std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline,
                                              std::string token_sha1) = 0;
  // True if a contended attempt tells the server that its caller waits (a ReadWriteLock
  // writer's marker, which keeps new readers out while it is refreshed): a wait then makes
  // every attempt, never skipping one to wait behind this process's other waiters. Pure.
  virtual bool attempt_marks_waiter() const noexcept { return false; }
  // A wait whose attempts marked it (attempt_marks_waiter) ended without a hold: takes the mark
  // away, and wakes the waiters it held back. Best effort (a mark not removed lapses by its
  // own short life); each server's round trip is bounded by its command timeout. Never throws.
  virtual void unmark_waiter() noexcept {}
};

// A counting semaphore's store: limit() permits under one name, each a lease of its own. The
// Semaphore (lock/semaphore.cpp) talks to its permits only through this.
class PermitBackend {
 public:
  virtual ~PermitBackend() = default;

  virtual const std::string& key() const noexcept = 0;
  virtual std::size_t limit() const noexcept = 0;
  // Whether waiters queue in the wake-one queue (LockOptions::fair, on unless false): a release
  // hands its permit to the oldest live waiter and wakes nobody else.
  virtual bool fair() const noexcept = 0;
  // One attempt with `token`: the first free permit (in fair mode only if nobody live is queued
  // ahead; a permit a hand-over gave the token is claimed). Held: `slot` (1..limit),
  // `valid_until` and `fence`. Refused: `holder_pttl` is the earliest expiry of a held permit
  // (-1: none expires) and, with Queue::join in fair mode, `watcher` the place taken in the
  // queue. A grant too late to be of use is given back and reported as refused (pttl 0).
  // Throws the transport, protocol or server failure, after rolling back an attempt that may
  // have run (that rollback may still reach the server later: use another token afterwards).
  virtual AcquireResult acquire(const std::string& token, Queue queue) = 0;
  // Fair mode: gives up `token`'s place in the queue; a permit a hand-over gave it meanwhile is
  // handed on. Throws the transport or server failure.
  virtual void leave(const std::string& token) = 0;
  // The lease of permit `slot` (1..limit): what extends and renews it, and what releases it
  // (handed over, or announced to the semaphore's waiters). Called by the permit's holder only.
  virtual std::shared_ptr<LeaseBackend> permit(std::size_t slot) = 0;
  // Wake-on-release: a subscription to the releases of every permit, and in fair mode to
  // hand-overs naming `token_sha1` (see LeaseBackend::watch). `watch_live()`: already
  // subscribed, watching costs no round trip.
  virtual bool watch_live() const noexcept = 0;
  virtual std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline,
                                              std::string token_sha1) = 0;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_CORE_BACKEND_HPP
