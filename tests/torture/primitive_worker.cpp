// tests/torture/primitive_worker.cpp: the worker threads of --primitive rwlock|multilock|election.
//
// Each thread owns its own object (so threads contend through the store, not through one
// object's local queue) and writes the same hold log records as a lock's thread (worker.cpp),
// with the fields the checker needs for the primitive (hold_log.hpp):
//   rwlock     thread t of a process is a writer when t % 4 == 0 ("side=w"), else a reader
//              ("side=r"); "t_req" is when its acquire call started (the writer-preference
//              check). Writers do the fenced read-sleep-write; readers sleep and leave. A quorum
//              has no fence (ReadWriteLock refuses fencing there): its writers do not write.
//   multilock  global thread g = p * T + t: even g take a plain Lock on key (g / 2) % 4, odd g a
//              MultiLock over the other three keys ("keys=<mask>"). No counter writes (disjoint
//              sets hold at once); an observer thread reads all four keys in one MGET every
//              2 ms (lock mode) and logs a set it saw partly held.
//   election   every thread is a candidate of one Election, run() until the run's end; each
//              term is a hold (fence = term) whose worker does one fenced read-sleep-write. Its
//              window ends when the library stopped the worker ("t_stop", from the StopToken's
//              callback) or the worker returned; "t_unled" is when is_leader() was first seen
//              false (sampled every <= 5 ms), so the checker sees how late the stop came.
#include <hiredis/hiredis.h>  // redisConnect, redisCommand

#include <atomic>     // std::atomic
#include <bitset>     // std::bitset
#include <cstdio>     // std::fprintf
#include <map>        // std::map
#include <memory>     // std::unique_ptr, std::make_shared
#include <stdexcept>  // std::invalid_argument
#include <thread>     // std::thread, std::this_thread

#include <redlock/election.hpp>
#include <redlock/multilock.hpp>
#include <redlock/rwlock.hpp>

#include "worker_parts.hpp"

namespace redlock::torture {

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// One thread's side of the primitive: how it takes, what it knows while holding, how it gives
// back, and the hold log fields that say what it held.
class Side {
 public:
  virtual ~Side() = default;
  virtual bool take(nanoseconds bound) = 0;
  virtual milliseconds validity() const = 0;
  virtual std::uint64_t fence() const = 0;
  virtual bool give_back() = 0;
  virtual std::string fields() const = 0;
  // Whether its holds do the fenced counter write (exclusive holders with a fence).
  virtual bool writes() const = 0;
};

std::unique_ptr<ReadWriteLock> make_rwlock(const WorkerConfig& config, LockOptions options,
                                           const std::vector<Client>& clients, PgDatabase* pg,
                                           ZooKeeperSession* zookeeper) {
  (void)pg;
  (void)zookeeper;
  if (config.mode == Mode::redlock) {
    options.fencing = false;  // no fence is agreed across nodes: refused by the quorum form
    return std::make_unique<ReadWriteLock>(clients, kLockKey, options);
  }
#ifdef REDLOCK_TORTURE_POSTGRES
  if (pg != nullptr) return std::make_unique<postgres::ReadWriteLock>(*pg, kLockKey, options);
#endif
#ifdef REDLOCK_TORTURE_ZOOKEEPER
  if (config.mode == Mode::zookeeper) {
    return std::make_unique<zookeeper::ReadWriteLock>(*zookeeper, kLockKey, options);
  }
#endif
  return std::make_unique<ReadWriteLock>(clients.at(0), kLockKey, options);
}

class RwSide final : public Side {
 public:
  RwSide(std::unique_ptr<ReadWriteLock> rw, bool writer) : rw_(std::move(rw)), writer_(writer) {}
  bool take(nanoseconds bound) override {
    t_req_ = mono_ns();
    return writer_ ? rw_->try_lock_for(bound) : rw_->try_lock_shared_for(bound);
  }
  milliseconds validity() const override {
    return writer_ ? rw_->validity() : rw_->validity_shared();
  }
  std::uint64_t fence() const override { return writer_ ? rw_->fence() : rw_->fence_shared(); }
  bool give_back() override { return writer_ ? rw_->release() : rw_->release_shared(); }
  std::string fields() const override {
    return std::string(" side=") + (writer_ ? "w" : "r") + field("t_req", t_req_);
  }
  bool writes() const override { return writer_ && rw_->fence() != 0; }

