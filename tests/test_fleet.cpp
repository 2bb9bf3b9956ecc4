// Contention at fleet scale (issue #32): many processes wait for one key with the default options.
// A release wakes one waiter, not all, so the server's work per acquisition does not grow with the
// number of waiting processes, and every process is served. Counts, not times: INFO
// commandstats (which counts the calls scripts make too) and each process's acquisitions.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <redlock/redlock.hpp>

#include "support/clock.hpp"
#include "support/redis_server.hpp"
#include "util/key_slot.hpp"

using namespace std::chrono_literals;
using redlock::detail::helper_key;
using redlock::test::key;
using redlock::test::monotonic_us;
using redlock::test::RedisServer;

namespace {

// Every command the server ran (scripts' inner calls included), less the INFO calls themselves.
long long server_calls(const RedisServer& server) {
  const std::string info = server.raw({"INFO", "commandstats"}).str();
  long long total = 0;
  std::size_t at = 0;
  while ((at = info.find("cmdstat_", at)) != std::string::npos) {
    const auto end = info.find('\n', at);
    const std::string line = info.substr(at, end - at);
    at = end;
    const auto calls = line.find(":calls=");
    if (calls == std::string::npos || line.rfind("cmdstat_info:", 0) == 0) continue;
    total += std::stoll(line.substr(calls + 7));
  }
  return total;
}

struct FleetRun {
  std::vector<int> acquisitions;  // per process
  long long server_commands{0};   // the most any one server ran
  long long total() const {
    long long sum = 0;
    for (int a : acquisitions) sum += a;
    return sum;
  }
  double per_acquisition() const {
    return static_cast<double>(server_commands) / static_cast<double>(std::max(1LL, total()));
  }
};

// What a forked process contends for: a Lock on one server, a Redlock on several, or with
// `permits` > 0 a Semaphore of that many permits on the first server.
class Contender {
 public:
  Contender(const std::vector<redlock::Client>& clients, const std::string& k,
            const redlock::LockOptions& options, std::size_t permits) {
    if (permits > 0) {
      semaphore_ = std::make_unique<redlock::Semaphore>(clients[0], k, permits, options);
    } else if (clients.size() == 1) {
      lock_ = std::make_unique<redlock::Lock>(clients[0], k, options);
    } else {
      lock_ = std::make_unique<redlock::Redlock>(clients, k, options);
    }
  }
  // Waits at most `wait`; 0: until it holds.
  bool take(std::chrono::microseconds wait) {
    if (wait.count() == 0) {
      semaphore_ ? semaphore_->acquire() : lock_->lock();
      return true;
    }
    return semaphore_ ? semaphore_->try_acquire_for(wait) : lock_->try_lock_for(wait);
  }
  void give() {
    if (semaphore_) {
      semaphore_->release();
    } else {
      lock_->unlock();
    }
  }

