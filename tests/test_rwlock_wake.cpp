// Waiters of one Client on a ReadWriteLock's key (issue 42, defects 4 and 5): a reader woken by
// a release that it cannot use (a writer's marker refuses it) and that then gives up passes the
// wake-up on to the next waiter of the process (a plain Lock, a writer), and a writer that waits
// behind readers of its own Client still sets the writer-waiting marker (writer preference).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "rw_test_support.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "util/key_slot.hpp"  // helper_key: the marker's name

using namespace std::chrono_literals;
using namespace redlock::test::rw;
using Clock = std::chrono::steady_clock;

namespace {

long long ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// Issue 42's setup of defect 4. W1 (another Client) holds the writer side; T1, a reader on
// `setup.client`, waits with try_lock_shared_for(300 ms); T2, `wait_in_lock` on the same
// Client, waits from +50 ms; at ~+150 ms a writer that died while it waited leaves its marker
// (set on the server, 1 s: a writer that gives up takes its marker away); W1 (ttl 3 s) releases
// at +250 ms. T1 is woken first, refused by the marker, and times out. Returns how long after the
// release T2 held (hours(1): never, in 10 s).
Clock::duration second_waiter_after_release(Setup& setup,
                                            const std::function<bool()>& wait_in_lock) {
  redlock::Client w1_client(setup.server.endpoint());
  redlock::ReadWriteLock w1(w1_client, setup.k, fast(3s));
  REQUIRE(w1.try_lock());
  redlock::ReadWriteLock t1(setup.client, setup.k, fast());

  const auto start = Clock::now();
  auto reader = std::async(std::launch::async, [&] { return t1.try_lock_shared_for(300ms); });
  std::this_thread::sleep_until(start + 50ms);
  auto second = std::async(std::launch::async, [&] {
    const bool held = wait_in_lock();
    return held ? Clock::now() : Clock::time_point::max();
  });
  std::this_thread::sleep_until(start + 150ms);
  setup.server.raw({"SET", redlock::detail::helper_key(setup.k, ":writer-waiting"), "a-dead-writer",
                    "PX", "1000"});
  std::this_thread::sleep_until(start + 250ms);
  const auto released = Clock::now();
  REQUIRE(w1.release());
  CHECK_FALSE(reader.get());  // refused by the dead writer's marker until its deadline
  const auto held_at = second.get();
  if (held_at == Clock::time_point::max()) return std::chrono::hours(1);
  return held_at - released;
}

}  // namespace

TEST_CASE(
    "ReadWriteLock: a reader of one Client that gives up after the release it was woken for "
    "passes the wake-up on to the Client's next waiter",
    "[redis][rwlock]") {
  Setup setup("rw-pass-wake");
  // Without a wake-up T2 sleeps until its own ttl or (a fair Lock, watching) W1's lease ends:
  // 3 s, well past the bound below.
  auto t2_options = fast(3s);
  SECTION("T2 is a Lock (fair = false)") {
    t2_options.fair = false;
    redlock::Lock t2(setup.client, setup.k, t2_options);
    const auto after = second_waiter_after_release(setup, [&] { return t2.try_lock_for(10s); });
    CHECK(ms(after) < 1500);
    t2.unlock();
  }
  SECTION("T2 is a Lock (fair, the default)") {
    redlock::Lock t2(setup.client, setup.k, t2_options);
    const auto after = second_waiter_after_release(setup, [&] { return t2.try_lock_for(10s); });
    CHECK(ms(after) < 1500);
    t2.unlock();
  }
  SECTION("T2 is a ReadWriteLock writer") {
    redlock::ReadWriteLock t2(setup.client, setup.k, t2_options);
    const auto after = second_waiter_after_release(setup, [&] { return t2.try_lock_for(10s); });
    CHECK(ms(after) < 1500);
    t2.unlock();
  }
}

TEST_CASE(
    "ReadWriteLock: a writer waiting behind readers of its own Client still keeps new readers "
    "out (writer preference)",
    "[redis][rwlock]") {
  Setup setup("rw-pref-local");
  redlock::ReadWriteLock w1(setup.client, setup.k, fast());
  REQUIRE(w1.try_lock());
  constexpr int kReaders = 6;
  std::atomic<int> entered{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      redlock::ReadWriteLock r(setup.client, setup.k, fast());
      if (!r.try_lock_shared_for(10s)) return;
      entered.fetch_add(1);
      std::this_thread::sleep_for(1s);
      r.unlock_shared();
    });
  }
  std::this_thread::sleep_for(50ms);  // the readers wait (watching) before W2 arrives
  redlock::ReadWriteLock w2(setup.client, setup.k, fast());
  auto writer = std::async(std::launch::async, [&] {
    const bool held = w2.try_lock_for(10s);
    const int readers_in = entered.load();
    const auto at = Clock::now();
    if (held) w2.unlock();
    return std::make_tuple(held, readers_in, at);
  });
  std::this_thread::sleep_for(250ms);
  const auto released = Clock::now();
  REQUIRE(w1.release());
  const auto [held, readers_in, at] = writer.get();
  for (auto& t : readers) t.join();
  CHECK(held);
  CHECK(readers_in == 0);             // no reader that came before it passed the waiting writer
  CHECK(at - released < 700ms);       // not the readers' whole hold (1 s)
  CHECK(entered.load() == kReaders);  // and the readers got in after it
}

