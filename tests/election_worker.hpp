// tests/election_worker.hpp: what the [election] tests of every backend share: options with a
// given ttl, the hand-over check (two candidates and an observer), and a run() worker that
// records each term it was given and counts the times it was stopped (it returns only when its
// stop is requested).
#ifndef REDLOCK_TESTS_ELECTION_WORKER_HPP
#define REDLOCK_TESTS_ELECTION_WORKER_HPP

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <redlock/election.hpp>

#include "support/eventually.hpp"

namespace redlock::test {

// Default options but `ttl`, and a short back-off (run() campaigns again soon).
inline redlock::ElectionOptions with_ttl(std::chrono::milliseconds ttl) {
  redlock::ElectionOptions o;
  o.ttl = ttl;
  o.backoff = std::chrono::milliseconds(20);
  return o;
}

// Candidates `a` and `b` and a non-candidate `watcher` of one election, nobody leading: `a`
// leads (leader() and observe() say so), `b` cannot; `b` waits, `a` resigns, and `b` leads
// promptly (well inside any ttl or session timeout) with a higher term; `b` resigns: no leader.
inline void check_hand_over(redlock::Election& a, redlock::Election& b,
                            redlock::Election& watcher) {
  using namespace std::chrono_literals;
  struct Seen {  // shared with the callback, which the watcher may call after this returns
    std::mutex mutex;
    std::optional<redlock::Leader> last;
  };
  const auto seen = std::make_shared<Seen>();
  const auto last = [seen] {
    std::lock_guard<std::mutex> guard(seen->mutex);
    return seen->last;
  };
  watcher.observe([seen](const std::optional<redlock::Leader>& leader) {
    std::lock_guard<std::mutex> guard(seen->mutex);
    seen->last = leader;
  });
  CHECK_FALSE(watcher.leader());
  const std::uint64_t first = a.campaign();
  CHECK(a.is_leader());
  CHECK(a.term() == first);
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->id == a.id());
  CHECK(watcher.leader()->term == first);
  CHECK(eventually([&] { return last() && last()->id == a.id(); }));
  CHECK_FALSE(b.try_campaign_for(100ms));

  std::optional<std::uint64_t> second;
  std::thread waiting([&] { second = b.try_campaign_for(30s); });
  std::this_thread::sleep_for(200ms);
  const auto resigned = std::chrono::steady_clock::now();
  CHECK(a.resign());
  waiting.join();  // the thread that campaigned has exited: leadership is not the thread's
  CHECK(std::chrono::steady_clock::now() - resigned < 5s);
  REQUIRE(second);
  CHECK(*second > first);
  CHECK_FALSE(a.is_leader());
  CHECK(b.is_leader());
  REQUIRE(watcher.leader());
  CHECK(watcher.leader()->id == b.id());
  CHECK(eventually([&] { return last() && last()->id == b.id() && last()->term == *second; }));
  CHECK(b.resign());
  CHECK_FALSE(watcher.leader());
  CHECK(eventually([&] { return !last(); }));
}

// Runs `election.run()` on a thread of its own until stop_and_join().
class RecordingWorker {
 public:
  explicit RecordingWorker(redlock::Election& election)
      : election_(election), service_([this] {
          election_.run([this](redlock::StopToken stop, std::uint64_t term) {
            {
              std::lock_guard<std::mutex> guard(mutex_);
              terms_.push_back(term);
            }
            while (!stop.wait_for(std::chrono::seconds(1))) {
            }
            ++stopped_;
          });
        }) {}
  ~RecordingWorker() { stop_and_join(); }

  void stop_and_join() {
    election_.stop();
    if (service_.joinable()) service_.join();
  }
  // The terms the worker was started with, in order.
  std::vector<std::uint64_t> terms() const {
    std::lock_guard<std::mutex> guard(mutex_);
    return terms_;
  }
  std::size_t started() const { return terms().size(); }
  int stopped() const { return stopped_.load(); }

 private:
  redlock::Election& election_;
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> terms_;
  std::atomic<int> stopped_{0};
  std::thread service_;  // last: started once the rest is built
};

}  // namespace redlock::test

#endif  // REDLOCK_TESTS_ELECTION_WORKER_HPP
