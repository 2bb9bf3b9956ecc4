// examples/lock_guard.cpp: a critical section under std::lock_guard with a single-instance Lock.
//
//   example_lock_guard [--redis URI] [--self-test]
//
// redlock::Lock is a lease on one Redis instance that meets the standard Lockable requirements,
// so the standard guards work with it exactly as with a std::mutex. What differs from a mutex:
//   - lock() can fail to talk to Redis at all; that throws redlock::Error (catch it, below);
//   - the lease expires after LockOptions::ttl unless renewed, so a holder that crashes cannot
//     block everyone forever, and a holder that overruns its ttl is no longer protected;
//   - another process (or another Lock object) that wants the same key sees contention as a
//     plain `false` from try_lock(), never as an exception.
// --self-test starts a throwaway redis-server (test harness) instead of using --redis.
#include <chrono>       // std::chrono
#include <cstdio>       // std::printf, std::fprintf
#include <exception>    // std::exception
#include <mutex>        // std::lock_guard
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <thread>       // std::this_thread::sleep_for

#include <redlock/redlock.hpp>  // Client, Endpoint, Lock, errors, set_log_handler

#include "example_main.hpp"  // main(): --redis URI, --self-test

namespace {

using namespace std::chrono_literals;

// Increments a counter of "reports written" under the lock. Returns 0 on success.
int run(const redlock::Endpoint& endpoint) {
  // Problems redlock cannot throw (a failed release in a destructor, a reconnect) go to one
  // process-wide handler. The default is silent; print warnings and errors.
  redlock::set_log_handler(
      [](redlock::LogLevel level, std::string_view message) {
        std::fprintf(stderr, "[redlock %s] %.*s\n", redlock::to_string(level),
                     static_cast<int>(message.size()), message.data());
      },
      redlock::LogLevel::warn);  // below it, nothing is even formatted

  redlock::Client client(endpoint);  // connects lazily, on the first command
  redlock::LockOptions options;
  options.ttl = 10s;  // the lease expires by itself 10 s after the last acquire
  redlock::Lock lock(client, "examples:lock_guard", options);

  try {
    std::lock_guard<redlock::Lock> guard(lock);  // waits until held; throws redlock::Error
    std::printf("holding '%s' on %s; %lld ms of validity left\n", lock.key().c_str(),
                endpoint.address().c_str(), static_cast<long long>(lock.validity().count()));

    // The critical section. Keep it well inside validity(); for long work see long_job.cpp.
    const redlock::Reply before = client.command({"GET", "examples:lock_guard:reports"});
    std::this_thread::sleep_for(50ms);  // "writing the report"
    const redlock::Reply after = client.command({"INCR", "examples:lock_guard:reports"});
    std::printf("reports written so far: %s -> %lld\n",
                before.is_nil() ? "0" : before.str().c_str(),
                static_cast<long long>(after.integer()));

    // Meanwhile, anyone else asking for the same key just gets `false`: contention is a result.
    // (A second Lock object behaves like another process; the same object would be re-entrant.)
    redlock::Lock other(client, "examples:lock_guard", options);
    std::printf("a second Lock on the same key: try_lock() -> %s\n",
                other.try_lock() ? "true (unexpected!)" : "false, as it should be");
  } catch (const redlock::TimeoutError& e) {  // a deadline passed: paused or overloaded server
    std::fprintf(stderr, "timed out talking to Redis: %s\n", e.what());
    return 1;
  } catch (const redlock::Error& e) {  // any other Redis-side failure (refused, NOAUTH, ...)
    std::fprintf(stderr, "could not lock: %s\n", e.what());
    return 1;
  }
  // The guard released the lease when it went out of scope. Its unlock() never throws: a
  // release that fails is logged through the handler above and the lease simply expires.
  std::printf("released; lock held by us now? %s\n", lock.owns_lock() ? "yes" : "no");

  // What a failure looks like: nothing listens on port 1. lock() rides out an unreachable
  // server for LockOptions::max_unavailable (10 s by default: a restart or a failover costs a
  // wait nothing), then throws ConnectionError (a subclass of redlock::Error) instead of
  // waiting for ever. Here we give it half a second.
  redlock::Endpoint nowhere = endpoint;
  nowhere.host = "127.0.0.1";
  nowhere.port = 1;
  nowhere.unix_socket.clear();
  redlock::LockOptions impatient = options;
  impatient.max_unavailable = std::chrono::milliseconds(500);
  redlock::Lock unreachable(redlock::Client(nowhere), "examples:lock_guard", impatient);
  try {
    std::lock_guard<redlock::Lock> guard(unreachable);
    std::fprintf(stderr, "locked on %s?! nothing should listen there\n", nowhere.address().c_str());
    return 1;
  } catch (const redlock::Error& e) {
    std::printf("as expected, no lock without a server: %s\n", e.what());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_with(
      argc, argv, nullptr, 0,
      [](const redlock::Endpoint& endpoint, std::uint64_t) { return run(endpoint); });
}
