// ReadWriteLock on one instance: readers share and a writer excludes (an interval checker over
// threads), the std guards, writer preference counted (no reader enters while a writer waits),
// a crashed reader's lease ends by its own ttl while another reader renews, wake-ups (writer ->
// readers, last reader -> writer, the missed-wake-up race), downgrade, fencing, bad input.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "rw_test_support.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of the lock's helper keys

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::key;
using redlock::test::RedisServer;
using Clock = std::chrono::steady_clock;

using namespace redlock::test::rw;

TEST_CASE("ReadWriteLock rejects bad arguments, naming them", "[rwlock][unit]") {
  redlock::Client client("redis://127.0.0.1:1");
  CHECK_THROWS_WITH(redlock::ReadWriteLock(client, ""), Catch::Contains("key"));
  auto fair = fast();
  fair.fair = true;
  CHECK_THROWS_WITH(redlock::ReadWriteLock(client, "k", fair), Catch::Contains("fair"));
  auto no_ttl = fast();
  no_ttl.ttl = 0ms;
  CHECK_THROWS_WITH(redlock::ReadWriteLock(client, "k", no_ttl), Catch::Contains("ttl"));
  redlock::ReadWriteLock fine(client, "k");
  CHECK(fine.key() == "k");
  CHECK_THROWS_AS(fine.downgrade(), std::logic_error);  // not held
}

TEST_CASE("ReadWriteLock: readers share, a writer excludes everyone, the std guards work",
          "[redis][rwlock]") {
  Setup setup("rw-basic");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  redlock::ReadWriteLock r1(client, k, fast());
  redlock::ReadWriteLock r2(client, k, fast());
  redlock::ReadWriteLock w(client, k, fast());
  REQUIRE(r1.try_lock_shared());
  REQUIRE(r2.try_lock_shared());
  CHECK(readers_of(server, k) == 2);
  CHECK_FALSE(w.try_lock());
  r1.unlock_shared();
  CHECK_FALSE(w.try_lock());
  CHECK(r2.release_shared());
  CHECK(readers_of(server, k) == 0);
  REQUIRE(w.try_lock());
  CHECK_FALSE(r1.try_lock_shared());
  w.unlock();
  {
    std::shared_lock<redlock::ReadWriteLock> read(r1);
    CHECK(r1.owns_shared());
    CHECK(r1.validity_shared() > 0ms);
  }
  {
    std::unique_lock<redlock::ReadWriteLock> write(w, 2s);  // try_lock_for
    CHECK(write.owns_lock());
    CHECK(w.validity() > 0ms);
  }
  CHECK(server.raw({"EXISTS", k, helper_key(k, ":readers")}).integer() == 0);
}

