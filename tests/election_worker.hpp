// tests/election_worker.hpp: what the [election] tests of every backend share: options with a
// given ttl, and a run() worker that records each term it was given and counts the times it was
// stopped (it returns only when its stop is requested).
#ifndef REDLOCK_TESTS_ELECTION_WORKER_HPP
#define REDLOCK_TESTS_ELECTION_WORKER_HPP

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <redlock/election.hpp>

namespace redlock::test {

// Default options but `ttl`, and a short back-off (run() campaigns again soon).
inline redlock::ElectionOptions with_ttl(std::chrono::milliseconds ttl) {
  redlock::ElectionOptions o;
  o.ttl = ttl;
  o.backoff = std::chrono::milliseconds(20);
  return o;
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