 private:
  std::unique_ptr<ReadWriteLock> rw_;
  const bool writer_;
  std::int64_t t_req_{0};
};

class MultiSide final : public Side {
 public:
  MultiSide(const WorkerConfig& config, int thread, const Client& client) {
    const int g = config.index * config.threads + thread;
    const int k = (g / 2) % kMultiKeyCount;
    const LockOptions options = thread_options(config, thread);
    if (g % 2 == 0) {
      mask_ = 1 << k;
      lock_ = std::make_unique<Lock>(client, kMultiKeys[k], options);
      return;
    }
    std::vector<std::string> keys;
    for (int i = 0; i < kMultiKeyCount; ++i) {
      if (i == k) continue;
      keys.emplace_back(kMultiKeys[i]);
      mask_ |= 1 << i;
    }
    lock_ = std::make_unique<MultiLock>(client, std::move(keys), options);
  }
  bool take(nanoseconds bound) override { return lock_->try_lock_for(bound); }
  milliseconds validity() const override { return lock_->validity(); }
  std::uint64_t fence() const override { return lock_->fence(); }
  bool give_back() override { return lock_->release(); }
  std::string fields() const override { return field("keys", mask_); }
  bool writes() const override { return false; }

 private:
  std::unique_ptr<LockBase> lock_;
  int mask_{0};
};

std::unique_ptr<Side> make_side(const WorkerConfig& config, int thread,
                                const std::vector<Client>& clients, PgDatabase* pg,
                                ZooKeeperSession* zookeeper) {
  if (config.primitive == Primitive::multilock) {
    return std::make_unique<MultiSide>(config, thread, clients.at(0));
  }
  return std::make_unique<RwSide>(
      make_rwlock(config, thread_options(config, thread), clients, pg, zookeeper), thread % 4 == 0);
}

void run_side_thread(Seat& seat, Side& side, HoldLogWriter& log, Counters& counters) {
  while (mono_ns() < seat.config.until_ns) {
    counters.attempts.fetch_add(1);
    bool held = false;
    try {
      held = side.take(acquire_bound(seat.config));
    } catch (const Error&) {
      counters.acquire_failed(std::current_exception());
      std::this_thread::sleep_for(milliseconds(5 + seat.rng() % 20));
      continue;
    }
    if (!held) {
      counters.contended.fetch_add(1);
      continue;
    }
    counters.acquired.fetch_add(1);
    HoldTrack track(
        log, seat.config.index, seat.index, ++seat.seq, [&side] { return side.validity(); },
        side.fence(), side.fields());
    read_sleep_write(seat, track, side.writes());
    track.observe();
    const std::int64_t t_rel = mono_ns();
    EndKind kind = EndKind::error;
    try {
      kind = side.give_back() ? EndKind::released : EndKind::lost;
    } catch (const std::exception& e) {
      counters.sample("release", e);
    }
    track.ended(kind, t_rel);
  }
}

// ---------------------------------------------------------------------------------------------
// Election

std::unique_ptr<Election> make_election(const WorkerConfig& config, int thread,
                                        const std::vector<Client>& clients, PgDatabase* pg,
                                        ZooKeeperSession* zookeeper) {
  (void)pg;
  (void)zookeeper;
  ElectionOptions options;
  options.ttl = milliseconds(config.ttl_ms);
  options.retry_delay = milliseconds(config.retry_delay_ms);
  options.backoff = milliseconds(10);
  options.max_unavailable = milliseconds(config.acquire_bound_ms);
  const std::string id = "p" + std::to_string(config.index) + "t" + std::to_string(thread);
#ifdef REDLOCK_TORTURE_POSTGRES
  if (pg != nullptr) return std::make_unique<postgres::Election>(*pg, kLockKey, id, options);
#endif
#ifdef REDLOCK_TORTURE_ZOOKEEPER
  if (config.mode == Mode::zookeeper) {
    return std::make_unique<zookeeper::Election>(*zookeeper, kLockKey, id, options);
  }
#endif
  if (config.mode == Mode::redlock)
    return std::make_unique<Election>(clients, kLockKey, id, options);
  return std::make_unique<Election>(clients.at(0), kLockKey, id, options);
}

// One term of an election's candidate: the hold records, one fenced read-sleep-write, and when
// the library stopped the worker (or it returned).
void run_term(Seat& seat, Election& election, StopToken stop, std::uint64_t term,
              HoldLogWriter& log, Counters& counters) {
  counters.acquired.fetch_add(1);
  auto t_stop = std::make_shared<std::atomic<std::int64_t>>(0);
  stop.on_stop([t_stop] { t_stop->store(mono_ns()); });
  // The term's validity as its candidate sees it (Election::validity(): the lease's, less the
  // drift allowance): the hold's deadline grows with each look, and ends when it turns false.
  // Not "a ttl from any look at is_leader()": a worker SIGSTOPped just after a look would then
  // seem to hold up to a ttl from it, past the lease the server kept (renewed up to a third of
  // a ttl before the look).
  std::int64_t t_unled = 0;
  const auto validity = [&] {
    if (!election.is_leader() && t_unled == 0) t_unled = mono_ns();
    return election.validity();
  };
  HoldTrack track(log, seat.config.index, seat.index, ++seat.seq, validity, term);
  read_sleep_write(seat, track, true, [&] {
    track.observe();  // samples is_leader() (sleep steps are <= 20 ms; long holds only)
    return stop.stop_requested();
  });
  track.observe();
  const std::int64_t stopped = t_stop->load();
  const bool lost = stopped != 0 && stopped < seat.config.until_ns;
  track.ended(lost ? EndKind::lost : EndKind::released, stopped != 0 ? stopped : mono_ns(),
              field("t_stop", stopped) + field("t_unled", t_unled));
}

void run_election_thread(Seat& seat, Election& election, HoldLogWriter& log, Counters& counters) {
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    while (!done.load() && mono_ns() < seat.config.until_ns) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    election.stop();
  });
  while (mono_ns() < seat.config.until_ns) {
    counters.attempts.fetch_add(1);
    try {
      election.run([&](StopToken stop, std::uint64_t term) {
        run_term(seat, election, stop, term, log, counters);
      });
    } catch (const Error&) {
      counters.acquire_failed(std::current_exception());
    }
  }
  done.store(true);
  stopper.join();
}

