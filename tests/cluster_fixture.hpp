// tests/cluster_fixture.hpp: what the [cluster] test files share: one cluster for the whole
// run (creating one takes seconds; a case that changes its shape leaves it usable, and every
// case asks masters() and replica_of() afresh), lock options, and probes of a node that answer
// for an importing slot too.
#ifndef REDLOCK_TESTS_CLUSTER_FIXTURE_HPP
#define REDLOCK_TESTS_CLUSTER_FIXTURE_HPP

#include <chrono>
#include <cstddef>
#include <string>

#include <redlock/redlock.hpp>

#include "support/redis_cluster.hpp"

namespace redlock::test {

// Inline: one instance across the test files.
inline RedisCluster& shared_cluster() {
  static RedisCluster cluster;
  return cluster;
}

inline redlock::LockOptions cluster_options(
    std::chrono::milliseconds ttl = std::chrono::seconds(10)) {
  redlock::LockOptions o;
  o.ttl = ttl;
  o.fencing = true;
  return o;
}

// Whether `k` is on `node` (ASKING first: an importing node answers for the slot it imports).
inline bool on_node(RedisCluster& cluster, std::size_t node, const std::string& k) {
  return cluster.node(node).raw_pipeline({{"ASKING"}, {"EXISTS", k}}).at(1).integer() == 1;
}

inline long long pttl(RedisCluster& cluster, std::size_t node, const std::string& k) {
  return cluster.node(node).raw_pipeline({{"ASKING"}, {"PTTL", k}}).at(1).integer();
}

}  // namespace redlock::test

#endif  // REDLOCK_TESTS_CLUSTER_FIXTURE_HPP
