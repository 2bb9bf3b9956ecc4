// src/watch/release_watch.hpp: the Redis ReleaseWatch ("wake me when it may be free"): a waiter's
// subscription, on every node, to a lock's release channel (and in fair mode to this process's
// hand-over channel), over the per-Client Subscriber; and a timer-only watch for polling waits.
#ifndef REDLOCK_SRC_WATCH_RELEASE_WATCH_HPP
#define REDLOCK_SRC_WATCH_RELEASE_WATCH_HPP

#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"

namespace redlock {
namespace detail {

class ClientImpl;
class LeaseEngine;

// The channels one watch listens on. Both strings must outlive the watch; `grant` empty: none.
struct WatchChannels {
  const std::string& release;
  const std::string& grant;
  const std::string& key;  // for log messages only
  // More release channels (a MultiLock's other keys), all in `release`'s slot; null: none. The
  // vector must outlive the watch.
  const std::vector<std::string>* more_releases{nullptr};
  // The more_releases are heard for another lock's sake (a ReadWriteLock reader on the writers'
  // channel): their wake-ups go to this process's other waiters first (Subscriber::Hearing).
  bool more_secondary{false};
};

// Subscribes to `channels` on every node in `nodes`: registration goes to all nodes first, then
// the confirmations are awaited together until one shared deadline (at most connect + command
// timeout, never past `deadline`), so a dead or slow node costs that once, not once per node. A
// node that cannot subscribe or confirm leaves the waiter to its timer. `token_sha1`: fair mode,
// hand-overs naming it wake this watch (empty otherwise). Never null; never throws for a node
// that cannot be reached (it is logged at debug). Not thread-safe (one waiter's object), except
// wake().
std::unique_ptr<ReleaseWatch> make_release_watch(
    const std::vector<std::shared_ptr<ClientImpl>>& nodes, const WatchChannels& channels,
    SteadyClock::time_point deadline, std::string token_sha1);

// The lease engine's watch: its release channel, and in fair mode its grant channel. Pinned (the
// engine's LeaseBackend::watch delegates here).
std::unique_ptr<ReleaseWatch> make_release_watch(const LeaseEngine& engine,
                                                 SteadyClock::time_point deadline,
                                                 std::string token_sha1);

// True if every node's subscriber already has a live subscription to the engine's channels (a
// watch would be confirmed at once, no round trip). Never throws; false when unsure. Pinned.
bool release_watch_live(const LeaseEngine& engine) noexcept;

// The same for any watch's `channels` on `node`.
bool release_watch_live(const ClientImpl& node, const WatchChannels& channels) noexcept;

// How many of the `heard` subscribers that `node` reported for a release on `channel` wait for
// the lock: this process's own subscription does not count while it only lingers (no waiter of
// this process is registered), so a thread alone again after contention does not hold back for
// a waiter that does not exist. Never throws.
std::size_t waiting_listeners(const ClientImpl& node, const std::string& channel,
                              std::size_t heard) noexcept;

// A watch that subscribes to nothing: wait_until sleeps until its time or wake() (polling).
std::unique_ptr<ReleaseWatch> make_timer_watch();

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_WATCH_RELEASE_WATCH_HPP
