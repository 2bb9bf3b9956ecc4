// tests/torture/zookeeper_nemesis.cpp: see zookeeper_nemesis.hpp.
#include "zookeeper_nemesis.hpp"

#include <exception>

#include "common.hpp"

namespace redlock::torture {

namespace {
constexpr std::int64_t kMs = 1'000'000;

void log_line(std::FILE* log, const std::string& what) {
  if (log == nullptr) return;
  std::fprintf(log, "%lld %s\n", static_cast<long long>(mono_ns()), what.c_str());
  std::fflush(log);
}
}  // namespace

ZooKeeperNemesis::ZooKeeperNemesis(test::ZooKeeperServer& server, std::uint64_t seed,
                                   std::FILE* log)
    : server_(server), rng_(seed ^ 0x200cee9e5ULL), log_(log) {
  next_inject_ = mono_ns() + uniform_ms(1000, 2000);
}

std::int64_t ZooKeeperNemesis::uniform_ms(int lo, int hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_) * kMs;
}

std::int64_t ZooKeeperNemesis::step(std::int64_t now) {
  if (active_ != Kind::none && now >= heal_at_) heal(now);
  if (active_ == Kind::none && now >= next_inject_) inject(now);
  return active_ != Kind::none ? heal_at_ : next_inject_;
}

void ZooKeeperNemesis::inject(std::int64_t now) {
  try {
    if (std::uniform_int_distribution<int>(0, 1)(rng_) == 0) {
      server_.pause();
      ++injected_["pause"];
      active_ = Kind::pause;
      heal_at_ = now + uniform_ms(300, 3500);
      log_line(log_, "SIGSTOP of the server");
    } else {
      server_.kill9();
      ++injected_["kill_restart"];
      active_ = Kind::kill_restart;
      heal_at_ = now + uniform_ms(100, 1000);
      log_line(log_, "kill -9 of the server");
    }
  } catch (const std::exception& e) {
    problems_.push_back(std::string("inject: ") + e.what());
    next_inject_ = now + uniform_ms(500, 1000);
  }
}

void ZooKeeperNemesis::heal(std::int64_t now) {
  try {
    if (active_ == Kind::kill_restart) {
      server_.restart();  // the same data dir: every acknowledged write is there
      log_line(log_, "restarted the server");
    } else {
      server_.resume();
      log_line(log_, "SIGCONT of the server");
    }
    active_ = Kind::none;
    // From the end of the heal: a restart blocks until the JVM listens (about 2 s here), and
    // counting from `now` let the next kill come 40 ms after it, so a 10 s run saw no service.
    next_inject_ = mono_ns() + uniform_ms(1000, 3000);
  } catch (const std::exception& e) {
    problems_.push_back(std::string("heal: ") + e.what());
    heal_at_ = now + 500 * kMs;
  }
}

void ZooKeeperNemesis::heal_all() {
  if (active_ != Kind::none) heal(mono_ns());
}

}  // namespace redlock::torture
