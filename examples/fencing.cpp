// examples/fencing.cpp: why a lease needs fencing tokens, and how storage uses them.
//
//   example_fencing [--redis URI] [--self-test]
//
// A lease cannot stop a holder that was paused (GC, swapping, SIGSTOP, a slow disk) for longer
// than its ttl: the lease expires, someone else takes the lock, and the paused holder wakes up
// still believing it holds it. Its next write would clobber the new holder's work.
//
// With LockOptions::fencing every hold gets a number, lock.fence(), that only grows. Pass it
// along with every write; the storage remembers the highest number it has seen and refuses
// anything older. Here the storage is a toy in-process class; in real life it is the database
// row (`UPDATE ... WHERE fence <= :fence`), the object store, the service you call.
//
// The scene: holder A takes the lock, writes, then "pauses" past its ttl. B takes the lock once
// A's lease has expired and writes. A wakes up and writes: rejected, its fence is older.
// --self-test starts a throwaway redis-server instead of using --redis.
#include <chrono>     // std::chrono
#include <cinttypes>  // PRIu64
#include <cstdarg>    // va_list
#include <cstdint>    // std::uint64_t
#include <cstdio>     // std::printf, std::vprintf
#include <exception>  // std::exception
#include <future>     // std::promise
#include <mutex>      // std::mutex, std::lock_guard
#include <string>     // std::string
#include <thread>     // std::thread

#include <redlock/redlock.hpp>  // Client, Lock, LockOptions, errors

#include "example_main.hpp"  // main(): --redis URI, --self-test

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The toy storage: one value, guarded by the highest fence token seen so far.
class FencedStore {
 public:
  // Stores `value` if `fence` is at least the highest token seen (equal: the same holder writing
  // again). Returns true if stored, false if rejected as coming from an older holder.
  // Thread-safe.
  bool write(std::uint64_t fence, const std::string& value) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (fence < highest_) return false;
    highest_ = fence;
    value_ = value;
    return true;
  }
  std::string value() const {
    std::lock_guard<std::mutex> guard(mutex_);
    return value_;
  }

 private:
  mutable std::mutex mutex_;
  std::uint64_t highest_{0};
  std::string value_;
};

const Clock::time_point g_start = Clock::now();

// printf with a timestamp, one whole line at a time (two threads print).
__attribute__((format(printf, 1, 2))) void say(const char* format, ...) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> guard(mutex);
  const auto t = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - g_start);
  std::printf("[%5lld ms] ", static_cast<long long>(t.count()));
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::printf("\n");
}

int run(const redlock::Endpoint& endpoint) {
  redlock::LockOptions options;
  options.ttl = 1s;
  options.fencing = true;  // every hold gets lock.fence(), one more than any earlier hold's
  const std::string key = "examples:fencing";
  FencedStore store;

  // Two holders, as two processes would be: separate Clients, separate Lock objects.
  redlock::Lock lock_a(redlock::Client(endpoint), key, options);
  redlock::Lock lock_b(redlock::Client(endpoint), key, options);

  std::promise<void> a_holds;
  bool a_first_ok = false;
  bool a_late_ok = true;
  std::thread holder_a([&] {
    try {
      lock_a.lock();
    } catch (const redlock::Error& e) {
      say("A: cannot lock: %s", e.what());
      a_holds.set_exception(std::current_exception());
      return;
    }
    const std::uint64_t fence = lock_a.fence();
    a_first_ok = store.write(fence, "written by A");
    say("A: holds the lock, fence %" PRIu64 "; writes -> %s", fence,
        a_first_ok ? "accepted" : "REJECTED");
    a_holds.set_value();
    // A stops the world for 1.5 x ttl (think: a long GC pause, or SIGSTOP). Its lease expires
    // meanwhile; a real holder could check lock.validity() before writing, but the pause can
    // fall right after that check, so only the storage can be sure.
    const auto pause = options.ttl * 3 / 2;
    say("A: paused for %lld ms (ttl %lld ms)...", static_cast<long long>(pause.count()),
        static_cast<long long>(options.ttl.count()));
    std::this_thread::sleep_for(pause);
    a_late_ok = store.write(fence, "late write by A");
    say("A: wakes up and writes with fence %" PRIu64 " -> %s", fence,
        a_late_ok ? "accepted (the storage was clobbered!)" : "REJECTED: a newer holder wrote");
    lock_a.unlock();  // its lease is long gone; this touches nothing of B's
  });

  int status = 0;
  try {
    a_holds.get_future().get();  // rethrows A's exception, if it could not lock
    // B waits for the lock; it becomes free when A's lease expires (nobody releases it).
    if (!lock_b.try_lock_for(5s)) {
      say("B: could not get the lock within 5 s");
      status = 1;
    } else {
      const std::uint64_t fence = lock_b.fence();
      const bool ok = store.write(fence, "written by B");
      say("B: holds the lock after A's lease expired, fence %" PRIu64 "; writes -> %s", fence,
          ok ? "accepted" : "REJECTED");
      if (!ok) status = 1;
      lock_b.unlock();
    }
  } catch (const redlock::Error& e) {
    say("error: %s", e.what());
    status = 1;
  }
  holder_a.join();
  if (!a_first_ok || a_late_ok) status = 1;
  say("store holds \"%s\": %s", store.value().c_str(),
      status == 0 ? "the paused holder's late write was fenced off" : "something went wrong");
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_with(
      argc, argv, nullptr, 0,
      [](const redlock::Endpoint& endpoint, std::uint64_t) { return run(endpoint); });
}