TEST_CASE("ReadWriteLock intervals: writers never overlap anyone, readers overlap each other",
          "[redis][rwlock]") {
  Setup setup("rw-intervals");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  std::atomic<int> readers_in{0};
  std::atomic<int> writers_in{0};
  std::atomic<int> most_readers{0};
  std::atomic<int> violations{0};
  std::atomic<int> writes{0};
  std::atomic<bool> stop{false};
  auto reader = [&] {
    redlock::ReadWriteLock rw(client, k, fast());
    while (!stop) {
      std::shared_lock<redlock::ReadWriteLock> read(rw);
      const int now = ++readers_in;
      if (writers_in != 0) ++violations;
      int seen = most_readers;
      while (now > seen && !most_readers.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(3ms);
      --readers_in;
    }
  };
  auto writer = [&] {
    redlock::ReadWriteLock rw(client, k, fast());
    while (!stop) {
      std::unique_lock<redlock::ReadWriteLock> write(rw);
      if (++writers_in != 1 || readers_in != 0) ++violations;
      ++writes;
      std::this_thread::sleep_for(2ms);
      --writers_in;
      write.unlock();
      std::this_thread::sleep_for(10ms);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(reader);
  threads.emplace_back(writer);
  threads.emplace_back(writer);
  const auto end = Clock::now() + 20s;
  std::this_thread::sleep_for(2s);
  while ((writes < 10 || most_readers < 2) && Clock::now() < end) std::this_thread::sleep_for(50ms);
  stop = true;
  for (auto& t : threads) t.join();
  CHECK(violations == 0);
  CHECK(most_readers >= 2);  // real sharing, not a disguised mutex
  CHECK(writes >= 10);       // writers got in among continuous readers
}

TEST_CASE("Writer preference: while a writer waits no new reader enters, and the writer gets in",
          "[redis][rwlock]") {
  Setup setup("rw-prefer");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  constexpr int kReaders = 8;
  std::atomic<long> entries{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      redlock::Client own(server.endpoint());
      redlock::ReadWriteLock rw(own, k, fast());
      while (!stop) {
        if (!rw.try_lock_shared_for(200ms)) continue;
        ++entries;
        std::this_thread::sleep_for(5ms);
        rw.unlock_shared();
      }
    });
  }
  redlock::ReadWriteLock w(client, k, fast());
  const std::string marker = helper_key(k, ":writer-waiting");
  int marked = 0;
  for (int round = 0; round < 3; ++round) {
    while (entries < 20 * (round + 1)) std::this_thread::sleep_for(5ms);  // readers stream in
    std::atomic<long> at_hold{-1};
    std::thread writer([&] {
      w.lock();
      at_hold = entries.load();
      std::this_thread::sleep_for(20ms);
      w.unlock();
    });
    long at_mark = -1;
    const auto end = Clock::now() + 20s;
    while (at_hold < 0 && Clock::now() < end) {
      if (at_mark < 0 && server.raw({"EXISTS", marker}).integer() == 1) at_mark = entries;
      std::this_thread::sleep_for(1ms);
    }
    writer.join();
    INFO("round " << round << ": entries when the marker was seen " << at_mark
                  << ", when the writer held " << at_hold);
    REQUIRE(at_hold >= 0);
    // A reader whose script ran just before the marker may count itself just after: at most one
    // per reader. Without preference the readers keep entering (hundreds in this time).
    if (at_mark >= 0) CHECK(at_hold - at_mark <= kReaders);
    marked += at_mark >= 0 ? 1 : 0;
  }
  CHECK(marked > 0);  // the writer did wait behind readers
  stop = true;
  for (auto& t : readers) t.join();
}

TEST_CASE("A reader killed with SIGKILL loses its lease after its own ttl while another renews",
          "[redis][rwlock][fault]") {
  Setup setup("rw-crash");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  const pid_t child = fork_holder([&](auto&& wait_killed) {
    redlock::Client own(server.endpoint());
    auto o = fast(1500ms);
    o.auto_renew = true;
    o.watchdog = std::make_shared<redlock::Watchdog>();  // the parent's has no threads here
    redlock::ReadWriteLock rw(own, k, o);
    rw.lock_shared();
    wait_killed();
  });
  REQUIRE(child > 0);
  auto renewed = fast(1500ms);
  renewed.auto_renew = true;
  redlock::ReadWriteLock alive(client, k, renewed);
  REQUIRE(alive.try_lock_shared());
  redlock::ReadWriteLock w(client, k, fast());
  CHECK_FALSE(w.try_lock_for(2500ms));  // both readers renewed past their ttl
  CHECK(readers_of(server, k) == 2);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  const auto killed = Clock::now();
  // The live reader's renewals purge the ended entry: the crashed one goes after its own ttl.
  while (readers_of(server, k) != 1 && Clock::now() - killed < 10s) {
    std::this_thread::sleep_for(20ms);
  }
  CHECK(readers_of(server, k) == 1);
  CHECK(Clock::now() - killed < 5s);
  CHECK(alive.owns_shared());
  auto writer = std::async(std::launch::async, [&] {
    const bool held = w.try_lock_for(20s);
    const auto at = Clock::now();
    if (held) w.unlock();
    return std::make_pair(held, at);
  });
  std::this_thread::sleep_for(300ms);
  const auto released = Clock::now();
  CHECK(alive.release_shared());
  const auto [held, at] = writer.get();
  CHECK(held);
  CHECK(at - released < 3s);
}

TEST_CASE("A writer's release wakes every waiting reader at once", "[redis][rwlock][wake]") {
  Setup setup("rw-wake-readers");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  redlock::ReadWriteLock w(client, k, sleepy());
  REQUIRE(w.try_lock());
  constexpr int kReaders = 3;
  std::atomic<int> inside{0};
  std::atomic<int> most_inside{0};
  std::vector<std::future<Clock::time_point>> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.push_back(std::async(std::launch::async, [&] {
      redlock::ReadWriteLock rw(client, k, sleepy());
      if (!rw.try_lock_shared_for(20s)) return Clock::time_point::max();
      const auto at = Clock::now();
      const int now = ++inside;
      int seen = most_inside;
      while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
      }
      while (most_inside < kReaders && Clock::now() - at < 5s) std::this_thread::sleep_for(5ms);
      --inside;
      rw.unlock_shared();
      return at;
    }));
  }
  std::this_thread::sleep_for(500ms);
  const auto released = Clock::now();
  CHECK(w.release());
  for (auto& r : readers) CHECK(r.get() - released < 3s);
  CHECK(most_inside == kReaders);  // all of them at once
}

