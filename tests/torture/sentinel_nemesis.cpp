// tests/torture/sentinel_nemesis.cpp: see sentinel_nemesis.hpp.
#include "sentinel_nemesis.hpp"

#include <exception>

#include "common.hpp"

namespace redlock::torture {

namespace {
constexpr std::int64_t kMs = 1'000'000;
}  // namespace

SentinelNemesis::SentinelNemesis(test::SentinelSet& set, std::uint64_t seed, std::FILE* log)
    : TopologyNemesis(seed, 0x5e171e1ULL, log), set_(set) {
  next_inject_ = mono_ns() + uniform_ms(1000, 2000);
}

std::int64_t SentinelNemesis::step(std::int64_t now) {
  if (active_ != Kind::none && now >= heal_at_) heal(now);
  if (active_ == Kind::none && now >= next_inject_) inject(now);
  return active_ != Kind::none ? heal_at_ : next_inject_;
}

void SentinelNemesis::inject(std::int64_t now) {
  try {
    const std::size_t master = set_.master_index();
    const int pick = static_cast<int>(std::uniform_int_distribution<int>(0, 2)(rng_));
    if (pick == 0) {
      std::string why;
      if (!set_.request_failover(why)) {
        problems_.push_back("SENTINEL FAILOVER refused: " + why);
        next_inject_ = now + uniform_ms(500, 1000);
        return;
      }
      ++injected_["failover"];
      note("failover requested (master was data node " + std::to_string(master) + ")");
      next_inject_ = now + uniform_ms(5000, 7000);
    } else if (pick == 1) {
      set_.data(master).kill9();
      ++injected_["kill_master"];
      active_ = Kind::kill_master;
      node_ = master;
      heal_at_ = now + uniform_ms(1000, 2000);
      note("kill -9 of the master, data node " + std::to_string(master));
    } else {
      node_ = (master + 1 + static_cast<std::size_t>(uniform_ms(0, 1) / kMs)) % set_.data_count();
      set_.data(node_).pause();
      ++injected_["pause_replica"];
      active_ = Kind::pause_replica;
      heal_at_ = now + uniform_ms(300, 1500);
      note("SIGSTOP of replica, data node " + std::to_string(node_));
    }
  } catch (const std::exception& e) {
    problems_.push_back(std::string("inject: ") + e.what());
    next_inject_ = now + uniform_ms(500, 1000);
  }
}

void SentinelNemesis::heal(std::int64_t now) {
  try {
    if (active_ == Kind::kill_master) {
      set_.data(node_).restart();  // its AOF has every acknowledged write
      note("restarted data node " + std::to_string(node_));
      next_inject_ = now + uniform_ms(4000, 6000);  // the sentinels demote it meanwhile
    } else {
      set_.data(node_).resume();
      note("SIGCONT of data node " + std::to_string(node_));
      next_inject_ = now + uniform_ms(2000, 4000);
    }
    active_ = Kind::none;
  } catch (const std::exception& e) {
    problems_.push_back(std::string("heal: ") + e.what());
    heal_at_ = now + 500 * kMs;
  }
}

void SentinelNemesis::heal_all() {
  if (active_ != Kind::none) heal(mono_ns());
}

}  // namespace redlock::torture
