// examples/redlock_quorum.cpp: one lock over several independent Redis instances (Redlock).
//
//   example_redlock_quorum [--redis URI]... [--self-test]
//
// Pass --redis once per instance, e.g. five times for five servers: the lock is held when a
// majority (the quorum, N/2 + 1) granted it in time, so it survives a minority of dead or paused
// nodes. The instances must be independent servers (not replicas of each other). With no --redis
// at all it uses redis://127.0.0.1:6379 alone, which works (quorum 1) but shows little.
//
// What this example shows:
//   - try_lock_for() returns false on contention: another holder is not an error;
//   - validity() is the time left on the lease, already reduced by the time the acquire took
//     and by the clock-drift allowance: the budget for the critical section;
//   - when fewer than a quorum of the instances answer (down, paused, unreachable), nothing can be
//     decided: the wait rides that out until its deadline, then throws
//     redlock::QuorumUnavailableError (exit status 3 here). That is not "busy": no one may hold
//     the lock, or someone may; the caller cannot tell;
//   - other redlock::Error types (an error reply such as NOPERM on every node) are thrown at once.
// --self-test starts five throwaway servers and kills one of them first, to show that a dead
// minority costs nothing but a log line; then three servers with two killed, to show the
// QuorumUnavailableError that one answering node of three gets.
#include <chrono>       // std::chrono
#include <cstdio>       // std::printf, std::fprintf
#include <cstring>      // std::strcmp
#include <exception>    // std::exception
#include <functional>   // std::less
#include <mutex>        // std::unique_lock, std::mutex
#include <set>          // std::set
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <thread>       // std::this_thread::sleep_for
#include <vector>       // std::vector

#include <redlock/redlock.hpp>  // Client, Endpoint, Redlock, errors, set_log_handler

#include "support/throwaway_servers.hpp"  // --self-test only: throwaway redis-servers

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long long ms(std::chrono::milliseconds d) { return static_cast<long long>(d.count()); }
long long ms_since(Clock::time_point start) {
  return ms(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start));
}

// Exit status when fewer than a quorum of the instances answered: nothing could be decided.
constexpr int kQuorumUnavailable = 3;

int run(const std::vector<redlock::Endpoint>& endpoints) {
  // Warnings and errors, each distinct message once: a dead node is reported on every attempt,
  // which would drown everything else. (The handler may run on any thread, hence the mutex.)
  redlock::set_log_handler(
      [](redlock::LogLevel level, std::string_view message) {
        static std::mutex mutex;
        static std::set<std::string, std::less<>> seen;
        std::lock_guard<std::mutex> guard(mutex);
        if (!seen.emplace(message).second) return;
        std::fprintf(stderr, "[redlock %s] %.*s\n", redlock::to_string(level),
                     static_cast<int>(message.size()), message.data());
      },
      redlock::LogLevel::warn);

  // One Client per instance. A Client is a cheap, thread-safe handle: share it, copy it.
  std::vector<redlock::Client> clients;
  for (const auto& endpoint : endpoints) clients.emplace_back(endpoint);

  redlock::LockOptions options;
  options.ttl = 5s;
  redlock::Redlock quorum(clients, "examples:quorum", options);
  std::printf("Redlock over %zu instance(s); a hold needs %zu of them\n", quorum.size(),
              quorum.quorum());

  try {
    // Like a timed mutex: try for up to 2 s. `held` unlocks when it goes out of scope.
    const auto asked = Clock::now();
    std::unique_lock<redlock::Redlock> held(quorum, 2s);
    if (!held) {
      // Contention, and only that: a quorum of instances answered, but another holder kept
      // enough of them that no quorum granted it for the whole 2 s. Not an exception, and not a
      // reason to "steal" the key. Typical answers: back off and retry later, skip this run,
      // report busy.
      std::printf("busy: someone else held '%s' for the whole 2 s; try again later\n",
                  quorum.key().c_str());
      return 0;
    }
    // validity(): ttl - time the acquire took - drift allowance (ttl * 0.01 + 2 ms). It counts
    // down on the steady clock. Work that must be protected has to finish within it (or extend()
    // the lease, or use auto_renew: see long_job.cpp).
    std::printf("held after %lld ms; validity() = %lld ms of the %lld ms ttl\n", ms_since(asked),
                ms(quorum.validity()), ms(options.ttl));

    // Meanwhile a rival (another Redlock object, as another process would have) gives up after
    // its own timeout and gets `false`. Partial grants it collected were rolled back for it.
    redlock::Redlock rival(clients, "examples:quorum", options);
    const auto tried = Clock::now();
    const bool rival_got_it = rival.try_lock_for(300ms);
    std::printf("a rival's try_lock_for(300ms) -> %s after %lld ms\n",
                rival_got_it ? "true (unexpected!)" : "false", ms_since(tried));
    if (rival_got_it) return 1;

    std::this_thread::sleep_for(100ms);  // the critical section
    // Before a step that must not run unprotected, check the budget that is left.
    if (quorum.validity() < 1s) {
      std::printf("less than 1 s of validity left: not committing; the next holder redoes it\n");
      return 0;
    }
    std::printf("committing with %lld ms of validity left\n", ms(quorum.validity()));
  } catch (const redlock::QuorumUnavailableError& e) {
    // Fewer than quorum() instances answered for the whole wait: the attempt decided nothing
    // (what() names each silent node and why). Not held. Retry later, or alert: a majority of the
    // instances is down or unreachable from here.
    std::fprintf(stderr, "no quorum: fewer than %zu of %zu instances answered within 2 s: %s\n",
                 quorum.quorum(), quorum.size(), e.what());
    return kQuorumUnavailable;
  } catch (const redlock::Error& e) {
    // Anything else the servers or the connections said (an error reply such as NOPERM, ...).
    std::fprintf(stderr, "redlock error: %s\n", e.what());
    return 1;
  }
  std::printf("released\n");
  return 0;
}

// --self-test: five throwaway servers with one killed (a dead minority costs a log line; the lock
// is held), then three with two killed (one answering node is not a quorum: the attempt cannot
// decide, and says so with QuorumUnavailableError). Exit status 0 when both went as expected.
int self_test() {
  {
    example::ThrowawayServers servers(5);
    servers[4].kill9();
    std::printf("self-test: 5 throwaway servers, %s killed on purpose\n",
                servers.endpoints()[4].address().c_str());
    const int status = run(servers.endpoints());
    if (status != 0) return status;
  }
  example::ThrowawayServers servers(3);
  servers[1].kill9();
  servers[2].kill9();
  std::printf("\nself-test: 3 throwaway servers, 2 of them killed on purpose\n");
  const int status = run(servers.endpoints());
  if (status != kQuorumUnavailable) {
    std::fprintf(stderr, "self-test: with 1 of 3 up the run exited %d, expected %d\n", status,
                 kQuorumUnavailable);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> uris;
  bool self_testing = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--redis") == 0 && i + 1 < argc) {
      uris.emplace_back(argv[++i]);
    } else if (std::strcmp(argv[i], "--self-test") == 0) {
      self_testing = true;
    } else {
      std::fprintf(stderr, "usage: %s [--redis URI]... [--self-test]\n", argv[0]);
      return 2;
    }
  }
  if (uris.empty()) uris.emplace_back("redis://127.0.0.1:6379");
  try {
    if (self_testing) return self_test();
    std::vector<redlock::Endpoint> endpoints;
    for (const auto& uri : uris) endpoints.push_back(redlock::Endpoint::parse(uri));
    return run(endpoints);
  } catch (const std::exception& e) {  // a bad URI, two URIs for one server, a failed start
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
