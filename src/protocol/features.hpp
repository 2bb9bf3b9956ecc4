// src/protocol/features.hpp: what a server supports, learned on first use: today whether SET ...
// NX ... GET works (Redis >= 7.0). The only code that reads or writes that knowledge.
#ifndef REDLOCK_SRC_PROTOCOL_FEATURES_HPP
#define REDLOCK_SRC_PROTOCOL_FEATURES_HPP

#include <atomic>

#include "io/connection.hpp"
#include "protocol/replies.hpp"

namespace redlock {
namespace detail {

// The plain acquire's dialect for `node`: SET ... GET until the server refused it once.
// (The flag itself still lives in ClientImpl::set_nx_get, the pool's per-server state; this is
// the one place that interprets it. Thread-safe.)
inline AcquireDialect set_dialect(const ClientImpl& node) noexcept {
  return node.set_nx_get.load(std::memory_order_relaxed) ? AcquireDialect::set_nx_get
                                                         : AcquireDialect::set_nx;
}

// `node` answered SET ... GET with a syntax error (Redis < 7.0): plain SET NX from now on.
inline void learned_no_set_get(ClientImpl& node) noexcept { node.set_nx_get.store(false); }

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_PROTOCOL_FEATURES_HPP
