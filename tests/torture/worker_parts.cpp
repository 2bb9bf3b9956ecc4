// tests/torture/worker_parts.cpp: see worker_parts.hpp.
#include "worker_parts.hpp"

#include <sys/time.h>  // timeval

#include <algorithm>  // std::min, std::max
#include <cstdio>     // std::fprintf
#include <stdexcept>  // std::invalid_argument
#include <utility>    // std::move

#include "common.hpp"  // kLockKey, the checker store's keys and scripts, mono_ns

namespace redlock::torture {

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

timeval to_timeval(milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

}  // namespace

std::string field(const char* key, std::int64_t value) {
  return std::string(" ") + key + "=" + std::to_string(value);
}

// ---------------------------------------------------------------------------------------------
// The checker store

std::optional<Store::Values> Store::read(std::uint64_t fence) {
  const std::string f = std::to_string(fence);
  ReplyPtr r = run({"EVAL", kFencedReadLua, "3", kCounterKey, kShadowKey, kMaxSeenKey, f});
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
    return std::nullopt;
  }
  return Values{r->element[0]->integer, r->element[1]->integer};
}

WriteResult Store::write(std::uint64_t fence, std::int64_t value, std::int64_t shadow) {
  ReplyPtr r =
      run({"EVAL", kFencedWriteLua, "5", kCounterKey, kShadowKey, kLastAppliedKey, kMaxSeenKey,
           kAppliedListKey, std::to_string(fence), std::to_string(value), std::to_string(shadow)});
  if (!r || r->type != REDIS_REPLY_INTEGER) return WriteResult::write_error;
  return r->integer == 1 ? WriteResult::applied : WriteResult::rejected;
}

Store::ReplyPtr Store::run(const std::vector<std::string>& argv) {
  if (!context_) {
    context_.reset(redisConnectWithTimeout("127.0.0.1", port_, to_timeval(milliseconds(1000))));
    if (!context_ || context_->err != 0 ||
        redisSetTimeout(context_.get(), to_timeval(milliseconds(3000))) != REDIS_OK) {
      context_.reset();
      return nullptr;
    }
  }
  std::vector<const char*> ptrs;
  std::vector<std::size_t> lens;
  for (const std::string& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  ReplyPtr reply(static_cast<redisReply*>(
      redisCommandArgv(context_.get(), static_cast<int>(argv.size()), ptrs.data(), lens.data())));
  if (!reply) context_.reset();  // a context that reported an error is dead
  if (reply && reply->type == REDIS_REPLY_ERROR) {
    std::fprintf(stderr, "redlock-torture worker: checker store error: %.*s\n",
                 static_cast<int>(reply->len), reply->str);
    return nullptr;
  }
  return reply;
}

// ---------------------------------------------------------------------------------------------
// Counters

void Counters::sample(const std::string& kind, const std::exception& e) {
  std::lock_guard<std::mutex> guard(mutex);
  const std::string key = kind + ": " + e.what();
  auto it = samples.find(key);
  if (it != samples.end()) {
    ++it->second;
  } else if (samples.size() < 12) {
    samples.emplace(key, 1);
  }
}

void Counters::acquire_failed(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    err_timeout.fetch_add(1);
    sample("acquire", e);
  } catch (const ConnectionError& e) {
    err_connection.fetch_add(1);
    sample("acquire", e);
  } catch (const ServerError& e) {
    err_server.fetch_add(1);
    sample("acquire", e);
  } catch (const ProtocolError& e) {
    err_protocol.fetch_add(1);
    sample("acquire", e);
  } catch (const Error& e) {
    err_other.fetch_add(1);
    sample("acquire", e);
  }
}

// ---------------------------------------------------------------------------------------------
// The lock

LockOptions thread_options(const WorkerConfig& config, int thread) {
  LockOptions options;
  options.ttl = milliseconds(config.ttl_ms);
  options.retry_delay = milliseconds(config.retry_delay_ms);
  // wake_on_release: 1 = every thread, 0 = none, 2 = even-numbered threads only.
  options.wake_on_release =
      config.wake_on_release == 1 || (config.wake_on_release == 2 && thread % 2 == 0);
  options.fencing = true;
  options.auto_renew = config.auto_renew;
  if (config.fair != 0) options.fair = config.fair > 0;  // 0: the lock's default
  return options;
}

ModeLock::ModeLock(const WorkerConfig& config, int thread, const std::vector<Client>& clients,
                   PgDatabase* pg, ZooKeeperSession* zookeeper) {
  const LockOptions options = thread_options(config, thread);
  if (pg != nullptr) {
    lock_ = &pg_.emplace(*pg, kLockKey, options);
  } else if (config.mode == Mode::zookeeper) {
#ifdef REDLOCK_TORTURE_ZOOKEEPER
    lock_ = &zk_.emplace(*zookeeper, kLockKey, options);
#else
    (void)zookeeper;
    throw std::invalid_argument("built without the ZooKeeper component");
#endif
  } else if (config.mode != Mode::redlock) {
    lock_ = &single_.emplace(clients.at(0), kLockKey, options);
  } else {
    lock_ = &quorum_.emplace(clients, kLockKey, options);
  }
}

