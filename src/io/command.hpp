// src/io/command.hpp: how a command is handed to the executor: argv views (CommandView), a
// fixed-capacity builder for the hot path (FixedCommand), and whether it may be sent twice.
#ifndef REDLOCK_SRC_IO_COMMAND_HPP
#define REDLOCK_SRC_IO_COMMAND_HPP

#include <cstddef>
#include <exception>
#include <string_view>

#include <redlock/client.hpp>

namespace redlock {
namespace detail {

// Whether the executor may send a command a second time after the first send may have run: to
// retry it on a fresh connection when a pooled one turns out dead, or (scripts) to re-send it as
// EVAL behind a timed-out EVALSHA. Only for commands whose caller copes with a second run (the
// library's own idempotent scripts, SET NX with `NodeBatch::retried`); never for a user's.
enum class Resend : unsigned char { never, allowed };

// How a node announces releases and how its waiters hear them: classic pub/sub (PUBLISH,
// SUBSCRIBE: a standalone server, Sentinel's master) or sharded pub/sub (SPUBLISH, SSUBSCRIBE on
// the master that owns the channel's slot: Redis Cluster, Redis >= 7.0). Both sides of one node
// must use the same kind: a sharded message reaches only sharded subscribers.
enum class PubSub : unsigned char { classic, sharded };

// One command, as argv views the caller keeps alive until the batch returns. When `script` is set,
// argv[0] must be "EVALSHA" and argv[1] the script's SHA1; on NOSCRIPT the same command is re-sent
// as EVAL with the body (NOSCRIPT means it did not run).
struct CommandView {
  int argc{0};
  const char* const* argv{nullptr};
  const std::size_t* lens{nullptr};
  const Script* script{nullptr};
  Resend resend{Resend::never};
};

// A small owning command builder for fixed-size commands on the hot path (no allocation). Adding
// more than N arguments is a programming error and terminates (a truncated command is never sent).
template <int N>
struct FixedCommand {
  const char* argv[N]{};
  std::size_t lens[N]{};
  int argc{0};
  const Script* script{nullptr};

  FixedCommand& arg(std::string_view value) noexcept {
    if (argc >= N) std::terminate();
    argv[argc] = value.data();
    lens[argc] = value.size();
    ++argc;
    return *this;
  }
  // The library's own commands: safe to send again (see Resend).
  CommandView view() const noexcept {
    return CommandView{argc, argv, lens, script, Resend::allowed};
  }
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_COMMAND_HPP