// ---------------------------------------------------------------------------------------------
// MultiLock's observer: one MGET of every key, so what it sees is one instant of the server.

void observe_sets(const WorkerConfig& config, HoldLogWriter& log, const std::atomic<bool>& done) {
  std::int64_t reads = 0;
  std::int64_t partial = 0;
  redisContext* c = nullptr;
  while (!done.load()) {
    std::this_thread::sleep_for(milliseconds(2));
    if (c == nullptr) {
      const timeval tv{0, 200'000};
      c = redisConnectWithTimeout("127.0.0.1", config.node_ports.at(0), tv);
      if (c == nullptr || c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK) {
        if (c != nullptr) redisFree(c);
        c = nullptr;
        continue;
      }
    }
    auto* r = static_cast<redisReply*>(redisCommand(c, "MGET %s %s %s %s", kMultiKeys[0],
                                                    kMultiKeys[1], kMultiKeys[2], kMultiKeys[3]));
    if (r == nullptr) {
      redisFree(c);
      c = nullptr;
      continue;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == kMultiKeyCount) {
      ++reads;
      std::map<std::string, int> masks;  // token -> the keys holding it
      for (int i = 0; i < kMultiKeyCount; ++i) {
        const redisReply* e = r->element[i];
        if (e->type == REDIS_REPLY_STRING) masks[std::string(e->str, e->len)] |= 1 << i;
      }
      // A MultiLock's token stands on 3 keys; 2 keys under one token are part of a set.
      for (const auto& [token, mask] : masks) {
        if (std::bitset<kMultiKeyCount>(static_cast<unsigned>(mask)).count() == 2) ++partial;
      }
    }
    freeReplyObject(r);
  }
  if (c != nullptr) redisFree(c);
  log.write_line("observe" + field("p", config.index) + field("reads", reads) +
                 field("partial", partial));
}

}  // namespace

void run_primitive_workers(const WorkerConfig& config, const std::vector<Client>& clients,
                           PgDatabase* pg, ZooKeeperSession* zookeeper, HoldLogWriter& log,
                           Counters& counters) {
  if (config.async) throw std::invalid_argument("worker: --async takes --primitive lock only");
  std::atomic<bool> done{false};
  std::thread observer;
  if (config.primitive == Primitive::multilock && config.mode == Mode::lock) {
    observer = std::thread([&] { observe_sets(config, log, done); });
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < config.threads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Seat seat(config, t, clients, pg, zookeeper);
        if (config.primitive == Primitive::election) {
          const auto election = make_election(config, t, clients, pg, zookeeper);
          run_election_thread(seat, *election, log, counters);
        } else {
          const auto side = make_side(config, t, clients, pg, zookeeper);
          run_side_thread(seat, *side, log, counters);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "redlock-torture worker %d thread %d: %s\n", config.index, t,
                     e.what());
        counters.fatal.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  done.store(true);
  if (observer.joinable()) observer.join();
}

}  // namespace redlock::torture