TEST_CASE("The last reader's release wakes a waiting writer", "[redis][rwlock][wake]") {
  Setup setup("rw-wake-writer");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  redlock::ReadWriteLock r1(client, k, sleepy());
  redlock::ReadWriteLock r2(client, k, sleepy());
  redlock::ReadWriteLock w(client, k, sleepy());
  REQUIRE(r1.try_lock_shared());
  REQUIRE(r2.try_lock_shared());
  std::atomic<bool> held{false};
  auto writer = std::async(std::launch::async, [&] {
    held = w.try_lock_for(20s);
    const auto at = Clock::now();
    if (held) w.unlock();
    return at;
  });
  std::this_thread::sleep_for(300ms);
  r1.unlock_shared();
  std::this_thread::sleep_for(300ms);
  CHECK_FALSE(held);  // one reader is still in
  const auto released = Clock::now();
  r2.unlock_shared();
  CHECK(writer.get() - released < 3s);
  CHECK(held);
}

TEST_CASE("No wake-up is lost when a release races a reader starting to wait (Redisson #3891)",
          "[redis][rwlock][wake]") {
  Setup setup("rw-race");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  redlock::ReadWriteLock w(client, k, sleepy());
  redlock::ReadWriteLock r(client, k, sleepy());
  int slow = 0;
  for (int i = 0; i < 20; ++i) {
    REQUIRE(w.try_lock());
    auto reader = std::async(std::launch::async, [&] {
      const bool held = r.try_lock_shared_for(20s);
      const auto at = Clock::now();
      if (held) r.unlock_shared();
      return std::make_pair(held, at);
    });
    std::this_thread::sleep_for(std::chrono::microseconds(250 * (i % 8)));
    const auto released = Clock::now();
    w.unlock();
    const auto [held, at] = reader.get();
    CHECK(held);
    if (at - released > 3s) ++slow;  // a missed wake-up sleeps until the retry delay (10 s)
  }
  CHECK(slow == 0);
}

TEST_CASE("A writer downgrades to a reader without a gap, fences", "[redis][rwlock]") {
  Setup setup("rw-downgrade");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  auto o = fast();
  o.fencing = true;
  redlock::ReadWriteLock rw(client, k, o);
  redlock::ReadWriteLock other(client, k, o);
  REQUIRE(other.try_lock());
  const auto first = other.fence();
  CHECK(first > 0);
  other.unlock();
  REQUIRE(rw.try_lock());
  const auto second = rw.fence();
  CHECK(second > first);
  CHECK_FALSE(other.try_lock_shared());
  REQUIRE(rw.downgrade());
  CHECK(rw.owns_shared());
  CHECK_FALSE(rw.owns_lock());
  CHECK(rw.fence_shared() == second);                           // the generation it reads
  CHECK(server.raw({"GET", k}).str() == "redlock:rw:readers");  // no writer's token: readers'
  CHECK(readers_of(server, k) == 1);
  CHECK(other.try_lock_shared());  // readers share with the downgraded one
  CHECK_FALSE(other.try_lock());   // no writer
  other.unlock_shared();
  CHECK_THROWS_AS(rw.downgrade(), std::logic_error);  // no writer hold
  CHECK(rw.release_shared());
  REQUIRE(other.try_lock());
  CHECK(other.fence() > second);
  REQUIRE(other.try_lock());  // re-entered: a nested downgrade is refused, the hold stays
  CHECK_THROWS_AS(other.downgrade(), std::logic_error);
  CHECK(other.owns_lock());
  other.unlock();
  CHECK(other.owns_lock());
  CHECK(other.downgrade());
  CHECK(other.release_shared());
  CHECK(server.raw({"EXISTS", k, helper_key(k, ":readers")}).integer() == 0);
}

