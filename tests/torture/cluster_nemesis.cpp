// tests/torture/cluster_nemesis.cpp: see cluster_nemesis.hpp.
#include "cluster_nemesis.hpp"

#include <exception>

#include "common.hpp"

namespace redlock::torture {

namespace {
constexpr std::int64_t kMs = 1'000'000;
}  // namespace

ClusterNemesis::ClusterNemesis(test::RedisCluster& cluster, std::uint64_t seed, std::FILE* log)
    : TopologyNemesis(seed, 0xc1a57e7ULL, log),
      cluster_(cluster),
      slot_(cluster.keyslot(kLockKey)) {
  next_inject_ = mono_ns() + uniform_ms(1000, 2000);
}

std::int64_t ClusterNemesis::step(std::int64_t now) {
  if (killed_ && now >= heal_at_) heal(now);
  if (!killed_ && now >= next_inject_) inject(now);
  return killed_ ? heal_at_ : next_inject_;
}

void ClusterNemesis::migrate(std::size_t owner) {
  std::size_t to = owner;
  for (std::size_t m : cluster_.masters()) {
    if (m != owner) to = m;
  }
  cluster_.migrate_slot(slot_, to);
  ++injected_["migrate_slot"];
  note("slot " + std::to_string(slot_) + " migrated from node " + std::to_string(owner) +
       " to node " + std::to_string(to));
}

void ClusterNemesis::inject(std::int64_t now) {
  try {
    const std::size_t owner = cluster_.owner(slot_);
    const int pick = static_cast<int>(std::uniform_int_distribution<int>(0, 2)(rng_));
    if (pick == 0) {
      migrate(owner);
      next_inject_ = now + uniform_ms(2000, 4000);
    } else if (pick == 1) {
      const std::size_t replica = cluster_.replica_of(owner);
      cluster_.failover(replica, std::chrono::seconds(10));
      ++injected_["failover"];
      note("CLUSTER FAILOVER on node " + std::to_string(replica) + " (replica of node " +
           std::to_string(owner) + ")");
      next_inject_ = now + uniform_ms(3000, 5000);
    } else {
      cluster_.node(owner).kill9();
      ++injected_["kill_master"];
      killed_ = true;
      node_ = owner;
      heal_at_ = now + uniform_ms(3000, 4000);
      note("kill -9 of the slot's master, node " + std::to_string(owner));
    }
  } catch (const std::exception& e) {
    problems_.push_back(std::string("inject: ") + e.what());
    next_inject_ = now + uniform_ms(1000, 2000);
  }
}

void ClusterNemesis::heal(std::int64_t now) {
  try {
    cluster_.node(node_).restart();  // empty: it rejoins as the replica of the promoted one
    cluster_.await_ok(std::chrono::seconds(20));
    note("restarted node " + std::to_string(node_));
    next_inject_ = now + uniform_ms(3000, 5000);
    killed_ = false;
  } catch (const std::exception& e) {
    problems_.push_back(std::string("heal: ") + e.what());
    heal_at_ = now + 1000 * kMs;
  }
}

void ClusterNemesis::heal_all() {
  if (killed_) heal(mono_ns());
}

}  // namespace redlock::torture
