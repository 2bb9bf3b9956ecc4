// DueQueue (src/watch/due_queue.hpp), the watchdog's queue of due renewals, against a sorted
// reference; and Doorbell (src/util/doorbell.hpp), the renewal thread's sleep.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "util/doorbell.hpp"
#include "watch/due_queue.hpp"

using redlock::detail::Doorbell;
using redlock::detail::DueQueue;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::vector<std::size_t> slots_of(std::vector<DueQueue::Due> v) {
  std::vector<std::size_t> out;
  for (const auto& d : v) out.push_back(d.slot);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("DueQueue takes exactly the records due by the limit, from the wheel and beyond it",
          "[unit][watchdog]") {
  DueQueue q;
  CHECK(q.empty());
  CHECK(q.next() == Clock::time_point::max());
  const auto t0 = Clock::now();
  q.push({t0 + milliseconds(10), 1});
  q.push({t0 + milliseconds(3), 2});
  q.push({t0 + std::chrono::seconds(60), 3});  // beyond the wheel's horizon
  q.push({t0 + milliseconds(10), 4});
  CHECK(q.next() == t0 + milliseconds(3));
  std::vector<DueQueue::Due> out;
  q.take_until(t0 + milliseconds(2), out);
  CHECK(out.empty());
  q.take_until(t0 + milliseconds(9), out);
  CHECK(slots_of(out) == std::vector<std::size_t>{2});
  CHECK(q.next() == t0 + milliseconds(10));
  // A record already due when pushed (behind the cursor) is still taken, and first.
  q.push({t0 + milliseconds(1), 5});
  CHECK(q.next() == t0 + milliseconds(1));
  out.clear();
  q.take_until(t0 + milliseconds(10), out);
  CHECK(slots_of(out) == std::vector<std::size_t>{1, 4, 5});
  CHECK(q.next() == t0 + std::chrono::seconds(60));
  out.clear();
  q.take_until(t0 + std::chrono::seconds(59), out);
  CHECK(out.empty());
  q.take_until(t0 + std::chrono::seconds(60), out);
  CHECK(slots_of(out) == std::vector<std::size_t>{3});
  CHECK(q.empty());
}

TEST_CASE("DueQueue agrees with a sorted reference under random pushes and takes",
          "[unit][watchdog]") {
  std::mt19937_64 rng(12345);
  DueQueue q;
  std::vector<DueQueue::Due> reference;
  auto now = Clock::now();
  std::size_t next_slot = 0;
  for (int step = 0; step < 20000; ++step) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 6) {
      // Mostly within a few seconds, some far (beyond the horizon), some already due.
      const auto spread = what == 0   ? std::chrono::milliseconds(40'000)
                          : what == 1 ? std::chrono::milliseconds(-50)
                                      : std::chrono::milliseconds(3'000);
      const auto offset = std::chrono::microseconds(
          static_cast<std::int64_t>(
              rng() % static_cast<std::uint64_t>(std::abs(spread.count()) * 1000 + 1)) *
          (spread.count() < 0 ? -1 : 1));
      const DueQueue::Due due{now + offset, next_slot++};
      q.push(due);
      reference.push_back(due);
    } else {
      now += std::chrono::microseconds(rng() % 5'000);  // time moves on
      const auto limit = now + milliseconds(2);
      std::vector<DueQueue::Due> taken;
      q.take_until(limit, taken);
      std::vector<DueQueue::Due> expected;
      std::vector<DueQueue::Due> kept;
      for (const auto& d : reference) (d.when <= limit ? expected : kept).push_back(d);
      reference = kept;
      REQUIRE(slots_of(taken) == slots_of(expected));
    }
    auto earliest = Clock::time_point::max();
    for (const auto& d : reference) earliest = std::min(earliest, d.when);
    REQUIRE(q.next() == earliest);
    REQUIRE(q.empty() == reference.empty());
  }
}

TEST_CASE("Doorbell: a sleep ends at its deadline, at a ring, or at once after an earlier ring",
          "[unit][watchdog]") {
  Doorbell bell;
  // Deadline.
  auto start = Clock::now();
  bell.sleep(bell.ticket(), start + milliseconds(30));
  CHECK(Clock::now() - start >= milliseconds(29));
  // A ring after the ticket was taken: the sleep does not start.
  const auto ticket = bell.ticket();
  bell.ring();
  start = Clock::now();
  bell.sleep(ticket, start + std::chrono::seconds(30));
  CHECK(Clock::now() - start < std::chrono::seconds(10));
  // A ring from another thread ends a sleep without deadline.
  std::atomic<bool> woke{false};
  const auto mine = bell.ticket();  // taken before the ring, whenever the thread starts
  std::thread sleeper([&] {
    while (!woke.load()) {
      bell.sleep(mine, Clock::time_point::max());
      woke = bell.ticket() != mine;
    }
  });
  std::this_thread::sleep_for(milliseconds(20));
  bell.ring();
  sleeper.join();
  CHECK(woke.load());
}