TEST_CASE("ReadWriteLock auto_renew keeps the writer and a reader, on_lost for each",
          "[redis][rwlock][watchdog]") {
  Setup setup("rw-renew");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  auto o = fast(1000ms);
  o.auto_renew = true;
  std::atomic<int> lost{0};
  o.on_lost = [&](const redlock::LostEvent&) { ++lost; };
  redlock::ReadWriteLock rw(client, k, o);
  REQUIRE(rw.try_lock());
  std::this_thread::sleep_for(2500ms);
  CHECK(rw.owns_lock());
  rw.unlock();
  REQUIRE(rw.try_lock_shared());
  std::this_thread::sleep_for(2500ms);
  CHECK(rw.owns_shared());
  CHECK(lost == 0);
  server.raw({"DEL", helper_key(k, ":readers")});
  const auto end = Clock::now() + 5s;
  while (lost == 0 && Clock::now() < end) std::this_thread::sleep_for(10ms);
  CHECK(lost == 1);
  CHECK_FALSE(rw.owns_shared());
  CHECK_FALSE(rw.release_shared());
}

TEST_CASE("A waiting writer's marker stays while it waits and goes when it gets in",
          "[redis][rwlock]") {
  Setup setup("rw-marker");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  const std::string marker = helper_key(k, ":writer-waiting");
  redlock::ReadWriteLock r(client, k, fast());
  redlock::ReadWriteLock w(client, k, fast());  // the marker lives 250 ms
  REQUIRE(r.try_lock_shared());
  std::atomic<bool> held{false};
  std::thread writer([&] {
    held = w.try_lock_for(20s);
    if (!held) return;
    std::this_thread::sleep_for(300ms);
    w.unlock();
  });
  const auto end = Clock::now() + 5s;
  while (server.raw({"EXISTS", marker}).integer() == 0 && Clock::now() < end) {
    std::this_thread::sleep_for(1ms);
  }
  int present = 0;
  int absent = 0;
  const auto watch_until = Clock::now() + 1500ms;  // six marker lives
  while (Clock::now() < watch_until) {
    (server.raw({"EXISTS", marker}).integer() == 1 ? present : absent) += 1;
    std::this_thread::sleep_for(5ms);
  }
  CHECK(present > 50);
  CHECK(absent == 0);  // refreshed by each retry, never let lapse
  CHECK_FALSE(held);
  r.unlock_shared();
  while (!held && Clock::now() < end + 10s) std::this_thread::sleep_for(1ms);
  REQUIRE(held);
  CHECK(server.raw({"EXISTS", marker}).integer() == 0);  // gone with the grant
  redlock::ReadWriteLock other(client, k, fast());
  writer.join();
  CHECK(other.try_lock_shared());  // at once after the writer: no marker left behind
  other.unlock_shared();
}

