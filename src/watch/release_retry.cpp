// src/watch/release_retry.cpp: the background release retry (see release_retry.hpp).
#include "watch/release_retry.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "util/log_internal.hpp"
#include "util/token.hpp"

namespace redlock {
namespace detail {
namespace {

using namespace std::chrono_literals;

constexpr auto kFirstRetry = 50ms;  // after the failure: a failover's new master is up by then
constexpr auto kPace = 100ms;       // between rounds, jittered

std::size_t count_owed(const std::vector<char>& owed) {
  return static_cast<std::size_t>(std::count(owed.begin(), owed.end(), char{1}));
}

}  // namespace

struct ReleaseRetries::State {
  struct Retry {
    std::shared_ptr<LeaseBackend> backend;
    std::string token;
    std::vector<char> owed;
    SteadyClock::time_point until;
    SteadyClock::time_point next;
    std::uint64_t rounds{0};
  };
  // One thread per lane, running while the lane has retries; an idle lane's thread ends and is
  // joined by the next add() or by stop().
  struct Lane {
    std::uintptr_t key{0};
    std::vector<Retry> retries;
    std::thread thread;
    bool running{false};
  };

  std::mutex mutex;
  std::condition_variable wake;
  bool stop{false};
  std::vector<std::shared_ptr<Lane>> lanes;  // a lane's thread holds its own reference
  Counts counts;

  void run(Lane& lane) noexcept;
  // One round of `retry` (mutex not held): leaves in it the nodes it still owes.
  static void round(Retry& retry) noexcept;
  // After a round (mutex held): requeues `retry` (returns true) or ends it (false).
  bool settle(Lane& lane, Retry& retry, SteadyClock::time_point now);
};

void ReleaseRetries::State::round(Retry& retry) noexcept {
  try {
    ReleaseResult result = retry.backend->retry_release(retry.token, retry.owed);
    retry.owed = std::move(result.owed);  // empty: every owed node answered
  } catch (const std::exception& e) {     // bad_alloc: try again next round
    logf(LogLevel::debug, "redlock: a release retry of {} failed ({})", retry.backend->key(),
         e.what());
  } catch (...) {
  }
  ++retry.rounds;
}

bool ReleaseRetries::State::settle(Lane& lane, Retry& retry, SteadyClock::time_point now) {
  ++counts.rounds;
  const std::size_t owed = count_owed(retry.owed);
  if (owed == 0) {
    ++counts.completed;
    logf(LogLevel::info, "redlock: released {} in the background ({} retries)",
         retry.backend->key(), retry.rounds);
    return false;
  }
  retry.next = now + jittered(kPace);
  if (retry.next >= retry.until) {
    logf(LogLevel::info,
         "redlock: the release of {} still did not reach {} node(s) when its lease ended; the "
         "key expires by its ttl",
         retry.backend->key(), owed);
    return false;
  }
  lane.retries.push_back(std::move(retry));
  return true;
}

void ReleaseRetries::State::run(Lane& lane) noexcept {
  std::unique_lock<std::mutex> lock(mutex);
  while (!stop && !lane.retries.empty()) {
    const auto first =
        std::min_element(lane.retries.begin(), lane.retries.end(),
                         [](const Retry& a, const Retry& b) { return a.next < b.next; });
    const auto now = SteadyClock::now();
    if (first->next > now) {
      // A copy: the wait lets go of the mutex, and an add() may move every retry meanwhile.
      const SteadyClock::time_point until = first->next;
      wake.wait_until(lock, until);
      continue;
    }
    Retry retry = std::move(*first);
    lane.retries.erase(first);
    lock.unlock();
    round(retry);
    lock.lock();
    if (settle(lane, retry, SteadyClock::now())) continue;  // requeued
    // Ended: its backend (maybe the last reference) is let go outside the lock.
    lock.unlock();
    retry = Retry{};
    lock.lock();
  }
  lane.running = false;
}

ReleaseRetries::ReleaseRetries() : state_(std::make_shared<State>()) {}

ReleaseRetries::~ReleaseRetries() { stop(); }

void ReleaseRetries::add(std::shared_ptr<LeaseBackend> backend, std::string token,
                         std::vector<char> owed, SteadyClock::time_point until) noexcept {
  const std::size_t nodes = count_owed(owed);
  if (!backend || nodes == 0) return;
  const std::string key = backend->key();
  try {
    std::lock_guard<std::mutex> guard(state_->mutex);
    if (state_->stop) return;
    auto& lanes = state_->lanes;
    for (auto it = lanes.begin(); it != lanes.end();) {  // join the threads that ended
      if ((*it)->running) {
        ++it;
        continue;
      }
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = lanes.erase(it);
    }
    const std::uintptr_t lane_key = backend->renewal_lane();
    auto lane =
        std::find_if(lanes.begin(), lanes.end(), [&](const auto& l) { return l->key == lane_key; });
    if (lane == lanes.end()) {
      lanes.push_back(std::make_shared<State::Lane>());
      lanes.back()->key = lane_key;
      lane = std::prev(lanes.end());
    }
    const std::shared_ptr<State::Lane> l = *lane;
    const auto now = SteadyClock::now();
    l->retries.push_back(State::Retry{std::move(backend), std::move(token), std::move(owed), until,
                                      now + kFirstRetry, 0});
    ++state_->counts.started;
    if (!l->running) {
      l->thread = std::thread([state = state_, l] { state->run(*l); });
      l->running = true;
    }
    state_->wake.notify_all();
    logf(LogLevel::info,
         "redlock: the release of {} did not reach {} node(s); retrying it there in the "
         "background for up to {} ms (until its lease would end)",
         key, nodes, std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count());
  } catch (const std::exception& e) {
    logf(LogLevel::warn, "redlock: could not retry the release of {} ({}); it expires by its ttl",
         key, e.what());
  }
}

void ReleaseRetries::stop() noexcept {
  std::vector<std::shared_ptr<State::Lane>> lanes;
  {
    std::lock_guard<std::mutex> guard(state_->mutex);
    state_->stop = true;
    lanes.swap(state_->lanes);
  }
  state_->wake.notify_all();
  for (const auto& lane : lanes) {
    if (!lane->thread.joinable()) continue;
    if (lane->thread.get_id() == std::this_thread::get_id()) {
      lane->thread.detach();
    } else {
      lane->thread.join();
    }
  }
}

ReleaseRetries::Counts ReleaseRetries::counts() const {
  std::lock_guard<std::mutex> guard(state_->mutex);
  return state_->counts;
}

void ReleaseRetries::reset_counts() {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->counts = Counts{};
}

}  // namespace detail
}  // namespace redlock
