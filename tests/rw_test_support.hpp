// tests/rw_test_support.hpp: what the ReadWriteLock test files share: lock options, a server
// with a Client and a key, the readers' set size, and a forked holder to kill.
#ifndef REDLOCK_TESTS_RW_TEST_SUPPORT_HPP
#define REDLOCK_TESTS_RW_TEST_SUPPORT_HPP

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <utility>

#include <redlock/redlock.hpp>

#include "support/redis_server.hpp"
#include "util/key_slot.hpp"  // helper_key: the names of the lock's helper keys

namespace redlock::test::rw {

using namespace std::chrono_literals;

inline redlock::LockOptions fast(std::chrono::milliseconds ttl = 10s) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.retry_delay = 5ms;
  return o;
}

// Options under which only a wake-up explains a prompt grant.
inline redlock::LockOptions sleepy() {
  auto o = fast(30s);
  o.retry_delay = 10s;
  return o;
}

struct Setup {
  explicit Setup(const std::string& name)
      : client(server.endpoint()), k(redlock::test::key(name)) {}
  redlock::test::RedisServer server;
  redlock::Client client;
  std::string k;
};

inline long long readers_of(const redlock::test::RedisServer& server, const std::string& k) {
  return server.raw({"ZCARD", redlock::detail::helper_key(k, ":readers")}).integer();
}

// Forks a process that runs `hold` (which takes a lock and keeps it), tells the parent, and
// waits to be killed. Returns its pid once it holds (-1 if it could not).
template <class Hold>
pid_t fork_holder(Hold hold) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    try {
      hold([&] {
        const char ready = 'y';
        if (write(fds[1], &ready, 1) != 1) _exit(2);
        for (;;) pause();
      });
    } catch (...) {
    }
    _exit(1);
  }
  close(fds[1]);
  char ready = 0;
  const bool held = child > 0 && read(fds[0], &ready, 1) == 1;
  close(fds[0]);
  return held ? child : -1;
}

// `w` holds the writer side; `r` waits for a read on another thread, and `w` releases 300 ms
// later. Returns how long after the release `r` held (hours(1) if it never did).
inline std::chrono::steady_clock::duration reader_wakes_after(redlock::ReadWriteLock& w,
                                                              redlock::ReadWriteLock& r) {
  auto reader = std::async(std::launch::async, [&] {
    const bool held = r.try_lock_shared_for(20s);
    return std::make_pair(held, std::chrono::steady_clock::now());
  });
  std::this_thread::sleep_for(300ms);
  const auto released = std::chrono::steady_clock::now();
  const bool kept = w.release();
  const auto [held, at] = reader.get();  // its thread ended: the read hold went with it
  if (!kept || !held) return std::chrono::hours(1);
  return at - released;
}

}  // namespace redlock::test::rw

#endif  // REDLOCK_TESTS_RW_TEST_SUPPORT_HPP
