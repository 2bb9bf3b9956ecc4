// examples/long_job.cpp: a job longer than its lease, kept alive by the watchdog, that stops
// cleanly as soon as the lease is lost.
//
//   example_long_job [--redis URI] [--max-renewals N] [--self-test]
//
// A lease (ttl) should be short, so that a crashed holder blocks others only briefly; a job may
// take much longer. With LockOptions::auto_renew the watchdog extends the lease about every
// ttl/3 while the job holds it. Renewal can still fail (Redis unreachable, the key deleted or
// taken over, a cap reached): then the LeaseToken is raised and on_lost runs. The job checks its
// token between chunks and stops before doing anything it may no longer do.
//
// To make the loss visible, this example caps the renewals (--max-renewals, default 3): the
// watchdog then releases the lease on purpose and the job stops half-way. --max-renewals 0 lets
// it finish. --self-test starts a throwaway redis-server instead of using --redis.
#include <chrono>       // std::chrono
#include <cstdint>      // std::uint64_t
#include <cstdio>       // std::printf, std::fprintf
#include <exception>    // std::exception
#include <memory>       // std::make_shared
#include <mutex>        // std::unique_lock
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <thread>       // std::this_thread::sleep_for

#include <redlock/redlock.hpp>  // Client, Lock, LockOptions, LeaseToken, Watchdog, errors

#include "example_main.hpp"  // main(): --redis URI, --self-test

namespace {

using namespace std::chrono_literals;

constexpr int kChunks = 12;
constexpr auto kChunkTime = 300ms;  // each chunk "works" this long: 3.6 s in all

int run(const redlock::Endpoint& endpoint, std::uint64_t max_renewals) {
  redlock::set_log_handler(
      [](redlock::LogLevel level, std::string_view message) {
        std::fprintf(stderr, "[redlock %s] %.*s\n", redlock::to_string(level),
                     static_cast<int>(message.size()), message.data());
      },
      redlock::LogLevel::warn);  // below it, nothing is even formatted
  redlock::Client client(endpoint);

  // A watchdog of our own, only to read its counters below; leaving options.watchdog empty uses
  // the process-wide Watchdog::shared(), which is what most programs want.
  auto watchdog = std::make_shared<redlock::Watchdog>();

  redlock::LockOptions options;
  options.ttl = 1500ms;  // short lease: renewed about every 500 ms while held
  options.auto_renew = true;
  options.watchdog = watchdog;
  options.max_renewals = max_renewals;  // 0: no cap. max_hold caps by age instead.
  // on_lost runs once, on the watchdog's callback thread: keep it short, never throw, and capture
  // nothing that dies before the watchdog. Setting a flag or cancelling I/O is typical; the job
  // itself polls its LeaseToken (below).
  options.on_lost = [](const redlock::LostEvent& event) {
    std::printf("  on_lost: lease on '%s' lost (%s) after %llu renewal(s)\n", event.key.c_str(),
                redlock::to_string(event.reason), static_cast<unsigned long long>(event.renewals));
  };
  redlock::Lock lock(client, "examples:long_job", options);
  const std::string checkpoint_key = "examples:long_job:done";

  try {
    std::unique_lock<redlock::Lock> held(lock);  // waits until held
    // The token of this hold. Cheap to copy and to poll (lock-free).
    const redlock::LeaseToken lease = lock.lease();
    std::printf("holding '%s' (ttl %lld ms, renewed in the background)\n", lock.key().c_str(),
                static_cast<long long>(options.ttl.count()));

    int done = 0;
    for (int chunk = 1; chunk <= kChunks; ++chunk) {
      // Between chunks: is the lease still ours? If not, another process may already hold the
      // lock and be doing this very job: stop before touching anything shared.
      if (lease.lost()) break;
      std::this_thread::sleep_for(kChunkTime);  // the chunk's work (e.g. compute a partition)
      // Publish the chunk's result only if the lease survived the chunk. (There is still a
      // window between this check and the write; fencing.cpp shows how storage can close it.)
      if (lease.lost()) break;
      client.command({"SET", checkpoint_key, std::to_string(chunk)});
      done = chunk;
      std::printf("chunk %2d/%d done; validity %4lld ms, %llu renewal(s) so far\n", chunk, kChunks,
                  static_cast<long long>(lock.validity().count()),
                  static_cast<unsigned long long>(watchdog->stats().renewals));
    }
    if (done == kChunks) {
      std::printf("finished all %d chunks under one lease\n", kChunks);
    } else {
      // reason() says why: refused (key gone or taken), no_quorum, expired, cap_reached.
      std::printf(
          "lease lost (%s): stopped cleanly after chunk %d of %d; chunk %d onwards is "
          "left for the next holder (checkpoint in '%s')\n",
          redlock::to_string(lease.reason()), done, kChunks, done + 1, checkpoint_key.c_str());
    }
  } catch (const redlock::Error& e) {  // could not reach Redis to lock or to write a checkpoint
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  // `held` released the lock (or found it already released by the cap) when it left scope. When
  // the watchdog goes away (end of this function) it first runs any on_lost still queued.
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_with(argc, argv, "--max-renewals", 3,
                            [](const redlock::Endpoint& endpoint, std::uint64_t max_renewals) {
                              return run(endpoint, max_renewals);
                            });
}