// ---------------------------------------------------------------------------------------------
// Records, sleeps, bounds

HoldTrack::HoldTrack(HoldLogWriter& log, int p, int t, std::int64_t n,
                     std::function<milliseconds()> validity, std::uint64_t fence,
                     const std::string& extra)
    : log_(log), p_(p), t_(t), n_(n), validity_(std::move(validity)), fence_(fence) {
  const std::int64_t t_acq = mono_ns();
  validity_ms_ = validity_().count();
  observed_ = t_acq + validity_ms_ * 1'000'000;
  log_.write_line(prefix("acq") + " fence=" + std::to_string(fence_) + field("t_acq", t_acq) +
                  field("deadline", observed_) + field("validity_ms", validity_ms_) + extra);
}

void HoldTrack::observe() {
  const std::int64_t t = mono_ns();
  const std::int64_t v = validity_().count();
  if (v > 0) observed_ = std::max(observed_, t + v * 1'000'000);
}

void HoldTrack::read_failed(std::int64_t t_read) {
  log_.write_line(prefix("write") + " result=read_error" + field("t_read", t_read));
}

void HoldTrack::written(WriteResult result, std::int64_t t_read, std::int64_t value) {
  const std::int64_t t_write_end = mono_ns();
  log_.write_line(prefix("write") + " result=" + to_string(result) + field("t_read", t_read) +
                  field("t_write_end", t_write_end) + field("value", value));
}

void HoldTrack::ended(EndKind kind, std::int64_t t_rel, const std::string& extra) {
  const std::int64_t t_rel_end = mono_ns();
  log_.write_line(prefix("end") + " kind=" + to_string(kind) + field("t_rel", t_rel) +
                  field("t_rel_end", t_rel_end) + field("deadline", observed_) + extra);
}

std::string HoldTrack::prefix(const char* event) const {
  return event + field("p", p_) + field("t", t_) + field("n", n_);
}

HoldSleep plan_sleep(std::mt19937_64& rng, const WorkerConfig& config, std::int64_t validity_ms) {
  std::uniform_int_distribution<int> percent(0, 99);
  if (percent(rng) >= config.long_hold_percent) {
    return {false, std::chrono::microseconds(std::uniform_int_distribution<int>(0, 5000)(rng))};
  }
  const std::int64_t cap_ms =
      config.auto_renew ? 2LL * config.ttl_ms : std::max<std::int64_t>(0, validity_ms * 9 / 10);
  return {true, std::chrono::microseconds(
                    std::uniform_int_distribution<std::int64_t>(0, cap_ms * 1000)(rng))};
}

std::optional<nanoseconds> HoldSleep::next(HoldTrack& track) {
  const bool first = until_ns < 0;
  if (first) until_ns = mono_ns() + total.count();
  if (!long_hold) return first ? std::optional<nanoseconds>(total) : std::nullopt;
  track.observe();
  const std::int64_t left = until_ns - mono_ns();
  if (left <= 0) return std::nullopt;
  return std::min(nanoseconds(left), nanoseconds(20'000'000));
}

Seat::Seat(const WorkerConfig& config, int index, const std::vector<Client>& clients,
           PgDatabase* pg, ZooKeeperSession* zookeeper)
    : config(config),
      index(index),
      store(config.store_port),
      rng(config.seed * 1'000'003ULL + static_cast<std::uint64_t>(config.index) * 1'009ULL +
          static_cast<std::uint64_t>(index)) {
  if (config.primitive == Primitive::lock) lock.emplace(config, index, clients, pg, zookeeper);
}

// The fenced read-sleep-write of one hold (a lock's, a writer's, a term's), or only the sleep.
// `stopped` ends a long sleep early (an election's stop).
void read_sleep_write(Seat& seat, HoldTrack& track, bool write,
                      const std::function<bool()>& stopped) {
  const std::int64_t t_read = mono_ns();
  std::optional<Store::Values> read;
  if (write) {
    read = seat.store.read(track.fence());
    if (!read) {
      track.read_failed(t_read);
      return;
    }
  }
  HoldSleep sleep = plan_sleep(seat.rng, seat.config, track.validity_ms());
  while (const auto step = sleep.next(track)) {
    if (stopped()) return;
    std::this_thread::sleep_for(*step);
  }
  if (write && !stopped()) {
    const std::int64_t value = read->counter + 1;
    track.written(seat.store.write(track.fence(), value, read->shadow + 1), t_read, value);
  }
}

nanoseconds acquire_bound(const WorkerConfig& config) {
  const std::int64_t left = config.until_ns - mono_ns();
  return nanoseconds(std::max<std::int64_t>(
      1'000'000, std::min<std::int64_t>(left, config.acquire_bound_ms * 1'000'000LL)));
}

}  // namespace redlock::torture
