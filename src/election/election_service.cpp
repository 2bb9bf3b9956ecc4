// src/election/election_service.cpp: the two loops of an Election: run() (campaign, the worker
// while leading, resign, back off) and the observers' thread (read the board, tell the
// callbacks of a change, sleep until a notice or the leader's expiry).
#include <stdexcept>
#include <thread>
#include <utility>

#include <redlock/errors.hpp>

#include "election/election_core.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {

void ElectionCore::run(const std::function<void(StopToken, std::uint64_t)>& worker) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (running_) throw std::logic_error("redlock: Election::run: already running for " + name_);
    running_ = true;
  }
  struct Running {
    ElectionCore& core;
    ~Running() {
      std::lock_guard<std::mutex> guard(core.mutex_);
      core.running_ = false;
    }
  } running{*this};
  while (const std::optional<std::uint64_t> term = campaign_in_run()) {
    std::shared_ptr<StopState> stop;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (term_.fence == *term) stop = term_.stop;
    }
    if (!stop) continue;  // already ended (lost, resigned) before it could start
    try {
      run_term(worker, stop, *term);
    } catch (...) {
      resign();
      throw;
    }
    resign();
    back_off();
  }
}

// The worker of one term. On a board that may be suspended (ZooKeeper), a thread of this term
// watches the session's events meanwhile and stops the worker when the session is suspended.
void ElectionCore::run_term(const std::function<void(StopToken, std::uint64_t)>& worker,
                            const std::shared_ptr<StopState>& stop, std::uint64_t term) {
  if (!board_->may_suspend()) return worker(StopToken(stop), term);
  const std::shared_ptr<ReleaseWatch> watch = board_->watch(SteadyClock::time_point::max());
  StopToken(stop).on_stop([watch] { watch->wake(); });
  std::thread guard([this, watch, stop] {
    while (!StopToken(stop).stop_requested()) {
      if (board_->suspended()) {
        logf(LogLevel::warn, "redlock: the leader of {} is suspended (disconnected); stepping down",
             name_);
        stop->request();
        return;
      }
      watch->wait_until(SteadyClock::now() + std::chrono::seconds(1));
    }
  });
  struct Join {
    std::thread& thread;
    const std::shared_ptr<StopState>& stop;
    ~Join() {
      stop->request();
      thread.join();
    }
  } join{guard, stop};
  worker(StopToken(stop), term);
}

// campaign() until leading or stop(); a failure (servers unreachable past max_unavailable) is
// logged and retried after the back-off.
std::optional<std::uint64_t> ElectionCore::campaign_in_run() {
  for (;;) {
    try {
      return campaign(SteadyClock::time_point::max());
    } catch (const CancelledError&) {
      return std::nullopt;  // stop()
    } catch (const Error& e) {
      logf(LogLevel::warn, "redlock: campaign for {} failed ({}); trying again", name_, e.what());
    }
    back_off();
  }
}

void ElectionCore::back_off() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopped_cv_.wait_for(lock, options_.backoff, [&] { return stopped_; });
}

void ElectionCore::observe(std::function<void(const std::optional<Leader>&)> callback) {
  std::lock_guard<std::mutex> guard(mutex_);
  callbacks_.push_back(std::move(callback));
  if (!observer_.joinable() && !closing_) observer_ = std::thread([this] { observe_loop(); });
  if (observe_watch_) observe_watch_->wake();  // a new callback hears the leader at once
}

// Calls every callback told of an older leader than `seen` (all of them on a change, new ones
// otherwise), in order, outside the mutex.
void ElectionCore::tell(const std::optional<Leader>& seen, std::optional<Leader>& last,
                        std::size_t& told, bool& known) {
  if (known && seen != last) told = 0;
  known = true;
  last = seen;
  std::vector<std::function<void(const std::optional<Leader>&)>> callbacks;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    callbacks.assign(callbacks_.begin() + static_cast<std::ptrdiff_t>(told), callbacks_.end());
    told = callbacks_.size();
  }
  for (auto& callback : callbacks) {
    try {
      callback(seen);
    } catch (const std::exception& e) {
      logf(LogLevel::warn, "redlock: an Election observer of {} threw: {}", name_, e.what());
    } catch (...) {
      logf(LogLevel::warn, "redlock: an Election observer of {} threw", name_);
    }
  }
}

// Subscribed before each read, so that a notice between the read and the wait is not missed.
// A known leader is read again when its lease would expire (an expiry publishes nothing).
void ElectionCore::observe_loop() {
  std::optional<Leader> last;
  std::size_t told = 0;
  bool known = false;
  ReleaseWatch* watch = nullptr;
  for (;;) {
    auto pause = std::chrono::milliseconds(options_.ttl);
    try {
      if (!watch) {
        auto made = board_->watch(SteadyClock::now() + options_.ttl);
        std::lock_guard<std::mutex> guard(mutex_);
        observe_watch_ = std::move(made);
        watch = observe_watch_.get();
      }
      const Sighting seen = board_->read(Look::watch);
      if (seen.leader && seen.expires_in.count() >= 0) {
        pause = seen.expires_in + std::chrono::milliseconds(1);
      }
      tell(seen.leader, last, told, known);
    } catch (const std::exception& e) {
      logf(LogLevel::warn, "redlock: observing the leader of {} failed ({}); trying again", name_,
           e.what());
      pause = options_.retry_delay * 10;
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (closing_) return;
      if (!watch) {
        stopped_cv_.wait_for(lock, pause, [&] { return closing_; });
        continue;
      }
    }
    watch->wait_until(SteadyClock::now() + pause);
  }
}

}  // namespace detail
}  // namespace redlock
