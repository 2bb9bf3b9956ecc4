// src/io/finisher.hpp: completes the writes of given-up connections in the background, then
// closes them. What a timed-out connection was sent, and the rollback queued behind it, must reach
// the server whole and in order even when its socket buffers are full (a paused server, a request
// of a few MiB). Once written, the connection is shut down for writing and its replies are read
// until the server closes it: closing with unread replies would reset the connection and could
// drop what the server has not read yet. One thread per process, started on first use; each
// connection gets at most ten minutes.
#ifndef REDLOCK_SRC_IO_FINISHER_HPP
#define REDLOCK_SRC_IO_FINISHER_HPP

#include <memory>

#include "io/wire.hpp"

namespace redlock {
namespace detail {

// Writes what is left in `connection`'s output, then closes it. Never blocks; thread-safe.
void finish_in_background(std::unique_ptr<Connection> connection) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_FINISHER_HPP
