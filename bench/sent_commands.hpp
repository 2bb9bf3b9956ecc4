// bench/sent_commands.hpp: counts the Redis commands this process writes to its sockets, for the
// fleet section's "client commands per acquisition" (the workers count what they send: exact,
// whatever the library's scripts run inside, which INFO commandstats cannot tell apart).
//
// redlock-bench defines send(2) itself (sent_commands.cpp): the library's transport writes every
// request with send(), so the definition in the executable is the one it calls. It passes the
// bytes to the kernel (sendto) and, once counting is on, parses the RESP requests that went out
// on each socket ("*<argc>", then "$<len>" and the bytes of each argument) and counts their
// headers. Counting is off unless a fleet worker process turns it on; TLS sockets would carry
// ciphertext (the fleet uses plain TCP). A connection that breaks in the middle of a command could
// leave its socket's parser out of step for the next connection on the same descriptor: the
// fleet's workers keep their connections for the whole run.
//
//   bench::count_sent_commands();                // in the worker process, before its Client
//   const std::uint64_t before = bench::sent_commands();
#ifndef REDLOCK_BENCH_SENT_COMMANDS_HPP
#define REDLOCK_BENCH_SENT_COMMANDS_HPP

#include <cstdint>  // std::uint64_t

namespace bench {

// Turns counting on for this process (for good). Thread-safe.
void count_sent_commands() noexcept;
// Commands written by this process since counting was turned on. Thread-safe.
std::uint64_t sent_commands() noexcept;

}  // namespace bench

#endif  // REDLOCK_BENCH_SENT_COMMANDS_HPP
