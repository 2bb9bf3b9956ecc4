// tests/torture/worker_parts.hpp: what a worker's two loops share: the threads (worker.cpp, the
// blocking API) and, with --async, the coroutines on one io_context (async_worker.cpp,
// <redlock/asio.hpp>). Both take the same lock, do the same fenced read-sleep-write, and write
// the same hold log records, so the checker cannot tell them apart.
#ifndef REDLOCK_TESTS_TORTURE_WORKER_PARTS_HPP
#define REDLOCK_TESTS_TORTURE_WORKER_PARTS_HPP

#include <hiredis/hiredis.h>  // redisContext, redisReply

#include <atomic>      // std::atomic
#include <chrono>      // std::chrono::nanoseconds
#include <cstdint>     // std::int64_t, std::uint64_t
#include <exception>   // std::exception, std::exception_ptr
#include <functional>  // std::function
#include <map>         // std::map
#include <memory>      // std::unique_ptr
#include <mutex>       // std::mutex
#include <optional>    // std::optional
#include <random>      // std::mt19937_64
#include <string>      // std::string
#include <vector>      // std::vector

#include <redlock/redlock.hpp>
#ifdef REDLOCK_TORTURE_POSTGRES
#include <redlock/postgres.hpp>
#endif
#ifdef REDLOCK_TORTURE_ZOOKEEPER
#include <redlock/zookeeper.hpp>
#endif

#include "hold_log.hpp"  // HoldLogWriter, WriteResult, EndKind
#include "worker.hpp"    // WorkerConfig

namespace redlock::torture {

#ifdef REDLOCK_TORTURE_ZOOKEEPER
using ZooKeeperSession = redlock::zookeeper::Session;
using ZooKeeperLock = redlock::zookeeper::Lock;
#else
struct ZooKeeperSession {};  // --mode zookeeper is refused by main() without the component
using ZooKeeperLock = Lock;
#endif
#ifdef REDLOCK_TORTURE_POSTGRES
using PgDatabase = redlock::postgres::Database;
using PgLock = redlock::postgres::Lock;
#else
struct PgDatabase {};
struct PgLock final : LockBase {
  PgLock(PgDatabase&, const char*, const LockOptions&) : LockBase(nullptr) {}
};
#endif

// The checker store, over plain hiredis (never through the library under test). Blocks.
class Store {
 public:
  explicit Store(int port) : port_(port) {}

  struct Values {
    std::int64_t counter{0};
    std::int64_t shadow{0};
  };
  // The fenced read. nullopt on any failure (then the hold skips its write).
  std::optional<Values> read(std::uint64_t fence);
  // The fenced write.
  WriteResult write(std::uint64_t fence, std::int64_t value, std::int64_t shadow);

 private:
  struct ContextDeleter {
    void operator()(redisContext* c) const noexcept { redisFree(c); }
  };
  struct ReplyDeleter {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
  };
  using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;
  ReplyPtr run(const std::vector<std::string>& argv);

  int port_;
  std::unique_ptr<redisContext, ContextDeleter> context_;
};

// A worker process's tallies, shared by its threads (or coroutines).
struct Counters {
  std::atomic<std::int64_t> attempts{0};
  std::atomic<std::int64_t> acquired{0};
  std::atomic<std::int64_t> contended{0};
  std::atomic<std::int64_t> err_timeout{0};
  std::atomic<std::int64_t> err_connection{0};
  std::atomic<std::int64_t> err_server{0};
  std::atomic<std::int64_t> err_protocol{0};
  std::atomic<std::int64_t> err_other{0};
  std::atomic<int> fatal{0};

  // A few distinct error messages, with counts, for the report.
  void sample(const std::string& kind, const std::exception& e);
  // Counts a failed acquire by its type (TimeoutError, ConnectionError, ...). Rethrows what is
  // not a redlock::Error: that is a bug, not a fault of the run.
  void acquire_failed(const std::exception_ptr& error);

  std::mutex mutex;
  std::map<std::string, std::int64_t> samples;  // guarded by mutex
};

// Thread (coroutine) `thread`'s lock options: ttl, retry_delay, wake_on_release, fencing on,
// auto_renew and fair as the run's configuration says.
LockOptions thread_options(const WorkerConfig& config, int thread);

// The lock of the run's mode, with thread `thread`'s options; each thread (coroutine) owns one,
// so they contend through the servers, not through one object's local queue.
class ModeLock {
 public:
  // `pg`: the process's Database in the postgres modes; `zookeeper`: its Session in zookeeper
  // mode (null otherwise).
  ModeLock(const WorkerConfig& config, int thread, const std::vector<Client>& clients,
           PgDatabase* pg, ZooKeeperSession* zookeeper);
  LockBase& get() noexcept { return *lock_; }

