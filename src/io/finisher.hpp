// src/io/finisher.hpp: completes given-up connections in the background, then closes them. What
// a timed-out connection was sent, and the rollback queued behind it, must reach the server whole
// and in order even when its socket buffers are full (a paused server, a request of a few MiB),
// and must run there: once written, the connection stays open until the server has answered
// every command on it. Closing earlier (or shutting our side down) loses them on a server that
// postpones commands, as CLIENT PAUSE and a failover's pause of writes do: it reads the end of
// the stream and frees the client with its postponed commands (issue 31 item 8: a release left
// the lease on a node paused for 120 ms). Closing with replies unread would also reset the
// connection. One thread per process, started on first use and ended when idle; each connection
// gets at most ten minutes, then is closed (a server stopped by SIGSTOP still runs what it read
// before the close).
#ifndef REDLOCK_SRC_IO_FINISHER_HPP
#define REDLOCK_SRC_IO_FINISHER_HPP

#include <cstddef>
#include <functional>
#include <memory>

#include "io/wire.hpp"

namespace redlock {
namespace detail {

// Writes what is left in `connection`'s output, reads the `owed` replies the server still owes
// on it (for the commands written or queued and not answered yet), then closes it. Never
// blocks; thread-safe.
void finish_in_background(std::unique_ptr<Connection> connection, std::size_t owed) noexcept;

// Runs `job` on the finisher's job thread, after every job queued before it: work nobody waits
// for that may block for a while (a Hold's release on its destruction, bounded by its
// command_timeout). The thread is started on first use and ends when no job is left, as the
// connection finisher's does; jobs run one at a time, in order. `job` must not throw (what it
// throws is swallowed). Never blocks, except that when no thread can be started (or no memory
// queue the job) it runs `job` on the calling thread. Thread-safe.
void run_in_background(std::function<void()> job) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_FINISHER_HPP
