// examples/demo/worker_parts.hpp: what the two loops of a worker process share: the threads'
// loop (worker.cpp, the blocking API) and the --async loop (async_worker.cpp, <redlock/asio.hpp>
// on an io_context). Both do the same holds and report them the same way (demo.hpp's protocol).
#ifndef REDLOCK_EXAMPLES_DEMO_WORKER_PARTS_HPP
#define REDLOCK_EXAMPLES_DEMO_WORKER_PARTS_HPP

#include <cstdint>      // std::uint64_t
#include <string>       // std::string
#include <string_view>  // std::string_view

#include <redlock/redlock.hpp>  // Client, LockBase, LeaseToken, Script

#include "demo.hpp"

namespace demo {

// What every loop of one worker process shares.
struct Shared {
  const WorkerConfig& config;
  redlock::LockBase& lock;
  const redlock::Client& checker;
  const CounterKeys keys;
  const redlock::Script read{kFencedReadLua};
  const redlock::Script write{kFencedWriteLua};
};

// Sends one line to the coordinator (thread-safe); a line that cannot be sent stops the worker.
void send_line(std::string_view line) noexcept;
// True once the coordinator or a signal asked the worker to stop.
bool stop_requested() noexcept;
// Returns once the coordinator says stop (stdin's EOF) or a signal asks to stop.
void wait_for_stop();
// `text` on one line: newlines become spaces.
std::string one_line(std::string_view text);

// The critical section: a fenced read-sleep-write increment of the counter. Blocks (two round
// trips to the checker and 1 ms of sleep).
Outcome increment(const Shared& s, std::uint64_t fence, const redlock::LeaseToken& lease);
// The "H ..." line that reports one hold of thread (or task) `thread`.
std::string hold_line(const Shared& s, int thread, const Hold& hold);

// The --async mode: config.threads tasks acquire and release `s.lock` through <redlock/asio.hpp>
// on one io_context until stop_requested() (async_worker.cpp). Returns after the last release.
void run_async(const Shared& s);

}  // namespace demo

#endif  // REDLOCK_EXAMPLES_DEMO_WORKER_PARTS_HPP
