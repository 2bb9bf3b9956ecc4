// src/watch/release_retry.hpp: a release whose outcome is unknown on some nodes, retried in the
// background (issue 41; docs/design/async-engine.md §6.3).
//
// A release that fails on a node (the connection reset, its own timeout, not sent: the node in
// back-off, a Sentinel failover under way, READONLY from a demoted master) leaves our key there
// until its ttl ends, and in fair mode the queue's head waits that long for its hand-over: a
// planned SENTINEL FAILOVER caught one whole ttl with no grant. The caller is told of the failure
// as before (unlock() logs it, release() throws it) and never waits for the retry: the nodes
// still owed get the release again here, on a thread of the store's own lane (as renewals,
// LeaseBackend::renewal_lane), 50 ms after the failure and then every 100 ms (jittered), until
// every owed node answered or the hold's validity ended (after it the key expires by itself).
// A retry never changes what was reported (kept, lost, the error): it only frees the key sooner.
#ifndef REDLOCK_SRC_WATCH_RELEASE_RETRY_HPP
#define REDLOCK_SRC_WATCH_RELEASE_RETRY_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"

namespace redlock {
namespace detail {

class ReleaseRetries {
 public:
  struct Counts {
    std::uint64_t started{0};    // releases given to the retry
    std::uint64_t completed{0};  // of those, answered on every owed node by a retry
    std::uint64_t rounds{0};     // retry rounds sent
  };

  ReleaseRetries();
  ~ReleaseRetries();  // stop()
  ReleaseRetries(const ReleaseRetries&) = delete;
  ReleaseRetries& operator=(const ReleaseRetries&) = delete;

  // Retries the release of `token` on `backend`'s nodes where owed[i] != 0 until `until` (the
  // hold's validity end, steady clock). Starts the lane's thread if it has none. Never throws:
  // a retry that cannot be started is logged and dropped (the key expires by its ttl).
  // Thread-safe.
  void add(std::shared_ptr<LeaseBackend> backend, std::string token, std::vector<char> owed,
           SteadyClock::time_point until) noexcept;
  // Drops the retries not yet done and joins the threads (one round in flight finishes, bounded
  // by its command timeout); a thread that calls it is detached instead. Never throws.
  void stop() noexcept;

  Counts counts() const;  // thread-safe
  void reset_counts();    // thread-safe

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_WATCH_RELEASE_RETRY_HPP