 private:
  std::unique_ptr<redlock::LockBase> lock_;
  std::unique_ptr<redlock::Semaphore> semaphore_;
};

// Forks `processes` processes that each loop, until `run` has passed: lock (waiting at most
// until the end), hold 1 ms, unlock; with `options` (the defaults unless a test says otherwise),
// a Lock on one server or a Redlock on several, or with `permits` > 0 a Semaphore of that many
// permits on one server. Each reports its acquisitions through a pipe.
FleetRun run_fleet(const std::vector<const RedisServer*>& servers, const std::string& k,
                   int processes, std::chrono::milliseconds run,
                   const redlock::LockOptions& options, std::size_t permits = 0) {
  for (const RedisServer* server : servers) server->raw({"CONFIG", "RESETSTAT"});
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  // Every child starts its loop at the same moment, after all are forked and connected.
  const auto start_at = monotonic_us() + 1'000'000 + processes * 20'000;
  const auto stop_at =
      start_at + std::chrono::duration_cast<std::chrono::microseconds>(run).count();
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      int count = -1;
      try {
        std::vector<redlock::Client> clients;
        for (const RedisServer* server : servers) clients.emplace_back(server->endpoint());
        for (auto& client : clients) client.ping();
        Contender contender(clients, k, options, permits);
        while (monotonic_us() < start_at) std::this_thread::sleep_for(1ms);
        count = 0;
        for (;;) {
          const auto left = stop_at - monotonic_us();
          if (left <= 0) break;
          if (!contender.take(std::chrono::microseconds(left))) break;
          std::this_thread::sleep_for(1ms);
          contender.give();
          ++count;
        }
      } catch (...) {
      }
      const bool sent = write(fds[1], &count, sizeof count) == sizeof count;
      _exit(sent && count >= 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  close(fds[1]);
  FleetRun out;
  int count = 0;
  while (read(fds[0], &count, sizeof count) == sizeof count) out.acquisitions.push_back(count);
  close(fds[0]);
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (const RedisServer* server : servers) {
    out.server_commands = std::max(out.server_commands, server_calls(*server));
  }
  return out;
}

}  // namespace

TEST_CASE("64 waiting processes cost the server what 4 do per acquisition, and all are served",
          "[redis][fleet][slow]") {
  RedisServer server;
  const auto k = key("fleet");
  const redlock::LockOptions defaults;
  const FleetRun few = run_fleet({&server}, k, 4, 1500ms, defaults);
  const FleetRun many = run_fleet({&server}, k, 64, 2500ms, defaults);
  INFO("server commands per acquisition: "
       << few.per_acquisition() << " at 4 processes (" << few.total() << " acquisitions), "
       << many.per_acquisition() << " at 64 (" << many.total() << ")");
  REQUIRE(few.acquisitions.size() == 4);
  REQUIRE(many.acquisitions.size() == 64);
  REQUIRE(few.total() > 0);
  const auto [lo, hi] = std::minmax_element(many.acquisitions.begin(), many.acquisitions.end());
  INFO("acquisitions per process at 64: " << *lo << " - " << *hi);
  CHECK(*lo > 0);  // every process is served
  CHECK(many.per_acquisition() <= 1.5 * few.per_acquisition());
  // Nothing is left behind once every process has stopped.
  CHECK(server.raw({"EXISTS", k}).integer() == 0);
  CHECK(server.raw({"HLEN", helper_key(k, ":waiters:info")}).integer() == 0);
}

namespace {

// A forked process that takes `k` with `options` (lock(), or try_lock_for(`give_up`) when it is
// positive; a permit of a Semaphore when `permits` > 0), writes `id` to `fd` once it holds it,
// holds it for `hold` and exits.
pid_t fork_holder(const RedisServer& server, const std::string& k, int id, int fd,
                  std::chrono::milliseconds hold, const redlock::LockOptions& options,
                  std::chrono::milliseconds give_up = 0ms, std::size_t permits = 0) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  int rc = 1;
  try {
    Contender contender({redlock::Client(server.endpoint())}, k, options, permits);
    if (contender.take(give_up)) {
      rc = write(fd, &id, sizeof id) == sizeof id ? 0 : 2;
      std::this_thread::sleep_for(hold);
      contender.give();
    } else {
      rc = 3;
    }
  } catch (...) {
  }
  _exit(rc);
}

// The entries of `k`'s queue of waiters (`info`: ":waiters:info", a Semaphore's
// ":permit:waiters:info").
long long queue_entries(const RedisServer& server, const std::string& k,
                        const char* info = ":waiters:info") {
  return server.raw({"HLEN", helper_key(k, info)}).integer();
}

// Waits (at most 10 s) until `k`'s queue has `n` entries. False on the timeout, or as soon as
// process `quits` (if not 0) has exited: its entry then will not come (it is not reaped).
bool wait_for_entries(const RedisServer& server, const std::string& k, long long n,
                      const char* info = ":waiters:info", pid_t quits = 0) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (queue_entries(server, k, info) != n) {
    if (std::chrono::steady_clock::now() > end) return false;
    siginfo_t exited{};
    if (quits != 0 &&
        waitid(P_PID, static_cast<id_t>(quits), &exited, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        exited.si_pid == quits) {
      return false;
    }
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

int reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

namespace {

// What a contender leaves on the server: its key and queue for a Lock; a Semaphore's permit
// slots and queue. EXISTS of them all is 0 once every process has stopped.
std::vector<std::string> server_state(const std::string& k, std::size_t permits) {
  if (permits == 0) return {"EXISTS", k, helper_key(k, ":waiters"), helper_key(k, ":waiters:info")};
  std::vector<std::string> argv{"EXISTS", helper_key(k, ":permit:waiters"),
                                helper_key(k, ":permit:waiters:info")};
  for (std::size_t i = 1; i <= permits; ++i) {
    argv.push_back(helper_key(k, ":permit:" + std::to_string(i)));
  }
  return argv;
}

const char* queue_info(std::size_t permits) {
  return permits == 0 ? ":waiters:info" : ":permit:waiters:info";
}

// Holds all `permits` (a Lock when 0) in this process while 8 forked waiters queue one by one,
// kills every other one (the head among them), releases: the live ones are served, in order.
void killed_waiters_case(std::size_t permits) {
  RedisServer server;
  const auto k = key("fleet-killed");
  redlock::Client client(server.endpoint());
  std::vector<std::unique_ptr<Contender>> holders;
  for (std::size_t h = 0; h < std::max<std::size_t>(permits, 1); ++h) {
    holders.push_back(std::make_unique<Contender>(std::vector<redlock::Client>{client}, k,
                                                  redlock::LockOptions{}, permits));
    holders.back()->take(0us);
  }
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::vector<pid_t> waiters;
  for (int id = 0; id < 8; ++id) {  // queued one by one: the queue's order is the ids' order
    waiters.push_back(fork_holder(server, k, id, fds[1], 20ms, {}, 20s, permits));
    REQUIRE(wait_for_entries(server, k, id + 1, queue_info(permits)));
  }
  close(fds[1]);
  for (int id = 0; id < 8; id += 2) kill(waiters[id], SIGKILL);  // the head among them
  for (int id = 0; id < 8; id += 2) CHECK(reap(waiters[id]) == 128 + SIGKILL);
  const auto released = std::chrono::steady_clock::now();
  for (auto& holder : holders) holder->give();
  std::vector<int> order;
  int id = 0;
  while (read(fds[0], &id, sizeof id) == sizeof id) order.push_back(id);
  const auto served = std::chrono::steady_clock::now() - released;
  close(fds[0]);
  for (int w = 1; w < 8; w += 2) CHECK(reap(waiters[w]) == 0);
  // With several permits, the waiters served together may report in either order.
  if (permits > 1) std::sort(order.begin(), order.end());
  CHECK(order == std::vector<int>{1, 3, 5, 7});
  // Four holds of 20 ms; a stall (a dead waiter handed the lock) would cost a 30 s ttl.
  CHECK(served < 10s);
  CHECK(server.raw(server_state(k, permits)).integer() == 0);
}

// A forked holder of the only permit (a Lock when 0) is killed -9 while 4 waiters queue: the
// head waiter watched its lease, so the first is served within the ttl, and all in order.
void killed_holder_case(std::size_t permits) {
  RedisServer server;
  const auto k = key("fleet-holder-killed");
  redlock::LockOptions options;
  options.ttl = 1500ms;
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t doomed = fork_holder(server, k, 0, fds[1], 60s, options, 0ms, permits);
  int id = -1;
  REQUIRE(read(fds[0], &id, sizeof id) == sizeof id);
  REQUIRE(id == 0);
  std::vector<pid_t> waiters;
  for (int w = 1; w <= 4; ++w) {
    waiters.push_back(fork_holder(server, k, w, fds[1], 10ms, options, 20s, permits));
    REQUIRE(wait_for_entries(server, k, w, queue_info(permits)));
  }
  close(fds[1]);
  const auto killed = std::chrono::steady_clock::now();
  kill(doomed, SIGKILL);
  CHECK(reap(doomed) == 128 + SIGKILL);
  std::vector<int> order;
  while (read(fds[0], &id, sizeof id) == sizeof id) {
    order.push_back(id);
    if (order.size() == 1) {
      // Nobody announced the end of the lease: the head waiter watched it. Within the ttl and a
      // generous hand-over, not after another waiter's deadline (they have none).
      CHECK(std::chrono::steady_clock::now() - killed < options.ttl + 3s);
    }
  }
  close(fds[0]);
  for (pid_t w : waiters) CHECK(reap(w) == 0);
  CHECK(order == std::vector<int>{1, 2, 3, 4});
  CHECK(server.raw(server_state(k, permits)).integer() == 0);
}

// The first of two queued waiters gives up within a few ms of the release that hands it the
// lock (or permit: `permits` > 0 makes it a Semaphore of one), a bit later each round: the lock
// moves on to the second either way, and nothing is left on the server.
void give_up_case(std::size_t permits) {
  RedisServer server;
  const auto k = key("fleet-give-up");
  redlock::Client client(server.endpoint());
  Contender holder({client}, k, {}, permits);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  int gave_up = 0;
  int skipped = 0;
  for (int round = 0; round < 12; ++round) {
    holder.take(0us);
    const auto give_up = 200ms;
    const pid_t quitter = fork_holder(server, k, 1, fds[1], 0ms, {}, give_up, permits);
    REQUIRE(wait_for_entries(server, k, 1, queue_info(permits)));
    const auto queued = std::chrono::steady_clock::now();
    const pid_t stayer = fork_holder(server, k, 2, fds[1], 0ms, {}, 0ms, permits);
    if (!wait_for_entries(server, k, 2, queue_info(permits), quitter)) {
      // The quitter's patience ran out before the stayer queued (a fork and a connect can take
      // 200 ms under a sanitizer on a busy machine): the round tests nothing.
      ++skipped;
      holder.give();
      CHECK(reap(quitter) == 3);
      CHECK(reap(stayer) == 0);
      int id = 0;
      REQUIRE(read(fds[0], &id, sizeof id) == sizeof id);
      CHECK(id == 2);
      continue;
    }
    std::this_thread::sleep_until(queued + give_up - 6ms + std::chrono::milliseconds(round));
    holder.give();
    const int quit = reap(quitter);
    CHECK((quit == 0 || quit == 3));  // held, or gave up
    gave_up += quit == 3 ? 1 : 0;
    CHECK(reap(stayer) == 0);  // the lock moved on either way
    int id = 0;
    do {
      REQUIRE(read(fds[0], &id, sizeof id) == sizeof id);
    } while (id != 2);
    CHECK(server.raw(server_state(k, permits)).integer() == 0);
  }
  INFO("rounds in which the first waiter gave up: " << gave_up << "; rounds skipped: " << skipped);
  CHECK(gave_up > 0);
  CHECK(skipped <= 6);
  close(fds[1]);
  close(fds[0]);
}

}  // namespace

TEST_CASE("Waiters killed while queued are skipped: the live ones are served in order",
          "[redis][fleet][fault]") {
  killed_waiters_case(0);
}

TEST_CASE("Semaphore(2): waiters killed while queued are skipped, the permits reach the live ones",
          "[redis][semaphore][fleet][fault]") {
  killed_waiters_case(2);
}

TEST_CASE("A holder killed -9 passes the lock to the queue when its lease ends",
          "[redis][fleet][fault]") {
  killed_holder_case(0);
}

TEST_CASE("Semaphore(1): a permit holder killed -9 passes it to the queue when its lease ends",
          "[redis][semaphore][fleet][fault]") {
  killed_holder_case(1);
}

TEST_CASE("A waiter that gives up as it is handed the lock passes it on, and leaves nothing",
          "[redis][fleet]") {
  give_up_case(0);
}

TEST_CASE("Semaphore: a waiter that gives up as it is handed a permit passes it on, leaves nothing",
          "[redis][semaphore][fleet]") {
  give_up_case(1);
}

TEST_CASE("A fair Redlock(3): 32 waiting processes cost each server what 4 do, and all are served",
          "[redis][redlock][fleet][slow]") {
  redlock::test::ServerGroup group(3);
  const std::vector<const RedisServer*> servers{&group[0], &group[1], &group[2]};
  const auto k = key("fleet-redlock");
  redlock::LockOptions fair;
  fair.fair = true;
  const FleetRun few = run_fleet(servers, k, 4, 1500ms, fair);
  const FleetRun many = run_fleet(servers, k, 32, 2500ms, fair);
  INFO("busiest server's commands per acquisition: "
       << few.per_acquisition() << " at 4 (" << few.total() << " acquisitions), "
       << many.per_acquisition() << " at 32 (" << many.total() << ")");
  REQUIRE(many.acquisitions.size() == 32);
  REQUIRE(few.total() > 0);
  const auto [lo, hi] = std::minmax_element(many.acquisitions.begin(), many.acquisitions.end());
  INFO("acquisitions per process at 32: " << *lo << " - " << *hi);
  CHECK(*lo > 0);
  CHECK(many.per_acquisition() <= 2.0 * few.per_acquisition());
  for (const RedisServer* server : servers) CHECK(server->raw({"EXISTS", k}).integer() == 0);
}

TEST_CASE("A Semaphore(2): 32 waiting processes cost the server what 4 do, and all are served",
          "[redis][semaphore][fleet][slow]") {
  RedisServer server;
  const auto k = key("fleet-semaphore");
  const redlock::LockOptions defaults;
  const FleetRun few = run_fleet({&server}, k, 4, 1500ms, defaults, 2);
  const FleetRun many = run_fleet({&server}, k, 32, 2500ms, defaults, 2);
  INFO("server commands per acquisition: "
       << few.per_acquisition() << " at 4 processes (" << few.total() << " acquisitions), "
       << many.per_acquisition() << " at 32 (" << many.total() << ")");
  REQUIRE(few.acquisitions.size() == 4);
  REQUIRE(many.acquisitions.size() == 32);
  REQUIRE(few.total() > 0);
  const auto [lo, hi] = std::minmax_element(many.acquisitions.begin(), many.acquisitions.end());
  INFO("acquisitions per process at 32: " << *lo << " - " << *hi);
  CHECK(*lo > 0);  // every process is served
  CHECK(many.per_acquisition() <= 1.5 * few.per_acquisition());
  // Nothing is left behind once every process has stopped.
  CHECK(server.raw({"EXISTS", helper_key(k, ":permit:1"), helper_key(k, ":permit:2")}).integer() ==
        0);
  CHECK(server.raw({"HLEN", helper_key(k, ":permit:waiters:info")}).integer() == 0);
}
