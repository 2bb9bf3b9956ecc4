// examples/support/throwaway_cluster.hpp: a throwaway Redis Cluster for the demo: six
// ThrowawayServers with cluster-enabled yes (cluster-node-timeout 1000), joined by
// `redis-cli --cluster create ... --cluster-replicas 1` into three masters with a replica each.
//
//   example::ThrowawayCluster cluster;
//   redlock::Client client(cluster.uri());               // redis-cluster://...
//   cluster.migrate_slot(cluster.keyslot("k"), to);       // IMPORTING/MIGRATING, MIGRATE, NODE
//   cluster.failover(cluster.replica_of(master), why);    // CLUSTER FAILOVER on the replica
#ifndef REDLOCK_EXAMPLES_SUPPORT_THROWAWAY_CLUSTER_HPP
#define REDLOCK_EXAMPLES_SUPPORT_THROWAWAY_CLUSTER_HPP

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint16_t
#include <memory>   // std::unique_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include "throwaway_servers.hpp"

namespace example {

class ThrowawayCluster {
 public:
  // Starts everything and waits (up to about 30 s) for cluster_state:ok on every node and the
  // replicas in sync. Throws std::runtime_error naming what did not come up.
  ThrowawayCluster();
  // Stops every server and removes the nodes' config directory. Never throws.
  ~ThrowawayCluster();
  ThrowawayCluster(const ThrowawayCluster&) = delete;
  ThrowawayCluster& operator=(const ThrowawayCluster&) = delete;

  // redis-cluster://127.0.0.1:<port>,... naming every node.
  std::string uri() const;
  ThrowawayServer& node(std::size_t i) { return *nodes_.at(i); }
  // CLUSTER KEYSLOT as the server computes it.
  std::uint16_t keyslot(const std::string& key) const;
  // The node that owns `slot` (CLUSTER SLOTS of the first node that answers).
  std::size_t owner(std::uint16_t slot) const;
  // The masters that own slots.
  std::vector<std::size_t> masters() const;
  // The replica of master `master`. Throws std::runtime_error if it has none.
  std::size_t replica_of(std::size_t master) const;
  // Moves `slot` to master `to` with its keys. Throws std::runtime_error (or redlock::Error).
  void migrate_slot(std::uint16_t slot, std::size_t to);
  // CLUSTER FAILOVER on `replica`; false with the node's answer in `why` if it refused.
  bool failover(std::size_t replica, std::string& why);

 private:
  std::string dir_;  // the nodes' cluster config files
  std::vector<std::unique_ptr<ThrowawayServer>> nodes_;
};

}  // namespace example

#endif  // REDLOCK_EXAMPLES_SUPPORT_THROWAWAY_CLUSTER_HPP
