// src/core/extend.hpp: extend-many (extend_leases), the one token-checked extend of any number of
// leases: one pipelined round trip per node for all the leases on it, then the same tally and
// decision for each lease. Lock::extend is its one-lease case; the watchdog batches its due
// renewals in it.
#ifndef REDLOCK_SRC_CORE_EXTEND_HPP
#define REDLOCK_SRC_CORE_EXTEND_HPP

#include <chrono>
#include <cstddef>
#include <string>

#include "core/backend.hpp"

namespace redlock {
namespace detail {

class LeaseEngine;

// One lease to extend. The caller keeps `engine`, `token` and `ttl_ms` alive until
// extend_many() returns.
struct ExtendItem {
  const LeaseEngine* engine{nullptr};
  const std::string* token{nullptr};
  std::chrono::milliseconds ttl{0};
  const std::string* ttl_ms{nullptr};  // ttl as decimal text
  // Out: held iff a quorum of the lease's nodes confirmed and validity stays positive; the
  // failure if none answered; the reason if not held.
  ExtendResult result;
  std::size_t refused{0};  // out: nodes that answered "not ours"
};

// When the round trip may end: once one lease's outcome is certain (a quorum confirmed, or can
// no longer confirm; for a single lease only), or when every node answered or timed out.
enum class Finish : unsigned char { every_node, at_quorum };

// Extends every item. Returns the number of node round trips made. Never throws for per-node
// failures (they land in each result); throws std::bad_alloc only.
std::size_t extend_leases(ExtendItem* items, std::size_t count, Finish finish);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_CORE_EXTEND_HPP