 private:
  std::optional<Lock> single_;
  std::optional<PgLock> pg_;
  std::optional<Redlock> quorum_;
  std::optional<ZooKeeperLock> zk_;
  LockBase* lock_{nullptr};
};

// " key=value", the hold log's field.
std::string field(const char* key, std::int64_t value);

// What each thread (coroutine) of a worker owns: its number, its connection to the store, its
// workload randomness (sleeps only; tokens are the library's), its lock (--primitive lock; the
// other primitives' threads own theirs: primitive_worker.cpp) and its hold count.
struct Seat {
  Seat(const WorkerConfig& config, int index, const std::vector<Client>& clients, PgDatabase* pg,
       ZooKeeperSession* zookeeper);

  const WorkerConfig& config;
  const int index;
  Store store;
  std::mt19937_64 rng;
  std::optional<ModeLock> lock;
  std::int64_t seq{0};
};

// One hold's records in the hold log (hold_log.hpp) and the validity deadline its holder has
// seen, the same for both loops. `validity` is the hold's validity(): the lock's for a thread
// hold, the Hold's for a handle.
class HoldTrack {
 public:
  // Writes the "acq" record of hold n of process p, thread (coroutine) t. Takes the time *before*
  // asking for validity(): t + validity() is then never later than the library's own deadline
  // (validity() is "deadline - its now", rounded down).
  // `extra`: more " key=value" fields for the "acq" record (the primitives' side, keys, t_req).
  HoldTrack(HoldLogWriter& log, int p, int t, std::int64_t n,
            std::function<std::chrono::milliseconds()> validity, std::uint64_t fence,
            const std::string& extra = {});

  std::uint64_t fence() const noexcept { return fence_; }
  std::int64_t validity_ms() const noexcept { return validity_ms_; }
  // Notes the deadline validity() shows now, if later than any seen (renewals move it).
  void observe();
  // The "write" record: the read failed at t_read, or the write ended now with `result`.
  void read_failed(std::int64_t t_read);
  void written(WriteResult result, std::int64_t t_read, std::int64_t value);
  // The "end" record: released at t_rel, done now; the latest deadline seen; `extra` as above.
  void ended(EndKind kind, std::int64_t t_rel, const std::string& extra = {});

 private:
  std::string prefix(const char* event) const;

  HoldLogWriter& log_;
  const int p_;
  const int t_;
  const std::int64_t n_;
  const std::function<std::chrono::milliseconds()> validity_;
  const std::uint64_t fence_;
  std::int64_t validity_ms_{0};
  std::int64_t observed_{0};
};

// How long a hold sleeps between its read and its write: 0-5 ms, or with probability
// --long-holds a long hold, up to 90% of the validity (with --auto-renew up to two ttl), slept in
// steps of at most 20 ms that note the validity the holder sees.
struct HoldSleep {
  bool long_hold{false};
  std::chrono::nanoseconds total{0};
  std::int64_t until_ns{-1};  // a long hold's end, set by the first next()

  // The next sleep, or nullopt once the whole sleep is over: a short hold's `total` once; a long
  // hold's steps, each after track.observe().
  std::optional<std::chrono::nanoseconds> next(HoldTrack& track);
};
HoldSleep plan_sleep(std::mt19937_64& rng, const WorkerConfig& config, std::int64_t validity_ms);

// One hold's work: the fenced read of the counter (when `write`), the planned sleep, the fenced
// write of counter + 1, with their records. `stopped` returning true ends it early, before the
// write (an election's worker stop).
void read_sleep_write(
    Seat& seat, HoldTrack& track, bool write,
    const std::function<bool()>& stopped = [] { return false; });

// The acquire bound of the next attempt: --acquire-bound, cut at the run's end, at least 1 ms.
std::chrono::nanoseconds acquire_bound(const WorkerConfig& config);

// --async: config.threads coroutines on one io_context thread, each with its own lock, until
// config.until_ns (async_worker.cpp; without the asio component it throws
// std::invalid_argument).
void run_async_workers(const WorkerConfig& config, const std::vector<Client>& clients,
                       PgDatabase* pg, ZooKeeperSession* zookeeper, HoldLogWriter& log,
                       Counters& counters);

// --primitive rwlock|multilock|election: config.threads threads, each taking its share of the
// primitive until config.until_ns (primitive_worker.cpp).
void run_primitive_workers(const WorkerConfig& config, const std::vector<Client>& clients,
                           PgDatabase* pg, ZooKeeperSession* zookeeper, HoldLogWriter& log,
                           Counters& counters);

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_WORKER_PARTS_HPP