// A writer that stops waiting (its try_lock_for ran out, or it was cancelled) takes its marker
// away, and the readers it held back wake: they do not wait out the marker's life.
TEST_CASE("A writer that gives up its wait removes its marker, and new readers enter at once",
          "[redis][rwlock]") {
  Setup setup("rw-marker-give-up");
  auto& server = setup.server;
  const std::string marker = helper_key(setup.k, ":writer-waiting");
  redlock::LockOptions o = fast();
  o.ttl = 10s;  // the marker lives max(250 ms, 5 * retry_delay), at most ttl: 1 s here
  o.retry_delay = 200ms;
  redlock::ReadWriteLock r(setup.client, setup.k, o);
  redlock::ReadWriteLock w(setup.client, setup.k, o);
  redlock::ReadWriteLock late(setup.client, setup.k, o);
  REQUIRE(r.try_lock_shared());
  CHECK_FALSE(w.try_lock_for(300ms));  // refused by the reader: it marked, then gave up
  CHECK(server.raw({"EXISTS", marker}).integer() == 0);
  CHECK(late.try_lock_shared());  // the marker kept it out for up to 1 s more before
  late.unlock_shared();
  // A reader already held back by the marker is woken by the give-up, not by its expiry.
  std::atomic<bool> writer_waiting{true};
  std::thread writer([&] {
    (void)w.try_lock_for(600ms);
    writer_waiting = false;
  });
  const auto until = Clock::now() + 5s;
  while (server.raw({"EXISTS", marker}).integer() == 0 && Clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  const auto start = Clock::now();
  REQUIRE(late.try_lock_shared_for(5s));  // enters when the writer gives up at 600 ms
  const auto waited = Clock::now() - start;
  writer.join();
  CHECK_FALSE(writer_waiting);
  INFO("the held-back reader entered "
       << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
       << " ms after it started");
  CHECK(waited < 600ms + 500ms);  // the give-up, not the marker's 1 s life after it
  late.unlock_shared();
  r.unlock_shared();
}

TEST_CASE("A plain Lock on the key is a writer: readers exclude it and it excludes readers",
          "[redis][rwlock]") {
  Setup setup("rw-vs-lock");
  [[maybe_unused]] auto& server = setup.server;  // not a structured binding: lambdas use them
  [[maybe_unused]] auto& client = setup.client;
  [[maybe_unused]] const std::string& k = setup.k;
  redlock::ReadWriteLock r(client, k, sleepy());
  redlock::Lock plain(client, k, sleepy());
  REQUIRE(r.try_lock_shared());
  CHECK_FALSE(plain.try_lock());
  // The last reader's release wakes a Lock waiting for the key (retry_delay 10 s).
  auto waiting = std::async(std::launch::async, [&] {
    const bool held = plain.try_lock_for(20s);
    const auto at = Clock::now();
    return std::make_pair(held, at);
  });
  std::this_thread::sleep_for(300ms);
  const auto released = Clock::now();
  CHECK(r.release_shared());
  const auto [held, at] = waiting.get();  // its thread ended: the Lock went with it
  CHECK(held);
  CHECK(at - released < 3s);
  REQUIRE(plain.try_lock());
  CHECK_FALSE(r.try_lock_shared());
  // A Lock's release wakes a waiting reader.
  auto reader = std::async(std::launch::async, [&] {
    const bool got = r.try_lock_shared_for(20s);
    return std::make_pair(got, Clock::now());
  });
  std::this_thread::sleep_for(300ms);
  const auto unlocked = Clock::now();
  CHECK(plain.release());
  const auto [got, when] = reader.get();
  CHECK(got);
  CHECK(when - unlocked < 3s);
}

// The readers' key and set expire with the longest reader lease: a reader with a shorter lease
// never shortens them, a longer one lengthens both. A reader that finds the key absent enters
// without purging the set (no reader can hold then), so a member left from an ended lease (here
// written raw, as a crashed reader's entry left after its key was deleted) must not keep the key
// shared once the last live reader leaves: a writer then gets in at once.
TEST_CASE("ReadWriteLock: the readers' key lives as long as the longest reader lease, no longer",
          "[redis][rwlock]") {
  Setup setup("rw-cover");
  const std::string readers = helper_key(setup.k, ":readers");
  const auto pttl = [&](const std::string& name) {
    return setup.server.raw({"PTTL", name}).integer();
  };
  redlock::ReadWriteLock a(setup.client, setup.k, fast(10s));
  redlock::ReadWriteLock b(setup.client, setup.k, fast(2s));
  redlock::ReadWriteLock c(setup.client, setup.k, fast(20s));
  REQUIRE(a.try_lock_shared());
  CHECK(pttl(setup.k) > 9000);
  CHECK(pttl(readers) > 9000);
  REQUIRE(b.try_lock_shared());
  CHECK(pttl(setup.k) > 9000);
  CHECK(pttl(readers) > 9000);
  REQUIRE(c.try_lock_shared());
  CHECK(pttl(setup.k) > 19000);
  CHECK(pttl(readers) > 19000);
  a.unlock_shared();
  b.unlock_shared();
  c.unlock_shared();
  CHECK(setup.server.raw({"EXISTS", setup.k, readers}).integer() == 0);

  setup.server.raw({"ZADD", readers, "1", "0badc0de"});  // an entry whose lease ended long ago
  REQUIRE(a.try_lock_shared());
  CHECK(readers_of(setup.server, setup.k) == 2);
  a.unlock_shared();
  CHECK(setup.server.raw({"EXISTS", setup.k, readers}).integer() == 0);
  redlock::ReadWriteLock writer(setup.client, setup.k, fast(10s));
  CHECK(writer.try_lock());
  writer.unlock();
}