// Issue 42, writer preference under faults: a writer whose Client has no live subscription yet
// (a fresh Client, or its subscriber reconnecting after a fault) made its first attempt without
// the marker, then waited for its subscription's confirmation (up to connect + command timeout)
// before the attempt that marks: readers arriving meanwhile passed it. Here the confirmation
// never comes (the proxy black-holes from the SUBSCRIBE on) and the marker must already be there.
TEST_CASE(
    "ReadWriteLock: a waiting writer marks itself from its first attempt, before its "
    "subscription is confirmed",
    "[redis][rwlock][fault]") {
  Setup setup("rw-first-mark");
  redlock::ReadWriteLock reader(setup.client, setup.k, fast(30s));
  REQUIRE(reader.try_lock_shared());
  redlock::test::FaultProxy proxy("127.0.0.1", setup.server.port());
  redlock::Endpoint through = setup.server.plain_endpoint();  // the proxy matches request bytes
  through.port = proxy.port();
  through.command_timeout = 500ms;
  redlock::Client writer_client(through);  // fresh: nothing subscribed yet
  auto options = fast(30s);
  options.retry_delay = 1s;  // the marker lives 5 * retry_delay: 5 s
  redlock::ReadWriteLock writer(writer_client, setup.k, options);
  proxy.set_blackhole_on("SUBSCRIBE");
  auto waiting = std::async(std::launch::async, [&] {
    try {
      return writer.try_lock_for(1s);
    } catch (const redlock::Error&) {
      return false;
    }
  });
  REQUIRE(redlock::test::eventually([&] { return proxy.blackholed(); }, 3s));
  const std::string marker = redlock::detail::helper_key(setup.k, ":writer-waiting");
  CHECK(setup.server.raw({"EXISTS", marker}).integer() == 1);
  redlock::Client late_client(setup.server.endpoint());
  redlock::ReadWriteLock late(late_client, setup.k, fast(30s));
  CHECK_FALSE(late.try_lock_shared());  // arrived after the writer: it waits behind it
  proxy.clear();
  CHECK_FALSE(waiting.get());  // the reader holds throughout
  CHECK(reader.release_shared());
}

// A reader hears `released` only for a plain Lock's release of the key; a writer waits for it.
// Here the last reader's release announces on `released`, and a reader of the writer's own
// Client, which a writer's marker holds back, waited on that channel before the writer. The
// one wake-up of the process must go to the writer, who can use it: handed to the reader, it
// was spent on an attempt the marker refused, and the writer slept until its marker's refresh
// (a third of the marker's life: 3.3 s here; 84 ms with the default options, bench section 14's
// stalls).
TEST_CASE(
    "ReadWriteLock: the last reader's release wakes a writer of the Client before a reader "
    "the marker holds back",
    "[redis][rwlock]") {
  Setup setup("rw-writer-first");
  redlock::LockOptions o = fast(30s);
  o.retry_delay = 2s;  // the marker lives 10 s; the writer refreshes it every 3.3 s
  redlock::Client other(setup.server.endpoint());
  redlock::ReadWriteLock r0(other, setup.k, o);
  REQUIRE(r0.try_lock_shared());
  const std::string marker = redlock::detail::helper_key(setup.k, ":writer-waiting");
  setup.server.raw({"SET", marker, "a-dead-writer", "PX", "20000"});
  redlock::ReadWriteLock r1(setup.client, setup.k, o);
  auto reader = std::async(std::launch::async, [&] { return r1.try_lock_shared_for(20s); });
  std::this_thread::sleep_for(300ms);  // r1 is refused by the marker and waits
  redlock::ReadWriteLock w(setup.client, setup.k, o);
  std::promise<void> done;
  auto writer = std::async(std::launch::async, [&] {
    const bool held = w.try_lock_for(20s);
    const auto at = Clock::now();
    done.get_future().wait();
    const bool released = held && w.release();  // announces to the readers: r1 enters
    return std::make_pair(held ? at : Clock::time_point::max(), released);
  });
  std::this_thread::sleep_for(300ms);  // w is refused by r0 and waits, behind r1
  const auto released = Clock::now();
  REQUIRE(r0.release_shared());
  std::this_thread::sleep_for(1500ms);
  setup.server.raw({"DEL", marker});
  done.set_value();
  const auto [held_at, writer_released] = writer.get();
  REQUIRE(held_at != Clock::time_point::max());
  INFO("the writer held " << ms(held_at - released) << " ms after the last reader left");
  CHECK(held_at - released < 1s);
  CHECK(writer_released);
  CHECK(reader.get());
  r1.unlock_shared();
}
